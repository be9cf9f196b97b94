/* data_mem.c — what a rank's data loaders hold (plan/data_mem.h): the corpora as they are read and the samples'
 * indices, measured by opening them in this process exactly as the trainer does (train/trainer.c: the training
 * split, and the validation split when evaluation is on), without writing an index cache: the resident size
 * before and after. The data is the same on every rank (each builds the whole index), so one measurement serves
 * them all. */
#include "plan/data_mem.h"

#include <string.h>
#include <sys/stat.h>

#include "core/heap.h"
#include "core/proc.h"
#include "data/blend.h"
#include "data/gpt_index.h"
#include "data/loader.h"

llm4d_code llm4d_plan_data_bytes(const llm4d_config *cfg, int data_world, double *bytes, llm4d_err *err) {
    *bytes = 0;
    if (!cfg->data.input_dir[0] || !strcmp(cfg->data.input_dir, "(planning)")) return LLM4D_OK;
    /* from the heap's live size: free heap pages the indices would reuse made them read 0 in a trainer that had
     * freed its start-up measurement's operands, 1.4 MiB in `plan --evaluate` */
    const long long before = llm4d_heap_resident();
    llm4d_corpora cs;
    struct stat st;
    const llm4d_code orc = llm4d_corpora_open(&cs, cfg->data.input_dir, err);
    if (orc != LLM4D_OK && stat(cfg->data.input_dir, &st) != 0) return LLM4D_OK; /* planned before the data exists */
    LLM4D_TRY(orc);
    llm4d_mem mem = {0};
    llm4d_loader ld[2];
    int have[2] = {0, 0};
    llm4d_loader_opts o = {.split = cfg->data.split, .T = cfg->data.max_seq_len, .seed = (int64_t)cfg->seed,
                           .global_batch = cfg->global_batch_size, .local_batch = (int)cfg->local_batch_size,
                           .data_rank = 0, .data_world = data_world, .eos_id = cfg->model.eos_token_id,
                           .write_cache = 0};
    llm4d_code rc = LLM4D_OK;
    for (int k = 0; k < 2 && rc == LLM4D_OK; k++) {
        if (k == 1 && !(cfg->eval_freq > 0 && cfg->eval_iters > 0)) break;
        o.kind = k ? LLM4D_SPLIT_VALID : LLM4D_SPLIT_TRAIN;
        o.num_samples = llm4d_gpt_num_samples(o.kind, cfg->global_batch_size, cfg->max_steps, cfg->eval_freq,
                                              cfg->eval_iters);
        rc = llm4d_loader_init(&ld[k], &cs, &o, &mem, err);
        have[k] = rc == LLM4D_OK;
    }
    const long long after = llm4d_proc_kb("/proc/self/status", "VmRSS");
    for (int k = 0; k < 2; k++)
        if (have[k]) llm4d_loader_free(&ld[k]);
    llm4d_corpora_close(&cs);
    if (rc != LLM4D_OK) return rc;
    const double held = (double)llm4d_mem_total(&mem);
    *bytes = before > 0 && after > before ? (double)(after - before) : 0;
    if (held > *bytes) *bytes = held;
    return LLM4D_OK;
}
