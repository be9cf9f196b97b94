/* calibrate.h — measuring this machine into a machine profile (`llm4d plan --calibrate`, plan/profile.h).
 *
 *   kernels      the model's own calls at its shapes: the planner's search space for the given model (every
 *                layout of up to max_ranks processes on this host) is recorded (plan/trace.h), and every call not
 *                yet measured is replayed on the real backend, in its trace's order and on buffers of its sizes,
 *                at every thread count up to the cores; the optimizer's passes at a few sizes; the fallback GEMM
 *                and copy rates by threads;
 *   process      a rank's resident size before its model (libraries, MPI, the runtime) for 1 to max_ranks ranks
 *                on the host, and what a short training run holds beyond that base, its data index and its plan
 *                (when the configuration names data that exists);
 *   collectives  all-reduce, reduce-scatter, all-gather and point-to-point by group size, ranks on the host and
 *                bytes, every group busy at once, with what the library allocated for each; given a hostfile,
 *                the same across its hosts;
 *   shares       the recorded model run by k ranks at once against one alone; the overlap rate of a background
 *                all-reduce progressed between kernels, as the engines progress theirs.
 * With machine set (`--calibrate --machine`), the kernels are not the model's but a grid's (plan/grid.h): one-layer
 * GPTs over hidden sizes and sequences, recorded and replayed the same way in fp32 and bf16 (--quick: the asked
 * precision only) at every thread count, each replayed as often as about two seconds allow (at least once after
 * its warm-up), and then, where the time budget allows, the whole grid a second time, the two passes merged kernel
 * by kernel (their mean, or the faster where they differ by more than 1.5x: llm4d_profile_merge_pass), so that a
 * transient slowdown of the machine during one pass does not become the profile; the profile is then marked a
 * machine profile, priced by interpolation in the grid for any model
 * inside it (plan/price.h, plan/coverage.h). A model calibration into the same file later adds that model's own
 * calls on top (they price exactly).
 * The multi-rank measurements run as a job of the hidden verb `__plancal` under `llm4d launch`; they come first,
 * then the kernels until the time budget is spent (the parts not reached are priced from the nearest measured).
 * The profile is written after every job and every model part that measured something, marked unfinished until
 * the end; a re-run into the same file on the same machine and setup continues it (what it holds is kept and not
 * measured again), so an interrupted or budget-bounded calibration loses nothing. A progress line (the part, the
 * time elapsed, an estimate of what is left, the resident size) goes to stderr every few seconds. */
#ifndef LLM4D_PLAN_CALIBRATE_H
#define LLM4D_PLAN_CALIBRATE_H

#include "config/config.h"
#include "plan/profile.h"

typedef struct {
    const char *profile_path;  /* where to write the profile */
    const char *hostfile;      /* NULL: this host only */
    const char *self;          /* this executable (to launch the measuring jobs) */
    const llm4d_config *base;  /* the model whose calls to measure (parsed, not finalized) */
    long long global;          /* its global batch */
    int max_ranks;             /* ranks per host to measure up to */
    int quick;                 /* fewer sizes and repetitions (the tests) */
    double budget_s;           /* seconds after which no new model part is measured (0: no bound) */
    int machine;               /* the kernels over a grid of shapes, not the model's (plan/grid.h) */
    const char *grid;          /* that grid, HIDDENS:SEQUENCES (NULL: LLM4D_GRID_DEFAULT) */
} llm4d_calibrate_opts;

llm4d_code llm4d_calibrate(const llm4d_calibrate_opts *o, llm4d_err *err);

/* The hidden verb's work in one rank of a measuring job (argv: its options); returns the exit code. */
int llm4d_calibrate_worker(int argc, char **argv);

#endif
