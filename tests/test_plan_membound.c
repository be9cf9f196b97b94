/* test_plan_membound.c — the search's early memory rejection (plan/predict.c llm4d_predict_memory with
 * predictor.reject_above) rejects only layouts that really overflow, and the figure it answers for them is a lower
 * bound of their full prediction (issue 46, item 5).
 *
 * A search rejects a layout whose fullest host is over the hosts' memory after planning only some of its distinct
 * ranks: when the mean host of the ranks planned so far, or R times the lightest class of a stage whose ranks fill
 * whole hosts, is already over. The oracle is the full prediction of the same layout (reject_above 0: every class
 * planned, the collectives' temporaries added, every rank walked by its host), for EVERY valid layout of several
 * searches, each against several thresholds around its own fullest host H (0.2, 0.5, 0.9, 0.999 and 1.001 H):
 *   - a layout rejected at threshold X needs more than X in full (a rejection never drops a fitting layout), and
 *     its answered host and peak bytes are at most the full ones;
 *   - a layout not rejected is predicted exactly as in full (host and peak bytes equal, bit for bit);
 *   - the early rejection is not vacuous: some rejections answer a host below H (the early bounds; the complete
 *     pre-temporaries walk of before answers H less the temporaries, which are 0 on most of these layouts).
 * The same for the bound on one rank's own memory (a GPU's: predictor.reject_rank_above, a class of ranks over it
 * before its collectives' temporaries), against thresholds around each layout's own largest rank P (0.2, 0.5, 0.9,
 * 0.999, 1.0 and 1.001 P): a layout rejected needs more than the threshold on some rank in full, answers no more
 * than its full host and peak, and a layout not rejected is predicted bit for bit as in full. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan_case.h"
#include "plan/layout.h"
#include "plan/memplan.h"
#include "plan/search.h"

typedef struct {
    llm4d_predictor *pr;
    const llm4d_config *base;
    long long global;
    llm4d_config *cfg;
    int valid, judged, rejected, wrong_reject, over_lb, not_equal, below;
    int rjudged, rrejected, rwrong, rover_lb, rnot_equal; /* the same against a rank's own memory */
    char first_bad[200];
} walk;

static void bad(walk *w, const llm4d_layout *l, const char *what, double x, double full) {
    if (w->first_bad[0]) return;
    char name[128];
    llm4d_layout_name(l, name, sizeof name);
    snprintf(w->first_bad, sizeof w->first_bad, "%s: %s %.6g against %.6g", name, what, x, full);
}

static llm4d_code each(void *u, const llm4d_layout *l, llm4d_err *err) {
    walk *w = u;
    llm4d_pp_plan pp;
    llm4d_err why = {0};
    const llm4d_code rc = llm4d_layout_config(w->base, l, w->global, w->cfg, &pp, &why);
    if (rc != LLM4D_OK) return rc == LLM4D_EUSER ? LLM4D_OK : (*err = why, rc);
    w->valid++;
    llm4d_prediction full = {0}, p = {0};
    w->pr->reject_above = 0;
    llm4d_code prc = llm4d_predict_memory(w->pr, w->cfg, &pp, &full, &why);
    static const double f[] = {0.2, 0.5, 0.9, 0.999, 1.001};
    for (int i = 0; prc == LLM4D_OK && i < (int)(sizeof f / sizeof f[0]); i++) {
        w->pr->reject_above = f[i] * full.host_bytes;
        prc = llm4d_predict_memory(w->pr, w->cfg, &pp, &p, &why);
        if (prc != LLM4D_OK) break;
        w->judged++;
        if (p.bound) {
            w->rejected++;
            if (!(full.host_bytes > w->pr->reject_above))
                w->wrong_reject++, bad(w, l, "rejected, its full host", full.host_bytes, w->pr->reject_above);
            if (p.host_bytes > full.host_bytes || p.peak_bytes > full.peak_bytes)
                w->over_lb++, bad(w, l, "bound host over the full host", p.host_bytes, full.host_bytes);
            if (p.host_bytes < full.host_bytes * (1 - 1e-6)) w->below++;
        } else if (p.host_bytes != full.host_bytes || p.peak_bytes != full.peak_bytes) {
            w->not_equal++, bad(w, l, "not rejected, host", p.host_bytes, full.host_bytes);
        }
    }
    w->pr->reject_above = 0;
    /* the rank's bound (a GPU's memory: predictor.reject_rank_above) around the layout's own largest rank P: 1.0 P
     * exactly must not reject (a class's bytes before its temporaries are at most P, summed alike) */
    static const double g[] = {0.2, 0.5, 0.9, 0.999, 1.0, 1.001};
    for (int i = 0; prc == LLM4D_OK && i < (int)(sizeof g / sizeof g[0]); i++) {
        w->pr->reject_rank_above = g[i] * full.peak_bytes;
        prc = llm4d_predict_memory(w->pr, w->cfg, &pp, &p, &why);
        if (prc != LLM4D_OK) break;
        w->rjudged++;
        if (p.bound) {
            w->rrejected++;
            if (!(full.peak_bytes > w->pr->reject_rank_above))
                w->rwrong++, bad(w, l, "rejected by a rank, its full peak", full.peak_bytes, w->pr->reject_rank_above);
            if (p.host_bytes > full.host_bytes || p.peak_bytes > full.peak_bytes)
                w->rover_lb++, bad(w, l, "rank-bound peak over the full peak", p.peak_bytes, full.peak_bytes);
        } else if (p.host_bytes != full.host_bytes || p.peak_bytes != full.peak_bytes) {
            w->rnot_equal++, bad(w, l, "not rejected by a rank, peak", p.peak_bytes, full.peak_bytes);
        }
    }
    w->pr->reject_rank_above = 0;
    llm4d_pp_plan_free(&pp);
    llm4d_prediction_free(&full);
    llm4d_prediction_free(&p);
    if (prc == LLM4D_ENOMEM) return *err = why, prc;
    return LLM4D_OK; /* a part the model refuses: the search rejects it too */
}

static void run_case(const char *name, const char *prof_path, char **argv, int argc) {
    llm4d_err err = {0};
    plan_case c;
    llm4d_memplan_memo *memo = NULL;
    if (!plan_case_open(&c, name, prof_path, argv, argc)) goto out;
    if (llm4d_memplan_memo_create(&memo, &err) != LLM4D_OK) {
        check(0, "%s: set up: %s", name, err.msg);
        goto out;
    }
    llm4d_config *base = c.base;
    const llm4d_cluster cl = {.nodes = base->plan.nodes, .ranks_per_node = base->plan.ranks_per_node,
                              .threads = 1, .memory_per_node = 1e12};
    llm4d_predictor pr = {.prof = &c.prof, .be = c.be, .cluster = cl, .cache = c.cache, .memo = memo,
                          .step_only = 1};
    walk w = {.pr = &pr, .base = base, .global = base->global_batch_size, .cfg = c.cfg};
    const int W = cl.nodes * cl.ranks_per_node;
    if (llm4d_layouts_each(base, w.global, W, each, &w, &err) != LLM4D_OK) {
        check(0, "%s: %s", name, err.msg);
        goto out;
    }
    check(w.judged > 100 && w.wrong_reject == 0 && w.over_lb == 0 && w.not_equal == 0,
          "%s: %d judgements of %d valid layouts, %d rejected early: %d rejected though they fit, %d answered over "
          "the full figure, %d not rejected yet not the full figure%s%s", name, w.judged, w.valid, w.rejected,
          w.wrong_reject, w.over_lb, w.not_equal, w.first_bad[0] ? "; first: " : "", w.first_bad);
    check(w.below > 0, "%s: the early bounds take part (%d rejections answer a host below the full one)", name,
          w.below);
    check(w.rjudged > 100 && w.rrejected > 0 && w.rwrong == 0 && w.rover_lb == 0 && w.rnot_equal == 0,
          "%s: against a rank's own memory, %d judgements, %d rejected early: %d rejected though every rank fits, "
          "%d answered over the full figures, %d not rejected yet not the full figures%s%s", name, w.rjudged,
          w.rrejected, w.rwrong, w.rover_lb, w.rnot_equal, w.first_bad[0] ? "; first: " : "", w.first_bad);
out:
    llm4d_memplan_memo_destroy(memo);
    plan_case_close(&c);
}

int main(void) {
    const char *src = getenv("SRC_DIR");
    char prof[4096];
    snprintf(prof, sizeof prof, "%s/bench/profiles/a100_selene.json", src ? src : ".");
#define CASE(name, ...) run_case(name, prof, CASE_ARGS(__VA_ARGS__))
    CASE("tiny fp32 2x6", "--model_name_or_path", "gpt2-tiny", "--max_seq_len", "32", "-o", "Model.num_layers=4",
         "-o", "Model.vocab_size=512", "--global_batch_size", "24", "--nodes", "2", "--ranks_per_node", "6");
    CASE("tiny bf16 4x4", "--model_name_or_path", "gpt2-tiny", "--max_seq_len", "32", "-o", "Model.num_layers=8",
         "--global_batch_size", "32", "--use_amp", "true", "--nodes", "4", "--ranks_per_node", "4");
    CASE("gpt3-1.3b bf16 4x8", "--model_name_or_path", "gpt3-1.3b", "--max_seq_len", "2048", "--global_batch_size",
         "64", "--use_amp", "true", "--nodes", "4", "--ranks_per_node", "8");
    return check_summary();
}
