/* test_safetensors_unit.c — checks of the safetensors writer and validating reader (src/ckpt/safetensors.c).
 *
 * Run with no arguments it is the ctest test: round trips through files, float conversions at their edge cases,
 * and one malformed file per validation rule, each of which must become a user error naming the file (and the
 * tensor where there is one). It is also the llm4d side of tests/test_safetensors.sh, which compares against an
 * independent reader and writer in Debian's python3 + numpy + torch:
 *   test_safetensors_unit write PATH   write the reference set of tensors (the formulas are repeated in the script)
 *   test_safetensors_unit dump PATH    print every tensor and metadata entry as text; exit 2 with one line on stderr
 *                                 when the file is rejected */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tally.h"
#include "ckpt/safetensors.h"


/* ---- the reference set, shared with the script ---- */

static double ref_small(int64_t j) { return (double)((j * 37) % 101) / 8.0 - 6.0; }

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define CONV_N 4096

/* Floats chosen to hit every path of the narrowing conversions: specials, the f16 overflow and subnormal edges,
 * exact ties, then random values over exponents 2^-30 .. 2^20. */
static void conv_source(float *src) {
    static const float edges[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65504.0f, 65519.99f, 65520.0f, -65520.0f,
                                  6.103515625e-05f, 5.9604644775390625e-08f, 2.98023223876953125e-08f,
                                  2.9802326e-08f, 8.940697e-08f, 1.00048828125f, 1.00146484375f, 1.0f + 1.0f / 256.0f,
                                  1.0f + 3.0f / 256.0f, 3.0e-41f, -1.5e-39f, 3.3895314e38f, 3.4028235e38f};
    int ne = (int)(sizeof edges / sizeof edges[0]);
    uint64_t s = 12345;
    for (int i = 0; i < CONV_N; i++) {
        if (i < ne) {
            src[i] = edges[i];
            continue;
        }
        uint64_t r = splitmix(&s);
        float m = 1.0f + (float)(r & 0xffffff) / 16777216.0f;
        int e = (int)((r >> 24) % 51) - 30;
        src[i] = ((r >> 40) & 1 ? -1.0f : 1.0f) * ldexpf(m, e);
    }
}

static int write_reference(const char *path, llm4d_err *err) {
    float a[15], g = 3.25f, *conv = malloc(CONV_N * sizeof(float));
    uint16_t b[12], c[12], *c16 = malloc(CONV_N * 2), *cbf = malloc(CONV_N * 2);
    int64_t d[7];
    int32_t e[6];
    uint8_t f[10];
    double h[3];
    for (int j = 0; j < 15; j++) a[j] = (float)ref_small(j);
    float tmp[12];
    for (int j = 0; j < 12; j++) tmp[j] = (float)ref_small(j + 100);
    llm4d_st_convert(b, LLM4D_ST_BF16, tmp, LLM4D_ST_F32, 12);
    for (int j = 0; j < 12; j++) tmp[j] = (float)ref_small(j + 200);
    llm4d_st_convert(c, LLM4D_ST_F16, tmp, LLM4D_ST_F32, 12);
    for (int j = 0; j < 7; j++) d[j] = (int64_t)j * 1000000000007LL - 3000000000000LL;
    for (int j = 0; j < 6; j++) e[j] = j * -12345 + 7;
    for (int j = 0; j < 10; j++) f[j] = (uint8_t)((j * 29) % 256);
    for (int j = 0; j < 3; j++) h[j] = (double)(j + 1) / 3.0;
    conv_source(conv);
    llm4d_st_convert(c16, LLM4D_ST_F16, conv, LLM4D_ST_F32, CONV_N);
    llm4d_st_convert(cbf, LLM4D_ST_BF16, conv, LLM4D_ST_F32, CONV_N);

    llm4d_st_writer w;
    llm4d_st_writer_init(&w);
    int64_t sa[] = {3, 5}, sb[] = {4, 3}, sc[] = {2, 2, 3}, sd[] = {7}, se[] = {2, 3}, sf[] = {10}, sh[] = {3},
            se0[] = {0, 4}, sconv[] = {CONV_N};
    /* Added out of order and mixing element sizes, so the writer's layout order is exercised. */
    llm4d_code rc = LLM4D_OK;
    if (!rc) rc = llm4d_st_writer_add(&w, "f.u8", LLM4D_ST_U8, 1, sf, f, err);
    if (!rc) rc = llm4d_st_writer_add(&w, "b.bf16", LLM4D_ST_BF16, 2, sb, b, err);
    if (!rc) rc = llm4d_st_writer_add(&w, "a.f32", LLM4D_ST_F32, 2, sa, a, err);
    if (!rc) rc = llm4d_st_writer_add(&w, "c.f16", LLM4D_ST_F16, 3, sc, c, err);
    if (!rc) rc = llm4d_st_writer_add(&w, "d.i64", LLM4D_ST_I64, 1, sd, d, err);
    if (!rc) rc = llm4d_st_writer_add(&w, "e.i32", LLM4D_ST_I32, 2, se, e, err);
    if (!rc) rc = llm4d_st_writer_add(&w, "g.scalar", LLM4D_ST_F32, 0, NULL, &g, err);
    if (!rc) rc = llm4d_st_writer_add(&w, "h.f64", LLM4D_ST_F64, 1, sh, h, err);
    if (!rc) rc = llm4d_st_writer_add(&w, "i.empty", LLM4D_ST_F32, 2, se0, NULL, err);
    if (!rc) rc = llm4d_st_writer_add(&w, "conv.src", LLM4D_ST_F32, 1, sconv, conv, err);
    if (!rc) rc = llm4d_st_writer_add(&w, "conv.f16", LLM4D_ST_F16, 1, sconv, c16, err);
    if (!rc) rc = llm4d_st_writer_add(&w, "conv.bf16", LLM4D_ST_BF16, 1, sconv, cbf, err);
    if (!rc) rc = llm4d_st_writer_meta(&w, "format", "pt", err);
    if (!rc) rc = llm4d_st_writer_meta(&w, "llm4d.note", "quote \" backslash \\ unicode \xc3\xbc", err);
    if (!rc) rc = llm4d_st_writer_write(&w, path, LLM4D_ST_WRITE_ATOMIC, NULL, NULL, err);
    llm4d_st_writer_free(&w);
    free(conv);
    free(c16);
    free(cbf);
    return rc;
}

static void print_value(const uint8_t *p, llm4d_st_dtype dt) {
    switch (dt) {
    case LLM4D_ST_F16: case LLM4D_ST_BF16: case LLM4D_ST_F32: {
        float v;
        llm4d_st_convert(&v, LLM4D_ST_F32, p, dt, 1);
        printf(" %.9g", v);
        break;
    }
    case LLM4D_ST_F64: { double v; memcpy(&v, p, 8); printf(" %.17g", v); break; }
    case LLM4D_ST_I64: { int64_t v; memcpy(&v, p, 8); printf(" %lld", (long long)v); break; }
    case LLM4D_ST_U64: { uint64_t v; memcpy(&v, p, 8); printf(" %llu", (unsigned long long)v); break; }
    case LLM4D_ST_I32: { int32_t v; memcpy(&v, p, 4); printf(" %d", v); break; }
    case LLM4D_ST_U32: { uint32_t v; memcpy(&v, p, 4); printf(" %u", v); break; }
    case LLM4D_ST_I16: { int16_t v; memcpy(&v, p, 2); printf(" %d", v); break; }
    case LLM4D_ST_U16: { uint16_t v; memcpy(&v, p, 2); printf(" %u", v); break; }
    case LLM4D_ST_I8: printf(" %d", (int)(int8_t)*p); break;
    default: printf(" %u", (unsigned)*p); break;
    }
}

static int dump(const char *path) {
    llm4d_st_file f;
    llm4d_err err = {0};
    if (llm4d_st_open(&f, path, &err) != LLM4D_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return err.code == LLM4D_EUSER ? 2 : 1;
    }
    for (int i = 0; i < f.n_meta; i++) printf("meta %s %s\n", f.meta_key[i], f.meta_val[i]);
    for (int i = 0; i < f.n; i++) {
        const llm4d_st_tensor *t = &f.t[i];
        printf("tensor %s %s %d", t->name, llm4d_st_dtype_name(t->dtype), t->ndim);
        for (int d = 0; d < t->ndim; d++) printf(" %lld", (long long)t->shape[d]);
        printf(" :");
        size_t es = llm4d_st_dtype_size(t->dtype);
        for (size_t k = 0; k < t->nbytes / es; k++) print_value((const uint8_t *)t->data + k * es, t->dtype);
        printf("\n");
    }
    llm4d_st_close(&f);
    return 0;
}

/* ---- self tests ---- */

static char tmpdir[256];

static void path_in(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", tmpdir, name); }

/* A file image: the 8-byte length of `header`, header, then `data_len` bytes 0..n-1. */
static size_t make_image(uint8_t *buf, const char *header, size_t data_len) {
    uint64_t n = strlen(header);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
    memcpy(buf + 8, header, n);
    for (size_t i = 0; i < data_len; i++) buf[8 + n + i] = (uint8_t)i;
    return 8 + n + data_len;
}

/* Expect the image to be rejected with a user error whose message contains every needle. */
static void expect_reject(tally *t, const char *label, const uint8_t *img, size_t len, const char *needle1,
                          const char *needle2) {
    llm4d_st_file f;
    llm4d_err err = {0};
    llm4d_code rc = llm4d_st_parse(&f, img, len, "bad.safetensors", &err);
    int ok = rc == LLM4D_EUSER && strstr(err.msg, "bad.safetensors") && (!needle1 || strstr(err.msg, needle1)) &&
             (!needle2 || strstr(err.msg, needle2));
    char detail[1200];
    snprintf(detail, sizeof detail, "rc=%d msg=%s", (int)rc, rc ? err.msg : "(accepted)");
    check(t, ok, label, ok ? err.msg : detail);
    if (rc == LLM4D_OK) llm4d_st_close(&f);
}

static void test_malformed(tally *t) {
    static uint8_t img[4096];
    size_t n;
    n = make_image(img, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    {
        llm4d_st_file f;
        llm4d_err err = {0};
        llm4d_code rc = llm4d_st_parse(&f, img, n, "good.safetensors", &err);
        check(t, rc == LLM4D_OK && f.n == 1 && f.data_len == 8, "minimal hand-made file accepted", rc ? err.msg : "");
        if (!rc) llm4d_st_close(&f);
    }
    expect_reject(t, "file shorter than 8 bytes", img, 5, "too short", NULL);
    {
        uint8_t b[64];
        memcpy(b, img, 64);
        b[3] = 1; /* length ~16M, far past the end */
        expect_reject(t, "header length past the end", b, 64, "exceeds", NULL);
    }
    n = make_image(img, "[1,2]   ", 0);
    expect_reject(t, "header not an object", img, n, "start with '{'", NULL);
    n = make_image(img, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8);
    expect_reject(t, "truncated JSON", img, n, "not valid JSON", NULL);
    n = make_image(img, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", 8);
    expect_reject(t, "trailing garbage after JSON", img, n, "not valid JSON", NULL);
    n = make_image(img, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  ", 8);
    img[8 + 55] = 0;
    expect_reject(t, "NUL byte in header", img, n, "NUL", NULL);
    n = make_image(img, "{\"x\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    expect_reject(t, "unknown dtype", img, n, "'x'", "unknown dtype 'Q4'");
    n = make_image(img, "{\"x\":{\"dtype\":3,\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    expect_reject(t, "dtype not a string", img, n, "'x'", "dtype");
    n = make_image(img, "{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8);
    expect_reject(t, "negative dimension", img, n, "'x'", "shape[0]");
    n = make_image(img, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8);
    expect_reject(t, "fractional dimension", img, n, "'x'", "shape[0]");
    n = make_image(img, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4);
    expect_reject(t, "too many dimensions", img, n, "'x'", "dimensions");
    n = make_image(img, "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8);
    expect_reject(t, "shape x dtype != byte length", img, n, "'x'", "12 bytes");
    n = make_image(img, "{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8);
    expect_reject(t, "shape overflowing 64 bits", img, n, "'x'", "overflow");
    n = make_image(img, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8);
    expect_reject(t, "offsets past the data", img, n, "'x'", "run past");
    n = make_image(img, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8);
    expect_reject(t, "end before begin", img, n, "'x'", "end before begin");
    n = make_image(img, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8);
    expect_reject(t, "one offset", img, n, "'x'", "data_offsets");
    n = make_image(img, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8);
    expect_reject(t, "no offsets", img, n, "'x'", "data_offsets");
    n = make_image(img, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12);
    expect_reject(t, "overlapping tensors", img, n, "'y'", "overlap");
    n = make_image(img, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}", 16);
    expect_reject(t, "gap between tensors", img, n, "'y'", "gap");
    n = make_image(img, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12);
    expect_reject(t, "bytes after the last tensor", img, n, "cover 8 bytes", "12");
    n = make_image(img, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                        "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
    expect_reject(t, "duplicate tensor name", img, n, "'x'", "twice");
    n = make_image(img, "{\"__metadata__\":{\"k\":1},\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                   1);
    expect_reject(t, "metadata value not a string", img, n, "'k'", "not a string");
    n = make_image(img, "{\"x\":[1]}", 0);
    expect_reject(t, "entry not an object", img, n, "'x'", "not a JSON object");
    n = make_image(img, "{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
    expect_reject(t, "empty tensor name", img, n, "empty name", NULL);
    /* Accepted variants: unpadded header, zero-size tensor, scalar, no tensors at all. */
    n = make_image(img, "{\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]},"
                        "\"z\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[8,8]}}", 8);
    {
        llm4d_st_file f;
        llm4d_err err = {0};
        llm4d_code rc = llm4d_st_parse(&f, img, n, "ok.safetensors", &err);
        const llm4d_st_tensor *s = rc ? NULL : llm4d_st_find(&f, "s"), *z = rc ? NULL : llm4d_st_find(&f, "z");
        check(t, rc == LLM4D_OK && s && s->ndim == 0 && s->nbytes == 8 && z && z->nbytes == 0 && z->shape[1] == 3,
              "scalar and zero-size tensors accepted", rc ? err.msg : "");
        if (!rc) llm4d_st_close(&f);
    }
    n = make_image(img, "{}", 0);
    {
        llm4d_st_file f;
        llm4d_err err = {0};
        llm4d_code rc = llm4d_st_parse(&f, img, n, "empty.safetensors", &err);
        check(t, rc == LLM4D_OK && f.n == 0, "file with no tensors accepted", rc ? err.msg : "");
        if (!rc) llm4d_st_close(&f);
    }
}

static void test_roundtrip(tally *t) {
    char path[512];
    path_in(path, sizeof path, "ref.safetensors");
    llm4d_err err = {0};
    llm4d_code rc = write_reference(path, &err);
    check(t, rc == LLM4D_OK, "write reference file", rc ? err.msg : "");
    if (rc) return;
    char tmpname[600];
    snprintf(tmpname, sizeof tmpname, "%s.tmp%ld", path, (long)getpid());
    check(t, access(tmpname, F_OK) != 0, "atomic write leaves no temporary file", tmpname);
    llm4d_st_file f;
    rc = llm4d_st_open(&f, path, &err);
    check(t, rc == LLM4D_OK, "read it back", rc ? err.msg : "");
    if (rc) return;
    check(t, (8 + f.header_len) % 8 == 0, "data section starts 8-byte aligned", "");
    int aligned = 1;
    for (int i = 0; i < f.n; i++)
        if ((uintptr_t)f.t[i].data % llm4d_st_dtype_size(f.t[i].dtype)) aligned = 0;
    check(t, aligned, "every tensor naturally aligned in the mapping", "");
    check(t, f.n == 12, "12 tensors", "");
    const llm4d_st_tensor *a = llm4d_st_find(&f, "a.f32");
    int ok = a && a->dtype == LLM4D_ST_F32 && a->ndim == 2 && a->shape[0] == 3 && a->shape[1] == 5;
    for (int j = 0; ok && j < 15; j++) ok = ((const float *)a->data)[j] == (float)ref_small(j);
    check(t, ok, "F32 tensor values and shape", "");
    const llm4d_st_tensor *d = llm4d_st_find(&f, "d.i64");
    ok = d && d->dtype == LLM4D_ST_I64 && d->shape[0] == 7 &&
         ((const int64_t *)d->data)[6] == 6 * 1000000000007LL - 3000000000000LL;
    check(t, ok, "I64 tensor values", "");
    const llm4d_st_tensor *b = llm4d_st_find(&f, "b.bf16");
    float bv[12];
    ok = b && b->dtype == LLM4D_ST_BF16 && llm4d_st_convert(bv, LLM4D_ST_F32, b->data, LLM4D_ST_BF16, 12);
    for (int j = 0; ok && j < 12; j++) ok = bv[j] == (float)ref_small(j + 100);
    check(t, ok, "BF16 tensor values (exact small values)", "");
    const llm4d_st_tensor *g = llm4d_st_find(&f, "g.scalar");
    check(t, g && g->ndim == 0 && g->nbytes == 4 && *(const float *)g->data == 3.25f, "scalar", "");
    const llm4d_st_tensor *e = llm4d_st_find(&f, "i.empty");
    check(t, e && e->nbytes == 0 && e->shape[0] == 0 && e->shape[1] == 4, "zero-size tensor", "");
    const char *note = llm4d_st_meta(&f, "llm4d.note");
    check(t, note && strcmp(note, "quote \" backslash \\ unicode \xc3\xbc") == 0, "metadata with escapes",
          note ? note : "(missing)");
    check(t, llm4d_st_find(&f, "nope") == NULL && llm4d_st_meta(&f, "nope") == NULL, "absent names give NULL", "");
    llm4d_st_close(&f);

    /* crc and size reported by the writer equal those of the file. */
    llm4d_st_writer w;
    llm4d_st_writer_init(&w);
    float x[5] = {1, 2, 3, 4, 5};
    int64_t s5[] = {5};
    llm4d_st_writer_add(&w, "x", LLM4D_ST_F32, 1, s5, x, &err);
    uint32_t crc = 0;
    uint64_t bytes = 0;
    path_in(path, sizeof path, "small.safetensors");
    rc = llm4d_st_writer_write(&w, path, LLM4D_ST_WRITE_FSYNC, &crc, &bytes, &err);
    llm4d_st_writer_free(&w);
    struct stat st;
    check(t, rc == LLM4D_OK && stat(path, &st) == 0 && (uint64_t)st.st_size == bytes && bytes % 4 == 0,
          "writer reports the file size", rc ? err.msg : "");

    /* unwritable destination: the parent is a regular file */
    llm4d_st_writer_init(&w);
    llm4d_st_writer_add(&w, "x", LLM4D_ST_F32, 1, s5, x, &err);
    char bad[600];
    snprintf(bad, sizeof bad, "%s/sub/x.safetensors", path);
    rc = llm4d_st_writer_write(&w, bad, 0, NULL, NULL, &err);
    llm4d_st_writer_free(&w);
    check(t, rc == LLM4D_EUSER && strstr(err.msg, bad), "unwritable path is a user error naming it", err.msg);

    path_in(path, sizeof path, "missing.safetensors");
    rc = llm4d_st_open(&f, path, &err);
    check(t, rc == LLM4D_EUSER && strstr(err.msg, path), "missing file is a user error naming it", err.msg);
    path_in(path, sizeof path, "zero.safetensors");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    close(fd);
    rc = llm4d_st_open(&f, path, &err);
    check(t, rc == LLM4D_EUSER && strstr(err.msg, path), "empty file is a user error naming it", err.msg);
}

static uint16_t f16_bits_of(float v) {
    uint16_t h;
    llm4d_st_convert(&h, LLM4D_ST_F16, &v, LLM4D_ST_F32, 1);
    return h;
}

static uint16_t bf16_bits_of(float v) {
    uint16_t h;
    llm4d_st_convert(&h, LLM4D_ST_BF16, &v, LLM4D_ST_F32, 1);
    return h;
}

static void test_convert(tally *t) {
    /* Known IEEE binary16 encodings. */
    struct { float v; uint16_t h; } cases[] = {
        {1.0f, 0x3c00}, {-2.0f, 0xc000}, {65504.0f, 0x7bff}, {65520.0f, 0x7c00}, {65519.0f, 0x7bff},
        {6.103515625e-05f, 0x0400}, {5.9604644775390625e-08f, 0x0001}, {2.98023223876953125e-08f, 0x0000},
        {2.9802326e-08f, 0x0001}, {1.00048828125f, 0x3c00} /* tie, even */, {1.00146484375f, 0x3c02} /* tie, up */,
        {INFINITY, 0x7c00}, {-0.0f, 0x8000}, {0.333333343f, 0x3555},
    };
    int ok = 1;
    char detail[128] = "";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t h = f16_bits_of(cases[i].v);
        if (h != cases[i].h) {
            ok = 0;
            snprintf(detail, sizeof detail, "%.9g -> 0x%04x, want 0x%04x", cases[i].v, h, cases[i].h);
            break;
        }
    }
    check(t, ok, "F32 -> F16 known encodings (ties to even, subnormals, overflow)", detail);
    uint16_t hn = f16_bits_of(NAN);
    check(t, (hn & 0x7c00) == 0x7c00 && (hn & 0x3ff), "F32 -> F16 keeps NaN a NaN", "");
    /* Every finite half survives a round trip through F32. */
    ok = 1;
    for (uint32_t h = 0; h < 65536 && ok; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;
        uint16_t hh = (uint16_t)h, back;
        float f;
        llm4d_st_convert(&f, LLM4D_ST_F32, &hh, LLM4D_ST_F16, 1);
        llm4d_st_convert(&back, LLM4D_ST_F16, &f, LLM4D_ST_F32, 1);
        if (back != hh) {
            ok = 0;
            snprintf(detail, sizeof detail, "0x%04x -> %.9g -> 0x%04x", h, f, back);
        }
    }
    check(t, ok, "F16 -> F32 -> F16 round trip of all 63488 finite halves", ok ? "" : detail);
    struct { float v; uint16_t b; } bc[] = {
        {1.0f, 0x3f80}, {1.00390625f, 0x3f80} /* tie, even */, {1.01171875f, 0x3f82} /* tie, up */,
        {-3.0f, 0xc040}, {3.4028235e38f, 0x7f80} /* rounds up to inf */, {INFINITY, 0x7f80},
    };
    ok = 1;
    for (size_t i = 0; i < sizeof bc / sizeof bc[0]; i++)
        if (bf16_bits_of(bc[i].v) != bc[i].b) {
            ok = 0;
            snprintf(detail, sizeof detail, "%.9g -> 0x%04x, want 0x%04x", bc[i].v, bf16_bits_of(bc[i].v), bc[i].b);
        }
    check(t, ok, "F32 -> BF16 known encodings", ok ? "" : detail);
    uint16_t bn = bf16_bits_of(NAN);
    check(t, (bn & 0x7f80) == 0x7f80 && (bn & 0x7f), "F32 -> BF16 keeps NaN a NaN", "");
    double dv[2] = {0.1, -1e300};
    float fv[2];
    check(t, llm4d_st_convert(fv, LLM4D_ST_F32, dv, LLM4D_ST_F64, 2) && fv[0] == 0.1f && isinf(fv[1]),
          "F64 -> F32", "");
    int32_t iv = 1;
    check(t, !llm4d_st_convert(fv, LLM4D_ST_F32, &iv, LLM4D_ST_I32, 1), "I32 -> F32 refused", "");
    /* Unaligned source (files from other writers need not align tensors). */
    uint8_t raw[9];
    float one = 1.5f;
    memcpy(raw + 1, &one, 4);
    memcpy(raw + 5, &one, 4);
    uint16_t out2[2];
    check(t, llm4d_st_convert(out2, LLM4D_ST_BF16, raw + 1, LLM4D_ST_F32, 2) && out2[0] == 0x3fc0 &&
                 out2[1] == 0x3fc0, "conversion from an unaligned source", "");
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "write") == 0) {
        llm4d_err err = {0};
        if (write_reference(argv[2], &err) != LLM4D_OK) {
            fprintf(stderr, "%s\n", err.msg);
            return 2;
        }
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "dump") == 0) return dump(argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: %s [write PATH | dump PATH]\n", argv[0]);
        return 1;
    }
    snprintf(tmpdir, sizeof tmpdir, "/tmp/llm4d_test_st_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    tally t = {0, 0};
    test_convert(&t);
    test_malformed(&t);
    test_roundtrip(&t);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (t.fail == 0 && system(cmd) != 0) printf("note: could not remove %s\n", tmpdir);
    return tally_summary(&t);
}
