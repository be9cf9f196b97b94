/* generate.c — KV-cached forward, sampling and the generation loop (see generate.h).
 *
 * Feeding n positions [p0, p0 + n) through one block, with x [n, C] the residual stream of those positions:
 *   ln = LN1(x); qkv = ln Wqkv^T + b; with rotary positions the Q and K heads of qkv turned to positions
 *   p0 .. p0+n-1; the K and V columns of qkv go to the cache rows p0 .. p0+n-1;
 *   for position i and query head h, key/value head h' = h / (NH / NKV):
 *   a = softmax_j<=p0+i (q_ih . K[j,h'] / sqrt(HS)); atty[i,h] = sum_j a_j V[j,h'];
 *   x += atty Wo^T + bo; x += fcproj(act(fc(LN2(x))))
 * which is block.c's forward with dropout off, restricted to the new rows: the rows before p0 only enter through
 * their cached keys and values (already turned to their own positions), which is what makes the cache exact. LN is
 * LayerNorm or RMSNorm, act GELU or SwiGLU, the biases b present or not, as the description says. */
#include "model/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"


/* The weight of `kind` in `layer` (-1: outside the blocks), which the model has when `want` (its description says
 * so) and lacks otherwise (NULL). A kind may be several entries (Llama's q, k and v projections, SwiGLU's gate and
 * up, vocabulary blocks): they must be adjacent, so one product reads them as the one matrix they form. */
static const float *param_ptr(const llm4d_param_table *t, const float *params, int layer, llm4d_param_kind kind,
                              int want) {
    const llm4d_param *first = NULL;
    size_t end = 0;
    for (int i = 0; i < t->n; i++) {
        const llm4d_param *p = &t->p[i];
        if (p->layer != layer || p->kind != kind) continue;
        LLM4D_ASSERT(!first || p->offset == end, "parameter kind %d of layer %d is not one range", (int)kind, layer);
        if (!first) first = p;
        end = p->offset + p->numel;
    }
    LLM4D_ASSERT(!first == !want, "parameter kind %d in layer %d: the table %s it, the model's description %s",
                 (int)kind, layer, first ? "has" : "lacks", want ? "wants it" : "has none");
    return first ? params + first->offset : NULL;
}

typedef struct {
    float **p;
    size_t n;
    llm4d_mem_category c;
} gen_buf;

/* The buffers of g, with their sizes, so create and destroy cannot disagree. */
static int gen_bufs(llm4d_gen *g, gen_buf *b) {
    const size_t C = g->cfg.hidden_size, F = g->cfg.ffn_hidden_size, L = g->cfg.num_layers;
    const size_t R = g->chunk, NH = g->cfg.num_attention_heads, Vp = g->cfg.padded_vocab_size, T = g->T_max;
    const size_t KV = (size_t)g->NKV * (C / NH);
    const llm4d_mem_category A = LLM4D_MEM_ACTIVATIONS, W = LLM4D_MEM_WORKSPACE;
    int k = 0;
    b[k++] = (gen_buf){&g->kc, L * T * KV, A};
    b[k++] = (gen_buf){&g->vc, L * T * KV, A};
    b[k++] = (gen_buf){&g->x, R * C, W};
    b[k++] = (gen_buf){&g->ln, R * C, W};
    b[k++] = (gen_buf){&g->mean, R, W};
    b[k++] = (gen_buf){&g->rstd, R, W};
    b[k++] = (gen_buf){&g->qkv, R * g->QKV, W};
    b[k++] = (gen_buf){&g->atty, R * C, W};
    b[k++] = (gen_buf){&g->proj, R * C, W};
    b[k++] = (gen_buf){&g->fch, R * g->FC, W};
    if (g->cfg.swiglu) b[k++] = (gen_buf){&g->swi, R * F, W};
    b[k++] = (gen_buf){&g->scores, R * NH * T, W};
    b[k++] = (gen_buf){&g->logits, R * Vp, W};
    b[k++] = (gen_buf){&g->last_logits, Vp, W};
    return k;
}

llm4d_code llm4d_gen_create(llm4d_gen *g, const llm4d_gen_weights *w, llm4d_backend *be, llm4d_mem *mem, int T_max,
                            int chunk, llm4d_err *err) {
    const llm4d_model_config *cfg = w->cfg;
    const llm4d_param_table *t = w->table;
    const float *params = w->params;
    memset(g, 0, sizeof *g);
    LLM4D_ASSERT(T_max >= 1 && T_max <= cfg->max_position_embeddings && chunk >= 1,
                 "T_max %d (max_position_embeddings %d), chunk %d", T_max, cfg->max_position_embeddings, chunk);
    g->cfg = *cfg;
    g->be = be;
    g->mem = mem;
    g->T_max = T_max;
    g->chunk = chunk < T_max ? chunk : T_max;
    const int NH = cfg->num_attention_heads, HS = cfg->hidden_size / NH;
    g->NKV = llm4d_model_kv_heads(cfg);
    LLM4D_ASSERT(NH % g->NKV == 0, "%d key/value heads for %d heads", g->NKV, NH);
    g->QKV = (NH + 2 * g->NKV) * HS;
    g->FC = llm4d_model_fc_parts(cfg) * cfg->ffn_hidden_size;
    const int lnb = !cfg->rmsnorm, bias = !cfg->no_bias; /* the description's parts (config.h) */
    g->wte = param_ptr(t, params, -1, LLM4D_P_WTE, 1);
    g->wpe = param_ptr(t, params, -1, LLM4D_P_WPE, !cfg->rope);
    g->lnfw = param_ptr(t, params, -1, LLM4D_P_LNFW, 1);
    g->lnfb = param_ptr(t, params, -1, LLM4D_P_LNFB, lnb);
    const float *head = param_ptr(t, params, -1, LLM4D_P_HEAD, cfg->untied);
    g->head = head ? head : g->wte; /* tied: the embedding */
    g->layers = calloc((size_t)cfg->num_layers, sizeof *g->layers);
    if (!g->layers) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory setting up generation");
    for (int l = 0; l < cfg->num_layers; l++) {
        llm4d_gen_layer *w = &g->layers[l];
        w->ln1w = param_ptr(t, params, l, LLM4D_P_LN1W, 1);
        w->ln1b = param_ptr(t, params, l, LLM4D_P_LN1B, lnb);
        w->qkvw = param_ptr(t, params, l, LLM4D_P_QKVW, 1);
        w->qkvb = param_ptr(t, params, l, LLM4D_P_QKVB, bias);
        w->attprojw = param_ptr(t, params, l, LLM4D_P_ATTPROJW, 1);
        w->attprojb = param_ptr(t, params, l, LLM4D_P_ATTPROJB, bias);
        w->ln2w = param_ptr(t, params, l, LLM4D_P_LN2W, 1);
        w->ln2b = param_ptr(t, params, l, LLM4D_P_LN2B, lnb);
        w->fcw = param_ptr(t, params, l, LLM4D_P_FCW, 1);
        w->fcb = param_ptr(t, params, l, LLM4D_P_FCB, bias);
        w->fcprojw = param_ptr(t, params, l, LLM4D_P_FCPROJW, 1);
        w->fcprojb = param_ptr(t, params, l, LLM4D_P_FCPROJB, bias);
    }
    gen_buf b[16];
    const int nb = gen_bufs(g, b);
    for (int i = 0; i < nb; i++) {
        *b[i].p = be->alloc(be, mem, b[i].c, b[i].n * sizeof(float));
        if (!*b[i].p) {
            llm4d_gen_destroy(g);
            return llm4d_fail(err, LLM4D_ENOMEM, "out of memory allocating the KV cache for %d positions; generate "
                              "fewer tokens (--max_new_tokens) or use a shorter prompt", T_max);
        }
    }
    const size_t vp_bytes = (size_t)cfg->padded_vocab_size * sizeof(float);
    g->tok = be->alloc(be, mem, LLM4D_MEM_WORKSPACE, (size_t)g->chunk * sizeof *g->tok);
    if (!be->host_addressable) g->host_logits = be->alloc_host(be, mem, LLM4D_MEM_WORKSPACE, vp_bytes);
    if (!g->tok || (!be->host_addressable && !g->host_logits)) {
        llm4d_gen_destroy(g);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory setting up generation");
    }
    g->cache_bytes = b[0].n * sizeof(float) * 2;
    return LLM4D_OK;
}

void llm4d_gen_destroy(llm4d_gen *g) {
    if (!g->be) return;
    gen_buf b[16];
    const int nb = gen_bufs(g, b);
    for (int i = 0; i < nb; i++)
        if (*b[i].p) g->be->free(g->be, g->mem, b[i].c, *b[i].p, b[i].n * sizeof(float));
    if (g->tok) g->be->free(g->be, g->mem, LLM4D_MEM_WORKSPACE, g->tok, (size_t)g->chunk * sizeof *g->tok);
    if (g->host_logits)
        g->be->free_host(g->be, g->mem, LLM4D_MEM_WORKSPACE, g->host_logits,
                         (size_t)g->cfg.padded_vocab_size * sizeof(float));
    free(g->layers);
    memset(g, 0, sizeof *g);
}

void llm4d_gen_reset(llm4d_gen *g) { g->pos = 0; }

/* The model's normalisation (LayerNorm, or RMSNorm: no mean, no bias) of rows of x into g->ln. */
static void norm(llm4d_gen *g, const float *x, const float *w, const float *b, int rows) {
    llm4d_backend *be = g->be;
    if (g->cfg.rmsnorm)
        be->rmsnorm_forward(be, llm4d_t32(g->ln), g->rstd, llm4d_ct32(x), w, rows, g->cfg.hidden_size,
                            g->cfg.norm_epsilon);
    else be->layernorm_forward(be, llm4d_t32(g->ln), g->mean, g->rstd, llm4d_ct32(x), w, b, rows, g->cfg.hidden_size);
}

/* Feed n <= chunk tokens; logits for all rows into g->logits when all, else the last row only. */
static void feed_chunk(llm4d_gen *g, const int32_t *tokens, int n, int all) {
    llm4d_backend *be = g->be;
    const int C = g->cfg.hidden_size, F = g->cfg.ffn_hidden_size, T = g->T_max, Vp = g->cfg.padded_vocab_size;
    const int NH = g->cfg.num_attention_heads, HS = C / NH, NKV = g->NKV, KV = NKV * HS, QKV = g->QKV;
    const int p0 = g->pos;
    be->copy_async(be, g->tok, tokens, (size_t)n * sizeof *tokens, LLM4D_H2D, LLM4D_STREAM_COMPUTE);
    be->zero(be, g->x, (size_t)n * C * sizeof(float));
    be->embedding_forward(be, g->x, g->tok, g->wte, 0, Vp, n, C);
    if (g->wpe) be->position_forward(be, g->x, g->wpe + (size_t)p0 * C, n, C, n, 0); /* positions p0 .. p0+n-1 */
    /* rotary positions of the new rows' Q and K heads: row i is token p0 + i of a "sequence" of T_max, so its
     * position (tok0 + i) % T is p0 + i (p0 + n <= T_max) */
    const llm4d_rope_shape rope = {.N = n, .NH = NH + NKV, .HS = HS, .ld = QKV, .T = T, .tok0 = p0,
                                   .theta = g->cfg.rope_theta};
    for (int l = 0; l < g->cfg.num_layers; l++) {
        const llm4d_gen_layer *w = &g->layers[l];
        norm(g, g->x, w->ln1w, w->ln1b, n);
        be->linear_forward(be, llm4d_t32(g->qkv), llm4d_ct32(g->ln), w->qkvw, w->qkvb, n, C, QKV);
        if (g->cfg.rope) be->rope_forward(be, llm4d_t32(g->qkv), llm4d_ct32(g->qkv), rope);
        float *K = g->kc + (size_t)l * T * KV, *V = g->vc + (size_t)l * T * KV;
        const size_t row = (size_t)KV * sizeof(float), src = (size_t)QKV * sizeof(float);
        /* the new rows' K and V columns of qkv (after the NH query heads) into the cache */
        be->copy_2d(be, K + (size_t)p0 * KV, row, g->qkv + C, src, row, (size_t)n, LLM4D_D2D, LLM4D_STREAM_COMPUTE);
        be->copy_2d(be, V + (size_t)p0 * KV, row, g->qkv + C + KV, src, row, (size_t)n, LLM4D_D2D,
                    LLM4D_STREAM_COMPUTE);
        be->attention_cached(be, g->atty, g->qkv, K, V, n, p0, NH, NKV, HS, g->scores, T);
        be->linear_forward(be, llm4d_t32(g->proj), llm4d_ct32(g->atty), w->attprojw, w->attprojb, n, C, C);
        be->add(be, g->x, g->proj, (size_t)n * C);
        norm(g, g->x, w->ln2w, w->ln2b, n);
        be->linear_forward(be, llm4d_t32(g->fch), llm4d_ct32(g->ln), w->fcw, w->fcb, n, C, g->FC);
        if (g->cfg.swiglu) { /* silu(gate) * up, then the down projection */
            be->swiglu_forward(be, llm4d_t32(g->swi), llm4d_ct32(g->fch), n, F);
            be->linear_forward(be, llm4d_t32(g->proj), llm4d_ct32(g->swi), w->fcprojw, w->fcprojb, n, F, C);
        } else {
            be->linear_forward_act(be, llm4d_t32(g->proj), llm4d_ct32(g->fch), LLM4D_ACT_GELU, w->fcprojw, w->fcprojb,
                                   n, F, C);
        }
        be->add(be, g->x, g->proj, (size_t)n * C);
    }
    g->pos += n;
    /* The LM head is the costliest product of a decode step (Vp x C); for the prompt only its last row is needed
     * unless the caller asked for every row. */
    const int first = all ? 0 : n - 1, rows = n - first;
    norm(g, g->x + (size_t)first * C, g->lnfw, g->lnfb, rows);
    be->linear_forward(be, llm4d_t32(g->logits), llm4d_ct32(g->ln), g->head, NULL, rows, C, Vp);
    be->copy(be, g->last_logits, g->logits + (size_t)(rows - 1) * Vp, (size_t)Vp * sizeof(float));
}

llm4d_code llm4d_gen_feed(llm4d_gen *g, const int32_t *tokens, int n, float *logits_all, llm4d_err *err) {
    if (n < 1) return LLM4D_OK;
    if (n > g->T_max - g->pos)
        return llm4d_fail(err, LLM4D_EUSER, "the sequence would be %d tokens long, more than the %d positions "
                          "allowed (max_position_embeddings %d); shorten the prompt or generate fewer tokens",
                          g->pos + n, g->T_max, g->cfg.max_position_embeddings);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= g->cfg.vocab_size)
            return llm4d_fail(err, LLM4D_EUSER, "token id %d is outside the model's vocabulary [0, %d); give ids the "
                              "model knows", (int)tokens[i], g->cfg.vocab_size);
    const size_t Vp = (size_t)g->cfg.padded_vocab_size;
    for (int done = 0; done < n;) {
        const int k = n - done < g->chunk ? n - done : g->chunk;
        feed_chunk(g, tokens + done, k, logits_all != NULL);
        if (logits_all)
            g->be->copy_async(g->be, logits_all + (size_t)done * Vp, g->logits, (size_t)k * Vp * sizeof(float),
                              LLM4D_D2H, LLM4D_STREAM_COMPUTE);
        done += k;
    }
    return LLM4D_OK;
}

/* ---- sampling ---- */

llm4d_code llm4d_sampler_init(llm4d_sampler *smp, llm4d_backend *be, llm4d_mem *mem, const llm4d_sampling *s, int V,
                              llm4d_err *err) {
    memset(smp, 0, sizeof *smp);
    if (!(s->temperature >= 0.0f) || !isfinite(s->temperature))
        return llm4d_fail(err, LLM4D_EUSER, "--temperature must be >= 0 (0: greedy), got %g", s->temperature);
    if (s->top_k < 0) return llm4d_fail(err, LLM4D_EUSER, "--top_k must be >= 0 (0: no cut), got %d", s->top_k);
    if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
        return llm4d_fail(err, LLM4D_EUSER, "--top_p must be in (0, 1] (1: no cut), got %g", s->top_p);
    smp->s = *s;
    smp->V = V;
    if (!be) return LLM4D_OK;
    smp->be = be;
    smp->mem = mem;
    smp->scratch = be->alloc(be, mem, LLM4D_MEM_WORKSPACE, LLM4D_SAMPLE_SCRATCH(V));
    if (!smp->scratch) {
        llm4d_sampler_free(smp);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory setting up sampling");
    }
    return LLM4D_OK;
}

void llm4d_sampler_free(llm4d_sampler *smp) {
    if (smp->scratch) smp->be->free(smp->be, smp->mem, LLM4D_MEM_WORKSPACE, smp->scratch, LLM4D_SAMPLE_SCRATCH(smp->V));
    memset(smp, 0, sizeof *smp);
}

int32_t llm4d_sampler_pick(llm4d_sampler *smp, const float *logits, uint64_t j) {
    LLM4D_ASSERT(smp->be, "a sampler made without a backend only checks its settings");
    return smp->be->sample(smp->be, logits, smp->V, &smp->s, j, smp->scratch);
}

/* ---- the loop ---- */

/* The last position's logits where the host can read them (the token callback's argument). */
static const float *host_logits(llm4d_gen *g) {
    if (!g->host_logits) return g->last_logits; /* device memory is host memory */
    g->be->copy_async(g->be, g->host_logits, g->last_logits, (size_t)g->cfg.padded_vocab_size * sizeof(float),
                      LLM4D_D2H, LLM4D_STREAM_COMPUTE);
    g->be->stream_sync(g->be, LLM4D_STREAM_COMPUTE);
    return g->host_logits;
}

llm4d_code llm4d_generate(llm4d_gen *g, llm4d_sampler *smp, const llm4d_gen_request *req, int32_t *out, int *n_out,
                          llm4d_gen_stats *stats, llm4d_err *err) {
    const int n_prompt = req->n_prompt, max_new = req->max_new;
    memset(stats, 0, sizeof *stats);
    *n_out = 0;
    if (n_prompt < 1) return llm4d_fail(err, LLM4D_EUSER, "the prompt is empty; give at least one token");
    if (n_prompt > g->T_max)
        return llm4d_fail(err, LLM4D_EUSER, "the prompt is %d tokens long, more than the model's %d positions "
                          "(max_position_embeddings %d); shorten the prompt", n_prompt, g->T_max,
                          g->cfg.max_position_embeddings);
    llm4d_gen_reset(g);
    double t0 = llm4d_now();
    LLM4D_TRY(llm4d_gen_feed(g, req->prompt, n_prompt, req->prompt_logits, err));
    stats->prompt_tokens = n_prompt;
    stats->prompt_seconds = llm4d_now() - t0;
    t0 = llm4d_now();
    for (int k = 0; k < max_new; k++) {
        const int32_t id = llm4d_sampler_pick(smp, g->last_logits, (uint64_t)k);
        out[k] = id;
        *n_out = k + 1;
        if (req->on_token) req->on_token(req->ctx, id, host_logits(g));
        if (id == req->eos_id) {
            stats->stopped_at_eos = 1;
            break;
        }
        if (k + 1 == max_new) break;
        if (g->pos == g->T_max) {
            stats->stopped_at_limit = 1;
            break;
        }
        LLM4D_TRY(llm4d_gen_feed(g, &id, 1, NULL, err));
    }
    stats->new_tokens = *n_out;
    stats->new_seconds = llm4d_now() - t0;
    return LLM4D_OK;
}
