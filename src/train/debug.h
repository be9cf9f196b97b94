/* debug.h — the test facilities of `llm4d train`, stated once: taken out of its arguments by cli/job.c
 * (llm4d_job_take_debug), handed to the trainer in its options, and acted on in train/debug.c, so the step loop
 * (step.c) carries one call where a test bends it. None of them is a user's setting: they exist for the tests named
 * beside them. */
#ifndef LLM4D_TRAIN_DEBUG_H
#define LLM4D_TRAIN_DEBUG_H

#include <stdint.h>

typedef struct {
    const char *debug_dump;       /* --debug_dump DIR: tests/test_torch_parity.sh (world rank 0 only) */
    int check_replicas;           /* --debug_check_replicas: tests/test_dp.sh, test_sharding.sh, test_tp.sh */
    int64_t inject_inf_step;      /* --debug_inject_inf_step N: tests/test_amp.sh, test_nonfinite.sh (0: never) */
    const char *inject_inf_param; /* --debug_inject_inf_param NAMES: the tensors that overflow (NULL: the first) */
    int64_t loss_spike_step;      /* --debug_loss_spike_step N: step N's loss reported 10 x (test_nonfinite.sh) */
    int64_t hang_step;            /* --debug_hang_step N [--debug_hang_rank R]: world rank R (default 1) stops */
    int hang_rank;                /*   answering at step N, as a rank stuck in a kernel would (test_watchdog.sh) */
    long long mem_available;      /* --debug_mem_available BYTES: the host's available memory for the memory plan
                                   * (test_memory_plan.sh; 0: the kernel's) */
} llm4d_debug;

#endif
