/* memplan.h — what a rank of a layout will allocate, as a pure function of the configuration, its place in the
 * topology and the backend's size functions: the trainer's memory plan (train/memplan_check.c, logged and checked
 * before the model is allocated) and the planner's (plan/, for every rank of every layout it considers) are this
 * one function, so they cannot disagree. It sits with the planner, below the trainer, which calls both.
 *
 * The model's share comes from running its allocation code in counting mode (llm4d_gpt_plan), each engine's from
 * the size function its init uses (parallel/stack.h llm4d_stack_bytes), the step's batch from devbatch's. Outside
 * the arena's categories: the backend's low-precision weight copies and converted GEMM operands, and the
 * temporaries Open MPI allocates for ZeRO's reduce-scatters on a sharding group's first rank, what the rank
 * holds of its groups' shared-memory segments (memplan_shm.c), and the libraries' working set of a step (below).
 * What a process holds before it allocates (libraries, MPI, the data's indices) is not here: the trainer reads it
 * from the kernel, the planner from its machine profile.
 *
 * The libraries' working set: a CPU process comes to hold more in its first step than it allocates, whatever its
 * layout: the code of the kernels the step runs first, paged in from the libraries (oneDNN's: 2.8 MiB), oneDNN's
 * JIT kernels and primitive cache (about 1 MiB of its own and libstdc++'s allocations), its scratchpads, the
 * attention scratch and the GEMM library's packing buffers (on the heap; larger with the model), the threads'
 * stacks. Measured on a 2-vCPU Zen 5 VM as the peak resident set less the plan and what the process held when it
 * planned: gpt2-tiny (4 layers) 6.4-7.9 MiB on every rank of one process, dp2/4, ZeRO-1/2/3 over 2 and 4, offload,
 * mp2, pp2, mp2 x pp2 and dp2 x pp2 x sharding2 x mp2, at 1 and 2 threads; GPT-2 124M 9.6-11.6 MiB. Without it a
 * small model's plan was 10-14 % under its peak (a 56 MiB pipeline rank's by 7 MiB, where `llm4d plan --evaluate`,
 * which added the profile's measured residue, said 64). The plan holds LLM4D_MEMPLAN_LIBRARIES for a backend whose
 * device memory is host memory (the resident set is what the plan answers for there); a machine profile's
 * residual (plan/profile.h) is what a process of that machine holds beyond it. */
#ifndef LLM4D_TRAIN_MEMPLAN_H
#define LLM4D_TRAIN_MEMPLAN_H

#include "backend/backend.h"
#include "comm/comm.h"
#include "comm/topology.h"
#include "config/config.h"
#include "core/mem.h"
#include "parallel/pp_plan.h"

typedef struct {
    size_t cat[LLM4D_MEM_NCATEGORIES]; /* bytes the model, the engines and the batch allocate, by category */
    size_t weight_copies;              /* the backend's bf16/fp16 copies of the weights its GEMMs read */
    size_t operands;                   /* the backend's converted GEMM operands */
    size_t mpi_temporaries;            /* Open MPI's reduce-scatter temporaries (a sharding group's first rank) */
    size_t mpi_allreduce;              /* Open MPI's temporary for the rank's largest all-reduce on its path (held
                                        * with the reduce-scatters' where both are: ZeRO hybrid with dp over MPI,
                                        * the first rank of each sharding group +7.1 MiB beyond a plan of the
                                        * larger alone, gpt2-tiny dp2 x sharding2 stage 2) */
    size_t shm_segments;               /* the pages of its groups' shared-memory segments the rank touches */
    size_t libraries;                  /* the libraries' working set of a step (above) */
} llm4d_memplan;

/* The libraries' working set a CPU process's plan holds (above). */
#define LLM4D_MEMPLAN_LIBRARIES ((size_t)15 << 19) /* 7.5 MiB */

/* A rank's groups (comm.h llm4d_comm_groups, and the pipeline's embedding group) ... */
typedef enum {
    LLM4D_SHMG_WORLD, LLM4D_SHMG_DATA, LLM4D_SHMG_DP, LLM4D_SHMG_PIPE, LLM4D_SHMG_SHARDING, LLM4D_SHMG_MODEL,
    LLM4D_SHMG_EMBEDDING, LLM4D_SHMG_N
} llm4d_shm_group_kind;
/* ... and which of them collect through a shared-memory segment (comm/comm_shm.h). */
typedef struct {
    int host_ranks[LLM4D_SHMG_N]; /* the group's ranks on this host when it collects through a segment, else 0 */
    int hosts[LLM4D_SHMG_N];      /* the hosts it spans */
    size_t slot_bytes;            /* Distributed.comm_chunk_kb in bytes (0: the path's default) */
} llm4d_memplan_paths;

/* The paths of a running rank's groups, as its communicators chose them. */
void llm4d_memplan_paths_of(const llm4d_comm_groups *g, const llm4d_config *cfg, llm4d_memplan_paths *out);
/* comm_shm.c's rule for one group, for the plans: its ranks on this host (here; equal: every host it spans holds as
 * many) when the path takes it (comm_path not mpi, more than one and at most LLM4D_SHM_MAX_RANKS here), else 0. */
int llm4d_memplan_path_ranks(const llm4d_config *cfg, int here, int equal);
/* The paths comm_shm.c would choose for the rank at topo's coordinates when ranks_per_node consecutive ranks share a
 * host (the planner's). */
void llm4d_memplan_paths_predict(const llm4d_config *cfg, const llm4d_topology *topo, int ranks_per_node,
                                 llm4d_memplan_paths *out);
/* What the rank holds of its groups' segments: tab its parameter table, crossing the elements of an activation
 * that crosses a tensor-parallel group (B x T x C, over mp with sequence parallelism). */
size_t llm4d_memplan_shm_bytes(const llm4d_config *cfg, const llm4d_topology *topo, const llm4d_param_table *tab,
                               size_t crossing, const llm4d_memplan_paths *paths);
/* The bytes of the rank's largest all-reduce that Open MPI runs (its groups not on a segment, NULL paths: all; a
 * group spanning hosts: the hosts' phase): a flat data group's largest gradient bucket, ZeRO's hybrid all-reduce
 * over dp, the tensor-parallel all-reduces, the tied embedding's. Open MPI holds a temporary as large as the message
 * on each rank of a group of 2 (plan --calibrate's series on a 2-vCPU Zen 5 VM, 64 kB to 16 MB: 0.99-1.6 x the
 * message on both ranks), one at a time. In larger groups the leaves of its binomial tree (odd indices) hold none:
 * gpt2-tiny dp4 over MPI, ranks 1 and 3 peaked 12 % below this plan (not modelled: the suite's MPI groups are 2). */
size_t llm4d_memplan_mpi_allreduce_bytes(const llm4d_config *cfg, const llm4d_topology *topo,
                                         const llm4d_param_table *tab, size_t crossing,
                                         const llm4d_memplan_paths *paths);

/* The matmul precision a configuration runs (use_amp, amp_dtype). */
llm4d_precision llm4d_memplan_precision(const llm4d_config *cfg);

/* Whether the sharding group reduce-scatters in its shared-memory segment (no library temporaries) on these
 * paths (NULL: none do). */
int llm4d_memplan_rs_in_shm(const llm4d_memplan_paths *paths);

/* How many children rank i of an N-rank sharding group receives from in Open MPI's (libnbc's) binomial
 * reduce-scatter: each holds a temporary on it (memplan.c mpi_temporaries). Ranks with the same count plan alike. */
int llm4d_memplan_rs_children(int N, int i);

/* The plan of the rank at topo's coordinates, for cfg (finalized) and its pipeline plan pp (P = 1: none); be
 * supplies the size functions of the backend the run uses (operand_workspace, weight_copy_bytes; nothing is
 * allocated on it); paths: which groups collect through shared memory (NULL: none), whose segments the plan counts
 * and whose reduce-scatters need no MPI temporaries. */
llm4d_code llm4d_memplan_make(const llm4d_config *cfg, const llm4d_topology *topo, const llm4d_pp_plan *pp,
                              llm4d_backend *be, const llm4d_memplan_paths *paths, llm4d_memplan *out,
                              llm4d_err *err);

/* The same plan with the model's counting run and parameter table kept by model part in memo (for the planner,
 * which asks for thousands of ranks whose parts repeat); memo NULL is llm4d_memplan_make. A memo serves one
 * backend (it keeps the size functions' answers). */
typedef struct llm4d_memplan_memo llm4d_memplan_memo;
llm4d_code llm4d_memplan_memo_create(llm4d_memplan_memo **out, llm4d_err *err);
void llm4d_memplan_memo_destroy(llm4d_memplan_memo *m);
/* Empty the model parts' entries (not the paths'): a search forgets them between its blocks of one (mp, pp) pair,
 * whose parts another block rarely repeats, so that their memory is reused instead of grown into fresh pages. */
void llm4d_memplan_memo_forget(llm4d_memplan_memo *m);
/* llm4d_memplan_paths_predict, kept in memo by its inputs (NULL: computed): the planner asks for every class of rank
 * of every layout, and a layout's topology repeats across its micro-batch, recompute and schedule choices, while
 * the walk over a group's members is long on large clusters. */
void llm4d_memplan_paths_predict_memo(llm4d_memplan_memo *memo, const llm4d_config *cfg, const llm4d_topology *topo,
                                      int ranks_per_node, llm4d_memplan_paths *out);
llm4d_code llm4d_memplan_make_memo(const llm4d_config *cfg, const llm4d_topology *topo, const llm4d_pp_plan *pp,
                                   llm4d_backend *be, const llm4d_memplan_paths *paths, llm4d_memplan_memo *memo,
                                   llm4d_memplan *out, llm4d_err *err);

/* Every byte of the plan: the categories and what lies outside them. */
size_t llm4d_memplan_total(const llm4d_memplan *p);
/* MPI's temporaries the plan holds: mpi_temporaries and mpi_allreduce. */
size_t llm4d_memplan_mpi(const llm4d_memplan *p);

#endif
