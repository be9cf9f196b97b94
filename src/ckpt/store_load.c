/* store_load.c — reading checkpoint directories (see store.h for the layout and the slice records).
 *
 * The loader trusts nothing it has not checksummed: `latest` and meta.json are read with size limits, every file
 * meta.json lists is mapped and its size and crc32 verified before any tensor of it is indexed, and a tensor is
 * assembled from whatever slices cover the requested box (overlaps and holes refused), converting float dtypes if
 * asked. */
#define _GNU_SOURCE
#include "ckpt/store_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/shape.h"

/* ---- loading ---- */

typedef struct {
    char name[LLM4D_CKPT_FILE_MAX];
    void *map;
    size_t len;
    int is_st;
    llm4d_st_file st;
} ck_file;

typedef struct {
    char *name;                          /* global */
    int file;
    const llm4d_st_tensor *t;
    int ndim;
    int64_t gshape[LLM4D_ST_MAX_DIMS];
    int64_t off[LLM4D_ST_MAX_DIMS];
} ck_entry;

struct llm4d_ckpt {
    char dir[PATH_MAX_CK];
    int64_t step;
    cJSON *meta;
    int nfiles;
    ck_file *files;
    int nent;
    ck_entry *ent; /* sorted by name, then file */
};

static llm4d_code read_small_file(const char *path, size_t max, char **out, size_t *len, llm4d_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return llm4d_fail(err, LLM4D_EUSER, "cannot read %s: %s", path, strerror(errno));
    char *buf = malloc(max + 1);
    if (!buf) {
        fclose(f);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory reading %s", path);
    }
    size_t n = fread(buf, 1, max + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || n > max) {
        free(buf);
        return llm4d_fail(err, LLM4D_EUSER, "%s: %s", path, bad ? "read error" : "file too large");
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return LLM4D_OK;
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

llm4d_code llm4d_ckpt_resolve(const char *path, char *dir, size_t n, llm4d_err *err) {
    char p[PATH_MAX_CK], probe[PBUF];
    /* room for "/step_<N>" after it, in p and in the caller's dir */
    if (strlen(path) + 32 >= sizeof p || strlen(path) + 32 >= n)
        return llm4d_fail(err, LLM4D_EUSER, "checkpoint path '%.200s...' is too long; use a shorter path", path);
    snprintf(p, sizeof p, "%s", path);
    size_t l = strlen(p);
    while (l > 1 && p[l - 1] == '/') p[--l] = 0;
    struct stat st;
    int missing = stat(p, &st) != 0;
    if (missing || !S_ISDIR(st.st_mode))
        return llm4d_fail(err, LLM4D_EUSER, "checkpoint path %s %s; pass an output_dir or a step_<N> directory", path,
                          missing ? "does not exist" : "is not a directory");
    snprintf(probe, sizeof probe, "%s/meta.json", p);
    if (is_file(probe)) {
        snprintf(dir, n, "%s", p);
        return LLM4D_OK;
    }
    snprintf(probe, sizeof probe, "%s/latest", p);
    if (is_file(probe)) {
        char *text = NULL;
        size_t len = 0;
        LLM4D_TRY(read_small_file(probe, 256, &text, &len, err));
        while (len > 0 && isspace((unsigned char)text[len - 1])) text[--len] = 0;
        int64_t k = step_of(text);
        if (k < 0) {
            llm4d_code rc = llm4d_fail(err, LLM4D_EUSER, "%s holds '%.64s', not step_<N>; fix it or pass a step_<N> "
                                       "directory", probe, text);
            free(text);
            return rc;
        }
        snprintf(probe, sizeof probe, "%s/%s/meta.json", p, text);
        int ok = is_file(probe);
        if (ok) snprintf(dir, n, "%s/%s", p, text);
        else llm4d_fail(err, LLM4D_EUSER, "%s/latest names %s but %s is missing; pass an older step_<N> directory",
                        p, text, probe);
        free(text);
        return ok ? LLM4D_OK : LLM4D_EUSER;
    }
    /* No latest (deleted by hand?): the highest complete step_<N>. */
    DIR *d = opendir(p);
    int64_t best = -1;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            int64_t k = step_of(e->d_name);
            if (k <= best) continue;
            snprintf(probe, sizeof probe, "%s/%s/meta.json", p, e->d_name);
            if (is_file(probe)) best = k;
        }
        closedir(d);
    }
    if (best < 0)
        return llm4d_fail(err, LLM4D_EUSER, "%s holds no checkpoint (no meta.json, no latest, no step_<N>/meta.json); "
                          "pass an output_dir written by llm4d or one of its step_<N> directories", path);
    snprintf(dir, n, "%s/step_%lld", p, (long long)best);
    return LLM4D_OK;
}

static void ckpt_free(llm4d_ckpt *c) {
    if (!c) return;
    for (int i = 0; i < c->nfiles; i++) {
        if (c->files[i].is_st) llm4d_st_close(&c->files[i].st);
        if (c->files[i].map) munmap(c->files[i].map, c->files[i].len);
    }
    for (int i = 0; i < c->nent; i++) free(c->ent[i].name);
    free(c->files);
    free(c->ent);
    cJSON_Delete(c->meta);
    free(c);
}

void llm4d_ckpt_close(llm4d_ckpt *c) { ckpt_free(c); }

static int json_u53(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double v = j->valuedouble;
    if (!(v >= 0.0) || v > 9007199254740992.0 || v != (double)(uint64_t)v) return 0;
    *out = (uint64_t)v;
    return 1;
}

/* Map one manifest file and check its size and crc32. */
#define VERIFY_CHUNK ((size_t)4 << 20) /* a multiple of the page size */

static llm4d_code map_verify(llm4d_ckpt *c, ck_file *f, uint64_t bytes, uint32_t crc, llm4d_err *err) {
    char path[PBUF];
    snprintf(path, sizeof path, "%s/%s", c->dir, f->name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return llm4d_fail(err, LLM4D_EUSER, "checkpoint file %s (listed in meta.json) cannot be opened: %s; the "
                          "checkpoint is incomplete, load an older one", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return llm4d_fail(err, LLM4D_EUSER, "checkpoint file %s is not a regular file", path);
    }
    if ((uint64_t)st.st_size != bytes) {
        close(fd);
        return llm4d_fail(err, LLM4D_EUSER, "checkpoint file %s is %lld bytes but meta.json says %llu: it was "
                          "truncated or replaced; load an older checkpoint", path, (long long)st.st_size,
                          (unsigned long long)bytes);
    }
    f->len = (size_t)bytes;
    if (f->len > 0) {
        f->map = mmap(NULL, f->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (f->map == MAP_FAILED) {
            int e = errno;
            f->map = NULL;
            close(fd);
            return llm4d_fail(err, LLM4D_EIO, "cannot map %s: %s", path, strerror(e));
        }
        madvise(f->map, f->len, MADV_SEQUENTIAL);
    }
    close(fd);
    /* The crc reads every page, and a touched page of a file mapping counts in the resident set until it is
     * unmapped: a rank evaluating or resuming would hold its whole checkpoint (Adam's m and v, which eval never
     * reads, included) at its peak. So each chunk's pages are dropped from the process once summed (clean pages of a
     * file: they stay in the page cache, and the tensors read later fault back only what they use). */
    uLong got = crc32_z(0L, Z_NULL, 0);
    unsigned char *bytes_at = f->map;
    for (size_t at = 0; at < f->len; at += VERIFY_CHUNK) {
        const size_t n = f->len - at < VERIFY_CHUNK ? f->len - at : VERIFY_CHUNK;
        got = crc32_z(got, bytes_at + at, n);
        madvise(bytes_at + at, n, MADV_DONTNEED);
    }
    if ((uint32_t)got != crc)
        return llm4d_fail(err, LLM4D_EUSER, "checkpoint file %s is corrupt: crc32 0x%08x, meta.json says 0x%08x; "
                          "restore it or load an older checkpoint", path, (uint32_t)got, crc);
    return LLM4D_OK;
}

static int cmp_entry(const void *a, const void *b) {
    const ck_entry *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->file > y->file) - (x->file < y->file);
}

/* Index the tensors of one safetensors file, reading its llm4d.slices record. */
static int cmp_rec_key(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The slice record named `name` in recs (sorted by key), or NULL. */
static const cJSON *find_rec(const cJSON **recs, int n, const char *name) {
    int a = 0, b = n;
    while (a < b) {
        int m = (a + b) / 2, k = strcmp(recs[m]->string, name);
        if (k == 0) return recs[m];
        if (k < 0) a = m + 1;
        else b = m;
    }
    return NULL;
}

/* The slice record of a file as an array sorted by local name, every name a tensor of the file. Lookups are by
 * binary search: a ZeRO shard file may hold thousands of slices, and cJSON's object lookup is linear. */
static llm4d_code slice_records(const llm4d_st_file *st, const cJSON *slices, const char *path, const cJSON ***out,
                                int *nout, llm4d_err *err) {
    const int nr = cJSON_GetArraySize(slices);
    const cJSON **recs = malloc((size_t)(nr ? nr : 1) * sizeof *recs);
    const char **names = malloc((size_t)(st->n ? st->n : 1) * sizeof *names);
    llm4d_code rc = LLM4D_OK;
    if (!recs || !names) {
        rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory indexing %s", path);
        goto done;
    }
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, slices) recs[k++] = e;
    qsort(recs, (size_t)nr, sizeof *recs, cmp_rec_key);
    for (int i = 0; i < st->n; i++) names[i] = st->t[i].name;
    qsort(names, (size_t)st->n, sizeof *names, cmp_cstr);
    for (int i = 0; i < nr && rc == LLM4D_OK; i++) {
        const char *key = recs[i]->string;
        if (i > 0 && strcmp(recs[i - 1]->string, key) == 0)
            rc = llm4d_fail(err, LLM4D_EUSER, "%s: metadata '%s' describes tensor '%s' twice", path, SLICES_KEY, key);
        else if (!bsearch(&key, names, (size_t)st->n, sizeof *names, cmp_cstr))
            rc = llm4d_fail(err, LLM4D_EUSER, "%s: metadata '%s' describes tensor '%s', which the file does not hold",
                            path, SLICES_KEY, key);
    }
done:
    free(names);
    if (rc != LLM4D_OK) {
        free(recs);
        return rc;
    }
    *out = recs;
    *nout = nr;
    return LLM4D_OK;
}

static llm4d_code index_file(llm4d_ckpt *c, int fi, int *cap, llm4d_err *err) {
    ck_file *f = &c->files[fi];
    char path[PBUF];
    snprintf(path, sizeof path, "%s/%s", c->dir, f->name);
    static const uint8_t empty[1] = {0};
    LLM4D_TRY(llm4d_st_parse(&f->st, f->map ? f->map : empty, f->len, path, err));
    f->is_st = 1;
    cJSON *slices = NULL;
    const cJSON **recs = NULL;
    int nrecs = 0;
    const char *rec = llm4d_st_meta(&f->st, SLICES_KEY);
    if (rec) {
        slices = cJSON_Parse(rec);
        if (!cJSON_IsObject(slices)) {
            cJSON_Delete(slices);
            return llm4d_fail(err, LLM4D_EUSER, "%s: metadata '%s' is not a JSON object", path, SLICES_KEY);
        }
        llm4d_code rc = slice_records(&f->st, slices, path, &recs, &nrecs, err);
        if (rc != LLM4D_OK) {
            cJSON_Delete(slices);
            return rc;
        }
    }
    llm4d_code rc = LLM4D_OK;
    for (int i = 0; i < f->st.n && rc == LLM4D_OK; i++) {
        const llm4d_st_tensor *t = &f->st.t[i];
        if (c->nent == *cap) {
            int nc = *cap ? 2 * *cap : 256;
            ck_entry *ne = realloc(c->ent, (size_t)nc * sizeof *ne);
            if (!ne) {
                rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory indexing %s", path);
                break;
            }
            c->ent = ne;
            *cap = nc;
        }
        ck_entry *en = &c->ent[c->nent];
        memset(en, 0, sizeof *en);
        en->file = fi;
        en->t = t;
        en->ndim = t->ndim;
        const cJSON *s = recs ? find_rec(recs, nrecs, t->name) : NULL;
        const char *gname = t->name;
        if (s) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(s, "name");
            const cJSON *gs = cJSON_GetObjectItemCaseSensitive(s, "shape");
            const cJSON *go = cJSON_GetObjectItemCaseSensitive(s, "offset");
            if (!cJSON_IsString(nm) || !nm->valuestring[0] || !cJSON_IsArray(gs) || !cJSON_IsArray(go) ||
                cJSON_GetArraySize(gs) != t->ndim || cJSON_GetArraySize(go) != t->ndim) {
                rc = llm4d_fail(err, LLM4D_EUSER, "%s: tensor '%s': its slice record is not {\"name\", \"shape\", "
                                "\"offset\"} with %d dims", path, t->name, t->ndim);
                break;
            }
            gname = nm->valuestring;
            for (int d = 0; d < t->ndim && rc == LLM4D_OK; d++) {
                uint64_t g = 0, o = 0;
                if (!json_u53(cJSON_GetArrayItem(gs, d), &g) || !json_u53(cJSON_GetArrayItem(go, d), &o) ||
                    o + (uint64_t)t->shape[d] > g)
                    rc = llm4d_fail(err, LLM4D_EUSER, "%s: tensor '%s': slice of %s in dim %d does not fit its "
                                    "global shape", path, t->name, gname, d);
                en->gshape[d] = (int64_t)g;
                en->off[d] = (int64_t)o;
            }
            if (rc != LLM4D_OK) break;
        } else {
            for (int d = 0; d < t->ndim; d++) en->gshape[d] = t->shape[d];
        }
        en->name = strdup(gname);
        if (!en->name) rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory indexing %s", path);
        else c->nent++;
    }
    free(recs);
    cJSON_Delete(slices);
    return rc;
}

llm4d_code llm4d_ckpt_open(llm4d_ckpt **out, const char *path, llm4d_err *err) {
    *out = NULL;
    llm4d_ckpt *c = calloc(1, sizeof *c);
    if (!c) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory opening a checkpoint");
    llm4d_code rc = llm4d_ckpt_resolve(path, c->dir, sizeof c->dir, err);
    if (rc != LLM4D_OK) {
        ckpt_free(c);
        return rc;
    }
    const char *base = strrchr(c->dir, '/');
    c->step = step_of(base ? base + 1 : c->dir);
    char mpath[PBUF];
    snprintf(mpath, sizeof mpath, "%s/meta.json", c->dir);
    char *text = NULL;
    size_t len = 0;
    if ((rc = read_small_file(mpath, 256u << 20, &text, &len, err)) != LLM4D_OK) goto fail;
    const char *end = NULL;
    c->meta = cJSON_ParseWithOpts(text, &end, 1);
    if (!c->meta || !cJSON_IsObject(c->meta)) {
        rc = llm4d_fail(err, LLM4D_EUSER, "%s is not a valid JSON object (error near byte %ld); the checkpoint is "
                        "corrupt, load an older one", mpath, c->meta ? 0L : (end ? (long)(end - text) : -1L));
        free(text);
        goto fail;
    }
    free(text);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(c->meta, "files");
    if (!cJSON_IsObject(files)) {
        rc = llm4d_fail(err, LLM4D_EUSER, "%s has no \"files\" manifest; it was not written by llm4d's checkpoint "
                        "store", mpath);
        goto fail;
    }
    int nf = cJSON_GetArraySize(files);
    c->files = calloc((size_t)(nf ? nf : 1), sizeof *c->files);
    if (!c->files) {
        rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory opening %s", c->dir);
        goto fail;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, files) {
        uint64_t bytes, crc;
        if (!plain_name(e->string) || strcmp(e->string, "meta.json") == 0 || !cJSON_IsObject(e) ||
            !json_u53(cJSON_GetObjectItemCaseSensitive(e, "bytes"), &bytes) ||
            !json_u53(cJSON_GetObjectItemCaseSensitive(e, "crc32"), &crc) || crc > 0xffffffffu) {
            rc = llm4d_fail(err, LLM4D_EUSER, "%s: manifest entry '%.128s' is not {\"bytes\": n, \"crc32\": n} under a "
                            "plain file name", mpath, e->string);
            goto fail;
        }
        ck_file *f = &c->files[c->nfiles++];
        snprintf(f->name, sizeof f->name, "%s", e->string);
        if ((rc = map_verify(c, f, bytes, (uint32_t)crc, err)) != LLM4D_OK) goto fail;
    }
    int cap = 0;
    for (int i = 0; i < c->nfiles; i++)
        if (ends_with(c->files[i].name, ".safetensors") && (rc = index_file(c, i, &cap, err)) != LLM4D_OK) goto fail;
    if (c->nent > 0) qsort(c->ent, (size_t)c->nent, sizeof *c->ent, cmp_entry);
    *out = c;
    return LLM4D_OK;
fail:
    ckpt_free(c);
    return rc;
}

const char *llm4d_ckpt_dir(const llm4d_ckpt *c) { return c->dir; }
int64_t llm4d_ckpt_step(const llm4d_ckpt *c) { return c->step; }
const cJSON *llm4d_ckpt_meta(const llm4d_ckpt *c) { return c->meta; }

static int prefix_ok(const llm4d_ckpt *c, const ck_entry *e, const char *prefix) {
    return !prefix || strncmp(c->files[e->file].name, prefix, strlen(prefix)) == 0;
}

/* Range [*lo, *hi) of entries named `name`. */
static void entry_range(const llm4d_ckpt *c, const char *name, int *lo, int *hi) {
    int a = 0, b = c->nent;
    while (a < b) {
        int m = (a + b) / 2;
        if (strcmp(c->ent[m].name, name) < 0) a = m + 1;
        else b = m;
    }
    *lo = a;
    while (a < c->nent && strcmp(c->ent[a].name, name) == 0) a++;
    *hi = a;
}

int llm4d_ckpt_names(const llm4d_ckpt *c, const char *file_prefix, const char **names, int max) {
    int n = 0;
    const char *last = NULL;
    for (int i = 0; i < c->nent; i++) {
        if (!prefix_ok(c, &c->ent[i], file_prefix) || (last && strcmp(last, c->ent[i].name) == 0)) continue;
        last = c->ent[i].name;
        if (names && n < max) names[n] = last;
        n++;
    }
    return n;
}

int llm4d_ckpt_find(const llm4d_ckpt *c, const char *file_prefix, const char *name, llm4d_ckpt_info *info) {
    int lo, hi, n = 0;
    entry_range(c, name, &lo, &hi);
    for (int i = lo; i < hi; i++) {
        if (!prefix_ok(c, &c->ent[i], file_prefix)) continue;
        if (n++ == 0 && info) {
            info->dtype = c->ent[i].t->dtype;
            info->ndim = c->ent[i].ndim;
            memcpy(info->shape, c->ent[i].gshape, sizeof info->shape);
        }
    }
    if (info && n) info->nslices = n;
    return n > 0;
}

const void *llm4d_ckpt_blob(const llm4d_ckpt *c, const char *file, size_t *len) {
    for (int i = 0; i < c->nfiles; i++)
        if (strcmp(c->files[i].name, file) == 0) {
            if (len) *len = c->files[i].len;
            static const uint8_t empty[1] = {0};
            return c->files[i].map ? c->files[i].map : empty;
        }
    return NULL;
}

/* The whole pages of a tensor's bytes in its file's mapping, dropped from the process: clean pages of a file, read
 * again from the page cache if another box of the tensor is read. */
static void drop_pages(const llm4d_st_tensor *t) {
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
    const uintptr_t page = 4096, a = ((uintptr_t)t->data + page - 1) & ~(page - 1),
                    b = ((uintptr_t)t->data + (size_t)numel * llm4d_st_dtype_size(t->dtype)) & ~(page - 1);
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

/* Copy the part of slice e inside the requested box [off, off+shp) into out; returns the elements copied. */
static int64_t copy_intersection(const ck_entry *e, int ndim, const int64_t *off, const int64_t *shp,
                                 llm4d_st_dtype dt, uint8_t *out) {
    int64_t lo[LLM4D_ST_MAX_DIMS] = {0}, hi[LLM4D_ST_MAX_DIMS] = {0}, idx[LLM4D_ST_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        lo[d] = off[d] > e->off[d] ? off[d] : e->off[d];
        int64_t a = off[d] + shp[d], b = e->off[d] + e->t->shape[d];
        hi[d] = a < b ? a : b;
        if (lo[d] >= hi[d]) return 0;
    }
    size_t ssz = llm4d_st_dtype_size(e->t->dtype), dsz = llm4d_st_dtype_size(dt);
    const uint8_t *src = e->t->data;
    if (ndim == 0) {
        llm4d_st_convert(out, dt, src, e->t->dtype, 1);
        return 1;
    }
    /* Inner dims the intersection spans completely in both the slice and the box are contiguous in both, so they
     * merge into one run (whole-row slices copy in one call, not one per row). */
    int inner = ndim - 1;
    int64_t run = hi[inner] - lo[inner], copied = 0;
    while (inner > 0 && hi[inner] - lo[inner] == e->t->shape[inner] && hi[inner] - lo[inner] == shp[inner]) {
        inner--;
        run *= hi[inner] - lo[inner];
    }
    for (int d = 0; d < ndim; d++) idx[d] = lo[d];
    for (;;) {
        /* offsets of idx in the slice and in the output box, C order */
        int64_t so = 0, doff = 0;
        for (int d = 0; d < ndim; d++) {
            so = so * e->t->shape[d] + (idx[d] - e->off[d]);
            doff = doff * shp[d] + (idx[d] - off[d]);
        }
        llm4d_st_convert(out + (size_t)doff * dsz, dt, src + (size_t)so * ssz, e->t->dtype, (size_t)run);
        copied += run;
        int d = inner - 1;
        while (d >= 0 && ++idx[d] == hi[d]) {
            idx[d] = lo[d];
            d--;
        }
        if (d < 0) break;
    }
    return copied;
}

/* The tensor a read looks up: its name, the files it may come from, and its entries [lo, hi) in the index. */
typedef struct {
    const char *file_prefix, *name;
    int lo, hi;
} ck_lookup;

static llm4d_code read_slices(const llm4d_ckpt *c, const ck_lookup *q, const ck_entry **sel,
                              const llm4d_ckpt_box *box, void *out, llm4d_err *err);

llm4d_code llm4d_ckpt_read(const llm4d_ckpt *c, const char *file_prefix, const char *name, const llm4d_ckpt_box *box,
                           void *out, llm4d_err *err) {
    int lo, hi;
    entry_range(c, name, &lo, &hi);
    const ck_lookup q = {file_prefix, name, lo, hi};
    /* the name's slices, first all of them (for the shape checks), then those meeting the box (sel[0..m)) */
    const ck_entry *sel_small[64], **sel = sel_small;
    if (hi - lo > (int)(sizeof sel_small / sizeof sel_small[0]) &&
        !(sel = malloc((size_t)(hi - lo) * sizeof *sel)))
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory reading tensor '%s'", name);
    llm4d_code rc = read_slices(c, &q, sel, box, out, err);
    if (sel != sel_small) free(sel);
    return rc;
}

static llm4d_code read_slices(const llm4d_ckpt *c, const ck_lookup *q, const ck_entry **sel,
                              const llm4d_ckpt_box *box, void *out, llm4d_err *err) {
    const char *file_prefix = q->file_prefix, *name = q->name;
    const int lo = q->lo, hi = q->hi;
    const llm4d_st_dtype dt = box->dtype;
    const int ndim = box->ndim;
    const int64_t *expect_shape = box->shape, *offset = box->offset, *shape = box->slice;
    int n = 0;
    for (int i = lo; i < hi; i++)
        if (prefix_ok(c, &c->ent[i], file_prefix)) sel[n++] = &c->ent[i];
    if (n == 0)
        return llm4d_fail(err, LLM4D_EUSER, "checkpoint %s has no tensor '%s'%s%s%s; it was written for a different "
                          "model or is incomplete", c->dir, name, file_prefix ? " in files starting with '" : "",
                          file_prefix ? file_prefix : "", file_prefix ? "'" : "");
    char a[160], b[160];
    const ck_entry *e0 = sel[0];
    for (int i = 1; i < n; i++)
        if (sel[i]->ndim != e0->ndim || memcmp(sel[i]->gshape, e0->gshape, sizeof e0->gshape) != 0) {
            llm4d_fmt_shape(a, sizeof a, e0->ndim, e0->gshape);
            llm4d_fmt_shape(b, sizeof b, sel[i]->ndim, sel[i]->gshape);
            return llm4d_fail(err, LLM4D_EUSER, "checkpoint %s: slices of '%s' disagree on its shape (%s in %s, %s in "
                              "%s)", c->dir, name, a, c->files[e0->file].name, b, c->files[sel[i]->file].name);
        }
    if (expect_shape && (ndim != e0->ndim || memcmp(expect_shape, e0->gshape, (size_t)ndim * sizeof(int64_t)) != 0)) {
        llm4d_fmt_shape(a, sizeof a, e0->ndim, e0->gshape);
        llm4d_fmt_shape(b, sizeof b, ndim, expect_shape);
        return llm4d_fail(err, LLM4D_EUSER, "checkpoint %s: tensor '%s' has shape %s but the model expects %s; the "
                          "checkpoint was written for a different model configuration", c->dir, name, a, b);
    }
    if (ndim != e0->ndim) {
        llm4d_fmt_shape(a, sizeof a, e0->ndim, e0->gshape);
        return llm4d_fail(err, LLM4D_EUSER, "checkpoint %s: tensor '%s' has shape %s, not %d dimensions", c->dir,
                          name, a, ndim);
    }
    int64_t off[LLM4D_ST_MAX_DIMS], shp[LLM4D_ST_MAX_DIMS], vol = 1;
    for (int d = 0; d < ndim; d++) {
        off[d] = offset ? offset[d] : 0;
        shp[d] = shape ? shape[d] : e0->gshape[d];
        if (off[d] < 0 || shp[d] < 0 || off[d] + shp[d] > e0->gshape[d]) {
            llm4d_fmt_shape(a, sizeof a, ndim, e0->gshape);
            return llm4d_fail(err, LLM4D_EUSER, "checkpoint %s: requested [%lld, %lld) of dim %d of tensor '%s', "
                              "whose shape is %s", c->dir, (long long)off[d], (long long)(off[d] + shp[d]), d, name, a);
        }
        vol *= shp[d];
    }
    /* Only the slices meeting the box matter from here on: a ZeRO shard reads a few of a tensor's many slices. */
    int m = 0;
    for (int i = 0; i < n; i++) {
        int meets = 1;
        for (int d = 0; d < ndim; d++) {
            int64_t l = sel[i]->off[d] > off[d] ? sel[i]->off[d] : off[d];
            int64_t h1 = sel[i]->off[d] + sel[i]->t->shape[d], h2 = off[d] + shp[d];
            if (l >= (h1 < h2 ? h1 : h2)) meets = 0;
        }
        if (meets) sel[m++] = sel[i];
    }
    n = m;
    for (int i = 0; i < n; i++) {
        llm4d_st_dtype sd = sel[i]->t->dtype;
        if (sd != dt && !(llm4d_st_dtype_is_float(sd) && llm4d_st_dtype_is_float(dt)))
            return llm4d_fail(err, LLM4D_EUSER, "checkpoint %s: tensor '%s' is stored as %s in %s and cannot be read "
                              "as %s", c->dir, name, llm4d_st_dtype_name(sd), c->files[sel[i]->file].name,
                              llm4d_st_dtype_name(dt));
    }
    /* Overlapping slices would make the result depend on which one is copied last (inside the box). */
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            int overlap = 1;
            for (int d = 0; d < ndim; d++) {
                int64_t l1 = sel[i]->off[d], h1 = l1 + sel[i]->t->shape[d];
                int64_t l2 = sel[j]->off[d], h2 = l2 + sel[j]->t->shape[d];
                int64_t l = l1 > l2 ? l1 : l2, h = h1 < h2 ? h1 : h2;
                if (l < off[d]) l = off[d];
                if (h > off[d] + shp[d]) h = off[d] + shp[d];
                if (l >= h) overlap = 0;
            }
            if (overlap)
                return llm4d_fail(err, LLM4D_EUSER, "checkpoint %s: tensor '%s' has overlapping slices ('%s' in %s and "
                                  "'%s' in %s); name kinds apart or pass a file prefix", c->dir, name,
                                  sel[i]->t->name, c->files[sel[i]->file].name, sel[j]->t->name,
                                  c->files[sel[j]->file].name);
        }
    int64_t covered = 0;
    if (vol > 0)
        for (int i = 0; i < n; i++) {
            covered += copy_intersection(sel[i], ndim, off, shp, dt, out);
            drop_pages(sel[i]->t); /* read: the copy holds it now (see map_verify) */
        }
    if (covered != vol) {
        int64_t endv[LLM4D_ST_MAX_DIMS];
        for (int d = 0; d < ndim; d++) endv[d] = off[d] + shp[d];
        llm4d_fmt_shape(a, sizeof a, ndim, off);
        llm4d_fmt_shape(b, sizeof b, ndim, endv);
        return llm4d_fail(err, LLM4D_EUSER, "checkpoint %s: the slices of tensor '%s' cover %lld of the %lld elements "
                          "of the box %s..%s; a slice file is missing or the save was incomplete", c->dir, name,
                          (long long)covered, (long long)vol, a, b);
    }
    return LLM4D_OK;
}

