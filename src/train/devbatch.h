/* devbatch.h — a step's batch in device memory: what the kernels read (backend.h: every kernel argument is device
 * memory), uploaded once per step (or per evaluation batch) from the loader's host rows.
 *
 * The loss-gradient weights are the one host computation on the batch: weight[i] = mask[i] x w (w = the loss scale
 * over the unmasked tokens of the whole global batch, computed by the caller), made in a host buffer and uploaded
 * with the tokens, targets and sample ids. Micro-batch k of a step is rows [k x micro, (k+1) x micro). */
#ifndef LLM4D_TRAIN_DEVBATCH_H
#define LLM4D_TRAIN_DEVBATCH_H

#include "backend/backend.h"
#include "data/loader.h"
#include "model/gpt.h"

typedef struct {
    int rows, T;
    int32_t *tokens, *targets; /* device [rows, T] */
    float *weight;             /* device [rows, T] */
    int64_t *sample_ids;       /* device [rows] */
    float *host_weight;        /* pinned [rows, T]: the weights before the upload */
    llm4d_backend *be;
    llm4d_mem *mem;
} llm4d_devbatch;

/* The bytes llm4d_devbatch_init allocates for `rows` rows of T tokens (a memory plan: workspace). */
size_t llm4d_devbatch_bytes(int rows, int T);
llm4d_code llm4d_devbatch_init(llm4d_devbatch *d, llm4d_backend *be, llm4d_mem *mem, int rows, int T, llm4d_err *err);
void llm4d_devbatch_free(llm4d_devbatch *d);
/* Upload b's rows with loss-gradient weights mask x w. */
void llm4d_devbatch_upload(llm4d_devbatch *d, const llm4d_batch *b, double w);
/* Micro-batch k of `micro` rows of the uploaded batch, as the executors take it. */
llm4d_micro llm4d_devbatch_micro(const llm4d_devbatch *d, int k, int micro, uint32_t step, int train);

#endif
