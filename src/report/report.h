/* report.h — `llm4d report`: one self-contained HTML page about a run (or several, overlaid).
 *
 * The page, top to bottom: the run's state (finished, in progress, stopped by a signal: the step it reached and
 * the latest checkpoint, failed: the last good step and the error line), a summary, the curves of metrics.jsonl
 * (curves.c), the pipeline schedule of a traced step (schedule.c), the memory plan against the measured peak per
 * rank and category, the layout (the 4D grid and which rank holds which stage and shards), the configuration, the
 * machine and the version (context.c). The data of a run come from run.h. */
#ifndef LLM4D_REPORT_REPORT_H
#define LLM4D_REPORT_REPORT_H

#include <stdio.h>

#include "report/run.h"

#define LLM4D_RP_MAX_RUNS 8 /* the run and up to 7 compared with it */

typedef struct {
    const char *run_dir;
    const char *compare[LLM4D_RP_MAX_RUNS - 1];
    int n_compare;
    const char *log_dir;     /* the run's worker logs (NULL: where run.json says) */
    const char *trace_dir;   /* its traces (NULL: where run.json says) */
    const char *out;         /* the page (NULL: RUN_DIR/report.html) */
    const char *merge_trace; /* also write the run's traces merged into this one file (NULL: no) */
} llm4d_report_opts;

/* Read the runs, write the page (to a temporary name, then renamed). Bad input is a user error naming the file. */
llm4d_code llm4d_report_write(const llm4d_report_opts *o, char *written, size_t written_n, llm4d_err *err);

/* curves.c: the charts of metrics.jsonl, runs[0] the main run. */
void llm4d_rp_curves(FILE *f, llm4d_rp_run *const *runs, int n);
/* context.c: memory per rank, layout, configuration, machine and version of a run. */
void llm4d_rp_memory(FILE *f, const llm4d_rp_run *r);
void llm4d_rp_layout(FILE *f, const llm4d_rp_run *r);
void llm4d_rp_context(FILE *f, const llm4d_rp_run *r);

/* schedule.c: the traces of a run (trace.rank<R>.json in dir). */
typedef struct llm4d_rp_traces llm4d_rp_traces;
/* NULL *out (and OK) when dir holds no trace file; a user error naming the file when one is not Trace Event JSON. */
llm4d_code llm4d_rp_traces_load(llm4d_rp_traces **out, const char *dir, llm4d_err *err);
void llm4d_rp_traces_free(llm4d_rp_traces *t);
/* The schedule of the first traced step: a row per rank (stages first), its F, B and W boxes, transfers, waits. */
void llm4d_rp_schedule(FILE *f, const llm4d_rp_traces *t);
/* Every rank's events in one Trace Event file (for chrome://tracing or Perfetto). */
llm4d_code llm4d_rp_traces_merge(const llm4d_rp_traces *t, const char *path, llm4d_err *err);

#endif
