/* corpus.c — opening one tokenized corpus: Paddle's formats here, Megatron's by dispatch to megatron.c, and the
 * discovery of the corpora a directory holds (see corpus.h and reference/paddle-gpt.md §2.1, §8.1).
 *
 * Old format: P_ids.npz with arrays `ids` and `lens`, read whole (these files are small, and a member of a zip
 * cannot be mapped anyway when it is deflated). New format: P_ids.npy holds the ids and is memory-mapped, so a
 * corpus larger than RAM costs only page cache; P_idx.npz holds `lens` (and `docs`, unused, as in PaddleNLP).
 *
 * Every check a later stage relies on happens here, once: lens >= 0, sum(lens) == len(ids), ids >= 0 and
 * representable as int32 (readers hand out int32 windows). max_id is computed in the same pass so the trainer can
 * compare it with the vocabulary before step 1 rather than index out of the embedding table at step 1000. */
#define _GNU_SOURCE
#include "data/corpus.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/megatron.h"
#include "data/npz.h"

/* Format a path; 0 when it does not fit (then the caller reports the path as too long). */
static int pathf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int pathf(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < cap;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int64_t id_at(const void *ids, llm4d_dtype dt, int64_t i) {
    switch (dt) {
    case LLM4D_DT_U16: return ((const uint16_t *)ids)[i];
    case LLM4D_DT_I32: return ((const int32_t *)ids)[i];
    case LLM4D_DT_U32: return ((const uint32_t *)ids)[i];
    case LLM4D_DT_I64: return ((const int64_t *)ids)[i];
    }
    return 0;
}

/* lens of any supported integer width -> int32, refusing values a document length cannot have. */
static llm4d_code lens_to_i32(llm4d_corpus *c, const llm4d_array *a, const char *file, llm4d_err *err) {
    if (a->ndim != 1)
        return llm4d_fail(err, LLM4D_EUSER, "%s: array 'lens' has %d dimensions, expected 1 (one length per document)",
                          file, a->ndim);
    int64_t n = a->shape[0];
    c->lens = malloc((size_t)(n ? n : 1) * sizeof *c->lens);
    if (!c->lens) return llm4d_fail(err, LLM4D_ENOMEM, "%s: out of memory for %lld document lengths", file, (long long)n);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = id_at(a->data, a->dtype, i);
        if (v < 0 || v > INT32_MAX)
            return llm4d_fail(err, LLM4D_EUSER, "%s: lens[%lld] = %lld is not a valid document length (0..%d)", file,
                              (long long)i, (long long)v, INT32_MAX);
        c->lens[i] = (int32_t)v;
    }
    c->n_docs = n;
    return LLM4D_OK;
}

static llm4d_code check_ids_shape(const llm4d_array *ids, const char *file, llm4d_err *err) {
    if (ids->ndim != 1)
        return llm4d_fail(err, LLM4D_EUSER,
                          "%s: array 'ids' has %d dimensions, expected 1 (all documents' tokens concatenated)", file,
                          ids->ndim);
    return LLM4D_OK;
}

/* Prefix sums, the lens/ids agreement, and the id range, once for the whole corpus. */
static llm4d_code finish(llm4d_corpus *c, const char *file, llm4d_err *err) {
    c->doc_start = malloc((size_t)(c->n_docs + 1) * sizeof *c->doc_start);
    if (!c->doc_start) return llm4d_fail(err, LLM4D_ENOMEM, "%s: out of memory for the document index", file);
    int64_t s = 0;
    c->doc_start[0] = 0;
    for (int64_t d = 0; d < c->n_docs; d++) c->doc_start[d + 1] = s += c->lens[d];
    if (s != c->n_tokens)
        return llm4d_fail(err, LLM4D_EUSER,
                          "%s: lens and ids do not match: sum(lens) = %lld over %lld documents but ids holds %lld "
                          "tokens; regenerate the file",
                          file, (long long)s, (long long)c->n_docs, (long long)c->n_tokens);
    if (c->n_tokens == 0)
        return llm4d_fail(err, LLM4D_EUSER, "%s: the corpus holds no tokens; tokenize some text into it first", file);

    int64_t lo = INT64_MAX, hi = INT64_MIN, n = c->n_tokens;
    const void *ids = c->ids;
    llm4d_dtype dt = c->dtype;
#pragma omp parallel for reduction(min : lo) reduction(max : hi) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        int64_t v = id_at(ids, dt, i);
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    if (lo < 0) return llm4d_fail(err, LLM4D_EUSER, "%s: ids holds a negative token id (%lld)", file, (long long)lo);
    if (hi > INT32_MAX)
        return llm4d_fail(err, LLM4D_EUSER, "%s: ids holds token id %lld, beyond int32 (no vocabulary is that large)",
                          file, (long long)hi);
    c->max_id = hi;
    return LLM4D_OK;
}

llm4d_code llm4d_corpus_open_npz(llm4d_corpus *c, const char *path, llm4d_err *err) {
    memset(c, 0, sizeof *c);
    if (!pathf(c->path, sizeof c->path, "%s", path)) return llm4d_fail(err, LLM4D_EUSER, "%s: path is too long", path);
    c->n_found = 1;
    llm4d_array ids, lens;
    LLM4D_TRY(llm4d_npz_read(path, "ids", &ids, err));
    llm4d_code rc = llm4d_npz_read(path, "lens", &lens, err);
    if (rc != LLM4D_OK) {
        llm4d_array_free(&ids);
        return rc;
    }
    c->owned_ids = ids.data;
    c->ids = ids.data;
    c->dtype = ids.dtype;
    c->n_tokens = ids.ndim == 1 ? ids.shape[0] : 0;
    rc = check_ids_shape(&ids, path, err);
    if (rc == LLM4D_OK) rc = lens_to_i32(c, &lens, path, err);
    llm4d_array_free(&lens);
    if (rc == LLM4D_OK) rc = finish(c, path, err);
    if (rc != LLM4D_OK) llm4d_corpus_close(c);
    return rc;
}

/* Map P_ids.npy and point ids at the data after its header. */
static llm4d_code map_ids(llm4d_corpus *c, const char *path, llm4d_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return llm4d_fail(err, e == ENOENT ? LLM4D_EUSER : LLM4D_EIO, "%s: cannot open: %s%s", path, strerror(e),
                          e == ENOENT ? " (a P_idx.npz needs its P_ids.npy beside it)" : "");
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return llm4d_fail(err, LLM4D_EUSER, "%s: not a regular file", path);
    }
    if (st.st_size < 10) {
        close(fd);
        return llm4d_fail(err, LLM4D_EUSER, "%s: bad npy magic (file of %lld bytes is too short for a .npy array)",
                          path, (long long)st.st_size);
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return llm4d_fail(err, LLM4D_EIO, "%s: cannot map: %s", path, strerror(e));
    c->map = map;
    c->map_len = (size_t)st.st_size;
    llm4d_array a;
    LLM4D_TRY(llm4d_npy_parse(map, c->map_len, path, &a, err));
    LLM4D_TRY(check_ids_shape(&a, path, err));
    c->dtype = a.dtype;
    c->n_tokens = a.shape[0];
    c->ids = a.data;
    /* numpy pads headers to 16 or 64 bytes, so this holds for any file numpy wrote; a hand-made header might not,
     * and unaligned typed loads are undefined behaviour, so such a file is copied once instead. */
    if ((uintptr_t)a.data % llm4d_dtype_size(a.dtype) != 0) {
        c->owned_ids = malloc(a.nbytes ? a.nbytes : 1);
        if (!c->owned_ids) return llm4d_fail(err, LLM4D_ENOMEM, "%s: out of memory copying unaligned ids", path);
        memcpy(c->owned_ids, a.data, a.nbytes);
        c->ids = c->owned_ids;
        munmap(c->map, c->map_len);
        c->map = NULL;
        c->map_len = 0;
    }
    return LLM4D_OK;
}

/* New format: prefix P names P_ids.npy and P_idx.npz. */
static llm4d_code open_pair(llm4d_corpus *c, const char *prefix, llm4d_err *err) {
    memset(c, 0, sizeof *c);
    c->n_found = 1;
    char ids_path[sizeof c->path], idx_path[sizeof c->path];
    if (!pathf(ids_path, sizeof ids_path, "%s_ids.npy", prefix) || !pathf(idx_path, sizeof idx_path, "%s_idx.npz", prefix))
        return llm4d_fail(err, LLM4D_EUSER, "%s: path is too long", prefix);
    memcpy(c->path, ids_path, sizeof c->path);
    llm4d_array lens;
    llm4d_code rc = map_ids(c, ids_path, err);
    if (rc == LLM4D_OK) rc = llm4d_npz_read(idx_path, "lens", &lens, err);
    if (rc == LLM4D_OK) {
        rc = lens_to_i32(c, &lens, idx_path, err);
        llm4d_array_free(&lens);
    }
    if (rc == LLM4D_OK) {
        char both[2 * sizeof c->path + 8];
        pathf(both, sizeof both, "%s with %s", ids_path, idx_path);
        rc = finish(c, both, err);
    }
    if (rc != LLM4D_OK) llm4d_corpus_close(c);
    return rc;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Names in dir that are regular files (after following links, as os.path.isfile does) ending in suffix, sorted. */
static llm4d_code list_dir(const char *dir, const char *suffix, char ***out, int *n_out, llm4d_err *err) {
    *out = NULL;
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d) return llm4d_fail(err, LLM4D_EUSER, "%s: cannot list the directory: %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0, cap = 0;
    llm4d_code rc = LLM4D_OK;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!ends_with(de->d_name, suffix)) continue;
        char full[2048];
        if (!pathf(full, sizeof full, "%s/%s", dir, de->d_name)) continue;
        struct stat st;
        if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            char **grown = realloc(names, (size_t)cap * sizeof *names);
            if (!grown) {
                rc = llm4d_fail(err, LLM4D_ENOMEM, "%s: out of memory listing the directory", dir);
                break;
            }
            names = grown;
        }
        if (!(names[n] = strdup(de->d_name))) {
            rc = llm4d_fail(err, LLM4D_ENOMEM, "%s: out of memory listing the directory", dir);
            break;
        }
        n++;
    }
    closedir(d);
    if (rc != LLM4D_OK) {
        for (int i = 0; i < n; i++) free(names[i]);
        free(names);
        return rc;
    }
    if (n) qsort(names, (size_t)n, sizeof *names, cmp_str);
    *out = names;
    *n_out = n;
    return LLM4D_OK;
}

static int is_regular(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static llm4d_code open_file(llm4d_corpus *c, const char *path, llm4d_err *err) {
    char prefix[1100];
    size_t n = strlen(path);
    if (n >= sizeof prefix) return llm4d_fail(err, LLM4D_EUSER, "%s: path is too long", path);
    if (ends_with(path, "_idx.npz") || ends_with(path, "_ids.npy")) {
        memcpy(prefix, path, n - 8);
        prefix[n - 8] = 0;
        return open_pair(c, prefix, err);
    }
    if (ends_with(path, ".npz")) return llm4d_corpus_open_npz(c, path, err);
    if (ends_with(path, ".bin") || ends_with(path, ".idx")) return llm4d_corpus_open_megatron(c, path, err);
    return llm4d_fail(err, LLM4D_EUSER,
                      "%s: unknown corpus file type; expected P_ids.npz (arrays ids, lens), P_ids.npy with "
                      "P_idx.npz, Megatron's P.bin with P.idx, or a directory holding them",
                      path);
}

/* A path that is not there may be a prefix, as Megatron's data_path is: P names P.bin + P.idx (or Paddle's
 * P_idx.npz / P_ids.npz). Returns the file to open in out, or 0. */
static int resolve_prefix(const char *p, char *out, size_t cap) {
    static const char *const suffixes[] = {".idx", "_idx.npz", "_ids.npz"};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++)
        if (pathf(out, cap, "%s%s", p, suffixes[i]) && is_regular(out)) return 1;
    return 0;
}

static void free_names(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* Is name (P.idx) the Megatron twin of a chosen Paddle file (P_idx.npz or P_ids.npz)? */
static int same_prefix(const char *idx_name, char *const *paddle, int n_paddle) {
    size_t p = strlen(idx_name) - 4;
    for (int i = 0; i < n_paddle; i++)
        if (strlen(paddle[i]) == p + 8 && !strncmp(paddle[i], idx_name, p)) return 1;
    return 0;
}

llm4d_code llm4d_corpus_list(const char *dir, char ***paths, int *n_paths, llm4d_err *err) {
    *paths = NULL;
    *n_paths = 0;
    char **paddle, **mega;
    int np, nm;
    LLM4D_TRY(list_dir(dir, "_idx.npz", &paddle, &np, err));
    if (np == 0) {
        free(paddle);
        LLM4D_TRY(list_dir(dir, "_ids.npz", &paddle, &np, err));
    }
    llm4d_code rc = list_dir(dir, ".idx", &mega, &nm, err);
    if (rc != LLM4D_OK) {
        free_names(paddle, np);
        return rc;
    }
    char **all = malloc((size_t)(np + nm + 1) * sizeof *all);
    int n = 0;
    if (!all) rc = llm4d_fail(err, LLM4D_ENOMEM, "%s: out of memory listing the directory", dir);
    const int slash = ends_with(dir, "/");
    for (int k = 0; k < np + nm && rc == LLM4D_OK; k++) {
        const char *name = k < np ? paddle[k] : mega[k - np];
        if (k >= np && same_prefix(name, paddle, np)) continue;
        size_t len = strlen(dir) + strlen(name) + 2;
        if (!(all[n] = malloc(len))) {
            rc = llm4d_fail(err, LLM4D_ENOMEM, "%s: out of memory listing the directory", dir);
            break;
        }
        snprintf(all[n++], len, "%s%s%s", dir, slash ? "" : "/", name);
    }
    free_names(paddle, np);
    free_names(mega, nm);
    if (rc == LLM4D_OK && n == 0)
        rc = llm4d_fail(err, LLM4D_EUSER,
                        "%s: no corpus in this directory: expected files named P_ids.npy + P_idx.npz or P_ids.npz "
                        "(Paddle) or P.bin + P.idx (Megatron); make one with `llm4d prepare-data`",
                        dir);
    if (rc != LLM4D_OK) {
        if (all) free_names(all, n);
        return rc;
    }
    /* one order for every kind: the directory listing sorted by name (all paths share the directory) */
    qsort(all, (size_t)n, sizeof *all, cmp_str);
    *paths = all;
    *n_paths = n;
    return LLM4D_OK;
}

void llm4d_corpus_list_free(char **paths, int n) { free_names(paths, n); }

llm4d_code llm4d_corpus_open(llm4d_corpus *c, const char *input_dir, llm4d_err *err) {
    memset(c, 0, sizeof *c);
    struct stat st;
    if (stat(input_dir, &st) != 0) {
        int e = errno;
        char file[1200];
        if (resolve_prefix(input_dir, file, sizeof file)) return open_file(c, file, err);
        return llm4d_fail(err, LLM4D_EUSER, "%s: cannot open the corpus: %s", input_dir, strerror(e));
    }
    if (!S_ISDIR(st.st_mode)) return open_file(c, input_dir, err);
    char **paths;
    int n;
    LLM4D_TRY(llm4d_corpus_list(input_dir, &paths, &n, err));
    llm4d_code rc = open_file(c, paths[0], err);
    llm4d_corpus_list_free(paths, n);
    if (rc == LLM4D_OK) c->n_found = n;
    return rc;
}

void llm4d_corpus_close(llm4d_corpus *c) {
    if (!c) return;
    free(c->owned_ids);
    free(c->lens);
    free(c->doc_start);
    if (c->map) munmap(c->map, c->map_len);
    memset(c, 0, sizeof *c);
}

void llm4d_corpus_read(const llm4d_corpus *c, int64_t start, int64_t n, int32_t *out) {
    LLM4D_ASSERT(start >= 0 && n >= 0 && start + n <= c->n_tokens, "window [%lld, %lld) outside corpus of %lld tokens",
                 (long long)start, (long long)(start + n), (long long)c->n_tokens);
    switch (c->dtype) {
    case LLM4D_DT_U16: {
        const uint16_t *p = (const uint16_t *)c->ids + start;
        for (int64_t i = 0; i < n; i++) out[i] = p[i];
        break;
    }
    case LLM4D_DT_I32: memcpy(out, (const int32_t *)c->ids + start, (size_t)n * sizeof *out); break;
    case LLM4D_DT_U32: {
        const uint32_t *p = (const uint32_t *)c->ids + start;
        for (int64_t i = 0; i < n; i++) out[i] = (int32_t)p[i];
        break;
    }
    case LLM4D_DT_I64: {
        const int64_t *p = (const int64_t *)c->ids + start;
        for (int64_t i = 0; i < n; i++) out[i] = (int32_t)p[i];
        break;
    }
    }
}
