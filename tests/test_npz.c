/* test_npz.c — npy/npz reading and writing, and opening Paddle corpora (src/data/npz.c, src/data/corpus.c).
 *
 * Standalone (as ctest runs it), every input is built here: arrays round-trip through llm4d_npy_write and
 * llm4d_npz_write (stored and deflated), corpora in both Paddle formats open with the right counts and ids, and
 * damaged inputs (truncated, byte-flipped, hand-made headers) each give LLM4D_EUSER with a message that names the
 * file and says what is wrong. The shipped corpus data/fortunes_ids.npz is opened and checked too.
 *
 * With NPZ_FIXTURES=<dir> (or argv[1]) it also checks the files numpy wrote there (tests/make_npz_fixtures.py):
 * <dir>/expected.txt lists `good PATH n_tokens n_docs max_id sum_ids wsum first last` and `bad PATH word`.
 * With NPZ_OUT=<dir> it writes files for numpy to read back (make_npz_fixtures.py --verify). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "check.h"
#include "data/corpus.h"
#include "data/npz.h"

/* snprintf into a path buffer through vsnprintf, so GCC's truncation warning (about temp dirs of unknown length)
 * does not fire; the paths here are short and a truncation would show up as a failed check. */
static void pathf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void pathf(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* A user error whose message names the file (by its last path component) and contains `word`. */
static void check_user_error(llm4d_code rc, const llm4d_err *err, const char *file, const char *word,
                             const char *label) {
    int ok = rc == LLM4D_EUSER && strstr(err->msg, base_name(file)) && strcasestr(err->msg, word);
    check(ok, "%s -> EUSER naming %s with '%s' (rc %d: %s)", label, base_name(file), word, (int)rc,
          rc ? err->msg : "no error");
}

/* The deterministic values the round-trip files hold; make_npz_fixtures.py --verify computes the same. */
static int64_t pattern(llm4d_dtype dt, int64_t i) {
    int64_t v = (i * 7919 + 13) % 50257;
    switch (dt) {
    case LLM4D_DT_U16: return v;
    case LLM4D_DT_I32: return v + (i % 2) * 1000000000;
    case LLM4D_DT_U32: return v + (i % 2) * 3000000000LL;
    case LLM4D_DT_I64: return v + (i % 3) * (1LL << 40);
    }
    return 0;
}

static void fill(llm4d_array *a, const char *name, llm4d_dtype dt, int ndim, const int64_t *shape) {
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", name);
    a->dtype = dt;
    a->ndim = ndim;
    for (int i = 0; i < ndim; i++) a->shape[i] = shape[i];
    int64_t n = llm4d_array_numel(a);
    a->nbytes = (size_t)n * llm4d_dtype_size(dt);
    a->data = malloc(a->nbytes ? a->nbytes : 1);
    a->owned = 1;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = pattern(dt, i);
        switch (dt) {
        case LLM4D_DT_U16: ((uint16_t *)a->data)[i] = (uint16_t)v; break;
        case LLM4D_DT_I32: ((int32_t *)a->data)[i] = (int32_t)v; break;
        case LLM4D_DT_U32: ((uint32_t *)a->data)[i] = (uint32_t)v; break;
        case LLM4D_DT_I64: ((int64_t *)a->data)[i] = v; break;
        }
    }
}

static int same_array(const llm4d_array *a, const llm4d_array *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->nbytes != b->nbytes) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0;
}

static int write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

static void *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

/* A .npy image with a hand-written header dict (version 1.0, padded like numpy), then `data`. */
static size_t craft_npy(char *out, size_t cap, const char *dict, const void *data, size_t nbytes) {
    size_t dl = strlen(dict), total = (10 + dl + 1 + 63) / 64 * 64, hl = total - 10;
    if (total + nbytes > cap) abort();
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (char)(hl & 0xff);
    out[9] = (char)(hl >> 8);
    memcpy(out + 10, dict, dl);
    memset(out + 10 + dl, ' ', hl - dl - 1);
    out[total - 1] = '\n';
    memcpy(out + total, data, nbytes);
    return total + nbytes;
}

/* A zip with members given as raw bytes (to put bad .npy images inside an npz). */
static int craft_zip(const char *path, int n, const char *const *names, char *const *bufs, const size_t *lens) {
    unlink(path);
    int ze;
    zip_t *za = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &ze);
    if (!za) return 0;
    for (int i = 0; i < n; i++) {
        zip_source_t *s = zip_source_buffer(za, bufs[i], lens[i], 0);
        if (!s || zip_file_add(za, names[i], s, 0) < 0) return 0;
    }
    return zip_close(za) == 0;
}

static int count_tmp_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strstr(de->d_name, ".tmp")) n++;
    if (d) closedir(d);
    return n;
}

static const llm4d_dtype all_dtypes[4] = {LLM4D_DT_U16, LLM4D_DT_I32, LLM4D_DT_U32, LLM4D_DT_I64};
static const char *const dtype_names[4] = {"uint16", "int32", "uint32", "int64"};

static void test_npy_roundtrip(const char *dir) {
    char path[1200];
    llm4d_err err = {0};
    for (int k = 0; k < 4; k++) {
        int64_t shape[1] = {1000};
        llm4d_array a, b;
        fill(&a, "x", all_dtypes[k], 1, shape);
        pathf(path, sizeof path, "%s/rt_%s.npy", dir, dtype_names[k]);
        llm4d_code rc = llm4d_npy_write(path, &a, &err);
        if (rc == LLM4D_OK) rc = llm4d_npy_read(path, &b, &err);
        check(rc == LLM4D_OK && same_array(&a, &b) && b.owned, "npy round trip %s (1000,)", dtype_names[k]);
        llm4d_array_free(&a);
        if (rc == LLM4D_OK) llm4d_array_free(&b);
    }
    const struct {
        int ndim;
        int64_t shape[4];
        const char *label;
    } shapes[] = {{2, {3, 5}, "(3, 5)"}, {1, {0}, "(0,)"}, {0, {0}, "()"}, {4, {2, 1, 3, 2}, "(2, 1, 3, 2)"}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        llm4d_array a, b;
        fill(&a, "x", LLM4D_DT_I64, shapes[s].ndim, shapes[s].shape);
        pathf(path, sizeof path, "%s/rt_shape%zu.npy", dir, s);
        llm4d_code rc = llm4d_npy_write(path, &a, &err);
        if (rc == LLM4D_OK) rc = llm4d_npy_read(path, &b, &err);
        check(rc == LLM4D_OK && same_array(&a, &b), "npy round trip int64 %s", shapes[s].label);
        llm4d_array_free(&a);
        if (rc == LLM4D_OK) llm4d_array_free(&b);
    }
    /* The header must end on a 64-byte boundary so mapped data is aligned (numpy does the same). */
    size_t n;
    char *img = slurp(path, &n);
    size_t hl = img ? (size_t)(unsigned char)img[8] | (size_t)(unsigned char)img[9] << 8 : 0;
    check(img && (10 + hl) % 64 == 0 && img[10 + hl - 1] == '\n', "npy header padded to 64 bytes, ends in newline");
    free(img);
}

static void test_npz_roundtrip(const char *dir) {
    llm4d_err err = {0};
    int64_t s1[1] = {20000}, s2[2] = {7, 3}, s3[1] = {5};
    llm4d_array in[3];
    fill(&in[0], "ids", LLM4D_DT_U16, 1, s1);
    fill(&in[1], "sample_idx", LLM4D_DT_I32, 2, s2);
    fill(&in[2], "lens", LLM4D_DT_I64, 1, s3);
    size_t sizes[2] = {0, 0};
    for (int compress = 0; compress < 2; compress++) {
        char path[1200];
        pathf(path, sizeof path, "%s/rt_%s.npz", dir, compress ? "deflated" : "stored");
        /* Written twice: the second must replace the first in place. */
        llm4d_code rc = llm4d_npz_write(path, in, 3, compress, &err);
        if (rc == LLM4D_OK) rc = llm4d_npz_write(path, in, 3, compress, &err);
        check(rc == LLM4D_OK, "npz write %s (%s)", compress ? "deflated" : "stored", rc ? err.msg : "ok");
        for (int i = 0; i < 3 && rc == LLM4D_OK; i++) {
            llm4d_array b;
            llm4d_code r2 = llm4d_npz_read(path, in[i].name, &b, &err);
            check(r2 == LLM4D_OK && same_array(&in[i], &b) && strcmp(b.name, in[i].name) == 0,
                  "npz %s member %s reads back", compress ? "deflated" : "stored", in[i].name);
            if (r2 == LLM4D_OK) llm4d_array_free(&b);
        }
        struct stat st;
        sizes[compress] = stat(path, &st) == 0 ? (size_t)st.st_size : 0;
        /* Each member's compression method, read back with libzip. */
        int ze, methods_ok = 0;
        zip_t *za = zip_open(path, ZIP_RDONLY, &ze);
        if (za) {
            methods_ok = zip_get_num_entries(za, 0) == 3;
            for (zip_uint64_t m = 0; m < 3 && methods_ok; m++) {
                zip_stat_t zs;
                methods_ok = zip_stat_index(za, m, 0, &zs) == 0 &&
                             zs.comp_method == (compress ? ZIP_CM_DEFLATE : ZIP_CM_STORE);
            }
            zip_discard(za);
        }
        check(methods_ok, "npz %s: every member is %s", compress ? "deflated" : "stored",
              compress ? "deflated" : "stored");
        llm4d_array b;
        rc = llm4d_npz_read(path, "tokens", &b, &err);
        check_user_error(rc, &err, path, "no array 'tokens'", "npz missing member");
        check(rc != LLM4D_OK && strstr(err.msg, "ids, sample_idx, lens"), "missing-member message lists members");
    }
    check(sizes[1] > 0 && sizes[1] < sizes[0], "deflated npz smaller than stored (%zu < %zu bytes)", sizes[1],
          sizes[0]);
    for (int i = 0; i < 3; i++) llm4d_array_free(&in[i]);

    char path[1200];
    pathf(path, sizeof path, "%s/rt_empty.npz", dir);
    llm4d_code rc = llm4d_npz_write(path, NULL, 0, 0, &err);
    llm4d_array b;
    llm4d_code r2 = rc == LLM4D_OK ? llm4d_npz_read(path, "ids", &b, &err) : rc;
    check(rc == LLM4D_OK && r2 == LLM4D_EUSER && strstr(err.msg, "members: none"),
          "npz with no arrays writes and reads as an empty archive (%s)", err.msg);

    check(count_tmp_files(dir) == 0, "no temporary files left after writes");
    pathf(path, sizeof path, "%s/no/such/dir/x.npz", dir);
    int64_t s[1] = {4};
    llm4d_array a;
    fill(&a, "ids", LLM4D_DT_U16, 1, s);
    rc = llm4d_npz_write(path, &a, 1, 1, &err);
    check(rc == LLM4D_EIO && strstr(err.msg, "no/such/dir/x.npz"), "npz write into a missing dir -> EIO naming it");
    pathf(path, sizeof path, "%s/no/such/dir/x.npy", dir);
    rc = llm4d_npy_write(path, &a, &err);
    check(rc == LLM4D_EIO && strstr(err.msg, "no/such/dir/x.npy"), "npy write into a missing dir -> EIO naming it");
    llm4d_array_free(&a);
}

/* A small corpus: n_docs documents of lengths 1..23, ids from the pattern, each document ending in EOS. */
typedef struct {
    int64_t n_tokens, n_docs;
    int64_t *ids;
    int64_t *lens;
} mini_corpus;

static mini_corpus mini_make(int n_docs) {
    mini_corpus m = {0, n_docs, NULL, malloc((size_t)n_docs * sizeof(int64_t))};
    for (int d = 0; d < n_docs; d++) m.n_tokens += m.lens[d] = 1 + (d * 5) % 23;
    m.ids = malloc((size_t)m.n_tokens * sizeof(int64_t));
    for (int64_t d = 0, k = 0; d < n_docs; d++)
        for (int64_t j = 0; j < m.lens[d]; j++, k++) m.ids[k] = j == m.lens[d] - 1 ? 50256 : (k * 7919 + 13) % 50000;
    return m;
}

static void to_array(llm4d_array *a, const char *name, llm4d_dtype dt, const int64_t *v, int64_t n) {
    int64_t shape[1] = {n};
    fill(a, name, dt, 1, shape);
    for (int64_t i = 0; i < n; i++) switch (dt) {
        case LLM4D_DT_U16: ((uint16_t *)a->data)[i] = (uint16_t)v[i]; break;
        case LLM4D_DT_I32: ((int32_t *)a->data)[i] = (int32_t)v[i]; break;
        case LLM4D_DT_U32: ((uint32_t *)a->data)[i] = (uint32_t)v[i]; break;
        case LLM4D_DT_I64: ((int64_t *)a->data)[i] = v[i]; break;
        }
}

static int write_old(const char *path, const mini_corpus *m, llm4d_dtype ids_dt, llm4d_dtype lens_dt, int compress) {
    llm4d_array a[2];
    llm4d_err err;
    to_array(&a[0], "ids", ids_dt, m->ids, m->n_tokens);
    to_array(&a[1], "lens", lens_dt, m->lens, m->n_docs);
    int ok = llm4d_npz_write(path, a, 2, compress, &err) == LLM4D_OK;
    llm4d_array_free(&a[0]);
    llm4d_array_free(&a[1]);
    return ok;
}

static int write_new(const char *prefix, const mini_corpus *m, llm4d_dtype ids_dt) {
    char p[1200];
    llm4d_array ids, lens;
    llm4d_err err;
    to_array(&ids, "ids", ids_dt, m->ids, m->n_tokens);
    to_array(&lens, "lens", LLM4D_DT_I32, m->lens, m->n_docs);
    snprintf(p, sizeof p, "%s_ids.npy", prefix);
    int ok = llm4d_npy_write(p, &ids, &err) == LLM4D_OK;
    snprintf(p, sizeof p, "%s_idx.npz", prefix);
    ok = ok && llm4d_npz_write(p, &lens, 1, 0, &err) == LLM4D_OK;
    llm4d_array_free(&ids);
    llm4d_array_free(&lens);
    return ok;
}

/* Every count, the prefix sums, max_id, and the ids read back as int32 in a few windows. */
static int corpus_matches(const llm4d_corpus *c, const mini_corpus *m) {
    if (c->n_tokens != m->n_tokens || c->n_docs != m->n_docs || c->max_id != 50256) return 0;
    for (int64_t d = 0, s = 0; d <= m->n_docs; d++) {
        if (c->doc_start[d] != s) return 0;
        if (d < m->n_docs) {
            if (c->lens[d] != m->lens[d]) return 0;
            s += m->lens[d];
        }
    }
    int32_t *buf = malloc((size_t)m->n_tokens * sizeof *buf);
    int ok = 1;
    int64_t starts[3] = {0, 7, m->n_tokens - 5};
    int64_t counts[3] = {m->n_tokens, 11, 5};
    for (int w = 0; w < 3 && ok; w++) {
        llm4d_corpus_read(c, starts[w], counts[w], buf);
        for (int64_t i = 0; i < counts[w]; i++)
            if (buf[i] != m->ids[starts[w] + i]) ok = 0;
    }
    free(buf);
    return ok;
}

static void test_corpus_formats(const char *dir) {
    mini_corpus m = mini_make(40);
    llm4d_err err = {0};
    char path[1200], sub[1200];
    const llm4d_dtype lens_dts[3] = {LLM4D_DT_I32, LLM4D_DT_U16, LLM4D_DT_I64};
    for (int k = 0; k < 4; k++)
        for (int compress = 0; compress < 2; compress++) {
            llm4d_dtype ld = lens_dts[(k + compress) % 3];
            pathf(path, sizeof path, "%s/c_%s_%d_ids.npz", dir, dtype_names[k], compress);
            llm4d_corpus c;
            llm4d_code rc = write_old(path, &m, all_dtypes[k], ld, compress) ? llm4d_corpus_open_npz(&c, path, &err)
                                                                            : LLM4D_EIO;
            check(rc == LLM4D_OK && corpus_matches(&c, &m) && c.dtype == all_dtypes[k],
                  "old-format corpus ids %s lens %s %s: counts, doc_start, max_id, ids", dtype_names[k],
                  dtype_names[ld == LLM4D_DT_I32 ? 1 : ld == LLM4D_DT_U16 ? 0 : 3], compress ? "deflated" : "stored");
            if (rc == LLM4D_OK) llm4d_corpus_close(&c);
        }

    /* llm4d_corpus_open on a file picks the format by suffix. */
    llm4d_corpus c;
    pathf(path, sizeof path, "%s/c_uint16_1_ids.npz", dir);
    llm4d_code rc = llm4d_corpus_open(&c, path, &err);
    check(rc == LLM4D_OK && corpus_matches(&c, &m) && c.n_found == 1, "corpus_open(file _ids.npz)");
    if (rc == LLM4D_OK) llm4d_corpus_close(&c);

    /* New format in a directory; an old-format file beside it is ignored, as in PaddleNLP. */
    pathf(sub, sizeof sub, "%s/newfmt", dir);
    mkdir(sub, 0777);
    pathf(path, sizeof path, "%s/b_corpus", sub);
    int ok = write_new(path, &m, LLM4D_DT_U16);
    pathf(path, sizeof path, "%s/a_corpus", sub);
    ok = ok && write_new(path, &m, LLM4D_DT_I32);
    mini_corpus other = mini_make(7);
    pathf(path, sizeof path, "%s/0_old_ids.npz", sub);
    ok = ok && write_old(path, &other, LLM4D_DT_U16, LLM4D_DT_I32, 0);
    rc = ok ? llm4d_corpus_open(&c, sub, &err) : LLM4D_EIO;
    check(rc == LLM4D_OK && corpus_matches(&c, &m) && c.n_found == 2 && c.dtype == LLM4D_DT_I32 &&
                 strstr(c.path, "a_corpus_ids.npy") && c.map != NULL,
          "corpus_open(dir): new format preferred, first sorted (a_), mmapped, n_found 2 (%s)", rc ? err.msg : c.path);
    if (rc == LLM4D_OK) llm4d_corpus_close(&c);
    pathf(path, sizeof path, "%s/b_corpus_ids.npy", sub);
    rc = llm4d_corpus_open(&c, path, &err);
    check(rc == LLM4D_OK && corpus_matches(&c, &m) && c.dtype == LLM4D_DT_U16, "corpus_open(file _ids.npy)");
    if (rc == LLM4D_OK) llm4d_corpus_close(&c);
    pathf(path, sizeof path, "%s/b_corpus_idx.npz", sub);
    rc = llm4d_corpus_open(&c, path, &err);
    check(rc == LLM4D_OK && corpus_matches(&c, &m) && c.dtype == LLM4D_DT_U16, "corpus_open(file _idx.npz)");
    if (rc == LLM4D_OK) llm4d_corpus_close(&c);

    /* Old format only: falls back to _ids.npz files, sorted. */
    pathf(sub, sizeof sub, "%s/oldfmt", dir);
    mkdir(sub, 0777);
    pathf(path, sizeof path, "%s/z_ids.npz", sub);
    ok = write_old(path, &other, LLM4D_DT_U16, LLM4D_DT_I32, 1);
    pathf(path, sizeof path, "%s/m_ids.npz", sub);
    ok = ok && write_old(path, &m, LLM4D_DT_U16, LLM4D_DT_I32, 1);
    pathf(path, sizeof path, "%s/readme.txt", sub);
    ok = ok && write_bytes(path, "x", 1);
    rc = ok ? llm4d_corpus_open(&c, sub, &err) : LLM4D_EIO;
    check(rc == LLM4D_OK && corpus_matches(&c, &m) && c.n_found == 2 && strstr(c.path, "m_ids.npz"),
          "corpus_open(dir): old format fallback, first sorted (m_), n_found 2");
    if (rc == LLM4D_OK) llm4d_corpus_close(&c);
    free(other.ids);
    free(other.lens);
    free(m.ids);
    free(m.lens);
}

static void test_bad_inputs(const char *dir) {
    mini_corpus m = mini_make(10);
    llm4d_err err = {0};
    llm4d_corpus c;
    char path[1200], sub[1200];
    llm4d_code rc;

    pathf(path, sizeof path, "%s/nope_ids.npz", dir);
    rc = llm4d_corpus_open_npz(&c, path, &err);
    check_user_error(rc, &err, path, "no such file", "missing npz");
    rc = llm4d_corpus_open(&c, path, &err);
    check_user_error(rc, &err, path, "no such file", "corpus_open on a missing path");

    pathf(path, sizeof path, "%s/text_ids.npz", dir);
    write_bytes(path, "this is not a zip archive\n", 26);
    rc = llm4d_corpus_open_npz(&c, path, &err);
    check_user_error(rc, &err, path, "not a zip", "text file named .npz");

    /* Truncated: the first half of a good archive (the central directory is lost). */
    char good[1200];
    pathf(good, sizeof good, "%s/good_ids.npz", dir);
    write_old(good, &m, LLM4D_DT_U16, LLM4D_DT_I32, 1);
    size_t n;
    char *img = slurp(good, &n);
    pathf(path, sizeof path, "%s/half_ids.npz", dir);
    write_bytes(path, img, n / 2);
    rc = llm4d_corpus_open_npz(&c, path, &err);
    check_user_error(rc, &err, path, "zip", "truncated npz (first half)");
    /* Cut by only its last byte: the end-of-directory record no longer parses. */
    pathf(path, sizeof path, "%s/cut1_ids.npz", dir);
    write_bytes(path, img, n - 1);
    rc = llm4d_corpus_open_npz(&c, path, &err);
    check_user_error(rc, &err, path, "zip", "npz missing its last byte");
    free(img);

    /* A flipped byte inside the deflated data of `ids`: zlib or the CRC must catch it. */
    {
        char stored[1200];
        pathf(stored, sizeof stored, "%s/flip_ids.npz", dir);
        mini_corpus big = mini_make(400);
        write_old(stored, &big, LLM4D_DT_I32, LLM4D_DT_I32, 1);
        img = slurp(stored, &n);
        unsigned name_len = (unsigned char)img[26] | (unsigned char)img[27] << 8;
        unsigned extra_len = (unsigned char)img[28] | (unsigned char)img[29] << 8;
        size_t data = 30 + name_len + extra_len;
        img[data + 200] ^= 0x5a;
        write_bytes(stored, img, n);
        free(img);
        rc = llm4d_corpus_open_npz(&c, stored, &err);
        check_user_error(rc, &err, stored, "corrupt", "npz with a flipped byte in deflated ids");
        free(big.ids);
        free(big.lens);
    }

    /* Members missing, or wrong in content. */
    llm4d_array a[2];
    to_array(&a[0], "tokens", LLM4D_DT_U16, m.ids, m.n_tokens);
    to_array(&a[1], "lens", LLM4D_DT_I32, m.lens, m.n_docs);
    pathf(path, sizeof path, "%s/noids_ids.npz", dir);
    llm4d_npz_write(path, a, 2, 0, &err);
    rc = llm4d_corpus_open_npz(&c, path, &err);
    check_user_error(rc, &err, path, "no array 'ids'", "npz without ids");
    snprintf(a[0].name, sizeof a[0].name, "ids");
    pathf(path, sizeof path, "%s/nolens_ids.npz", dir);
    llm4d_npz_write(path, a, 1, 0, &err);
    rc = llm4d_corpus_open_npz(&c, path, &err);
    check_user_error(rc, &err, path, "no array 'lens'", "npz without lens");
    ((int32_t *)a[1].data)[3] += 1;
    pathf(path, sizeof path, "%s/mismatch_ids.npz", dir);
    llm4d_npz_write(path, a, 2, 0, &err);
    rc = llm4d_corpus_open_npz(&c, path, &err);
    check_user_error(rc, &err, path, "do not match", "sum(lens) != len(ids)");
    check(strstr(err.msg, "sum(lens) = ") != NULL, "mismatch message gives sum(lens) (%s)", err.msg);
    ((int32_t *)a[1].data)[3] = -1;
    pathf(path, sizeof path, "%s/neglen_ids.npz", dir);
    llm4d_npz_write(path, a, 2, 0, &err);
    rc = llm4d_corpus_open_npz(&c, path, &err);
    check_user_error(rc, &err, path, "lens[3] = -1", "negative document length");
    llm4d_array_free(&a[1]);
    to_array(&a[1], "lens", LLM4D_DT_I32, m.lens, m.n_docs);
    {
        llm4d_array ids2;
        int64_t shape[2] = {2, m.n_tokens / 2};
        fill(&ids2, "ids", LLM4D_DT_U16, 2, shape);
        llm4d_array pair[2] = {ids2, a[1]};
        pathf(path, sizeof path, "%s/twod_ids.npz", dir);
        llm4d_npz_write(path, pair, 2, 0, &err);
        rc = llm4d_corpus_open_npz(&c, path, &err);
        check_user_error(rc, &err, path, "2 dimensions", "2-D ids");
        llm4d_array_free(&ids2);
    }
    {
        int64_t neg[3] = {5, -7, 9}, nl[1] = {3};
        llm4d_array p[2];
        to_array(&p[0], "ids", LLM4D_DT_I32, neg, 3);
        to_array(&p[1], "lens", LLM4D_DT_I32, nl, 1);
        pathf(path, sizeof path, "%s/negid_ids.npz", dir);
        llm4d_npz_write(path, p, 2, 0, &err);
        rc = llm4d_corpus_open_npz(&c, path, &err);
        check_user_error(rc, &err, path, "negative token id (-7)", "negative id");
        llm4d_array_free(&p[0]);
        llm4d_array_free(&p[1]);
    }

    /* Hand-made npy headers inside an npz member `ids`, beside a good `lens`. */
    static const struct {
        const char *file, *dict, *word;
        int cut; /* bytes removed from the data */
    } bad[] = {
        {"fortran_ids.npz", "{'descr': '<i4', 'fortran_order': True, 'shape': (4,), }", "fortran_order", 0},
        {"bigend_ids.npz", "{'descr': '>i4', 'fortran_order': False, 'shape': (4,), }", "big-endian", 0},
        {"float_ids.npz", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", "float32", 0},
        {"short_ids.npz", "{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }", "truncated", 3},
        {"long_ids.npz", "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", "trailing", 0},
        {"garbled_ids.npz", "{'descr': '<i4', 'fortran_order': Maybe, 'shape': (4,), }", "malformed", 0},
        {"nokey_ids.npz", "{'descr': '<i4', 'shape': (4,), }", "fortran_order", 0},
        {"struct_ids.npz", "{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (4,), }", "structured", 0},
    };
    int32_t four[4] = {1, 2, 3, 4};
    int32_t lens4[1] = {4};
    char lens_img[256];
    size_t lens_len = craft_npy(lens_img, sizeof lens_img, "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }",
                                lens4, sizeof lens4);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char ids_img[256];
        size_t ids_len = craft_npy(ids_img, sizeof ids_img, bad[i].dict, four, sizeof four) - (size_t)bad[i].cut;
        pathf(path, sizeof path, "%s/%s", dir, bad[i].file);
        const char *names[2] = {"ids.npy", "lens.npy"};
        char *bufs[2] = {ids_img, lens_img};
        size_t lens[2] = {ids_len, lens_len};
        craft_zip(path, 2, names, bufs, lens);
        rc = llm4d_corpus_open_npz(&c, path, &err);
        check_user_error(rc, &err, path, bad[i].word, bad[i].file);
    }
    /* Byte flips in the fixed part of an npy: the magic, then the version. */
    {
        char ids_img[256];
        size_t ids_len = craft_npy(ids_img, sizeof ids_img,
                                   "{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }", four, sizeof four);
        const char *names[2] = {"ids.npy", "lens.npy"};
        char *bufs[2] = {ids_img, lens_img};
        size_t lens[2] = {ids_len, lens_len};
        ids_img[3] = 'X';
        pathf(path, sizeof path, "%s/magic_ids.npz", dir);
        craft_zip(path, 2, names, bufs, lens);
        rc = llm4d_corpus_open_npz(&c, path, &err);
        check_user_error(rc, &err, path, "magic", "npy magic byte flipped");
        ids_img[3] = 'M';
        ids_img[6] = 9;
        pathf(path, sizeof path, "%s/version_ids.npz", dir);
        craft_zip(path, 2, names, bufs, lens);
        rc = llm4d_corpus_open_npz(&c, path, &err);
        check_user_error(rc, &err, path, "version 9.0", "npy version byte flipped");
    }
    free(m.ids);
    free(m.lens);
    llm4d_array_free(&a[0]);
    llm4d_array_free(&a[1]);

    /* New format: the mapped .npy is checked as strictly as an npz member. */
    pathf(sub, sizeof sub, "%s/badnew", dir);
    mkdir(sub, 0777);
    {
        char ids_img[256];
        size_t ids_len = craft_npy(ids_img, sizeof ids_img,
                                   "{'descr': '>i4', 'fortran_order': False, 'shape': (4,), }", four, sizeof four);
        pathf(path, sizeof path, "%s/be_ids.npy", sub);
        write_bytes(path, ids_img, ids_len);
        llm4d_array l;
        int64_t one[1] = {4};
        to_array(&l, "lens", LLM4D_DT_I32, one, 1);
        pathf(path, sizeof path, "%s/be_idx.npz", sub);
        llm4d_npz_write(path, &l, 1, 0, &err);
        rc = llm4d_corpus_open(&c, sub, &err);
        check_user_error(rc, &err, "be_ids.npy", "big-endian", "new format: big-endian P_ids.npy");
        /* a short .npy: little-endian header, 2 bytes of data missing */
        pathf(path, sizeof path, "%s/be_ids.npy", sub);
        size_t short_len = craft_npy(ids_img, sizeof ids_img,
                                     "{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }", four, sizeof four);
        write_bytes(path, ids_img, short_len - 2);
        rc = llm4d_corpus_open(&c, sub, &err);
        check_user_error(rc, &err, "be_ids.npy", "truncated", "new format: P_ids.npy cut short");
        write_bytes(path, "", 0);
        rc = llm4d_corpus_open(&c, sub, &err);
        check_user_error(rc, &err, "be_ids.npy", "magic", "new format: empty P_ids.npy");
        unlink(path);
        rc = llm4d_corpus_open(&c, sub, &err);
        check_user_error(rc, &err, "be_ids.npy", "no such file", "new format: P_idx.npz without P_ids.npy");
        /* lens disagreeing with the mapped ids */
        write_bytes(path, ids_img, short_len);
        ((int32_t *)l.data)[0] = 5;
        pathf(path, sizeof path, "%s/be_idx.npz", sub);
        llm4d_npz_write(path, &l, 1, 1, &err);
        rc = llm4d_corpus_open(&c, sub, &err);
        check_user_error(rc, &err, "be_idx.npz", "do not match", "new format: lens sum 5 vs 4 ids");
        llm4d_array_free(&l);
    }

    /* Directories without a corpus. */
    pathf(sub, sizeof sub, "%s/emptydir", dir);
    mkdir(sub, 0777);
    rc = llm4d_corpus_open(&c, sub, &err);
    check_user_error(rc, &err, sub, "P_ids.npz", "empty input_dir");
    pathf(path, sizeof path, "%s/notes.txt", sub);
    write_bytes(path, "hi", 2);
    pathf(path, sizeof path, "%s/train.npz", sub);
    write_bytes(path, "hi", 2);
    rc = llm4d_corpus_open(&c, sub, &err);
    check_user_error(rc, &err, sub, "no corpus", "input_dir with no matching names");
    pathf(path, sizeof path, "%s/notes.txt", sub);
    rc = llm4d_corpus_open(&c, path, &err);
    check_user_error(rc, &err, path, "unknown corpus file type", "input_dir naming a .txt file");
}

/* The corpus shipped for the quick start (data/README.md gives these numbers and how to rebuild it). */
static void test_shipped(void) {
    const char *src = getenv("SRC_DIR");
    char path[1200];
    pathf(path, sizeof path, "%s/data/fortunes_ids.npz", src ? src : ".");
    llm4d_corpus c;
    llm4d_err err = {0};
    llm4d_code rc = llm4d_corpus_open(&c, path, &err);
    check(rc == LLM4D_OK, "shipped corpus opens (%s)", rc ? err.msg : path);
    if (rc != LLM4D_OK) return;
    check(c.dtype == LLM4D_DT_U16 && c.max_id == 50256, "shipped corpus: uint16 ids, max id 50256 (EOS)");
    check(c.n_tokens == 696822 && c.n_docs == 15207, "shipped corpus: 696822 tokens in 15207 documents (got %lld, %lld)",
          (long long)c.n_tokens, (long long)c.n_docs);
    int eos_ok = 1;
    for (int64_t d = 0; d < c.n_docs && eos_ok; d++) {
        int32_t last;
        llm4d_corpus_read(&c, c.doc_start[d + 1] - 1, 1, &last);
        eos_ok = c.lens[d] >= 2 && last == 50256;
    }
    check(eos_ok, "shipped corpus: every document has text and ends with EOS 50256");
    llm4d_corpus_close(&c);
}

/* Files numpy wrote (make_npz_fixtures.py); expected.txt says what each holds or which error it must give. */
static void test_fixtures(const char *fx) {
    char list[1200];
    pathf(list, sizeof list, "%s/expected.txt", fx);
    FILE *f = fopen(list, "r");
    check(f != NULL, "fixture list %s opens", list);
    if (!f) return;
    char line[2048];
    int n_lines = 0;
    while (fgets(line, sizeof line, f)) {
        char kind[16], rel[1024], word[256];
        long long nt, nd, mx, sum, wsum, first, last;
        char path[2100];
        llm4d_corpus c;
        llm4d_err err = {0};
        if (sscanf(line, "%15s %1023s", kind, rel) != 2) continue;
        n_lines++;
        pathf(path, sizeof path, "%s/%s", fx, rel);
        if (strcmp(kind, "good") == 0 &&
            sscanf(line, "%*s %*s %lld %lld %lld %lld %lld %lld %lld", &nt, &nd, &mx, &sum, &wsum, &first, &last) ==
                7) {
            llm4d_code rc = llm4d_corpus_open(&c, path, &err);
            if (rc != LLM4D_OK) {
                check(0, "numpy fixture %s opens (%s)", rel, err.msg);
                continue;
            }
            int32_t *ids = malloc((size_t)c.n_tokens * sizeof *ids);
            llm4d_corpus_read(&c, 0, c.n_tokens, ids);
            long long s = 0, ws = 0, lsum = 0;
            for (int64_t i = 0; i < c.n_tokens; i++) {
                s += ids[i];
                ws += (long long)(i % 7 + 1) * ids[i];
            }
            for (int64_t d = 0; d < c.n_docs; d++) lsum += c.lens[d];
            check(
                  c.n_tokens == nt && c.n_docs == nd && c.max_id == mx && s == sum && ws == wsum && ids[0] == first &&
                      ids[c.n_tokens - 1] == last && lsum == nt && c.doc_start[c.n_docs] == nt,
                  "numpy fixture %s: %lld tokens, %lld docs, max %lld, sum %lld, weighted sum %lld, first %lld, last "
                  "%lld (got %lld %lld %lld %lld %lld %d %d)",
                  rel, nt, nd, mx, sum, wsum, first, last, (long long)c.n_tokens, (long long)c.n_docs,
                  (long long)c.max_id, s, ws, ids[0], ids[c.n_tokens - 1]);
            free(ids);
            llm4d_corpus_close(&c);
        } else if (strcmp(kind, "bad") == 0 && sscanf(line, "%*s %*s %255[^\n]", word) == 1) {
            llm4d_code rc = llm4d_corpus_open(&c, path, &err);
            if (rc == LLM4D_OK) llm4d_corpus_close(&c);
            char label[1100];
            pathf(label, sizeof label, "numpy fixture %s", rel);
            check_user_error(rc, &err, path, word, label);
        } else {
            check(0, "fixture line understood: %s", line);
        }
    }
    fclose(f);
    check(n_lines >= 20, "fixture list has %d entries (>= 20)", n_lines);
}

/* Files for numpy to read back: every dtype as .npy, and npz stored and deflated. */
static void write_for_numpy(const char *out) {
    llm4d_err err = {0};
    char path[1200];
    int ok = 1;
    for (int k = 0; k < 4; k++) {
        int64_t shape[1] = {1000};
        llm4d_array a;
        fill(&a, "x", all_dtypes[k], 1, shape);
        pathf(path, sizeof path, "%s/llm4d_%s.npy", out, dtype_names[k]);
        ok = ok && llm4d_npy_write(path, &a, &err) == LLM4D_OK;
        llm4d_array_free(&a);
    }
    int64_t s2[2] = {6, 4};
    llm4d_array a2;
    fill(&a2, "x", LLM4D_DT_I64, 2, s2);
    pathf(path, sizeof path, "%s/llm4d_2d.npy", out);
    ok = ok && llm4d_npy_write(path, &a2, &err) == LLM4D_OK;
    llm4d_array_free(&a2);
    for (int compress = 0; compress < 2; compress++) {
        int64_t s1[1] = {5000}, s3[1] = {77};
        llm4d_array in[3];
        fill(&in[0], "ids", LLM4D_DT_U16, 1, s1);
        fill(&in[1], "sample_idx", LLM4D_DT_I32, 2, s2);
        fill(&in[2], "lens", LLM4D_DT_I64, 1, s3);
        pathf(path, sizeof path, "%s/llm4d_%s.npz", out, compress ? "deflated" : "stored");
        ok = ok && llm4d_npz_write(path, in, 3, compress, &err) == LLM4D_OK;
        for (int i = 0; i < 3; i++) llm4d_array_free(&in[i]);
    }
    check(ok, "wrote files for numpy into %s (%s)", out, ok ? "ok" : err.msg);
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

int main(int argc, char **argv) {
    char dir[] = "/tmp/llm4d_test_npz.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_npy_roundtrip(dir);
    test_npz_roundtrip(dir);
    test_corpus_formats(dir);
    test_bad_inputs(dir);
    test_shipped();
    const char *fx = argc > 1 ? argv[1] : getenv("NPZ_FIXTURES");
    if (fx && *fx) test_fixtures(fx);
    const char *out = getenv("NPZ_OUT");
    if (out && *out) write_for_numpy(out);
    remove_tree(dir);
    return check_summary();
}
