/* safetensors.c — the safetensors writer and validating reader (see safetensors.h for the format and the rules).
 *
 * The reader trusts nothing in the file: a checkpoint can be truncated by a full disk, hit by a flipped bit, or be
 * some other file renamed, and each of those must become one line that names the file and the tensor, not a
 * crash or a silently wrong weight. Numbers in the header are JSON doubles to cJSON, so every one is checked to be
 * a non-negative integer below 2^53 before it is used as a size. */
#define _GNU_SOURCE
#include "ckpt/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/bf16.h"
#include "core/fs.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; so must the host be");

static const struct {
    const char *name;
    size_t size;
} st_dtypes[LLM4D_ST_NDTYPES] = {
    [LLM4D_ST_BOOL] = {"BOOL", 1}, [LLM4D_ST_U8] = {"U8", 1},     [LLM4D_ST_I8] = {"I8", 1},
    [LLM4D_ST_U16] = {"U16", 2},   [LLM4D_ST_I16] = {"I16", 2},   [LLM4D_ST_F16] = {"F16", 2},
    [LLM4D_ST_BF16] = {"BF16", 2}, [LLM4D_ST_U32] = {"U32", 4},   [LLM4D_ST_I32] = {"I32", 4},
    [LLM4D_ST_F32] = {"F32", 4},   [LLM4D_ST_U64] = {"U64", 8},   [LLM4D_ST_I64] = {"I64", 8},
    [LLM4D_ST_F64] = {"F64", 8},
};

const char *llm4d_st_dtype_name(llm4d_st_dtype dt) {
    return (unsigned)dt < LLM4D_ST_NDTYPES ? st_dtypes[dt].name : "?";
}

size_t llm4d_st_dtype_size(llm4d_st_dtype dt) {
    return (unsigned)dt < LLM4D_ST_NDTYPES ? st_dtypes[dt].size : 0;
}

int llm4d_st_dtype_parse(const char *s, llm4d_st_dtype *out) {
    for (int i = 0; i < LLM4D_ST_NDTYPES; i++)
        if (strcmp(s, st_dtypes[i].name) == 0) {
            *out = (llm4d_st_dtype)i;
            return 1;
        }
    return 0;
}

int llm4d_st_dtype_is_float(llm4d_st_dtype dt) {
    return dt == LLM4D_ST_F16 || dt == LLM4D_ST_BF16 || dt == LLM4D_ST_F32 || dt == LLM4D_ST_F64;
}

int64_t llm4d_st_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

/* ---- float conversions ---- */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) {
        float v = ldexpf((float)mant, -24); /* zero or subnormal: mant * 2^-24 is exact in f32 */
        return sign ? -v : v;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* Round to nearest even. Subnormal halves are produced by letting the FPU do the rounding: adding a magic
 * constant whose ulp is the f16 subnormal step shifts the mantissa bits into place. */
static uint16_t f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint32_t sign = u & 0x80000000u;
    u ^= sign;
    uint16_t o;
    if (u >= (143u << 23)) {                 /* >= 65536 (rounds to inf), inf or nan */
        o = u > 0x7f800000u ? 0x7e00 : 0x7c00;
    } else if (u < (113u << 23)) {           /* below the smallest normal half */
        const uint32_t magic = 126u << 23;   /* 0.5: its ulp is 2^-24, the f16 subnormal step */
        o = (uint16_t)(f32_bits(bits_f32(u) + bits_f32(magic)) - magic);
    } else {
        uint32_t odd = (u >> 13) & 1u;
        u += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
        o = (uint16_t)(u >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}

/* Element loads and stores go through memcpy: tensors in files from other writers need not be aligned, and a
 * misaligned float pointer is undefined behaviour the vectorizer is entitled to exploit. */
static double load_float(const uint8_t *src, llm4d_st_dtype dt, size_t i) {
    uint16_t h;
    float f;
    double d;
    switch (dt) {
    case LLM4D_ST_F16: memcpy(&h, src + 2 * i, 2); return f16_to_f32(h);
    case LLM4D_ST_BF16: memcpy(&h, src + 2 * i, 2); return llm4d_bf16_to_f32(h);
    case LLM4D_ST_F32: memcpy(&f, src + 4 * i, 4); return f;
    default: memcpy(&d, src + 8 * i, 8); return d;
    }
}

int llm4d_st_convert(void *dst, llm4d_st_dtype dst_dt, const void *src, llm4d_st_dtype src_dt, size_t n) {
    if (dst_dt == src_dt) {
        memmove(dst, src, n * llm4d_st_dtype_size(dst_dt));
        return 1;
    }
    if (!llm4d_st_dtype_is_float(dst_dt) || !llm4d_st_dtype_is_float(src_dt)) return 0;
    /* Narrowing from F64 goes through F32 (double rounding, at most 1 ulp of the half type; not a case llm4d
     * produces). */
    uint8_t *o = dst;
    for (size_t i = 0; i < n; i++) {
        double v = load_float(src, src_dt, i);
        uint16_t h;
        float f;
        switch (dst_dt) {
        case LLM4D_ST_F16: h = f32_to_f16((float)v); memcpy(o + 2 * i, &h, 2); break;
        case LLM4D_ST_BF16: h = llm4d_bf16_from_f32((float)v); memcpy(o + 2 * i, &h, 2); break;
        case LLM4D_ST_F32: f = (float)v; memcpy(o + 4 * i, &f, 4); break;
        default: memcpy(o + 8 * i, &v, 8); break;
        }
    }
    return 1;
}

/* ---- writer ---- */

void llm4d_st_writer_init(llm4d_st_writer *w) { memset(w, 0, sizeof *w); }

void llm4d_st_writer_free(llm4d_st_writer *w) {
    for (int i = 0; i < w->n; i++) free(w->t[i].name);
    for (int i = 0; i < w->n_meta; i++) {
        free(w->meta_key[i]);
        free(w->meta_val[i]);
    }
    free(w->t);
    free(w->meta_key);
    free(w->meta_val);
    memset(w, 0, sizeof *w);
}

llm4d_code llm4d_st_writer_add(llm4d_st_writer *w, const char *name, llm4d_st_dtype dt, int ndim,
                               const int64_t *shape, const void *data, llm4d_err *err) {
    LLM4D_ASSERT(name && name[0] && strcmp(name, "__metadata__") != 0, "bad tensor name '%s'", name ? name : "");
    LLM4D_ASSERT((unsigned)dt < LLM4D_ST_NDTYPES, "dtype %d", (int)dt);
    LLM4D_ASSERT(ndim >= 0 && ndim <= LLM4D_ST_MAX_DIMS, "tensor '%s': ndim %d", name, ndim);
    size_t bytes = llm4d_st_dtype_size(dt);
    for (int d = 0; d < ndim; d++) {
        LLM4D_ASSERT(shape[d] >= 0, "tensor '%s': dim %d is %lld", name, d, (long long)shape[d]);
        bytes *= (size_t)shape[d];
    }
    LLM4D_ASSERT(bytes == 0 || data, "tensor '%s' has no data", name);
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        llm4d_st_tensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory adding tensor '%s' to a safetensors file", name);
        w->t = t;
        w->cap = cap;
    }
    llm4d_st_tensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory adding tensor '%s'", name);
    t->dtype = dt;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->data = data;
    t->nbytes = bytes;
    w->n++;
    return LLM4D_OK;
}

llm4d_code llm4d_st_writer_meta(llm4d_st_writer *w, const char *key, const char *value, llm4d_err *err) {
    char *v = strdup(value);
    if (!v) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory setting safetensors metadata '%s'", key);
    for (int i = 0; i < w->n_meta; i++)
        if (strcmp(w->meta_key[i], key) == 0) {
            free(w->meta_val[i]);
            w->meta_val[i] = v;
            return LLM4D_OK;
        }
    if (w->n_meta == w->cap_meta) {
        int cap = w->cap_meta ? 2 * w->cap_meta : 8;
        char **k = realloc(w->meta_key, (size_t)cap * sizeof *k);
        if (k) w->meta_key = k;
        char **vv = k ? realloc(w->meta_val, (size_t)cap * sizeof *vv) : NULL;
        if (!vv) {
            free(v);
            return llm4d_fail(err, LLM4D_ENOMEM, "out of memory setting safetensors metadata '%s'", key);
        }
        w->meta_val = vv;
        w->cap_meta = cap;
    }
    w->meta_key[w->n_meta] = strdup(key);
    if (!w->meta_key[w->n_meta]) {
        free(v);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory setting safetensors metadata '%s'", key);
    }
    w->meta_val[w->n_meta++] = v;
    return LLM4D_OK;
}

/* qsort has no context argument, so the order is decided on the tensors themselves. */
static int cmp_layout(const void *a, const void *b) {
    const llm4d_st_tensor *x = *(const llm4d_st_tensor *const *)a, *y = *(const llm4d_st_tensor *const *)b;
    size_t sx = llm4d_st_dtype_size(x->dtype), sy = llm4d_st_dtype_size(y->dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_tname(const void *a, const void *b) {
    return strcmp((*(const llm4d_st_tensor *const *)a)->name, (*(const llm4d_st_tensor *const *)b)->name);
}

/* Build the padded header text; *order receives the tensors in data order. */
static llm4d_code st_build_header(const llm4d_st_writer *w, char **text, size_t *len,
                                  const llm4d_st_tensor ***order, llm4d_err *err) {
    const llm4d_st_tensor **ord = malloc((size_t)(w->n ? w->n : 1) * sizeof *ord);
    cJSON *root = cJSON_CreateObject();
    if (!ord || !root) goto oom;
    for (int i = 0; i < w->n; i++) ord[i] = &w->t[i];
    /* duplicate names, checked here in n log n rather than at each add (a file may hold thousands of slices) */
    qsort(ord, (size_t)w->n, sizeof *ord, cmp_tname);
    for (int i = 1; i < w->n; i++)
        LLM4D_ASSERT(strcmp(ord[i - 1]->name, ord[i]->name) != 0, "tensor '%s' added twice", ord[i]->name);
    qsort(ord, (size_t)w->n, sizeof *ord, cmp_layout);
    if (w->n_meta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        if (!m) goto oom;
        for (int i = 0; i < w->n_meta; i++)
            if (!cJSON_AddStringToObject(m, w->meta_key[i], w->meta_val[i])) goto oom;
    }
    uint64_t off = 0;
    for (int i = 0; i < w->n; i++) {
        const llm4d_st_tensor *t = ord[i];
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        if (!e || !cJSON_AddStringToObject(e, "dtype", llm4d_st_dtype_name(t->dtype))) goto oom;
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        if (!sh) goto oom;
        for (int d = 0; d < t->ndim; d++) {
            cJSON *num = cJSON_CreateNumber((double)t->shape[d]);
            if (!num || !cJSON_AddItemToArray(sh, num)) goto oom;
        }
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON *b = cJSON_CreateNumber((double)off), *en = cJSON_CreateNumber((double)(off + t->nbytes));
        if (!offs || !b || !en || !cJSON_AddItemToArray(offs, b) || !cJSON_AddItemToArray(offs, en)) goto oom;
        off += t->nbytes;
    }
    char *json = cJSON_PrintUnformatted(root);
    if (!json) goto oom;
    cJSON_Delete(root);
    size_t jl = strlen(json);
    size_t padded = (jl + 7) & ~(size_t)7; /* 8 + padded is a multiple of 8: the data starts aligned */
    char *t = realloc(json, padded + 1);
    if (!t) {
        free(json);
        free(ord);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory building a safetensors header");
    }
    memset(t + jl, ' ', padded - jl);
    t[padded] = 0;
    *text = t;
    *len = padded;
    *order = ord;
    return LLM4D_OK;
oom:
    cJSON_Delete(root);
    free(ord);
    return llm4d_fail(err, LLM4D_ENOMEM, "out of memory building a safetensors header");
}

/* Write n bytes and add them to the file's running CRC-32. */
static int write_crc(llm4d_fault *f, int fd, const void *p, size_t n, uLong *crc) {
    *crc = crc32_z(*crc, p, n);
    return llm4d_fs_write(f, fd, p, n);
}

static int fsync_parent_dir(llm4d_fault *f, const char *path) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    return llm4d_fs_fsync_dir(f, dirname(tmp));
}

llm4d_code llm4d_st_writer_write_hooked(const llm4d_st_writer *w, const char *path, int flags,
                                        uint32_t *crc32_out, uint64_t *bytes_out, const llm4d_st_write_hooks *hooks,
                                        llm4d_err *err) {
    llm4d_fault *fault = hooks ? hooks->fault : NULL;
    char *header = NULL;
    size_t hlen = 0;
    const llm4d_st_tensor **ord = NULL;
    LLM4D_TRY(st_build_header(w, &header, &hlen, &ord, err));
    if (hlen > LLM4D_ST_MAX_HEADER) {
        free(header);
        free(ord);
        return llm4d_fail(err, LLM4D_EUSER, "writing %s: the safetensors header would be %zu bytes, over the %u-byte "
                          "limit readers accept; write fewer tensors per file", path, hlen, LLM4D_ST_MAX_HEADER);
    }
    char target[1100];
    if (flags & LLM4D_ST_WRITE_ATOMIC) snprintf(target, sizeof target, "%s.tmp%ld", path, (long)getpid());
    else snprintf(target, sizeof target, "%s", path);

    llm4d_code rc = LLM4D_OK;
    int fd = llm4d_fs_create(fault, target, 0644);
    if (fd < 0) {
        int e = errno;
        rc = llm4d_fail(err, (e == ENOSPC || e == EIO) ? LLM4D_EIO : LLM4D_EUSER,
                        "cannot create %s: %s; %s", target, strerror(e),
                        e == ENOENT || e == ENOTDIR ? "check that the directory exists" : llm4d_fs_fix(e));
        goto out;
    }
    uLong crc = crc32_z(0L, Z_NULL, 0);
    uint8_t len8[8];
    uint64_t hl = hlen;
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)(hl >> (8 * i));
    uint64_t total = 8 + hlen;
    int bad = write_crc(fault, fd, len8, 8, &crc) || write_crc(fault, fd, header, hlen, &crc);
    if (!bad && hooks && hooks->after_header) hooks->after_header(hooks->ctx);
    for (int i = 0; i < w->n && !bad; i++) {
        bad = write_crc(fault, fd, ord[i]->data, ord[i]->nbytes, &crc);
        total += ord[i]->nbytes;
    }
    if (!bad && (flags & (LLM4D_ST_WRITE_FSYNC | LLM4D_ST_WRITE_ATOMIC))) bad = llm4d_fs_fsync(fault, fd) != 0;
    int e = errno;
    if (close(fd) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        unlink(target);
        rc = llm4d_fail(err, LLM4D_EIO, "writing %s: %s; %s", target, strerror(e), llm4d_fs_fix(e));
        goto out;
    }
    if (flags & LLM4D_ST_WRITE_ATOMIC) {
        if (llm4d_fs_rename(fault, target, path) != 0) {
            e = errno;
            unlink(target);
            rc = llm4d_fail(err, LLM4D_EIO, "renaming %s to %s: %s; %s", target, path, strerror(e), llm4d_fs_fix(e));
            goto out;
        }
        if (fsync_parent_dir(fault, path) != 0) {
            rc = llm4d_fail(err, LLM4D_EIO, "syncing the directory of %s: %s; %s", path, strerror(errno),
                            llm4d_fs_fix(errno));
            goto out;
        }
    }
    if (crc32_out) *crc32_out = (uint32_t)crc;
    if (bytes_out) *bytes_out = total;
out:
    free(header);
    free(ord);
    return rc;
}

llm4d_code llm4d_st_writer_write(const llm4d_st_writer *w, const char *path, int flags, uint32_t *crc32_out,
                                 uint64_t *bytes_out, llm4d_err *err) {
    return llm4d_st_writer_write_hooked(w, path, flags, crc32_out, bytes_out, NULL, err);
}

/* ---- reader ---- */

static llm4d_code st_bad(llm4d_err *err, const char *what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static llm4d_code st_bad(llm4d_err *err, const char *what, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return llm4d_fail(err, LLM4D_EUSER, "%s: %s (corrupt, truncated or not safetensors; re-create the file)", what,
                      msg);
}

/* A JSON number that is an integer in [0, 2^53]; 0 when it is not. */
static int json_u53(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double v = j->valuedouble;
    if (!(v >= 0.0) || v > 9007199254740992.0 || v != floor(v)) return 0;
    *out = (uint64_t)v;
    return 1;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const llm4d_st_tensor *const *)a)->name, (*(const llm4d_st_tensor *const *)b)->name);
}

static int cmp_offset(const void *a, const void *b) {
    const llm4d_st_tensor *x = *(const llm4d_st_tensor *const *)a, *y = *(const llm4d_st_tensor *const *)b;
    if (x->data != y->data) return (const uint8_t *)x->data < (const uint8_t *)y->data ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static llm4d_code st_parse_entry(llm4d_st_file *f, const cJSON *e, llm4d_st_tensor *t, const char *what,
                                 llm4d_err *err) {
    const char *nm = e->string;
    if (!cJSON_IsObject(e)) return st_bad(err, what, "tensor '%s': header entry is not a JSON object", nm);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt)) return st_bad(err, what, "tensor '%s': \"dtype\" is missing or not a string", nm);
    if (!llm4d_st_dtype_parse(dt->valuestring, &t->dtype))
        return st_bad(err, what, "tensor '%s': unknown dtype '%.32s' (known: F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 "
                      "U16 U8 BOOL)", nm, dt->valuestring);
    if (!cJSON_IsArray(sh)) return st_bad(err, what, "tensor '%s': \"shape\" is missing or not an array", nm);
    int nd = cJSON_GetArraySize(sh);
    if (nd > LLM4D_ST_MAX_DIMS)
        return st_bad(err, what, "tensor '%s': %d dimensions, more than the %d llm4d supports", nm, nd,
                      LLM4D_ST_MAX_DIMS);
    t->ndim = nd;
    /* Bytes computed with overflow checks: a hostile shape must not wrap to a small number. */
    uint64_t bytes = llm4d_st_dtype_size(t->dtype);
    int d = 0, zero = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, sh) {
        uint64_t v;
        if (!json_u53(x, &v)) return st_bad(err, what, "tensor '%s': shape[%d] is not a non-negative integer", nm, d);
        t->shape[d++] = (int64_t)v;
        if (v == 0) zero = 1;
        else if (!zero && bytes > UINT64_MAX / v)
            return st_bad(err, what, "tensor '%s': shape overflows 64 bits", nm);
        else if (!zero) bytes *= v;
    }
    if (zero) bytes = 0;
    uint64_t b, en;
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || !json_u53(cJSON_GetArrayItem(of, 0), &b) ||
        !json_u53(cJSON_GetArrayItem(of, 1), &en))
        return st_bad(err, what, "tensor '%s': \"data_offsets\" is not [begin, end] with non-negative integers", nm);
    if (en < b) return st_bad(err, what, "tensor '%s': data_offsets [%llu, %llu] end before begin", nm,
                              (unsigned long long)b, (unsigned long long)en);
    if (en > f->data_len)
        return st_bad(err, what, "tensor '%s': data_offsets [%llu, %llu] run past the %zu bytes of data", nm,
                      (unsigned long long)b, (unsigned long long)en, f->data_len);
    if (en - b != bytes)
        return st_bad(err, what, "tensor '%s': shape x %s size is %llu bytes but data_offsets span %llu", nm,
                      llm4d_st_dtype_name(t->dtype), (unsigned long long)bytes, (unsigned long long)(en - b));
    t->data = f->data + b;
    t->nbytes = (size_t)bytes;
    return LLM4D_OK;
}

/* Fills everything in f but map/map_len; on failure frees what it allocated and leaves the mapping alone. */
static llm4d_code st_parse_buf(llm4d_st_file *f, const void *buf, size_t len, const char *what, llm4d_err *err) {
    snprintf(f->path, sizeof f->path, "%s", what);
    const uint8_t *p = buf;
    if (len < 8) return st_bad(err, what, "%zu bytes, too short for the 8-byte header length", len);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)p[i] << (8 * i);
    if (n > len - 8)
        return st_bad(err, what, "header length %llu exceeds the %zu bytes that follow it", (unsigned long long)n,
                      len - 8);
    if (n > LLM4D_ST_MAX_HEADER)
        return st_bad(err, what, "header length %llu is over the %u-byte limit", (unsigned long long)n,
                      LLM4D_ST_MAX_HEADER);
    if (n < 2 || p[8] != '{') return st_bad(err, what, "the header does not start with '{'");
    if (memchr(p + 8, 0, (size_t)n)) return st_bad(err, what, "the header contains a NUL byte");
    f->header_len = (size_t)n;
    f->data = p + 8 + n;
    f->data_len = len - 8 - (size_t)n;

    char *text = malloc((size_t)n + 1);
    if (!text) return llm4d_fail(err, LLM4D_ENOMEM, "%s: out of memory reading a %llu-byte header", what,
                                 (unsigned long long)n);
    memcpy(text, p + 8, (size_t)n);
    text[n] = 0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    llm4d_code rc = LLM4D_OK;
    const llm4d_st_tensor **idx = NULL;
    if (!root) {
        rc = st_bad(err, what, "the header is not valid JSON (error near byte %ld of %llu)",
                    end ? (long)(end - text) : -1L, (unsigned long long)n);
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        rc = st_bad(err, what, "the header is not a JSON object");
        goto out;
    }
    int count = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) count++;
    f->t = calloc((size_t)(count ? count : 1), sizeof *f->t);
    idx = malloc((size_t)(count ? count : 1) * sizeof *idx);
    if (!f->t || !idx) {
        rc = llm4d_fail(err, LLM4D_ENOMEM, "%s: out of memory", what);
        goto out;
    }
    int seen_meta = 0;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (seen_meta++) {
                rc = st_bad(err, what, "\"__metadata__\" appears twice");
                goto out;
            }
            if (!cJSON_IsObject(e)) {
                rc = st_bad(err, what, "\"__metadata__\" is not an object");
                goto out;
            }
            int nm = cJSON_GetArraySize(e);
            f->meta_key = calloc((size_t)(nm ? nm : 1), sizeof(char *));
            f->meta_val = calloc((size_t)(nm ? nm : 1), sizeof(char *));
            if (!f->meta_key || !f->meta_val) {
                rc = llm4d_fail(err, LLM4D_ENOMEM, "%s: out of memory", what);
                goto out;
            }
            const cJSON *m;
            cJSON_ArrayForEach(m, e) {
                if (!cJSON_IsString(m)) {
                    rc = st_bad(err, what, "metadata '%s' is not a string", m->string);
                    goto out;
                }
                for (int i = 0; i < f->n_meta; i++)
                    if (strcmp(f->meta_key[i], m->string) == 0) {
                        rc = st_bad(err, what, "metadata '%s' appears twice", m->string);
                        goto out;
                    }
                f->meta_key[f->n_meta] = strdup(m->string);
                f->meta_val[f->n_meta] = strdup(m->valuestring);
                if (!f->meta_key[f->n_meta] || !f->meta_val[f->n_meta]) {
                    f->n_meta++;
                    rc = llm4d_fail(err, LLM4D_ENOMEM, "%s: out of memory", what);
                    goto out;
                }
                f->n_meta++;
            }
            continue;
        }
        llm4d_st_tensor *t = &f->t[f->n];
        t->name = strdup(e->string);
        if (!t->name) {
            rc = llm4d_fail(err, LLM4D_ENOMEM, "%s: out of memory", what);
            goto out;
        }
        f->n++;
        if (!t->name[0]) {
            rc = st_bad(err, what, "a tensor has an empty name");
            goto out;
        }
        if ((rc = st_parse_entry(f, e, t, what, err)) != LLM4D_OK) goto out;
    }
    for (int i = 0; i < f->n; i++) idx[i] = &f->t[i];
    qsort(idx, (size_t)f->n, sizeof *idx, cmp_name);
    for (int i = 1; i < f->n; i++)
        if (strcmp(idx[i - 1]->name, idx[i]->name) == 0) {
            rc = st_bad(err, what, "tensor '%s' appears twice in the header", idx[i]->name);
            goto out;
        }
    /* The data must be covered exactly: tensors back to back from offset 0 to the end of the file. */
    qsort(idx, (size_t)f->n, sizeof *idx, cmp_offset);
    size_t expect = 0;
    for (int i = 0; i < f->n; i++) {
        size_t b = (size_t)((const uint8_t *)idx[i]->data - f->data);
        if (b < expect) {
            rc = st_bad(err, what, "tensor '%s': data_offsets [%zu, %zu] overlap tensor '%s'", idx[i]->name, b,
                        b + idx[i]->nbytes, idx[i - 1]->name);
            goto out;
        }
        if (b > expect) {
            rc = st_bad(err, what, "tensor '%s': data_offsets begin at %zu, leaving a gap after byte %zu",
                        idx[i]->name, b, expect);
            goto out;
        }
        expect = b + idx[i]->nbytes;
    }
    if (expect != f->data_len) {
        rc = st_bad(err, what, "the tensors cover %zu bytes of data but the file holds %zu", expect, f->data_len);
        goto out;
    }
out:
    cJSON_Delete(root);
    free(text);
    free(idx);
    if (rc != LLM4D_OK) {
        void *keep = f->map;
        size_t keep_len = f->map_len;
        f->map = NULL; /* the caller (llm4d_st_open) unmaps */
        llm4d_st_close(f);
        f->map = keep;
        f->map_len = keep_len;
    }
    return rc;
}

llm4d_code llm4d_st_parse(llm4d_st_file *f, const void *buf, size_t len, const char *what, llm4d_err *err) {
    memset(f, 0, sizeof *f);
    return st_parse_buf(f, buf, len, what, err);
}

llm4d_code llm4d_st_open(llm4d_st_file *f, const char *path, llm4d_err *err) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return llm4d_fail(err, LLM4D_EUSER, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return llm4d_fail(err, LLM4D_EUSER, "%s is not a regular file", path);
    }
    size_t len = (size_t)st.st_size;
    void *map = NULL;
    if (len > 0) {
        map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return llm4d_fail(err, LLM4D_EIO, "cannot map %s: %s", path, strerror(e));
        }
    }
    close(fd);
    f->map = map;
    f->map_len = len;
    static const uint8_t empty[1] = {0};
    llm4d_code rc = st_parse_buf(f, map ? map : empty, len, path, err);
    if (rc != LLM4D_OK) {
        if (map) munmap(map, len);
        f->map = NULL;
        f->map_len = 0;
    }
    return rc;
}

const llm4d_st_tensor *llm4d_st_find(const llm4d_st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

const char *llm4d_st_meta(const llm4d_st_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_key[i], key) == 0) return f->meta_val[i];
    return NULL;
}

void llm4d_st_close(llm4d_st_file *f) {
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_key[i]);
        free(f->meta_val[i]);
    }
    free(f->meta_key);
    free(f->meta_val);
    if (f->map) munmap(f->map, f->map_len);
    memset(f, 0, sizeof *f);
}
