/* memplan_check.c — the trainer's memory plan: its own rank's plan (plan/memplan.h), logged and checked before the
 * model is allocated, and set against the measured peak at the end.
 *
 * What is already held (the data indices and batches, libraries, MPI) is read from the kernel (VmRSS). Available
 * memory is the device's free memory (backend.h mem_info; on the CPU backends the host's MemAvailable, or the
 * cgroup's limit less its usage if lower) shared by the ranks on this host, or on a GPU backend by the ranks given
 * the same GPU (local rank r takes GPU r mod ndevices); a plan that needs more is refused with one line naming what
 * dominates and what would shrink it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/heap.h"
#include "plan/memplan.h"
#include "train/trainer.h"

#define MiB (1024.0 * 1024.0)

static void human(double bytes, char *buf, size_t n) {
    if (bytes >= 1024.0 * 1024 * MiB) snprintf(buf, n, "%.2f TiB", bytes / (1024.0 * 1024 * MiB));
    else if (bytes >= 1024.0 * MiB) snprintf(buf, n, "%.2f GiB", bytes / (1024.0 * MiB));
    else snprintf(buf, n, "%.1f MiB", bytes / MiB);
}

/* Bytes of the low-precision copies a mixed-precision backend keeps of the weights its GEMMs read (the cpu
 * backend's cpu_wcache.c: weight_copy_bytes per element, made on first use, outside the arena's categories): every
 * linear weight and the token embedding (the LM head's operand), not the position embedding (a lookup), biases or
 * LayerNorms. Under ZeRO-3 the GEMMs read the gather buffers instead, two of the largest group. */
llm4d_code llm4d_trainer_plan(llm4d_trainer *tr, llm4d_err *err) {
    const llm4d_config *cfg = tr->cfg;
    llm4d_memplan mp;
    llm4d_memplan_paths paths;
    llm4d_memplan_paths_of(tr->groups, cfg, &paths);
    LLM4D_TRY(llm4d_memplan_make(cfg, &tr->topo, &tr->ppplan, tr->be, &paths, &mp, err));
    const size_t *plan = mp.cat, copies = mp.weight_copies, mpi_tmp = llm4d_memplan_mpi(&mp), operands = mp.operands;
    const size_t shm = mp.shm_segments, libs = mp.libraries;
    const size_t add = llm4d_memplan_total(&mp);
    for (int c = 0; c < LLM4D_MEM_NCATEGORIES; c++)
        tr->plan[c] = plan[c] + tr->mem.bytes[c]; /* what each category will hold: the plan and what it holds now */
    const long long rss = llm4d_heap_resident();
    tr->plan_base = rss > 0 ? (size_t)rss : 0;
    tr->plan_total = tr->plan_base + add;
    size_t dev_free = 0, dev_total = 0; /* the device's memory: on the CPU backends the host's */
    tr->be->mem_info(tr->be, &dev_free, &dev_total);
    const long long host = tr->debug.mem_available > 0 ? tr->debug.mem_available : (long long)dev_free;
    /* the ranks sharing this device's memory: every rank on the host, or those given the same GPU */
    const int on_host = tr->groups->host_ranks > 0 ? tr->groups->host_ranks : 1, ndev = tr->be->ndevices;
    const int ranks = ndev > 0 ? (on_host + ndev - 1) / ndev : on_host;
    const char *where = ndev > 0 ? "on this GPU" : "on this host";

    char line[768], h[32];
    int k = snprintf(line, sizeof line, "memory plan of this rank, before allocating:");
    for (int c = 0; c < LLM4D_MEM_NCATEGORIES && k < (int)sizeof line; c++)
        k += snprintf(line + k, sizeof line - (size_t)k, " %s %.2f MiB%s", llm4d_mem_category_name(c),
                      tr->plan[c] / MiB, c + 1 < LLM4D_MEM_NCATEGORIES ? "," : "");
    if (copies && k < (int)sizeof line)
        k += snprintf(line + k, sizeof line - (size_t)k, "; outside them, the backend's %s copies of the weights "
                      "%.2f MiB", strcmp(cfg->amp_dtype, "float16") ? "bf16" : "fp16", copies / MiB);
    if (operands && k < (int)sizeof line)
        k += snprintf(line + k, sizeof line - (size_t)k, "%s the backend's converted GEMM operands %.2f MiB",
                      copies ? " and" : "; outside them,", operands / MiB);
    if (mpi_tmp && k < (int)sizeof line)
        k += snprintf(line + k, sizeof line - (size_t)k, "; MPI's temporaries (%s%s%s) %.2f MiB",
                      mp.mpi_temporaries ? "the sharding group's reduce-scatters" : "",
                      mp.mpi_temporaries && mp.mpi_allreduce ? " and " : "",
                      mp.mpi_allreduce ? "the largest all-reduce on MPI" : "", mpi_tmp / MiB);
    if (shm && k < (int)sizeof line)
        k += snprintf(line + k, sizeof line - (size_t)k, "; the collectives' shared-memory segments %.2f MiB",
                      shm / MiB);
    if (libs && k < (int)sizeof line)
        snprintf(line + k, sizeof line - (size_t)k, "; the libraries' working set of a step (kernels' code, "
                 "oneDNN's JIT kernels and scratch) %.2f MiB", libs / MiB);
    llm4d_log_info(&tr->log, "%s", line);
    char avail[48] = "unknown";
    if (host > 0) human((double)host / ranks, avail, sizeof avail);
    human((double)tr->plan_total, h, sizeof h);
    llm4d_log_info(&tr->log, "memory plan: %.2f MiB to allocate on top of %.1f MiB held now (data, libraries, MPI): %s "
                   "per rank; available: %s for each of the %d rank(s) %s", add / MiB, tr->plan_base / MiB, h, avail,
                   ranks, where);
    if (host <= 0 || (double)add <= (double)host / ranks) {
        if (tr->be->reserve) tr->be->reserve(tr->be, add); /* a device backend takes it in one piece now */
        return LLM4D_OK;
    }

    /* refused: say what dominates and what shrinks it */
    const size_t states = plan[LLM4D_MEM_PARAMS] + plan[LLM4D_MEM_GRADS] + plan[LLM4D_MEM_OPTIM];
    const size_t per_batch = plan[LLM4D_MEM_ACTIVATIONS] + plan[LLM4D_MEM_WORKSPACE]; /* grow with B x T */
    const char *fix = states >= per_batch
                          ? "shard the model states over more ranks (sharding_degree with sharding_stage 3, mp_degree, "
                            "pp_degree) or offload them (sharding_offload)"
                          : "lower micro_batch_size or max_seq_len, or set use_recompute";
    char need[32], st[32], act[32];
    human((double)add, need, sizeof need);
    human((double)states, st, sizeof st);
    human((double)per_batch, act, sizeof act);
    return llm4d_fail(err, LLM4D_EUSER, "this layout needs %s more memory per rank (model states %s, activations "
                      "and workspaces %s; the plan is in the log) but %s is available to each of the %d rank(s) %s; %s",
                      need, st, act, avail, ranks, where, fix);
}
