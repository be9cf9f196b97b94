/* verb_eval.c — `llm4d eval -c cfg.yaml --ckpt DIR [train's options]`: the validation loss and perplexity of a
 * checkpoint, over eval_iters global batches of the validation split, exactly as training's periodic evaluation
 * computes them (same data order, same normalisation); any process layout train accepts works here too. It is a
 * forward pass only: the engine stack is built without gradients and optimizer state (config.h forward_only), the
 * memory plan says so, and the plan is set against the peak resident set at the end, as train does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli/cli.h"
#include "cli/job.h"
#include "config/config.h"
#include "comm/runtime.h"
#include "train/trainer.h"

int llm4d_cmd_eval(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: llm4d eval --ckpt DIR [-c config.yaml] [train's options]\n"
                   "Evaluates the checkpoint DIR (an output_dir or a step_<N> directory) on eval_iters batches of the\n"
                   "validation split and prints `eval step N, loss: L, ppl: P`. Options are train's (llm4d train --help).\n");
            return 0;
        }
    const char *ckpt = NULL;
    char **args = calloc((size_t)argc + 1, sizeof *args);
    llm4d_config *cfg = calloc(1, sizeof *cfg);
    if (!args || !cfg) return fprintf(stderr, "llm4d eval: out of memory\n"), 1;
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--ckpt") && i + 1 < argc) {
            ckpt = argv[++i];
            continue;
        }
        args[n++] = argv[i];
    }
    llm4d_err err = {0};
    if (!ckpt) {
        llm4d_fail(&err, LLM4D_EUSER, "no checkpoint to evaluate: give --ckpt DIR (a step_<N> directory or an output_dir holding one)");
        free(cfg), free(args);
        return llm4d_runtime_fail(NULL, "eval", &err);
    }
    llm4d_runtime rt;
    /* on the early failures below, free what was allocated so far: the sanitizer build's leak check is clean */
    if (llm4d_runtime_init(&rt, NULL, NULL, &err) != LLM4D_OK) {
        free(cfg), free(args);
        return llm4d_runtime_fail(NULL, "eval", &err);
    }
    llm4d_topology topo;
    llm4d_comm_groups groups = {0};
    llm4d_pp_plan plan = {0}; /* made once, checked and handed to the trainer */
    if (llm4d_job_setup(&rt, n, args, 0, &(llm4d_job_parts){cfg, &plan, &topo, &groups}, &err) != LLM4D_OK) {
        free(cfg), free(args);
        return llm4d_runtime_fail(&rt, "eval", &err);
    }
    snprintf(cfg->ckpt_dir, sizeof cfg->ckpt_dir, "%s", ckpt);
    if (cfg->eval_iters < 1) cfg->eval_iters = 10;
    cfg->forward_only = 1;
    llm4d_trainer tr;
    const llm4d_trainer_opts opts = {.eval_only = 1, .plan = &plan};
    double loss = 0;
    int ok = llm4d_trainer_init(&tr, cfg, &topo, &groups, &opts, &err) == LLM4D_OK;
    tr.eval_next = 0; /* from the start of the validation split, whatever the run had reached */
    ok = ok && llm4d_trainer_eval(&tr, tr.last_saved, &loss, &err) == LLM4D_OK;
    if (ok && tr.log.enabled && tr.plan_total > 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        llm4d_log_info(&tr.log, "memory plan against the run: planned %.2f MiB, peak resident set %.2f MiB (%+.1f%%)",
                       tr.plan_total / 1048576.0, ru.ru_maxrss / 1024.0,
                       100.0 * (ru.ru_maxrss * 1024.0 - (double)tr.plan_total) / (double)tr.plan_total);
    }
    llm4d_trainer_free(&tr);
    llm4d_comm_groups_destroy(&groups);
    free(cfg);
    free(args);
    if (!ok) return llm4d_runtime_fail(&rt, "eval", &err);
    llm4d_runtime_finalize(&rt);
    return 0;
}
