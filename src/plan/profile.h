/* profile.h — a machine profile: what one machine was measured to do (`llm4d plan --calibrate`, plan/calibrate.c)
 * or what a published machine is said to do (a file written by hand), in the units the planner prices a layout in.
 *
 *   kernels      seconds of a backend method at given sizes and element types (a recorded call's cost key:
 *                plan/record.h), threads per rank and matmul precision, split by the backend's own kinds of work
 *                (backend.h llm4d_work: a bf16 linear layer's operand conversion counts as "convert", as the
 *                trainer reports it);
 *   collectives  seconds of each collective by kind, group size, the job's ranks on the host at the time (every
 *                group of that size busy at once, as in a layout), hosts spanned and bytes, and the memory the
 *                collective library allocated for it on the group's first rank, its other even ones and its odd ones;
 *   process      the resident memory of a rank before it allocates its model (libraries, MPI, the runtime) by ranks
 *                on the host, and what a training process holds beyond its memory plan (allocator arenas, the
 *                library's generated code);
 *   shares       how much slower each kind of work runs when k ranks of t threads share the host (memory bandwidth,
 *                caches), what fraction of a background collective's time a computing rank hides, and the
 *                processor time a blocking wait burns while a peer is descheduled;
 *   fallback     rates for what was not measured: GEMM and attention GFLOP/s, memory GB/s (by threads), a
 *                kernel's fixed cost; collective latency and bandwidth within and across hosts; the disk's GB/s
 *                (offload). A published profile has only these, and may add a GPU's GEMM time by shape
 *                ("gemm_shape": plan/gemm_shape.h), which prices the GEMMs the fallback rate would;
 *   calibration  (a measured profile) whether its calibration ran to the end, the setup its jobs measured (a
 *                re-run with the same setup continues it: plan/calibrate.h), the configurations its kernels were
 *                measured for (named when it cannot price another: plan/coverage.h) and the parts left unmeasured;
 *                a machine calibration adds "machine_grid" (the grid of shapes its kernels span: plan/grid.h).
 * The file is JSON; a missing or garbled one is a user error naming the file and the fix. */
#ifndef LLM4D_PLAN_PROFILE_H
#define LLM4D_PLAN_PROFILE_H

#include <stdint.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "core/error.h"
#include "plan/gemm_shape.h"
#include "plan/record.h"

#define LLM4D_PROF_MAXT 64     /* threads per rank the tables go up to */
#define LLM4D_PROF_SIZES 24    /* message sizes per collective entry */

typedef struct {
    uint16_t op;
    uint8_t drop, prec;
    uint16_t ty;               /* the call's element types (llm4d_rc_call.ty; 0: all fp32) */
    int threads;
    int64_t d[LLM4D_RC_DIMS];
    double s[LLM4D_WORK_N];    /* seconds by kind of work */
} llm4d_prof_kernel;

/* A collective of the profile beyond llm4d_comm_op's: an all-reduce over buffers shared in place with the host's
 * ranks (comm/shm_share.h), as the data-parallel gradients are reduced on a CPU host. A profile without it (a
 * device's, or one calibrated before it existed) prices those as plain all-reduces. */
#define LLM4D_PROF_AR_SHARED LLM4D_COMM_NOPS

typedef struct {
    int op;                    /* llm4d_comm_op: ALLREDUCE, REDUCE_SCATTER, ALLGATHER, SEND (one message each way
                                * between neighbours, as a pipeline sends); or LLM4D_PROF_AR_SHARED */
    int group, ranks_on_host, hosts;
    int n;
    double bytes[LLM4D_PROF_SIZES];     /* the whole buffer (all-reduce: the buffer; reduce-scatter: the input;
                                         * all-gather: the output; send: the message) */
    double seconds[LLM4D_PROF_SIZES];
    /* bytes the library allocated on the group's first rank, on its other even ranks and on its odd ranks (Open
     * MPI's binomial trees leave the odd ones, their leaves, without: gpt2-tiny's 12.9 MB all-reduce over 16 ranks
     * took 14 MiB on every even rank, none on the odd ones) */
    double temp_first[LLM4D_PROF_SIZES], temp_other[LLM4D_PROF_SIZES], temp_odd[LLM4D_PROF_SIZES];
} llm4d_prof_coll;

typedef struct {
    int threads, ranks;        /* ranks of `threads` threads computing at once on a host */
    double factor[LLM4D_WORK_N]; /* time over the time alone, by kind */
} llm4d_prof_share;

typedef struct {
    char name[128], cpu[128], device[32], when[64];
    int cores;                 /* per host */
    double memory_bytes;       /* per host */
    double memory_per_rank_bytes; /* one rank's own device memory where ranks do not share the host's (a GPU's:
                                   * "memory_per_rank_bytes"); 0 (absent: a CPU host, whose calibration writes
                                   * none): the ranks share memory_bytes */
    double load;               /* the load average when it was measured (a busy machine measures slow) */
    /* process */
    int n_base;
    int base_ranks[64];
    double base_bytes[64];     /* resident before the model, by ranks on the host */
    double residual_bytes;     /* what a training process holds beyond its plan (the libraries' working set of a
                                * step included: plan/memplan.h), its data index and the base; may be negative */
    int n_residue;             /* 2: a machine calibration's residues of two model sizes ("residual_points": [plan
                                * bytes, residue] each, the smaller plan first); 0: residual_bytes for any model */
    double residue_plan[2], residue_at[2];
    /* shares */
    int n_share;
    llm4d_prof_share share[64];
    double overlap;            /* fraction of a background collective's time hidden behind computing */
    double oversub_penalty;    /* extra slowdown per thread beyond the cores, when threads per rank > 1 */
    int grads_reset;           /* the backend measured starts gradients over without zeroing them (backend.h
                                * grads_reset), so a step's update does not zero them; 0 (a profile written before,
                                * or a GPU's: the CUDA backend zeroes): the update's pass zeroes them */
    double wait_cpu_s;         /* processor seconds a blocking wait burns while a peer is descheduled (comm.c's
                                * waits poll, then sleep): on an oversubscribed host, time the computing ranks lose;
                                * 0: unmeasured */
    /* measured on oversubscribed hosts, by (threads, ranks): the processor seconds a computing rank's blocking
     * 2-rank all-reduce costs it, in factor[0] (the shares' keyed table, one number used) */
    int n_pair_wait;
    llm4d_prof_share pair_wait[16];
    /* fallback */
    double gemm_gflops[3][LLM4D_PROF_MAXT + 1]; /* by precision, threads (0: unknown) */
    double attn_gflops[3][LLM4D_PROF_MAXT + 1];
    double mem_gbps[LLM4D_PROF_MAXT + 1];
    double kernel_s;           /* a kernel's fixed cost (a launch, an OpenMP fork) */
    double coll_latency_s[2], coll_gbps[2]; /* [0] within a host, [1] across hosts (bus bandwidth per rank) */
    double disk_read_gbps, disk_write_gbps;
    llm4d_gemm_shape gemm_shape; /* a GPU's GEMM time by shape ("gemm_shape"; off when absent: plan/gemm_shape.h) */
    /* tables */
    int n_kernels, cap_kernels;
    llm4d_prof_kernel *kernels; /* sorted by key (llm4d_profile_sort) for lookups */
    int n_colls, cap_colls;
    llm4d_prof_coll *colls;
    int sorted;
    /* calibration (calibrated 0: a profile written by hand, which has none of these) */
    int calibrated;
    int complete;              /* 0: interrupted, or cut short by its time budget (a re-run continues it) */
    int parts_skipped;         /* model parts left unmeasured (time budget, or too large to replay) */
    char setup[256];           /* what its jobs measured on (collective path, hostfile, quick) */
    int n_for;
    char measured_for[16][160]; /* "gpt2-tiny hidden 64, 4 layers, sequence 32, fp32, global batch 8, 2 ranks" */
    /* a machine calibration (`--calibrate --machine`: plan/grid.h): its kernels measured over a grid of shapes, not
     * for one model; such a profile prices a call between them by interpolating in its work (price.c) and covers
     * any model whose calls lie within them (coverage.c). 0 in every profile from before. */
    int machine;
    char grid[128];            /* the grid measured ("hidden 64,256,1024; sequence 64,256,1024") */
} llm4d_profile;

void llm4d_profile_init(llm4d_profile *p);
void llm4d_profile_free(llm4d_profile *p);

/* Read a profile file; a missing, unreadable or garbled file is LLM4D_EUSER naming it and how to make one. */
llm4d_code llm4d_profile_load(llm4d_profile *p, const char *path, llm4d_err *err);
/* Write it (atomically: a temporary file renamed over path). */
llm4d_code llm4d_profile_save(const llm4d_profile *p, const char *path, llm4d_err *err);

/* Add a measured kernel (replacing one of the same key), a collective entry, a share. */
llm4d_code llm4d_profile_add_kernel(llm4d_profile *p, const llm4d_prof_kernel *k, llm4d_err *err);
llm4d_code llm4d_profile_add_coll(llm4d_profile *p, const llm4d_prof_coll *c, llm4d_err *err);
void llm4d_profile_add_share(llm4d_profile *p, const llm4d_prof_share *s);
void llm4d_profile_add_pair_wait(llm4d_profile *p, const llm4d_prof_share *w);
/* Merge a second measurement pass q into p: a kernel measured in both gets the mean of the two (by kind), or the
 * faster one's seconds where their totals differ by more than LLM4D_PROFILE_OUTLIER (a slowdown of the machine
 * during one pass: interference only adds time); one only q has is added. *outliers (NULL: not counted): the
 * kernels where the faster was taken. */
#define LLM4D_PROFILE_OUTLIER 1.5
llm4d_code llm4d_profile_merge_pass(llm4d_profile *p, const llm4d_profile *q, int *outliers, llm4d_err *err);
/* Record that the kernels were measured for `what` (kept once; the oldest dropped beyond 16). */
void llm4d_profile_add_for(llm4d_profile *p, const char *what);
/* Sort the kernel table for lookups (after adding; load sorts). */
void llm4d_profile_sort(llm4d_profile *p);

/* The measured entry of exactly this call (its op, dropout, sizes and element types), threads and precision;
 * NULL when none. */
const llm4d_prof_kernel *llm4d_profile_find(const llm4d_profile *p, const llm4d_rc_call *c, int threads, int prec);

/* The default profile path: $LLM4D_MACHINE_PROFILE, else ~/.cache/llm4d/machine.json. */
void llm4d_profile_default_path(char *buf, size_t n);

/* The residue (bytes) of a process whose plan allocates plan_bytes: linear in the plan between a machine
 * calibration's two measured sizes, the nearer one's outside them; residual_bytes where the profile has one. */
double llm4d_profile_residual(const llm4d_profile *p, double plan_bytes);

#endif
