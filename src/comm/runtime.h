/* runtime.h — starting and ending the distributed runtime of one llm4d process.
 *
 * llm4d_runtime_init decides whether this process is part of an MPI job: it is when an MPI launcher started it,
 * which the launcher's environment shows (OMPI_COMM_WORLD_SIZE from Open MPI's mpirun, PMIX_RANK from any PMIx
 * launcher, PMI_RANK from MPICH/Slurm). Then it calls MPI_Init_thread asking for MPI_THREAD_FUNNELED — OpenMP
 * threads run kernels but only the main thread ever calls MPI, which is all FUNNELED allows and all we need —
 * and makes the world communicator over MPI. Otherwise MPI is never touched: the world is the `self`
 * communicator of one process, so `llm4d train` on a laptop needs no mpirun and no MPI daemon.
 *
 * Errors. A user-input check that fails on one rank must end the job, not leave the other ranks waiting forever
 * in their next collective. llm4d_runtime_fail prints the message (prefixed with the rank when there are
 * several) and, in a job of more than one process, calls MPI_Abort(MPI_COMM_WORLD, code): Open MPI's mpirun then
 * kills every rank and itself exits with that code (2 for a user error), which `llm4d launch` passes on. In a job
 * of one it finalizes MPI if needed and returns the code for main to return. Because it aborts, it is for errors
 * only — a rank that succeeds returns normally and calls llm4d_runtime_finalize. Every rank typically fails the
 * same config check at the same time; each prints the message and the first abort wins, which is harmless. */
#ifndef LLM4D_COMM_RUNTIME_H
#define LLM4D_COMM_RUNTIME_H

#include "core/error.h"
#include "comm/comm.h"

typedef struct {
    int under_mpi;      /* 1 when MPI was initialised by llm4d_runtime_init */
    int thread_level;   /* what MPI_Init_thread provided (MPI_THREAD_*), 0 without MPI */
    int world_size;
    int rank;
    llm4d_comm *world;  /* mpi or self; owned by the runtime */
    llm4d_comm_watch watch; /* the communication watchdog every group shares (off until a timeout is set) */
} llm4d_runtime;

/* 1 when the environment shows that an MPI launcher started this process. */
int llm4d_runtime_launched_by_mpi(void);

/* argc/argv may be NULL (MPI-3 allows it). Fails (LLM4D_EINTERNAL) when MPI cannot start or provides less than
 * MPI_THREAD_FUNNELED. In a job of several processes the watchdog's progress board goes to LLM4D_PROGRESS_DIR
 * when set (llm4d launch sets it to its log directory). The runtime must not move after init (its communicators
 * point to its watch). */
llm4d_code llm4d_runtime_init(llm4d_runtime *rt, int *argc, char ***argv, llm4d_err *err);

/* Frees the world communicator and finalizes MPI. Destroy every group communicator (llm4d_comm_groups_destroy)
 * before calling this. */
void llm4d_runtime_finalize(llm4d_runtime *rt);

/* The exit code of an error: 2 for user and I/O errors (docs/design.md), 1 otherwise. */
int llm4d_exit_code(llm4d_code code);

/* Prints the error line on stderr; in a job of several processes
 * it then aborts the whole job with llm4d_exit_code(err->code) and does not return; alone it finalizes and
 * returns that code. rt may be NULL (before init: just prints and returns the code). */
/* verb: the verb that ran ("train"), for a job of one process's line `llm4d <verb>: <message>` (cli/cli.h); NULL:
 * `llm4d: <message>`. A job of several says `llm4d: rank R: <message>` whatever the verb. */
int llm4d_runtime_fail(llm4d_runtime *rt, const char *verb, const llm4d_err *err);

#endif
