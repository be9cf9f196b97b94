/* calib_kernels.c — a calibration's kernels (calib_kernels.h): the model's calls recorded over its search space,
 * or a machine grid's one-layer GPTs, replayed on the real backend at every thread count and written into the
 * profile as they are measured. */
#include "plan/calib_kernels.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/heap.h"
#include "plan/layout.h"
#include "plan/memplan.h"
#include "plan/replay.h"
#include "plan/search.h"
#include "plan/trace.h"

const char *llm4d_calib_mmss(double s, char *buf, size_t n) {
    const long v = s > 0 ? (long)(s + 0.5) : 0;
    if (v >= 60) snprintf(buf, n, "%ldm%02lds", v / 60, v % 60);
    else snprintf(buf, n, "%lds", v);
    return buf;
}

llm4d_code llm4d_calib_checkpoint(llm4d_profile *prof, const llm4d_calib_progress *pg, llm4d_err *err) {
    llm4d_profile_sort(prof);
    return llm4d_profile_save(prof, pg->path, err);
}

#define REPLAY_BUDGET ((size_t)3 << 30) /* bytes a replay may allocate (larger traces are priced by neighbours) */

/* ---- the traces of the search space ---- */

typedef struct {
    llm4d_layout layout;
    int stage;
    size_t bytes;
    uint64_t sig; /* the calls' keys in order: traces with the same one replay the same kernels */
} trace_job;

typedef struct {
    const llm4d_config *base;
    long long global;
    trace_job *t;
    int n, cap;
    llm4d_config *cfg;
} collect;

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 1099511628211ull; }

static uint64_t signature(const llm4d_rec *r) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < r->n; i++) {
        const llm4d_rc_call *c = &r->calls[i];
        if (c->op >= LLM4D_RC_NKERNELS) continue;
        h = mix(h, c->op), h = mix(h, c->drop > 0), h = mix(h, c->ty);
        for (int k = 0; k < LLM4D_RC_DIMS; k++) h = mix(h, (uint64_t)c->d[k]);
    }
    return h;
}

static llm4d_code collect_fn(void *u, const llm4d_layout *l, llm4d_err *err) {
    collect *x = u;
    llm4d_pp_plan pp;
    llm4d_err why;
    if (llm4d_layout_config(x->base, l, x->global, x->cfg, &pp, &why) != LLM4D_OK) return LLM4D_OK;
    llm4d_code rc = LLM4D_OK;
    for (int s = 0; rc == LLM4D_OK && s < l->pp; s++) {
        llm4d_topology topo;
        llm4d_mbtrace t;
        if (llm4d_layout_stage_topo(x->cfg, s, &topo, &why) != LLM4D_OK ||
            llm4d_mbtrace_make(&t, x->cfg, &topo, &pp, NULL, &why))
            continue; /* a part the model refuses is the search's business */
        const uint64_t sig = signature(&t.rec);
        const size_t bytes = llm4d_replay_bytes(&t.rec);
        llm4d_mbtrace_free(&t);
        int seen = 0;
        for (int i = 0; i < x->n && !seen; i++) seen = x->t[i].sig == sig;
        if (seen) continue;
        if (x->n == x->cap) {
            const int cap = x->cap ? 2 * x->cap : 64;
            trace_job *nt = realloc(x->t, (size_t)cap * sizeof *nt);
            if (!nt) {
                rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
                break;
            }
            x->t = nt, x->cap = cap;
        }
        x->t[x->n++] = (trace_job){*l, s, bytes, sig};
    }
    llm4d_pp_plan_free(&pp);
    return rc;
}

static int by_bytes(const void *a, const void *b) {
    const trace_job *x = a, *y = b;
    return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

/* Replay one trace reps times; every kernel call whose key is not yet measured at (threads, prec) gets the mean
 * of its occurrences' times: a step is the sum of its calls, and a sum's expectation is the sum of the means (the
 * median, taken before, left out the slow occurrences every step meets: 1-process layouts of gpt2-tiny were
 * predicted 9-13 % fast on a Sapphire Rapids VM). */
/* How long a trace is replayed: reps times, or (span_s > 0) as many of them as fit in about span_s. */
typedef struct {
    int reps;
    double span_s;
} replay_span;

static llm4d_code measure_trace(llm4d_profile *prof, const llm4d_mbtrace *t, llm4d_backend *be, int threads, int prec,
                                replay_span how, int *added, llm4d_err *err) {
    int reps = how.reps;
    const double span_s = how.span_s;
    const llm4d_rec *r = &t->rec;
    int fresh = 0;
    for (int i = 0; i < r->n && !fresh; i++)
        fresh = r->calls[i].op < LLM4D_RC_NKERNELS && !llm4d_profile_find(prof, &r->calls[i], threads, prec);
    if (!fresh) return LLM4D_OK;
    llm4d_replay rp;
    LLM4D_TRY(llm4d_replay_init(&rp, r, be, err));
    double (*s)[LLM4D_WORK_N] = calloc((size_t)r->n * reps + 1, sizeof *s);
    if (!s) {
        llm4d_replay_free(&rp);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    }
    const double w0 = omp_get_wtime();
    llm4d_replay_run(&rp, 0, r->n, NULL); /* warm up: first-touch pages, the library's kernels generated */
    /* span_s > 0: as many repetitions (at most reps) as fit in about span_s, at the warm-up's pace (a grid point of
     * hidden 1024 at sequence 1024 replays for seconds, one of hidden 64 in milliseconds) */
    const double warm = omp_get_wtime() - w0;
    if (span_s > 0 && warm > 0 && span_s / warm < reps) reps = span_s / warm >= 1 ? (int)(span_s / warm) : 1;
    for (int k = 0; k < reps; k++) llm4d_replay_run(&rp, 0, r->n, s + (size_t)k * r->n);
    llm4d_replay_free(&rp);
    llm4d_code rc = LLM4D_OK;
    for (int i = 0; i < r->n && rc == LLM4D_OK; i++) {
        const llm4d_rc_call *c = &r->calls[i];
        if (c->op >= LLM4D_RC_NKERNELS || s[i][0] < 0 || llm4d_profile_find(prof, c, threads, prec)) continue;
        /* every occurrence of the key in the trace, every repetition: the median total, its split by kind */
        int n = 0;
        double split[LLM4D_WORK_N] = {0};
        for (int j = i; j < r->n; j++) {
            const llm4d_rc_call *o = &r->calls[j];
            if (o->op != c->op || (o->drop > 0) != (c->drop > 0) || o->ty != c->ty || memcmp(o->d, c->d, sizeof c->d))
                continue;
            for (int k = 0; k < reps; k++) {
                const double *x = s[(size_t)k * r->n + j];
                if (x[0] < 0) continue;
                for (int q = 0; q < LLM4D_WORK_N; q++) split[q] += x[q];
                n++;
            }
        }
        if (!n) continue;
        llm4d_prof_kernel k = {.op = c->op, .drop = c->drop > 0, .prec = (uint8_t)prec, .ty = c->ty,
                               .threads = threads};
        memcpy(k.d, c->d, sizeof k.d);
        for (int q = 0; q < LLM4D_WORK_N; q++) k.s[q] = split[q] / n;
        rc = llm4d_profile_add_kernel(prof, &k, err);
        (*added)++;
    }
    free(s);
    return rc;
}

/* Where kernels are measured: into prof, on be, at threads and precision prec. */
typedef struct {
    llm4d_profile *prof;
    llm4d_backend *be;
    int threads, prec;
} measure_at;

/* One part of a calibration: stage `stage` of the layout cfg and pp describe (pp is freed here), its micro-batch
 * recorded and replayed into at->prof. */
static llm4d_code measure_part(const measure_at *at, llm4d_config *cfg, llm4d_pp_plan *pp, int stage,
                               replay_span how, int *added, llm4d_err *err) {
    llm4d_topology topo;
    llm4d_mbtrace t;
    llm4d_code rc = llm4d_layout_stage_topo(cfg, stage, &topo, err);
    if (rc == LLM4D_OK) rc = llm4d_mbtrace_make(&t, cfg, &topo, pp, at->be, err);
    llm4d_pp_plan_free(pp);
    if (rc != LLM4D_OK) return rc;
    rc = measure_trace(at->prof, &t, at->be, at->threads, at->prec, how, added, err);
    llm4d_mbtrace_free(&t);
    return rc;
}

/* The optimizer's passes (AdamW, the norm's square sum) at a few sizes: the planner prices other sizes by the
 * nearest one's bandwidth. A quick calibration measures the first two: a small pass (its fixed cost) and one whose
 * four streams (128 MiB) are beyond a last-level cache, as a model's update is (gpt2-en's AdamW priced from 1 Mi
 * elements, which stay in a 32 MiB cache, came out 16 % fast on the Zen 4 VM; from 8 Mi, 6 % fast). */
static llm4d_code measure_optimizer(llm4d_profile *prof, llm4d_backend *be, int threads, int prec, int quick,
                                    llm4d_err *err) {
    const int64_t sizes[] = {1 << 16, 1 << 23, 1 << 20, 1 << 25};
    const int n = quick ? 2 : 4;
    prof->grads_reset = be->grads_reset != NULL; /* how the update this backend runs treats the gradients */
    for (int i = 0; i < n; i++) {
        llm4d_rec r = {0};
        uintptr_t b[4];
        for (int k = 0; k < 4; k++) b[k] = llm4d_rec_fake(&r, (size_t)sizes[i] * sizeof(float));
        for (int z = 0; z <= 1; z++) { /* both: a sharded update never zeroes (nor one that resets: below) */
            r.calls = realloc(r.calls, (size_t)(r.n + 2) * sizeof *r.calls);
            if (!r.calls) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
            r.cap = r.n + 2;
            r.calls[r.n++] = (llm4d_rc_call){.op = LLM4D_RC_ADAMW, .d = {sizes[i], z}, .p = {b[0], b[1], b[2], b[3]}};
        }
        r.calls[r.n++] = (llm4d_rc_call){.op = LLM4D_RC_SUMSQ, .d = {sizes[i]}, .p = {b[1]}};
        llm4d_mbtrace t = {.rec = r};
        int added = 0;
        const llm4d_code rc = measure_trace(prof, &t, be, threads, prec, (replay_span){quick ? 2 : 5, 0}, &added, err);
        llm4d_rec_free(&r);
        LLM4D_TRY(rc);
    }
    return LLM4D_OK;
}

/* Copy bandwidth of t threads (GB/s, read + write counted), the fallback rate of memory-bound work. */
static double copy_gbps(llm4d_backend *be) {
    llm4d_mem mem = {0};
    const size_t bytes = (size_t)64 << 20;
    void *a = be->alloc(be, &mem, LLM4D_MEM_WORKSPACE, bytes), *b = be->alloc(be, &mem, LLM4D_MEM_WORKSPACE, bytes);
    double best = 0;
    for (int k = 0; a && b && k < 5; k++) {
        const double t0 = omp_get_wtime();
        be->copy(be, b, a, bytes);
        be->stream_sync(be, LLM4D_STREAM_COMPUTE);
        const double gbps = 2.0 * bytes / (omp_get_wtime() - t0) / 1e9;
        if (k && gbps > best) best = gbps;
    }
    if (a) be->free(be, &mem, LLM4D_MEM_WORKSPACE, a, bytes);
    if (b) be->free(be, &mem, LLM4D_MEM_WORKSPACE, b, bytes);
    return best;
}

llm4d_code llm4d_calib_measure_kernels(const llm4d_calibrate_opts *o, llm4d_profile *prof, llm4d_calib_progress *pg,
                                       llm4d_err *err) {
    const int prec = llm4d_memplan_precision(o->base);
    collect x = {.base = o->base, .global = o->global};
    x.cfg = malloc(sizeof *x.cfg);
    if (!x.cfg) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    llm4d_code rc = LLM4D_OK;
    for (int R = 1; rc == LLM4D_OK && R <= o->max_ranks; R *= 2) rc = llm4d_layouts_each(o->base, o->global, R, collect_fn, &x, err);
    if (rc == LLM4D_OK) qsort(x.t, (size_t)x.n, sizeof *x.t, by_bytes);
    /* the replays' memory: the largest part replayed, its buffers freed (and the heap trimmed) before the next */
    size_t cap = REPLAY_BUDGET;
    if (prof->memory_bytes > 0 && (size_t)(prof->memory_bytes / 4) < cap) cap = (size_t)(prof->memory_bytes / 4);
    double total_mib = 0;
    for (int i = 0; i < x.n; i++) total_mib += x.t[i].bytes <= cap ? x.t[i].bytes / 1048576.0 : 0;
    const int nT = prof->cores < LLM4D_PROF_MAXT ? prof->cores : LLM4D_PROF_MAXT;
    fprintf(stderr, "llm4d plan --calibrate: %d distinct model parts in the layouts of up to %d ranks, each replayed "
            "at 1 to %d threads; a progress line every %.0f s%s\n", x.n, o->max_ranks, nT, LLM4D_CALIB_PROGRESS_S,
            pg->deadline > 0 ? "" : " (no time budget)");
    int too_large = 0;
    for (int T = 1; rc == LLM4D_OK && T <= nT; T++) {
        llm4d_backend *be = NULL;
        rc = llm4d_backend_cpu_create(&be, T, err);
        if (rc == LLM4D_OK && prec != LLM4D_PREC_FP32) rc = be->set_precision(be, prec, err);
        if (rc != LLM4D_OK) break;
        prof->gemm_gflops[prec][T] = be->matmul_peak_gflops ? be->matmul_peak_gflops(be) : 0;
        prof->mem_gbps[T] = copy_gbps(be);
        const double t0 = omp_get_wtime();
        /* the time left shared equally by the thread counts still to measure (what one leaves, the next gets) */
        const double until = pg->deadline > 0 ? t0 + (pg->deadline - t0) / (nT - T + 1) : 0;
        int added = 0, skipped = 0, late = 0;
        double done_mib = 0;
        for (int i = 0; rc == LLM4D_OK && i < x.n; i++) {
            if (x.t[i].bytes > cap) {
                skipped++;
                continue;
            }
            if (until > 0 && omp_get_wtime() > until) { /* out of time: priced by the nearest measured */
                late++;
                continue;
            }
            llm4d_pp_plan pp;
            const int before = added;
            if (llm4d_layout_config(o->base, &x.t[i].layout, o->global, x.cfg, &pp, err) != LLM4D_OK) continue;
            rc = measure_part(&(measure_at){prof, be, T, prec}, x.cfg, &pp, x.t[i].stage,
                              (replay_span){o->quick ? 2 : 5, 0}, &added, err);
            if (rc == LLM4D_ENOMEM) rc = LLM4D_OK, skipped++; /* priced by its neighbours */
            done_mib += x.t[i].bytes / 1048576.0;
            const double resident = (double)llm4d_heap_resident(); /* the replay's freed pages given back */
            if (rc == LLM4D_OK && added > before) rc = llm4d_calib_checkpoint(prof, pg, err);
            const double now = omp_get_wtime();
            if (now - pg->last_line >= LLM4D_CALIB_PROGRESS_S || i + 1 == x.n) {
                /* what is left, at the rate the parts so far went (a part's replay grows with its bytes) */
                double left = done_mib > 0 ? (now - t0) * (total_mib - done_mib) / done_mib : 0;
                if (until > 0 && now + left > until) left = until - now;
                char a[32], b[32], c[32];
                fprintf(stderr, "llm4d plan --calibrate: kernels at %d thread%s: part %d of %d (%.1f MiB), %d new "
                        "shapes; %s elapsed, about %s left at this thread count%s%s%s; resident %.0f MiB\n", T,
                        T == 1 ? "" : "s", i + 1, x.n, x.t[i].bytes / 1048576.0, added,
                        llm4d_calib_mmss(now - pg->t0, a, sizeof a),
                        llm4d_calib_mmss(left, b, sizeof b), nT > T ? " (the other thread counts after it)" : "",
                        pg->deadline > 0 ? ", budget left " : "",
                        pg->deadline > 0 ? llm4d_calib_mmss(pg->deadline - now, c, sizeof c) : "",
                        resident / 1048576.0);
                pg->last_line = now;
            }
        }
        if (rc == LLM4D_OK) rc = measure_optimizer(prof, be, T, prec, o->quick, err);
        if (rc == LLM4D_OK) rc = llm4d_calib_checkpoint(prof, pg, err);
        fprintf(stderr, "llm4d plan --calibrate: %d thread%s: %d kernel shapes in %.1f s (%d parts too large to "
                "replay%s%d left for the time budget), GEMM peak %.1f GFLOP/s, copy %.1f GB/s\n", T, T == 1 ? "" : "s",
                added, omp_get_wtime() - t0, skipped, ", ", late, prof->gemm_gflops[prec][T], prof->mem_gbps[T]);
        if (late > pg->late) pg->late = late;
        if (skipped > too_large) too_large = skipped;
        be->destroy(be);
    }
    prof->parts_skipped = pg->late + too_large;
    llm4d_profile_sort(prof);
    free(x.t);
    free(x.cfg);
    return rc;
}

/* The kernels over the grid (grid.h) instead of the model's: every point at every thread count, in fp32 and bf16
 * (quick: the asked precision), smallest first, the profile saved after every point that measured something, a
 * progress line every few seconds, the time budget shared by the thread counts as measure_kernels shares it.
 * Then, in the time the budget leaves, a second pass over the grid into a profile of its own, merged by
 * llm4d_profile_merge_pass (the mean of the two, or the faster where they differ by more than 1.5x): a transient
 * slowdown of the machine spoils one pass, rarely both (in one of three calibrations of a 2-vCPU Zen 4 VM, the
 * points measured first, right after the ranks' jobs, read 4-26x slow, and the planner priced gpt2-tiny's
 * tensor-parallel layouts 3x slow: time MAPE 76 % instead of 6 %). */
typedef struct {
    const llm4d_calibrate_opts *o;
    const llm4d_grid *g;
    llm4d_calib_progress *pg;
    llm4d_config *cfg;
    int pass; /* 0: the first, 1: the second */
} grid_pass;

/* One thread count T of a pass into prof, measuring until `until` (0: no bound): *added new shapes, *late points
 * left for the time budget. */
static llm4d_code grid_threads(const grid_pass *gp, llm4d_profile *prof, int T, double until, int *added, int *late,
                               llm4d_err *err) {
    const llm4d_calibrate_opts *o = gp->o;
    const llm4d_grid *g = gp->g;
    llm4d_calib_progress *pg = gp->pg;
    const int asked = llm4d_memplan_precision(o->base), n_pts = g->n_hidden * g->n_seq;
    int precs[2] = {LLM4D_PREC_FP32, LLM4D_PREC_BF16}, n_prec = 2;
    if (o->quick) precs[0] = asked, n_prec = 1;
    const double span = o->quick ? 0.2 : 2.0; /* seconds of repetitions per point, after its warm-up */
    llm4d_code rc = LLM4D_OK;
    for (int q = 0; rc == LLM4D_OK && q < n_prec; q++) {
        const int prec = precs[q];
        llm4d_backend *be = NULL;
        rc = llm4d_backend_cpu_create(&be, T, err);
        if (rc == LLM4D_OK && prec != LLM4D_PREC_FP32) rc = be->set_precision(be, prec, err);
        if (rc != LLM4D_OK) {
            if (be) be->destroy(be);
            break;
        }
        if (!gp->pass) { /* the rates are the first pass's (the second's profile keeps only kernels) */
            prof->gemm_gflops[prec][T] = be->matmul_peak_gflops ? be->matmul_peak_gflops(be) : 0;
            if (!(prof->mem_gbps[T] > 0)) prof->mem_gbps[T] = copy_gbps(be);
        }
        /* smallest first: hidden inner, so a budget cut leaves the largest points */
        for (int si = 0; rc == LLM4D_OK && si < g->n_seq; si++)
            for (int hi = 0; rc == LLM4D_OK && hi < g->n_hidden; hi++) {
                const int C = g->hidden[hi], S = g->seq[si], point = q * n_pts + si * g->n_hidden + hi + 1;
                if (until > 0 && omp_get_wtime() > until) {
                    (*late)++;
                    continue;
                }
                llm4d_pp_plan pp;
                const int before = *added;
                rc = llm4d_grid_config(C, S, prec != LLM4D_PREC_FP32, gp->cfg, &pp, err);
                if (rc != LLM4D_OK) break;
                rc = measure_part(&(measure_at){prof, be, T, prec}, gp->cfg, &pp, 0,
                                  (replay_span){o->quick ? 2 : 5, span}, added, err);
                if (rc == LLM4D_OK && *added > before && !gp->pass) rc = llm4d_calib_checkpoint(prof, pg, err);
                const double now = omp_get_wtime();
                if (now - pg->last_line >= LLM4D_CALIB_PROGRESS_S || point == n_prec * n_pts) {
                    char a[32], b[32];
                    fprintf(stderr, "llm4d plan --calibrate --machine: %s%d thread%s, %s: point %d of %d (hidden %d, "
                            "sequence %d), %d %s shapes; %s elapsed%s%s; resident %.0f MiB\n",
                            gp->pass ? "second pass, " : "", T, T == 1 ? "" : "s",
                            prec == LLM4D_PREC_FP32 ? "fp32" : "bf16", point, n_prec * n_pts, C, S, *added,
                            gp->pass ? "measured" : "new", llm4d_calib_mmss(now - pg->t0, a, sizeof a),
                            pg->deadline > 0 ? ", budget left " : "",
                            pg->deadline > 0 ? llm4d_calib_mmss(pg->deadline - now, b, sizeof b) : "",
                            (double)llm4d_heap_resident() / 1048576.0);
                    pg->last_line = now;
                }
            }
        if (rc == LLM4D_OK) rc = measure_optimizer(prof, be, T, prec, o->quick, err);
        be->destroy(be);
    }
    return rc;
}

llm4d_code llm4d_calib_measure_grid(const llm4d_calibrate_opts *o, const llm4d_grid *g, llm4d_profile *prof,
                                    llm4d_calib_progress *pg, llm4d_err *err) {
    const int asked = llm4d_memplan_precision(o->base);
    const int nT = prof->cores < LLM4D_PROF_MAXT ? prof->cores : LLM4D_PROF_MAXT, n_pts = g->n_hidden * g->n_seq;
    char desc[128];
    llm4d_grid_describe(g, desc, sizeof desc);
    fprintf(stderr, "llm4d plan --calibrate --machine: %d grid points (%s), each a one-layer GPT replayed in %s at 1 to "
            "%d threads, then again where the time budget allows; a progress line every %.0f s%s\n", n_pts, desc,
            !o->quick ? "fp32 and bf16" : asked == LLM4D_PREC_FP32 ? "fp32" : "bf16", nT, LLM4D_CALIB_PROGRESS_S,
            pg->deadline > 0 ? "" : " (no time budget)");
    grid_pass gp = {.o = o, .g = g, .pg = pg, .cfg = malloc(sizeof *gp.cfg)};
    if (!gp.cfg) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    llm4d_code rc = LLM4D_OK;
    int late_max = 0;
    for (int T = 1; rc == LLM4D_OK && T <= nT; T++) {
        const double t0 = omp_get_wtime();
        const double until = pg->deadline > 0 ? t0 + (pg->deadline - t0) / (nT - T + 1) : 0;
        int added = 0, late = 0;
        rc = grid_threads(&gp, prof, T, until, &added, &late, err);
        if (rc == LLM4D_OK) rc = llm4d_calib_checkpoint(prof, pg, err);
        fprintf(stderr, "llm4d plan --calibrate --machine: %d thread%s: %d kernel shapes in %.1f s (%d points left for "
                "the time budget), GEMM peak %.1f GFLOP/s, copy %.1f GB/s\n", T, T == 1 ? "" : "s", added,
                omp_get_wtime() - t0, late, prof->gemm_gflops[asked][T], prof->mem_gbps[T]);
        if (late > late_max) late_max = late;
    }
    gp.pass = 1;
    for (int T = 1; rc == LLM4D_OK && T <= nT && !late_max; T++) {
        const double t0 = omp_get_wtime();
        llm4d_profile again;
        llm4d_profile_init(&again);
        int measured = 0, late = 0, outliers = 0;
        rc = grid_threads(&gp, &again, T, pg->deadline, &measured, &late, err);
        if (rc == LLM4D_OK) rc = llm4d_profile_merge_pass(prof, &again, &outliers, err);
        llm4d_profile_free(&again);
        if (rc == LLM4D_OK) rc = llm4d_calib_checkpoint(prof, pg, err);
        fprintf(stderr, "llm4d plan --calibrate --machine: second pass, %d thread%s: %d kernel shapes measured again "
                "in %.1f s: the two passes' mean kept, or the faster where they differ more than %.1fx (%d)%s\n", T,
                T == 1 ? "" : "s", measured, omp_get_wtime() - t0, LLM4D_PROFILE_OUTLIER, outliers,
                late ? "; cut short by the time budget" : "");
    }
    pg->late = late_max;
    prof->parts_skipped = late_max;
    llm4d_profile_sort(prof);
    free(gp.cfg);
    return rc;
}

