/* replay.h — a recording (plan/record.h) made again on a real backend, call by call, timed: the calibration's way
 * of measuring the model's kernels at the model's shapes, in the order and on the memory layout the model uses
 * (so a kernel meets the caches a training step leaves it). Every fake allocation becomes a real one of its size;
 * every pointer argument is translated into it; each call is timed on the wall clock (synchronised) and split by
 * the backend's own timers into its kinds of work. */
#ifndef LLM4D_PLAN_REPLAY_H
#define LLM4D_PLAN_REPLAY_H

#include "plan/record.h"

typedef struct {
    const llm4d_rec *rec;
    llm4d_backend *be;
    llm4d_mem mem;
    void **real;   /* [rec->n_allocs] */
    size_t bytes;  /* allocated in all */
} llm4d_replay;

/* Real buffers for every allocation of rec on be (LLM4D_ENOMEM when they do not fit). */
llm4d_code llm4d_replay_init(llm4d_replay *r, const llm4d_rec *rec, llm4d_backend *be, llm4d_err *err);
void llm4d_replay_free(llm4d_replay *r);

/* Make calls [lo, hi) of the recording once; s[i - lo] (may be NULL) receives call i's seconds by kind (0 for a
 * hook event or a collective, which are not kernels; -1 in s[0] for a call that could not be replayed). */
void llm4d_replay_run(llm4d_replay *r, int lo, int hi, double (*s)[LLM4D_WORK_N]);

/* The total bytes of rec's allocations (what a replay needs). */
size_t llm4d_replay_bytes(const llm4d_rec *rec);

#endif
