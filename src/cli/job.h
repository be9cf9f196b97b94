/* job.h — the common start of the verbs that run the model over a job (train, eval). */
#ifndef LLM4D_CLI_JOB_H
#define LLM4D_CLI_JOB_H

#include "config/config.h"
#include "comm/comm.h"
#include "comm/runtime.h"
#include "comm/topology.h"
#include "parallel/pp_plan.h"
#include "train/debug.h"

/* args (argc + 1 entries) = argv without the test facilities' --debug_* flags (train/debug.h), which go to *dbg;
 * returns the count left. */
int llm4d_job_take_debug(int argc, char **argv, char **args, llm4d_debug *dbg);

/* Defaults, parse argv (argv[0] is the verb), the model geometry of a checkpoint named by model_name_or_path,
 * finalized for `world` processes, and the pipeline's plan: every check a job's configuration gets (the launcher
 * runs it before starting the processes, so a bad configuration is one line, not one per rank). plan: where the
 * plan goes (the caller frees it, or hands it to the trainer); NULL: only checked (the launcher, a process apart
 * from the ones that train). */
llm4d_code llm4d_job_config(int argc, char **argv, int world, llm4d_config *cfg, llm4d_pp_plan *plan,
                            llm4d_err *err);

/* What the launcher checks of a configured job (llm4d_job_config) on its own host before any rank starts, so that
 * the errors every rank would hit alike are one line rather than one per rank under mpirun: that the device exists
 * in this build and opens here (any device but cpu, tried in a child process, which exits at once: the launcher
 * holds no backend while the ranks run), and that input_dir names corpora that open and fit the vocabulary (the
 * trainer's own checks, data/blend.h). Only for jobs whose ranks all run on this host: with a hostfile the data
 * and the devices are the other hosts'. */
llm4d_code llm4d_job_precheck(const llm4d_config *cfg, llm4d_err *err);

/* What a rank's job is made of, as llm4d_job_setup fills it (the caller's storage): the configuration, the
 * pipeline's plan, the topology and its communicators. */
typedef struct {
    llm4d_config *cfg;
    llm4d_pp_plan *plan;
    llm4d_topology *topo;
    llm4d_comm_groups *groups;
} llm4d_job_parts;

/* On an initialised runtime: defaults, parse argv (argv[0] is the verb) into *job->cfg, take the model geometry from
 * model_name_or_path when it names a checkpoint directory, finalize for the runtime's world size, build the
 * topology (printed when print_groups and there are several processes) and its communicators; the pipeline's plan
 * into *job->plan (for the trainer, llm4d_trainer_opts.plan; freed here when a later step fails). */
llm4d_code llm4d_job_setup(const llm4d_runtime *rt, int argc, char **argv, int print_groups, const llm4d_job_parts *job,
                           llm4d_err *err);

#endif
