/* memplan.h — what a rank of a layout will allocate, as a pure function of the configuration, its place in the
 * topology and the backend's size functions: the trainer's memory plan (train/memplan.c, logged and checked before
 * the model is allocated) and the planner's (plan/, for every rank of every layout it considers) are this one
 * function, so they cannot disagree.
 *
 * The model's share comes from running its allocation code in counting mode (llm4d_gpt_plan), each engine's from
 * the size function its init uses (parallel/stack.h llm4d_stack_bytes), the step's batch from devbatch's. Outside
 * the arena's categories: the backend's low-precision weight copies and converted GEMM operands, and the
 * temporaries Open MPI allocates for ZeRO's reduce-scatters on a sharding group's first rank, and what the rank
 * holds of its groups' shared-memory segments (memplan_shm.c). What a process holds
 * before it allocates (libraries, MPI, the data's indices) is not here: the trainer reads it from the kernel, the
 * planner from its machine profile. */
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
    size_t shm_segments;               /* the pages of its groups' shared-memory segments the rank touches */
} llm4d_memplan;

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
/* The paths comm_shm.c would choose for the rank at topo's coordinates when ranks_per_node consecutive ranks share a
 * host (the planner's). */
void llm4d_memplan_paths_predict(const llm4d_config *cfg, const llm4d_topology *topo, int ranks_per_node,
                                 llm4d_memplan_paths *out);
/* What the rank holds of its groups' segments: tab its parameter table, crossing the elements of an activation
 * that crosses a tensor-parallel group (B x T x C, over mp with sequence parallelism). */
size_t llm4d_memplan_shm_bytes(const llm4d_config *cfg, const llm4d_topology *topo, const llm4d_param_table *tab,
                               size_t crossing, const llm4d_memplan_paths *paths);

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

#endif
