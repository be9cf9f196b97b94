/* comm_shm.h — collectives through shared memory for the ranks of one host, hierarchical across hosts.
 *
 * Open MPI moves a gradient between two processes of one host at 1-2 GB/s (issue 27: 0.5-1.2 GB/s per rank on a
 * 16-core Xeon), an order of magnitude below what one core's memcpy does. This path reduces in a POSIX shared
 * segment the host's ranks all map, every rank reducing its own slice with vector adds, so a sum costs a few copies
 * at memory speed. It is a second method table beside the group's MPI one (comm.h: a group's `path`): comm.c routes
 * to it the collectives it takes (llm4d_shm_takes: sums of fp32 and bf16, all-reduce, reduce-scatter, all-gather)
 * and everything else (other types, maxima, broadcast, point to point, barriers, splitting) stays on MPI, which
 * also starts the ranks and makes the groups.
 *
 * The segment (one per group and host, created by the host's first rank of the group, named after its pid and a
 * counter, mapped by the others, then unlinked so nothing outlives the job): a header with one cache line per rank
 * holding a counter of the phases that rank has finished, then per rank two slots of `slot_bytes` (double
 * buffering). A collective runs in chunks that fit a slot; every chunk is one phase: each rank copies what its peers
 * need into its slot, publishes its counter (a release store) and waits until every peer's counter has reached the
 * same value (acquire loads); then it reads the peers' slots. Chunk k uses slot k mod 2: a rank writing chunk k + 2
 * has passed the phase of chunk k + 1, which every rank enters only after it has finished reading chunk k, so two
 * slots are enough and no second barrier per chunk is needed.
 *
 * The algorithms, on n ranks of a host, for a buffer cut into n slices (all-reduce: ceil(count / n) elements
 * rounded up to 64 bytes, the last ones shorter or empty; reduce-scatter: the n blocks of the input):
 *   reduce-scatter  each rank copies the pieces of the slices of its peers into its slot; rank r sums slice r over
 *                   ranks 0, 1, ..., n-1 in that order (its own piece read from its own buffer), fp32 accumulation
 *                   (bf16: each element rounded once, at the end), into its output;
 *   all-gather      each rank copies its block into its slot; every rank copies the others' blocks out;
 *   all-reduce      reduce-scatter in place, then all-gather of the slices: every rank gets the same bits (each
 *                   slice is summed once, by its owner). Small buffers (<= 16 KiB) take one phase instead: each rank
 *                   copies the whole buffer in and sums every element itself, in the same rank order.
 *   all-reduce over shared buffers (shm_share.h: the host's ranks' buffers mapped by all, as the data-parallel
 *                   gradients are): every rank arrives (a phase, and which operation, range and type it entered,
 *                   which the peers check); rank r sums slice r of every rank's buffer, in rank order, writing the
 *                   sums into all of them in the same pass; every rank arrives again, and then every buffer holds the
 *                   whole sum. Per rank a read and a write of B bytes (what one memcpy of the buffer moves), no slot.
 * So the results are the plain sum in rank order, bit for bit, whatever the chunking. Memory traffic per rank for an
 * all-reduce of B bytes on one host: reads (1 + 2 (n-1)/n) B and writes 2 B (the peers' pieces copied in, the own
 * piece's n inputs read and its sum written to the slot and to the buffer in the same pass, the peers' sums copied
 * out), with the chunk just written by one core read by the others while it is still in the caches.
 *
 * Across hosts (a group whose ranks are on H > 1 hosts, the same number on each): the all-reduce is hierarchical.
 * The host's ranks reduce-scatter through the segment, rank r of each host all-reduces its slice with rank r of every
 * other host over MPI (so each link carries 1/n of the buffer, and every rank of a host uses the network at once),
 * then they all-gather through the segment. Reduce-scatter and all-gather over several hosts stay on MPI. A group
 * whose hosts hold different numbers of its ranks, or whose segment cannot be made (/dev/shm full or missing), stays
 * on MPI: llm4d_shm_attach says why in the group's `path_desc`, which the trainer prints at start-up.
 *
 * Progress. An operation is a state machine queued on its group (operations run in the order they were started,
 * which MPI's rules make the same on every rank). Nothing advances it but calls into the communicator: starting one,
 * llm4d_comm_test / wait / progress on any request, and every wait of comm.c, which advances every queue of the
 * process (llm4d_shm_progress_all) so that no rank can sit in a wait while a peer waits for its part of another
 * operation. An advance does every copy and sum it can without waiting for a peer and returns at the first phase
 * whose peers are not there yet: the engines call llm4d_comm_progress from the model's hooks, between layers, so a
 * bucket's reduction moves on while backward computes. A peer that never arrives leaves the waiter in comm.c's
 * watched wait, which ends the job at the deadline with the watchdog's line (watch.h).
 *
 * With comm_progress thread, a thread of the process moves the queues instead (progress_main), so that a reduction
 * goes on while the rank computes where a core is free for it; the main thread then moves them only while it waits,
 * and runs the cross-host phase, the only MPI call (MPI_THREAD_FUNNELED, runtime.h). The queues are the hub's lock's;
 * the thread holds it for one step (a chunk) at a time, and a test finding it held answers "not yet" rather than wait
 * behind a copy. Which of the two pays on a machine is a measurement (none yet: on 2 cores busy with 2 ranks, no
 * core is free for the thread).
 *
 * Threads: with more than one OpenMP thread per rank, the main thread splits the copies and sums of a chunk over
 * them. */
#ifndef LLM4D_COMM_SHM_H
#define LLM4D_COMM_SHM_H

#include <stddef.h>

#include "comm/comm.h"

/* What the job asked for (config: Distributed.comm_path). */
typedef struct {
    int enabled;        /* 0: every group on MPI */
    size_t slot_bytes;  /* one slot of one rank (a chunk); 0: the default (LLM4D_SHM_SLOT_BYTES) */
    int progress_thread; /* comm_progress thread: a thread per process moves the queues (see Progress above) */
} llm4d_shm_opts;

/* 1 MiB per slot: a chunk and its peers' copies stay in the caches of the cores that pass it on (measured with
 * bench/bench_comm.sh; README). */
#define LLM4D_SHM_SLOT_BYTES ((size_t)1 << 20)
/* The segment's alignment of pieces and flags (a cache line), and the largest all-reduce that runs in one phase
 * (each rank copies the whole buffer in and sums every element itself). */
#define LLM4D_SHM_LINE 64
#define LLM4D_SHM_SMALL_BYTES ((size_t)16 << 10)
/* Most ranks of one group on one host the path takes (a sum reads one pointer per rank). */
#define LLM4D_SHM_MAX_RANKS 64

/* The process's state of the path: the queues it drives (every group's), shared by the groups split from the
 * world like the watch (comm.h: hub), owned by the world. */
typedef struct llm4d_shm_hub llm4d_shm_hub;

llm4d_code llm4d_shm_hub_create(llm4d_shm_hub **out, const llm4d_shm_opts *o, llm4d_err *err);
void llm4d_shm_hub_destroy(llm4d_shm_hub *h); /* after every group using it is detached */

/* Collective over c: choose c's path (a segment with the other ranks of this host, maybe a cross-host group) and
 * write the choice, or why not, into c->path_desc. A failure to set the path up is not an error (the group stays
 * on MPI and says why); only a failing MPI call is. */
llm4d_code llm4d_shm_attach(llm4d_comm *c, llm4d_shm_hub *h, llm4d_err *err);
/* Unmaps c's segment and frees its path (its operations must have completed). */
void llm4d_shm_detach(llm4d_comm *c);

/* Whether c's path carries this operation (comm.c routes by it). */
int llm4d_shm_takes(const llm4d_comm *c, llm4d_comm_op op, llm4d_comm_dtype dt, llm4d_comm_reduction red,
                    size_t count);

/* Advances the operations queued on every group of the hub as far as they go without waiting for a peer. waiting:
 * the caller is blocked in a wait (with the progress thread, only then does the calling thread move them too). */
llm4d_code llm4d_shm_progress_all(llm4d_shm_hub *h, int waiting, llm4d_err *err);
/* Operations started and not yet completed on every group of the hub. */
int llm4d_shm_pending(llm4d_shm_hub *h);

/* Collective over c: whether no rank has a reason not to (why empty on every rank), the same answer everywhere, so
 * that a path or a shared buffer is taken by the whole group or by none. */
llm4d_code llm4d_shm_agree(llm4d_comm *c, const char *why, int *all_ok, llm4d_err *err);
/* MiB free in /dev/shm (-1: unknown), for the line saying a segment or buffer does not fit there. */
double llm4d_shm_free_mib(void);

/* Buffers shared in place (shm_share.h), collective over c: buf (bytes: whole pages, page-aligned, the same size on
 * every rank) is moved into shared memory where it is and mapped by the host's peers; an all-reduce of a range of it
 * (the same range on every rank) then sums the buffers directly. *shared: 1 on every rank, or 0 on every rank with
 * why saying why not (the group not on this path or spanning hosts, /dev/shm too small, ...). Only a failing MPI
 * call is an error. */
llm4d_code llm4d_shm_share(llm4d_comm *c, void *buf, size_t bytes, int *shared, char *why, size_t why_n,
                           llm4d_err *err);
/* buf back to private memory (its contents kept), before its owner frees it; no all-reduce on it may be pending.
 * Local; a buffer not shared, or c not on the path: nothing. llm4d_shm_detach gives back those still shared. */
void llm4d_shm_unshare(llm4d_comm *c, void *buf);

/* c's ranks on this host when its collectives go through a segment, else 0; *hosts (if not NULL): the hosts it
 * spans (0 when not on the path). */
int llm4d_shm_host_ranks(const llm4d_comm *c, int *hosts);
/* Bytes of a segment's header for n ranks (whole pages). */
size_t llm4d_shm_head_bytes(int n);

/* What a group's collectives ask of its segment, for the memory plan (plan/memplan.c): its largest all-reduce and
 * the largest block of its reduce-scatters and all-gathers, in bytes (0: none of that kind). */
typedef struct {
    size_t allreduce, rs_block, ag_block;
} llm4d_shm_use;
/* Bytes of the segment of a group of n ranks on this host (slot_bytes per slot; 0: the default) one of its ranks
 * makes resident by the collectives in use: the pages it writes or reads, which the kernel counts in its resident
 * set (shm_footprint.c). */
size_t llm4d_shm_resident(int n, size_t slot_bytes, llm4d_shm_use use);

/* The method table of the path (the operations llm4d_shm_takes accepts, test and wait). */
extern const llm4d_comm_ops llm4d_shm_ops;

#endif
