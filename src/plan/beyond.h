/* beyond.h — what of a layout a machine calibration did not measure, said with the answer (issue 46).
 *
 * A machine profile (`llm4d plan --calibrate --machine`, plan/grid.h) measures one-layer GPTs at micro-batch 1 in one
 * process, over its hidden sizes and sequences. plan/coverage.h refuses a model whose own calls (micro-batch 1, one
 * process) lie outside that grid, and asks nothing more: a layout of an accepted model still makes calls the grid
 * never measured, which price.c prices by their work from the nearest measured shapes (log-log between calls of the
 * kind on either side of its work, else scaled by work from one side; a kind never measured, from the nearest call
 * of its method or the fallback rates). They are: sizes above the grid's largest (a micro-batch above 1: attention
 * over B sequences, GEMMs over B x T rows), sizes below its smallest (tensor-parallel shards: a GEMM's columns split
 * mp ways, the heads, sequence-parallel rows, the vocabulary's shard; ZeRO-3's blocks of the token embedding), and
 * kinds never measured (flags the one-process model never runs with: a row-parallel GEMM without its bias, a
 * pipeline's copies, the blocked head's cross-entropy). The search must still compare those layouts, so they are not
 * refused; the answer says, once, what it priced beyond the grid (the line, and "extrapolated" in --json). Outside the
 * grid means outside llm4d_grid_span's range, the range coverage.c refuses by. */
#ifndef LLM4D_PLAN_BEYOND_H
#define LLM4D_PLAN_BEYOND_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>

#include "plan/profile.h"
#include "plan/record.h"

/* What a size below the grid's smallest measures. */
enum { LLM4D_BEYOND_COLUMNS = 0, LLM4D_BEYOND_HEADS, LLM4D_BEYOND_ROWS, LLM4D_BEYOND_SIZES, LLM4D_BEYOND_N };

#define LLM4D_BEYOND_MB 8 /* micro-batches named (more: "...") */

typedef struct {
    int n_calls;                      /* distinct calls outside the grid (0: all within it) */
    int above;                        /* some size above the grid's largest of its kind */
    int64_t below[LLM4D_BEYOND_N];    /* the smallest size below the grid's smallest of its kind (0: none) */
    int64_t from[LLM4D_BEYOND_N];     /* and that smallest */
    int below_op;                     /* the call of below[LLM4D_BEYOND_SIZES] */
    uint64_t unmeasured;              /* bit op: a call of op of a kind (flags) the grid did not measure */
    int n_mb, mb[LLM4D_BEYOND_MB];    /* the micro-batches of the layouts with a size above, ascending */
    int more_mb;                      /* more micro-batches than mb[] holds */
    int split_by;                     /* of the layouts with a size below: 1 all tensor-parallel, 2 some not (ZeRO-3
                                       * splits the token embedding's GEMMs into blocks of rows too) */
} llm4d_beyond;

/* Add call c (a kernel) to b when machine profile p's grid (precision prec) did not measure its sizes. */
void llm4d_beyond_call(const llm4d_profile *p, const llm4d_rc_call *c, int prec, llm4d_beyond *b);

/* Add what b holds to into; mb > 0: b is a stage of a layout of that micro-batch (named when b has a size above)
 * and tensor-parallel degree mp. */
void llm4d_beyond_merge(llm4d_beyond *into, const llm4d_beyond *b, int mb, int mp);

/* The i-th thing b priced beyond the grid ("micro-batch 4 (measured 1)", "tensor-parallel shards of 32 columns
 * (measured from 64)"; "shards of" when a layout without tensor parallelism split them) into buf; 0 when there is no
 * i-th. */
int llm4d_beyond_item(const llm4d_beyond *b, int i, char *buf, size_t n);

/* "priced beyond the calibration: ITEM, ITEM: extrapolated by work" on f, with `indent` before it; nothing when b
 * holds nothing. */
void llm4d_beyond_line(FILE *f, const llm4d_beyond *b, const char *indent);

/* o["extrapolated"] = [the items] when b holds any (nothing added otherwise). */
void llm4d_beyond_json(cJSON *o, const llm4d_beyond *b);

#endif
