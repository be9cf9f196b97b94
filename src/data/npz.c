/* npz.c — numpy .npy arrays and .npz archives, read and written (see npz.h).
 *
 * An .npy file is a 6-byte magic "\x93NUMPY", a version (1.0: 16-bit header length; 2.0 and 3.0: 32-bit), then
 * a Python dict literal such as `{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }` padded with spaces
 * to a 64-byte boundary and ended by '\n', then the raw data. numpy reads that dict with ast.literal_eval; we
 * parse only the literal forms numpy writes (strings in either quote, True/False, tuples of integers) and reject
 * everything else, because a corpus read with the wrong width or order trains on garbage without any error.
 *
 * An .npz is a zip whose members are `<name>.npy`; libzip does the zip work, so stored (np.savez) and deflated
 * (np.savez_compressed) members both read. Writes go to `<path>.tmp<pid>`, are fsync'ed, renamed over the final
 * name and the directory is fsync'ed, so a crash leaves either the old file or the new one, never a torn one
 * (the sample-index caches are shared by ranks that may read while another writes). */
#define _GNU_SOURCE
#include "data/npz.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

static const char npy_magic[6] = {(char)0x93, 'N', 'U', 'M', 'P', 'Y'};

size_t llm4d_dtype_size(llm4d_dtype dt) {
    switch (dt) {
    case LLM4D_DT_U16: return 2;
    case LLM4D_DT_I32: return 4;
    case LLM4D_DT_U32: return 4;
    case LLM4D_DT_I64: return 8;
    }
    LLM4D_ASSERT(0, "unknown dtype %d", (int)dt);
    return 0;
}

static const char *dtype_descr(llm4d_dtype dt) {
    switch (dt) {
    case LLM4D_DT_U16: return "<u2";
    case LLM4D_DT_I32: return "<i4";
    case LLM4D_DT_U32: return "<u4";
    case LLM4D_DT_I64: return "<i8";
    }
    LLM4D_ASSERT(0, "unknown dtype %d", (int)dt);
    return "";
}

int64_t llm4d_array_numel(const llm4d_array *a) {
    int64_t n = 1;
    for (int i = 0; i < a->ndim; i++) n *= a->shape[i];
    return n;
}

void llm4d_array_free(llm4d_array *a) {
    if (!a) return;
    if (a->owned) free(a->data);
    a->data = NULL;
    a->owned = 0;
    a->nbytes = 0;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Header parsing. A cursor over [p, end); every step checks the bound, because the header comes from a file. */

typedef struct {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int eat(cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted Python string without escapes (numpy never writes any in descr or the keys). */
static int parse_string(cursor *c, char *out, size_t cap) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return 0;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || n + 1 >= cap) return 0;
        out[n++] = *c->p++;
    }
    if (c->p >= c->end) return 0;
    c->p++;
    out[n] = 0;
    return 1;
}

static int parse_word(cursor *c, const char *word) {
    skip_ws(c);
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return 0;
    const char *after = c->p + n;
    if (after < c->end && (((*after | 32) >= 'a' && (*after | 32) <= 'z') || *after == '_')) return 0;
    c->p = after;
    return 1;
}

/* `(a, b, )` -> shape; returns 0 on a malformed tuple, -1 on more than 4 dimensions, -2 on overflow. */
static int parse_shape(cursor *c, int64_t shape[4], int *ndim) {
    if (!eat(c, '(')) return 0;
    *ndim = 0;
    for (;;) {
        if (eat(c, ')')) return 1;
        skip_ws(c);
        if (c->p >= c->end || *c->p < '0' || *c->p > '9') return 0;
        int64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (INT64_MAX - 9) / 10) return -2;
            v = v * 10 + (*c->p++ - '0');
        }
        if (*ndim == 4) return -1;
        shape[(*ndim)++] = v;
        if (!eat(c, ',')) return eat(c, ')') ? 1 : 0;
    }
}

/* numpy's name for a descr we cannot read, so the message says "float32" rather than only "<f4". */
static const char *descr_numpy_name(const char *d) {
    static const struct {
        const char *code, *name;
    } names[] = {{"f2", "float16"}, {"f4", "float32"}, {"f8", "float64"}, {"i1", "int8"},   {"u1", "uint8"},
                 {"i2", "int16"},   {"u2", "uint16"},  {"i4", "int32"},   {"u4", "uint32"}, {"i8", "int64"},
                 {"u8", "uint64"},  {"b1", "bool"},    {"c8", "complex64"}, {"c16", "complex128"}};
    const char *code = (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=') ? d + 1 : d;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(code, names[i].code) == 0) return names[i].name;
    return "unknown";
}

llm4d_code llm4d_npy_parse(const void *buf, size_t len, const char *what, llm4d_array *out, llm4d_err *err) {
    const unsigned char *b = buf;
    memset(out, 0, sizeof *out);
    if (len < 10 || memcmp(b, npy_magic, sizeof npy_magic) != 0)
        return llm4d_fail(err, LLM4D_EUSER, "%s: bad npy magic (not a .npy array); expected a file written by numpy.save",
                          what);
    int major = b[6], minor = b[7];
    size_t hlen, hstart;
    if (major == 1 && minor == 0) {
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
        hstart = 10;
    } else if ((major == 2 || major == 3) && minor == 0) {
        if (len < 12) return llm4d_fail(err, LLM4D_EUSER, "%s: npy header is truncated (file is %zu bytes)", what, len);
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        hstart = 12;
    } else {
        return llm4d_fail(err, LLM4D_EUSER, "%s: unsupported npy format version %d.%d (llm4d reads 1.0, 2.0, 3.0)",
                          what, major, minor);
    }
    if (hlen > len - hstart)
        return llm4d_fail(err, LLM4D_EUSER, "%s: npy header is truncated (header says %zu bytes, file has %zu)", what,
                          hlen, len - hstart);

    cursor c = {(const char *)b + hstart, (const char *)b + hstart + hlen};
    char descr[32] = "", key[32];
    int have_descr = 0, have_fortran = 0, have_shape = 0, fortran = 0;
    if (!eat(&c, '{')) goto malformed;
    while (!eat(&c, '}')) {
        if (!parse_string(&c, key, sizeof key) || !eat(&c, ':')) goto malformed;
        if (strcmp(key, "descr") == 0) {
            skip_ws(&c);
            if (c.p < c.end && *c.p == '[')
                return llm4d_fail(err, LLM4D_EUSER,
                                  "%s: unsupported dtype (a structured record type); llm4d reads 1-D integer arrays "
                                  "(uint16, int32, uint32, int64)",
                                  what);
            if (!parse_string(&c, descr, sizeof descr)) goto malformed;
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (parse_word(&c, "True"))
                fortran = 1;
            else if (parse_word(&c, "False"))
                fortran = 0;
            else
                goto malformed;
            have_fortran = 1;
        } else if (strcmp(key, "shape") == 0) {
            int rc = parse_shape(&c, out->shape, &out->ndim);
            if (rc == -1)
                return llm4d_fail(err, LLM4D_EUSER, "%s: array has more than 4 dimensions (unsupported)", what);
            if (rc == -2) return llm4d_fail(err, LLM4D_EUSER, "%s: npy header shape overflows 64 bits", what);
            if (rc != 1) goto malformed;
            have_shape = 1;
        } else {
            return llm4d_fail(err, LLM4D_EUSER, "%s: npy header has an unexpected key '%s' (malformed header)", what,
                              key);
        }
        if (!eat(&c, ',')) {
            if (!eat(&c, '}')) goto malformed;
            break;
        }
    }
    skip_ws(&c);
    if (c.p != c.end) goto malformed;
    if (!have_descr || !have_fortran || !have_shape)
        return llm4d_fail(err, LLM4D_EUSER,
                          "%s: npy header lacks the key '%s' (malformed header); expected descr, fortran_order, shape",
                          what, !have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");

    if (descr[0] == '>')
        return llm4d_fail(err, LLM4D_EUSER,
                          "%s: big-endian dtype '%s' is not supported; convert with arr.astype(arr.dtype.newbyteorder('<'))",
                          what, descr);
    if (strcmp(descr, "<u2") == 0)
        out->dtype = LLM4D_DT_U16;
    else if (strcmp(descr, "<i4") == 0)
        out->dtype = LLM4D_DT_I32;
    else if (strcmp(descr, "<u4") == 0)
        out->dtype = LLM4D_DT_U32;
    else if (strcmp(descr, "<i8") == 0)
        out->dtype = LLM4D_DT_I64;
    else
        return llm4d_fail(err, LLM4D_EUSER,
                          "%s: unsupported dtype '%s' (%s); llm4d reads uint16, int32, uint32 and int64 arrays", what,
                          descr, descr_numpy_name(descr));
    if (fortran)
        return llm4d_fail(err, LLM4D_EUSER,
                          "%s: fortran_order True is not supported; save the array in C order (np.ascontiguousarray)",
                          what);

    size_t esize = llm4d_dtype_size(out->dtype);
    uint64_t need = esize;
    for (int i = 0; i < out->ndim; i++) {
        if (out->shape[i] != 0 && need > UINT64_MAX / (uint64_t)out->shape[i])
            return llm4d_fail(err, LLM4D_EUSER, "%s: npy header shape is too large", what);
        need *= (uint64_t)out->shape[i];
    }
    size_t have = len - hstart - hlen;
    if (have < need)
        return llm4d_fail(err, LLM4D_EUSER,
                          "%s: data is truncated: %zu bytes present, the header's shape needs %llu (file cut short?)",
                          what, have, (unsigned long long)need);
    if (have > need)
        return llm4d_fail(err, LLM4D_EUSER,
                          "%s: %zu bytes of data where the header's shape needs %llu (corrupt npy: trailing bytes)",
                          what, have, (unsigned long long)need);
    out->data = (void *)(b + hstart + hlen);
    out->nbytes = (size_t)need;
    out->owned = 0;
    return LLM4D_OK;

malformed:;
    char near[24];
    size_t k = 0;
    for (const char *q = c.p; q < c.end && k < 20; q++) near[k++] = (*q >= 32 && *q < 127) ? *q : ' ';
    near[k] = 0;
    return llm4d_fail(err, LLM4D_EUSER, "%s: malformed npy header near \"%s\"; expected numpy's dict literal", what,
                      k ? near : "<end>");
}

/* Turn a parsed image held in the malloc'ed `img` into an owned array: slide the data to the front and keep it. */
static void adopt_image(llm4d_array *a, void *img) {
    memmove(img, a->data, a->nbytes);
    a->data = img;
    a->owned = 1;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Whole-file reads. */

static llm4d_code read_file(const char *path, void **out, size_t *len, llm4d_err *err) {
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return llm4d_fail(err, e == ENOENT || e == ENOTDIR ? LLM4D_EUSER : LLM4D_EIO, "%s: cannot open: %s", path,
                          strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return llm4d_fail(err, LLM4D_EUSER, "%s: not a regular file", path);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n ? n : 1);
    if (!buf) {
        close(fd);
        return llm4d_fail(err, LLM4D_ENOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            free(buf);
            close(fd);
            return llm4d_fail(err, LLM4D_EIO, "%s: read failed: %s", path, strerror(e));
        }
        got += (size_t)r;
    }
    close(fd);
    *out = buf;
    *len = n;
    return LLM4D_OK;
}

llm4d_code llm4d_npy_read(const char *path, llm4d_array *out, llm4d_err *err) {
    void *img;
    size_t len;
    memset(out, 0, sizeof *out);
    LLM4D_TRY(read_file(path, &img, &len, err));
    llm4d_code rc = llm4d_npy_parse(img, len, path, out, err);
    if (rc != LLM4D_OK) {
        free(img);
        return rc;
    }
    adopt_image(out, img);
    return LLM4D_OK;
}

static const char *zip_open_problem(int ze) {
    switch (ze) {
    case ZIP_ER_NOZIP: return "not a zip archive (an .npz is a zip file; is it truncated or another format?)";
    case ZIP_ER_INCONS: return "zip archive is inconsistent (truncated or corrupt)";
    case ZIP_ER_MULTIDISK: return "multi-disk zip archives are not supported";
    case ZIP_ER_READ: return "read error";
    case ZIP_ER_SEEK: return "seek error (truncated zip archive?)";
    case ZIP_ER_MEMORY: return "out of memory";
    default: return NULL;
    }
}

llm4d_code llm4d_npz_read(const char *path, const char *name, llm4d_array *out, llm4d_err *err) {
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(path, &st) != 0)
        return llm4d_fail(err, errno == ENOENT || errno == ENOTDIR ? LLM4D_EUSER : LLM4D_EIO, "%s: cannot open: %s",
                          path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return llm4d_fail(err, LLM4D_EUSER, "%s: not a regular file", path);
    int ze = 0;
    zip_t *za = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
    if (!za) {
        const char *why = zip_open_problem(ze);
        if (why) return llm4d_fail(err, ze == ZIP_ER_MEMORY ? LLM4D_ENOMEM : LLM4D_EUSER, "%s: %s", path, why);
        zip_error_t ze2;
        zip_error_init_with_code(&ze2, ze);
        llm4d_code rc = llm4d_fail(err, LLM4D_EUSER, "%s: cannot open as an npz (zip): %s", path,
                                   zip_error_strerror(&ze2));
        zip_error_fini(&ze2);
        return rc;
    }

    char member[80];
    snprintf(member, sizeof member, "%s.npy", name);
    zip_int64_t idx = zip_name_locate(za, member, 0);
    if (idx < 0) {
        /* List what is there: "no member ids" is much easier to act on next to "members: tokens, lens". */
        char list[256] = "";
        size_t used = 0;
        zip_int64_t n = zip_get_num_entries(za, 0);
        for (zip_int64_t i = 0; i < n && used + 1 < sizeof list; i++) {
            const char *nm = zip_get_name(za, (zip_uint64_t)i, 0);
            if (!nm) continue;
            size_t l = strlen(nm);
            if (l > 4 && strcmp(nm + l - 4, ".npy") == 0) l -= 4;
            int w = snprintf(list + used, sizeof list - used, "%s%.*s", used ? ", " : "", (int)l, nm);
            if (w < 0) break;
            used += (size_t)w;
        }
        zip_discard(za);
        return llm4d_fail(err, LLM4D_EUSER, "%s: no array '%s' in this npz (members: %s)", path, name,
                          n > 0 ? list : "none");
    }
    zip_stat_t zs;
    zip_stat_init(&zs);
    if (zip_stat_index(za, (zip_uint64_t)idx, 0, &zs) != 0 || !(zs.valid & ZIP_STAT_SIZE)) {
        zip_discard(za);
        return llm4d_fail(err, LLM4D_EUSER, "%s: member %s: cannot read its size (corrupt zip)", path, member);
    }
    if (zs.size > SIZE_MAX - 1) {
        zip_discard(za);
        return llm4d_fail(err, LLM4D_EUSER, "%s: member %s is too large", path, member);
    }
    size_t size = (size_t)zs.size;
    char *img = malloc(size ? size : 1);
    if (!img) {
        zip_discard(za);
        return llm4d_fail(err, LLM4D_ENOMEM, "%s: out of memory for member %s (%zu bytes)", path, member, size);
    }
    zip_file_t *zf = zip_fopen_index(za, (zip_uint64_t)idx, 0);
    if (!zf) {
        llm4d_code rc = llm4d_fail(err, LLM4D_EUSER, "%s: member %s: cannot open: %s", path, member,
                                   zip_error_strerror(zip_get_error(za)));
        free(img);
        zip_discard(za);
        return rc;
    }
    size_t got = 0;
    while (got < size) {
        zip_int64_t r = zip_fread(zf, img + got, size - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    /* A read past the expected size, or a CRC check that fails at the end, both mean corruption. */
    char extra;
    zip_int64_t more = got == size ? zip_fread(zf, &extra, 1) : 0;
    if (got != size || more != 0) {
        const char *why = zip_error_strerror(zip_file_get_error(zf));
        llm4d_code rc = got == size ? llm4d_fail(err, LLM4D_EUSER, "%s: member %s is corrupt (%s)", path, member, why)
                                    : llm4d_fail(err, LLM4D_EUSER,
                                                 "%s: member %s is truncated or corrupt: read %zu of %zu bytes (%s)",
                                                 path, member, got, size, why);
        zip_fclose(zf);
        free(img);
        zip_discard(za);
        return rc;
    }
    zip_fclose(zf);
    zip_discard(za);

    char what[1200];
    snprintf(what, sizeof what, "%s: member %s", path, member);
    llm4d_code rc = llm4d_npy_parse(img, size, what, out, err);
    if (rc != LLM4D_OK) {
        free(img);
        return rc;
    }
    adopt_image(out, img);
    snprintf(out->name, sizeof out->name, "%s", name);
    return LLM4D_OK;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Writing. */

/* Build the .npy header for `a` (version 1.0 when it fits, else 2.0) into hdr; returns its length. The total
 * header is padded to a multiple of 64 bytes, as numpy >= 1.14 does, so mapped data is aligned. */
static size_t npy_header(const llm4d_array *a, char *hdr, size_t cap) {
    char dict[512], shape[256];
    size_t sl = 0;
    shape[0] = 0;
    for (int i = 0; i < a->ndim; i++)
        sl += (size_t)snprintf(shape + sl, sizeof shape - sl, "%s%lld", i ? ", " : "", (long long)a->shape[i]);
    if (a->ndim == 1) snprintf(shape + sl, sizeof shape - sl, ",");
    int dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                      dtype_descr(a->dtype), shape);
    LLM4D_ASSERT(dl > 0 && (size_t)dl < sizeof dict, "npy header too long (%d)", dl);
    size_t pre = 10, total = (pre + (size_t)dl + 1 + 63) / 64 * 64;
    int v2 = total - pre > 65535;
    if (v2) {
        pre = 12;
        total = (pre + (size_t)dl + 1 + 63) / 64 * 64;
    }
    LLM4D_ASSERT(total <= cap, "npy header buffer too small (%zu > %zu)", total, cap);
    size_t hlen = total - pre;
    memcpy(hdr, npy_magic, 6);
    hdr[6] = v2 ? 2 : 1;
    hdr[7] = 0;
    hdr[8] = (char)(hlen & 0xff);
    hdr[9] = (char)((hlen >> 8) & 0xff);
    if (v2) {
        hdr[10] = (char)((hlen >> 16) & 0xff);
        hdr[11] = (char)((hlen >> 24) & 0xff);
    }
    memcpy(hdr + pre, dict, (size_t)dl);
    memset(hdr + pre + dl, ' ', hlen - (size_t)dl - 1);
    hdr[total - 1] = '\n';
    return total;
}

static llm4d_code check_array(const char *path, const llm4d_array *a, llm4d_err *err) {
    LLM4D_ASSERT(a->ndim >= 0 && a->ndim <= 4, "%s: array '%s' has ndim %d", path, a->name, a->ndim);
    for (int i = 0; i < a->ndim; i++) LLM4D_ASSERT(a->shape[i] >= 0, "%s: negative shape", path);
    size_t want = (size_t)llm4d_array_numel(a) * llm4d_dtype_size(a->dtype);
    LLM4D_ASSERT(a->nbytes == want, "%s: array '%s' has nbytes %zu but its shape needs %zu", path, a->name, a->nbytes,
                 want);
    LLM4D_ASSERT(a->data || a->nbytes == 0, "%s: array '%s' has no data", path, a->name);
    (void)err;
    return LLM4D_OK;
}

static void tmp_name(const char *path, char *out, size_t cap) {
    snprintf(out, cap, "%s.tmp%ld", path, (long)getpid());
}

/* fsync the file at `tmp`, rename it to `path`, fsync the directory so the rename itself is durable. */
static llm4d_code commit_file(const char *tmp, const char *path, llm4d_err *err) {
    int fd = open(tmp, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        unlink(tmp);
        return llm4d_fail(err, LLM4D_EIO, "%s: cannot sync the written file: %s", tmp, strerror(e));
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return llm4d_fail(err, LLM4D_EIO, "%s: cannot rename the temporary file into place: %s", path, strerror(e));
    }
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = 0;
    else if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd); /* best effort: some file systems refuse fsync on directories */
        close(dfd);
    }
    return LLM4D_OK;
}

/* Write the concatenation of parts to a fresh temporary file, then commit it under `path`. */
static llm4d_code write_parts(const char *path, const void *const *parts, const size_t *lens, int nparts,
                              llm4d_err *err) {
    char tmp[1100];
    tmp_name(path, tmp, sizeof tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return llm4d_fail(err, LLM4D_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    for (int k = 0; k < nparts; k++) {
        const char *p = parts[k];
        size_t done = 0;
        while (done < lens[k]) {
            ssize_t w = write(fd, p + done, lens[k] - done);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                int e = w < 0 ? errno : ENOSPC;
                close(fd);
                unlink(tmp);
                return llm4d_fail(err, LLM4D_EIO, "%s: write failed: %s", path, strerror(e));
            }
            done += (size_t)w;
        }
    }
    if (close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return llm4d_fail(err, LLM4D_EIO, "%s: write failed: %s", path, strerror(e));
    }
    return commit_file(tmp, path, err);
}

llm4d_code llm4d_npy_write(const char *path, const llm4d_array *a, llm4d_err *err) {
    LLM4D_TRY(check_array(path, a, err));
    char hdr[1024];
    size_t hl = npy_header(a, hdr, sizeof hdr);
    const void *parts[2] = {hdr, a->data};
    size_t lens[2] = {hl, a->nbytes};
    return write_parts(path, parts, lens, 2, err);
}

llm4d_code llm4d_npz_write(const char *path, const llm4d_array *arrays, int n, int compress, llm4d_err *err) {
    for (int i = 0; i < n; i++) LLM4D_TRY(check_array(path, &arrays[i], err));
    if (n == 0) {
        /* libzip deletes an archive left empty at close; np.savez() of nothing is the bare end-of-directory record. */
        static const unsigned char eocd[22] = {0x50, 0x4b, 0x05, 0x06};
        const void *parts[1] = {eocd};
        size_t lens[1] = {sizeof eocd};
        return write_parts(path, parts, lens, 1, err);
    }
    char tmp[1100];
    tmp_name(path, tmp, sizeof tmp);
    unlink(tmp); /* a leftover from a crashed run of a process with the same pid */
    int ze = 0;
    zip_t *za = zip_open(tmp, ZIP_CREATE | ZIP_EXCL, &ze);
    if (!za) {
        zip_error_t e;
        zip_error_init_with_code(&e, ze);
        llm4d_code rc = llm4d_fail(err, LLM4D_EIO, "%s: cannot create: %s", tmp, zip_error_strerror(&e));
        zip_error_fini(&e);
        return rc;
    }
    /* Each member is header + data in one buffer that libzip frees after zip_close (freep = 1). The copy doubles
     * memory for a moment; these files are corpora and index caches, far smaller than the model. */
    for (int i = 0; i < n; i++) {
        const llm4d_array *a = &arrays[i];
        char hdr[1024];
        size_t hl = npy_header(a, hdr, sizeof hdr);
        char *img = malloc(hl + a->nbytes);
        if (!img) {
            zip_discard(za);
            return llm4d_fail(err, LLM4D_ENOMEM, "%s: out of memory writing '%s'", path, a->name);
        }
        memcpy(img, hdr, hl);
        if (a->nbytes) memcpy(img + hl, a->data, a->nbytes);
        zip_source_t *src = zip_source_buffer(za, img, hl + a->nbytes, 1);
        if (!src) {
            free(img);
            zip_discard(za);
            return llm4d_fail(err, LLM4D_ENOMEM, "%s: cannot stage member '%s'", path, a->name);
        }
        char member[80];
        snprintf(member, sizeof member, "%s.npy", a->name);
        zip_int64_t idx = zip_file_add(za, member, src, ZIP_FL_ENC_UTF_8);
        if (idx < 0) {
            llm4d_code rc = llm4d_fail(err, LLM4D_EINTERNAL, "%s: cannot add member %s: %s", path, member,
                                       zip_error_strerror(zip_get_error(za)));
            zip_source_free(src);
            zip_discard(za);
            return rc;
        }
        if (zip_set_file_compression(za, (zip_uint64_t)idx, compress ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0) != 0) {
            llm4d_code rc = llm4d_fail(err, LLM4D_EINTERNAL, "%s: cannot set compression of %s: %s", path, member,
                                       zip_error_strerror(zip_get_error(za)));
            zip_discard(za);
            return rc;
        }
    }
    if (zip_close(za) != 0) {
        llm4d_code rc = llm4d_fail(err, LLM4D_EIO, "%s: writing the zip failed: %s", path,
                                   zip_error_strerror(zip_get_error(za)));
        zip_discard(za);
        unlink(tmp);
        return rc;
    }
    return commit_file(tmp, path, err);
}
