/* verb_train.c — `llm4d train`: start the distributed runtime (MPI only when an MPI launcher started us), parse and
 * validate the configuration for the job's world size, build the 4D topology and its communicators, then train.
 * A user error on any rank is printed once, as one line, and ends the whole job with exit code 2: in a job of one
 * process as `llm4d train: <message>`, the verbs' form (cli.h); in a job of several as the runtime's
 * `llm4d: rank R: <message>`, which also aborts the other ranks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/job.h"
#include "config/config.h"
#include "comm/runtime.h"
#include "comm/topology.h"
#include "train/trainer.h"

int llm4d_cmd_train(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            llm4d_config_print_help(stdout);
            return 0;
        }
    /* --debug_dump DIR, --debug_check_replicas, --debug_inject_inf_*, --debug_loss_spike_step: test facilities
     * (job.h) */
    char **args = calloc((size_t)argc + 1, sizeof *args);
    llm4d_config *cfg = calloc(1, sizeof *cfg);
    if (!args || !cfg) return fprintf(stderr, "llm4d train: out of memory\n"), 1;
    llm4d_debug dbg;
    const int n = llm4d_job_take_debug(argc, argv, args, &dbg);

    llm4d_err err = {0};
    llm4d_runtime rt;
    /* on the early failures below, free what was allocated so far: the sanitizer build's leak check is clean */
    if (llm4d_runtime_init(&rt, NULL, NULL, &err) != LLM4D_OK) {
        free(cfg), free(args);
        return llm4d_runtime_fail(NULL, "train", &err);
    }
    llm4d_topology topo;
    llm4d_comm_groups groups = {0};
    llm4d_pp_plan plan = {0}; /* made once, checked and handed to the trainer */
    if (llm4d_job_setup(&rt, n, args, 1, &(llm4d_job_parts){cfg, &plan, &topo, &groups}, &err) != LLM4D_OK) {
        free(cfg), free(args);
        return llm4d_runtime_fail(&rt, "train", &err);
    }
    llm4d_trainer tr;
    const llm4d_trainer_opts opts = {.debug = dbg, .plan = &plan};
    const int ok = llm4d_trainer_init(&tr, cfg, &topo, &groups, &opts, &err) == LLM4D_OK &&
                   llm4d_trainer_run(&tr, &err) == LLM4D_OK;
    llm4d_trainer_free(&tr);
    llm4d_comm_groups_destroy(&groups);
    free(cfg);
    free(args);
    if (!ok) return llm4d_runtime_fail(&rt, "train", &err); /* aborts the job when there are several processes */
    llm4d_runtime_finalize(&rt);
    return 0;
}
