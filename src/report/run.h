/* run.h — one training run as `llm4d report` reads it back from disk.
 *
 * A run leaves three kinds of files, each read by its own file here: output_dir/metrics.jsonl (one JSON object
 * per step and per evaluation: metrics.c), output_dir/run.json (version, machine, layout, configuration, where the
 * logs and traces went: written at start-up by train/runinfo.c), and the launcher's log directory
 * (workerlog.<rank>: each rank's memory plan and measured peak, its host, its error line; .workerexit.<rank>: how
 * it ended: logs.c). run.c puts them together and decides the run's state: finished, still going, stopped by a
 * signal before its last step (an interrupt: Ctrl-C, a scheduler's SIGTERM; with the step it reached and its latest
 * checkpoint), or failed (and then with which message, after which good step).
 *
 * Whose logs. `llm4d launch` gives every job a run id, which run.json, the first line of each worker log and each
 * exit record carry (cli/launch.h); a later job launched into the same log directory overwrites the logs. So when
 * run.json names an id, only the logs (and records) that carry it are read; if none does, the report says the
 * logs in the directory belong to another run and reads none. A run.json without an id (older llm4d, a run
 * started without the launcher) takes the logs as they are.
 *
 * Without logs (`llm4d train` run directly, or logs that belong to another run) run.json says the rest: how the
 * run ended, which its writer adds when it ends ("end": finished, or failed with the error's line), and which
 * process wrote it ("process": pid, start time, PID namespace, on machine.host). A run without an end whose process
 * is gone (the same host and namespace, no process of that pid and start time) stopped without a word: a
 * terminal's Ctrl-C, a kill. Read from another host or namespace, it cannot be told from one going on.
 *
 * Everything is read tolerantly where a run in progress can leave it (a last metrics line half written, logs
 * without their end-of-run tables, no exit records) and strictly where only damage can (a metrics line in the
 * middle that is not JSON, a run.json that does not parse): the latter is a user error naming the file, the line
 * and the fix. */
#ifndef LLM4D_REPORT_RUN_H
#define LLM4D_REPORT_RUN_H

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdint.h>

#include "core/error.h"
#include "core/mem.h"

#define LLM4D_RP_WORK 6 /* metrics.jsonl's work_s kinds (backend.h's LLM4D_WORK_N: gemm ... elementwise) */

/* One training step's line of metrics.jsonl (NaN: the field was null or absent). */
typedef struct {
    int64_t step;
    double loss, lr, lr_used, grad_norm, loss_scale;
    double ips_total, ips, mfu, batch_cost, reader_cost, tokens;
    double comm_exposed_s, comm_s, pp_idle_s, pp_busy_s, zero_gather_wait_s, zero_reduce_scatter_s;
    double work_s[LLM4D_RP_WORK];
    double comm_bytes, optim_bytes;
    int found_inf, spike_skipped;
    double tokens_seen;  /* derived: the tokens of every step up to this one */
} llm4d_rp_step;

typedef struct {
    int64_t step;
    double loss, ppl;
} llm4d_rp_eval;

/* What one rank's log and exit record say. Sizes in MiB; have_* say which tables the log holds so far. */
typedef struct {
    int rank;
    char host[64];
    int have_log;                       /* workerlog.<rank> was there */
    int have_plan, have_held, have_peak, have_rss;
    double plan[LLM4D_MEM_NCATEGORIES]; /* what each category will hold, planned before allocating */
    double plan_outside;                /* the backend's weight copies and operands, MPI temporaries */
    double plan_total;                  /* the whole plan per rank, on top of what was held (and including it) */
    double held[LLM4D_MEM_NCATEGORIES]; /* held after allocating, before step 1 */
    double peak[LLM4D_MEM_NCATEGORIES]; /* the most each category held over the run (end-of-run table) */
    double workspaces, rss;             /* backend workspaces outside the categories; peak resident set size */
    char error[1024];                   /* the rank's error line ("llm4d: rank R: ..."), "" if none */
    char run_id[64];                    /* the launch's id on the log's first line, "" if none */
    int exited, signaled, exit_value, forwarded; /* .workerexit.<rank>; exited 0: no record (still running?) */
} llm4d_rp_rank;

/* The order is the page's (report.c's class names). */
typedef enum { LLM4D_RP_FINISHED = 0, LLM4D_RP_RUNNING, LLM4D_RP_FAILED, LLM4D_RP_STOPPED } llm4d_rp_state;

typedef struct {
    char dir[PATH_MAX];
    char label[160];             /* the run's name in legends: its directory's name and layout ("out (dp2 pp2)") */
    llm4d_rp_step *s;
    int ns;
    llm4d_rp_eval *e;
    int ne;
    int partial_line;            /* metrics.jsonl's last line was incomplete (being written): left out */
    cJSON *info;                 /* run.json, NULL when the run has none */
    char log_dir[PATH_MAX];      /* "" when unknown or absent */
    const char *run_id;          /* run.json's run_id (into info), NULL when it has none */
    int foreign_logs;            /* worker logs in log_dir that belong to another run (another run id): not read */
    char foreign_id[64];         /* the id the first of them carries ("" if none) */
    char latest[PATH_MAX + 64];  /* the checkpoint --resume RUN_DIR would load, "" when there is none */
    llm4d_rp_rank *ranks;
    int nranks;
    char isa[512];               /* rank 0's closing `oneDNN ISA ...` line */
    char work_line[640];         /* rank 0's closing `time per step by kind of work` line */
    int warnings;                /* WARN lines in rank 0's log (skipped steps, loss spikes) */
    char first_warning[512];
    llm4d_rp_state state;
    char state_line[2 * PATH_MAX + 1400]; /* one line for the banner: what happened, the error, the checkpoint */
    int64_t last_good;           /* the last step with a finite loss (0: none) */
    int64_t max_steps;           /* from run.json (0: unknown) */
} llm4d_rp_run;

/* Read the run in dir. log_dir: where its worker logs are, or NULL to take run.json's (none: no logs). */
llm4d_code llm4d_rp_run_load(llm4d_rp_run *r, const char *dir, const char *log_dir, llm4d_err *err);
void llm4d_rp_run_free(llm4d_rp_run *r);

/* metrics.c: append path's steps and evaluations to r (r->s, r->e); a missing file is no steps. */
llm4d_code llm4d_rp_read_metrics(llm4d_rp_run *r, const char *path, llm4d_err *err);
/* logs.c: r->ranks from r->log_dir's workerlog.<rank> and .workerexit.<rank> (ranks 0 .. n-1 that exist), the
 * ones of this run only when r->run_id is set (the others counted in r->foreign_logs). */
llm4d_code llm4d_rp_read_logs(llm4d_rp_run *r, int n, llm4d_err *err);

/* The whole of a file (the caller frees *text); *text NULL and OK when it does not exist. */
llm4d_code llm4d_rp_read_whole(const char *path, char **text, size_t *n, llm4d_err *err);

/* run.json helpers: the number or string at a dotted path ("layout.degrees.pp"), or the fallback. */
double llm4d_rp_num(const cJSON *info, const char *path, double fallback);
const char *llm4d_rp_str(const cJSON *info, const char *path, const char *fallback);
const cJSON *llm4d_rp_get(const cJSON *info, const char *path);

#endif
