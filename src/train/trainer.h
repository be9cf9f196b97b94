/* trainer.h — one training run: build everything from a validated config, then run the step loop.
 *
 * A step: read this rank's rows of the global batch; zero gradients; for each micro-batch, forward with the loss
 * gradient weights mask/count (count = unmasked tokens in the WHOLE global batch, so accumulation and data
 * parallelism never change the value) and backward; global-norm clip; AdamW at lr(step); log. */
#ifndef LLM4D_TRAIN_TRAINER_H
#define LLM4D_TRAIN_TRAINER_H

#include <stdio.h>

#include "backend/backend.h"
#include "config/config.h"
#include "core/log.h"
#include "core/mem.h"
#include "data/corpus.h"
#include "data/loader.h"
#include "dist/comm.h"
#include "dist/topology.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "optim/lr.h"
#include "parallel/data_parallel.h"

typedef struct {
    const llm4d_config *cfg;
    llm4d_backend *be;
    llm4d_mem mem;
    llm4d_gpt model;
    llm4d_adamw opt;
    llm4d_corpus corpus;
    llm4d_loader loader;
    llm4d_batch batch;
    llm4d_lr_schedule lr;
    llm4d_log log;
    FILE *metrics;
    float *dloss;           /* [micro_batch * T] loss-gradient weights of one micro-batch */
    int world_size;
    llm4d_topology topo;
    llm4d_comm_groups *groups; /* borrowed */
    llm4d_dp dp;
    int have_dp;
    int check_replicas;        /* test facility: log a hash of the parameters after every step */
    int is_writer;             /* world rank 0 writes metrics.jsonl and dumps */
    double flops_per_token;
    const char *debug_dump; /* test facility: directory to dump initial weights, first logits/grads, batches */
    int have_corpus, have_model, have_opt, have_batch;
} llm4d_trainer;

/* groups: the communicators of topo (llm4d_comm_groups_create), shared by every rank of the job. */
llm4d_code llm4d_trainer_init(llm4d_trainer *tr, const llm4d_config *cfg, const llm4d_topology *topo,
                              llm4d_comm_groups *groups, const char *debug_dump, llm4d_err *err);
llm4d_code llm4d_trainer_run(llm4d_trainer *tr, llm4d_err *err);
void llm4d_trainer_free(llm4d_trainer *tr);

#endif
