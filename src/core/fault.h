/* fault.h — fault injection for the tests: which operation fails, with which error, read once from the environment.
 *
 * A checkpoint save must survive every way the disk can fail (issue 15: a save that fails leaves the previous
 * checkpoint as `latest`, loads cleanly after, and stops the run with one line naming the path and the error).
 * Real disks fail rarely and never on cue, so the tests make them fail on cue, SQLite-style, at every operation in
 * turn:
 *
 *   LLM4D_FAULT=<error>[:<op>]@<N>   the N-th operation of kind <op> (1-based) fails with <error>
 *     <error>  enospc (disk full), eio (write error), eacces (permission lost), erofs, edquot
 *     <op>     write (a write(2) of file data; the default for enospc, eio, edquot), fsync (a file's or a directory's;
 *              eio's classic), create (creating a file or directory; the default for eacces and erofs),
 *              rename (publishing a name)
 *   LLM4D_FAULT=collective@<K>       the first collective operation of training step K fails (comm/comm.c)
 *   LLM4D_FAULT=cma@1                start-up's probe of single-copy transfers between the ranks of a host fails
 *                                    with EPERM, as in a container without ptrace permission (comm/host_check.c)
 *   LLM4D_FAULT=shmshare@1           moving a buffer into shared memory in place (comm/shm_share.c: the data-parallel
 *                                    gradients) fails with ENOSPC, as where /dev/shm is too small for it
 *   LLM4D_FAULT=bf16slow@1           the CPU backend's measurement of its bf16 GEMMs against its fp32 ones (backend/cpu.c
 *                                    set_precision) reads bf16 as the slower, as on a CPU whose AVX512-BF16 kernels
 *                                    are (an Intel Xeon VM without AMX: issue 42)
 *   LLM4D_FAULT=bf16fast@1           the same measurement reads bf16 as the faster whatever it measured (a test that
 *                                    compares two backends of one process must not see them choose differently on
 *                                    a loaded machine)
 *   LLM4D_FAULT_RANK=<r>             only rank r injects (default: every rank)
 *
 * Each checkpoint save counts its own operations from 1 (store_save.c keeps an llm4d_fault in its saver and the file
 * layer, core/fs.h, counts through it), so "enospc@7" fails the 7th write of every save the process makes; a test
 * loops N = 1, 2, ... until the save succeeds to cover every write. An injected failure looks exactly like the real
 * one (the same errno reaches the same code), which is the point. The state is an explicit value owned by whoever
 * counts; the communicator's is in the process's watch (comm/watch.h), which every group shares and which knows the
 * training step. */
#ifndef LLM4D_CORE_FAULT_H
#define LLM4D_CORE_FAULT_H

#include "core/error.h"

typedef enum {
    LLM4D_FAULT_NONE = 0,
    LLM4D_FAULT_WRITE,
    LLM4D_FAULT_FSYNC,
    LLM4D_FAULT_CREATE,
    LLM4D_FAULT_RENAME,
    LLM4D_FAULT_COLLECTIVE,
    LLM4D_FAULT_CMA,
    LLM4D_FAULT_SHMSHARE,
    LLM4D_FAULT_BF16SLOW,
    LLM4D_FAULT_BF16FAST,
    LLM4D_FAULT_CRASH, /* crash@STEP: the rank kills itself (SIGKILL) at its first collective of step STEP */
} llm4d_fault_op;

typedef struct {
    llm4d_fault_op op;  /* the kind of operation counted; NONE: no injection */
    int error;          /* the errno a failing file operation gets */
    long long at;       /* fail the at-th operation (1-based), or the first collective of step `at` */
    long long count;    /* operations counted so far */
    char spec[64];      /* LLM4D_FAULT as given, for messages */
} llm4d_fault;

/* Read LLM4D_FAULT and LLM4D_FAULT_RANK for the process of rank `rank` into *f (op NONE when unset, or when
 * LLM4D_FAULT_RANK names another rank). A malformed value is a user error naming it and the accepted forms. */
llm4d_code llm4d_fault_from_env(llm4d_fault *f, int rank, llm4d_err *err);

/* Count one file operation of kind op (f may be NULL: nothing is injected). Returns the errno it must fail with,
 * or 0 to let it run. */
int llm4d_fault_hit(llm4d_fault *f, llm4d_fault_op op);

#endif
