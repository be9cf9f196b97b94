/* megatron.c — Megatron's MMIDIDX .bin/.idx pair: the writer prepare-data uses and the corpus reader (megatron.h).
 *
 * Writing streams ids into a temporary .bin as documents arrive and keeps only the document sizes in memory;
 * the .idx is written at the end, then both are fsync'ed and renamed, the .idx last, so a crash or an error never
 * leaves a pair under the final names that looks complete.
 *
 * Reading checks everything the header claims against the file sizes before trusting it (a truncated or
 * foreign file must be a clear error, not a read past the end of a mapping), then maps the .bin and builds the
 * corpus view: one document per sequence, lens copied out of the .idx (its int32 array sits at an unaligned
 * offset), prefix sums, and the id range in one pass. The .idx pointers must be the running byte offsets of the
 * sizes, which is what every Megatron writer produces; the corpus view relies on it. */
#define _GNU_SOURCE
#include "data/megatron.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/npz.h"

static const char idx_magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
#define IDX_HEADER 34 /* magic 9 + version 8 + dtype 1 + n 8 + n_doc_idx 8 */

static int code_of(llm4d_dtype dt) { return dt == LLM4D_DT_U16 ? 8 : dt == LLM4D_DT_I32 ? 4 : 5; }

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* writer */

llm4d_code llm4d_megatron_writer_open(llm4d_megatron_writer *w, const char *prefix, llm4d_dtype dtype,
                                      llm4d_err *err) {
    memset(w, 0, sizeof *w);
    LLM4D_ASSERT(dtype == LLM4D_DT_U16 || dtype == LLM4D_DT_I32, "megatron writer dtype %d", (int)dtype);
    w->dtype = dtype;
    int pid = (int)getpid();
    if ((size_t)snprintf(w->bin_path, sizeof w->bin_path, "%s.bin", prefix) >= sizeof w->bin_path)
        return llm4d_fail(err, LLM4D_EUSER, "output prefix %s is too long", prefix);
    snprintf(w->idx_path, sizeof w->idx_path, "%s.idx", prefix);
    snprintf(w->bin_tmp, sizeof w->bin_tmp, "%s.tmp%d", w->bin_path, pid);
    snprintf(w->idx_tmp, sizeof w->idx_tmp, "%s.tmp%d", w->idx_path, pid);
    w->bin = fopen(w->bin_tmp, "wb");
    if (!w->bin) {
        int e = errno;
        w->bin_tmp[0] = w->idx_tmp[0] = 0;
        return llm4d_fail(err, e == ENOENT || e == EACCES ? LLM4D_EUSER : LLM4D_EIO, "cannot create %s: %s",
                          w->bin_path, strerror(e));
    }
    return LLM4D_OK;
}

llm4d_code llm4d_megatron_writer_add(llm4d_megatron_writer *w, const int32_t *ids, int64_t n, llm4d_err *err) {
    if (n > INT32_MAX)
        return llm4d_fail(err, LLM4D_EUSER, "a document of %lld tokens does not fit Megatron's int32 sizes",
                          (long long)n);
    if (w->n == w->cap) {
        int64_t cap = w->cap ? 2 * w->cap : 4096;
        int32_t *s = realloc(w->sizes, (size_t)cap * sizeof *s);
        if (!s) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory for %lld document sizes", (long long)cap);
        w->sizes = s;
        w->cap = cap;
    }
    const void *out = ids;
    size_t isz = w->dtype == LLM4D_DT_U16 ? 2 : 4;
    if (w->dtype == LLM4D_DT_U16) {
        if ((size_t)n * 2 > w->stage_cap) {
            void *s = realloc(w->stage, (size_t)n * 2);
            if (!s) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory converting %lld ids", (long long)n);
            w->stage = s;
            w->stage_cap = (size_t)n * 2;
        }
        uint16_t *u = w->stage;
        for (int64_t i = 0; i < n; i++) {
            LLM4D_ASSERT(ids[i] >= 0 && ids[i] <= 0xFFFF, "id %d does not fit uint16", ids[i]);
            u[i] = (uint16_t)ids[i];
        }
        out = u;
    }
    if (n && fwrite(out, isz, (size_t)n, w->bin) != (size_t)n)
        return llm4d_fail(err, LLM4D_EIO, "writing %s: %s", w->bin_tmp, strerror(errno));
    w->sizes[w->n++] = (int32_t)n;
    return LLM4D_OK;
}

static llm4d_code close_synced(FILE *f, const char *path, llm4d_err *err) {
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    int e = errno;
    bad |= fclose(f) != 0;
    if (bad) return llm4d_fail(err, LLM4D_EIO, "writing %s: %s", path, strerror(e ? e : errno));
    return LLM4D_OK;
}

llm4d_code llm4d_megatron_writer_finish(llm4d_megatron_writer *w, llm4d_err *err) {
    llm4d_code rc = close_synced(w->bin, w->bin_tmp, err);
    w->bin = NULL;
    FILE *f = NULL;
    if (rc == LLM4D_OK && !(f = fopen(w->idx_tmp, "wb")))
        rc = llm4d_fail(err, LLM4D_EIO, "cannot create %s: %s", w->idx_tmp, strerror(errno));
    if (rc == LLM4D_OK) {
        uint64_t version = 1, n = (uint64_t)w->n, n_doc = (uint64_t)w->n + 1;
        uint8_t code = (uint8_t)code_of(w->dtype);
        int ok = fwrite(idx_magic, 1, 9, f) == 9 && fwrite(&version, 8, 1, f) == 1 && fwrite(&code, 1, 1, f) == 1 &&
                 fwrite(&n, 8, 1, f) == 1 && fwrite(&n_doc, 8, 1, f) == 1 &&
                 (w->n == 0 || fwrite(w->sizes, 4, (size_t)w->n, f) == (size_t)w->n);
        int64_t isz = w->dtype == LLM4D_DT_U16 ? 2 : 4, ptr = 0;
        for (int64_t i = 0; ok && i < w->n; i++) {
            ok = fwrite(&ptr, 8, 1, f) == 1;
            ptr += w->sizes[i] * isz;
        }
        for (int64_t i = 0; ok && i <= w->n; i++) ok = fwrite(&i, 8, 1, f) == 1;
        if (!ok) {
            rc = llm4d_fail(err, LLM4D_EIO, "writing %s: %s", w->idx_tmp, strerror(errno));
            fclose(f);
        } else {
            rc = close_synced(f, w->idx_tmp, err);
        }
    }
    /* a stale .idx must not pair with the new .bin in the moment between the two renames */
    if (rc == LLM4D_OK && unlink(w->idx_path) != 0 && errno != ENOENT)
        rc = llm4d_fail(err, LLM4D_EIO, "cannot replace %s: %s", w->idx_path, strerror(errno));
    if (rc == LLM4D_OK && rename(w->bin_tmp, w->bin_path) != 0)
        rc = llm4d_fail(err, LLM4D_EIO, "cannot rename %s to %s: %s", w->bin_tmp, w->bin_path, strerror(errno));
    if (rc == LLM4D_OK && rename(w->idx_tmp, w->idx_path) != 0) {
        rc = llm4d_fail(err, LLM4D_EIO, "cannot rename %s to %s: %s", w->idx_tmp, w->idx_path, strerror(errno));
        unlink(w->bin_path);
    }
    if (rc == LLM4D_OK) {
        char dir[1100];
        snprintf(dir, sizeof dir, "%s", w->idx_path);
        int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        w->bin_tmp[0] = w->idx_tmp[0] = 0;
    }
    llm4d_megatron_writer_abort(w);
    return rc;
}

void llm4d_megatron_writer_abort(llm4d_megatron_writer *w) {
    if (w->bin) fclose(w->bin);
    w->bin = NULL;
    if (w->bin_tmp[0]) unlink(w->bin_tmp);
    if (w->idx_tmp[0]) unlink(w->idx_tmp);
    w->bin_tmp[0] = w->idx_tmp[0] = 0;
    free(w->sizes);
    free(w->stage);
    w->sizes = NULL;
    w->stage = NULL;
    w->n = w->cap = 0;
    w->stage_cap = 0;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* reader */

static const char *code_name(int code) {
    static const char *names[] = {"?", "uint8", "int8", "int16", "int32", "int64", "float64", "float", "uint16"};
    return code >= 1 && code <= 8 ? names[code] : "unknown";
}

static llm4d_code read_idx(llm4d_corpus *c, const char *idx_path, int64_t *n_out, size_t *isz, llm4d_err *err) {
    int fd = open(idx_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return llm4d_fail(err, e == ENOENT || e == EACCES ? LLM4D_EUSER : LLM4D_EIO, "%s: cannot open: %s", idx_path,
                          strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return llm4d_fail(err, LLM4D_EUSER, "%s: not a regular file", idx_path);
    }
    size_t len = (size_t)st.st_size;
    if (len < IDX_HEADER) {
        close(fd);
        return llm4d_fail(err, LLM4D_EUSER, "%s: %zu bytes is too short for a Megatron index (truncated?)", idx_path,
                          len);
    }
    unsigned char *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) return llm4d_fail(err, LLM4D_EIO, "%s: cannot map: %s", idx_path, strerror(e));
    llm4d_code rc = LLM4D_OK;
    uint64_t version, n, n_doc;
    memcpy(&version, m + 9, 8);
    int code = m[17];
    memcpy(&n, m + 18, 8);
    memcpy(&n_doc, m + 26, 8);
    if (memcmp(m, idx_magic, 9)) {
        rc = llm4d_fail(err, LLM4D_EUSER, "%s: not a Megatron MMIDIDX index (bad magic); expected the .idx written "
                        "by Megatron's preprocess_data.py or llm4d prepare-data --format mmap", idx_path);
    } else if (version != 1) {
        rc = llm4d_fail(err, LLM4D_EUSER, "%s: index version %llu is unknown (llm4d reads version 1)", idx_path,
                        (unsigned long long)version);
    } else if (code != 8 && code != 4 && code != 5) {
        rc = llm4d_fail(err, LLM4D_EUSER, "%s: token dtype code %d (%s) is not supported; token ids must be uint16 "
                        "(8), int32 (4) or int64 (5)", idx_path, code, code_name(code));
    } else if (n > ((uint64_t)1 << 40) || n_doc > ((uint64_t)1 << 40) || n_doc < 1 ||
               len != IDX_HEADER + 12 * n + 8 * n_doc) {
        rc = llm4d_fail(err, LLM4D_EUSER, "%s: %zu bytes, but its header describes %llu sequences and %llu doc_idx "
                        "entries (%llu bytes): the file is truncated or corrupt", idx_path, len,
                        (unsigned long long)n, (unsigned long long)n_doc,
                        (unsigned long long)(IDX_HEADER + 12 * n + 8 * n_doc));
    }
    if (rc == LLM4D_OK) {
        *isz = code == 8 ? 2 : code == 4 ? 4 : 8;
        c->dtype = code == 8 ? LLM4D_DT_U16 : code == 4 ? LLM4D_DT_I32 : LLM4D_DT_I64;
        c->n_docs = (int64_t)n;
        c->lens = malloc((n ? n : 1) * sizeof *c->lens);
        c->doc_start = malloc((n + 1) * sizeof *c->doc_start);
        if (!c->lens || !c->doc_start) rc = llm4d_fail(err, LLM4D_ENOMEM, "%s: out of memory for %llu sizes",
                                                       idx_path, (unsigned long long)n);
    }
    if (rc == LLM4D_OK) {
        memcpy(c->lens, m + IDX_HEADER, 4 * n);
        const unsigned char *ptrs = m + IDX_HEADER + 4 * n, *docs = ptrs + 8 * n;
        int64_t s = 0;
        c->doc_start[0] = 0;
        for (uint64_t i = 0; i < n && rc == LLM4D_OK; i++) {
            int64_t p;
            memcpy(&p, ptrs + 8 * i, 8);
            if (c->lens[i] < 0)
                rc = llm4d_fail(err, LLM4D_EUSER, "%s: sizes[%llu] = %d is negative (corrupt index)", idx_path,
                                (unsigned long long)i, c->lens[i]);
            else if (p != s * (int64_t)*isz)
                rc = llm4d_fail(err, LLM4D_EUSER, "%s: pointers[%llu] = %lld but the sizes before it add up to byte "
                                "%lld (corrupt index, or sequences stored out of order)", idx_path,
                                (unsigned long long)i, (long long)p, (long long)(s * (int64_t)*isz));
            c->doc_start[i + 1] = s += c->lens[i];
        }
        int64_t prev = -1;
        for (uint64_t i = 0; i < n_doc && rc == LLM4D_OK; i++) {
            int64_t d;
            memcpy(&d, docs + 8 * i, 8);
            if ((i == 0 && d != 0) || d < prev || d > (int64_t)n || (i == n_doc - 1 && d != (int64_t)n))
                rc = llm4d_fail(err, LLM4D_EUSER, "%s: doc_idx[%llu] = %lld is out of order or range (corrupt index)",
                                idx_path, (unsigned long long)i, (long long)d);
            prev = d;
        }
        c->n_tokens = s;
        *n_out = (int64_t)n;
    }
    munmap(m, len);
    return rc;
}

llm4d_code llm4d_corpus_open_megatron(llm4d_corpus *c, const char *path, llm4d_err *err) {
    memset(c, 0, sizeof *c);
    char prefix[1024], bin_path[1100], idx_path[1100];
    size_t pl = strlen(path);
    if (ends_with(path, ".bin") || ends_with(path, ".idx")) pl -= 4;
    if (pl >= sizeof prefix) return llm4d_fail(err, LLM4D_EUSER, "%s: path is too long", path);
    memcpy(prefix, path, pl);
    prefix[pl] = 0;
    snprintf(bin_path, sizeof bin_path, "%s.bin", prefix);
    snprintf(idx_path, sizeof idx_path, "%s.idx", prefix);
    if ((size_t)snprintf(c->path, sizeof c->path, "%s.bin", prefix) >= sizeof c->path)
        return llm4d_fail(err, LLM4D_EUSER, "%s: path is too long", path);
    c->n_found = 1;
    int64_t n = 0;
    size_t isz = 0;
    llm4d_code rc = read_idx(c, idx_path, &n, &isz, err);
    int fd = -1;
    struct stat st;
    if (rc == LLM4D_OK && (fd = open(bin_path, O_RDONLY | O_CLOEXEC)) < 0) {
        int e = errno;
        rc = llm4d_fail(err, e == ENOENT || e == EACCES ? LLM4D_EUSER : LLM4D_EIO, "%s: cannot open: %s%s", bin_path,
                        strerror(e), e == ENOENT ? " (an .idx needs its .bin beside it)" : "");
    }
    if (rc == LLM4D_OK && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)))
        rc = llm4d_fail(err, LLM4D_EUSER, "%s: not a regular file", bin_path);
    if (rc == LLM4D_OK && (uint64_t)st.st_size != (uint64_t)c->n_tokens * isz)
        rc = llm4d_fail(err, LLM4D_EUSER, "%s: %lld bytes, but %s describes %lld tokens of %zu bytes (%lld bytes): "
                        "the pair is truncated or mismatched", bin_path, (long long)st.st_size, idx_path,
                        (long long)c->n_tokens, isz, (long long)c->n_tokens * (long long)isz);
    if (rc == LLM4D_OK && c->n_tokens == 0)
        rc = llm4d_fail(err, LLM4D_EUSER, "%s: the corpus holds no tokens; tokenize some text into it first", bin_path);
    if (rc == LLM4D_OK) {
        void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) rc = llm4d_fail(err, LLM4D_EIO, "%s: cannot map: %s", bin_path, strerror(errno));
        else {
            c->map = map;
            c->map_len = (size_t)st.st_size;
            c->ids = map;
            madvise(map, c->map_len, MADV_SEQUENTIAL); /* for the range scan below; windows are read randomly later */
        }
    }
    if (fd >= 0) close(fd);
    if (rc == LLM4D_OK) {
        int64_t lo = INT64_MAX, hi = INT64_MIN, nt = c->n_tokens;
        const void *ids = c->ids;
        llm4d_dtype dt = c->dtype;
#pragma omp parallel for reduction(min : lo) reduction(max : hi) schedule(static)
        for (int64_t i = 0; i < nt; i++) {
            int64_t v = dt == LLM4D_DT_U16 ? ((const uint16_t *)ids)[i]
                        : dt == LLM4D_DT_I32 ? ((const int32_t *)ids)[i]
                                             : ((const int64_t *)ids)[i];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        madvise(c->map, c->map_len, MADV_NORMAL);
        if (lo < 0) rc = llm4d_fail(err, LLM4D_EUSER, "%s: holds a negative token id (%lld)", bin_path, (long long)lo);
        else if (hi > INT32_MAX)
            rc = llm4d_fail(err, LLM4D_EUSER, "%s: holds token id %lld, beyond int32 (no vocabulary is that large)",
                            bin_path, (long long)hi);
        c->max_id = hi;
    }
    if (rc != LLM4D_OK) llm4d_corpus_close(c);
    return rc;
}
