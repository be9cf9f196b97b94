/* logs.c — what the worker logs and exit records of a run say (see run.h).
 *
 * The logs are written for people, in the PaddleNLP logger's format, so this reads the few lines the trainer
 * prints for exactly this purpose, by their fixed openings (train/memplan_check.c, train/step.c, core/mem.c):
 *   memory plan of this rank, before allocating: params 12.73 MiB, grads ..., workspace 50.33 MiB; outside ...
 *   memory plan: 103.4 MiB to allocate on top of 22.6 MiB held now (...): 126.0 MiB per rank; available ...
 *   memory held by this process, by category:          (then one line per category, then total)
 *   peak memory of this process over the run, by category:      (the same table, at the end of the run)
 *   backend workspaces (not in the categories): 1.16 MiB; peak resident set size: 146.49 MiB
 * and the error line a failing rank prints (`llm4d: rank R: message`, runtime.h) or an internal error's. The first
 * line of a worker log names the host and the launch's run id (`llm4d worker: rank R runs on host H (run ID)`,
 * cli/launch_worker.c), and the launcher's worker leaves `.workerexit.<rank>` (pid, signaled, value, forwarded,
 * time, run id) when the rank ends. Logs and records of another run than run.json's are not read (run.h). A line
 * that does not read as expected is skipped: a log is evidence, not input to trust. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/run.h"

/* The message of a logger line (after "] - "), or the line itself. */
static const char *message(const char *line) {
    const char *m = strstr(line, "] - ");
    return m && line[0] == '[' ? m + 4 : line;
}

/* The number before " MiB" / " GiB" / " TiB" at s, in MiB; NaN when s does not start with one. */
static double size_mib(const char *s, const char **end) {
    char *e;
    const double v = strtod(s, &e);
    if (e == s) return NAN;
    while (*e == ' ') e++;
    double scale = NAN;
    if (!strncmp(e, "MiB", 3)) scale = 1;
    else if (!strncmp(e, "GiB", 3)) scale = 1024;
    else if (!strncmp(e, "TiB", 3)) scale = 1024.0 * 1024;
    if (end) *end = e + 3;
    return v * scale;
}

/* "memory plan of this rank, before allocating: params 12.73 MiB, ...; outside them, ... 0.51 MiB ..." */
static void read_plan(llm4d_rp_rank *k, const char *m) {
    const char *semi = strchr(m, ';');
    for (int c = 0; c < LLM4D_MEM_NCATEGORIES; c++) {
        char key[32];
        snprintf(key, sizeof key, " %s ", llm4d_mem_category_name((llm4d_mem_category)c));
        const char *at = strstr(m, key);
        if (at && (!semi || at < semi)) k->plan[c] = size_mib(at + strlen(key), NULL);
    }
    k->plan_outside = 0;
    for (const char *p = semi; p && *p; p++) { /* every size after the categories lies outside them */
        if (!isdigit((unsigned char)*p) || (p > semi && (isdigit((unsigned char)p[-1]) || p[-1] == '.'))) continue;
        const char *e;
        const double v = size_mib(p, &e);
        if (isfinite(v)) k->plan_outside += v, p = e - 1;
    }
    k->have_plan = 1;
}

/* One row of core/mem.c's table: "    params  12.73 MiB (peak  12.73 MiB)". */
static void read_table_row(llm4d_rp_rank *k, const char *line, int peak) {
    while (*line == ' ') line++;
    for (int c = 0; c < LLM4D_MEM_NCATEGORIES; c++) {
        const char *name = llm4d_mem_category_name((llm4d_mem_category)c);
        const size_t n = strlen(name);
        if (strncmp(line, name, n) || line[n] != ' ') continue;
        const char *p = line + n;
        while (*p == ' ') p++;
        if (peak) {
            const char *q = strstr(p, "(peak");
            if (q) k->peak[c] = size_mib(q + 5 + strspn(q + 5, " "), NULL);
        } else {
            k->held[c] = size_mib(p, NULL);
        }
    }
}

/* "llm4d worker: rank R runs on host H (run ID)" (no " (run ID)" before run ids existed): host and id. */
static void read_first_line(llm4d_rp_rank *k, const char *line) {
    const char *h = strstr(line, " runs on host ") + 14, *id = strstr(h, " (run ");
    const size_t n = id ? (size_t)(id - h) : strlen(h);
    snprintf(k->host, sizeof k->host, "%.*s", (int)(n < sizeof k->host ? n : sizeof k->host - 1), h);
    if (id) sscanf(id + 6, "%63[A-Za-z0-9-]", k->run_id);
}

/* The run id on the first line of a worker log (into id, "" when it has none): 1, or 0 when there is no log. */
static int log_run_id(const char *path, char *id, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[512] = "";
    llm4d_rp_rank k = {0};
    if (fgets(line, sizeof line, f) && !strncmp(line, "llm4d worker: rank ", 19) && strstr(line, " runs on host ")) {
        line[strcspn(line, "\r\n")] = 0;
        read_first_line(&k, line);
    }
    fclose(f);
    snprintf(id, n, "%s", k.run_id);
    return 1;
}

/* What rank r's log says (exists: the log was there). */
static int read_log(llm4d_rp_run *r, llm4d_rp_rank *k, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int table = 0; /* inside a memory table: 1 held, 2 peak */
    while ((len = getline(&line, &cap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        const char *m = message(line);
        if (table && !strncmp(line, "    ", 4)) {
            read_table_row(k, line, table == 2);
            continue;
        }
        table = 0;
        if (!strncmp(line, "llm4d worker: rank ", 19) && strstr(line, " runs on host ")) {
            read_first_line(k, line);
        } else if (!strncmp(m, "memory plan of this rank, before allocating:", 44)) {
            read_plan(k, m + 44);
        } else if (!strncmp(m, "memory plan: ", 13) && strstr(m, " per rank")) {
            const char *p = strstr(m, "): ");
            if (p) k->plan_total = size_mib(p + 3, NULL);
        } else if (!strncmp(m, "memory held by this process, by category:", 41)) {
            table = 1;
            k->have_held = 1;
        } else if (!strncmp(m, "peak memory of this process over the run, by category:", 55)) {
            table = 2;
            k->have_peak = 1;
        } else if (!strncmp(m, "backend workspaces (not in the categories): ", 44)) {
            k->workspaces = size_mib(m + 44, NULL);
            const char *p = strstr(m, "peak resident set size: ");
            if (p) k->rss = size_mib(p + 24, NULL), k->have_rss = 1;
        } else if ((!strncmp(line, "llm4d: ", 7) || !strncmp(line, "llm4d internal error", 20)) && !k->error[0]) {
            snprintf(k->error, sizeof k->error, "%s", line);
        } else if (k->rank == 0 && !strncmp(m, "oneDNN ISA ", 11)) {
            snprintf(r->isa, sizeof r->isa, "%s", m);
        } else if (k->rank == 0 && !strncmp(m, "time per step by kind of work", 29)) {
            snprintf(r->work_line, sizeof r->work_line, "%s", m);
        } else if (k->rank == 0 && strstr(line, "[    WARN] - ")) {
            if (!r->warnings++) snprintf(r->first_warning, sizeof r->first_warning, "%s", m);
        }
    }
    free(line);
    fclose(f);
    return 1;
}

/* launch's .workerexit.<rank> (cli/launch_common.c writes it whole or not at all), when it is the same job's as
 * the rank's log (the same run id, or neither has one). */
static void read_exit(llm4d_rp_rank *k, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    long pid;
    double when;
    char id[64] = "";
    k->exited = fscanf(f, "pid %ld\nsignaled %d\nvalue %d\nforwarded %d\ntime %lf", &pid, &k->signaled,
                       &k->exit_value, &k->forwarded, &when) == 5;
    if (k->exited && fscanf(f, " run %63[A-Za-z0-9-]", id) == 1 && id[0] == '-') id[0] = 0;
    fclose(f);
    if (strcmp(id, k->run_id)) k->exited = k->signaled = k->exit_value = k->forwarded = 0;
}

llm4d_code llm4d_rp_read_logs(llm4d_rp_run *r, int n, llm4d_err *err) {
    if (!r->log_dir[0]) return LLM4D_OK;
    const int probe = n > 0 ? n : 4096; /* without run.json: the ranks whose logs are there, from 0 */
    r->ranks = calloc((size_t)probe, sizeof *r->ranks);
    if (!r->ranks) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory reading the worker logs");
    for (int i = 0; i < probe; i++) {
        llm4d_rp_rank *k = &r->ranks[i];
        k->rank = i;
        for (int c = 0; c < LLM4D_MEM_NCATEGORIES; c++) k->plan[c] = k->held[c] = k->peak[c] = NAN;
        k->plan_total = k->workspaces = k->rss = NAN;
        char path[PATH_MAX + 32], id[64];
        snprintf(path, sizeof path, "%s/workerlog.%d", r->log_dir, i);
        if (!log_run_id(path, id, sizeof id)) {
            if (n <= 0) break;
            continue;
        }
        if (r->run_id && strcmp(id, r->run_id)) { /* another job's log: not this run's evidence */
            if (!r->foreign_logs++) snprintf(r->foreign_id, sizeof r->foreign_id, "%s", id);
            continue;
        }
        if (!read_log(r, k, path)) continue;
        k->have_log = 1;
        snprintf(path, sizeof path, "%s/.workerexit.%d", r->log_dir, i);
        read_exit(k, path);
        r->nranks = i + 1;
    }
    return LLM4D_OK;
}
