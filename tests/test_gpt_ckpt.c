/* test_gpt_ckpt.c — checks of the GPT checkpoint layer (src/ckpt/gpt_ckpt.c).
 *
 * A tiny model (vocab 300 padded to 384, hidden 16, 2 layers) with every element of params, m and v distinct:
 *   - round trip of a whole state, bit-exact, meta.json keeping the caller's keys plus "model" and "format", the
 *     weights stored as whole tensors under the HF names with wte unpadded;
 *   - four writers ("ranks") saving four ranges (cut inside wte's real rows, inside its padding and inside a c_attn
 *     weight), read back whole and as many other ranges, padding rows read as zero;
 *   - a change of padding: saved under vocab padding 384, loaded into a table padded to 512;
 *   - weights only: m and v come back zero with has_optim 0;
 *   - refusals as user errors naming what is wrong: a different hidden size or vocabulary (tensor and both
 *     shapes), more layers (the missing tensor), other heads or fewer layers (meta.json's geometry), a meta.json
 *     edited to another model, a path that does not exist; and nothing is overwritten by a refused load. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tally.h"
#include "ckpt/gpt_ckpt.h"


/* The state of one range [lo, hi) of t (the range's bounds kept in r, which must outlive the state). */
static llm4d_ckpt_state range_of(const llm4d_param_table *t, size_t r[2], size_t lo, size_t hi, float *p, float *m,
                                 float *v) {
    r[0] = lo, r[1] = hi;
    return llm4d_ckpt_state_range(t, r, p, m, v);
}

/* A save of step into dir from one writer. */
static llm4d_ckpt_dest dest(const char *dir, int64_t step, int keep_last) {
    return (llm4d_ckpt_dest){.output_dir = dir, .step = step, .keep_last = keep_last, .tag = ""};
}

static llm4d_model_config tiny(int vocab, int unit, int hidden, int layers, int heads) {
    llm4d_model_config m;
    memset(&m, 0, sizeof m);
    m.vocab_size = vocab;
    m.vocab_size_divisible_unit = unit;
    m.padded_vocab_size = (vocab + unit - 1) / unit * unit;
    m.hidden_size = hidden;
    m.num_layers = layers;
    m.num_attention_heads = heads;
    m.ffn_hidden_size = 4 * hidden;
    m.max_position_embeddings = 32;
    m.hidden_dropout_prob = 0.1f;
    m.attention_probs_dropout_prob = 0.1f;
    m.initializer_range = 0.02f;
    m.eos_token_id = 299;
    return m;
}

/* Distinct values everywhere except wte's padding rows, which a model holds as zero. */
static void fill(const llm4d_param_table *t, float *buf, float base) {
    for (int i = 0; i < t->n; i++) {
        const llm4d_param *p = &t->p[i];
        const size_t cols = p->ndim == 2 ? (size_t)p->shape[1] : 1, real = (size_t)p->rows_real * cols;
        for (size_t j = 0; j < p->numel; j++)
            buf[p->offset + j] = j < real ? base + (float)(p->offset + j) * 0.001f + (float)i : 0.0f;
    }
}

static int same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

static char root[256];

static void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", root, name); }

int main(void) {
    tally T = {0, 0};
    snprintf(root, sizeof root, "/tmp/llm4d_test_gpt_ckpt_%d", (int)getpid());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", root, root);
    if (system(cmd) != 0) return 1;
    llm4d_err err = {0};
    char dir[600], detail[1400];

    llm4d_model_config mc = tiny(300, 128, 16, 2, 2);
    llm4d_param_table t;
    if (llm4d_param_table_build(&t, &mc, NULL, &err)) return printf("table: %s\n", err.msg), 1;
    const size_t N = t.total;
    float *p = malloc(N * 4), *m = malloc(N * 4), *v = malloc(N * 4);
    float *p2 = malloc(N * 4), *m2 = malloc(N * 4), *v2 = malloc(N * 4);
    fill(&t, p, 1.0f);
    fill(&t, m, -2.0f);
    fill(&t, v, 3.0f);
    const llm4d_param *wte = llm4d_param_find(&t, "transformer.wte.weight");
    const llm4d_param *qkv1 = llm4d_param_find(&t, "transformer.h.1.attn.c_attn.weight");
    snprintf(detail, sizeof detail, "total %zu, wte %lldx%lld held", N, (long long)wte->shape[0],
             (long long)wte->shape[1]);
    check(&T, wte->shape[0] == 384 && wte->rows_real == 300, "tiny model's wte is padded to 384 rows", detail);

    /* ---- whole round trip ---- */
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "run", "test");
    cJSON_AddNumberToObject(meta, "consumed_samples", 1234);
    path_of(dir, sizeof dir, "whole");
    size_t rg[2];
    llm4d_ckpt_state cs = range_of(&t, rg, 0, N, p, m, v);
    const llm4d_ckpt_dest d5 = dest(dir, 5, 0);
    llm4d_code rc = llm4d_gpt_ckpt_save(&d5, &mc, &cs, meta, &err);
    check(&T, rc == LLM4D_OK, "save a whole state", rc ? err.msg : "");
    int has = -1;
    int64_t step = -2;
    cJSON *meta_out = NULL;
    memset(p2, 0xff, N * 4);
    memset(m2, 0xff, N * 4);
    memset(v2, 0xff, N * 4);
    cs = range_of(&t, rg, 0, N, p2, m2, v2);
    rc = llm4d_gpt_ckpt_load(dir, &mc, &cs, &has, &meta_out, &step, &err);
    check(&T, rc == LLM4D_OK && has == 1 && step == 5, "load it back (has_optim 1, step 5)", rc ? err.msg : "");
    check(&T, same(p, p2, N) && same(m, m2, N) && same(v, v2, N), "params, m and v equal bit for bit", "");
    {
        const cJSON *run = cJSON_GetObjectItemCaseSensitive(meta_out, "run");
        const cJSON *mo = cJSON_GetObjectItemCaseSensitive(meta_out, "model");
        const cJSON *fo = cJSON_GetObjectItemCaseSensitive(meta_out, "format");
        const cJSON *hs = cJSON_GetObjectItemCaseSensitive(mo, "hidden_size");
        check(&T, cJSON_IsString(run) && !strcmp(run->valuestring, "test") && cJSON_IsNumber(hs) &&
                      hs->valueint == 16 && cJSON_IsObject(fo) && cJSON_GetObjectItemCaseSensitive(meta_out, "files"),
              "meta.json holds the caller's keys, model, format and the store's manifest", "");
    }
    cJSON_Delete(meta_out);
    {
        char f[700];
        snprintf(f, sizeof f, "%s/step_5/model.safetensors", dir);
        llm4d_st_file sf;
        rc = llm4d_st_open(&sf, f, &err);
        const llm4d_st_tensor *tw = rc ? NULL : llm4d_st_find(&sf, "transformer.wte.weight");
        const llm4d_st_tensor *tq = rc ? NULL : llm4d_st_find(&sf, "transformer.h.1.attn.c_attn.weight");
        check(&T, tw && tw->ndim == 2 && tw->shape[0] == 300 && tw->shape[1] == 16 && tq && tq->shape[0] == 48 &&
                      tq->shape[1] == 16 && sf.n == t.n && same(tw->data, p, 300 * 16),
              "model.safetensors: whole tensors under HF names, wte unpadded [300, 16], c_attn [48, 16]",
              rc ? err.msg : "");
        if (!rc) llm4d_st_close(&sf);
    }
    llm4d_model_config back = tiny(1, 1, 1, 1, 1);
    rc = llm4d_gpt_ckpt_read_model(dir, &back, 256, &err);
    check(&T, rc == LLM4D_OK && back.vocab_size == 300 && back.hidden_size == 16 && back.num_layers == 2 &&
                  back.num_attention_heads == 2 && back.ffn_hidden_size == 64 && back.max_position_embeddings == 32 &&
                  back.padded_vocab_size == 512 && back.eos_token_id == 299,
          "read_model gives the geometry back (padded with the caller's unit 256 -> 512)", rc ? err.msg : "");

    /* ---- three ranks ---- */
    const size_t cut1 = wte->offset + 310 * 16 + 5;  /* inside wte's padding rows */
    const size_t cut0 = wte->offset + 123 * 16 + 7;  /* inside wte's real rows */
    const size_t cut2 = qkv1->offset + 17 * 16 + 3;  /* inside a c_attn weight */
    path_of(dir, sizeof dir, "ranks");
    llm4d_ckpt_saver *s;
    rc = llm4d_ckpt_save_begin(&s, dir, 7, &err);
    const size_t cuts[5] = {0, cut0, cut1, cut2, N};
    for (int k = 0; k < 4 && !rc; k++) { /* four writers' ranges, each into its own files */
        char tag[16];
        snprintf(tag, sizeof tag, "-r%d", k);
        cs = range_of(&t, rg, cuts[k], cuts[k + 1], p + cuts[k], m + cuts[k], v + cuts[k]);
        rc = llm4d_gpt_ckpt_add(s, &cs, tag, &err);
    }
    cJSON *m7 = cJSON_CreateObject();
    if (!rc) rc = llm4d_gpt_ckpt_meta(m7, &mc, 1, &err);
    if (!rc) rc = llm4d_ckpt_save_commit(s, m7, 0, &err);
    else llm4d_ckpt_save_abort(s);
    cJSON_Delete(m7);
    check(&T, rc == LLM4D_OK, "save four ranges from four writers into one checkpoint", rc ? err.msg : "");
    memset(p2, 0xff, N * 4);
    memset(m2, 0xff, N * 4);
    memset(v2, 0xff, N * 4);
    cs = range_of(&t, rg, 0, N, p2, m2, v2);
    rc = llm4d_gpt_ckpt_load(dir, &mc, &cs, &has, NULL, NULL, &err);
    check(&T, rc == LLM4D_OK && has == 1 && same(p, p2, N) && same(m, m2, N) && same(v, v2, N),
          "load the whole state from the four ranges, bit-exact", rc ? err.msg : "");
    {
        /* other ranges, including ones that start or end inside the padding */
        size_t cuts[][2] = {{0, 1}, {5, cut1 + 3}, {cut0 - 1, cut0 + 1},
                            {wte->offset + 300 * 16, wte->offset + 384 * 16},
                            {wte->offset + 305 * 16 + 1, cut2 + 100}, {cut2, N}, {N - 1, N}, {17, N - 17}};
        unsigned seed = 12345;
        int ok = 1, k = 0;
        for (int r = 0; r < 40 && ok; r++) {
            size_t lo, hi;
            if (r < (int)(sizeof cuts / sizeof cuts[0])) {
                lo = cuts[r][0];
                hi = cuts[r][1];
            } else {
                seed = seed * 1103515245u + 12345u;
                lo = (seed >> 4) % N;
                seed = seed * 1103515245u + 12345u;
                hi = lo + 1 + (seed >> 4) % (N - lo);
            }
            for (size_t i = 0; i < hi - lo; i++) p2[i] = m2[i] = v2[i] = 7.0f;
            cs = range_of(&t, rg, lo, hi, p2, m2, v2);
            rc = llm4d_gpt_ckpt_load(dir, &mc, &cs, &has, NULL, NULL, &err);
            ok = rc == LLM4D_OK && same(p + lo, p2, hi - lo) && same(m + lo, m2, hi - lo) && same(v + lo, v2, hi - lo);
            snprintf(detail, sizeof detail, "range [%zu, %zu): %s", lo, hi, rc ? err.msg : "data differ");
            k++;
        }
        if (ok) snprintf(detail, sizeof detail, "%d ranges", k);
        check(&T, ok, "load other ranges (padding rows inside them come back zero)", detail);
    }
    {
        float one[1] = {5.0f};
        cs = range_of(&t, rg, wte->offset + 350 * 16, wte->offset + 350 * 16 + 1, one, NULL, NULL);
        rc = llm4d_gpt_ckpt_load(dir, &mc, &cs, NULL, NULL, NULL, &err);
        check(&T, rc == LLM4D_OK && one[0] == 0.0f, "a range of padding only reads as zero", rc ? err.msg : "");
    }

    /* ---- padding change ---- */
    {
        llm4d_model_config mc2 = tiny(300, 256, 16, 2, 2);
        llm4d_param_table t2;
        llm4d_param_table_build(&t2, &mc2, NULL, &err);
        float *q = malloc(t2.total * 4), *qm = malloc(t2.total * 4), *qv = malloc(t2.total * 4);
        for (size_t i = 0; i < t2.total; i++) q[i] = qm[i] = qv[i] = 9.0f;
        path_of(dir, sizeof dir, "ranks");
        cs = range_of(&t2, rg, 0, t2.total, q, qm, qv);
        rc = llm4d_gpt_ckpt_load(dir, &mc2, &cs, &has, NULL, NULL, &err);
        int ok = rc == LLM4D_OK && t2.total > N;
        for (int i = 0; ok && i < t.n; i++) {
            const llm4d_param *a = &t.p[i], *b = &t2.p[i];
            const size_t cols = a->ndim == 2 ? (size_t)a->shape[1] : 1, real = (size_t)a->rows_real * cols;
            ok = !strcmp(a->name, b->name) && same(p + a->offset, q + b->offset, real) &&
                 same(m + a->offset, qm + b->offset, real) && same(v + a->offset, qv + b->offset, real);
            for (size_t j = real; ok && j < b->numel; j++)
                ok = q[b->offset + j] == 0.0f && qm[b->offset + j] == 0.0f && qv[b->offset + j] == 0.0f;
        }
        snprintf(detail, sizeof detail, "wte held %lld rows now",
                 (long long)llm4d_param_find(&t2, "transformer.wte.weight")->shape[0]);
        check(&T, ok, "saved with padding 384, loaded into a table padded to 512: real rows equal, padding zero",
              rc ? err.msg : detail);
        free(q);
        free(qm);
        free(qv);
        llm4d_param_table_free(&t2);
    }

    /* ---- weights only ---- */
    path_of(dir, sizeof dir, "weights");
    cs = range_of(&t, rg, 0, N, p, NULL, NULL);
    const llm4d_ckpt_dest d0 = dest(dir, 0, 0);
    rc = llm4d_gpt_ckpt_save(&d0, &mc, &cs, NULL, &err);
    check(&T, rc == LLM4D_OK, "save weights only", rc ? err.msg : "");
    for (size_t i = 0; i < N; i++) p2[i] = m2[i] = v2[i] = 7.0f;
    has = -1;
    cs = range_of(&t, rg, 0, N, p2, m2, v2);
    rc = llm4d_gpt_ckpt_load(dir, &mc, &cs, &has, NULL, NULL, &err);
    {
        int zero = 1;
        for (size_t i = 0; i < N; i++) zero &= m2[i] == 0.0f && v2[i] == 0.0f;
        check(&T, rc == LLM4D_OK && has == 0 && same(p, p2, N) && zero,
              "weights-only checkpoint: params equal, has_optim 0, m and v zeroed", rc ? err.msg : "");
    }

    /* ---- refusals ---- */
    path_of(dir, sizeof dir, "whole");
    struct {
        llm4d_model_config mc;
        int with_model;
        const char *want[3];
        const char *what;
    } bad[] = {
        {tiny(300, 128, 32, 2, 2), 1, {"transformer.wte.weight", "[300, 16]", "[300, 32]"}, "a different hidden size"},
        {tiny(301, 128, 16, 2, 2), 0, {"transformer.wte.weight", "[300, 16]", "[301, 16]"}, "a different vocabulary"},
        {tiny(300, 128, 16, 3, 2), 0, {"transformer.h.2.", "different model", NULL}, "more layers"},
        {tiny(300, 128, 16, 2, 4), 1, {"num_attention_heads 2", "num_attention_heads 4", NULL}, "other heads"},
        {tiny(300, 128, 16, 1, 2), 1, {"num_layers 2", "num_layers 1", NULL}, "fewer layers"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        llm4d_param_table tb;
        llm4d_param_table_build(&tb, &bad[k].mc, NULL, &err);
        float *q = malloc(tb.total * 4);
        for (size_t i = 0; i < tb.total; i++) q[i] = 7.0f;
        cs = range_of(&tb, rg, 0, tb.total, q, NULL, NULL);
        rc = llm4d_gpt_ckpt_load(dir, bad[k].with_model ? &bad[k].mc : NULL, &cs, NULL, NULL, NULL, &err);
        int ok = rc == LLM4D_EUSER && !strchr(err.msg, '\n');
        for (int w = 0; w < 3 && bad[k].want[w]; w++) ok &= strstr(err.msg, bad[k].want[w]) != NULL;
        int untouched = 1;
        for (size_t i = 0; i < tb.total; i++) untouched &= q[i] == 7.0f;
        char what[128];
        snprintf(what, sizeof what, "refuse %s as a user error naming it, buffer untouched", bad[k].what);
        check(&T, ok && untouched, what, err.msg);
        free(q);
        llm4d_param_table_free(&tb);
    }
    {
        /* meta.json of another model: hidden_size edited, files untouched (the manifest covers tensor files) */
        char mp[700];
        snprintf(mp, sizeof mp, "%s/step_5/meta.json", dir);
        FILE *f = fopen(mp, "rb");
        char buf[8192];
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f) fclose(f);
        buf[n] = 0;
        char *h = strstr(buf, "\"hidden_size\":");
        int edited = 0;
        if (h) {
            char *num = h + strlen("\"hidden_size\":");
            while (*num == ' ' || *num == '\t') num++;
            if (num[0] == '1' && num[1] == '6') num[0] = '3', num[1] = '2', edited = 1;
        }
        f = fopen(mp, "wb");
        if (f) fwrite(buf, 1, n, f), fclose(f);
        cs = range_of(&t, rg, 0, N, p2, NULL, NULL);
        rc = llm4d_gpt_ckpt_load(dir, &mc, &cs, NULL, NULL, NULL, &err);
        check(&T, edited && rc == LLM4D_EUSER && strstr(err.msg, "hidden_size 32") && strstr(err.msg, "hidden_size 16"),
              "refuse a meta.json of another model (hidden_size 32 vs 16)", err.msg);
    }
    path_of(dir, sizeof dir, "does_not_exist");
    cs = range_of(&t, rg, 0, N, p2, NULL, NULL);
        rc = llm4d_gpt_ckpt_load(dir, &mc, &cs, NULL, NULL, NULL, &err);
    check(&T, rc == LLM4D_EUSER && strstr(err.msg, "does not exist"), "refuse a path that does not exist", err.msg);

    /* keep_last passes through */
    path_of(dir, sizeof dir, "keep");
    rc = 0;
    cs = range_of(&t, rg, 0, N, p, NULL, NULL);
    for (int k = 1; k <= 3 && !rc; k++) {
        const llm4d_ckpt_dest dk = dest(dir, k, 2);
        rc = llm4d_gpt_ckpt_save(&dk, &mc, &cs, NULL, &err);
    }
    {
        char a[700], b[700];
        snprintf(a, sizeof a, "%s/step_1", dir);
        snprintf(b, sizeof b, "%s/step_2/meta.json", dir);
        check(&T, rc == LLM4D_OK && access(a, F_OK) != 0 && access(b, F_OK) == 0, "keep_last 2 keeps steps 2 and 3",
              rc ? err.msg : "");
    }

    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) printf("(could not remove %s)\n", root);
    free(p), free(m), free(v), free(p2), free(m2), free(v2);
    cJSON_Delete(meta);
    llm4d_param_table_free(&t);
    return tally_summary(&T);
}
