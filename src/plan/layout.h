/* layout.h — one way to lay a training job out on a cluster: the values of the configuration keys the planner
 * chooses (the four degrees, ZeRO's stage and offload, sequence parallelism, virtual stages, the schedule, the
 * split, the micro-batch, recompute), and the cluster it runs on.
 *
 * A layout is checked by the configuration's own validation: it is written into a copy of the user's parsed
 * configuration and finalized for its world size (config.h llm4d_config_finalize), then its pipeline is planned
 * (pp_plan.h llm4d_pp_plan_make), exactly as `llm4d train` and `llm4d launch` check a job; a layout either of them
 * refuses is rejected with their message. */
#ifndef LLM4D_PLAN_LAYOUT_H
#define LLM4D_PLAN_LAYOUT_H

#include <stddef.h>

#include "comm/topology.h"
#include "config/config.h"
#include "parallel/pp_plan.h"

enum { LLM4D_SPLIT_EVEN = 0, LLM4D_SPLIT_EMBED_LOSS, LLM4D_SPLIT_GIVEN };

typedef struct {
    int dp, sharding, stage, offload, mp, sp, pp, vpp;
    int schedule;   /* llm4d_pp_kind asked (1F1B, interleaved, ZBH1) */
    int split;      /* LLM4D_SPLIT_*: even, the embedding and the loss counted as blocks, the configuration's
                     * pp_layers */
    int mb;         /* micro_batch_size */
    int recompute;
} llm4d_layout;

/* Where it runs: hosts, ranks per host, threads per rank, memory per host (bytes), and one rank's own device memory
 * (bytes) where ranks do not share the host's (a GPU's; 0: they share it, as on CPU hosts). A layout fits when both
 * hold (predict.h llm4d_prediction_over). */
typedef struct {
    int nodes, ranks_per_node, threads;
    double memory_per_node;
    double memory_per_rank;
} llm4d_cluster;

/* The layout a finalized configuration describes (its degrees, schedule, split, micro-batch, recompute). */
llm4d_layout llm4d_layout_of(const llm4d_config *cfg);

/* out = base (parsed, not finalized) with the layout's keys and the global batch `global`, finalized for the
 * layout's world size, and its pipeline planned into pp (free with llm4d_pp_plan_free). A layout the
 * configuration refuses is LLM4D_EUSER with its message. input_dir may be empty (nothing is read). */
llm4d_code llm4d_layout_config(const llm4d_config *base, const llm4d_layout *l, long long global, llm4d_config *out,
                               llm4d_pp_plan *pp, llm4d_err *err);
/* The same, the pipeline's balanced split from memo when it has it (pp_balance.h; NULL: computed). */
llm4d_code llm4d_layout_config_memo(const llm4d_config *base, const llm4d_layout *l, long long global,
                                    llm4d_config *out, llm4d_pp_plan *pp, llm4d_pp_balance_memo *memo,
                                    llm4d_err *err);

/* World size: dp x sharding x mp x pp. */
static inline int llm4d_layout_world(const llm4d_layout *l) { return l->dp * l->sharding * l->mp * l->pp; }

/* A short name ("dp2 sh2/z3 mp2+sp pp2x2 ZBH1 mb4 rc") and the `llm4d train` flags that ask for it. */
void llm4d_layout_name(const llm4d_layout *l, char *buf, size_t n);
void llm4d_layout_flags(const llm4d_layout *l, const llm4d_config *cfg, char *buf, size_t n);

/* The coordinates of stage s's representative rank (dp, sharding and model index 0) in cfg's (finalized) grid. */
llm4d_code llm4d_layout_stage_topo(const llm4d_config *cfg, int s, llm4d_topology *topo, llm4d_err *err);

#endif
