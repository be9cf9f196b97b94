/* job.c — configuration, topology and communicators of a train/eval job (see job.h). */
#include "cli/job.h"

#include <stdio.h>
#include <sys/stat.h>

#include "ckpt/gpt_ckpt.h"
#include "core/log.h"

llm4d_code llm4d_job_setup(const llm4d_runtime *rt, int argc, char **argv, int print_groups, llm4d_config *cfg,
                           llm4d_topology *topo, llm4d_comm_groups *groups, llm4d_err *err) {
    llm4d_config_defaults(cfg);
    LLM4D_TRY(llm4d_config_parse_args(cfg, argc - 1, argv + 1, err));
    /* model_name_or_path naming a checkpoint: the model's geometry comes from its meta.json */
    struct stat st;
    if (cfg->model.name_or_path[0] && stat(cfg->model.name_or_path, &st) == 0 && S_ISDIR(st.st_mode))
        LLM4D_TRY(llm4d_gpt_ckpt_read_model(cfg->model.name_or_path, &cfg->model,
                                            cfg->model.vocab_size_divisible_unit, err));
    LLM4D_TRY(llm4d_config_finalize(cfg, rt->world_size, err));
    LLM4D_TRY(llm4d_topology_init(topo, rt->world_size, rt->rank, cfg->dist.dp_degree, cfg->dist.pp_degree,
                                  cfg->dist.sharding_degree, cfg->dist.mp_degree, err));
    if (print_groups && rt->world_size > 1) {
        const llm4d_log log = {.out = stdout, .enabled = 1};
        llm4d_topology_print(topo, &log);
    }
    return llm4d_comm_groups_create(groups, rt->world, topo, err);
}
