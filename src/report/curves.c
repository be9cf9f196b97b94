/* curves.c — the report's charts of metrics.jsonl: loss against steps and tokens, learning rate, gradient norm,
 * loss scale and skipped steps, tokens/s and MFU, and the step's time by kind of work.
 *
 * The loss scale is drawn only for a run that scales its loss (fp16): on any other it is 1 at every step.
 * With --compare every chart but the time breakdown overlays the runs (one colour each, the legend naming each
 * run's layout), and a table and a chart of the loss differences against the first run make the equivalence of
 * two layouts visible: llm4d trains the same model in every layout, so the curves should lie on each other, and
 * the differences say by how much they do not. A failed run's last good step is marked on its curves; skipped
 * steps (an fp16 overflow, a loss spike) are red ticks. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "report/html.h"
#include "report/report.h"
#include "report/svg.h"

/* Column `off` (a double of llm4d_rp_step) of run r, scaled; the caller frees it. */
static double *column(const llm4d_rp_run *r, size_t off, double scale) {
    double *v = malloc((size_t)(r->ns > 0 ? r->ns : 1) * sizeof *v);
    for (int i = 0; v && i < r->ns; i++) v[i] = *(const double *)((const char *)&r->s[i] + off) * scale;
    return v;
}

static double *steps_of(const llm4d_rp_run *r) {
    double *v = malloc((size_t)(r->ns > 0 ? r->ns : 1) * sizeof *v);
    for (int i = 0; v && i < r->ns; i++) v[i] = (double)r->s[i].step;
    return v;
}

/* The steps whose update was skipped (fp16 overflow, loss spike), for red ticks; *n of them. */
static double *skipped(const llm4d_rp_run *r, int *n) {
    double *v = malloc((size_t)(r->ns > 0 ? r->ns : 1) * sizeof *v);
    *n = 0;
    for (int i = 0; v && i < r->ns; i++)
        if (r->s[i].found_inf || r->s[i].spike_skipped) v[(*n)++] = (double)r->s[i].step;
    return v;
}

/* Did the run scale its loss (fp16)? run.json's precision says; without one, a loss scale other than 1 does. */
static int fp16_scaling(const llm4d_rp_run *r) {
    const char *p = llm4d_rp_str(r->info, "machine.precision", NULL);
    if (p) return !strcmp(p, "fp16");
    for (int i = 0; i < r->ns; i++)
        if (isfinite(r->s[i].loss_scale) && r->s[i].loss_scale != 1) return 1;
    return 0;
}

/* One chart of the column `off` against steps (x_tokens: against tokens seen) for every run. */
static void per_run_chart(FILE *f, llm4d_rp_run *const *runs, int n, const llm4d_svg_chart *c, size_t off,
                          double scale, int x_tokens) {
    llm4d_svg_series s[LLM4D_RP_MAX_RUNS] = {0};
    double *buf[2 * LLM4D_RP_MAX_RUNS] = {0};
    for (int i = 0; i < n; i++) {
        buf[2 * i] = x_tokens ? column(runs[i], offsetof(llm4d_rp_step, tokens_seen), 1) : steps_of(runs[i]);
        buf[2 * i + 1] = column(runs[i], off, scale);
        s[i] = (llm4d_svg_series){runs[i]->label, llm4d_svg_color(i), buf[2 * i], buf[2 * i + 1],
                                  buf[2 * i] && buf[2 * i + 1] ? runs[i]->ns : 0, LLM4D_SVG_LINE};
    }
    llm4d_svg_lines(f, c, s, n);
    for (int i = 0; i < 2 * n; i++) free(buf[i]);
}

static llm4d_svg_chart chart(const char *id, const char *title, const char *xlabel, const char *ylabel,
                             const llm4d_rp_run *main) {
    return (llm4d_svg_chart){.id = id, .title = title, .xlabel = xlabel, .ylabel = ylabel,
                             .vline = main->state == LLM4D_RP_FAILED && main->last_good ? (double)main->last_good : NAN,
                             .vline_name = "last good step"};
}

/* Loss against steps, training and evaluation, every run. */
static void loss_chart(FILE *f, llm4d_rp_run *const *runs, int n) {
    llm4d_svg_series s[2 * LLM4D_RP_MAX_RUNS] = {0};
    double *buf[4 * LLM4D_RP_MAX_RUNS] = {0};
    char names[2 * LLM4D_RP_MAX_RUNS][200];
    int k = 0;
    for (int i = 0; i < n; i++) {
        const llm4d_rp_run *r = runs[i];
        buf[4 * i] = steps_of(r);
        buf[4 * i + 1] = column(r, offsetof(llm4d_rp_step, loss), 1);
        snprintf(names[k], sizeof names[k], "%s%s", n > 1 ? r->label : "train", n > 1 ? ": train" : "");
        s[k] = (llm4d_svg_series){names[k], llm4d_svg_color(i), buf[4 * i], buf[4 * i + 1],
                                  buf[4 * i] && buf[4 * i + 1] ? r->ns : 0, LLM4D_SVG_LINE};
        k++;
        if (!r->ne) continue;
        buf[4 * i + 2] = malloc((size_t)r->ne * sizeof(double));
        buf[4 * i + 3] = malloc((size_t)r->ne * sizeof(double));
        if (!buf[4 * i + 2] || !buf[4 * i + 3]) continue;
        for (int j = 0; j < r->ne; j++) buf[4 * i + 2][j] = (double)r->e[j].step, buf[4 * i + 3][j] = r->e[j].loss;
        snprintf(names[k], sizeof names[k], "%s%s", n > 1 ? r->label : "evaluation", n > 1 ? ": evaluation" : "");
        s[k++] = (llm4d_svg_series){names[k - 1], n > 1 ? llm4d_svg_color(i) : llm4d_svg_color(3), buf[4 * i + 2],
                                    buf[4 * i + 3], r->ne, LLM4D_SVG_DOTS};
    }
    llm4d_svg_chart c = chart("chart-loss-step", "Loss against steps", "step", "loss", runs[0]);
    int nm;
    double *marks = skipped(runs[0], &nm);
    c.marks = marks, c.nmarks = marks ? nm : 0, c.marks_name = "update skipped";
    llm4d_svg_lines(f, &c, s, k);
    free(marks);
    for (int i = 0; i < 4 * n; i++) free(buf[i]);
}

/* How far each compared run's losses are from the first run's, at the steps both have. */
static void equivalence(FILE *f, llm4d_rp_run *const *runs, int n) {
    const llm4d_rp_run *a = runs[0];
    fprintf(f, "<h3>Loss equivalence against ");
    llm4d_svg_escape(f, a->label);
    fprintf(f, "</h3>\n<table id=\"equivalence\"><tr><th>run</th><th>steps in common</th><th>max |&Delta; loss|</th>"
            "<th>at step</th><th>mean |&Delta; loss|</th><th>evaluations in common</th><th>max |&Delta; eval loss|</th>"
            "</tr>\n");
    llm4d_svg_series s[LLM4D_RP_MAX_RUNS] = {0};
    double *buf[2 * LLM4D_RP_MAX_RUNS] = {0};
    int k = 0;
    for (int i = 1; i < n; i++) {
        const llm4d_rp_run *b = runs[i];
        double *x = malloc((size_t)(b->ns + 1) * sizeof *x), *d = malloc((size_t)(b->ns + 1) * sizeof *d);
        int m = 0, ja = 0;
        double worst = 0, sum = 0;
        int64_t at = 0;
        for (int jb = 0; x && d && jb < b->ns; jb++) { /* both sorted by step */
            while (ja < a->ns && a->s[ja].step < b->s[jb].step) ja++;
            if (ja >= a->ns || a->s[ja].step != b->s[jb].step) continue;
            const double dl = b->s[jb].loss - a->s[ja].loss;
            if (!isfinite(dl)) continue;
            x[m] = (double)b->s[jb].step, d[m++] = dl;
            sum += fabs(dl);
            if (fabs(dl) >= worst) worst = fabs(dl), at = b->s[jb].step;
        }
        int me = 0;
        double eworst = 0;
        for (int p = 0; p < b->ne; p++)
            for (int q = 0; q < a->ne; q++)
                if (a->e[q].step == b->e[p].step && isfinite(b->e[p].loss - a->e[q].loss))
                    me++, eworst = fmax(eworst, fabs(b->e[p].loss - a->e[q].loss));
        fprintf(f, "<tr><td>");
        llm4d_svg_escape(f, b->label);
        fprintf(f, "</td><td class=\"num\">%d</td><td class=\"num\">%.3g</td><td class=\"num\">%lld</td><td "
                "class=\"num\">%.3g</td><td class=\"num\">%d</td><td class=\"num\">%.3g</td></tr>\n", m, worst,
                (long long)at, m ? sum / m : 0.0, me, eworst);
        buf[2 * k] = x, buf[2 * k + 1] = d;
        s[k] = (llm4d_svg_series){b->label, llm4d_svg_color(i), x, d, x && d ? m : 0, LLM4D_SVG_LINE};
        k++;
    }
    fprintf(f, "</table>\n<div class=\"charts\">\n");
    llm4d_svg_chart c = {.id = "chart-loss-delta", .title = "Loss difference against the first run", .xlabel = "step",
                         .ylabel = "loss - first run's loss", .vline = NAN};
    llm4d_svg_lines(f, &c, s, k);
    fprintf(f, "</div>\n");
    for (int i = 0; i < 2 * k; i++) free(buf[i]);
}

/* The step's time by kind of work (the first run): the backend's timers, the waits, the rest. */
static void breakdown(FILE *f, const llm4d_rp_run *r) {
    enum { K = LLM4D_RP_WORK + 4 };
    static const char *const names[K] = {"GEMM", "attention", "optimizer", "cross-entropy", "operand conversions",
                                         "element-wise", "data", "communication exposed", "pipeline idle",
                                         "other (outside the backend's timers)"};
    const char *colors[K] = {"#1f77b4", "#9467bd", "#2ca02c", "#8c564b", "#bcbd22", "#17becf", "#7f7f7f",
                             "#d62728", "#ff7f0e", "#c7c7c7"};
    const int n = r->ns;
    double *x = steps_of(r), *y[K], mean[K] = {0};
    int ok = x != NULL;
    for (int k = 0; k < K; k++) ok &= (y[k] = malloc((size_t)(n > 0 ? n : 1) * sizeof(double))) != NULL;
    double *hidden = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    int counted = 0;
    for (int i = 0; ok && hidden && i < n; i++) {
        const llm4d_rp_step *s = &r->s[i];
        double sum = 0;
        for (int k = 0; k < LLM4D_RP_WORK; k++) y[k][i] = s->work_s[k];
        y[LLM4D_RP_WORK][i] = s->reader_cost;
        y[LLM4D_RP_WORK + 1][i] = s->comm_exposed_s;
        y[LLM4D_RP_WORK + 2][i] = s->pp_idle_s;
        for (int k = 0; k < K - 1; k++) sum += isfinite(y[k][i]) ? y[k][i] : 0;
        y[K - 1][i] = fmax(0, s->batch_cost - sum);
        hidden[i] = isfinite(s->comm_s) && isfinite(s->comm_exposed_s) ? fmax(0, s->comm_s - s->comm_exposed_s) : NAN;
        if (i == 0 && n > 1) continue; /* the first step warms caches and allocators: not in the means */
        for (int k = 0; k < K; k++) mean[k] += isfinite(y[k][i]) ? y[k][i] : 0;
        counted++;
    }
    if (ok && hidden && n > 0) {
        llm4d_svg_series over = {"communication hidden (in calls that did not wait)", "#000000", x, hidden, n,
                                 LLM4D_SVG_DASHED};
        llm4d_svg_chart c = {.id = "chart-step-time", .title = "Time of each step by kind of work (rank 0)",
                             .xlabel = "step", .ylabel = "seconds", .w = 1100, .h = 300, .vline = NAN};
        const llm4d_svg_kinds kinds = {names, colors, K};
        llm4d_svg_stack(f, &c, x, n, (const double *const *)y, &kinds, &over, 1);
        double total = 0;
        for (int k = 0; k < K; k++) mean[k] /= counted > 0 ? counted : 1, total += mean[k];
        char label[64], note[96];
        snprintf(label, sizeof label, "mean of %d step%s", counted, counted == 1 ? "" : "s");
        snprintf(note, sizeof note, "%.4g s per step", total);
        const llm4d_svg_bar bar = {label, mean, note};
        llm4d_svg_bars(f, "chart-step-shares", "Where a step's time goes (after the first step)", "s", &bar, 1, &kinds);
        fprintf(f, "<table><tr><th>kind of work</th><th>seconds per step</th><th>share</th></tr>\n");
        for (int k = 0; k < K; k++)
            fprintf(f, "<tr><td>%s</td><td class=\"num\">%.4f</td><td class=\"num\">%.1f%%</td></tr>\n", names[k],
                    mean[k], total > 0 ? 100 * mean[k] / total : 0);
        fprintf(f, "</table>\n");
    }
    free(x), free(hidden);
    for (int k = 0; k < K; k++) free(ok ? y[k] : NULL);
}

void llm4d_rp_curves(FILE *f, llm4d_rp_run *const *runs, int n) {
    const llm4d_rp_run *main = runs[0];
    fprintf(f, "<h2 id=\"loss\">Loss</h2>\n<div class=\"charts\">\n");
    loss_chart(f, runs, n);
    llm4d_svg_chart c = chart("chart-loss-tokens", "Training loss against tokens", "tokens seen", "loss", main);
    c.vline = NAN;
    per_run_chart(f, runs, n, &c, offsetof(llm4d_rp_step, loss), 1, 1);
    fprintf(f, "</div>\n");
    if (n > 1) equivalence(f, runs, n);

    fprintf(f, "<h2 id=\"optimizer\">Optimizer</h2>\n<div class=\"charts\">\n");
    c = chart("chart-lr", "Learning rate used by each update", "step", "learning rate", main);
    c.zero = 1;
    per_run_chart(f, runs, n, &c, offsetof(llm4d_rp_step, lr_used), 1, 0);
    int nm;
    double *marks = skipped(main, &nm);
    c = chart("chart-grad-norm", "Gradient norm (before clipping)", "step", "global norm", main);
    c.marks = marks, c.nmarks = marks ? nm : 0, c.marks_name = "update skipped", c.zero = 1;
    per_run_chart(f, runs, n, &c, offsetof(llm4d_rp_step, grad_norm), 1, 0);
    int scaled = 0;
    for (int i = 0; i < n; i++) scaled |= fp16_scaling(runs[i]);
    if (scaled) {
        c = chart("chart-loss-scale", "Loss scale (fp16) and skipped updates", "step", "loss scale", main);
        c.marks = marks, c.nmarks = marks ? nm : 0, c.marks_name = "update skipped";
        per_run_chart(f, runs, n, &c, offsetof(llm4d_rp_step, loss_scale), 1, 0);
    }
    fprintf(f, "</div>\n<p class=\"note\">%d update%s skipped in %s (red ticks: an fp16 overflow or a loss spike; "
            "the step's gradients were dropped).%s</p>\n", marks ? nm : 0, marks && nm == 1 ? "" : "s",
            n > 1 ? "the first run" : "this run", scaled ? "" : " No loss-scale chart: no run here computed in fp16, "
            "the only precision that scales the loss.");
    free(marks);

    fprintf(f, "<h2 id=\"throughput\">Throughput</h2>\n<div class=\"charts\">\n");
    c = chart("chart-tokens-s", "Tokens per second (all ranks)", "step", "tokens/s", main);
    c.zero = 1;
    per_run_chart(f, runs, n, &c, offsetof(llm4d_rp_step, ips_total), 1, 0);
    c = chart("chart-mfu", "Model FLOPs utilisation (of the matmul peak measured at start-up)", "step", "MFU", main);
    c.zero = 1, c.percent = 1;
    per_run_chart(f, runs, n, &c, offsetof(llm4d_rp_step, mfu), 1, 0);
    fprintf(f, "</div>\n<h3>Time per step by kind of work</h3>\n<p class=\"note\">The backend's own timers per kind of "
            "kernel (work_s), the data read, the time blocked waiting for gradient or ZeRO communication and for "
            "pipeline neighbours; other is the rest of the step. The dashed line is the time spent in communication "
            "calls that did not block (posting and progressing overlapped transfers).</p>\n");
    breakdown(f, main);
}
