/* coverage.c — whether a measured machine profile can price a model (see coverage.h): the model's calls for one
 * process and micro-batch 1 recorded, each looked up among the profile's measured calls of its method (at any
 * thread count: price.c scales between thread counts by the profile's rates); a machine profile's grid covers a
 * call whose every size lies within the sizes it measured of that kind. */
#include "plan/coverage.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/topology.h"
#include "plan/layout.h"
#include "plan/memplan.h"
#include "plan/trace.h"

llm4d_code llm4d_plan_single(const llm4d_config *base, long long global, llm4d_config *out, llm4d_pp_plan *pp,
                             llm4d_err *err) {
    const llm4d_layout one = {.dp = 1, .sharding = 1, .mp = 1, .pp = 1, .vpp = 1, .schedule = LLM4D_PP_1F1B,
                              .split = LLM4D_SPLIT_EVEN, .mb = 1};
    return llm4d_layout_config(base, &one, global > 0 ? global : 1, out, pp, err);
}

/* The first of a call's d[] that is a flag, not a size (as price.c's distance reads them). */
static int first_flag(int op) {
    if (op == LLM4D_RC_LINEAR_FWD || op == LLM4D_RC_LINEAR_BWD) return 3; /* N, C, OC; activation, storage */
    if (op == LLM4D_RC_XENT_FWD || op == LLM4D_RC_XENT_BWD) return 2;
    return LLM4D_RC_DIMS;
}

/* How far measured call k is from c: the largest ratio between their sizes (INFINITY: not comparable). */
static double off_by(const llm4d_rc_call *c, const llm4d_prof_kernel *k) {
    if (k->op != c->op || k->ty != c->ty || k->drop != (c->drop > 0)) return INFINITY;
    const int f = first_flag(c->op);
    double worst = 1;
    for (int i = 0; i < LLM4D_RC_DIMS; i++) {
        if (i >= f) {
            if (c->d[i] != k->d[i]) return INFINITY;
            continue;
        }
        const double a = (double)(c->d[i] > 0 ? c->d[i] : 1), b = (double)(k->d[i] > 0 ? k->d[i] : 1);
        const double r = a > b ? a / b : b / a;
        if (r > worst) worst = r;
    }
    return worst;
}

static const char *op_name(int op) {
    static const char *const names[LLM4D_RC_NKERNELS] = {
        [LLM4D_RC_LINEAR_FWD] = "linear forward", [LLM4D_RC_LINEAR_BWD] = "linear backward",
        [LLM4D_RC_EMBED_FWD] = "embedding forward", [LLM4D_RC_EMBED_BWD] = "embedding backward",
        [LLM4D_RC_POS_FWD] = "position forward", [LLM4D_RC_POS_BWD] = "position backward",
        [LLM4D_RC_BIAS_FWD] = "bias forward", [LLM4D_RC_BIAS_BWD] = "bias backward",
        [LLM4D_RC_LN_FWD] = "layernorm forward", [LLM4D_RC_LN_BWD] = "layernorm backward",
        [LLM4D_RC_GELU_FWD] = "gelu forward", [LLM4D_RC_GELU_BWD] = "gelu backward",
        [LLM4D_RC_ATTN_FWD] = "attention forward", [LLM4D_RC_ATTN_BWD] = "attention backward",
        [LLM4D_RC_DROP_FWD] = "dropout forward", [LLM4D_RC_DROP_BWD] = "dropout backward",
        [LLM4D_RC_DROPADD_FWD] = "dropout-add forward", [LLM4D_RC_DROPADD_BWD] = "dropout-add backward",
        [LLM4D_RC_XENT_FWD] = "cross-entropy forward", [LLM4D_RC_XENT_BWD] = "cross-entropy backward",
        [LLM4D_RC_RMSNORM_FWD] = "rmsnorm forward", [LLM4D_RC_RMSNORM_BWD] = "rmsnorm backward",
        [LLM4D_RC_ROPE_FWD] = "rope forward", [LLM4D_RC_ROPE_BWD] = "rope backward",
        [LLM4D_RC_SWIGLU_FWD] = "swiglu forward", [LLM4D_RC_SWIGLU_BWD] = "swiglu backward"};
    return op >= 0 && op < LLM4D_RC_NKERNELS && names[op] ? names[op] : "kernel";
}

/* "[a, b, c]": a call's sizes (the flags left out). */
static void sizes(const int64_t *d, int op, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    int last = 0;
    for (int i = 0; i < first_flag(op); i++)
        if (d[i]) last = i;
    for (int i = 0; i <= last && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)d[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* The calibration that would measure this model: its name, layers where they are not its preset's, sequence,
 * batch, ranks and precision. */
static void calibrate_command(const llm4d_config *base, const llm4d_config *fin, const char *path, char *buf,
                              size_t n) {
    char layers[64] = "";
    llm4d_config *preset = calloc(1, sizeof *preset), *pfin = calloc(1, sizeof *pfin);
    llm4d_pp_plan pp = {0};
    llm4d_err err = {0};
    if (preset && pfin) {
        llm4d_config_defaults(preset);
        char *argv[] = {"--model_name_or_path", (char *)base->model.name_or_path};
        if (llm4d_config_parse_args(preset, 2, argv, &err) != LLM4D_OK ||
            llm4d_plan_single(preset, 1, pfin, &pp, &err) != LLM4D_OK || pfin->model.num_layers != fin->model.num_layers)
            snprintf(layers, sizeof layers, " -o Model.num_layers=%d", fin->model.num_layers);
        llm4d_pp_plan_free(&pp);
    }
    free(preset), free(pfin);
    char ranks[48] = "";
    if (base->plan.ranks_per_node > 0) snprintf(ranks, sizeof ranks, " --ranks_per_node %d", base->plan.ranks_per_node);
    snprintf(buf, n, "llm4d plan --calibrate --model_name_or_path %.200s%s --max_seq_len %d --global_batch_size %lld%s%s "
             "--machine_profile %.400s", base->model.name_or_path, layers, fin->data.max_seq_len,
             (long long)(base->global_batch_size > 0 ? base->global_batch_size : 1), ranks,
             base->use_amp ? " --use_amp true" : "", path);
}

int llm4d_grid_span(const llm4d_profile *p, const llm4d_rc_call *c, int prec, int64_t lo[LLM4D_RC_DIMS],
                    int64_t hi[LLM4D_RC_DIMS]) {
    int any = 0;
    const int f = first_flag(c->op);
    for (int i = 0; i < LLM4D_RC_DIMS; i++) lo[i] = hi[i] = 0;
    for (int k = 0; k < p->n_kernels; k++) {
        const llm4d_prof_kernel *m = &p->kernels[k];
        if (m->prec != prec || !isfinite(off_by(c, m))) continue;
        for (int i = 0; i < f; i++) {
            lo[i] = any && lo[i] < m->d[i] ? lo[i] : m->d[i];
            hi[i] = any && hi[i] > m->d[i] ? hi[i] : m->d[i];
        }
        any = 1;
    }
    return any ? f : 0;
}

const char *llm4d_rc_op_name(int op) { return op_name(op); }

/* A machine profile (a grid: plan/grid.h) covers call c when the calls it measured of c's method, element types,
 * dropout and flags span c's every size: each size between the smallest and the largest measured (price.c
 * interpolates inside, and only extrapolates beyond). 1 when it does; otherwise the first size outside, and the
 * measured range of it (lo > hi: nothing of c's kind measured). */
static int in_grid(const llm4d_profile *p, const llm4d_rc_call *c, int prec, int *dim, int64_t *lo, int64_t *hi) {
    int64_t mn[LLM4D_RC_DIMS], mx[LLM4D_RC_DIMS];
    const int f = llm4d_grid_span(p, c, prec, mn, mx);
    *dim = 0, *lo = 1, *hi = 0;
    if (!f) return 0;
    for (int i = 0; i < f; i++)
        if (c->d[i] < mn[i] || c->d[i] > mx[i]) return *dim = i, *lo = mn[i], *hi = mx[i], 0;
    return 1;
}

/* The refusal of a machine profile: the first of the model's calls outside its grid, named with the grid's range. */
static llm4d_code grid_coverage(const llm4d_profile *p, const char *path, const llm4d_config *cfg, const llm4d_rec *r,
                                int prec, llm4d_err *err) {
    int n_out = 0, n_calls = 0, dim = 0, out_rank = 0;
    int64_t lo = 0, hi = 0;
    const llm4d_rc_call *out = NULL;
    for (int i = 0; i < r->n; i++) {
        const llm4d_rc_call *c = &r->calls[i];
        if (c->op >= LLM4D_RC_NKERNELS) continue;
        n_calls++;
        int d;
        int64_t a, b;
        if (in_grid(p, c, prec, &d, &a, &b)) continue;
        /* named as the other refusal names it: a GEMM or attention first, then the model's other layers */
        const int rank = (strcmp(op_name(c->op), "kernel") != 0) + 2 * (c->op == LLM4D_RC_LINEAR_FWD ||
                                                                          c->op == LLM4D_RC_ATTN_FWD);
        if (!out || rank > out_rank) out = c, dim = d, lo = a, hi = b, out_rank = rank;
        n_out++;
    }
    if (!out) return LLM4D_OK;
    char a[96], range[160];
    const char *pname = prec == LLM4D_PREC_FP32 ? "fp32" : "bf16";
    sizes(out->d, out->op, a, sizeof a);
    if (lo > hi) snprintf(range, sizeof range, "the grid measured no %s %s of its kind", pname, op_name(out->op));
    else snprintf(range, sizeof range, "its size %d (%lld) is outside the grid's %lld..%lld", dim + 1,
                  (long long)out->d[dim], (long long)lo, (long long)hi);
    return llm4d_fail(err, LLM4D_EUSER, "machine profile %s (a machine calibration over %s) cannot price %.100s (hidden "
                      "%d, %d heads) at sequence %d in %s: %d of the model's %d calls are outside its grid, among them its %s "
                      "%s (%s); calibrate a grid that holds it with `llm4d plan --calibrate --machine --calibrate_grid "
                      "HIDDENS:SEQUENCES%s --machine_profile %s`", path, p->grid, cfg->model.name_or_path,
                      cfg->model.hidden_size, cfg->model.num_attention_heads, cfg->data.max_seq_len, pname, n_out,
                      n_calls, op_name(out->op), a, range, prec == LLM4D_PREC_FP32 ? "" : " --use_amp true", path);
}

llm4d_code llm4d_profile_coverage(const llm4d_profile *p, const char *path, const llm4d_config *base,
                                  llm4d_err *err) {
    if (!p->calibrated && p->n_kernels == 0) return LLM4D_OK; /* rates only: priced by them, as it says */
    llm4d_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg) return LLM4D_OK;
    llm4d_pp_plan pp = {0};
    llm4d_topology topo;
    llm4d_mbtrace t;
    llm4d_err why = {0};
    if (llm4d_plan_single(base, base->global_batch_size, cfg, &pp, &why) != LLM4D_OK ||
        llm4d_layout_stage_topo(cfg, 0, &topo, &why) != LLM4D_OK ||
        llm4d_mbtrace_make(&t, cfg, &topo, &pp, NULL, &why) != LLM4D_OK) {
        llm4d_pp_plan_free(&pp);
        free(cfg);
        return LLM4D_OK; /* the search says why the model cannot be laid out */
    }
    llm4d_pp_plan_free(&pp);
    const int prec = llm4d_memplan_precision(cfg);
    if (p->machine) {
        const llm4d_code rc = grid_coverage(p, path, cfg, &t.rec, prec, err);
        llm4d_mbtrace_free(&t);
        free(cfg);
        return rc;
    }
    /* the call the profile is farthest from, and its nearest measured call */
    double worst = 1;
    int n_far = 0, n_calls = 0, far_rank = 0;
    const llm4d_rc_call *far = NULL;
    const llm4d_prof_kernel *near = NULL;
    for (int i = 0; i < t.rec.n; i++) {
        const llm4d_rc_call *c = &t.rec.calls[i];
        if (c->op >= LLM4D_RC_NKERNELS) continue;
        n_calls++;
        double best = INFINITY;
        const llm4d_prof_kernel *bk = NULL;
        for (int k = 0; k < p->n_kernels && best > 1; k++) {
            if (p->kernels[k].prec != prec) continue;
            const double r = off_by(c, &p->kernels[k]);
            if (r < best) best = r, bk = &p->kernels[k];
        }
        if (!(best > LLM4D_COVER_FACTOR)) continue;
        n_far++;
        /* named: a GEMM, attention or another of the model's own layers before the element-wise passes */
        const int rank = (strcmp(op_name(c->op), "kernel") != 0) + 2 * (c->op == LLM4D_RC_LINEAR_FWD ||
                                                                          c->op == LLM4D_RC_ATTN_FWD);
        if (!far || rank > far_rank || (rank == far_rank && best > worst))
            worst = best, far = c, near = bk, far_rank = rank;
    }
    llm4d_code rc = LLM4D_OK;
    if (far) {
        char forwhat[1200] = "", cmd[900], a[96], b[96], off[400];
        size_t k = 0;
        for (int i = 0; i < p->n_for && k < sizeof forwhat; i++)
            k += (size_t)snprintf(forwhat + k, sizeof forwhat - k, "%s%s", i ? "; " : "", p->measured_for[i]);
        if (!p->n_for) snprintf(forwhat, sizeof forwhat, "a model it does not record (calibrated before llm4d recorded it)");
        const char *pname = prec == LLM4D_PREC_FP32 ? "fp32" : "bf16";
        sizes(far->d, far->op, a, sizeof a);
        if (near) {
            sizes(near->d, near->op, b, sizeof b);
            snprintf(off, sizeof off, "its nearest measured %s is %s against the model's %s, %.0fx off (it prices within "
                     "%.0fx)", op_name(far->op), b, a, worst, LLM4D_COVER_FACTOR);
        } else {
            snprintf(off, sizeof off, "it measured no %s %s like the model's %s", pname, op_name(far->op), a);
        }
        calibrate_command(base, cfg, path, cmd, sizeof cmd);
        rc = llm4d_fail(err, LLM4D_EUSER, "machine profile %s cannot price %.100s (hidden %d, %d layers) at sequence %d "
                        "in %s: it was measured for %s, and %d of the model's %d calls are beyond it (%s); measure this "
                        "model with `%s`%s", path,
                        cfg->model.name_or_path, cfg->model.hidden_size, cfg->model.num_layers, cfg->data.max_seq_len,
                        pname, forwhat, n_far, n_calls, off, cmd, " (it adds to what the profile holds)");
    }
    llm4d_mbtrace_free(&t);
    free(cfg);
    return rc;
}
