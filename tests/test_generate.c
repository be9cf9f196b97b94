/* test_generate.c — checks of KV-cached generation and sampling (src/model/generate.c).
 *
 * The oracle for the cache is training's forward (llm4d_gpt_forward, eval mode, dropout off) recomputing the whole
 * sequence at every step. On a random tiny model (every parameter perturbed, so biases and norms matter):
 *   - greedy decoding of 20 tokens equals greedy decoding by full recomputation, token by token, and the logits
 *     each token is drawn from equal the recomputed last row (<= 1e-4 relative to the largest logit: both are fp32
 *     sums of the same terms in other orders, GEMMs of other shapes and the cache's attention against training's,
 *     which measures ~1e-6 here, while a wrong position, head or part moves the logits by 1e-2 or more);
 *   - the prompt's logits, every row, fed in one chunk, in chunks of 3 and of 2, and one token at a time, equal the
 *     recomputed ones;
 *   - for every part of the model's description: GPT-2; Llama (RMSNorm, rotary positions at theta 500000, SwiGLU,
 *     no biases, an untied head) with 4 key/value heads of 4, and with 2 and 1 (grouped-query attention); GPT-2's
 *     family with RMSNorm, SwiGLU, no biases and an untied head; GPT-2's with rotary positions (biases on Q and K
 *     before they turn, LayerNorm, GELU, tied). Training's attention takes one key/value head per head, so the
 *     grouped-query models' oracle is the multi-head model that is the same function: key/value head j's weights
 *     copied to each query head of its group (h / (NH / NKV) = j: Hugging Face's repeat_kv);
 *   - for the cpu and the ref backends;
 *   - the cache stops at T_max; a prompt longer than T_max, an empty prompt and an id outside the vocabulary are
 *     user errors;
 * and the sampler: frequencies of a known distribution under temperature, top_k and top_p within 0.01 of the
 * expected ones over 40000 draws; greedy at temperature 0 and top_k 1; the same seed gives the same tokens and
 * another seed other tokens. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tally.h"
#include "model/generate.h"
#include "model/gpt.h"


#define TMAX 48
#define NEW 20

typedef struct {
    int n, Vp;
    float logits[NEW + 8][512];
} recorder;

static void record(void *ctx, int32_t id, const float *logits) {
    (void)id;
    recorder *r = ctx;
    memcpy(r->logits[r->n++], logits, (size_t)r->Vp * sizeof(float));
}

/* max |a - b| / max |b| over n */
static double rel_err(const float *a, const float *b, int n) {
    double d = 0, m = 0;
    for (int i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

static int32_t argmax(const float *x, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* A model's description (config.h's resolved fields; all zero: GPT-2) and its name in the checks. */
typedef struct {
    const char *name;
    int llama, rmsnorm, rope, swiglu, no_bias, untied, num_kv_heads;
    float rope_theta;
} gen_case;

/* The entry of t holding the same box of the same global tensor as q (a name may be several vocabulary blocks). */
static const llm4d_param *same_entry(const llm4d_param_table *t, const llm4d_param *q) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->p[i].name, q->name) && t->p[i].off[0] == q->off[0]) return &t->p[i];
    return NULL;
}

/* Weights for the grouped-query model mc (NKV key/value heads of NH; Llama's names) in *params, laid out by table t,
 * from the multi-head model g, which is then made the same function: every tensor copied by name; key/value head j
 * of the grouped model is g's head j x group; then g's head h gets the grouped model's head h / group (Hugging
 * Face's repeat_kv). Returns 0 on success. */
static int make_grouped(llm4d_gpt *g, const llm4d_model_config *mc, llm4d_param_table *t, float **params,
                        llm4d_err *err) {
    *params = NULL;
    if (llm4d_param_table_build(t, mc, NULL, err)) return 1;
    *params = calloc(t->total, sizeof(float));
    if (!*params) return 1;
    const int NH = mc->num_attention_heads, NKV = mc->num_kv_heads, group = NH / NKV;
    const size_t HS = (size_t)mc->hidden_size / NH;
    for (int i = 0; i < t->n; i++) {
        const llm4d_param *q = &t->p[i], *p = same_entry(&g->table, q);
        if (!p) return 1;
        float *dst = *params + q->offset, *src = g->params + p->offset;
        if (!strstr(q->name, "k_proj") && !strstr(q->name, "v_proj")) {
            if (p->numel != q->numel) return 1;
            memcpy(dst, src, q->numel * sizeof(float));
            continue;
        }
        const size_t head = HS * (size_t)q->shape[1]; /* one head's rows */
        if (p->numel != (size_t)NH * head || q->numel != (size_t)NKV * head) return 1;
        for (int j = 0; j < NKV; j++) memcpy(dst + j * head, src + (size_t)j * group * head, head * sizeof(float));
        for (int h = 0; h < NH; h++) memcpy(src + h * head, dst + (size_t)(h / group) * head, head * sizeof(float));
    }
    return 0;
}

static void model_checks(tally *T, llm4d_backend *be, const gen_case *c) {
    llm4d_model_config mc;
    memset(&mc, 0, sizeof mc);
    mc.llama = c->llama, mc.rmsnorm = c->rmsnorm, mc.rope = c->rope, mc.swiglu = c->swiglu;
    mc.no_bias = c->no_bias, mc.untied = c->untied, mc.rope_theta = c->rope_theta, mc.norm_epsilon = 1e-5f;
    mc.vocab_size = 500;
    mc.padded_vocab_size = 512;
    mc.hidden_size = 32;
    mc.num_layers = 2;
    mc.num_attention_heads = 4;
    mc.ffn_hidden_size = 128;
    mc.max_position_embeddings = 64;
    mc.hidden_dropout_prob = 0.1f; /* must not act: eval mode */
    mc.attention_probs_dropout_prob = 0.1f;
    mc.initializer_range = 0.3f;   /* larger than GPT-2's so the logits are far from ties */
    mc.eos_token_id = 499;
    llm4d_mem mem = {0};
    llm4d_err err = {0};
    llm4d_gpt g;
    char what[400], detail[1200], tag[120];
    snprintf(tag, sizeof tag, "%s, %s", be->name, c->name);
    /* the oracle: the multi-head model (training's attention has one key/value head per head) */
    if (llm4d_gpt_create_whole(&g, &mc, be, &mem, &(llm4d_gpt_layout){.B = 1, .T = TMAX}, 11, &err)) {
        check(T, 0, "create the model", err.msg);
        return;
    }
    /* perturb every real parameter so biases and norm weights are not 0 and 1 */
    uint32_t st = 99;
    for (int i = 0; i < g.table.n; i++) {
        const llm4d_param *p = &g.table.p[i];
        const size_t real = (size_t)p->rows_real * (p->ndim == 2 ? (size_t)p->shape[1] : 1);
        for (size_t j = 0; j < real; j++) {
            st = st * 1664525u + 1013904223u;
            g.params[p->offset + j] += 0.1f * ((float)(st >> 8) / 16777216.0f - 0.5f);
        }
    }
    llm4d_gen_weights gw = {&mc, &g.table, g.params};
    llm4d_model_config mc_gen = mc;
    llm4d_param_table t_gen = {0};
    float *p_gen = NULL;
    if (c->num_kv_heads && c->num_kv_heads != mc.num_attention_heads) {
        mc_gen.num_kv_heads = c->num_kv_heads;
        const int bad = make_grouped(&g, &mc_gen, &t_gen, &p_gen, &err);
        snprintf(what, sizeof what, "[%s] the grouped-query weights are made, the multi-head oracle the same function",
                 tag);
        check(T, !bad, what, err.msg);
        if (bad) {
            free(p_gen), llm4d_param_table_free(&t_gen), llm4d_gpt_destroy(&g);
            return;
        }
        gw = (llm4d_gen_weights){&mc_gen, &t_gen, p_gen};
    }
    const int Vp = mc.padded_vocab_size, V = mc.vocab_size;
    int32_t seq[TMAX];
    const int32_t prompt[5] = {17, 402, 3, 3, 250};
    int64_t sample_id = 0;

    llm4d_gen gen;
    llm4d_sampler smp;
    llm4d_sampling greedy = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 1};
    llm4d_sampler_init(&smp, be, &mem, &greedy, V, &err);
    static const int chunks[4] = {64, 3, 2, 1}; /* the prompt of 5 in one chunk, 3 + 2, 2 + 2 + 1, 1 at a time */
    for (int ci = 0; ci < 4; ci++) {
        const int chunk = chunks[ci];
        if (llm4d_gen_create(&gen, &gw, be, &mem, TMAX, chunk, &err)) {
            check(T, 0, "create the generator", err.msg);
            break;
        }
        static recorder rec;
        rec.n = 0;
        rec.Vp = Vp;
        static float plog[5 * 512];
        int32_t out[NEW];
        int n_out = 0;
        llm4d_gen_stats stats;
        llm4d_code rc = llm4d_generate(&gen, &smp, &(llm4d_gen_request){prompt, 5, NEW, -1, plog, record, &rec},
                                       out, &n_out, &stats, &err);
        snprintf(what, sizeof what, "[%s, chunk %d] greedy generation of %d tokens runs", tag, chunk, NEW);
        check(T, rc == LLM4D_OK && n_out == NEW && rec.n == NEW, what, rc ? err.msg : "");
        /* the prompt's rows */
        memcpy(seq, prompt, sizeof prompt);
        llm4d_gpt_forward(&g, &(llm4d_micro){.tokens = seq, .sample_ids = &sample_id, .B = 1, .T = 5});
        double worst = 0;
        for (int r = 0; r < 5; r++) worst = fmax(worst, rel_err(plog + r * Vp, g.logits + (size_t)r * Vp, V));
        snprintf(what, sizeof what, "[%s, chunk %d] prompt logits, all 5 rows, equal the full forward's", tag,
                 chunk);
        snprintf(detail, sizeof detail, "max relative error %.2e", worst);
        check(T, worst <= 1e-4, what, detail);
        /* every step against full recomputation */
        int same_tokens = 1, first_bad = -1;
        worst = 0;
        for (int k = 0; k < NEW; k++) {
            const int t = 5 + k;
            llm4d_gpt_forward(&g, &(llm4d_micro){.tokens = seq, .sample_ids = &sample_id, .B = 1, .T = t});
            const float *full = g.logits + (size_t)(t - 1) * Vp;
            const int32_t want = argmax(full, V);
            worst = fmax(worst, rel_err(rec.logits[k], full, V));
            if (want != out[k] && same_tokens) same_tokens = 0, first_bad = k;
            seq[t] = want; /* the recompute path follows its own greedy choice */
        }
        snprintf(what, sizeof what, "[%s, chunk %d] %d greedy tokens equal full-recompute greedy decoding", tag,
                 chunk, NEW);
        snprintf(detail, sizeof detail, "first difference at token %d; tokens %d %d %d %d ...", first_bad, out[0],
                 out[1], out[2], out[3]);
        check(T, same_tokens, what, detail);
        snprintf(what, sizeof what, "[%s, chunk %d] cached logits equal recomputed logits at every step", tag,
                 chunk);
        snprintf(detail, sizeof detail, "max relative error %.2e", worst);
        check(T, worst <= 1e-4, what, detail);
        int distinct = 0;
        for (int k = 1; k < NEW; k++) distinct += out[k] != out[0];
        snprintf(detail, sizeof detail, "%d of %d differ from the first", distinct, NEW - 1);
        snprintf(what, sizeof what, "[%s, chunk %d] the greedy continuation is not one repeated token (the check has "
                 "teeth)", tag, chunk);
        check(T, distinct > 0, what, detail);

        if (chunk == 3) {
            /* eos stops the generation after it is produced */
            int32_t gtok[NEW];
            memcpy(gtok, out, sizeof gtok);
            int first = 0;
            while (gtok[first] != gtok[2]) first++;
            rc = llm4d_generate(&gen, &smp, &(llm4d_gen_request){.prompt = prompt, .n_prompt = 5,
                                .max_new = NEW, .eos_id = gtok[2]}, out, &n_out, &stats, &err);
            snprintf(detail, sizeof detail, "eos %d, %d generated", gtok[2], n_out);
            check(T, rc == LLM4D_OK && n_out == first + 1 && stats.stopped_at_eos && out[first] == gtok[2],
                  "generation stops after the eos token", detail);
            /* the cache limit */
            int32_t longp[TMAX + 1];
            for (int i = 0; i <= TMAX; i++) longp[i] = (i * 37) % V;
            rc = llm4d_generate(&gen, &smp, &(llm4d_gen_request){.prompt = longp, .n_prompt = 30,
                                .max_new = 100, .eos_id = -1}, out, &n_out, &stats, &err);
            snprintf(detail, sizeof detail, "%d generated, limit flag %d", n_out, stats.stopped_at_limit);
            check(T, rc == LLM4D_OK && n_out == TMAX - 30 + 1 && stats.stopped_at_limit,
                  "generation stops when the cache is full (prompt 30 + 19 new for 48 positions)", detail);
            rc = llm4d_generate(&gen, &smp, &(llm4d_gen_request){.prompt = longp, .n_prompt = TMAX + 1,
                                .max_new = 1, .eos_id = -1}, out, &n_out, &stats, &err);
            check(T, rc == LLM4D_EUSER && strstr(err.msg, "prompt is 49 tokens"),
                  "a prompt longer than T_max is refused", err.msg);
            rc = llm4d_generate(&gen, &smp, &(llm4d_gen_request){.prompt = longp, .n_prompt = 0,
                                .max_new = 1, .eos_id = -1}, out, &n_out, &stats, &err);
            check(T, rc == LLM4D_EUSER, "an empty prompt is refused", err.msg);
            const int32_t badp[2] = {1, 500};
            rc = llm4d_generate(&gen, &smp, &(llm4d_gen_request){.prompt = badp, .n_prompt = 2,
                                .max_new = 1, .eos_id = -1}, out, &n_out, &stats, &err);
            check(T, rc == LLM4D_EUSER && strstr(err.msg, "500"), "a token id outside the vocabulary is refused",
                  err.msg);
            /* reproducible sampling */
            llm4d_sampler s1, s2;
            llm4d_sampling a = {.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .seed = 7};
            llm4d_sampling b = a;
            b.seed = 8;
            llm4d_sampler_init(&s1, be, &mem, &a, V, &err);
            llm4d_sampler_init(&s2, be, &mem, &b, V, &err);
            int32_t o1[NEW], o2[NEW], o3[NEW];
            int n1, n2, n3;
            llm4d_generate(&gen, &s1, &(llm4d_gen_request){.prompt = prompt, .n_prompt = 5,
                           .max_new = NEW, .eos_id = -1}, o1, &n1, &stats, &err);
            llm4d_generate(&gen, &s1, &(llm4d_gen_request){.prompt = prompt, .n_prompt = 5,
                           .max_new = NEW, .eos_id = -1}, o2, &n2, &stats, &err);
            llm4d_generate(&gen, &s2, &(llm4d_gen_request){.prompt = prompt, .n_prompt = 5,
                           .max_new = NEW, .eos_id = -1}, o3, &n3, &stats, &err);
            check(T, n1 == NEW && n2 == NEW && !memcmp(o1, o2, sizeof o1), "sampling with the same seed repeats", "");
            check(T, n3 == NEW && memcmp(o1, o3, sizeof o1) != 0, "sampling with another seed gives other tokens", "");
            llm4d_sampler_free(&s1);
            llm4d_sampler_free(&s2);
        }
        llm4d_gen_destroy(&gen);
    }
    llm4d_sampler_free(&smp);
    free(p_gen);
    llm4d_param_table_free(&t_gen);
    llm4d_gpt_destroy(&g);
}

static void sampler_checks(tally *T, llm4d_backend *be) {
    llm4d_err err = {0};
    llm4d_mem mem = {0};
    const float logits[5] = {logf(1), logf(2), logf(3), logf(4), -INFINITY};
    struct {
        llm4d_sampling s;
        double want[5];
        const char *what;
    } cases[] = {
        {{1.0f, 0, 1.0f, 3}, {0.1, 0.2, 0.3, 0.4, 0}, "temperature 1: probabilities 1:2:3:4"},
        {{0.5f, 0, 1.0f, 3}, {1 / 30.0, 4 / 30.0, 9 / 30.0, 16 / 30.0, 0}, "temperature 0.5: squares 1:4:9:16"},
        {{1.0f, 2, 1.0f, 3}, {0, 0, 3 / 7.0, 4 / 7.0, 0}, "top_k 2 keeps the two most probable"},
        {{1.0f, 0, 0.5f, 3}, {0, 0, 3 / 7.0, 4 / 7.0, 0}, "top_p 0.5 keeps 0.4 + 0.3"},
        {{1.0f, 0, 0.3f, 3}, {0, 0, 0, 1, 0}, "top_p 0.3 keeps the most probable only"},
        {{1.0f, 3, 0.6f, 3}, {0, 0, 3 / 7.0, 4 / 7.0, 0}, "top_k 3 then top_p 0.6 (of 0.9 left)"},
        {{0.0f, 0, 1.0f, 3}, {0, 0, 0, 1, 0}, "temperature 0 is greedy"},
        {{2.0f, 1, 1.0f, 3}, {0, 0, 0, 1, 0}, "top_k 1 is greedy"},
    };
    const int draws = 40000;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        llm4d_sampler smp;
        llm4d_sampler_init(&smp, be, &mem, &cases[c].s, 5, &err);
        int count[5] = {0};
        for (int j = 0; j < draws; j++) count[llm4d_sampler_pick(&smp, logits, (uint64_t)j)]++;
        double worst = 0;
        for (int i = 0; i < 5; i++) worst = fmax(worst, fabs((double)count[i] / draws - cases[c].want[i]));
        char detail[200];
        snprintf(detail, sizeof detail, "counts %d %d %d %d %d, max deviation %.4f", count[0], count[1], count[2],
                 count[3], count[4], worst);
        check(T, worst < 0.01, cases[c].what, detail);
        llm4d_sampler_free(&smp);
    }
    {
        /* top_k over a large vocabulary with many ties: every draw is among the k best (ties go to the lower id),
         * and each of them is drawn */
        enum { BIGV = 5000, K = 37 };
        static float big[BIGV];
        static int rank_of[BIGV];
        uint32_t st = 5;
        for (int i = 0; i < BIGV; i++) {
            st = st * 1664525u + 1013904223u;
            big[i] = (float)((st >> 8) % 20) * 0.05f;
        }
        for (int i = 0; i < BIGV; i++) { /* rank in the total order: greater logit first, then lower id */
            int r = 0;
            for (int j = 0; j < BIGV; j++) r += big[j] > big[i] || (big[j] == big[i] && j < i);
            rank_of[i] = r;
        }
        llm4d_sampler smp;
        llm4d_sampling s = {1.0f, K, 1.0f, 11};
        llm4d_sampler_init(&smp, be, &mem, &s, BIGV, &err);
        int outside = 0, seen[K] = {0}, distinct = 0;
        for (int j = 0; j < 20000; j++) {
            const int32_t id = llm4d_sampler_pick(&smp, big, (uint64_t)j);
            if (rank_of[id] >= K) outside++;
            else if (!seen[rank_of[id]]++) distinct++;
        }
        char detail[160];
        snprintf(detail, sizeof detail, "%d draws outside the top %d, %d of them drawn", outside, K, distinct);
        check(T, outside == 0 && distinct == K, "top_k 37 of 5000 tied logits selects exactly the 37 best", detail);
        llm4d_sampler_free(&smp);
    }
    llm4d_sampler smp;
    llm4d_sampling bad[] = {{-1.0f, 0, 1.0f, 0}, {1.0f, -2, 1.0f, 0}, {1.0f, 0, 0.0f, 0}, {1.0f, 0, 1.5f, 0}};
    int refused = 0;
    for (int i = 0; i < 4; i++) refused += llm4d_sampler_init(&smp, be, &mem, &bad[i], 5, &err) == LLM4D_EUSER;
    check(T, refused == 4, "negative temperature, negative top_k, top_p 0 or above 1 are refused", err.msg);
}

int main(void) {
    tally T = {0, 0};
    llm4d_err err = {0};
    llm4d_backend *cpu = NULL, *ref = NULL;
    if (llm4d_backend_cpu_create(&cpu, 0, &err) || llm4d_backend_ref_create(&ref, &err)) {
        printf("backend: %s\n0 passed, 1 failed\n", err.msg);
        return 1;
    }
    static const gen_case cases[] = {
        {"GPT-2", 0, 0, 0, 0, 0, 0, 0, 0.0f},
        {"Llama, 4 kv heads", 1, 1, 1, 1, 1, 1, 4, 500000.0f},
        {"Llama, 2 kv heads", 1, 1, 1, 1, 1, 1, 2, 500000.0f},
        {"Llama, 1 kv head", 1, 1, 1, 1, 1, 1, 1, 10000.0f},
        {"GPT-2 with RMSNorm, SwiGLU, no biases, untied", 0, 1, 0, 1, 1, 1, 0, 0.0f},
        {"GPT-2 with rotary positions", 0, 0, 1, 0, 0, 0, 0, 10000.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) model_checks(&T, cpu, &cases[i]);
    model_checks(&T, ref, &cases[0]);
    model_checks(&T, ref, &cases[2]);
    sampler_checks(&T, cpu);
    cpu->destroy(cpu);
    ref->destroy(ref);
    return tally_summary(&T);
}
