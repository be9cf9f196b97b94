/* test_gpt_index_unit.c — the GPT sample index, the MT19937 port and the Megatron reader.
 *
 * Without arguments (ctest): self-contained checks — MT19937's published first outputs for seed 5489, split
 * bounds with Python's half-to-even rounding, epochs and separate_last_epoch on hand-computed cases, every item
 * being L+1 consecutive corpus tokens, the cache written, reused, and rebuilt when the seed or the data changes,
 * and the Megatron reader on a pair written by the writer plus truncated/corrupt/unknown-version/unknown-dtype
 * variants (each a user error).
 *
 * With arguments it is the driver of test_gpt_index.sh, which compares against numpy (gpt_index_oracle.py):
 *   --mt SEED COUNT                 print MT19937 outputs
 *   --interval SEED MAX COUNT       print random_interval(MAX) draws
 *   --build CORPUS SPLIT KIND N L SEED [ITEMS]   build (and cache) the index, print a summary line and ITEMS
 *                                   items as "i epoch token...". CORPUS is anything llm4d_corpus_open takes, or a
 *                                   Megatron .bin/.idx. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/corpus.h"
#include "data/gpt_index.h"
#include "data/megatron.h"
#include "data/mt19937.h"
#include "data/npz.h"
#include "check.h"


static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static llm4d_code open_any(llm4d_corpus *c, const char *path, llm4d_err *err) {
    if (ends_with(path, ".bin") || ends_with(path, ".idx")) return llm4d_corpus_open_megatron(c, path, err);
    return llm4d_corpus_open(c, path, err);
}

static int driver(int argc, char **argv) {
    if (!strcmp(argv[1], "--mt") && argc == 4) {
        llm4d_mt19937 m;
        llm4d_mt19937_seed(&m, (uint32_t)strtoull(argv[2], NULL, 10));
        for (long i = 0, n = atol(argv[3]); i < n; i++) printf("%" PRIu32 "\n", llm4d_mt19937_next32(&m));
        return 0;
    }
    if (!strcmp(argv[1], "--interval") && argc == 5) {
        llm4d_mt19937 m;
        llm4d_mt19937_seed(&m, (uint32_t)strtoull(argv[2], NULL, 10));
        uint64_t max = strtoull(argv[3], NULL, 10);
        for (long i = 0, n = atol(argv[4]); i < n; i++) printf("%" PRIu64 "\n", llm4d_mt19937_interval(&m, max));
        return 0;
    }
    if (!strcmp(argv[1], "--build") && (argc == 8 || argc == 9)) {
        llm4d_corpus c;
        llm4d_err err = {0};
        if (open_any(&c, argv[2], &err) != LLM4D_OK) {
            fprintf(stderr, "%s\n", err.msg);
            return 2;
        }
        llm4d_gpt_index_opts o = {.split = argv[3],
                                  .kind = !strcmp(argv[4], "train")   ? LLM4D_SPLIT_TRAIN
                                          : !strcmp(argv[4], "valid") ? LLM4D_SPLIT_VALID
                                                                      : LLM4D_SPLIT_TEST,
                                  .num_samples = atoll(argv[5]),
                                  .seq_len = atoi(argv[6]),
                                  .seed = atoll(argv[7]),
                                  .write_cache = 1};
        llm4d_gpt_index ix;
        if (llm4d_gpt_index_build(&ix, &c, &o, &err) != LLM4D_OK) {
            fprintf(stderr, "%s\n", err.msg);
            llm4d_corpus_close(&c);
            return 2;
        }
        printf("epochs %lld samples %lld separate_last %d from_cache %d docs %lld %lld\n", (long long)ix.num_epochs,
               (long long)ix.n_samples, ix.separate_last_epoch, ix.from_cache, (long long)ix.doc_begin,
               (long long)ix.doc_end);
        long items = argc == 9 ? atol(argv[8]) : 0;
        int32_t *w = malloc((size_t)(ix.seq_len + 1) * sizeof *w);
        for (long i = 0; i < items; i++) {
            llm4d_gpt_index_get(&ix, i, w);
            printf("%ld %lld", i, (long long)llm4d_gpt_index_epoch(&ix, i));
            for (int t = 0; t <= ix.seq_len; t++) printf(" %d", w[t]);
            printf("\n");
        }
        free(w);
        llm4d_gpt_index_free(&ix);
        llm4d_corpus_close(&c);
        return 0;
    }
    fprintf(stderr, "usage: see the comment at the top of tests/test_gpt_index_unit.c\n");
    return 2;
}

/* A corpus held in memory: ids[k] = k (so a window's tokens show where they came from). */
static void mem_corpus(llm4d_corpus *c, const int32_t *lens, int64_t n_docs, int32_t *ids_buf) {
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "memory");
    c->dtype = LLM4D_DT_I32;
    c->n_docs = n_docs;
    c->lens = malloc((size_t)n_docs * sizeof *c->lens);
    c->doc_start = malloc((size_t)(n_docs + 1) * sizeof *c->doc_start);
    memcpy(c->lens, lens, (size_t)n_docs * sizeof *lens);
    c->doc_start[0] = 0;
    for (int64_t d = 0; d < n_docs; d++) c->doc_start[d + 1] = c->doc_start[d] + lens[d];
    c->n_tokens = c->doc_start[n_docs];
    for (int64_t k = 0; k < c->n_tokens; k++) ids_buf[k] = (int32_t)k;
    c->ids = ids_buf;
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
}

static size_t read_bytes(const char *path, void **p) {
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    *p = malloc(n);
    n = fread(*p, 1, n, f);
    fclose(f);
    return n;
}

static void megatron_checks(const char *dir) {
    char prefix[512], path[600], p2[600];
    snprintf(prefix, sizeof prefix, "%s/m", dir);
    llm4d_err err = {0};
    llm4d_megatron_writer w;
    int32_t doc[300];
    for (int i = 0; i < 300; i++) doc[i] = (i * 7919) % 50257;
    int ok = llm4d_megatron_writer_open(&w, prefix, LLM4D_DT_U16, &err) == LLM4D_OK;
    int64_t total = 0;
    for (int d = 0; d < 40 && ok; d++) {
        int n = (d * 37) % 300; /* includes a zero-length document */
        ok = llm4d_megatron_writer_add(&w, doc + (300 - n) % 7, n - (300 - n) % 7 > 0 ? n - (300 - n) % 7 : 0, &err) ==
             LLM4D_OK;
        total += n - (300 - n) % 7 > 0 ? n - (300 - n) % 7 : 0;
    }
    ok = ok && llm4d_megatron_writer_finish(&w, &err) == LLM4D_OK;
    llm4d_corpus c;
    snprintf(path, sizeof path, "%s.idx", prefix);
    ok = ok && llm4d_corpus_open_megatron(&c, path, &err) == LLM4D_OK;
    int good = ok && c.n_docs == 40 && c.n_tokens == total && c.dtype == LLM4D_DT_U16 && c.map != NULL;
    if (good) {
        int32_t got[300];
        for (int d = 0; d < 40 && good; d++) {
            int n = (d * 37) % 300, skip = (300 - n) % 7, len = n - skip > 0 ? n - skip : 0;
            good = c.lens[d] == len;
            llm4d_corpus_read(&c, c.doc_start[d], len, got);
            for (int t = 0; t < len && good; t++) good = got[t] == doc[skip + t];
        }
        llm4d_corpus_close(&c);
    }
    check(good, "Megatron pair written by the writer reads back (40 documents, one empty, uint16, mapped)");

    /* damaged variants, each a user error */
    void *idx, *bin;
    snprintf(path, sizeof path, "%s.idx", prefix);
    size_t idx_n = read_bytes(path, &idx);
    snprintf(path, sizeof path, "%s.bin", prefix);
    size_t bin_n = read_bytes(path, &bin);
    struct {
        const char *what;
        size_t idx_len, bin_len;
        size_t patch_at;
        unsigned char patch;
        const char *expect;
    } cases[] = {
        {"truncated .bin", idx_n, bin_n - 2, 0, 0, "truncated or mismatched"},
        {"truncated .idx", idx_n - 8, bin_n, 0, 0, "truncated or corrupt"},
        {"short .idx", 20, bin_n, 0, 0, "too short"},
        {"bad magic", idx_n, bin_n, 0, 'X', "bad magic"},
        {"unknown version", idx_n, bin_n, 9, 2, "version 2 is unknown"},
        {"unknown dtype", idx_n, bin_n, 17, 3, "dtype code 3 (int16)"},
        {"float dtype", idx_n, bin_n, 17, 6, "not supported"},
        {"inconsistent pointers", idx_n, bin_n, 34 + 4 * 40 + 8 * 3, 0x7f, "pointers[3]"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        unsigned char *i2 = malloc(idx_n);
        memcpy(i2, idx, idx_n);
        if (cases[k].patch_at || cases[k].patch) i2[cases[k].patch_at] = cases[k].patch;
        snprintf(path, sizeof path, "%s/bad%zu.idx", dir, k);
        snprintf(p2, sizeof p2, "%s/bad%zu.bin", dir, k);
        write_bytes(path, i2, cases[k].idx_len);
        write_bytes(p2, bin, cases[k].bin_len);
        free(i2);
        llm4d_err e = {0};
        llm4d_code rc = llm4d_corpus_open_megatron(&c, p2, &e);
        char what[200];
        snprintf(what, sizeof what, "Megatron %s: user error mentioning '%s'", cases[k].what, cases[k].expect);
        check(rc == LLM4D_EUSER && strstr(e.msg, cases[k].expect) != NULL, "%s", what);
        if (rc != LLM4D_EUSER || !strstr(e.msg, cases[k].expect)) printf("  got %d: %s\n", rc, e.msg);
    }
    llm4d_err e = {0};
    snprintf(path, sizeof path, "%s/missing", dir);
    check(llm4d_corpus_open_megatron(&c, path, &e) == LLM4D_EUSER, "Megatron: missing files are a user error");
    free(idx);
    free(bin);
}

int main(int argc, char **argv) {
    if (argc > 1) return driver(argc, argv);

    /* MT19937: the published first outputs for seed 5489 (mt19937ar's default seed, numpy RandomState(5489)) */
    llm4d_mt19937 m;
    llm4d_mt19937_seed(&m, 5489);
    uint32_t want[5] = {3499211612u, 581869302u, 3890346734u, 3586334585u, 545404204u}, got_ok = 1;
    for (int i = 0; i < 5; i++) got_ok &= llm4d_mt19937_next32(&m) == want[i];
    for (int i = 5; i < 9999; i++) llm4d_mt19937_next32(&m);
    check(got_ok && llm4d_mt19937_next32(&m) == 4123659995u, "MT19937 seed 5489: outputs 1..5 and 10000 as published");
    llm4d_mt19937_seed(&m, 5489);
    check(llm4d_mt19937_interval(&m, ((uint64_t)1 << 40) - 1) == 0x5c22ae9ef6ull,
          "64-bit draw: first output is the high word (numpy randint(0, 2**40) -> 0x5c22ae9ef6)");

    /* split bounds, Python round-half-even */
    struct {
        const char *split;
        int64_t n, b[4];
    } sp[] = {
        {"949,50,1", 1000, {0, 949, 999, 1000}},
        {"1,1,2", 10, {0, 3, 5, 10}},  /* 2.5 -> 2, 2.5 -> 2, 5 -> 9; diff -1 shifts every bound up */
        {"1,1,1", 2, {0, 0, 1, 2}},    /* 0.667 -> 1 thrice; diff 1 */
        {"1,1,1", 1, {0, 1, 1, 1}},    /* 0.333 -> 0 thrice; diff -1 */
        {"3,1", 6, {0, 4, 6, 6}},      /* 4.5 -> 4, 1.5 -> 2 */
        {"5/3/2", 7, {0, 4, 6, 7}},    /* 3.5 -> 4, 2.1 -> 2, 1.4 -> 1 */
        {"1", 5, {0, 5, 5, 5}},
    };
    int split_ok = 1;
    for (size_t k = 0; k < sizeof sp / sizeof sp[0]; k++) {
        int64_t b[4];
        llm4d_err e;
        if (llm4d_gpt_split_bounds(sp[k].split, sp[k].n, b, &e) != LLM4D_OK || memcmp(b, sp[k].b, sizeof b)) {
            printf("  split %s n=%lld: got %lld %lld %lld %lld\n", sp[k].split, (long long)sp[k].n, (long long)b[0],
                   (long long)b[1], (long long)b[2], (long long)b[3]);
            split_ok = 0;
        }
    }
    check(split_ok, "split bounds follow Python's round-half-even and the last-bound shift");
    llm4d_err e;
    int64_t b[4];
    check(llm4d_gpt_split_bounds("9,x,1", 10, b, &e) == LLM4D_EUSER &&
              llm4d_gpt_split_bounds("0,0,0", 10, b, &e) == LLM4D_EUSER &&
              llm4d_gpt_split_bounds("1,-1", 10, b, &e) == LLM4D_EUSER &&
              llm4d_gpt_split_bounds("1,1,1,1", 10, b, &e) == LLM4D_EUSER,
          "malformed splits are user errors");
    check(llm4d_gpt_num_samples(LLM4D_SPLIT_TRAIN, 8, 100, 10, 5) == 800 &&
              llm4d_gpt_num_samples(LLM4D_SPLIT_VALID, 8, 100, 30, 5) == 8 * 4 * 5 &&
              llm4d_gpt_num_samples(LLM4D_SPLIT_TEST, 8, 100, 30, 5) == 400,
          "samples per split: G*M, G*(M/eval_freq+1)*eval_iters, G*eval_iters*10");

    /* epochs and separate_last_epoch: T = 1000 tokens, L = 10 -> 99 windows per epoch */
    char dir[] = "/tmp/llm4d_test_gpt_index_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    int32_t lens[20];
    for (int d = 0; d < 20; d++) lens[d] = 50;
    int32_t *ids = malloc(4 * 1000);
    llm4d_corpus c;
    mem_corpus(&c, lens, 20, ids);
    struct {
        int64_t n;
        int64_t epochs, samples;
        int sep;
    } ep[] = {{99, 1, 99, 0}, {100, 2, 199, 1}, {180, 2, 199, 0}, {209, 3, 299, 1}, {289, 3, 299, 0}, {0, 1, 99, 0}};
    int ep_ok = 1;
    for (size_t k = 0; k < sizeof ep / sizeof ep[0]; k++) {
        llm4d_gpt_index_opts o = {.split = "1", .num_samples = ep[k].n, .seq_len = 10, .seed = 7, .cache_prefix = ""};
        llm4d_gpt_index ix;
        if (llm4d_gpt_index_build(&ix, &c, &o, &e) != LLM4D_OK || ix.num_epochs != ep[k].epochs ||
            ix.n_samples != ep[k].samples || ix.separate_last_epoch != ep[k].sep) {
            printf("  N=%lld: epochs %lld samples %lld sep %d\n", (long long)ep[k].n, (long long)ix.num_epochs,
                   (long long)ix.n_samples, ix.separate_last_epoch);
            ep_ok = 0;
        }
        /* every item is L+1 consecutive flat tokens of the repeated split: window j starts at flat token j*L */
        int32_t w[11];
        for (int64_t i = 0; i < ix.n_samples && ep_ok; i++) {
            llm4d_gpt_index_get(&ix, i, w);
            int64_t j = llm4d_gpt_index_window(&ix, i);
            for (int t = 0; t <= 10; t++) ep_ok &= w[t] == (j * 10 + t) % 1000;
            ep_ok &= llm4d_gpt_index_epoch(&ix, i) == j * 10 / 1000;
        }
        if (ep[k].sep) { /* the last epoch's windows stay at the end, shuffled among themselves */
            int64_t n1 = ((ix.num_epochs - 1) * 1000 - 1) / 10;
            for (int64_t i = 0; i < ix.n_samples; i++) ep_ok &= (llm4d_gpt_index_window(&ix, i) >= n1) == (i >= n1);
        }
        llm4d_gpt_index_free(&ix);
    }
    check(ep_ok, "epochs, window count, separate_last_epoch; items are the windows j*L .. j*L+L; epoch of item");

    /* loss mask and the cache: write, reuse, rebuild on a new seed and on changed data */
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s/corpus", dir);
    llm4d_gpt_index_opts o = {.split = "8,1,1", .kind = LLM4D_SPLIT_TRAIN, .num_samples = 150, .seq_len = 10,
                              .seed = 1234, .cache_prefix = prefix, .write_cache = 1};
    llm4d_gpt_index ix, ix2;
    int ok = llm4d_gpt_index_build(&ix, &c, &o, &e) == LLM4D_OK && ix.wrote_cache && !ix.from_cache;
    char path[512];
    snprintf(path, sizeof path, "%s_gpt_train_indexmap_150ns_10sl_shuffle_idx.npy", prefix);
    ok = ok && access(path, F_OK) == 0;
    ok = ok && llm4d_gpt_index_build(&ix2, &c, &o, &e) == LLM4D_OK && ix2.from_cache && !ix2.wrote_cache &&
         ix2.n_samples == ix.n_samples && !memcmp(ix.shuffle_u32, ix2.shuffle_u32, 4 * (size_t)ix.n_samples) &&
         !memcmp(ix.sample_idx, ix2.sample_idx, 8 * (size_t)(ix.n_samples + 1));
    check(ok, "cache written under PaddleNLP's name and reused on the next build");
    llm4d_gpt_index_free(&ix2);
    o.seed = 1235;
    ok = llm4d_gpt_index_build(&ix2, &c, &o, &e) == LLM4D_OK && !ix2.from_cache && ix2.wrote_cache &&
         memcmp(ix.shuffle_u32, ix2.shuffle_u32, 4 * (size_t)ix.n_samples);
    check(ok, "a new seed rebuilds the cache (PaddleNLP's names omit the seed)");
    llm4d_gpt_index_free(&ix2);
    c.lens[3] = 49, c.lens[4] = 51; /* same totals, different documents */
    ok = llm4d_gpt_index_build(&ix2, &c, &o, &e) == LLM4D_OK && !ix2.from_cache;
    check(ok, "changed document lengths rebuild the cache");
    llm4d_gpt_index_free(&ix2);
    c.lens[3] = 50, c.lens[4] = 50;
    o.split = "7,2,1";
    ok = llm4d_gpt_index_build(&ix2, &c, &o, &e) == LLM4D_OK && !ix2.from_cache;
    check(ok, "a new split rebuilds the cache");
    llm4d_gpt_index_free(&ix2);
    o.split = "8,1,1";
    /* damage the cached shuffle: not a permutation any more -> rebuilt, not trusted */
    llm4d_gpt_index_build(&ix2, &c, &o, &e);
    llm4d_gpt_index_free(&ix2);
    llm4d_array a;
    llm4d_npy_read(path, &a, &e);
    ((uint32_t *)a.data)[5] = ((uint32_t *)a.data)[6];
    llm4d_npy_write(path, &a, &e);
    llm4d_array_free(&a);
    ok = llm4d_gpt_index_build(&ix2, &c, &o, &e) == LLM4D_OK && !ix2.from_cache;
    check(ok, "a damaged cache file is rebuilt, not trusted");
    llm4d_gpt_index_free(&ix2);

    for (int k = 0; k < 1000; k++) ids[k] = k % 50 == 49 ? 50256 : k; /* EOS ends each document */
    int32_t tok[10], lab[10], win[11];
    float mask[10];
    llm4d_gpt_index_sample(&ix, 0, 50256, tok, lab, mask, win);
    int mask_ok = 1;
    for (int t = 0; t < 10; t++)
        mask_ok &= tok[t] == win[t] && lab[t] == win[t + 1] && mask[t] == (win[t] == 50256 ? 0.f : 1.f);
    int any_eos = 0;
    for (int64_t i = 0; i < ix.n_samples; i++) {
        llm4d_gpt_index_sample(&ix, i, 50256, tok, lab, mask, win);
        for (int t = 0; t < 10; t++) any_eos |= tok[t] == 50256 && mask[t] == 0.f;
    }
    check(mask_ok && any_eos, "sample: tokens = window[:-1], labels = window[1:], loss_mask 0 at EOS inputs");
    llm4d_gpt_index_free(&ix);

    o.kind = LLM4D_SPLIT_TEST;
    o.split = "100,0,0";
    check(llm4d_gpt_index_build(&ix, &c, &o, &e) == LLM4D_EUSER && strstr(e.msg, "no documents"),
          "an empty split is a user error (PaddleNLP would loop forever)");
    o.split = "8,1,1";
    o.seed = (int64_t)1 << 32;
    check(llm4d_gpt_index_build(&ix, &c, &o, &e) == LLM4D_EUSER, "a seed beyond 2^32-1 is a user error (as numpy)");
    free(c.lens);
    free(c.doc_start);
    free(ids);

    megatron_checks(dir);

    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("(could not remove %s)\n", dir);
    return check_summary();
}
