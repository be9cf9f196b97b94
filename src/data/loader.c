/* loader.c — batches of the blended GPT indices sliced by data rank, with a one-step prefetch thread (see loader.h). */
#include "data/loader.h"

#include <stdlib.h>
#include <string.h>

static llm4d_code batch_alloc(llm4d_batch *b, llm4d_mem *mem, int rows, int T, llm4d_err *err) {
    memset(b, 0, sizeof *b);
    b->rows = rows;
    b->T = T;
    b->step = -1;
    const size_t n = (size_t)rows * T;
    b->tokens = llm4d_mem_alloc(mem, LLM4D_MEM_WORKSPACE, n * sizeof(int32_t));
    b->targets = llm4d_mem_alloc(mem, LLM4D_MEM_WORKSPACE, n * sizeof(int32_t));
    b->mask = llm4d_mem_alloc(mem, LLM4D_MEM_WORKSPACE, n * sizeof(float));
    b->sample_ids = llm4d_mem_alloc(mem, LLM4D_MEM_WORKSPACE, (size_t)rows * sizeof(int64_t));
    if (!b->tokens || !b->targets || !b->mask || !b->sample_ids)
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory allocating a batch of %d x %d", rows, T);
    return LLM4D_OK;
}

static void batch_free(llm4d_batch *b, llm4d_mem *mem) {
    const size_t n = (size_t)b->rows * b->T;
    llm4d_mem_free(mem, LLM4D_MEM_WORKSPACE, b->tokens, n * sizeof(int32_t));
    llm4d_mem_free(mem, LLM4D_MEM_WORKSPACE, b->targets, n * sizeof(int32_t));
    llm4d_mem_free(mem, LLM4D_MEM_WORKSPACE, b->mask, n * sizeof(float));
    llm4d_mem_free(mem, LLM4D_MEM_WORKSPACE, b->sample_ids, (size_t)b->rows * sizeof(int64_t));
    memset(b, 0, sizeof *b);
}

void llm4d_loader_fill(llm4d_loader *ld, int64_t s, llm4d_batch *b) {
    const int T = ld->T;
    const int64_t first = s * ld->global_batch;
    /* PaddleNLP's loader passes over the dataset once per len(dataset) items: epoch and batch count those passes */
    const int64_t pass = llm4d_blend_pass_len(&ld->blend);
    const int64_t per_pass = pass / ld->global_batch > 0 ? pass / ld->global_batch : 1;
    b->epoch = s / per_pass;
    b->batch = s % per_pass;
    for (int t = 0; t < ld->local_batch; t++) {
        const int64_t item = first + ld->data_rank + (int64_t)t * ld->data_world;
        b->sample_ids[t] = item;
        llm4d_blend_sample(&ld->blend, item, ld->eos_id, b->tokens + (size_t)t * T, b->targets + (size_t)t * T,
                               b->mask + (size_t)t * T, ld->window);
    }
    b->step = s;
}

static void *prefetch_main(void *arg) {
    llm4d_loader *ld = arg;
    pthread_mutex_lock(&ld->mu);
    for (;;) {
        while (!ld->stop && ld->want < 0) pthread_cond_wait(&ld->cv, &ld->mu);
        if (ld->stop) break;
        const int64_t s = ld->want;
        ld->want = -1;
        /* fill the buffer that does not hold the step the trainer is using (the one with the older step) */
        const int k = ld->buf[0].step <= ld->buf[1].step ? 0 : 1;
        ld->filling = k;
        ld->buf[k].step = -1;
        pthread_mutex_unlock(&ld->mu);
        llm4d_loader_fill(ld, s, &ld->buf[k]);
        pthread_mutex_lock(&ld->mu);
        ld->filling = -1;
        pthread_cond_broadcast(&ld->cv);
    }
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}

llm4d_code llm4d_loader_init(llm4d_loader *ld, const llm4d_corpora *cs, const llm4d_loader_opts *o, llm4d_mem *mem,
                             llm4d_err *err) {
    memset(ld, 0, sizeof *ld);
    ld->T = o->T;
    ld->global_batch = o->global_batch;
    ld->local_batch = o->local_batch;
    ld->data_rank = o->data_rank;
    ld->data_world = o->data_world;
    ld->eos_id = o->eos_id;
    ld->mem = mem;
    ld->want = -1;
    ld->filling = -1;
    const llm4d_gpt_index_opts io = {.split = o->split, .kind = o->kind, .num_samples = o->num_samples,
                                     .seq_len = o->T, .seed = o->seed, .cache_prefix = NULL,
                                     .write_cache = o->write_cache};
    LLM4D_TRY(llm4d_blend_build(&ld->blend, cs, &io, err));
    ld->have_blend = 1;
    ld->window = malloc(((size_t)o->T + 1) * sizeof(int32_t));
    if (!ld->window) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    for (int k = 0; k < 2; k++) LLM4D_TRY(batch_alloc(&ld->buf[k], mem, o->local_batch, o->T, err));
    pthread_mutex_init(&ld->mu, NULL);
    pthread_cond_init(&ld->cv, NULL);
    if (pthread_create(&ld->thread, NULL, prefetch_main, ld) != 0)
        return llm4d_fail(err, LLM4D_EINTERNAL, "cannot start the data prefetch thread");
    ld->started = 1;
    return LLM4D_OK;
}

void llm4d_loader_free(llm4d_loader *ld) {
    if (ld->started) {
        pthread_mutex_lock(&ld->mu);
        ld->stop = 1;
        pthread_cond_broadcast(&ld->cv);
        pthread_mutex_unlock(&ld->mu);
        pthread_join(ld->thread, NULL);
        pthread_mutex_destroy(&ld->mu);
        pthread_cond_destroy(&ld->cv);
    }
    for (int k = 0; k < 2; k++)
        if (ld->buf[k].tokens) batch_free(&ld->buf[k], ld->mem);
    if (ld->have_blend) llm4d_blend_free(&ld->blend);
    free(ld->window);
    memset(ld, 0, sizeof *ld);
}

const llm4d_batch *llm4d_loader_get(llm4d_loader *ld, int64_t s) {
    pthread_mutex_lock(&ld->mu);
    for (;;) {
        for (int k = 0; k < 2; k++)
            if (ld->buf[k].step == s && ld->filling != k) {
                ld->want = s + 1; /* prefetch the next step into the other buffer */
                pthread_cond_broadcast(&ld->cv);
                pthread_mutex_unlock(&ld->mu);
                return &ld->buf[k];
            }
        if (ld->want != s && ld->filling < 0) {
            ld->want = s; /* not prefetched (first step, or a jump): ask for it */
            pthread_cond_broadcast(&ld->cv);
        }
        pthread_cond_wait(&ld->cv, &ld->mu);
    }
}
