/* cuda_timers.c — the CUDA backend's work timers (backend.h work_stats): where a step's GPU time goes.
 *
 * The host returns from a method long before its kernels run, so host clocks would time the launches, not the
 * work. Each timed stretch of launches is bracketed by two CUDA events on the compute stream instead, tagged with
 * its kind (GEMM, attention, ...); the elapsed times are read back later, in order, when the ring of pairs is full
 * or when the statistics are asked for (which synchronises). Stretches never nest: a method that converts an
 * operand and then multiplies times the two as two stretches, so every GPU second is counted once, in its kind.
 * Recording an event costs about a microsecond of host time; a GPT-2 step records a few thousand.
 * The same seconds are also summed by the stretch's site (the function and line that began it), written as a table
 * at destruction when LLM4D_CUDA_SITES names a file: the breakdown a profiler would give, by backend method. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_impl.h"

#define TM_N 4096 /* pairs in flight before the oldest half is read back */

#define TM_SITES 96 /* distinct sites kept; later ones are summed as "other" */

typedef struct {
    cudaEvent_t a, b;
    int kind, site;
    int closed;
} tpair;

typedef struct {
    const char *func;
    int line, kind;
    double sec, calls;
} tsite;

struct cuda_timers {
    tpair p[TM_N];
    int head, n; /* the oldest pending pair, and how many are pending */
    double sec[LLM4D_WORK_N], calls[LLM4D_WORK_N];
    tsite site[TM_SITES + 1];
    int nsite;
};

cuda_timers *llm4d_cuda_timers_create(void) { return calloc(1, sizeof(cuda_timers)); }

static void write_sites(const cuda_timers *t, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "site\tkind\tseconds\tcalls\n");
    for (int i = 0; i <= TM_SITES; i++) {
        const tsite *x = &t->site[i];
        if (x->calls == 0) continue;
        fprintf(f, "%s:%d\t%s\t%.6f\t%.0f\n", x->func ? x->func : "other", x->line, llm4d_work_name(x->kind), x->sec,
                x->calls);
    }
    fclose(f);
}

void llm4d_cuda_timers_destroy(cuda_timers *t) {
    if (!t) return;
    const char *path = getenv("LLM4D_CUDA_SITES");
    if (path && *path) write_sites(t, path);
    for (int i = 0; i < TM_N; i++) {
        if (t->p[i].a) cudaEventDestroy(t->p[i].a);
        if (t->p[i].b) cudaEventDestroy(t->p[i].b);
    }
    free(t);
}

/* Reads back the k oldest pairs (their end events are waited for). */
static void harvest(cuda_timers *t, int k) {
    for (; k > 0 && t->n > 0; k--) {
        tpair *q = &t->p[t->head];
        if (!q->closed) break; /* still open: read it next time */
        CU_CHECK(cudaEventSynchronize(q->b));
        float ms = 0.0f;
        CU_CHECK(cudaEventElapsedTime(&ms, q->a, q->b));
        t->sec[q->kind] += ms * 1e-3;
        t->site[q->site].sec += ms * 1e-3;
        q->closed = 0;
        t->head = (t->head + 1) % TM_N;
        t->n--;
    }
}

static int site_of(cuda_timers *t, int kind, const char *func, int line) {
    for (int i = 0; i < t->nsite; i++)
        if (t->site[i].func == func && t->site[i].line == line) return i;
    if (t->nsite == TM_SITES) return TM_SITES;
    t->site[t->nsite] = (tsite){func, line, kind, 0.0, 0.0};
    return t->nsite++;
}

int llm4d_cuda_work_begin_at(cuda_ctx *cx, int kind, const char *func, int line) {
    cuda_timers *t = cx->tm;
    if (t->n == TM_N) harvest(t, TM_N / 2);
    if (t->n == TM_N) return -1; /* cannot happen (stretches do not nest); time nothing rather than fail */
    const int i = (t->head + t->n) % TM_N;
    tpair *q = &t->p[i];
    if (!q->a) {
        CU_CHECK(cudaEventCreate(&q->a));
        CU_CHECK(cudaEventCreate(&q->b));
    }
    q->kind = kind;
    q->site = site_of(t, kind, func, line);
    t->site[q->site].calls += 1;
    q->closed = 0;
    CU_CHECK(cudaEventRecord(q->a, cx->stream[LLM4D_STREAM_COMPUTE]));
    t->n++;
    t->calls[kind] += 1;
    return i;
}

void llm4d_cuda_work_end(cuda_ctx *cx, int mark) {
    if (mark < 0) return;
    tpair *q = &cx->tm->p[mark];
    CU_CHECK(cudaEventRecord(q->b, cx->stream[LLM4D_STREAM_COMPUTE]));
    q->closed = 1;
}

void llm4d_cuda_timers_read(cuda_ctx *cx, double *seconds, double *calls) {
    CU_CHECK(cudaStreamSynchronize(cx->stream[LLM4D_STREAM_COMPUTE]));
    harvest(cx->tm, TM_N);
    memcpy(seconds, cx->tm->sec, sizeof cx->tm->sec);
    memcpy(calls, cx->tm->calls, sizeof cx->tm->calls);
}
