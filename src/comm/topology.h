/* topology.h — the 4D rank grid of a hybrid-parallel job, as an explicit value.
 *
 * A job of world_size processes is arranged as a grid of degrees dp x pp x sharding x mp, in the axis order of
 * Paddle's HybridCommunicateGroup (data, pipe, sharding, model) with the model axis varying fastest:
 *
 *     rank = ((dp_idx * pp + pp_idx) * sharding + sh_idx) * mp + mp_idx
 *
 * so tensor-parallel partners are neighbouring ranks (same node, fastest links) and the data axis, which
 * communicates least often, is the slowest. A rank's group along an axis is the set of ranks that share its other
 * three coordinates; its index in that group is its coordinate on the axis.
 *
 * Besides the four axes there is the "data" group dp x sharding: every rank of it reads different samples (the
 * sharding axis is data-parallel too, ZeRO only splits the states), so the data loader uses
 * data_rank = dp_idx * sharding + sh_idx of data_world = dp * sharding, and plain data-parallel gradient reduction
 * (sharding off) sums over it.
 *
 * The value is built once from the configured degrees and the world rank, validated once, and passed to whoever
 * communicates; nothing here is global. Member lists are computed on demand, so the value stays small and
 * copyable for any world size. */
#ifndef LLM4D_COMM_TOPOLOGY_H
#define LLM4D_COMM_TOPOLOGY_H

#include "core/error.h"
#include "core/log.h"

typedef enum {
    LLM4D_AXIS_DATA = 0, /* dp: pure data parallel replicas */
    LLM4D_AXIS_PIPE,     /* pp: pipeline stages */
    LLM4D_AXIS_SHARDING, /* sharding: ZeRO partitions (data parallel over split states) */
    LLM4D_AXIS_MODEL,    /* mp: tensor parallel */
    LLM4D_NAXES
} llm4d_axis;

typedef struct {
    int world_size;
    int rank;
    int degree[LLM4D_NAXES]; /* indexed by llm4d_axis: dp, pp, sharding, mp */
    int index[LLM4D_NAXES];  /* this rank's coordinate on each axis == its rank inside that axis' group */
    int data_rank;           /* dp_idx * sharding + sh_idx: which slice of every global batch this rank reads */
    int data_world;          /* dp * sharding */
} llm4d_topology;

/* Short names used in messages and in the group printout: "dp", "pp", "sharding", "mp". */
const char *llm4d_axis_name(llm4d_axis a);

/* Builds the grid. Refuses (LLM4D_EUSER, a line showing the arithmetic) a degree < 1 or degrees whose product is
 * not world_size. rank must be in [0, world_size). */
llm4d_code llm4d_topology_init(llm4d_topology *t, int world_size, int rank, int dp, int pp, int sharding, int mp,
                               llm4d_err *err);

/* Paddle's `dp_degree: None`: dp = world / (pp * sharding * mp). Refuses a product that does not divide world. */
llm4d_code llm4d_topology_derive_dp(int world_size, int pp, int sharding, int mp, int *dp, llm4d_err *err);

/* The rank at grid coordinates idx[LLM4D_NAXES]. */
int llm4d_topology_rank_at(const llm4d_topology *t, const int idx[LLM4D_NAXES]);

/* Members of this rank's group along axis a, ordered by their index on the axis (member i has index i).
 * ranks must hold t->degree[a] entries. */
void llm4d_topology_group_ranks(const llm4d_topology *t, llm4d_axis a, int *ranks);
/* Member i of this rank's group along axis a (0 <= i < degree[a]). */
int llm4d_topology_group_member(const llm4d_topology *t, llm4d_axis a, int i);

/* Members of this rank's dp x sharding data group, ordered by data rank; ranks must hold data_world entries. */
void llm4d_topology_data_group_ranks(const llm4d_topology *t, int *ranks);

/* An id shared by the members of one group along axis a and distinct between groups (the row-major index of the
 * other three coordinates): what MPI_Comm_split takes as its colour. */
int llm4d_topology_group_id(const llm4d_topology *t, llm4d_axis a);
/* The same for the dp x sharding data group (row-major index of the pipe and model coordinates). */
int llm4d_topology_data_group_id(const llm4d_topology *t);

/* The seeds' group printout (HybridCommunicateGroup's log): world size and rank, then per group (mp, sharding,
 * pp, dp) its size, this rank's rank in it and its member ranks, e.g. `mp group size: 2`, `mp rank: 0`,
 * `mp group ranks: [0, 1]`, blocks separated by `##############################`; then the data rank. */
void llm4d_topology_print(const llm4d_topology *t, const llm4d_log *log);

#endif
