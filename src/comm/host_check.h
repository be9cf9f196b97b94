/* host_check.h — what the machine gives the communicator, said once at start-up.
 *
 * Two things a job cannot see from its speed alone (issue 27: dp8 ran 27 % slower with single copy off, and nothing
 * said so):
 *   - single copy. Open MPI moves a large message between two processes of one host with one copy, reading the
 *     sender's memory with process_vm_readv (Linux's cross-memory attach, CMA). The kernel allows it only where the
 *     reader may ptrace the sender: a container without CAP_SYS_PTRACE (Docker's default seccomp profile), or Yama's
 *     kernel.yama.ptrace_scope >= 1 between sibling processes, refuses it, and Open MPI then goes through its shared
 *     segments with two copies (or fails with "Read -1, expected ..., errno = 1"). Probed for real: the first two
 *     ranks of each host try a process_vm_readv of a few bytes of each other's memory.
 *   - /dev/shm. The segments of Open MPI's shared-memory transport and of llm4d's shared-memory collectives
 *     (comm_shm.h) live there; Docker gives a container 64 MB. A group whose segment did not fit has fallen back to
 *     MPI (its path line says so); here the job is told when less than LLM4D_SHM_LOW_BYTES are left, which the next
 *     segment (a larger job, Open MPI's own) may need.
 * Each problem is one line at start-up (world rank 0, naming the hosts), with its consequence and its remedy. */
#ifndef LLM4D_COMM_HOST_CHECK_H
#define LLM4D_COMM_HOST_CHECK_H

#include "comm/comm.h"
#include "core/log.h"

#define LLM4D_SHM_LOW_BYTES ((int64_t)64 << 20)

/* Collective over c: *local = the ranks of c on this host (by host name), ordered as in c, a raw communicator of
 * c's backend (no watch, no path; llm4d_comm_destroy it). *same = 0 when two hosts' names hash alike (then local
 * holds ranks of several hosts: treat the group as spanning hosts). */
llm4d_code llm4d_host_split(llm4d_comm *c, llm4d_comm **local, int *same, llm4d_err *err);

/* Collective over world. Writes the lines it found (none: nothing to say) to log on world rank 0; *problems counts
 * them (every rank). */
llm4d_code llm4d_host_check(llm4d_comm *world, const llm4d_log *log, int *problems, llm4d_err *err);

#endif
