/* predict.h — a layout's step time and every rank's peak memory, predicted before anything runs.
 *
 * Memory (predict.c) is the trainer's own plan (plan/memplan.h) of every distinct rank (each pipeline stage, the
 * first rank of a ZeRO group and the others; the libraries' working set of a step included), plus what the profile
 * measured a process to hold besides it (its base by ranks on the host, the residue a training process keeps beyond
 * that base, its data and its plan) and the collective library's temporaries for the rank's largest collectives,
 * plus the data loader's indices when known. Every rank's plan alone (rank_plan) is the trainer's: the same
 * function of the same configuration, coordinates and paths, so `llm4d plan --evaluate` and the run's "memory
 * plan:" line agree (tests/test_memory_plan.sh checks it on every rank of its layouts, to the 0.01 MiB printed).
 *
 * Time (steptime.c): each stage's micro-batch priced from its trace (plan/stagecost.h); the engines'
 * communication walked in the order the model's hooks fire (what the engines really overlap: data-parallel
 * buckets all-reduced as backward completes them, the last one blocking; ZeRO's reduce-scatters in flight in a
 * ring of two; ZeRO-3's gathers prefetched one group ahead; the tensor-parallel collectives blocking), a background
 * collective advancing at the profile's overlap rate while the rank computes and at full rate while it waits; the
 * pipeline's actions run through the schedule simulator (parallel/schedule.h) with the host's cores shared by the
 * stages that compute at once; then the end of the step (the last buckets, the hybrid and embedding all-reduces, the
 * gradient norm, the optimizer and offload's disk traffic, ZeRO-1/2's parameter gathers). */
#ifndef LLM4D_PLAN_PREDICT_H
#define LLM4D_PLAN_PREDICT_H

#include "plan/layout.h"
#include "plan/profile.h"
#include "plan/stagecost.h"

/* Communication by engine. */
enum {
    LLM4D_ENG_TP = 0, /* tensor-parallel collectives inside the model */
    LLM4D_ENG_PP,     /* pipeline sends (their latency on the critical path) */
    LLM4D_ENG_DP,     /* data-parallel gradient all-reduce (and hybrid sharding's over the dp group) */
    LLM4D_ENG_RS,     /* ZeRO gradient reduce-scatters */
    LLM4D_ENG_AG,     /* ZeRO parameter all-gathers (stage 3 in the step; 1 and 2 after the update) */
    LLM4D_ENG_EMB,    /* the tied embedding's all-reduce between the first and last stage */
    LLM4D_ENG_STEP,   /* the step's own: token count, loss, gradient norm */
    LLM4D_ENG_N
};
const char *llm4d_eng_name(int e);

/* Memory by kind, for one rank. */
enum {
    LLM4D_PM_PARAMS = 0, LLM4D_PM_GRADS, LLM4D_PM_OPTIM, LLM4D_PM_ACTS, LLM4D_PM_COMM, LLM4D_PM_WORKSPACE,
    LLM4D_PM_COPIES,   /* the backend's low-precision weight copies */
    LLM4D_PM_OPERANDS, /* the backend's converted GEMM operands */
    LLM4D_PM_MPI,      /* the collective library's temporaries: the plan's (ZeRO's reduce-scatters and the
                        * largest all-reduce on MPI), or the largest measured collective's where that is more */
    LLM4D_PM_SHM,      /* the pages of the shared-memory collectives' segments the rank touches */
    LLM4D_PM_LIBS,     /* the libraries' working set of a step (the last kind of the trainer's plan) */
    LLM4D_PM_BASE,     /* the process before it allocates (libraries, MPI) */
    LLM4D_PM_DATA,     /* the data loader's indices */
    LLM4D_PM_RESIDUAL, /* what a training process holds beyond its base, data and plan (the profile's) */
    LLM4D_PM_N
};
const char *llm4d_pm_name(int k);

typedef struct {
    llm4d_layout layout;
    int world, M, ranks_on_host;
    double step_s, tokens_per_s;
    double compute_s[LLM4D_WORK_N];      /* the critical stage's kernels per step, alone (before sharing) */
    double share_slow;                   /* how much slower they ran sharing the host */
    double exposed_s[LLM4D_ENG_N], hidden_s[LLM4D_ENG_N];
    double bubble_s;                     /* the critical stage's idle time in the schedule */
    double optimizer_s;                  /* the update, the norm's pass, offload's disk traffic */
    int critical_stage;
    double peak_bytes;                   /* the largest rank's */
    int peak_rank;
    double mem[LLM4D_PM_N];              /* the largest rank's, by kind */
    double host_bytes;                   /* the fullest host's sum */
    int bound_time;                      /* over predictor.time_above: step_s is a lower bound, no breakdown */
    int peak_class;                      /* the distinct rank (predict.c) the peak is */
    int bound;                           /* over predictor.reject_above already: peak, stage and host bytes are
                                          * lower bounds, no rank_peak */
    int n_stages;
    double *stage_peak;                  /* [P] the largest rank of each stage */
    double *rank_peak;                   /* [world] every rank (only when asked) */
    double *rank_plan;                   /* [world] every rank's plan alone: the trainer's (with rank_peak) */
    int priced_exact, priced_other;      /* kernel calls priced from an exact measurement, and otherwise */
    llm4d_beyond beyond;                 /* every stage's calls a machine profile's grid did not measure (not in a
                                          * search's step_only pass) */
} llm4d_prediction;

typedef struct {
    const llm4d_profile *prof;
    llm4d_backend *be;            /* the size functions of the memory plan (the run's backend) */
    llm4d_cluster cluster;
    double data_bytes;            /* the data loader's bytes per rank (0: unknown) */
    int per_rank;                 /* fill rank_peak and rank_plan */
    llm4d_stagecost_cache *cache; /* priced traces (required) */
    struct llm4d_memplan_memo *memo; /* the memory plan's model parts (optional: NULL recounts every rank) */
    struct llm4d_sim_memo *sim;   /* pipeline simulations by their inputs (optional: NULL simulates each: simmemo.h) */
    int exhaustive;               /* every rank walked, every shortcut off (the tests' oracle) */
    int step_only;                /* the step time without the pipeline sends' exposed/hidden split (a search) */
    double time_above;            /* > 0: a pipeline bound to take longer than this is not simulated
                                   * (prediction.bound_time; a search's K-th fastest so far) */
    double reject_above;          /* > 0: a layout whose fullest host needs more than this (bytes) without its
                                   * collectives' temporaries stops there (prediction.bound): a search's shortcut */
    double reject_rank_above;     /* > 0: the same for a layout one of whose ranks needs more than this alone (a
                                   * GPU's memory: cluster.memory_per_rank) */
} llm4d_predictor;

/* Which memory limits of cl a prediction is over (LLM4D_OVER_* bits; 0: it fits): the fullest host's sum against
 * memory_per_node, and, where ranks have memory of their own (memory_per_rank > 0), the largest rank against it.
 * The one test of a fit: the search's, its early rejection's thresholds, --evaluate's and the bench's. A rank's
 * every byte counts against its device: the plan is the CPU backend's, which does not say which bytes a GPU run
 * would keep on the device and which in host memory (offload's optimizer states are on disk, not in the plan, but
 * its window is counted as optimizer memory; the profile's base, residue and data indices are a process's host
 * memory), so a GPU's check errs by those bytes on the safe side (0 base and residue in the A100 profile). */
enum { LLM4D_OVER_HOST = 1, LLM4D_OVER_RANK = 2 };
int llm4d_prediction_over(const llm4d_prediction *p, const llm4d_cluster *cl);
/* Why p does not fit (over: llm4d_prediction_over's bits, not 0) in one phrase: its largest rank over the rank's
 * own memory (a GPU's), its fullest host over the host's, or both, in GiB ("at least" for a bound). The one
 * wording of a misfit: --explain's reasons and --evaluate's answer. */
void llm4d_prediction_over_text(const llm4d_prediction *p, const llm4d_cluster *cl, int over, char *buf, size_t n);

/* Predict the layout of cfg (finalized; world = cluster.nodes x cluster.ranks_per_node) with pipeline plan pp. */
llm4d_code llm4d_predict(const llm4d_predictor *pr, const llm4d_config *cfg, const llm4d_pp_plan *pp,
                         llm4d_prediction *out, llm4d_err *err);
void llm4d_prediction_free(llm4d_prediction *p);

/* predict.c: the memory part alone (fills the mem, peak, stage and rank fields). */
llm4d_code llm4d_predict_memory(const llm4d_predictor *pr, const llm4d_config *cfg, const llm4d_pp_plan *pp,
                                llm4d_prediction *out, llm4d_err *err);
/* steptime.c: the time part alone (fills the time fields). */
llm4d_code llm4d_predict_time(const llm4d_predictor *pr, const llm4d_config *cfg, const llm4d_pp_plan *pp,
                              llm4d_prediction *out, llm4d_err *err);

/* steptime.c: the collectives the engines of stage `stage`'s first rank issue in a step (parallel/traffic.h), as
 * the time part reads them: overlap, whether the data-parallel buckets start during backward (dp_overlap). */
llm4d_code llm4d_predict_traffic(const llm4d_predictor *pr, const llm4d_config *cfg, const llm4d_pp_plan *pp,
                                 int stage, int overlap, llm4d_traffic *out, llm4d_err *err);

/* The hosts a group along axis a of the rank at topo spans, with ranks_per_node consecutive ranks per host. */
int llm4d_group_hosts(const llm4d_topology *topo, int axis, int ranks_per_node);

#endif
