/* shard_range.h — ZeRO's placement of a parameter table: which range of every group each rank of a sharding group
 * owns, and where the owned ranges sit in the rank's compact "local" buffers.
 *
 * Stated once, here, because four readers must agree on it to the element: the sharding engine (its shards of the
 * parameters, gradients and Adam states, parallel/sharding.c), the checkpoint (which ranges a rank saves and loads,
 * ckpt/gpt_ckpt.h), the memory plan and the planner (how large a rank's shards are, plan/). It lives in model/,
 * beside the table it cuts, so that every one of those layers includes it downward.
 *
 * The rule (sharding.h): every group is padded to a multiple of the sharding degree N (the table's part.align) and
 * cut into N equal shards; rank r owns shard r of every group; its local buffers hold its shards back to back, in
 * group order:
 *   s_g = (g.hi - g.lo) / N,   lo[g] = g.lo + r * s_g,   hi[g] = lo[g] + s_g,   off[g] = s_0 + ... + s_{g-1}. */
#ifndef LLM4D_MODEL_SHARD_RANGE_H
#define LLM4D_MODEL_SHARD_RANGE_H

#include <stddef.h>

#include "model/params.h"

/* The elements of one rank's shard of a group of len elements over N ranks: len / N. len must be a multiple of N
 * (a table built with a part whose align is a multiple of N); anything else is a bug and aborts. */
size_t llm4d_shard_len(size_t len, int N);

/* Sizes the scheme derives from a table, the same on every rank of the group. */
typedef struct {
    size_t local_total; /* elements of one local buffer: the sum of the s_g */
    size_t max_group;   /* the largest group (a gather buffer, a gradient bucket) */
    size_t max_shard;   /* the largest s_g (a receive shard) */
} llm4d_shard_sizes;

/* Rank r's shards of every group of t over N ranks, by the rule above. lo, hi, off: NULL or t->n_groups entries
 * each; sizes: NULL or filled. Returns t->n_groups. */
int llm4d_shard_ranges(const llm4d_param_table *t, int N, int r, size_t *lo, size_t *hi, size_t *off,
                       llm4d_shard_sizes *sizes);

/* The part of an entry of numel elements at element `at` of a group of len elements that rank r's shard over N
 * ranks holds, by the rule above: the entry's elements [*j0, *j1); 0 when the shard holds none of it. */
int llm4d_shard_part(size_t len, size_t at, size_t numel, int N, int r, size_t *j0, size_t *j1);
/* The same for entry i of t. What a ZeRO rank keeps of a gradient another group then sums (the tied embedding's
 * between the pipeline's ends): the engine's view of it, the memory plan's temporary for it and the traffic list's
 * message (parallel/traffic.c, from the group lengths it keeps). */
int llm4d_shard_entry_part(const llm4d_param_table *t, int N, int r, int i, size_t *j0, size_t *j1);

#endif
