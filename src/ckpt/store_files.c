/* store_files.c — a save's contents: the tensors and blobs added to each file of a checkpoint (kept as pending
 * records until the file is written, with the slice record of partial tensors and a set of the names added, so a
 * name added twice is caught at once), and the writing of each file: safetensors or blob, fsync'ed, its size and
 * crc32 kept for the manifest. Split from store_save.c, which orders the writes, the commit and the publication
 * (store.h has the layout and the crash-safety rules). */
#define _GNU_SOURCE
#include "ckpt/store_impl.h"

#include "core/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

static void kill_hook(void *ctx) { maybe_kill(ctx, "mid_file"); }

static ck_pending *pending_get(llm4d_ckpt_saver *s, const char *file, int is_blob, llm4d_err *err) {
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->f[i].name, file) == 0) {
            if (s->f[i].is_blob || is_blob) {
                llm4d_fail(err, LLM4D_EINTERNAL, "checkpoint file '%s' added twice", file);
                return NULL;
            }
            if (s->f[i].written) {
                llm4d_fail(err, LLM4D_EINTERNAL, "checkpoint file '%s' was flushed already; add to another file",
                           file);
                return NULL;
            }
            return &s->f[i];
        }
    int st = ends_with(file, ".safetensors");
    if (!plain_name(file) || strcmp(file, "meta.json") == 0 || strcmp(file, "latest") == 0 || st == is_blob) {
        llm4d_fail(err, LLM4D_EINTERNAL, "'%s' is not a valid checkpoint %s name (plain name, %s)", file,
                   is_blob ? "blob" : "tensor file", is_blob ? "not *.safetensors" : "ending in .safetensors");
        return NULL;
    }
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 8;
        ck_pending *f = realloc(s->f, (size_t)cap * sizeof *f);
        if (!f) {
            llm4d_fail(err, LLM4D_ENOMEM, "out of memory adding checkpoint file '%s'", file);
            return NULL;
        }
        s->f = f;
        s->cap = cap;
    }
    ck_pending *p = &s->f[s->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", file);
    p->is_blob = is_blob;
    llm4d_st_writer_init(&p->w);
    return p;
}

static cJSON *int_array(int n, const int64_t *v) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) {
        cJSON *x = cJSON_CreateNumber((double)v[i]);
        if (!x || !cJSON_AddItemToArray(a, x)) {
            cJSON_Delete(x);
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Whether p holds a tensor named `local` (a set, not a scan: one shard file may get thousands of slices). */
static int name_taken(const ck_pending *p, const char *local) {
    if (!p->names_cap) return 0;
    const size_t mask = (size_t)p->names_cap - 1;
    for (size_t i = name_hash(local) & mask;; i = (i + 1) & mask) {
        if (!p->names[i]) return 0;
        if (strcmp(p->w.t[p->names[i] - 1].name, local) == 0) return 1;
    }
}

/* Record the tensor just added (the last of p->w), growing the set when it is half full. */
static int name_record(ck_pending *p) {
    int from = p->w.n - 1;
    if (2 * p->w.n > p->names_cap) {
        int cap = p->names_cap ? 2 * p->names_cap : 64;
        int *t = calloc((size_t)cap, sizeof *t);
        if (!t) return -1;
        free(p->names);
        p->names = t;
        p->names_cap = cap;
        from = 0;
    }
    const size_t mask = (size_t)p->names_cap - 1;
    for (int k = from; k < p->w.n; k++) {
        size_t i = name_hash(p->w.t[k].name) & mask;
        while (p->names[i]) i = (i + 1) & mask;
        p->names[i] = k + 1;
    }
    return 0;
}

static llm4d_code save_tensor(llm4d_ckpt_saver *s, const char *file, const char *name, const llm4d_ckpt_box *box,
                              const void *data, llm4d_err *err) {
    const llm4d_st_dtype dt = box->dtype;
    const int ndim = box->ndim;
    const int64_t *global_shape = box->shape, *slice_offset = box->offset, *slice_shape = box->slice;
    if (!name || !name[0] || strchr(name, '@') || strcmp(name, "__metadata__") == 0 || ndim < 0 ||
        ndim > LLM4D_ST_MAX_DIMS || (unsigned)dt >= LLM4D_ST_NDTYPES)
        return llm4d_fail(err, LLM4D_EINTERNAL, "checkpoint tensor '%s': bad name (empty, '@' or reserved), ndim %d "
                          "or dtype %d", name ? name : "", ndim, (int)dt);
    int64_t off[LLM4D_ST_MAX_DIMS], shp[LLM4D_ST_MAX_DIMS];
    int whole = 1;
    for (int d = 0; d < ndim; d++) {
        off[d] = slice_offset ? slice_offset[d] : 0;
        shp[d] = slice_shape ? slice_shape[d] : global_shape[d];
        if (global_shape[d] < 0 || off[d] < 0 || shp[d] < 0 || off[d] + shp[d] > global_shape[d])
            return llm4d_fail(err, LLM4D_EINTERNAL, "checkpoint tensor '%s': slice [%lld, +%lld) of dim %d is outside "
                              "the global size %lld", name, (long long)off[d], (long long)shp[d], d,
                              (long long)global_shape[d]);
        if (off[d] != 0 || shp[d] != global_shape[d]) whole = 0;
    }
    ck_pending *p = pending_get(s, file, 0, err);
    if (!p) return err ? err->code : LLM4D_EINTERNAL;
    char local[512];
    int k = snprintf(local, sizeof local, "%s", name);
    if (!whole)
        for (int d = 0; d < ndim; d++)
            k += snprintf(local + k, sizeof local - (size_t)k, "%c%lld", d ? ',' : '@', (long long)off[d]);
    if (k >= (int)sizeof local) return llm4d_fail(err, LLM4D_EINTERNAL, "tensor name '%s' is too long", name);
    if (name_taken(p, local))
        return llm4d_fail(err, LLM4D_EINTERNAL, "checkpoint tensor '%s' added twice to %s", local, file);
    if (!whole) {
        if (!p->slices && !(p->slices = cJSON_CreateObject()))
            return llm4d_fail(err, LLM4D_ENOMEM, "out of memory recording a slice of '%s'", name);
        cJSON *e = cJSON_CreateObject();
        cJSON *gs = int_array(ndim, global_shape), *go = int_array(ndim, off);
        if (!e || !gs || !go || !cJSON_AddStringToObject(e, "name", name) || !cJSON_AddItemToObject(e, "shape", gs) ||
            !cJSON_AddItemToObject(e, "offset", go) || !cJSON_AddItemToObject(p->slices, local, e)) {
            cJSON_Delete(e);
            return llm4d_fail(err, LLM4D_ENOMEM, "out of memory recording a slice of '%s'", name);
        }
    }
    LLM4D_TRY(llm4d_st_writer_add(&p->w, local, dt, ndim, shp, data, err));
    if (name_record(p) != 0) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory adding '%s' to %s", local, file);
    return LLM4D_OK;
}

llm4d_code llm4d_ckpt_save_tensor(llm4d_ckpt_saver *s, const char *file, const char *name, const llm4d_ckpt_box *box,
                                  const void *data, llm4d_err *err) {
    int skip = llm4d_ck_skip_add(s, err);
    if (skip >= 0) return (llm4d_code)skip;
    return llm4d_ck_keep_failure(s, save_tensor(s, file, name, box, data, err), err);
}

llm4d_code llm4d_ckpt_save_blob(llm4d_ckpt_saver *s, const char *file, const void *data, size_t len,
                                llm4d_err *err) {
    int skip = llm4d_ck_skip_add(s, err);
    if (skip >= 0) return (llm4d_code)skip;
    ck_pending *p = pending_get(s, file, 1, err);
    if (!p) return llm4d_ck_keep_failure(s, err ? err->code : LLM4D_EINTERNAL, err);
    p->blob = data;
    p->blob_len = len;
    return LLM4D_OK;
}

llm4d_code llm4d_ck_write_blob(llm4d_fault *f, const char *path, const void *data, size_t len, uint32_t *crc,
                               llm4d_err *err) {
    int fd = llm4d_fs_create(f, path, 0644);
    if (fd < 0)
        return llm4d_fail(err, LLM4D_EIO, "cannot create %s: %s; %s", path, strerror(errno), llm4d_fs_fix(errno));
    int bad = llm4d_fs_write(f, fd, data, len) != 0 || llm4d_fs_fsync(f, fd) != 0;
    int e = errno;
    if (close(fd) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad) return llm4d_fail(err, LLM4D_EIO, "writing %s: %s; %s", path, strerror(e), llm4d_fs_fix(e));
    if (crc) *crc = (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), data, len);
    return LLM4D_OK;
}

llm4d_code llm4d_ck_flush_one(llm4d_ckpt_saver *s, ck_pending *p, llm4d_err *err) {
    if (p->written) return LLM4D_OK;
    char path[PBUF];
    snprintf(path, sizeof path, "%s/%s", s->tmp_dir, p->name);
    if (p->is_blob) {
        LLM4D_TRY(llm4d_ck_write_blob(&s->fault, path, p->blob, p->blob_len, &p->crc, err));
        p->bytes = p->blob_len;
    } else {
        /* transformers refuses a safetensors file whose metadata lacks format "pt" (when it has metadata at all) */
        LLM4D_TRY(llm4d_st_writer_meta(&p->w, "format", "pt", err));
        if (p->slices) {
            char *text = cJSON_PrintUnformatted(p->slices);
            if (!text) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory writing %s", path);
            llm4d_code rc = llm4d_st_writer_meta(&p->w, SLICES_KEY, text, err);
            free(text);
            LLM4D_TRY(rc);
        }
        const llm4d_st_write_hooks hooks = {.after_header = s->nfiles_written == 0 ? kill_hook : NULL, .ctx = s,
                                            .fault = &s->fault};
        LLM4D_TRY(llm4d_st_writer_write_hooked(&p->w, path, LLM4D_ST_WRITE_FSYNC, &p->crc, &p->bytes, &hooks, err));
        /* synced, so clean: dropped from the page cache, which the next save's writes would otherwise reclaim (1.4 GB
         * cost 3-4 s of kernel CPU, taken from training, instead of 0.3 s on a 2-core VM); advice, not counted */
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), close(fd);
    }
    p->written = 1;
    s->nfiles_written++;
    if (s->nfiles_written == 1) maybe_kill(s, "after_first_file");
    return LLM4D_OK;
}

llm4d_code llm4d_ckpt_save_flush(llm4d_ckpt_saver *s, const char *file, llm4d_err *err) {
    int skip = llm4d_ck_skip_add(s, err);
    if (skip >= 0) return (llm4d_code)skip;
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->f[i].name, file) == 0)
            return llm4d_ck_keep_failure(s, llm4d_ck_flush_one(s, &s->f[i], err), err);
    return llm4d_ck_keep_failure(s, llm4d_fail(err, LLM4D_EINTERNAL, "flushing checkpoint file '%s' that has no tensors", file),
                        err);
}
