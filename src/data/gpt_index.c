/* gpt_index.c — PaddleNLP's GPT sample index (doc_idx, sample_idx, shuffle_idx), its cache, and item reads
 * (see gpt_index.h; the algorithm is reference/paddle-gpt.md §8, from PaddleNLP's gpt-3 dygraph dataset.py and
 * build_sample_idx in data_tools/helpers.cpp).
 *
 * Every number that decides the sample order is computed the way Python/numpy computes it: the split weights as
 * doubles divided by their sum in Python's order and rounded half-to-even (rint), the epoch count as the first E
 * with (E*T - 1) // L >= N, the 0.80 threshold as int(0.80 * per_epoch) in double, the windows by the helper's
 * integer loop (zero-length documents included), and the shuffles by numpy's legacy MT19937 (mt19937.h).
 *
 * A cache is trusted only when its sidecar matches exactly and the arrays pass cheap structural checks (shapes,
 * ranges, shuffle_idx a permutation), because a stale or damaged index silently trains on the wrong windows or
 * reads outside the corpus. */
#define _GNU_SOURCE
#include "data/gpt_index.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/mt19937.h"
#include "data/npz.h"

static const char *split_name(llm4d_split_kind k) {
    return k == LLM4D_SPLIT_TRAIN ? "train" : k == LLM4D_SPLIT_VALID ? "valid" : "test";
}

llm4d_code llm4d_gpt_split_bounds(const char *split, int64_t n_docs, int64_t bounds[4], llm4d_err *err) {
    double w[3] = {0, 0, 0};
    int n = 0;
    char sep = strchr(split, ',') ? ',' : strchr(split, '/') ? '/' : 0;
    const char *p = split;
    for (;;) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        while (*end == ' ') end++;
        if (end == p || errno || !isfinite(v) || v < 0 || (*end && *end != sep) || n == 3)
            return llm4d_fail(err, LLM4D_EUSER, "split '%s' is not up to three non-negative numbers such as 949,50,1",
                              split);
        w[n++] = v;
        if (!*end) break;
        p = end + 1;
    }
    double sum = 0;
    for (int i = 0; i < 3; i++) sum += w[i];
    if (!(sum > 0)) return llm4d_fail(err, LLM4D_EUSER, "split '%s' sums to 0; give a positive weight", split);
    bounds[0] = 0;
    for (int i = 0; i < 3; i++) bounds[i + 1] = bounds[i] + (int64_t)rint(w[i] / sum * (double)n_docs);
    int64_t diff = bounds[3] - n_docs;
    for (int i = 1; i < 4; i++) bounds[i] -= diff;
    return LLM4D_OK;
}

int64_t llm4d_gpt_num_samples(llm4d_split_kind kind, int64_t global_batch, int64_t max_steps, int64_t eval_freq,
                              int64_t eval_iters) {
    switch (kind) {
    case LLM4D_SPLIT_TRAIN: return global_batch * max_steps;
    case LLM4D_SPLIT_VALID: return global_batch * (max_steps / (eval_freq > 0 ? eval_freq : 1) + 1) * eval_iters;
    case LLM4D_SPLIT_TEST: return global_batch * eval_iters * 10;
    }
    return 0;
}

void llm4d_gpt_index_free(llm4d_gpt_index *ix) {
    free(ix->doc_idx);
    free(ix->sample_idx);
    free(ix->shuffle_u32);
    free(ix->shuffle_i64);
    memset(ix, 0, sizeof *ix);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* building */

static llm4d_code build_arrays(llm4d_gpt_index *ix, uint32_t seed, llm4d_err *err) {
    const llm4d_corpus *c = ix->corpus;
    int64_t nd = ix->doc_end - ix->doc_begin, L = ix->seq_len;
    ix->n_doc_idx = ix->num_epochs * nd;
    ix->doc_idx = malloc((size_t)ix->n_doc_idx * sizeof *ix->doc_idx);
    ix->sample_idx = malloc((size_t)(ix->n_samples + 1) * 2 * sizeof *ix->sample_idx);
    int wide = ix->n_samples >= (int64_t)UINT32_MAX - 1;
    if (wide) ix->shuffle_i64 = malloc((size_t)(ix->n_samples ? ix->n_samples : 1) * sizeof *ix->shuffle_i64);
    else ix->shuffle_u32 = malloc((size_t)(ix->n_samples ? ix->n_samples : 1) * sizeof *ix->shuffle_u32);
    if (!ix->doc_idx || !ix->sample_idx || (!ix->shuffle_i64 && !ix->shuffle_u32))
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory for a sample index of %lld samples",
                          (long long)ix->n_samples);
    for (int64_t e = 0, k = 0; e < ix->num_epochs; e++)
        for (int64_t d = ix->doc_begin; d < ix->doc_end; d++) ix->doc_idx[k++] = (int32_t)d;

    /* build_sample_idx: row s locates flat token s*L; a window is L+1 tokens, the last shared with the next */
    int32_t *si = ix->sample_idx;
    int64_t d = 0;
    int32_t off = 0;
    si[0] = 0;
    si[1] = 0;
    for (int64_t s = 1; s <= ix->n_samples; s++) {
        int64_t rem = L + 1;
        while (rem != 0) {
            LLM4D_ASSERT(d < ix->n_doc_idx, "sample %lld ran past doc_idx (%lld entries)", (long long)s,
                         (long long)ix->n_doc_idx);
            int64_t doc_len = c->lens[ix->doc_idx[d]] - off;
            rem -= doc_len;
            if (rem <= 0) {
                off += (int32_t)(rem + doc_len - 1);
                rem = 0;
            } else {
                d++;
                off = 0;
            }
        }
        si[2 * s] = (int32_t)d;
        si[2 * s + 1] = off;
    }

    /* _build_shuffle_idx: arange of the first block shuffled, then the rest shuffled, one generator */
    int64_t n = ix->n_samples, n_first = n;
    if (ix->separate_last_epoch) n_first = ((ix->num_epochs - 1) * ix->tokens_per_epoch - 1) / L;
    llm4d_mt19937 rng;
    llm4d_mt19937_seed(&rng, seed);
    if (wide) {
        for (int64_t i = 0; i < n; i++) ix->shuffle_i64[i] = i;
        llm4d_mt19937_shuffle_i64(&rng, ix->shuffle_i64, n_first);
        llm4d_mt19937_shuffle_i64(&rng, ix->shuffle_i64 + n_first, n - n_first);
    } else {
        for (int64_t i = 0; i < n; i++) ix->shuffle_u32[i] = (uint32_t)i;
        llm4d_mt19937_shuffle_u32(&rng, ix->shuffle_u32, n_first);
        llm4d_mt19937_shuffle_u32(&rng, ix->shuffle_u32 + n_first, n - n_first);
    }
    return LLM4D_OK;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* cache */

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static void derive_prefix(const char *path, char *out, size_t cap) {
    static const char *suffixes[] = {"_ids.npz", "_ids.npy", "_idx.npz", ".bin", ".idx", ".npz"};
    size_t n = strlen(path);
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++)
        if (ends_with(path, suffixes[i])) {
            n -= strlen(suffixes[i]);
            break;
        }
    snprintf(out, cap, "%.*s", (int)n, path);
}

static void sidecar_text(const llm4d_gpt_index *ix, const int64_t bounds[4], uint32_t seed, llm4d_split_kind kind,
                         char *out, size_t cap) {
    const llm4d_corpus *c = ix->corpus;
    struct stat st;
    memset(&st, 0, sizeof st);
    stat(c->path, &st);
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the document lengths */
    const unsigned char *p = (const unsigned char *)c->lens;
    for (int64_t i = 0; i < c->n_docs * 4; i++) h = (h ^ p[i]) * 1099511628211ull;
    snprintf(out, cap,
             "llm4d gpt sample index, version 1 (PaddleNLP gpt-3 dygraph algorithm)\n"
             "corpus %s\nbytes %lld mtime %lld.%09ld docs %lld tokens %lld lens_fnv1a %016llx\n"
             "split %s bounds %lld %lld %lld %lld\nseed %u seq_len %d num_samples %lld\n",
             strrchr(c->path, '/') ? strrchr(c->path, '/') + 1 : c->path, (long long)st.st_size,
             (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec,
             (long long)c->n_docs, (long long)c->n_tokens, (unsigned long long)h, split_name(kind),
             (long long)bounds[0], (long long)bounds[1], (long long)bounds[2], (long long)bounds[3], seed, ix->seq_len,
             (long long)ix->num_samples);
}

static int file_equals(const char *path, const char *text) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = strlen(text);
    char *buf = malloc(n + 2);
    size_t got = buf ? fread(buf, 1, n + 1, f) : 0;
    fclose(f);
    int eq = buf && got == n && !memcmp(buf, text, n);
    free(buf);
    return eq;
}

/* Load the three arrays if they exist and hold what this index must hold; 0 otherwise (then we rebuild). */
static int load_cached(llm4d_gpt_index *ix) {
    char path[1200];
    llm4d_array a[3];
    memset(a, 0, sizeof a);
    static const char *which[3] = {"doc", "sample", "shuffle"};
    llm4d_err e;
    int ok = 1;
    for (int k = 0; k < 3 && ok; k++) {
        snprintf(path, sizeof path, "%s_%s_idx.npy", ix->cache_base, which[k]);
        ok = llm4d_npy_read(path, &a[k], &e) == LLM4D_OK;
    }
    int64_t n = ix->n_samples, ndi = ix->n_doc_idx;
    int wide = n >= (int64_t)UINT32_MAX - 1;
    ok = ok && a[0].dtype == LLM4D_DT_I32 && a[0].ndim == 1 && a[0].shape[0] == ndi;
    ok = ok && a[1].dtype == LLM4D_DT_I32 && a[1].ndim == 2 && a[1].shape[0] == n + 1 && a[1].shape[1] == 2;
    ok = ok && a[2].dtype == (wide ? LLM4D_DT_I64 : LLM4D_DT_U32) && a[2].ndim == 1 && a[2].shape[0] == n;
    if (ok) {
        const int32_t *di = a[0].data, *si = a[1].data;
        int64_t nd = ix->doc_end - ix->doc_begin;
        for (int64_t k = 0; k < ndi && ok; k++) ok = di[k] == (int32_t)(ix->doc_begin + k % nd);
        for (int64_t s = 0; s <= n && ok; s++) {
            int32_t d = si[2 * s], off = si[2 * s + 1];
            ok = d >= 0 && d < ndi && off >= 0 && (s == 0 || off < ix->corpus->lens[di[d]]) &&
                 (s == 0 || d > si[2 * s - 2] || (d == si[2 * s - 2] && off > si[2 * s - 1]));
        }
        uint8_t *seen = ok ? calloc((size_t)(n / 8 + 1), 1) : NULL;
        ok = ok && seen;
        for (int64_t i = 0; i < n && ok; i++) {
            int64_t v = wide ? ((int64_t *)a[2].data)[i] : (int64_t)((uint32_t *)a[2].data)[i];
            ok = v >= 0 && v < n && !(seen[v / 8] & (1u << (v % 8)));
            if (ok) seen[v / 8] |= (uint8_t)(1u << (v % 8));
        }
        free(seen);
    }
    if (!ok) {
        for (int k = 0; k < 3; k++) llm4d_array_free(&a[k]);
        return 0;
    }
    /* take ownership (npy_read hands out malloc'ed copies) */
    ix->doc_idx = a[0].data;
    ix->sample_idx = a[1].data;
    if (wide) ix->shuffle_i64 = a[2].data;
    else ix->shuffle_u32 = a[2].data;
    return 1;
}

static llm4d_code write_cache(llm4d_gpt_index *ix, const char *sidecar_path, const char *sidecar, llm4d_err *err) {
    if (unlink(sidecar_path) != 0 && errno != ENOENT)
        return llm4d_fail(err, LLM4D_EUSER, "cannot replace %s: %s", sidecar_path, strerror(errno));
    int wide = ix->shuffle_i64 != NULL;
    llm4d_array a[3] = {
        {.name = "doc_idx", .dtype = LLM4D_DT_I32, .ndim = 1, .shape = {ix->n_doc_idx}, .data = ix->doc_idx,
         .nbytes = (size_t)ix->n_doc_idx * 4},
        {.name = "sample_idx", .dtype = LLM4D_DT_I32, .ndim = 2, .shape = {ix->n_samples + 1, 2},
         .data = ix->sample_idx, .nbytes = (size_t)(ix->n_samples + 1) * 8},
        {.name = "shuffle_idx", .dtype = wide ? LLM4D_DT_I64 : LLM4D_DT_U32, .ndim = 1, .shape = {ix->n_samples},
         .data = wide ? (void *)ix->shuffle_i64 : (void *)ix->shuffle_u32,
         .nbytes = (size_t)ix->n_samples * (wide ? 8 : 4)},
    };
    static const char *which[3] = {"doc", "sample", "shuffle"};
    for (int k = 0; k < 3; k++) {
        char path[1200];
        snprintf(path, sizeof path, "%s_%s_idx.npy", ix->cache_base, which[k]);
        LLM4D_TRY(llm4d_npy_write(path, &a[k], err));
    }
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", sidecar_path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    int ok = f && fputs(sidecar, f) >= 0;
    if (f) ok = (fflush(f) == 0 && fsync(fileno(f)) == 0) & (fclose(f) == 0) & ok;
    if (!ok || rename(tmp, sidecar_path) != 0) {
        int e = errno;
        unlink(tmp);
        return llm4d_fail(err, LLM4D_EUSER, "cannot write %s: %s", sidecar_path, strerror(e));
    }
    return LLM4D_OK;
}

/* ---------------------------------------------------------------------------------------------------------- */

llm4d_code llm4d_gpt_index_build(llm4d_gpt_index *ix, const llm4d_corpus *c, const llm4d_gpt_index_opts *o,
                                 llm4d_err *err) {
    memset(ix, 0, sizeof *ix);
    const char *name = split_name(o->kind);
    if (o->seed < 0 || o->seed > (int64_t)UINT32_MAX)
        return llm4d_fail(err, LLM4D_EUSER, "seed %lld is outside numpy RandomState's range 0..4294967295",
                          (long long)o->seed);
    if (o->seq_len < 1) return llm4d_fail(err, LLM4D_EUSER, "max_seq_len %d must be positive", o->seq_len);
    if (o->num_samples < 0)
        return llm4d_fail(err, LLM4D_EUSER, "%s needs %lld samples; must be >= 0", name, (long long)o->num_samples);
    int64_t bounds[4];
    LLM4D_TRY(llm4d_gpt_split_bounds(o->split ? o->split : "949,50,1", c->n_docs, bounds, err));
    ix->corpus = c;
    ix->seq_len = o->seq_len;
    ix->num_samples = o->num_samples;
    ix->doc_begin = bounds[o->kind];
    ix->doc_end = bounds[o->kind + 1];
    if (ix->doc_end <= ix->doc_begin)
        return llm4d_fail(err, LLM4D_EUSER, "split %s gives the %s set no documents (the corpus has %lld); give it a "
                          "larger share or use a larger corpus", o->split, name, (long long)c->n_docs);
    int64_t L = o->seq_len, T = c->doc_start[ix->doc_end] - c->doc_start[ix->doc_begin];
    ix->tokens_per_epoch = T;
    if (T < 2)
        return llm4d_fail(err, LLM4D_EUSER, "the %s set (documents %lld..%lld) holds %lld tokens; it needs at least 2",
                          name, (long long)ix->doc_begin, (long long)ix->doc_end - 1, (long long)T);
    if (o->num_samples > ((int64_t)1 << 62) / L)
        return llm4d_fail(err, LLM4D_EUSER, "%lld samples of %lld tokens is beyond any corpus",
                          (long long)o->num_samples, (long long)L);
    /* _num_epochs: the first E >= 1 with (E*T - 1) // L >= N, i.e. E*T >= N*L + 1 */
    int64_t need = o->num_samples * L + 1;
    ix->num_epochs = need <= T ? 1 : (need + T - 1) / T;
    ix->n_samples = (ix->num_epochs * T - 1) / L;
    int64_t nd = ix->doc_end - ix->doc_begin;
    if (ix->num_epochs > INT32_MAX / nd)
        return llm4d_fail(err, LLM4D_EUSER,
                          "the %s index would list %lld x %lld documents, more than PaddleNLP's int32 sample_idx "
                          "holds; use fewer samples or longer documents",
                          name, (long long)ix->num_epochs, (long long)nd);
    if (ix->num_epochs > 1) {
        int64_t n_minus1 = ((ix->num_epochs - 1) * T - 1) / L, last = o->num_samples - n_minus1;
        int64_t per_epoch = (T - 1) / L;
        ix->separate_last_epoch = last < (int64_t)(0.80 * (double)per_epoch);
    }
    ix->n_doc_idx = ix->num_epochs * nd;

    char prefix[1024], sidecar_path[1200], sidecar[4096];
    if (o->cache_prefix) snprintf(prefix, sizeof prefix, "%s", o->cache_prefix);
    else derive_prefix(c->path, prefix, sizeof prefix);
    if (prefix[0]) {
        snprintf(ix->cache_base, sizeof ix->cache_base, "%.1000s_gpt_%s_indexmap_%lldns_%dsl", prefix, name,
                 (long long)o->num_samples, o->seq_len);
        snprintf(sidecar_path, sizeof sidecar_path, "%s.llm4d", ix->cache_base);
        sidecar_text(ix, bounds, (uint32_t)o->seed, o->kind, sidecar, sizeof sidecar);
        if (file_equals(sidecar_path, sidecar) && load_cached(ix)) {
            ix->from_cache = 1;
            return LLM4D_OK;
        }
    }
    llm4d_code rc = build_arrays(ix, (uint32_t)o->seed, err);
    if (rc == LLM4D_OK && prefix[0] && o->write_cache) {
        rc = write_cache(ix, sidecar_path, sidecar, err);
        if (rc != LLM4D_OK)
            llm4d_wrap(err, "writing the %s sample index cache (make the data directory writable, or disable the "
                       "cache)", name);
        ix->wrote_cache = rc == LLM4D_OK;
    }
    if (rc != LLM4D_OK) llm4d_gpt_index_free(ix);
    return rc;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* items */

int64_t llm4d_gpt_index_window(const llm4d_gpt_index *ix, int64_t i) {
    int64_t n = ix->n_samples;
    LLM4D_ASSERT(n > 0 && i >= 0, "item %lld of an index of %lld samples", (long long)i, (long long)n);
    i %= n;
    return ix->shuffle_i64 ? ix->shuffle_i64[i] : (int64_t)ix->shuffle_u32[i];
}

void llm4d_gpt_index_get(const llm4d_gpt_index *ix, int64_t i, int32_t *tokens) {
    const llm4d_corpus *c = ix->corpus;
    int64_t j = llm4d_gpt_index_window(ix, i);
    const int32_t *si = ix->sample_idx + 2 * j;
    int64_t df = si[0], of = si[1], dl = si[2], ol = si[3], k = 0;
    for (int64_t p = df; p <= dl; p++) {
        int32_t d = ix->doc_idx[p];
        int64_t from = p == df ? of : 0, to = p == dl ? ol + 1 : c->lens[d]; /* [from, to) of document d */
        if (to > from) llm4d_corpus_read(c, c->doc_start[d] + from, to - from, tokens + k);
        k += to > from ? to - from : 0;
    }
    LLM4D_ASSERT(k == ix->seq_len + 1, "window %lld holds %lld tokens, expected %d", (long long)j, (long long)k,
                 ix->seq_len + 1);
}

int64_t llm4d_gpt_index_epoch(const llm4d_gpt_index *ix, int64_t i) {
    return llm4d_gpt_index_window(ix, i) * ix->seq_len / ix->tokens_per_epoch;
}

void llm4d_gpt_index_sample(const llm4d_gpt_index *ix, int64_t i, int32_t eos, int32_t *tokens, int32_t *labels,
                            float *loss_mask, int32_t *window) {
    llm4d_gpt_index_get(ix, i, window);
    int L = ix->seq_len;
    for (int t = 0; t < L; t++) {
        tokens[t] = window[t];
        labels[t] = window[t + 1];
        loss_mask[t] = window[t] == eos ? 0.0f : 1.0f;
    }
}
