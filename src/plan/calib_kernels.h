/* calib_kernels.h — the kernel half of a calibration (calibrate.h): the model's calls, or a machine grid's,
 * replayed on this process's backend into the profile, with the progress it reports and the saves that let an
 * interrupted calibration keep what it measured. Internal to plan/calibrate.c, which runs the multi-rank jobs
 * first and then these. */
#ifndef LLM4D_PLAN_CALIB_KERNELS_H
#define LLM4D_PLAN_CALIB_KERNELS_H

#include "plan/calibrate.h"
#include "plan/grid.h"
#include "plan/profile.h"

/* Where a calibration stands: a progress line on stderr at most every LLM4D_CALIB_PROGRESS_S seconds (a part of
 * gpt2-en at sequence 1024 replays for minutes: without it the user sees nothing for half an hour), and the profile
 * saved after every part that measured something new (atomically: llm4d_profile_save), so an interrupted
 * calibration keeps what it measured and a re-run continues from it (llm4d_calibrate). */
#define LLM4D_CALIB_PROGRESS_S 5.0
typedef struct {
    const char *path;
    double t0;       /* the calibration's start (omp_get_wtime) */
    double deadline; /* when it stops measuring new parts (0: never) */
    double last_line;
    int late;        /* parts left unmeasured for the budget, at the thread count that left most */
} llm4d_calib_progress;

/* Minutes and seconds ("3m07s", "42s") into buf. */
const char *llm4d_calib_mmss(double s, char *buf, size_t n);
/* The profile as measured so far, saved (sorted: the lookups that follow bisect it). */
llm4d_code llm4d_calib_checkpoint(llm4d_profile *prof, const llm4d_calib_progress *pg, llm4d_err *err);

/* The model's own calls: every model part of the layouts of up to o->max_ranks ranks, at 1 to the cores' threads. */
llm4d_code llm4d_calib_measure_kernels(const llm4d_calibrate_opts *o, llm4d_profile *prof, llm4d_calib_progress *pg,
                                       llm4d_err *err);
/* A machine calibration's kernels: the grid g's one-layer GPTs, in two passes (calib_kernels.c). */
llm4d_code llm4d_calib_measure_grid(const llm4d_calibrate_opts *o, const llm4d_grid *g, llm4d_profile *prof,
                                    llm4d_calib_progress *pg, llm4d_err *err);

#endif
