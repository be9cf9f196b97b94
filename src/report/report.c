/* report.c — the page of `llm4d report` put together (see report.h): read every run, then write the sections in
 * order into a temporary file renamed over the output, so a page being viewed is never half written. */
#include "report/report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "report/html.h"
#include "report/svg.h"

/* Mean of a column over the steps after the first (the first warms caches), NaN when there is none. */
static double mean_after_first(const llm4d_rp_run *r, double (*get)(const llm4d_rp_step *)) {
    double s = 0;
    int n = 0;
    for (int i = r->ns > 1 ? 1 : 0; i < r->ns; i++) {
        const double v = get(&r->s[i]);
        if (isfinite(v)) s += v, n++;
    }
    return n ? s / n : NAN;
}

static double get_ips(const llm4d_rp_step *s) { return s->ips_total; }
static double get_mfu(const llm4d_rp_step *s) { return s->mfu; }
static double get_cost(const llm4d_rp_step *s) { return s->batch_cost; }

static void summary_row(FILE *f, const llm4d_rp_run *r) {
    const llm4d_rp_step *last = r->ns ? &r->s[r->ns - 1] : NULL;
    int skipped = 0;
    for (int i = 0; i < r->ns; i++) skipped += r->s[i].found_inf || r->s[i].spike_skipped;
    char loss[32] = "&ndash;", eval[48] = "&ndash;", ips[32] = "&ndash;", mfu[32] = "&ndash;", cost[32] = "&ndash;";
    if (last && isfinite(last->loss)) snprintf(loss, sizeof loss, "%.6f", last->loss);
    if (r->ne) snprintf(eval, sizeof eval, "%.6f (step %lld)", r->e[r->ne - 1].loss, (long long)r->e[r->ne - 1].step);
    const double m_ips = mean_after_first(r, get_ips), m_mfu = mean_after_first(r, get_mfu);
    const double m_cost = mean_after_first(r, get_cost);
    if (isfinite(m_ips)) snprintf(ips, sizeof ips, "%.0f", m_ips);
    if (isfinite(m_mfu)) snprintf(mfu, sizeof mfu, "%.1f%%", 100 * m_mfu);
    if (isfinite(m_cost)) snprintf(cost, sizeof cost, "%.4f", m_cost);
    fprintf(f, "<tr><td>");
    llm4d_svg_escape(f, r->label);
    fprintf(f, "</td><td class=\"num\">%lld</td><td class=\"num\">%.4g</td><td class=\"num\">%s</td><td class=\"num\">"
            "%s</td><td class=\"num\">%s</td><td class=\"num\">%s</td><td class=\"num\">%s</td><td class=\"num\">%d</td>"
            "<td>", last ? (long long)last->step : 0LL, last ? last->tokens_seen : 0.0, loss, eval, ips, mfu, cost,
            skipped);
    static const char *const state[] = {"finished", "in progress", "failed", "stopped"};
    llm4d_svg_escape(f, state[r->state]);
    fprintf(f, "</td></tr>\n");
}

static void page(FILE *f, llm4d_rp_run *const *runs, int n, const llm4d_rp_traces *traces) {
    const llm4d_rp_run *r = runs[0];
    char title[256];
    snprintf(title, sizeof title, "llm4d report: %s", r->label);
    llm4d_html_begin(f, title);
    fprintf(f, "<h1>");
    llm4d_svg_escape(f, title);
    fprintf(f, "</h1>\n<p class=\"note mono\">");
    llm4d_svg_escape(f, r->dir);
    fprintf(f, "</p>\n");
    for (int i = 0; i < n; i++) {
        static const char *const cls[] = {"finished", "running", "failed", "stopped"};
        fprintf(f, "<div id=\"state%s\" class=\"state %s\">", i ? "-compare" : "", cls[runs[i]->state]);
        if (n > 1) {
            llm4d_svg_escape(f, runs[i]->label);
            fprintf(f, ": ");
        }
        llm4d_svg_escape(f, runs[i]->state_line);
        fprintf(f, "</div>\n");
        if (runs[i]->foreign_logs) { /* said apart from the state: a finished run's logs can be overwritten too */
            char note[2 * PATH_MAX + 300];
            snprintf(note, sizeof note, "The worker logs in %s belong to another run (%s%s; this run is %s), "
                     "launched into the same log directory later: none of them was read.", runs[i]->log_dir,
                     runs[i]->foreign_id[0] ? "run " : "logs without a run id", runs[i]->foreign_id,
                     runs[i]->run_id ? runs[i]->run_id : "?");
            fprintf(f, "<p id=\"foreign-logs%s\" class=\"note\">", i ? "-compare" : "");
            llm4d_svg_escape(f, note);
            fprintf(f, "</p>\n");
        }
    }
    fprintf(f, "<nav><a href=\"#loss\">loss</a><a href=\"#optimizer\">optimizer</a><a href=\"#throughput\">throughput"
            "</a>%s<a href=\"#memory\">memory</a><a href=\"#layout\">layout</a><a href=\"#machine\">machine</a><a "
            "href=\"#config\">configuration</a></nav>\n", traces ? "<a href=\"#schedule\">schedule</a>" : "");
    fprintf(f, "<h2 id=\"summary\">Summary</h2>\n<table><tr><th>run</th><th>steps</th><th>tokens seen</th><th>last "
            "loss</th><th>last evaluation loss</th><th>tokens/s (mean)</th><th>MFU (mean)</th><th>seconds per step "
            "(mean)</th><th>updates skipped</th><th>state</th></tr>\n");
    for (int i = 0; i < n; i++) summary_row(f, runs[i]);
    fprintf(f, "</table>\n<p class=\"note\">Means over the steps after the first.");
    if (r->partial_line) fprintf(f, " metrics.jsonl's last line is incomplete (being written) and is left out.");
    if (r->warnings) {
        fprintf(f, " Rank 0's log holds %d warning%s, the first: ", r->warnings, r->warnings == 1 ? "" : "s");
        llm4d_svg_escape(f, r->first_warning);
    }
    fprintf(f, "</p>\n");
    if (!r->ns) fprintf(f, "<p>No step has been recorded in metrics.jsonl yet.</p>\n");
    llm4d_rp_curves(f, runs, n);
    if (traces) llm4d_rp_schedule(f, traces);
    llm4d_rp_memory(f, r);
    llm4d_rp_layout(f, r);
    llm4d_rp_context(f, r);
    llm4d_html_end(f);
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

llm4d_code llm4d_report_write(const llm4d_report_opts *o, char *written, size_t written_n, llm4d_err *err) {
    llm4d_rp_run *runs = calloc(LLM4D_RP_MAX_RUNS, sizeof *runs);
    llm4d_rp_run *ptr[LLM4D_RP_MAX_RUNS];
    if (!runs) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    const int n = 1 + o->n_compare;
    llm4d_rp_traces *traces = NULL;
    llm4d_code rc = llm4d_rp_run_load(&runs[0], o->run_dir, o->log_dir, err);
    for (int i = 1; rc == LLM4D_OK && i < n; i++) rc = llm4d_rp_run_load(&runs[i], o->compare[i - 1], NULL, err);
    for (int i = 0; i < n; i++) ptr[i] = &runs[i];
    const char *tdir = o->trace_dir ? o->trace_dir : llm4d_rp_str(runs[0].info, "trace_dir", NULL);
    if (rc == LLM4D_OK && o->trace_dir && !is_dir(o->trace_dir))
        rc = llm4d_fail(err, LLM4D_EUSER, "--trace %s is not a directory; give the directory the run was traced into "
                        "(its --trace)", o->trace_dir);
    if (rc == LLM4D_OK && tdir) rc = llm4d_rp_traces_load(&traces, tdir, err);
    if (rc == LLM4D_OK && o->merge_trace && !traces)
        rc = llm4d_fail(err, LLM4D_EUSER, "--merge_trace: the run has no trace files%s%s; train with --trace DIR "
                        "--trace_steps A-B (or give --trace DIR here)", tdir ? " in " : "", tdir ? tdir : "");
    char path[PATH_MAX + 32], tmp[PATH_MAX + 48];
    snprintf(path, sizeof path, "%s", o->out ? o->out : "");
    if (!o->out) snprintf(path, sizeof path, "%s/report.html", runs[0].dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (rc == LLM4D_OK) {
        FILE *f = fopen(tmp, "w");
        if (!f) {
            rc = llm4d_fail(err, LLM4D_EUSER, "cannot write %s: %s; choose a writable path with -o", path,
                            strerror(errno));
        } else {
            page(f, ptr, n, traces);
            const int bad = ferror(f);
            if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
                rc = llm4d_fail(err, LLM4D_EUSER, "cannot write %s: %s; choose a writable path with -o", path,
                                strerror(errno));
                remove(tmp);
            }
        }
    }
    if (rc == LLM4D_OK && o->merge_trace) rc = llm4d_rp_traces_merge(traces, o->merge_trace, err);
    if (rc == LLM4D_OK) snprintf(written, written_n, "%s", path);
    llm4d_rp_traces_free(traces);
    for (int i = 0; i < n; i++) llm4d_rp_run_free(&runs[i]);
    free(runs);
    return rc;
}
