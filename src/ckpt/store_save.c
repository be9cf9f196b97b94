/* store_save.c — writing checkpoint directories (see store.h for the layout, the slice records and the
 * crash-safety rules).
 *
 * The order of operations in llm4d_ckpt_save_commit is the whole point of this file: nothing under a final name
 * (step_<N>, latest) ever exists in an incomplete state, every byte is on disk (fsync of the file, then of the
 * directory holding its name) before the name that makes it reachable is published, and the previous checkpoint is
 * only removed once the new one is reachable.
 * A collective save keeps that order with one publisher: every rank syncs its own files, the ranks agree (one
 * allgather of status records) that all of them succeeded, and only then does rank 0 publish; its result is
 * broadcast, so no rank can believe in a checkpoint that is not there. Reading: store_load.c; flat element ranges:
 * store_range.c. */
#define _GNU_SOURCE
#include "ckpt/store_impl.h"

#include "core/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ---- small file-system helpers ---- */

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Remove a directory tree this module created (never follows symlinks). */
static int rm_tree(const char *path) { return nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

/* ---- saving ---- */

static void saver_free(llm4d_ckpt_saver *s) {
    for (int i = 0; i < s->n; i++) {
        llm4d_st_writer_free(&s->f[i].w);
        cJSON_Delete(s->f[i].slices);
        free(s->f[i].names);
    }
    free(s->f);
    free(s->own);
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
llm4d_code llm4d_ck_keep_failure(llm4d_ckpt_saver *s, llm4d_code rc, const llm4d_err *err) {
    if (rc != LLM4D_OK && s->comm && s->failed.code == LLM4D_OK) {
        if (err) s->failed = *err;
        else snprintf(s->failed.msg, sizeof s->failed.msg, "adding to the checkpoint failed (error %d)", (int)rc);
        s->failed.code = rc;
    }
    return rc;
}

void llm4d_ckpt_save_mark_failed(llm4d_ckpt_saver *s, const llm4d_err *why) {
    llm4d_ck_keep_failure(s, why && why->code != LLM4D_OK ? why->code : LLM4D_EINTERNAL, why);
}

/* What a collective saver's add call returns without doing anything: OK on a rank that writes nothing, the kept
 * failure once one happened (later adds would only pile up errors). -1: go on. */
int llm4d_ck_skip_add(const llm4d_ckpt_saver *s, llm4d_err *err) {
    if (!s->comm) return -1;
    if (!s->writes) return LLM4D_OK;
    if (s->failed.code != LLM4D_OK) {
        if (err) *err = s->failed;
        return s->failed.code;
    }
    return -1;
}

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
    llm4d_code rc = llm4d_ck_write_blob(&s->fault, path, text, len + 1, NULL, err);
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
    for (int i = 0; i < s->n; i++) LLM4D_TRY(llm4d_ck_flush_one(s, &s->f[i], err));
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
 * lowest-numbered failing rank with its message ("rank R: ..." in a group of several: the same
 * line on every rank, so the one a launcher shows names the rank that failed). values (n entries, may be
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

/* Step 1 of a collective commit: this rank's files, each synced, then the directory entries naming them. No
 * communication, so that it can run on a thread other than the one calling MPI. A failure is kept for the commit. */
llm4d_code llm4d_ckpt_save_write_collective(llm4d_ckpt_saver *s, llm4d_err *err) {
    LLM4D_ASSERT(s->comm, "llm4d_ckpt_save_write_collective takes a collective saver");
    if (!s->own_done && s->failed.code == LLM4D_OK && s->writes) {
        llm4d_err le = {0};
        llm4d_code rc = write_own(s, &s->own, &s->nown, &le);
        if (rc == LLM4D_OK && s->nown > 0 && llm4d_fs_fsync_dir(&s->fault, s->tmp_dir) != 0)
            rc = llm4d_fail(&le, LLM4D_EIO, "syncing %s: %s; %s", s->tmp_dir, strerror(errno), llm4d_fs_fix(errno));
        llm4d_ck_keep_failure(s, rc, &le);
    }
    s->own_done = 1;
    if (s->failed.code != LLM4D_OK && err) *err = s->failed;
    return s->failed.code;
}

llm4d_code llm4d_ckpt_save_commit_collective(llm4d_ckpt_saver *s, const cJSON *meta, int keep_last,
                                             llm4d_err *err) {
    LLM4D_ASSERT(s->comm, "a single-writer saver is committed with llm4d_ckpt_save_commit");
    llm4d_comm *c = s->comm;
    const int n = llm4d_comm_size(c), rank = s->rank;
    /* 1. unless done ahead of the commit (an asynchronous save's writer thread) */
    llm4d_ckpt_save_write_collective(s, NULL);
    llm4d_err le = s->failed;
    llm4d_code rc = s->failed.code;
    const ck_mentry *mine = s->own;
    const int nmine = rc == LLM4D_OK ? s->nown : 0;
    ck_mentry *send = NULL, *all = NULL, *man = NULL;
    maybe_kill(s, "before_agree");
    /* 2. did every rank succeed? Past this point no rank writes into the temporary directory. */
    int64_t *counts = calloc((size_t)n, sizeof *counts);
    LLM4D_ASSERT(counts != NULL, "out of memory committing a checkpoint among %d ranks", n);
    counts[0] = -1; /* agree fills counts[0] first whenever the exchange itself succeeded */
    rc = agree(c, rc, &le, nmine, counts, err);
    const int exchanged = counts[0] >= 0;
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
        /* a rank's failure, agreed on: nobody leaves before rank 0 has removed the temporary directory (a rank that
         * exits with the error makes the launcher end the others, rank 0 in the middle of its rm_tree). After a
         * failure of the exchange itself (a lost peer) there is nobody to wait for. */
        if (exchanged) llm4d_comm_barrier(c, NULL);
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
    free(send);
    free(all);
    free(man);
    saver_free(s);
    return rc;
}

