/* store.c — checkpoint directories (see store.h for the layout, the slice records and the crash-safety rules).
 *
 * The order of operations in llm4d_ckpt_save_commit is the whole point of this file: nothing under a final name
 * (step_<N>, latest) ever exists in an incomplete state, every byte is on disk (fsync of the file, then of the
 * directory holding its name) before the name that makes it reachable is published, and the previous checkpoint is
 * only removed once the new one is reachable. The loader trusts nothing it has not checksummed.
 * A collective save keeps that order with one publisher: every rank syncs its own files, the ranks agree (one
 * allgather of status records) that all of them succeeded, and only then does rank 0 publish; its result is
 * broadcast, so no rank can believe in a checkpoint that is not there. */
#define _GNU_SOURCE
#include "ckpt/store.h"

#include "core/fs.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define SLICES_KEY "llm4d.slices"
#define PATH_MAX_CK 1024 /* longest output_dir / checkpoint path accepted */
#define PBUF 4096       /* buffers for paths composed from those (never truncated) */

/* ---- small file-system helpers ---- */

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Remove a directory tree this module created (never follows symlinks). */
static int rm_tree(const char *path) { return nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

/* A plain file name: letters, digits, '.', '_', '-'; not starting with '.'. */
static int plain_name(const char *s) {
    if (!s[0] || s[0] == '.' || strlen(s) >= LLM4D_CKPT_FILE_MAX) return 0;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-') return 0;
    return 1;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* "step_<digits>" -> N, else -1. */
static int64_t step_of(const char *name) {
    if (strncmp(name, "step_", 5) != 0 || !name[5]) return -1;
    int64_t n = 0;
    for (const char *p = name + 5; *p; p++) {
        if (!isdigit((unsigned char)*p) || n > (INT64_MAX - 9) / 10) return -1;
        n = n * 10 + (*p - '0');
    }
    return n;
}

/* ---- saving ---- */

typedef struct {
    char name[LLM4D_CKPT_FILE_MAX];
    int is_blob;
    llm4d_st_writer w;   /* tensors */
    cJSON *slices;       /* the llm4d.slices record (NULL while no partial slice was added) */
    const void *blob;
    size_t blob_len;
    int written;
    uint32_t crc;
    uint64_t bytes;
    int *names;          /* open-addressing set of the local names added (index into w.t + 1; 0 = empty) */
    int names_cap;       /* a power of two, more than twice w.n */
} ck_pending;

struct llm4d_ckpt_saver {
    char out_dir[PATH_MAX_CK];
    char tmp_dir[PATH_MAX_CK + 128];
    char step_name[64];
    int64_t step;
    pid_t pid;           /* of the process that names the temporary directory (rank 0 of a collective save) */
    char kill_at[64];
    int kill_here;       /* LLM4D_CKPT_KILL_RANK is unset or names this rank */
    llm4d_fault fault;   /* LLM4D_FAULT: this save's file operations are counted here (core/fault.h) */
    int nfiles_written;
    int n, cap;
    ck_pending *f;
    /* collective saves */
    llm4d_comm *comm;    /* NULL: a single writer */
    int rank, writes;
    llm4d_err failed;    /* the first failure of this rank, kept for the collective commit (code 0: none) */
};

static void maybe_kill(const llm4d_ckpt_saver *s, const char *point) {
    if (s->kill_here && s->kill_at[0] && strcmp(s->kill_at, point) == 0) raise(SIGKILL);
}

static void kill_hook(void *ctx) { maybe_kill(ctx, "mid_file"); }

static void saver_free(llm4d_ckpt_saver *s) {
    for (int i = 0; i < s->n; i++) {
        llm4d_st_writer_free(&s->f[i].w);
        cJSON_Delete(s->f[i].slices);
        free(s->f[i].names);
    }
    free(s->f);
    free(s);
}

void llm4d_ckpt_save_abort(llm4d_ckpt_saver *s) {
    if (!s) return;
    if (!s->comm) rm_tree(s->tmp_dir); /* collective: other ranks may still be writing there */
    saver_free(s);
}

/* Remove .tmp_step_* / .tmp_del_step_* directories left by killed saves or prunes (ours excepted). */
static void remove_stale(const llm4d_ckpt_saver *s) {
    DIR *d = opendir(s->out_dir);
    if (!d) return;
    struct dirent *e;
    char path[PBUF];
    const char *own = strrchr(s->tmp_dir, '/') + 1;
    while ((e = readdir(d)) != NULL) {
        if ((strncmp(e->d_name, ".tmp_step_", 10) != 0 && strncmp(e->d_name, ".tmp_del_step_", 14) != 0) ||
            strcmp(e->d_name, own) == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", s->out_dir, e->d_name);
        rm_tree(path);
    }
    closedir(d);
}

/* After a failed save, say what the user still has: "(the save of step_4 did not complete; out/latest still names
 * step_2)".
 * Nothing under a final name changed (store.h), so `latest` is read as it is now. */
static void note_kept(const char *out_dir, const char *step_name, llm4d_err *err) {
    if (!err) return;
    char latest[PBUF], prev[80] = "", msg[sizeof err->msg];
    snprintf(latest, sizeof latest, "%s/latest", out_dir);
    FILE *f = fopen(latest, "r");
    if (f) {
        if (!fgets(prev, sizeof prev, f)) prev[0] = 0;
        fclose(f);
    }
    prev[strcspn(prev, "\r\n")] = 0;
    memcpy(msg, err->msg, sizeof msg);
    if (strcmp(prev, step_name) == 0) /* only the sync after `latest` itself was replaced failed */
        llm4d_fail(err, err->code, "%s (%s names %s, which is complete, but the storage reported this error; check "
                   "it before going on)", msg, latest, prev);
    else if (prev[0])
        llm4d_fail(err, err->code, "%s (the save of %s did not complete; %s still names %s)", msg, step_name, latest,
                   prev);
    else
        llm4d_fail(err, err->code, "%s (the save of %s did not complete; %s holds no earlier checkpoint)", msg,
                   step_name, out_dir);
}

/* A saver with its names set (the temporary directory named after pid), nothing created yet. */
static llm4d_code saver_new(llm4d_ckpt_saver **out, const char *output_dir, int64_t step, long pid, int rank,
                            llm4d_err *err) {
    *out = NULL;
    if (step < 0) return llm4d_fail(err, LLM4D_EINTERNAL, "checkpoint step %lld is negative", (long long)step);
    if (strlen(output_dir) + 64 >= PATH_MAX_CK)
        return llm4d_fail(err, LLM4D_EUSER, "output_dir '%s' is too long; choose a shorter path", output_dir);
    llm4d_ckpt_saver *s = calloc(1, sizeof *s);
    if (!s) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory starting a checkpoint");
    snprintf(s->out_dir, sizeof s->out_dir, "%s", output_dir);
    size_t n = strlen(s->out_dir);
    while (n > 1 && s->out_dir[n - 1] == '/') s->out_dir[--n] = 0;
    s->step = step;
    s->pid = (pid_t)pid;
    s->rank = rank;
    s->writes = 1;
    snprintf(s->step_name, sizeof s->step_name, "step_%lld", (long long)step);
    snprintf(s->tmp_dir, sizeof s->tmp_dir, "%s/.tmp_%s_%ld", s->out_dir, s->step_name, pid);
    const char *k = getenv("LLM4D_CKPT_KILL_AT");
    if (k) snprintf(s->kill_at, sizeof s->kill_at, "%s", k);
    const char *kr = getenv("LLM4D_CKPT_KILL_RANK");
    s->kill_here = !kr || !kr[0] || atoi(kr) == rank;
    llm4d_code rc = llm4d_fault_from_env(&s->fault, rank, err);
    if (rc != LLM4D_OK) {
        free(s);
        return rc;
    }
    *out = s;
    return LLM4D_OK;
}

/* Create output_dir and the temporary directory, remove stale temporaries. */
static llm4d_code create_dirs(llm4d_ckpt_saver *s, const char *output_dir, llm4d_err *err) {
    if (llm4d_mkdir_p(s->out_dir, 0755) != 0)
        return llm4d_fail(err, LLM4D_EUSER, "cannot create output directory %s: %s; choose a writable output_dir",
                          output_dir, strerror(errno));
    /* A leftover of our own pid (a previous save in this process that was aborted badly) is replaced. */
    rm_tree(s->tmp_dir);
    if (llm4d_fs_mkdir(&s->fault, s->tmp_dir, 0755) != 0)
        return llm4d_fail(err, LLM4D_EUSER, "output directory %s is not writable (creating a checkpoint there: %s); "
                          "choose a writable output_dir", output_dir, strerror(errno));
    remove_stale(s);
    return LLM4D_OK;
}

llm4d_code llm4d_ckpt_save_begin(llm4d_ckpt_saver **out, const char *output_dir, int64_t step, llm4d_err *err) {
    llm4d_ckpt_saver *s;
    LLM4D_TRY(saver_new(&s, output_dir, step, (long)getpid(), 0, err));
    llm4d_code rc = create_dirs(s, output_dir, err);
    if (rc != LLM4D_OK) {
        note_kept(s->out_dir, s->step_name, err);
        free(s);
        return rc;
    }
    *out = s;
    return LLM4D_OK;
}

/* On a collective saver: remember the first failure of this rank (for the commit). Returns rc. */
static llm4d_code keep_failure(llm4d_ckpt_saver *s, llm4d_code rc, const llm4d_err *err) {
    if (rc != LLM4D_OK && s->comm && s->failed.code == LLM4D_OK) {
        if (err) s->failed = *err;
        else snprintf(s->failed.msg, sizeof s->failed.msg, "adding to the checkpoint failed (error %d)", (int)rc);
        s->failed.code = rc;
    }
    return rc;
}

void llm4d_ckpt_save_mark_failed(llm4d_ckpt_saver *s, const llm4d_err *why) {
    keep_failure(s, why && why->code != LLM4D_OK ? why->code : LLM4D_EINTERNAL, why);
}

/* What a collective saver's add call returns without doing anything: OK on a rank that writes nothing, the kept
 * failure once one happened (later adds would only pile up errors). -1: go on. */
static int skip_add(const llm4d_ckpt_saver *s, llm4d_err *err) {
    if (!s->comm) return -1;
    if (!s->writes) return LLM4D_OK;
    if (s->failed.code != LLM4D_OK) {
        if (err) *err = s->failed;
        return s->failed.code;
    }
    return -1;
}

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

static llm4d_code save_tensor(llm4d_ckpt_saver *s, const char *file, const char *name, llm4d_st_dtype dt, int ndim,
                              const int64_t *global_shape, const int64_t *slice_offset, const int64_t *slice_shape,
                              const void *data, llm4d_err *err) {
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

llm4d_code llm4d_ckpt_save_tensor(llm4d_ckpt_saver *s, const char *file, const char *name, llm4d_st_dtype dt,
                                  int ndim, const int64_t *global_shape, const int64_t *slice_offset,
                                  const int64_t *slice_shape, const void *data, llm4d_err *err) {
    int skip = skip_add(s, err);
    if (skip >= 0) return (llm4d_code)skip;
    return keep_failure(s, save_tensor(s, file, name, dt, ndim, global_shape, slice_offset, slice_shape, data, err),
                        err);
}

llm4d_code llm4d_ckpt_save_blob(llm4d_ckpt_saver *s, const char *file, const void *data, size_t len,
                                llm4d_err *err) {
    int skip = skip_add(s, err);
    if (skip >= 0) return (llm4d_code)skip;
    ck_pending *p = pending_get(s, file, 1, err);
    if (!p) return keep_failure(s, err ? err->code : LLM4D_EINTERNAL, err);
    p->blob = data;
    p->blob_len = len;
    return LLM4D_OK;
}

static llm4d_code write_blob(llm4d_fault *f, const char *path, const void *data, size_t len, uint32_t *crc,
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

static llm4d_code flush_one(llm4d_ckpt_saver *s, ck_pending *p, llm4d_err *err) {
    if (p->written) return LLM4D_OK;
    char path[PBUF];
    snprintf(path, sizeof path, "%s/%s", s->tmp_dir, p->name);
    if (p->is_blob) {
        LLM4D_TRY(write_blob(&s->fault, path, p->blob, p->blob_len, &p->crc, err));
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
    }
    p->written = 1;
    s->nfiles_written++;
    if (s->nfiles_written == 1) maybe_kill(s, "after_first_file");
    return LLM4D_OK;
}

llm4d_code llm4d_ckpt_save_flush(llm4d_ckpt_saver *s, const char *file, llm4d_err *err) {
    int skip = skip_add(s, err);
    if (skip >= 0) return (llm4d_code)skip;
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->f[i].name, file) == 0) return keep_failure(s, flush_one(s, &s->f[i], err), err);
    return keep_failure(s, llm4d_fail(err, LLM4D_EINTERNAL, "flushing checkpoint file '%s' that has no tensors", file),
                        err);
}

/* One manifest entry; also the record the ranks of a collective commit exchange (fixed size, sent as raw bytes
 * between copies of the same program). */
typedef struct {
    char name[LLM4D_CKPT_FILE_MAX];
    uint64_t bytes;
    uint32_t crc;
    int32_t rank; /* the writer */
} ck_mentry;

static llm4d_code write_meta(llm4d_ckpt_saver *s, const ck_mentry *man, int nman, const cJSON *meta,
                             llm4d_err *err) {
    if (meta && !cJSON_IsObject(meta))
        return llm4d_fail(err, LLM4D_EINTERNAL, "checkpoint meta must be a JSON object");
    cJSON *m = meta ? cJSON_Duplicate(meta, 1) : cJSON_CreateObject();
    cJSON *files = cJSON_CreateObject();
    if (!m || !files) goto oom;
    cJSON_DeleteItemFromObjectCaseSensitive(m, "files");
    for (int i = 0; i < nman; i++) {
        cJSON *e = cJSON_AddObjectToObject(files, man[i].name);
        if (!e || !cJSON_AddNumberToObject(e, "bytes", (double)man[i].bytes) ||
            !cJSON_AddNumberToObject(e, "crc32", (double)man[i].crc))
            goto oom;
    }
    if (!cJSON_AddItemToObject(m, "files", files)) goto oom;
    files = NULL;
    char *text = cJSON_Print(m);
    cJSON_Delete(m);
    if (!text) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory writing meta.json");
    size_t len = strlen(text);
    text[len] = '\n'; /* replaces the terminator: the file ends with a newline */
    char path[PBUF];
    snprintf(path, sizeof path, "%s/meta.json", s->tmp_dir);
    llm4d_code rc = write_blob(&s->fault, path, text, len + 1, NULL, err);
    free(text);
    return rc;
oom:
    cJSON_Delete(m);
    cJSON_Delete(files);
    return llm4d_fail(err, LLM4D_ENOMEM, "out of memory writing meta.json");
}

static llm4d_code write_latest(llm4d_ckpt_saver *s, llm4d_err *err) {
    char tmp[PBUF], fin[PBUF], text[80];
    snprintf(tmp, sizeof tmp, "%s/latest.tmp", s->out_dir);
    snprintf(fin, sizeof fin, "%s/latest", s->out_dir);
    int len = snprintf(text, sizeof text, "%s\n", s->step_name);
    int fd = llm4d_fs_create(&s->fault, tmp, 0644);
    if (fd < 0)
        return llm4d_fail(err, LLM4D_EIO, "cannot create %s: %s; %s", tmp, strerror(errno), llm4d_fs_fix(errno));
    int bad = llm4d_fs_write(&s->fault, fd, text, (size_t)len / 2) != 0;
    if (!bad) maybe_kill(s, "latest_partial");
    bad = bad || llm4d_fs_write(&s->fault, fd, text + len / 2, (size_t)(len - len / 2)) != 0 ||
          llm4d_fs_fsync(&s->fault, fd) != 0;
    int e = errno;
    if (close(fd) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        unlink(tmp);
        return llm4d_fail(err, LLM4D_EIO, "writing %s: %s; %s", tmp, strerror(e), llm4d_fs_fix(e));
    }
    maybe_kill(s, "before_latest_rename");
    if (llm4d_fs_rename(&s->fault, tmp, fin) != 0) {
        e = errno;
        unlink(tmp);
        return llm4d_fail(err, LLM4D_EIO, "renaming %s to %s: %s; %s", tmp, fin, strerror(e), llm4d_fs_fix(e));
    }
    if (llm4d_fs_fsync_dir(&s->fault, s->out_dir) != 0)
        return llm4d_fail(err, LLM4D_EIO, "syncing %s: %s; %s", s->out_dir, strerror(errno), llm4d_fs_fix(errno));
    return LLM4D_OK;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Keep the keep_last highest-numbered step_* directories (and always s->step, which `latest` names). */
static void prune(llm4d_ckpt_saver *s, int keep_last) {
    if (keep_last <= 0) return;
    DIR *d = opendir(s->out_dir);
    if (!d) return;
    int n = 0, cap = 64;
    int64_t *steps = malloc((size_t)cap * sizeof *steps);
    struct dirent *e;
    while (steps && (e = readdir(d)) != NULL) {
        int64_t k = step_of(e->d_name);
        if (k < 0 || k == s->step) continue;
        if (n == cap) {
            int64_t *t = realloc(steps, (size_t)(cap *= 2) * sizeof *t);
            if (!t) break;
            steps = t;
        }
        steps[n++] = k;
    }
    closedir(d);
    if (!steps) return;
    qsort(steps, (size_t)n, sizeof *steps, cmp_i64);
    int remove_n = n - (keep_last - 1);
    for (int i = 0; i < remove_n; i++) {
        char from[PBUF], to[PBUF];
        snprintf(from, sizeof from, "%s/step_%lld", s->out_dir, (long long)steps[i]);
        snprintf(to, sizeof to, "%s/.tmp_del_step_%lld_%ld", s->out_dir, (long long)steps[i], (long)s->pid);
        if (rename(from, to) == 0) rm_tree(to);
    }
    free(steps);
    llm4d_fsync_dir(s->out_dir);
}

/* Every file of the manifest is written and synced into tmp_dir: write meta.json, publish step_<N>, update
 * `latest`, prune. Before the rename, a failure removes tmp_dir; s is not freed. */
static llm4d_code publish(llm4d_ckpt_saver *s, const ck_mentry *man, int nman, const cJSON *meta, int keep_last,
                          llm4d_err *err) {
    llm4d_code rc = write_meta(s, man, nman, meta, err);
    if (rc != LLM4D_OK) {
        rm_tree(s->tmp_dir);
        return rc;
    }
    maybe_kill(s, "before_dir_fsync");
    if (llm4d_fs_fsync_dir(&s->fault, s->tmp_dir) != 0) {
        rc = llm4d_fail(err, LLM4D_EIO, "syncing %s: %s; %s", s->tmp_dir, strerror(errno), llm4d_fs_fix(errno));
        rm_tree(s->tmp_dir);
        return rc;
    }
    maybe_kill(s, "before_rename");
    char fin[PBUF];
    snprintf(fin, sizeof fin, "%s/%s", s->out_dir, s->step_name);
    int swapped = 0;
    if (llm4d_fs_rename(&s->fault, s->tmp_dir, fin) != 0) {
        int e = errno;
        if (e == EEXIST || e == ENOTEMPTY) {
            /* step_<N> exists: swap atomically, the old checkpoint ends up under our temporary name. */
            const int inj = llm4d_fault_hit(&s->fault, LLM4D_FAULT_RENAME);
            if (inj) errno = inj;
            if (!inj && renameat2(AT_FDCWD, s->tmp_dir, AT_FDCWD, fin, RENAME_EXCHANGE) == 0) {
                swapped = 1;
            } else {
                e = errno;
                rc = llm4d_fail(err, LLM4D_EUSER, "%s exists and cannot be replaced atomically (%s); remove it or "
                                "choose another output_dir", fin, strerror(e));
                rm_tree(s->tmp_dir);
                return rc;
            }
        } else {
            rc = llm4d_fail(err, LLM4D_EIO, "renaming %s to %s: %s; %s", s->tmp_dir, fin, strerror(e), llm4d_fs_fix(e));
            rm_tree(s->tmp_dir);
            return rc;
        }
    }
    maybe_kill(s, "after_rename");
    if (llm4d_fs_fsync_dir(&s->fault, s->out_dir) != 0)
        return llm4d_fail(err, LLM4D_EIO, "syncing %s: %s; %s", s->out_dir, strerror(errno), llm4d_fs_fix(errno));
    /* From here on step_<N> is complete and in place; a failure of the pointer leaves both for the user. */
    LLM4D_TRY(write_latest(s, err));
    maybe_kill(s, "before_prune");
    if (swapped) rm_tree(s->tmp_dir);
    prune(s, keep_last);
    return LLM4D_OK;
}

/* Write this saver's files; fills *man (malloc'ed, the files in add order) and *nman. */
static llm4d_code write_own(llm4d_ckpt_saver *s, ck_mentry **man, int *nman, llm4d_err *err) {
    *man = NULL;
    *nman = 0;
    for (int i = 0; i < s->n; i++) LLM4D_TRY(flush_one(s, &s->f[i], err));
    if (s->n == 0) return LLM4D_OK;
    ck_mentry *m = calloc((size_t)s->n, sizeof *m);
    if (!m) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory listing the checkpoint's files");
    for (int i = 0; i < s->n; i++) {
        snprintf(m[i].name, sizeof m[i].name, "%s", s->f[i].name);
        m[i].bytes = s->f[i].bytes;
        m[i].crc = s->f[i].crc;
        m[i].rank = s->rank;
    }
    *man = m;
    *nman = s->n;
    return LLM4D_OK;
}

llm4d_code llm4d_ckpt_save_commit(llm4d_ckpt_saver *s, const cJSON *meta, int keep_last, llm4d_err *err) {
    LLM4D_ASSERT(!s->comm, "a collective saver is committed with llm4d_ckpt_save_commit_collective");
    ck_mentry *man = NULL;
    int nman = 0;
    llm4d_code rc = write_own(s, &man, &nman, err);
    if (rc != LLM4D_OK) rm_tree(s->tmp_dir);
    else rc = publish(s, man, nman, meta, keep_last, err);
    if (rc != LLM4D_OK) note_kept(s->out_dir, s->step_name, err);
    free(man);
    saver_free(s);
    return rc;
}

/* ---- collective saving ---- */

/* What each rank contributes to an agreement (sent as raw bytes). */
typedef struct {
    int64_t code;
    int64_t value;
    char msg[sizeof(((llm4d_err *)0)->msg)];
} ck_status;

/* Allgather every rank's (code, message, value). When any rank failed, every rank returns the code of the
 * lowest-numbered failing rank with its message ("rank R: ..." in a group of several). values (n entries, may be
 * NULL) receives every rank's value. A buffer that cannot be allocated here is fatal: returning alone would leave the
 * other ranks waiting in the collective forever. */
static llm4d_code agree(llm4d_comm *c, llm4d_code rc, const llm4d_err *mine, int64_t value, int64_t *values,
                        llm4d_err *err) {
    const int n = llm4d_comm_size(c);
    ck_status *all = calloc((size_t)n, sizeof *all);
    LLM4D_ASSERT(all != NULL, "out of memory agreeing on a checkpoint among %d ranks", n);
    ck_status me = {.code = rc, .value = value};
    if (rc != LLM4D_OK) snprintf(me.msg, sizeof me.msg, "%s", mine->msg);
    llm4d_code out = llm4d_comm_allgather(c, &me, all, sizeof me, LLM4D_COMM_BYTE, err);
    for (int r = 0; r < n && out == LLM4D_OK; r++) {
        if (values) values[r] = all[r].value;
        if (all[r].code != LLM4D_OK) {
            out = (llm4d_code)all[r].code;
            all[r].msg[sizeof all[r].msg - 1] = 0;
            if (n > 1) llm4d_fail(err, out, "rank %d: %s", r, all[r].msg);
            else llm4d_fail(err, out, "%s", all[r].msg);
        }
    }
    free(all);
    return out;
}

llm4d_code llm4d_ckpt_save_begin_collective(llm4d_ckpt_saver **out, llm4d_comm *comm, const char *output_dir,
                                            int64_t step, int writes, llm4d_err *err) {
    *out = NULL;
    const int n = llm4d_comm_size(comm), rank = llm4d_comm_rank(comm);
    llm4d_err le = {0};
    llm4d_ckpt_saver *s = NULL;
    llm4d_code rc = LLM4D_OK;
    /* Round 1: rank 0 names the temporary directory after its pid and creates it. */
    if (rank == 0) {
        rc = saver_new(&s, output_dir, step, (long)getpid(), 0, &le);
        if (rc == LLM4D_OK && (rc = create_dirs(s, output_dir, &le)) != LLM4D_OK) {
            free(s);
            s = NULL;
        }
    }
    int64_t *vals = calloc((size_t)n, sizeof *vals);
    LLM4D_ASSERT(vals != NULL, "out of memory starting a checkpoint among %d ranks", n);
    rc = agree(comm, rc, &le, rank == 0 ? (int64_t)getpid() : 0, vals, err);
    /* Round 2: every other rank must see that directory, or its files would go somewhere rank 0 never looks. */
    if (rc == LLM4D_OK) {
        llm4d_code mine = LLM4D_OK;
        if (rank != 0) {
            mine = saver_new(&s, output_dir, step, (long)vals[0], rank, &le);
            struct stat st;
            if (mine == LLM4D_OK && (stat(s->tmp_dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
                                     access(s->tmp_dir, W_OK | X_OK) != 0))
                mine = llm4d_fail(&le, LLM4D_EUSER, "cannot use the checkpoint directory %s that rank 0 created (%s); "
                                  "output_dir must be a writable directory on a file system shared by every rank",
                                  s->tmp_dir, strerror(errno));
        }
        rc = agree(comm, mine, &le, 0, NULL, err);
        if (rc != LLM4D_OK && rank == 0 && s) rm_tree(s->tmp_dir);
    }
    free(vals);
    if (rc != LLM4D_OK) {
        char step_name[64];
        snprintf(step_name, sizeof step_name, "step_%lld", (long long)step);
        note_kept(output_dir, step_name, err);
        if (s) saver_free(s);
        return rc;
    }
    s->comm = comm;
    s->writes = writes != 0;
    *out = s;
    return LLM4D_OK;
}

static int cmp_mentry(const void *a, const void *b) {
    const ck_mentry *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->rank > y->rank) - (x->rank < y->rank);
}

/* Rank 0, before publishing: no file written by two ranks, every file there with its announced size. */
static llm4d_code check_manifest(const llm4d_ckpt_saver *s, ck_mentry *man, int nman, llm4d_err *err) {
    for (int i = 0; i < nman; i++) man[i].name[sizeof man[i].name - 1] = 0;
    if (nman > 1) qsort(man, (size_t)nman, sizeof *man, cmp_mentry);
    /* names first: two ranks writing one file also make its size disagree, which would hide the real mistake */
    for (int i = 1; i < nman; i++)
        if (strcmp(man[i].name, man[i - 1].name) == 0)
            return llm4d_fail(err, LLM4D_EINTERNAL, "checkpoint file '%s' is written by rank %d and by rank %d; give "
                              "every writer its own file tag", man[i].name, (int)man[i - 1].rank, (int)man[i].rank);
    for (int i = 0; i < nman; i++) {
        char path[PBUF];
        snprintf(path, sizeof path, "%s/%s", s->tmp_dir, man[i].name);
        struct stat st;
        if (stat(path, &st) != 0)
            return llm4d_fail(err, LLM4D_EUSER, "rank 0 cannot see %s, written by rank %d (%s); output_dir must be on "
                              "a file system shared by every rank", path, (int)man[i].rank, strerror(errno));
        if ((uint64_t)st.st_size != man[i].bytes)
            return llm4d_fail(err, LLM4D_EIO, "%s, written by rank %d, is %lld bytes on rank 0 but %llu on its writer; "
                              "output_dir must be on a file system shared by every rank", path, (int)man[i].rank,
                              (long long)st.st_size, (unsigned long long)man[i].bytes);
    }
    return LLM4D_OK;
}

llm4d_code llm4d_ckpt_save_commit_collective(llm4d_ckpt_saver *s, const cJSON *meta, int keep_last,
                                             llm4d_err *err) {
    LLM4D_ASSERT(s->comm, "a single-writer saver is committed with llm4d_ckpt_save_commit");
    llm4d_comm *c = s->comm;
    const int n = llm4d_comm_size(c), rank = s->rank;
    llm4d_err le = s->failed;
    llm4d_code rc = s->failed.code;
    ck_mentry *mine = NULL, *send = NULL, *all = NULL, *man = NULL;
    int nmine = 0;
    /* 1. this rank's files, each synced, then the directory entries naming them */
    if (rc == LLM4D_OK && s->writes) {
        rc = write_own(s, &mine, &nmine, &le);
        if (rc == LLM4D_OK && nmine > 0 && llm4d_fs_fsync_dir(&s->fault, s->tmp_dir) != 0)
            rc = llm4d_fail(&le, LLM4D_EIO, "syncing %s: %s; %s", s->tmp_dir, strerror(errno), llm4d_fs_fix(errno));
    }
    maybe_kill(s, "before_agree");
    /* 2. did every rank succeed? Past this point no rank writes into the temporary directory. */
    int64_t *counts = calloc((size_t)n, sizeof *counts);
    LLM4D_ASSERT(counts != NULL, "out of memory committing a checkpoint among %d ranks", n);
    rc = agree(c, rc, &le, nmine, counts, err);
    int64_t maxc = 0, total = 0;
    for (int r = 0; r < n && rc == LLM4D_OK; r++) {
        maxc = counts[r] > maxc ? counts[r] : maxc;
        total += counts[r];
    }
    /* 3. everyone's manifest entries (padded to the longest list) */
    if (rc == LLM4D_OK && maxc > 0) {
        send = calloc((size_t)maxc, sizeof *send);
        all = calloc((size_t)maxc * (size_t)n, sizeof *all);
        man = calloc((size_t)total, sizeof *man);
        LLM4D_ASSERT(send && all && man, "out of memory gathering %lld checkpoint file names", (long long)total);
        if (nmine > 0) memcpy(send, mine, (size_t)nmine * sizeof *mine);
        rc = llm4d_comm_allgather(c, send, all, (size_t)maxc * sizeof *send, LLM4D_COMM_BYTE, err);
    }
    if (rc != LLM4D_OK) {
        if (rank == 0) rm_tree(s->tmp_dir);
        goto done;
    }
    /* 4. rank 0 publishes; everybody returns its result */
    ck_status res;
    memset(&res, 0, sizeof res);
    if (rank == 0) {
        int k = 0;
        for (int r = 0; r < n; r++)
            for (int64_t i = 0; i < counts[r]; i++) man[k++] = all[(size_t)r * (size_t)maxc + (size_t)i];
        llm4d_err e0 = {0};
        llm4d_code r0 = check_manifest(s, man, k, &e0);
        if (r0 != LLM4D_OK) rm_tree(s->tmp_dir);
        else r0 = publish(s, man, k, meta, keep_last, &e0);
        res.code = r0;
        if (r0 != LLM4D_OK) snprintf(res.msg, sizeof res.msg, "%s", e0.msg);
    }
    rc = llm4d_comm_broadcast(c, &res, sizeof res, LLM4D_COMM_BYTE, 0, err);
    if (rc == LLM4D_OK && res.code != LLM4D_OK) {
        res.msg[sizeof res.msg - 1] = 0;
        rc = llm4d_fail(err, (llm4d_code)res.code, "%s", res.msg);
    }
done:
    if (rc != LLM4D_OK) note_kept(s->out_dir, s->step_name, err);
    free(counts);
    free(mine);
    free(send);
    free(all);
    free(man);
    saver_free(s);
    return rc;
}

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
    uint32_t got = (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), f->map, f->len);
    if (got != crc)
        return llm4d_fail(err, LLM4D_EUSER, "checkpoint file %s is corrupt: crc32 0x%08x, meta.json says 0x%08x; "
                          "restore it or load an older checkpoint", path, got, crc);
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

static void fmt_shape(char *buf, size_t n, int ndim, const int64_t *s) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)s[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
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

static llm4d_code read_slices(const llm4d_ckpt *c, const char *file_prefix, const char *name,
                              const ck_entry **sel, int lo, int hi, llm4d_st_dtype dt, int ndim,
                              const int64_t *expect_shape, const int64_t *offset, const int64_t *shape, void *out,
                              llm4d_err *err);

llm4d_code llm4d_ckpt_read(const llm4d_ckpt *c, const char *file_prefix, const char *name, llm4d_st_dtype dt,
                           int ndim, const int64_t *expect_shape, const int64_t *offset, const int64_t *shape,
                           void *out, llm4d_err *err) {
    int lo, hi;
    entry_range(c, name, &lo, &hi);
    /* the name's slices, first all of them (for the shape checks), then those meeting the box (sel[0..m)) */
    const ck_entry *sel_small[64], **sel = sel_small;
    if (hi - lo > (int)(sizeof sel_small / sizeof sel_small[0]) &&
        !(sel = malloc((size_t)(hi - lo) * sizeof *sel)))
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory reading tensor '%s'", name);
    llm4d_code rc = read_slices(c, file_prefix, name, sel, lo, hi, dt, ndim, expect_shape, offset, shape, out, err);
    if (sel != sel_small) free(sel);
    return rc;
}

static llm4d_code read_slices(const llm4d_ckpt *c, const char *file_prefix, const char *name,
                              const ck_entry **sel, int lo, int hi, llm4d_st_dtype dt, int ndim,
                              const int64_t *expect_shape, const int64_t *offset, const int64_t *shape, void *out,
                              llm4d_err *err) {
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
            fmt_shape(a, sizeof a, e0->ndim, e0->gshape);
            fmt_shape(b, sizeof b, sel[i]->ndim, sel[i]->gshape);
            return llm4d_fail(err, LLM4D_EUSER, "checkpoint %s: slices of '%s' disagree on its shape (%s in %s, %s in "
                              "%s)", c->dir, name, a, c->files[e0->file].name, b, c->files[sel[i]->file].name);
        }
    if (expect_shape && (ndim != e0->ndim || memcmp(expect_shape, e0->gshape, (size_t)ndim * sizeof(int64_t)) != 0)) {
        fmt_shape(a, sizeof a, e0->ndim, e0->gshape);
        fmt_shape(b, sizeof b, ndim, expect_shape);
        return llm4d_fail(err, LLM4D_EUSER, "checkpoint %s: tensor '%s' has shape %s but the model expects %s; the "
                          "checkpoint was written for a different model configuration", c->dir, name, a, b);
    }
    if (ndim != e0->ndim) {
        fmt_shape(a, sizeof a, e0->ndim, e0->gshape);
        return llm4d_fail(err, LLM4D_EUSER, "checkpoint %s: tensor '%s' has shape %s, not %d dimensions", c->dir,
                          name, a, ndim);
    }
    int64_t off[LLM4D_ST_MAX_DIMS], shp[LLM4D_ST_MAX_DIMS], vol = 1;
    for (int d = 0; d < ndim; d++) {
        off[d] = offset ? offset[d] : 0;
        shp[d] = shape ? shape[d] : e0->gshape[d];
        if (off[d] < 0 || shp[d] < 0 || off[d] + shp[d] > e0->gshape[d]) {
            fmt_shape(a, sizeof a, ndim, e0->gshape);
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
        for (int i = 0; i < n; i++) covered += copy_intersection(sel[i], ndim, off, shp, dt, out);
    if (covered != vol) {
        int64_t endv[LLM4D_ST_MAX_DIMS];
        for (int d = 0; d < ndim; d++) endv[d] = off[d] + shp[d];
        fmt_shape(a, sizeof a, ndim, off);
        fmt_shape(b, sizeof b, ndim, endv);
        return llm4d_fail(err, LLM4D_EUSER, "checkpoint %s: the slices of tensor '%s' cover %lld of the %lld elements "
                          "of the box %s..%s; a slice file is missing or the save was incomplete", c->dir, name,
                          (long long)covered, (long long)vol, a, b);
    }
    return LLM4D_OK;
}

/* ---- flat ranges ---- */

/* A flat C-order range [b, e) of a tensor is a union of at most 2*(ndim-1)+1 boxes: a partial leading piece, whole
 * rows (or planes), a partial trailing piece, recursively. Each box is also a contiguous piece of the range, so the
 * data of box k starts at its flat start minus the range's begin. */
typedef llm4d_code (*box_fn)(void *ctx, const int64_t *off, const int64_t *shp, int64_t flat_start, llm4d_err *err);

typedef struct {
    int ndim;
    const int64_t *gshape;
    int64_t off[LLM4D_ST_MAX_DIMS], shp[LLM4D_ST_MAX_DIMS];
    box_fn fn;
    void *ctx;
} decomp;

static llm4d_code decompose(decomp *x, int d, int64_t b, int64_t e, int64_t base, llm4d_err *err) {
    if (b >= e) return LLM4D_OK;
    int64_t inner = 1;
    for (int k = d + 1; k < x->ndim; k++) inner *= x->gshape[k];
    int64_t i0 = b / inner, i1 = e / inner;
    if (i0 == i1) {
        x->off[d] = i0;
        x->shp[d] = 1;
        return decompose(x, d + 1, b - i0 * inner, e - i0 * inner, base + i0 * inner, err);
    }
    if (b % inner) {
        x->off[d] = i0;
        x->shp[d] = 1;
        LLM4D_TRY(decompose(x, d + 1, b % inner, inner, base + i0 * inner, err));
        i0++;
    }
    if (i1 > i0) {
        x->off[d] = i0;
        x->shp[d] = i1 - i0;
        for (int k = d + 1; k < x->ndim; k++) {
            x->off[k] = 0;
            x->shp[k] = x->gshape[k];
        }
        LLM4D_TRY(x->fn(x->ctx, x->off, x->shp, base + i0 * inner, err));
    }
    if (e % inner) {
        x->off[d] = i1;
        x->shp[d] = 1;
        LLM4D_TRY(decompose(x, d + 1, 0, e % inner, base + i1 * inner, err));
    }
    return LLM4D_OK;
}

static llm4d_code for_each_box(int ndim, const int64_t *gshape, int64_t b, int64_t e, box_fn fn, void *ctx,
                               llm4d_err *err) {
    decomp x = {.ndim = ndim, .gshape = gshape, .fn = fn, .ctx = ctx};
    if (ndim == 0) return b < e ? fn(ctx, x.off, x.shp, 0, err) : LLM4D_OK;
    return decompose(&x, 0, b, e, 0, err);
}

typedef struct {
    llm4d_ckpt_saver *s;
    const llm4d_ckpt *c;
    const char *file, *name;
    llm4d_st_dtype dt;
    int ndim;
    const int64_t *gshape;
    int64_t begin;
    const uint8_t *src;
    uint8_t *dst;
} range_ctx;

static llm4d_code save_box(void *ctx, const int64_t *off, const int64_t *shp, int64_t flat_start, llm4d_err *err) {
    range_ctx *r = ctx;
    return llm4d_ckpt_save_tensor(r->s, r->file, r->name, r->dt, r->ndim, r->gshape, off, shp,
                                  r->src + (size_t)(flat_start - r->begin) * llm4d_st_dtype_size(r->dt), err);
}

static llm4d_code read_box(void *ctx, const int64_t *off, const int64_t *shp, int64_t flat_start, llm4d_err *err) {
    range_ctx *r = ctx;
    return llm4d_ckpt_read(r->c, r->file, r->name, r->dt, r->ndim, r->gshape, off, shp,
                           r->dst + (size_t)(flat_start - r->begin) * llm4d_st_dtype_size(r->dt), err);
}

llm4d_code llm4d_ckpt_save_range(llm4d_ckpt_saver *s, const char *file, const char *name, llm4d_st_dtype dt,
                                 int ndim, const int64_t *global_shape, int64_t begin, int64_t end, const void *data,
                                 llm4d_err *err) {
    int skip = skip_add(s, err);
    if (skip >= 0) return (llm4d_code)skip;
    if (ndim < 0 || ndim > LLM4D_ST_MAX_DIMS || begin < 0 || end < begin ||
        end > llm4d_st_numel(ndim, global_shape))
        return keep_failure(s, llm4d_fail(err, LLM4D_EINTERNAL, "checkpoint tensor '%s': flat range [%lld, %lld) is "
                                          "outside its %lld elements", name, (long long)begin, (long long)end,
                                          (long long)(ndim >= 0 && ndim <= LLM4D_ST_MAX_DIMS
                                                          ? llm4d_st_numel(ndim, global_shape)
                                                          : 0)),
                            err);
    range_ctx r = {.s = s, .file = file, .name = name, .dt = dt, .ndim = ndim, .gshape = global_shape,
                   .begin = begin, .src = data};
    return keep_failure(s, for_each_box(ndim, global_shape, begin, end, save_box, &r, err), err);
}

llm4d_code llm4d_ckpt_read_range(const llm4d_ckpt *c, const char *file_prefix, const char *name, llm4d_st_dtype dt,
                                 int ndim, const int64_t *global_shape, int64_t begin, int64_t end, void *out,
                                 llm4d_err *err) {
    if (ndim < 0 || ndim > LLM4D_ST_MAX_DIMS || begin < 0 || end < begin ||
        end > llm4d_st_numel(ndim, global_shape))
        return llm4d_fail(err, LLM4D_EINTERNAL, "reading tensor '%s': flat range [%lld, %lld) is outside its shape",
                          name, (long long)begin, (long long)end);
    range_ctx r = {.c = c, .file = file_prefix, .name = name, .dt = dt, .ndim = ndim, .gshape = global_shape,
                   .begin = begin, .dst = out};
    return for_each_box(ndim, global_shape, begin, end, read_box, &r, err);
}
