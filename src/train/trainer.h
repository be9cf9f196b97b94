/* trainer.h — one training run: build everything from a validated config, then run the step loop.
 *
 * A step: read this rank's rows of the global batch (prefetched); arm the parallel engines (parallel/engine.h);
 * for each micro-batch, forward with the loss-gradient weights mask/count (count = unmasked tokens in the WHOLE
 * global batch, over every data rank, so accumulation, data parallelism and sharding never change the value) and
 * backward, the engines reducing gradients as backward produces them; finish the reductions; global-norm clip
 * (the norm summed over the world, each element counted once); AdamW at lr(step); log; evaluate every eval_freq
 * steps; save every save_steps steps and at the end. The trainer does not know which engines run: it drives the
 * stack built at start-up from the degrees.
 *
 * Files: trainer.c (building and freeing), step.c (the loop, the log line, metrics.jsonl), eval.c (validation
 * loss), checkpoint.c (save, resume, start from weights), async_save.c (--async_save: saves written by a background
 * thread), debug.c (test-facility dumps), predict_run.c (the planner's prediction for the run, and its error). */
#ifndef LLM4D_TRAIN_TRAINER_H
#define LLM4D_TRAIN_TRAINER_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "backend/backend.h"
#include "ckpt/gpt_ckpt.h"
#include "config/config.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/trace.h"
#include "data/blend.h"
#include "data/corpus.h"
#include "data/loader.h"
#include "comm/comm.h"
#include "comm/topology.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "optim/lr.h"
#include "train/debug.h"
#include "train/devbatch.h"
#include "parallel/engine.h"
#include "parallel/executor.h"
#include "parallel/pp_plan.h"

typedef struct {
    const llm4d_config *cfg;
    llm4d_backend *be;
    llm4d_mem mem;
    llm4d_gpt model;
    llm4d_engine_stack engines;  /* what the trainer drives (parallel/stack.h builds it from the configuration) */
    llm4d_pp_plan ppplan;      /* the pipeline's schedule and split, decided once (parallel/pp_plan.h; P = 1: none) */
    llm4d_executor *exec;      /* what runs a step's micro-batches (the stack's: the pipeline's or the sequential) */
    llm4d_micro *mbs;          /* [accumulate_steps] the micro-batches of a step */
    llm4d_devbatch batch;      /* the step's rows in device memory */
    llm4d_corpora corpora;     /* the corpora input_dir names (data/blend.h), read by both loaders */
    llm4d_loader loader;       /* train split */
    llm4d_loader eval_loader;  /* validation split */
    int64_t eval_next;         /* next validation batch: evaluations continue where the last one stopped */
    llm4d_lr_schedule lr;
    llm4d_log log;
    FILE *metrics;
    llm4d_topology topo;
    llm4d_comm_groups *groups; /* borrowed */
    llm4d_comm_device *comm_dev; /* the data plane's device, attached to the groups for the run */
    int world_size;
    int is_writer;             /* world rank 0 writes metrics.jsonl, checkpoints and dumps */
    cJSON *runinfo;            /* run.json as written at start-up (rank 0), kept to add how the run ended */
    double flops_per_token;
    double peak_gflops; /* this rank's matmul rate measured at start-up (the MFU denominator); 0: unknown */
    int64_t start_step;        /* first step to run: 1, or the step after a resumed checkpoint */
    int64_t last_saved;        /* step of the last checkpoint written (or loaded) */
    struct llm4d_async_save *async; /* --async_save: the snapshot and the pending save (async_save.c); NULL: off */
    double last_loss;
    /* mixed precision: fp16 scales the loss (dynamic, Paddle's GradScaler), bf16 does not (scale 1) */
    llm4d_precision precision;
    double loss_scale;
    int64_t good_steps;        /* finite steps since the scale last changed */
    llm4d_debug debug;         /* the test facilities (debug.h; debug_dump on the writer only) */
    size_t plan[LLM4D_MEM_NCATEGORIES]; /* memplan.c: what each category will hold */
    size_t plan_base, plan_total; /* resident before allocating; the whole plan (bytes) */
    double recent_loss[LLM4D_LOSS_WINDOW_MAX]; /* the loss spike guard's ring of the last steps' losses */
    int n_recent;              /* losses in the ring (at most loss_spike_window) */
    int64_t spikes_skipped;
    llm4d_trace *trace;        /* --trace: this rank's timeline of the traced steps (trace_run.c); NULL: off */
    struct {                   /* predict_run.c: the planner's prediction for this run (costs NULL: none) */
        double step_s, peak_bytes; /* seconds per step; this rank's peak */
        double *costs;         /* [max_steps] this rank's steps after the first */
        int64_t n;
        int failed;            /* line: why there is none */
        char line[LLM4D_PATH_MAX + 512];
    } pred;
    int have_corpus, have_model, have_engines, have_loader, have_eval;
} llm4d_trainer;

typedef struct {
    llm4d_debug debug;         /* the test facilities (debug.h); zero: none */
    int eval_only;             /* `llm4d eval`: no training loader, an evaluation loader of eval_iters batches */
    llm4d_pp_plan *plan;       /* cfg's pipeline plan as llm4d_job_setup made it, taken over (left zeroed); NULL:
                                * the trainer makes it */
} llm4d_trainer_opts;

/* groups: the communicators of topo (llm4d_comm_groups_create), shared by every rank of the job. Loads the
 * checkpoint named by ckpt_dir or model_name_or_path (a directory), if any. */
llm4d_code llm4d_trainer_init(llm4d_trainer *tr, const llm4d_config *cfg, const llm4d_topology *topo,
                              llm4d_comm_groups *groups, const llm4d_trainer_opts *opts, llm4d_err *err);
llm4d_code llm4d_trainer_run(llm4d_trainer *tr, llm4d_err *err);
void llm4d_trainer_free(llm4d_trainer *tr);
/* Log `title`, then the memory table (held and peak MiB per category) of this process. */
void llm4d_trainer_log_memory(const llm4d_trainer *tr, const char *title);

/* memplan.c: this rank's memory plan (train/memplan.h: its model part and layout, tr->ppplan's pipeline, its
 * engines) on top of what the process holds now, logged; a user error when it cannot fit in the memory available
 * to it. Nothing of the model is allocated yet. */
llm4d_code llm4d_trainer_plan(llm4d_trainer *tr, llm4d_err *err);

/* eval.c: loss over eval_iters validation batches (every rank gets the same value); logs and records it. */
llm4d_code llm4d_trainer_eval(llm4d_trainer *tr, int64_t step, double *loss, llm4d_err *err);
/* checkpoint.c */
llm4d_code llm4d_trainer_save(llm4d_trainer *tr, int64_t step, llm4d_err *err);
llm4d_code llm4d_trainer_load(llm4d_trainer *tr, const char *path, int require_optim, llm4d_err *err);
/* async_save.c (--async_save). init: the snapshot, allocated once (nothing when async_save is off). save_async: the
 * snapshot of step's state taken and its writer thread started (llm4d_trainer_save calls it; meta: its meta.json).
 * save_poll, called by every rank at the same steps: when every rank's writer is done (wait: after waiting for this
 * rank's), the pending save is published, or its failure returned (the synchronous save's one line); nothing
 * pending: OK. settle: a run stopping on an error finishes a pending save as far as is safe (async_save.c). */
llm4d_code llm4d_trainer_async_init(llm4d_trainer *tr, llm4d_err *err);
/* The checkpoint's view of the storage engine's state st, opened on the host as h (train/checkpoint.c). */
llm4d_ckpt_state llm4d_trainer_ckpt_state(const llm4d_trainer *tr, const llm4d_engine_state *st,
                                         const llm4d_state_host *h);
/* Where the run's save of step goes (output_dir, keep_last; a job of one writes untagged files). */
llm4d_ckpt_dest llm4d_trainer_ckpt_dest(const llm4d_trainer *tr, int64_t step, int writes);
llm4d_code llm4d_trainer_save_async(llm4d_trainer *tr, int64_t step, const cJSON *meta, llm4d_err *err);
llm4d_code llm4d_trainer_save_poll(llm4d_trainer *tr, int64_t step, int wait, llm4d_err *err);
void llm4d_trainer_save_settle(llm4d_trainer *tr);
void llm4d_trainer_async_free(llm4d_trainer *tr);
/* pp_log.c: the end of a pipelined run, logged on the first stage's writer (collective over the pipe group): each
 * stage's computing against the split's prediction, its waiting share against the schedule's own. mine: busy, idle,
 * F, B, W of this stage (per step, per action). */
llm4d_code llm4d_trainer_log_pipeline(llm4d_trainer *tr, const double mine[5], llm4d_err *err);
/* debug.c */
/* The test facilities' bends of a step (debug.c): world rank hang_rank stops answering at hang_step; after the
 * backward of inject_inf_step the gradients of the named tensors (or the first) overflow, and loss_spike_step's
 * loss is reported 10 x. */
void llm4d_trainer_debug_hang(const llm4d_trainer *tr, int64_t step);
void llm4d_trainer_debug_after_backward(llm4d_trainer *tr, int64_t step, double *loss);
llm4d_code llm4d_trainer_dump_init(llm4d_trainer *tr, llm4d_err *err);
llm4d_code llm4d_trainer_dump_step(llm4d_trainer *tr, int64_t step, const llm4d_batch *b, int after_backward,
                                   llm4d_err *err);
/* step.c: upload b with loss-gradient weights mask x w and run its micro-batches through the executor (train:
 * forward and backward with dropout; else forward only); *loss: this rank's share of the weighted loss */
llm4d_code llm4d_trainer_run_batch(llm4d_trainer *tr, int64_t step, const llm4d_batch *b, double w, int train,
                                   double *loss, llm4d_err *err);
/* step.c: a step's loss from each rank's share (summed over the data ranks and the pipeline stages) */
llm4d_code llm4d_trainer_global_loss(llm4d_trainer *tr, double *loss, llm4d_err *err);
/* trace_run.c: open this rank's trace when --trace is set (collective: the ranks agree on a time origin); after
 * each step, record its span and write the file after the last traced step; close (writing what a run that stopped
 * inside its traced steps recorded). */
llm4d_code llm4d_trainer_trace_open(llm4d_trainer *tr, llm4d_err *err);
llm4d_code llm4d_trainer_trace_step_end(llm4d_trainer *tr, int64_t step, double t0, double t1, llm4d_err *err);
void llm4d_trainer_trace_close(llm4d_trainer *tr);
/* predict_run.c: with a machine profile, predict this run's layout (before the data and the model are allocated),
 * log the prediction (after the start-up lines), record each step's seconds, and log measured against predicted at
 * the end; a profile the user named that does not load is a user error. */
llm4d_code llm4d_trainer_predict_start(llm4d_trainer *tr, llm4d_err *err);
void llm4d_trainer_predict_log(const llm4d_trainer *tr);
void llm4d_trainer_predict_step(llm4d_trainer *tr, int64_t step, double seconds);
void llm4d_trainer_predict_end(llm4d_trainer *tr);
/* runinfo.c: rank 0 writes output_dir/run.json (version, machine, layout, configuration, its process) for `llm4d
 * report`, and adds how the run ended when it ends (failed: NULL when it finished); a failure to add it is logged. */
llm4d_code llm4d_trainer_write_runinfo(llm4d_trainer *tr, llm4d_err *err);
void llm4d_trainer_runinfo_end(llm4d_trainer *tr, const llm4d_err *failed);
/* step.c: every rank returns the same code (a failure on one rank is agreed on through the world communicator) */
llm4d_code llm4d_trainer_agree(llm4d_trainer *tr, llm4d_code rc, llm4d_err *err);

#endif
