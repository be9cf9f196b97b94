/* grid.h — the shapes a machine calibration measures (`llm4d plan --calibrate --machine`, plan/calibrate.h), so that
 * one calibration prices any GPT-shaped model inside them, whatever model it is later asked about.
 *
 * A grid point is a one-layer GPT of hidden size C at sequence T (micro-batch 1, one process, the GPT-2 vocabulary):
 * recording it and replaying its calls measures every kernel kind a model's traces use (the GEMMs of its four
 * linear layers and its head, attention, the norms, the element-wise passes, embedding and loss) at shapes that
 * span the grid: the GEMMs over M = T, K and N in {C, 3C, 4C, vocabulary}, attention over (T, heads, head size),
 * the element-wise kernels over bytes. The heads follow the presets' head sizes: 16 below hidden 256 (gpt2-tiny's 4
 * heads of 16), 64 from there (gpt2-en's 12, gpt2-medium's 16), so the attention grid spans both. The planner then
 * prices a call between the points by interpolating in its work (plan/price.h), and accepts a model whose calls
 * all lie within the grid's range (plan/coverage.h).
 *
 * The grid is spelled HIDDENS:SEQUENCES, each a comma-separated list (the default "64,256,1024:64,256,1024" covers
 * gpt2-tiny, gpt2-en and gpt2-medium at sequences 64 to 1024; the tests use a few small points). */
#ifndef LLM4D_PLAN_GRID_H
#define LLM4D_PLAN_GRID_H

#include <stddef.h>

#include "config/config.h"
#include "parallel/pp_plan.h"

#define LLM4D_GRID_MAX 8
#define LLM4D_GRID_DEFAULT "64,256,1024:64,256,1024"

typedef struct {
    int n_hidden, hidden[LLM4D_GRID_MAX]; /* increasing */
    int n_seq, seq[LLM4D_GRID_MAX];       /* increasing */
} llm4d_grid;

/* Parse spec (NULL: the default) into g; 0 when it is not HIDDENS:SEQUENCES of increasing positive lists (hidden
 * sizes multiples of 16), with why (one line) set. */
int llm4d_grid_parse(const char *spec, llm4d_grid *g, char *why, size_t n);

/* The attention heads of grid hidden size C (its head size 16 below 256, else 64). */
int llm4d_grid_heads(int hidden);

/* "hidden 64,256,1024; sequence 64,256,1024" */
void llm4d_grid_describe(const llm4d_grid *g, char *buf, size_t n);

/* The grid point (hidden, seq) as a finalized one-process configuration (micro-batch 1) with its pipeline plan (free
 * with llm4d_pp_plan_free); amp: its matmuls in bf16. */
llm4d_code llm4d_grid_config(int hidden, int seq, int amp, llm4d_config *out, llm4d_pp_plan *pp, llm4d_err *err);

#endif
