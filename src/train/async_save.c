/* async_save.c — --async_save: a checkpoint written by a background thread while training goes on (issue 45).
 *
 * Why: a synchronous save stalls every rank for the whole write and fsync of its state (gpt2-en's 1.4 GB: about
 * 5 s on a 2-core VM, as long as a step). What cannot move off the step is the copy of the state (training is about
 * to change it) and the collectives (MPI runs at MPI_THREAD_FUNNELED: only the main thread may call it); the rest is
 * file I/O, which a thread can do.
 *
 * A save at step N, on the main thread of every rank:
 *   1. the previous save, if still pending, is waited for and published (below): saves are published in order, and
 *      the snapshot is reused;
 *   2. the snapshot: the parameters and Adam m, v of the ranges the rank writes, copied back to back into a host
 *      buffer allocated once at start-up (be->alloc_host, LLM4D_MEM_WORKSPACE; its size is the memory plan's figure,
 *      parallel/stack.h llm4d_stack_snapshot_bytes). What the engine
 *      keeps on the device is copied device to host; what it keeps on the host (offloaded moments, mapped from their
 *      file) is read through the state's host view, as the synchronous save does. meta.json is built now (by the
 *      caller), so it describes step N;
 *   3. the collective saver is begun and the snapshot's ranges are added (rank 0 creates the temporary directory);
 *   4. a writer thread writes and fsyncs this rank's files (ckpt/store.h llm4d_ckpt_save_write_collective: file I/O
 *      only), and the step loop goes on.
 * After every later step each rank adds "my writer is done" to one allreduce over the world (eight bytes); once all
 * are, every rank joins its writer and commits: the status exchange, rank 0's meta.json, rename, `latest` and
 * pruning, the synchronous save's protocol on the main thread. Every rank thus takes the same collectives at the
 * same step, whatever its disk's speed. The next save, the end of the run and a stop on a non-finite loss (a
 * decision every rank takes alike) wait for the writer instead of polling.
 *
 * Failures: a write that fails is kept in the saver and fails the commit on every rank with the synchronous save's
 * one line (the path, the error, what `latest` still names). A rank killed while its writer runs leaves the
 * temporary directory unnamed (the next save removes it): `latest` names the previous complete checkpoint. A run
 * that stops on another error with a save pending joins its writer and, in a job of one process, publishes it; in a
 * job of several it cannot know that the other ranks are still there to agree, so it leaves it unpublished and says
 * so. */
#define _GNU_SOURCE /* RUSAGE_THREAD */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/gpt_ckpt.h"
#include "core/timer.h"
#include "parallel/stack.h"
#include "train/trainer.h"

typedef struct llm4d_async_save llm4d_async_save;

struct llm4d_async_save {
    float *buf;                 /* the snapshot */
    size_t bytes;
    int consolidated;           /* save_consolidated on an engine that gathers: whole buffers in the snapshot */
    llm4d_ckpt_saver *saver;    /* the pending save (NULL: none) */
    cJSON *meta;                /* its meta.json (rank 0) */
    int64_t step;
    int saver_wrote;            /* this rank writes files of it */
    pthread_t thread;
    int running;                /* the writer was started and is not joined yet */
    atomic_int done;            /* the writer has finished (its result is kept in the saver) */
    double t_start, t_written;  /* llm4d_now() when the writer started and finished */
    double cpu_s;               /* the writer's CPU time (user + system): what it took from training */
};

static int consolidates(const llm4d_trainer *tr) {
    return tr->engines.storage->ops->gather_state && tr->cfg->dist.save_consolidated;
}

llm4d_code llm4d_trainer_async_init(llm4d_trainer *tr, llm4d_err *err) {
    if (!tr->cfg->async_save) return LLM4D_OK;
    llm4d_engine *e = tr->engines.storage;
    llm4d_engine_state st;
    e->ops->state(e, &st);
    size_t kept = 0;
    for (int k = 0; k < st.n; k++) kept += st.hi[k] - st.lo[k];
    if (e->ops->state_done) LLM4D_TRY(e->ops->state_done(e, err)); /* state() maps offloaded moments */
    llm4d_async_save *a = calloc(1, sizeof *a);
    if (!a) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    tr->async = a;
    a->consolidated = consolidates(tr);
    a->bytes = llm4d_stack_snapshot_bytes(tr->cfg, &tr->topo, &tr->model.table);
    const size_t need = 3 * sizeof(float) * (a->consolidated ? tr->model.table.total : st.writes ? kept : 0);
    if (a->bytes != need) /* the plan's formula and the engine's state disagree: a bug, never a user's error */
        return llm4d_fail(err, LLM4D_EINTERNAL, "--async_save: the snapshot planned (%zu bytes) differs from the "
                          "state the engine saves (%zu bytes)", a->bytes, need);
    if (a->bytes && !(a->buf = tr->be->alloc_host(tr->be, &tr->mem, LLM4D_MEM_WORKSPACE, a->bytes)))
        return llm4d_fail(err, LLM4D_EUSER, "out of memory allocating the snapshot of --async_save (%.1f MiB); turn "
                          "async_save off or give the run more memory", a->bytes / 1048576.0);
    return LLM4D_OK;
}

/* The snapshot's placement of the saved ranges: back to back, parameters, then m, then v. */
typedef struct {
    const size_t *lo, *hi;
    int n, writes;
    float *params, *m, *v;
} snap_layout;

/* Copy the ranges the rank writes into the snapshot. Device buffers are copied to the host directly; buffers the
 * engine keeps on the host are read through the state's view (empty views stand for the device ones, so nothing is
 * staged twice). */
static llm4d_code copy_ranges(llm4d_trainer *tr, const llm4d_engine_state *st, snap_layout *L, llm4d_err *err) {
    llm4d_backend *be = tr->be;
    llm4d_engine_state hs = *st;
    const llm4d_state_buf none = {NULL, 0, 0};
    if (!hs.params.host) hs.params = none;
    if (!hs.m.host) hs.m = none;
    if (!hs.v.host) hs.v = none;
    llm4d_state_host h;
    LLM4D_TRY(llm4d_engine_state_open(&hs, be, &tr->mem, LLM4D_VIEW_READ, &h, err));
    size_t kept = 0;
    for (int k = 0; k < st->n; k++) kept += st->hi[k] - st->lo[k];
    *L = (snap_layout){.lo = st->lo, .hi = st->hi, .n = st->n, .writes = 1, .params = tr->async->buf,
                       .m = tr->async->buf + kept, .v = tr->async->buf + 2 * kept};
    const llm4d_state_buf *src[3] = {&st->params, &st->m, &st->v};
    const float *host[3] = {h.params, h.m, h.v};
    float *dst[3] = {L->params, L->m, L->v};
    size_t next = 0, out = 0;
    for (int k = 0; k < st->n; k++) {
        const size_t len = st->hi[k] - st->lo[k];
        const size_t at_state = st->state_off ? st->state_off[k] : next;
        next = at_state + len;
        const size_t at[3] = {st->params_off ? st->params_off[k] : at_state, at_state, at_state};
        for (int j = 0; j < 3 && len > 0; j++) {
            if (src[j]->host) memcpy(dst[j] + out, host[j] + at[j], len * sizeof(float));
            else be->copy_async(be, dst[j] + out, src[j]->p + at[j], len * sizeof(float), LLM4D_D2H,
                                LLM4D_STREAM_COMPUTE); /* after the update that wrote them */
        }
        out += len;
    }
    be->stream_sync(be, LLM4D_STREAM_COMPUTE);
    llm4d_engine_state_close(&h, be, &tr->mem);
    return LLM4D_OK;
}

/* save_consolidated: the group's shards gathered into whole buffers in the snapshot (collective over the engine's
 * group), through the state's host views, as the synchronous save gathers them. */
static llm4d_code gather_whole(llm4d_trainer *tr, const llm4d_engine_state *st, snap_layout *L, llm4d_err *err) {
    static const size_t zero = 0;
    llm4d_engine *e = tr->engines.storage;
    const size_t T = tr->model.table.total;
    float *buf = tr->async->buf;
    *L = (snap_layout){.lo = &zero, .hi = &tr->model.table.total, .n = 1, .m = buf, .v = buf + T,
                       .params = buf + 2 * T};
    llm4d_state_host h;
    LLM4D_TRY(llm4d_engine_state_open(st, tr->be, &tr->mem, LLM4D_VIEW_READ, &h, err));
    llm4d_code rc = e->ops->gather_state(e, &h, st->params_whole ? NULL : L->params, L->m, L->v, &L->writes, err);
    if (rc == LLM4D_OK && st->params_whole) memcpy(L->params, h.params, T * sizeof(float));
    llm4d_engine_state_close(&h, tr->be, &tr->mem);
    return rc;
}

static void *writer(void *arg) {
    llm4d_async_save *a = arg;
    llm4d_ckpt_save_write_collective(a->saver, NULL); /* a failure is kept in the saver, for the commit */
    a->t_written = llm4d_now();
    struct rusage ru;
    a->cpu_s = getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
                                                        1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec)
                                                  : 0;
    atomic_store_explicit(&a->done, 1, memory_order_release);
    return NULL;
}

llm4d_code llm4d_trainer_save_async(llm4d_trainer *tr, int64_t step, const cJSON *meta, llm4d_err *err) {
    const llm4d_config *c = tr->cfg;
    llm4d_async_save *a = tr->async;
    llm4d_engine *e = tr->engines.storage;
    LLM4D_ASSERT(a && !a->saver, "an asynchronous save started with another pending");
    const double t0 = llm4d_now();
    llm4d_engine_state st;
    e->ops->state(e, &st);
    snap_layout L = {.writes = 0};
    llm4d_code rc = LLM4D_OK;
    if (a->consolidated) rc = gather_whole(tr, &st, &L, err);
    else if (st.writes) rc = copy_ranges(tr, &st, &L, err);
    if (e->ops->state_done) {
        llm4d_err e2;
        llm4d_code r2 = e->ops->state_done(e, &e2);
        if (rc == LLM4D_OK && r2 != LLM4D_OK) rc = r2, *err = e2;
    }
    LLM4D_TRY(llm4d_trainer_agree(tr, rc, err));
    const double t1 = llm4d_now();
    llm4d_ckpt_saver *s;
    cJSON *mj;
    const llm4d_ckpt_state cs = {.t = &tr->model.table, .n = L.n, .lo = L.lo, .hi = L.hi, .params = L.params,
                                 .m = L.m, .v = L.v}; /* the snapshot: back to back */
    const llm4d_ckpt_dest d = llm4d_trainer_ckpt_dest(tr, step, L.writes);
    LLM4D_TRY(llm4d_gpt_ckpt_save_prepare(&s, &mj, tr->groups->world, &d, &c->model, &cs, meta, err));
    a->saver = s;
    a->meta = mj;
    a->step = step;
    a->saver_wrote = L.writes;
    a->t_start = llm4d_now();
    /* said before the writer starts: a process killed during the write has the line in its log */
    if (L.writes)
        llm4d_log_info(&tr->log, "checkpoint of step %lld: a snapshot of %.1f MiB taken in %.3f s, written to "
                       "%s/step_%lld in the background", (long long)step, a->bytes / 1048576.0, t1 - t0,
                       c->output_dir, (long long)step);
    else
        llm4d_log_info(&tr->log, "checkpoint of step %lld: this rank writes nothing (other ranks write what it "
                       "holds); %s/step_%lld is written in the background", (long long)step, c->output_dir,
                       (long long)step);
    atomic_store_explicit(&a->done, 0, memory_order_relaxed);
    if (L.writes && pthread_create(&a->thread, NULL, writer, a) == 0) {
        a->running = 1;
    } else { /* nothing to write here, or no thread to be had: write now (the save is then synchronous) */
        if (L.writes) llm4d_log_warn(&tr->log, "no thread could be started to write the checkpoint: written now");
        writer(a);
    }
    return LLM4D_OK;
}

static void join(llm4d_async_save *a) {
    if (!a->running) return;
    pthread_join(a->thread, NULL);
    a->running = 0;
}

/* Every rank's writer is done (or this rank waits for its own; the commit's status exchange waits for the others):
 * commit the pending save, the synchronous save's protocol. Collective over the world. */
static llm4d_code publish(llm4d_trainer *tr, int64_t step, llm4d_err *err) {
    llm4d_async_save *a = tr->async;
    const double t0 = llm4d_now();
    join(a);
    const double waited = llm4d_now() - t0;
    /* the commit waits on the slowest rank's disk: the watchdog's first-step allowance, as for a synchronous save */
    if (tr->groups->world->watch) llm4d_watch_set(tr->groups->world->watch, step, tr->cfg->dist.comm_timeout_first);
    llm4d_ckpt_saver *s = a->saver;
    cJSON *mj = a->meta;
    a->saver = NULL, a->meta = NULL;
    const llm4d_code rc = llm4d_ckpt_save_commit_collective(s, mj, tr->cfg->keep_last, err); /* consumes s */
    cJSON_Delete(mj);
    LLM4D_TRY(rc);
    tr->last_saved = a->step;
    char how[200] = "", wait_s[80] = "";
    if (waited >= 0.0005) snprintf(wait_s, sizeof wait_s, ", %.3f s of it waiting for this rank's writer", waited);
    if (a->saver_wrote)
        snprintf(how, sizeof how, " (written in the background in %.2f s, %.2f s of CPU; published at step %lld "
                 "in %.3f s%s)", a->t_written - a->t_start, a->cpu_s, (long long)step, llm4d_now() - t0, wait_s);
    llm4d_log_info(&tr->log, "saved checkpoint %s/step_%lld%s", tr->cfg->output_dir, (long long)a->step, how);
    return LLM4D_OK;
}

llm4d_code llm4d_trainer_save_poll(llm4d_trainer *tr, int64_t step, int wait, llm4d_err *err) {
    llm4d_async_save *a = tr->async;
    if (!a || !a->saver) return LLM4D_OK;
    if (!wait) { /* every rank takes the same decision */
        int64_t busy = !atomic_load_explicit(&a->done, memory_order_acquire);
        LLM4D_TRY(llm4d_comm_allreduce(tr->groups->world, &busy, 1, LLM4D_COMM_I64, err));
        if (busy) return LLM4D_OK;
    }
    return publish(tr, step, err);
}

void llm4d_trainer_save_settle(llm4d_trainer *tr) {
    llm4d_async_save *a = tr->async;
    if (!a || !a->saver) return;
    join(a);
    if (tr->world_size == 1) {
        llm4d_err e2 = {0};
        if (publish(tr, a->step, &e2) != LLM4D_OK)
            llm4d_log_warn(&tr->log, "the checkpoint of step %lld written in the background was not published: %s",
                           (long long)a->step, e2.msg);
        return;
    }
    llm4d_log_warn(&tr->log, "the checkpoint of step %lld written in the background was not published: the run "
                   "stopped on an error before the ranks agreed on it (%s/latest names the one before)",
                   (long long)a->step, tr->cfg->output_dir);
    llm4d_ckpt_save_abort(a->saver); /* collective: frees it, the files stay until the next save removes them */
    cJSON_Delete(a->meta);
    a->saver = NULL, a->meta = NULL;
}

void llm4d_trainer_async_free(llm4d_trainer *tr) {
    llm4d_async_save *a = tr->async;
    if (!a) return;
    join(a);
    if (a->saver) llm4d_ckpt_save_abort(a->saver);
    cJSON_Delete(a->meta);
    if (a->buf) tr->be->free_host(tr->be, &tr->mem, LLM4D_MEM_WORKSPACE, a->buf, a->bytes);
    free(a);
    tr->async = NULL;
}
