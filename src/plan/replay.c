/* replay.c — making a recording's calls again on a real backend (see replay.h). */
#include "plan/replay.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

size_t llm4d_replay_bytes(const llm4d_rec *rec) {
    size_t n = 0;
    for (int i = 0; i < rec->n_allocs; i++) n += rec->allocs[i].bytes;
    return n;
}

llm4d_code llm4d_replay_init(llm4d_replay *r, const llm4d_rec *rec, llm4d_backend *be, llm4d_err *err) {
    memset(r, 0, sizeof *r);
    r->rec = rec, r->be = be;
    r->real = calloc((size_t)rec->n_allocs + 1, sizeof *r->real);
    if (!r->real) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    for (int i = 0; i < rec->n_allocs; i++) {
        const size_t b = rec->allocs[i].bytes ? rec->allocs[i].bytes : 64;
        r->real[i] = be->alloc(be, &r->mem, LLM4D_MEM_WORKSPACE, b);
        if (!r->real[i]) {
            llm4d_replay_free(r);
            return llm4d_fail(err, LLM4D_ENOMEM, "out of memory replaying the model's calls");
        }
        r->bytes += b;
    }
    return LLM4D_OK;
}

void llm4d_replay_free(llm4d_replay *r) {
    for (int i = 0; r->real && i < r->rec->n_allocs; i++)
        if (r->real[i])
            r->be->free(r->be, &r->mem, LLM4D_MEM_WORKSPACE, r->real[i],
                        r->rec->allocs[i].bytes ? r->rec->allocs[i].bytes : 64);
    free(r->real);
    r->real = NULL;
}

/* The real address of fake address a (NULL for 0; *ok = 0 when a is not one of the recording's). */
static void *tr(const llm4d_replay *r, uintptr_t a, int *ok) {
    if (!a) return NULL;
    const llm4d_rc_alloc *x = llm4d_rec_find(r->rec, a);
    if (!x) {
        *ok = 0;
        return NULL;
    }
    return (char *)r->real[x - r->rec->allocs] + (a - x->base);
}

#define F(i) ((float *)tr(r, c->p[i], &ok))
#define I32(i) ((int32_t *)tr(r, c->p[i], &ok))
/* pointer argument i as the typed tensor it was recorded as (llm4d_rc_call.ty) */
#define T(i) llm4d_t(tr(r, c->p[i], &ok), llm4d_rc_type(c, i))
#define CT(i) llm4d_ct(tr(r, c->p[i], &ok), llm4d_rc_type(c, i))

/* Make one call; 0 when it cannot be (a pointer outside the recording). */
static int call(llm4d_replay *r, const llm4d_rc_call *c) {
    llm4d_backend *be = r->be;
    int ok = 1;
    const int N = (int)c->d[0], C = (int)c->d[1];
    const llm4d_dropout drop = {.p = c->drop, .seed = 1, .stream = 1,
                                .sample_ids = (const int64_t *)tr(r, c->p[7], &ok), .T = (int)c->aux[2],
                                .tok0 = c->aux[3]};
    const llm4d_attn_shape sh = {.B = (int)c->d[0], .T = (int)c->d[1], .NH = (int)c->d[2], .HS = (int)c->d[3],
                                 .head0 = (int)c->aux[0], .NH_total = (int)c->aux[1], .NKV = (int)c->d[4]};
    const llm4d_rope_shape rope = {.N = N, .NH = C, .HS = (int)c->d[2], .ld = (int)c->d[3], .T = (int)c->aux[0],
                                   .tok0 = c->aux[1], .theta = 10000.0f};
    /* translate first: a call with a pointer the recording does not know is not made */
    void *p[LLM4D_RC_PTRS];
    for (int i = 0; i < LLM4D_RC_PTRS; i++) p[i] = tr(r, c->p[i], &ok);
    if (!ok) return 0;
    (void)p;
    switch (c->op) {
    case LLM4D_RC_LINEAR_FWD:
        be->linear_forward_act(be, T(0), CT(1), (llm4d_act)c->d[3], F(2), F(3), N, C, (int)c->d[2]);
        break;
    case LLM4D_RC_LINEAR_BWD:
        be->linear_backward_act(be, T(0), (llm4d_store)c->d[7], F(1), F(2), CT(3), CT(4), (llm4d_act)c->d[3], F(5),
                                N, C, (int)c->d[2]);
        break;
    case LLM4D_RC_EMBED_FWD:
        be->embedding_forward(be, F(0), I32(1), F(2), (int)c->aux[0], (int)c->d[0], (int)c->d[1], (int)c->d[2]);
        break;
    case LLM4D_RC_EMBED_BWD:
        be->embedding_backward(be, F(0), F(1), I32(2), (int)c->aux[0], (int)c->d[0], (int)c->d[1], (int)c->d[2]);
        break;
    case LLM4D_RC_POS_FWD: be->position_forward(be, F(0), F(1), N, C, (int)c->d[2], c->aux[0]); break;
    case LLM4D_RC_POS_BWD: be->position_backward(be, F(0), F(1), N, C, (int)c->d[2], c->aux[0]); break;
    case LLM4D_RC_BIAS_FWD: be->bias_forward(be, F(0), F(1), N, C); break;
    case LLM4D_RC_BIAS_BWD: be->bias_backward(be, F(0), CT(1), N, C); break;
    case LLM4D_RC_LN_FWD: be->layernorm_forward(be, T(0), F(1), F(2), CT(3), F(4), F(5), N, C); break;
    case LLM4D_RC_LN_BWD:
        be->layernorm_backward(be, T(0), F(1), F(2), CT(3), CT(4), F(5), F(6), F(7), N, C);
        break;
    case LLM4D_RC_GELU_FWD: be->gelu_forward(be, T(0), CT(1), (size_t)c->d[0]); break;
    case LLM4D_RC_GELU_BWD: be->gelu_backward(be, T(0), CT(1), CT(2), (size_t)c->d[0]); break;
    case LLM4D_RC_ATTN_FWD: be->attention_forward(be, T(0), F(1), CT(2), sh, &drop); break;
    case LLM4D_RC_ATTN_BWD: be->attention_backward(be, T(0), CT(1), CT(2), CT(3), F(4), sh, &drop); break;
    case LLM4D_RC_DROP_FWD: be->dropout_forward(be, T(0), CT(1), N, C, &drop); break;
    case LLM4D_RC_DROP_BWD: be->dropout_backward(be, T(0), CT(1), N, C, &drop); break;
    case LLM4D_RC_DROPADD_FWD: be->dropout_add_forward(be, T(0), CT(1), CT(2), N, C, &drop); break;
    case LLM4D_RC_DROPADD_BWD: be->dropout_add_backward(be, T(0), T(1), CT(2), N, C, &drop); break;
    case LLM4D_RC_XENT_FWD:
        be->xent_forward(be, F(0), CT(1), I32(2), N, C, (int)c->aux[0], (int)c->aux[1], (int)c->d[2]);
        break;
    case LLM4D_RC_XENT_RESCALE: be->xent_rescale(be, F(0), F(1), N); break;
    case LLM4D_RC_XENT_BWD:
        be->xent_backward(be, F(0), T(1), CT(2), F(3), I32(4), F(5), N, C, (int)c->aux[0], (int)c->aux[1]);
        break;
    case LLM4D_RC_ADAMW:
        be->adamw(be, F(0), F(1), F(2), F(3), (size_t)c->d[0], 1e-4f, 0.9f, 0.95f, 1e-8f, 0.01f, 1, 1.0f, (int)c->d[1]);
        break;
    case LLM4D_RC_SUMSQ: be->sumsq(be, F(0), (size_t)c->d[0]); break;
    case LLM4D_RC_DOT:
        if (c->p[2]) be->dot_acc(be, (double *)tr(r, c->p[2], &ok), F(0), F(1), (size_t)c->d[0]);
        else be->dot(be, F(0), F(1), (size_t)c->d[0]);
        break;
    case LLM4D_RC_ADD: be->add(be, F(0), F(1), (size_t)c->d[0]); break;
    case LLM4D_RC_SCALE: be->scale(be, F(0), 1.0f, (size_t)c->d[0]); break;
    case LLM4D_RC_ZERO: be->zero(be, tr(r, c->p[0], &ok), (size_t)c->d[0]); break;
    case LLM4D_RC_COPY: be->copy(be, tr(r, c->p[0], &ok), tr(r, c->p[1], &ok), (size_t)c->d[0]); break;
    case LLM4D_RC_CONVERT:
        if (!be->convert) return 0;
        be->convert(be, T(0), CT(1), (size_t)c->d[0]);
        break;
    /* the Llama family's kernels; eps and theta decide no cost and are not recorded: Llama's values */
    case LLM4D_RC_RMSNORM_FWD: be->rmsnorm_forward(be, T(0), F(1), CT(2), F(3), N, C, 1e-5f); break;
    case LLM4D_RC_RMSNORM_BWD: be->rmsnorm_backward(be, T(0), F(1), CT(2), CT(3), F(4), F(5), N, C); break;
    case LLM4D_RC_ROPE_FWD: be->rope_forward(be, T(0), CT(1), rope); break;
    case LLM4D_RC_ROPE_BWD: be->rope_backward(be, T(0), CT(1), rope); break;
    case LLM4D_RC_SWIGLU_FWD: be->swiglu_forward(be, T(0), CT(1), N, C); break;
    case LLM4D_RC_SWIGLU_BWD: be->swiglu_backward(be, T(0), CT(1), CT(2), N, C); break;
    default: return 0;
    }
    return 1;
}

void llm4d_replay_run(llm4d_replay *r, int lo, int hi, double (*s)[LLM4D_WORK_N]) {
    llm4d_backend *be = r->be;
    for (int i = lo; i < hi; i++) {
        const llm4d_rc_call *c = &r->rec->calls[i];
        double *out = s ? s[i - lo] : NULL;
        if (out) memset(out, 0, LLM4D_WORK_N * sizeof *out);
        if (c->op >= LLM4D_RC_NKERNELS) continue;
        llm4d_work_stats w0, w1;
        if (be->work_stats) be->work_stats(be, &w0);
        const double t0 = omp_get_wtime();
        const int made = call(r, c);
        be->stream_sync(be, LLM4D_STREAM_COMPUTE);
        const double t = omp_get_wtime() - t0;
        if (!out) continue;
        if (!made) {
            out[0] = -1;
            continue;
        }
        /* the wall time, split in the proportions of the backend's own timers (all of it to the call's kind when
         * they said nothing) */
        double timed = 0, parts[LLM4D_WORK_N] = {0};
        if (be->work_stats) {
            be->work_stats(be, &w1);
            for (int k = 0; k < LLM4D_WORK_N; k++) parts[k] = w1.seconds[k] - w0.seconds[k], timed += parts[k];
        }
        if (timed > 0)
            for (int k = 0; k < LLM4D_WORK_N; k++) out[k] = t * parts[k] / timed;
        else
            out[llm4d_rc_kind(c)] = t;
    }
}
