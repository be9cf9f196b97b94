/* job.h — the common start of the verbs that run the model over a job (train, eval). */
#ifndef LLM4D_CLI_JOB_H
#define LLM4D_CLI_JOB_H

#include "config/config.h"
#include "comm/comm.h"
#include "comm/runtime.h"
#include "comm/topology.h"

/* On an initialised runtime: defaults, parse argv (argv[0] is the verb), take the model geometry from
 * model_name_or_path when it names a checkpoint directory, finalize for the runtime's world size, build the
 * topology (printed when print_groups and there are several processes) and its communicators. */
llm4d_code llm4d_job_setup(const llm4d_runtime *rt, int argc, char **argv, int print_groups, llm4d_config *cfg,
                           llm4d_topology *topo, llm4d_comm_groups *groups, llm4d_err *err);

#endif
