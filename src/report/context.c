/* context.c — the report's sections about where a run ran: memory per rank (the plan each rank made before
 * allocating against what it measured), the layout (the 4D grid, which rank holds which pipeline stage, ZeRO
 * shard and tensor slice), the configuration, the machine and the version.
 *
 * The memory numbers come from the worker logs (a rank prints its plan at start-up and its peaks at the end), the
 * rest from run.json; a run without one or the other says what is missing and how to get it instead of leaving
 * a blank. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/schema.h"
#include "report/html.h"
#include "report/report.h"
#include "report/svg.h"
#include "train/version.h"

#define MAX_BAR_RANKS 32 /* ranks drawn in the memory chart; the table lists them all */

static const char *const mem_names[LLM4D_MEM_NCATEGORIES + 2] = {
    "parameters", "gradients", "optimizer states", "activations", "communication buffers", "workspaces",
    "outside the categories (backend copies and operands, MPI temporaries)",
    "the rest of the process (libraries, MPI, data)"};
static const char *const mem_colors[LLM4D_MEM_NCATEGORIES + 2] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                                                  "#9467bd", "#8c564b", "#e377c2", "#c7c7c7"};

static double sum(const double *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += isfinite(v[i]) ? v[i] : 0;
    return s;
}

/* MiB with two decimals, or a dash for a number the log does not have (yet). */
static const char *mib(double v, char *buf) {
    if (isfinite(v)) snprintf(buf, 32, "%.2f", v);
    else snprintf(buf, 32, "&ndash;");
    return buf;
}

void llm4d_rp_memory(FILE *f, const llm4d_rp_run *r) {
    enum { K = LLM4D_MEM_NCATEGORIES + 2 };
    fprintf(f, "<h2 id=\"memory\">Memory per rank: the plan against the run</h2>\n");
    int have = 0;
    for (int i = 0; i < r->nranks; i++) have += r->ranks[i].have_plan;
    if (!have && r->foreign_logs) {
        fprintf(f, "<p class=\"note\">No worker log of this run: the ones in ");
        llm4d_svg_escape(f, r->log_dir);
        fprintf(f, " belong to another run, launched there later. Each rank logs its plan before allocating and its "
                "peaks at the end; give each run its own <code>llm4d launch --log_dir DIR</code>.</p>\n");
        return;
    }
    if (!have) {
        fprintf(f, "<p class=\"note\">No worker log with a memory plan%s: each rank logs its plan before allocating and "
                "its peaks at the end; run through <code>llm4d launch --log_dir DIR</code>, or give the logs' directory "
                "with <code>--log_dir</code>.</p>\n", r->log_dir[0] ? " in the log directory" : " was found");
        return;
    }
    const int nb = r->nranks < MAX_BAR_RANKS ? r->nranks : MAX_BAR_RANKS;
    llm4d_svg_bar *rows = calloc((size_t)(2 * nb + 1), sizeof *rows);
    double(*vals)[K] = calloc((size_t)(2 * nb + 1), sizeof *vals);
    char(*labels)[48] = calloc((size_t)(2 * nb + 1), sizeof *labels), (*notes)[96] = calloc((size_t)(2 * nb + 1),
                                                                                          sizeof *notes);
    int nr = 0, ended = 0;
    for (int i = 0; rows && vals && labels && notes && i < nb; i++) {
        const llm4d_rp_rank *k = &r->ranks[i];
        if (!k->have_plan) continue;
        memcpy(vals[nr], k->plan, sizeof k->plan);
        vals[nr][K - 2] = k->plan_outside;
        vals[nr][K - 1] = fmax(0, k->plan_total - sum(k->plan, LLM4D_MEM_NCATEGORIES) - k->plan_outside);
        snprintf(labels[nr], sizeof labels[nr], "rank %d: plan", i);
        snprintf(notes[nr], sizeof notes[nr], "%.1f MiB planned", k->plan_total);
        rows[nr] = (llm4d_svg_bar){labels[nr], vals[nr], notes[nr]};
        nr++;
        const int peak = k->have_peak && k->have_rss;
        ended += peak;
        memcpy(vals[nr], peak ? k->peak : k->held, sizeof k->peak);
        vals[nr][K - 2] = peak ? k->workspaces : NAN;
        vals[nr][K - 1] = peak ? fmax(0, k->rss - sum(k->peak, LLM4D_MEM_NCATEGORIES) - k->workspaces) : NAN;
        snprintf(labels[nr], sizeof labels[nr], "rank %d: %s", i, peak ? "peak" : "held at start");
        if (peak) snprintf(notes[nr], sizeof notes[nr], "%.1f MiB peak RSS (%+.1f%%)", k->rss,
                           100 * (k->rss - k->plan_total) / k->plan_total);
        else snprintf(notes[nr], sizeof notes[nr], "no peak yet");
        rows[nr] = (llm4d_svg_bar){labels[nr], vals[nr], notes[nr]};
        nr++;
    }
    fprintf(f, "<p class=\"note\">Each rank's plan (made before allocating; what each category will hold) against "
            "%s. The peak bars are the most each category held (the memory arena's books), the backend's "
            "workspaces, and the rest of the peak resident set.</p>\n",
            ended ? "what it measured at the end of the run" : "what it held after allocating (the run has not ended)");
    const llm4d_svg_kinds kinds = {mem_names, mem_colors, K};
    if (nr) llm4d_svg_bars(f, "chart-memory", "Memory per rank and category (MiB)", "MiB", rows, nr, &kinds);
    free(rows), free(vals), free(labels), free(notes);
    fprintf(f, "<table><tr><th>rank</th><th>host</th>");
    for (int c = 0; c < LLM4D_MEM_NCATEGORIES; c++) fprintf(f, "<th>%s<br>plan / peak</th>", mem_names[c]);
    fprintf(f, "<th>planned total</th><th>peak RSS</th><th>peak / plan</th></tr>\n");
    for (int i = 0; i < r->nranks; i++) {
        const llm4d_rp_rank *k = &r->ranks[i];
        if (!k->have_log) continue;
        fprintf(f, "<tr><td>%d</td><td>", i);
        llm4d_svg_escape(f, k->host);
        fprintf(f, "</td>");
        char a[32], b[32];
        for (int c = 0; c < LLM4D_MEM_NCATEGORIES; c++)
            fprintf(f, "<td class=\"num\">%s / %s</td>", mib(k->plan[c], a), mib(k->have_peak ? k->peak[c] : NAN, b));
        char ratio[32] = "&ndash;";
        if (k->have_rss && k->plan_total > 0)
            snprintf(ratio, sizeof ratio, "%+.1f%%", 100 * (k->rss - k->plan_total) / k->plan_total);
        fprintf(f, "<td class=\"num\">%s</td><td class=\"num\">%s</td><td class=\"num\">%s</td></tr>\n",
                mib(k->plan_total, a), mib(k->have_rss ? k->rss : NAN, b), ratio);
    }
    fprintf(f, "</table>\n");
}

/* The grid: a column per pipeline stage, a row per data replica (dp x sharding), the tensor-parallel ranks of a
 * cell side by side. */
static void grid_svg(FILE *f, const cJSON *ranks, int P, int D, int S, int M) {
    const int cols = P < 16 ? P : 16, rows = D * S < 16 ? D * S : 16;
    const int cw = cols > 4 ? 1000 / cols : 240, rh = 34, top = 40, left = 110;
    const int w = left + cols * cw + 10, h = top + rows * rh + 10;
    fprintf(f, "<svg id=\"chart-grid\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"the 4D grid\"><text class=\"title\" x=\"%d\" y=\"14\">"
            "Ranks by pipeline stage (columns) and data replica (rows)</text>\n", w, h, w, h, left);
    for (int p = 0; p < cols; p++)
        fprintf(f, "<text class=\"axis\" x=\"%d\" y=\"32\" text-anchor=\"middle\">stage %d</text>\n",
                left + p * cw + cw / 2, p);
    for (int q = 0; q < rows; q++)
        if (S > 1) fprintf(f, "<text class=\"tick\" x=\"%d\" y=\"%d\" text-anchor=\"end\">dp %d, shard %d</text>\n",
                           left - 6, top + q * rh + 21, q / S, q % S);
        else fprintf(f, "<text class=\"tick\" x=\"%d\" y=\"%d\" text-anchor=\"end\">dp %d</text>\n", left - 6,
                     top + q * rh + 21, q);
    const cJSON *o;
    cJSON_ArrayForEach(o, ranks) {
        const int rank = (int)llm4d_rp_num(o, "rank", -1), dp = (int)llm4d_rp_num(o, "dp", 0);
        const int pp = (int)llm4d_rp_num(o, "pp", 0), sh = (int)llm4d_rp_num(o, "sharding", 0);
        const int mp = (int)llm4d_rp_num(o, "mp", 0), row = dp * S + sh;
        if (pp >= cols || row >= rows) continue;
        const double bw = (double)(cw - 12) / M;
        const double x = left + pp * cw + 6 + mp * bw, y = top + row * rh + 4;
        fprintf(f, "<rect class=\"box\" x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"><title>rank %d: "
                "dp %d, pp %d, sharding %d, mp %d</title></rect><text class=\"boxlabel\" x=\"%.1f\" y=\"%d\" "
                "text-anchor=\"middle\">r%d</text>\n", x, (int)y, bw - 2, rh - 8, llm4d_svg_color(pp), rank, dp, pp,
                sh, mp, x + (bw - 2) / 2, (int)y + 16, rank);
    }
    fprintf(f, "</svg>\n");
}

void llm4d_rp_layout(FILE *f, const llm4d_rp_run *r) {
    fprintf(f, "<h2 id=\"layout\">Layout</h2>\n");
    const cJSON *l = llm4d_rp_get(r->info, "layout");
    if (!l) {
        fprintf(f, "<p class=\"note\">This run has no run.json (written at start-up by llm4d since the report exists), "
                "so its layout is not known here.</p>\n");
        return;
    }
    const int D = (int)llm4d_rp_num(l, "degrees.dp", 1), P = (int)llm4d_rp_num(l, "degrees.pp", 1);
    const int S = (int)llm4d_rp_num(l, "degrees.sharding", 1), M = (int)llm4d_rp_num(l, "degrees.mp", 1);
    const int stage = (int)llm4d_rp_num(l, "sharding_stage", 0);
    fprintf(f, "<p>dp %d &times; pp %d &times; sharding %d &times; mp %d = %d process%s (the model axis fastest: rank = "
            "((dp &middot; pp + pp index) &middot; sharding + sharding index) &middot; mp + mp index)", D, P, S, M,
            (int)llm4d_rp_num(l, "world_size", D * P * S * M), D * P * S * M == 1 ? "" : "es");
    if (P > 1)
        fprintf(f, "; pipeline schedule %s, %d chunk%s per stage, %d micro-batches per step",
                llm4d_rp_str(l, "pp_schedule", "?"), (int)llm4d_rp_num(l, "virtual_pp_degree", 1),
                llm4d_rp_num(l, "virtual_pp_degree", 1) > 1 ? "s" : "", (int)llm4d_rp_num(l, "micro_batches", 1));
    if (S > 1)
        fprintf(f, "; ZeRO stage %d over %d ranks%s", stage, S,
                cJSON_IsTrue(llm4d_rp_get(l, "sharding_offload")) ? ", states offloaded" : "");
    if (M > 1) fprintf(f, "; tensor parallel over %d ranks%s", M,
                       cJSON_IsTrue(llm4d_rp_get(l, "sequence_parallel")) ? " with sequence parallelism" : "");
    fprintf(f, ".</p>\n");
    const cJSON *ranks = llm4d_rp_get(l, "ranks");
    grid_svg(f, ranks, P, D, S, M);
    fprintf(f, "<details%s><summary>Every rank: its coordinates, blocks and shards</summary>\n<table><tr><th>rank</th>"
            "<th>host</th><th>dp</th><th>pp stage</th><th>sharding</th><th>mp</th><th>blocks</th><th>also holds</th>"
            "<th>ZeRO shard</th><th>tensor slice</th></tr>\n", cJSON_GetArraySize(ranks) <= 16 ? " open" : "");
    const cJSON *o;
    cJSON_ArrayForEach(o, ranks) {
        const int rank = (int)llm4d_rp_num(o, "rank", -1);
        fprintf(f, "<tr><td>%d</td><td>", rank);
        if (rank >= 0 && rank < r->nranks) llm4d_svg_escape(f, r->ranks[rank].host);
        fprintf(f, "</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>", (int)llm4d_rp_num(o, "dp", 0),
                (int)llm4d_rp_num(o, "pp", 0), (int)llm4d_rp_num(o, "sharding", 0), (int)llm4d_rp_num(o, "mp", 0));
        const cJSON *b;
        int first = 1;
        cJSON_ArrayForEach(b, llm4d_rp_get(o, "blocks")) {
            fprintf(f, "%s[%d, %d)", first ? "" : ", ", (int)cJSON_GetArrayItem(b, 0)->valuedouble,
                    (int)cJSON_GetArrayItem(b, 1)->valuedouble);
            first = 0;
        }
        const int emb = cJSON_IsTrue(llm4d_rp_get(o, "embedding")), head = cJSON_IsTrue(llm4d_rp_get(o, "head"));
        fprintf(f, "</td><td>%s%s%s</td><td>", emb ? "embeddings" : "", emb && head ? ", " : "",
                head ? "ln_f, LM head, loss" : "");
        if (S > 1) fprintf(f, "%d of %d (stage %d)", (int)llm4d_rp_num(o, "sharding", 0) + 1, S, stage);
        else fprintf(f, "whole");
        fprintf(f, "</td><td>");
        if (M > 1) fprintf(f, "%d of %d", (int)llm4d_rp_num(o, "mp", 0) + 1, M);
        else fprintf(f, "whole");
        fprintf(f, "</td></tr>\n");
    }
    fprintf(f, "</table></details>\n");
}

/* One configuration value as text, in the units the user gives it: a megabyte key (config/schema.h's
 * LLM4D_KT_MB) that run.json format 1 holds in bytes is shown in megabytes, as the YAML file has it. */
static void value_text(const cJSON *v, int bytes_of_mb, char *buf, size_t n) {
    const llm4d_key *k = bytes_of_mb && cJSON_IsNumber(v) ? llm4d_key_find(v->string) : NULL;
    const double x = k && k->type == LLM4D_KT_MB ? v->valuedouble / 1048576.0 : cJSON_IsNumber(v) ? v->valuedouble : 0;
    if (cJSON_IsString(v)) snprintf(buf, n, "%s", v->valuestring[0] ? v->valuestring : "''");
    else if (cJSON_IsBool(v)) snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNumber(v)) llm4d_svg_num(x, buf, (int)n);
    else snprintf(buf, n, "?");
    if (cJSON_IsNumber(v) && x == floor(x) && fabs(x) < 1e15) snprintf(buf, n, "%.0f", x);
}

static int is_explicit(const cJSON *list, const char *key) {
    const cJSON *e;
    cJSON_ArrayForEach(e, list) if (cJSON_IsString(e) && !strcmp(e->valuestring, key)) return 1;
    return 0;
}

void llm4d_rp_context(FILE *f, const llm4d_rp_run *r) {
    const cJSON *in = r->info;
    fprintf(f, "<h2 id=\"machine\">Machine and version</h2>\n<div class=\"cols\"><table>\n");
    if (in) {
        llm4d_html_row(f, "llm4d version", "%s%s%s%s", llm4d_rp_str(in, "version", "?"),
                       llm4d_rp_str(in, "version_date", "")[0] ? " (" : "", llm4d_rp_str(in, "version_date", ""),
                       llm4d_rp_str(in, "version_date", "")[0] ? ")" : "");
        llm4d_html_row(f, "started", "%s", llm4d_rp_str(in, "started", "?"));
        llm4d_html_row(f, "host of rank 0", "%s", llm4d_rp_str(in, "machine.host", "?"));
        llm4d_html_row(f, "CPU", "%s, %.0f cores, %.1f GiB", llm4d_rp_str(in, "machine.cpu", "?"),
                       llm4d_rp_num(in, "machine.cores", 0), llm4d_rp_num(in, "machine.memory_gib", 0));
        llm4d_html_row(f, "system", "%s; %s", llm4d_rp_str(in, "machine.os", "?"),
                       llm4d_rp_str(in, "machine.kernel", "?"));
        llm4d_html_row(f, "compiler", "%s", llm4d_rp_str(in, "machine.compiler", "?"));
        llm4d_html_row(f, "backend", "%s, %.0f threads per rank, %s", llm4d_rp_str(in, "machine.backend", "?"),
                       llm4d_rp_num(in, "machine.threads_per_rank", 0), llm4d_rp_str(in, "machine.precision", "?"));
        if (llm4d_rp_num(in, "machine.matmul_peak_gflops", 0) > 0)
            llm4d_html_row(f, "matmul peak (MFU's denominator)", "%.1f GFLOP/s per rank",
                           llm4d_rp_num(in, "machine.matmul_peak_gflops", 0));
        const double whole = llm4d_rp_num(in, "model.parameters", 0), rank0 = llm4d_rp_num(in, "model.parameters_rank0",
                                                                                           whole);
        char part[160] = "";
        if (rank0 != whole) /* a rank's log counts its own part ("parameters: N"): say which number is which */
            snprintf(part, sizeof part, " (rank 0 holds %.0f of them: its pipeline stage's blocks and its "
                     "tensor-parallel slice)", rank0);
        llm4d_html_row(f, "model", "%.0f parameters in the whole model%s: %.0f layers, hidden %.0f, %.0f heads, "
                       "vocabulary %.0f; %.0f tokens per sample, %.0f per step", whole, part,
                       llm4d_rp_num(in, "model.layers", 0), llm4d_rp_num(in, "model.hidden_size", 0),
                       llm4d_rp_num(in, "model.heads", 0), llm4d_rp_num(in, "model.vocab_size", 0),
                       llm4d_rp_num(in, "model.max_seq_len", 0), llm4d_rp_num(in, "model.tokens_per_step", 0));
    } else {
        llm4d_html_row(f, "run.json", "absent: the version, machine and configuration are not known");
    }
    if (r->isa[0]) llm4d_html_row(f, "GEMM implementations (rank 0)", "%s", r->isa);
    int hosts = 0;
    for (int i = 0; i < r->nranks; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= !strcmp(r->ranks[j].host, r->ranks[i].host);
        hosts += r->ranks[i].have_log && !seen;
    }
    if (r->nranks) llm4d_html_row(f, "hosts (from the worker logs)", "%d host%s for %d rank%s", hosts,
                                  hosts == 1 ? "" : "s", r->nranks, r->nranks == 1 ? "" : "s");
    char now[64];
    const time_t t = time(NULL);
    strftime(now, sizeof now, "%Y-%m-%d %H:%M:%S %Z", localtime(&t));
    llm4d_html_row(f, "this report", "made %s by llm4d %s", now, llm4d_version());
    fprintf(f, "</table></div>\n");

    fprintf(f, "<h2 id=\"config\">Configuration</h2>\n");
    const cJSON *vals = llm4d_rp_get(in, "config.values"), *set = llm4d_rp_get(in, "config.explicit");
    if (!vals) {
        fprintf(f, "<p class=\"note\">Not known: the run has no run.json.</p>\n");
        return;
    }
    fprintf(f, "<p class=\"note\">Keys set by the YAML file, flags or overrides are in bold; the rest are defaults "
            "or derived.</p>\n<table><tr><th>key (set explicitly)</th><th>value</th></tr>\n");
    const cJSON *v;
    char buf[1100];
    const int bytes_of_mb = !strcmp(llm4d_rp_str(in, "format", ""), "llm4d run 1");
    cJSON_ArrayForEach(v, vals) {
        if (!is_explicit(set, v->string)) continue;
        value_text(v, bytes_of_mb, buf, sizeof buf);
        fprintf(f, "<tr class=\"set\">");
        fprintf(f, "<td>");
        llm4d_svg_escape(f, v->string);
        fprintf(f, "</td><td class=\"mono\">");
        llm4d_svg_escape(f, buf);
        fprintf(f, "</td></tr>\n");
    }
    fprintf(f, "</table>\n<details><summary>Every key</summary><table><tr><th>key</th><th>value</th></tr>\n");
    cJSON_ArrayForEach(v, vals) {
        value_text(v, bytes_of_mb, buf, sizeof buf);
        fprintf(f, "<tr%s><td>", is_explicit(set, v->string) ? " class=\"set\"" : "");
        llm4d_svg_escape(f, v->string);
        fprintf(f, "</td><td class=\"mono\">");
        llm4d_svg_escape(f, buf);
        fprintf(f, "</td></tr>\n");
    }
    fprintf(f, "</table></details>\n");
    const cJSON *noeff = llm4d_rp_get(in, "config.no_effect");
    if (cJSON_GetArraySize(noeff) > 0) {
        fprintf(f, "<p class=\"note\">Set but without effect in llm4d:");
        cJSON_ArrayForEach(v, noeff) if (cJSON_IsString(v)) {
            fprintf(f, " ");
            llm4d_svg_escape(f, v->valuestring);
        }
        fprintf(f, "</p>\n");
    }
}
