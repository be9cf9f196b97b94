/* schedule.c — a run's traces (core/trace.h) read back: the schedule of a traced step drawn as the pipeline
 * papers draw it, and every rank's file merged into one.
 *
 * The picture: a row per rank, stages first (a pipeline's stage s is the rank with pp index s), time left to right
 * from the earliest start of the step on any rank (the ranks' clocks share an origin, trace.h). Each row shows the
 * rank's forward, backward and weight passes as boxes labelled with their micro-batch (and chunk), the optimizer,
 * and under them a thin lane of its communication calls and of its waits, so the bubble is the white between the
 * boxes and its cause is underneath. A table gives each rank's computing, waiting and communicating time in that
 * step. The files are checked as they are read: one that is not Trace Event JSON is a user error naming it. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/html.h"
#include "report/report.h"
#include "report/svg.h"

#define MAX_ROWS 32

typedef struct {
    double ts, dur;       /* microseconds */
    char name[32];
    char cat[16];
    int mb;
} span;

typedef struct {
    int rank, dp, pp, sh, mp;
    span *s;
    int n;
    cJSON *doc;           /* the whole file, for merging */
} rank_trace;

struct llm4d_rp_traces {
    rank_trace *r;
    int n;
    char schedule[48];
    int P, M, V;
};

static int by_rank(const void *pa, const void *pb) {
    const rank_trace *a = pa, *b = pb;
    if (a->pp != b->pp) return a->pp - b->pp;
    return a->rank - b->rank;
}

static llm4d_code load_rank(rank_trace *t, const char *path, llm4d_err *err) {
    char *text;
    size_t n;
    LLM4D_TRY(llm4d_rp_read_whole(path, &text, &n, err));
    t->doc = text ? cJSON_ParseWithLength(text, n) : NULL;
    free(text);
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(t->doc, "traceEvents");
    if (!cJSON_IsArray(ev))
        return llm4d_fail(err, LLM4D_EUSER, "%s is not Trace Event JSON (no traceEvents array); remove it, or trace "
                          "the run again", path);
    const cJSON *other = cJSON_GetObjectItemCaseSensitive(t->doc, "otherData");
    t->rank = (int)llm4d_rp_num(other, "rank", -1);
    t->dp = (int)llm4d_rp_num(other, "coords.dp", 0);
    t->pp = (int)llm4d_rp_num(other, "coords.pp", 0);
    t->sh = (int)llm4d_rp_num(other, "coords.sharding", 0);
    t->mp = (int)llm4d_rp_num(other, "coords.mp", 0);
    t->s = calloc((size_t)cJSON_GetArraySize(ev) + 1, sizeof *t->s);
    if (!t->s) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory reading %s", path);
    const cJSON *e;
    cJSON_ArrayForEach(e, ev) {
        const char *ph = llm4d_rp_str(e, "ph", NULL), *name = llm4d_rp_str(e, "name", NULL);
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(e, "ts");
        if (!ph || !name || !cJSON_IsNumber(ts))
            return llm4d_fail(err, LLM4D_EUSER, "%s holds an event without ph, name or ts: it is not Trace Event JSON "
                              "as llm4d writes it; remove it, or trace the run again", path);
        if (strcmp(ph, "X")) continue;
        span *s = &t->s[t->n++];
        s->ts = ts->valuedouble;
        s->dur = llm4d_rp_num(e, "dur", 0);
        snprintf(s->name, sizeof s->name, "%s", name);
        snprintf(s->cat, sizeof s->cat, "%s", llm4d_rp_str(e, "cat", ""));
        s->mb = (int)llm4d_rp_num(e, "args.mb", -1);
    }
    return LLM4D_OK;
}

llm4d_code llm4d_rp_traces_load(llm4d_rp_traces **out, const char *dir, llm4d_err *err) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return LLM4D_OK;
    llm4d_rp_traces *t = calloc(1, sizeof *t);
    llm4d_code rc = t ? LLM4D_OK : llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    int cap = 0;
    const struct dirent *de;
    while (rc == LLM4D_OK && (de = readdir(d))) {
        int rank, used = 0;
        if (sscanf(de->d_name, "trace.rank%d.json%n", &rank, &used) != 1 || de->d_name[used]) continue;
        if (t->n == cap) {
            rank_trace *r = realloc(t->r, (size_t)(cap = 2 * cap + 8) * sizeof *r);
            if (!r) {
                rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
                break;
            }
            t->r = r;
        }
        char path[PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        memset(&t->r[t->n], 0, sizeof t->r[t->n]);
        rc = load_rank(&t->r[t->n++], path, err);
    }
    closedir(d);
    if (rc != LLM4D_OK || !t->n) {
        llm4d_rp_traces_free(t);
        return rc;
    }
    qsort(t->r, (size_t)t->n, sizeof *t->r, by_rank);
    const cJSON *other = cJSON_GetObjectItemCaseSensitive(t->r[0].doc, "otherData");
    snprintf(t->schedule, sizeof t->schedule, "%s", llm4d_rp_str(other, "pp_schedule", "none"));
    t->P = (int)llm4d_rp_num(other, "degrees.pp", 1);
    t->M = (int)llm4d_rp_num(other, "micro_batches", 1);
    t->V = (int)llm4d_rp_num(other, "virtual_pp_degree", 1);
    *out = t;
    return LLM4D_OK;
}

void llm4d_rp_traces_free(llm4d_rp_traces *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) {
        free(t->r[i].s);
        cJSON_Delete(t->r[i].doc);
    }
    free(t->r);
    free(t);
}

/* The span of step `step` on rank r, or NULL. */
static const span *step_span(const rank_trace *r, int64_t step) {
    char name[32];
    snprintf(name, sizeof name, "step %lld", (long long)step);
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->s[i].cat, "step") && !strcmp(r->s[i].name, name)) return &r->s[i];
    return NULL;
}

/* The width a box needs for its label in the 9 px font (.boxlabel): 6.5 px a character and a margin. */
static double label_width(const char *name) { return 6.5 * (double)strlen(name) + 4; }

static const char *fill_of(const span *s) {
    if (!strcmp(s->cat, "compute")) return s->name[0] == 'F' ? "#4e79a7" : s->name[0] == 'B' ? "#59a14f" : "#b07aa1";
    if (!strcmp(s->cat, "optimizer")) return "#555555";
    if (!strcmp(s->cat, "checkpoint")) return "#9c755f";
    if (!strcmp(s->cat, "data")) return "#bab0ac";
    if (!strcmp(s->cat, "comm")) return "#f28e2b";
    if (!strcmp(s->cat, "wait")) return "#e15759";
    return NULL;
}

void llm4d_rp_schedule(FILE *f, const llm4d_rp_traces *t) {
    int64_t step = -1; /* the first step every file traced */
    for (int i = 0; i < t->r[0].n; i++)
        if (!strcmp(t->r[0].s[i].cat, "step")) {
            const int64_t k = atoll(t->r[0].s[i].name + 5);
            if (step < 0 || k < step) step = k;
        }
    double t0 = INFINITY, t1 = -INFINITY;
    for (int i = 0; i < t->n; i++) {
        const span *s = step_span(&t->r[i], step);
        if (s) t0 = fmin(t0, s->ts), t1 = fmax(t1, s->ts + s->dur);
    }
    fprintf(f, "<h2 id=\"schedule\">Schedule of traced step %lld</h2>\n", (long long)step);
    if (!(t1 > t0)) {
        fprintf(f, "<p class=\"note\">The trace files hold no complete step.</p>\n");
        return;
    }
    fprintf(f, "<p class=\"note\">From the per-rank traces (%d file%s; schedule %s", t->n, t->n == 1 ? "" : "s",
            t->schedule);
    if (t->P > 1) fprintf(f, ", %d stages, %d micro-batches%s", t->P, t->M, t->V > 1 ? ", chunks as .c" : "");
    fprintf(f, "). Boxes: F forward, B backward (input gradient when split), W weight gradient, with their micro-batch; "
            "under them communication calls (orange) and waits (red). <code>llm4d report --merge_trace FILE</code> "
            "writes the traces as one file for chrome://tracing or Perfetto.</p>\n");
    const int rows = t->n < MAX_ROWS ? t->n : MAX_ROWS, left = 150, w = 1150, rh = 34, top = 44;
    const double scale = (w - left - 10) / (t1 - t0);
    const int h = top + rows * rh + 8;
    fprintf(f, "<svg id=\"chart-schedule\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
            "height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"pipeline schedule\"><text class=\"title\" "
            "x=\"%d\" y=\"14\">Step %lld on each rank (time in ms from the step's start)</text>\n", w, h, w, h, left,
            (long long)step);
    char b[32];
    const double ms = (t1 - t0) / 1000, tick = pow(10, floor(log10(ms / 6)));
    const double st = ms / tick > 30 ? 5 * tick : ms / tick > 12 ? 2 * tick : tick;
    for (double x = 0; x <= ms + 1e-9; x += st) {
        llm4d_svg_num(x, b, sizeof b);
        fprintf(f, "<line class=\"grid\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/><text class=\"tick\" x=\"%.1f\" "
                "y=\"%d\" text-anchor=\"middle\">%s</text>\n", left + x * 1000 * scale, left + x * 1000 * scale, top - 6,
                h - 8, left + x * 1000 * scale, top - 10, b);
    }
    for (int i = 0; i < rows; i++) {
        const rank_trace *r = &t->r[i];
        const int y = top + i * rh;
        fprintf(f, "<text class=\"tick\" x=\"%d\" y=\"%d\" text-anchor=\"end\">%s%d &middot; rank %d</text>\n", left - 6,
                y + 16, t->P > 1 ? "stage " : "dp ", t->P > 1 ? r->pp : r->dp, r->rank);
        const span *ss = step_span(r, step);
        if (!ss) continue;
        for (int j = 0; j < r->n; j++) {
            const span *s = &r->s[j];
            const char *fill = fill_of(s);
            if (!fill || !strcmp(s->cat, "step") || s->ts < ss->ts || s->ts > ss->ts + ss->dur) continue;
            const int lane = !strcmp(s->cat, "comm") || !strcmp(s->cat, "wait");
            const double x = left + (s->ts - t0) * scale, wd = fmax(0.6, s->dur * scale);
            fprintf(f, "<rect class=\"box\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"><title>", x,
                    lane ? y + 24 : y + 2, wd, lane ? 6 : 20, fill);
            llm4d_svg_escape(f, s->name);
            fprintf(f, ": %.3f ms from %.3f ms</title></rect>", s->dur / 1000, (s->ts - t0) / 1000);
            /* the whole name or none: a name cut to its digits ("1" for F1 or B1) reads as another box */
            if (!lane && !strcmp(s->cat, "compute") && wd >= label_width(s->name))
                fprintf(f, "<text class=\"boxlabel\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>", x + wd / 2,
                        y + 16, s->name);
            fprintf(f, "\n");
        }
    }
    fprintf(f, "</svg>\n<table><tr><th>rank</th><th>stage</th><th>step (ms)</th><th>computing (ms)</th><th>waiting "
            "(ms)</th><th>in other communication calls (ms)</th><th>optimizer (ms)</th><th>not computing</th></tr>\n");
    for (int i = 0; i < t->n; i++) {
        const rank_trace *r = &t->r[i];
        const span *ss = step_span(r, step);
        if (!ss) continue;
        double acc[4] = {0, 0, 0, 0}; /* compute, wait, comm, optimizer: top-level time of each (nesting aside) */
        for (int j = 0; j < r->n; j++) {
            const span *s = &r->s[j];
            if (s->ts < ss->ts || s->ts > ss->ts + ss->dur) continue;
            const int k = !strcmp(s->cat, "compute") ? 0 : !strcmp(s->cat, "wait") ? 1 : !strcmp(s->cat, "comm") ? 2
                        : !strcmp(s->cat, "optimizer") ? 3 : -1;
            if (k >= 0) acc[k] += s->dur;
        }
        fprintf(f, "<tr><td>%d</td><td>%d</td><td class=\"num\">%.2f</td><td class=\"num\">%.2f</td><td class=\"num\">"
                "%.2f</td><td class=\"num\">%.2f</td><td class=\"num\">%.2f</td><td class=\"num\">%.1f%%</td></tr>\n",
                r->rank, r->pp, ss->dur / 1000, acc[0] / 1000, acc[1] / 1000, acc[2] / 1000, acc[3] / 1000,
                100 * (1 - acc[0] / ss->dur));
    }
    fprintf(f, "</table>\n<p class=\"note\">Communication calls made inside a pass (tensor-parallel all-reduces, "
            "gradient buckets started during backward) are counted in both columns.</p>\n");
}

llm4d_code llm4d_rp_traces_merge(const llm4d_rp_traces *t, const char *path, llm4d_err *err) {
    cJSON *root = cJSON_CreateObject(), *all = cJSON_AddArrayToObject(root, "traceEvents");
    cJSON_AddStringToObject(root, "displayTimeUnit", "ms");
    cJSON *other = cJSON_AddObjectToObject(root, "otherData");
    cJSON_AddNumberToObject(other, "merged_ranks", t->n);
    for (int i = 0; all && i < t->n; i++) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(t->r[i].doc, "traceEvents"))
            cJSON_AddItemToArray(all, cJSON_Duplicate(e, 1));
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory merging the traces");
    FILE *f = fopen(path, "w");
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0) ok = 0;
    free(text);
    if (!ok) return llm4d_fail(err, LLM4D_EUSER, "cannot write %s; choose a writable path for --merge_trace", path);
    return LLM4D_OK;
}
