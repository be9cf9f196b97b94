/* data_mem.h — the resident bytes a rank's data loaders hold, measured by opening the run's data as the trainer
 * does (data_mem.c). */
#ifndef LLM4D_PLAN_DATA_MEM_H
#define LLM4D_PLAN_DATA_MEM_H

#include "config/config.h"

/* cfg finalized; data_world: the ranks that read different samples (dp x sharding). An input_dir that does not
 * exist (a plan made before the data) gives 0; one that exists but cannot be read is the loader's user error. */
llm4d_code llm4d_plan_data_bytes(const llm4d_config *cfg, int data_world, double *bytes, llm4d_err *err);

#endif
