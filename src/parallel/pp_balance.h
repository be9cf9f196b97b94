/* pp_balance.h — a pipeline split that balances the stages by their cost, the default when pp_layers is not given.
 *
 * An even split of the blocks leaves the last stage with the LM head and the loss on top of its blocks: at GPT-2's
 * vocabulary (50304 rows) that is about as much work as five blocks, and issue 27 measured the first stage of an even
 * pp2 idle 41 % of the step (1F1B's own bubble: 11 %). So each virtual stage is given a cost, per token of a
 * micro-batch, in FLOP-equivalents: its GEMM and attention FLOPs (forward, backward = 2 x forward, a second forward
 * under recompute) plus LLM4D_PP_BYTE_FLOPS x the bytes of its element-wise passes (a CPU core's GEMM rate is about
 * ten times its copy bandwidth in bytes: Sapphire Rapids, one thread, ~120 GFLOP/s fp32 against 12.7 GB/s copied),
 * with C = hidden, F = ffn, H = heads, T = sequence, Vp = padded vocabulary, M = tensor-parallel degree:
 *   block      FLOPs 3 (2 (4 C^2 + 2 C F) / M + 4 T C / M)      bytes 3 x 4 (16 C + 2 F / M + 3 H T / M)
 *   embedding  (first virtual stage) bytes 4 x 7 C (the two rows read and written, their gradients scattered)
 *   head       (last virtual stage) FLOPs 3 x 2 C Vp / M, bytes 4 x 4 Vp / M (logits written, read by the softmax,
 *              its gradient written and read by the two GEMMs)
 * and the split minimises the stages' costs sorted from the largest down (lexicographically: the slowest stage
 * first, then the next): the first and last virtual stages take j and k blocks, the ones between share the rest as
 * evenly as possible (earlier ones taking the extra block), and of equal candidates the one with the fewest blocks on
 * the first, then on the last, wins. An explicit pp_layers still wins, and pp_split even keeps the even split. */
#ifndef LLM4D_PARALLEL_PP_BALANCE_H
#define LLM4D_PARALLEL_PP_BALANCE_H

#include <stdint.h>

#include "config/config.h"

#define LLM4D_PP_BYTE_FLOPS 10

/* Per token of a micro-batch, in FLOP-equivalents. */
typedef struct {
    int64_t block, embedding, head;
} llm4d_pp_split_costs;

llm4d_pp_split_costs llm4d_pp_costs_of(const llm4d_config *cfg);

/* n[v] blocks of each of VP virtual stages (VP >= 1, L >= VP - 2: the stages between the first and the last hold at
 * least one), balanced as above. */
void llm4d_pp_balance(const llm4d_pp_split_costs *c, int L, int VP, int *n);

/* The balanced splits already made, by (the costs, L, VP): a search configures the same pipeline split for every
 * layout that shares the tensor-parallel degree, recompute and virtual stage count, and each split compares O(L^2)
 * candidates. The answer depends on nothing else, so a remembered one is the one llm4d_pp_balance would give. Owned
 * by the caller and passed explicitly; NULL everywhere means no memo. */
typedef struct llm4d_pp_balance_memo llm4d_pp_balance_memo;
llm4d_pp_balance_memo *llm4d_pp_balance_memo_create(void); /* NULL: out of memory */
void llm4d_pp_balance_memo_destroy(llm4d_pp_balance_memo *m);
/* llm4d_pp_balance through the memo m (NULL: computed). */
void llm4d_pp_balance_memo_get(llm4d_pp_balance_memo *m, const llm4d_pp_split_costs *c, int L, int VP, int *n);

/* The cost of virtual stage v of VP holding nv blocks. */
static inline int64_t llm4d_pp_stage_cost(const llm4d_pp_split_costs *c, int v, int VP, int nv) {
    return (int64_t)nv * c->block + (v == 0 ? c->embedding : 0) + (v == VP - 1 ? c->head : 0);
}

#endif
