/* job.c — configuration, topology and communicators of a train/eval job (see job.h). */
#include "cli/job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/backend.h"
#include "ckpt/gpt_ckpt.h"
#include "data/blend.h"
#include "comm/host_check.h"
#include "core/log.h"
#include "parallel/pipeline.h"

int llm4d_job_take_debug(int argc, char **argv, char **args, llm4d_debug *dbg) {
    *dbg = (llm4d_debug){.hang_rank = 1};
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--debug_dump") && i + 1 < argc) {
            dbg->debug_dump = argv[++i];
            continue;
        }
        if (!strcmp(argv[i], "--debug_inject_inf_step") && i + 1 < argc) {
            dbg->inject_inf_step = atoll(argv[++i]);
            continue;
        }
        if (!strcmp(argv[i], "--debug_inject_inf_param") && i + 1 < argc) {
            dbg->inject_inf_param = argv[++i];
            continue;
        }
        if (!strcmp(argv[i], "--debug_loss_spike_step") && i + 1 < argc) {
            dbg->loss_spike_step = atoll(argv[++i]);
            continue;
        }
        if (!strcmp(argv[i], "--debug_hang_step") && i + 1 < argc) {
            dbg->hang_step = atoll(argv[++i]);
            continue;
        }
        if (!strcmp(argv[i], "--debug_mem_available") && i + 1 < argc) {
            dbg->mem_available = atoll(argv[++i]);
            continue;
        }
        if (!strcmp(argv[i], "--debug_hang_rank") && i + 1 < argc) {
            dbg->hang_rank = atoi(argv[++i]);
            continue;
        }
        if (!strcmp(argv[i], "--debug_check_replicas")) {
            dbg->check_replicas = 1;
            continue;
        }
        args[n++] = argv[i];
    }
    args[n] = NULL;
    return n;
}

llm4d_code llm4d_job_config(int argc, char **argv, int world, llm4d_config *cfg, llm4d_pp_plan *plan,
                            llm4d_err *err) {
    llm4d_config_defaults(cfg);
    LLM4D_TRY(llm4d_config_parse_args(cfg, argc - 1, argv + 1, err));
    /* model_name_or_path naming a checkpoint: the model's geometry comes from its meta.json */
    struct stat st;
    if (cfg->model.name_or_path[0] && stat(cfg->model.name_or_path, &st) == 0 && S_ISDIR(st.st_mode))
        LLM4D_TRY(llm4d_gpt_ckpt_read_model(cfg->model.name_or_path, &cfg->model,
                                            cfg->model.vocab_size_divisible_unit, err));
    LLM4D_TRY(llm4d_config_finalize(cfg, world, err));
    if (!plan && cfg->dist.pp_degree == 1 && !cfg->dist.pp_layers[0]) return LLM4D_OK; /* nothing to check */
    /* the pipeline: its schedule for this many micro-batches, and a split of the layers that holds each once (made
     * once per process: the launcher refuses a bad one before any rank starts, a rank hands its own to the trainer) */
    llm4d_pp_plan own;
    llm4d_pp_plan *p = plan ? plan : &own;
    const llm4d_code rc = llm4d_pp_plan_make(p, cfg, err);
    if (rc != LLM4D_OK || !plan) llm4d_pp_plan_free(p);
    return rc;
}

/* The backend cfg names, made and destroyed in a child process: its error, if any, comes back through a pipe. A
 * child, because a device's runtime (CUDA's) once started in the launcher would stay there for the whole job. */
static llm4d_code probe_device(const llm4d_config *cfg, llm4d_err *err) {
    int fds[2];
    if (pipe(fds) != 0) return LLM4D_OK; /* not checked here: the ranks will say it */
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return LLM4D_OK;
    }
    if (pid == 0) {
        close(fds[0]);
        llm4d_backend *be = NULL;
        llm4d_err e = {0};
        /* before MPI: no host rank, GPU 0 (the question is only whether the device works) */
        const llm4d_backend_opts o = {.device = cfg->device, .ref = cfg->backend_ref, .nthreads = 1};
        if (llm4d_backend_create(&be, &o, &e) != LLM4D_OK) {
            const ssize_t n = write(fds[1], &e, sizeof e);
            (void)n;
        } else if (be->destroy) {
            be->destroy(be);
        }
        _exit(0);
    }
    close(fds[1]);
    llm4d_err got = {0};
    size_t have = 0;
    for (ssize_t n; have < sizeof got && (n = read(fds[0], (char *)&got + have, sizeof got - have)) > 0;)
        have += (size_t)n;
    close(fds[0]);
    waitpid(pid, NULL, 0);
    if (have != sizeof got || got.code == LLM4D_OK) return LLM4D_OK;
    got.msg[sizeof got.msg - 1] = 0;
    return llm4d_fail(err, got.code, "%s", got.msg);
}

llm4d_code llm4d_job_precheck(const llm4d_config *cfg, llm4d_err *err) {
    if (strcmp(cfg->device, "cpu")) LLM4D_TRY(probe_device(cfg, err));
    llm4d_corpora cs;
    memset(&cs, 0, sizeof cs);
    LLM4D_TRY(llm4d_corpora_open(&cs, cfg->data.input_dir, err));
    llm4d_code rc = LLM4D_OK;
    for (int d = 0; d < cs.n && rc == LLM4D_OK; d++) /* as the trainer says it (train/trainer.c) */
        if (cs.corpus[d].max_id >= cfg->model.vocab_size)
            rc = llm4d_fail(err, LLM4D_EUSER, "%s holds token id %lld, but the model's vocab_size is %d; tokenize "
                            "with the model's vocabulary or raise Model.vocab_size", cs.corpus[d].path,
                            (long long)cs.corpus[d].max_id, cfg->model.vocab_size);
    llm4d_corpora_close(&cs);
    return rc;
}

/* The topology of the configured job and its communicators. */
static llm4d_code job_groups(const llm4d_runtime *rt, int print_groups, llm4d_config *cfg, llm4d_topology *topo,
                             llm4d_comm_groups *groups, llm4d_err *err) {
    if (rt->world && rt->world->watch) llm4d_watch_set(rt->world->watch, 0, cfg->dist.comm_timeout_first);
    LLM4D_TRY(llm4d_topology_init(topo, rt->world_size, rt->rank, cfg->dist.dp_degree, cfg->dist.pp_degree,
                                  cfg->dist.sharding_degree, cfg->dist.mp_degree, err));
    const llm4d_log log = {.out = stdout, .enabled = 1};
    if (print_groups && rt->world_size > 1) llm4d_topology_print(topo, &log);
    /* the collectives' paths (comm_shm.h), chosen by each group as it is split from the world */
    if (rt->world_size > 1 && !rt->world->hub)
        LLM4D_TRY(llm4d_comm_use_paths(rt->world, cfg->dist.comm_path, (size_t)cfg->dist.comm_chunk_kb << 10,
                                       !strcmp(cfg->dist.comm_progress, "thread"), err));
    LLM4D_TRY(llm4d_comm_groups_create(groups, rt->world, topo, err));
    if (print_groups && rt->world_size > 1) llm4d_comm_groups_print_paths(groups, &log);
    int problems = 0; /* single copy and /dev/shm, said once (world rank 0) */
    if (rt->world_size > 1 && rt->under_mpi) LLM4D_TRY(llm4d_host_check(rt->world, &log, &problems, err));
    return LLM4D_OK;
}

llm4d_code llm4d_job_setup(const llm4d_runtime *rt, int argc, char **argv, int print_groups, const llm4d_job_parts *job,
                           llm4d_err *err) {
    LLM4D_TRY(llm4d_job_config(argc, argv, rt->world_size, job->cfg, job->plan, err));
    const llm4d_code rc = job_groups(rt, print_groups, job->cfg, job->topo, job->groups, err);
    if (rc != LLM4D_OK) llm4d_pp_plan_free(job->plan);
    return rc;
}
