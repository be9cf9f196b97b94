/* heap.c — glibc's mmap threshold fixed at start-up, so a run's resident peak is a function of what it allocates,
 * not of the order in which it freed things.
 *
 * glibc serves a request of at least M_MMAP_THRESHOLD bytes with a mapping of its own (returned to the kernel when
 * freed) and a smaller one from the heap (kept resident when freed, unless it is at the heap's top and the top
 * exceeds M_TRIM_THRESHOLD). Left alone, glibc raises the mmap threshold to the size of each mapped block freed
 * (up to 32 MiB) and the trim threshold to twice that, so whether a later temporary is mapped or carved out of the
 * heap depends on which blocks were freed before it. The memory plan (plan/memplan.h) and the planner count the live
 * set plus the temporaries calibrated alone; a temporary left in the heap behind a live block is neither. Measured
 * (2-vCPU EPYC, gpt2-tiny 8 blocks, ZeRO-2 over 4 ranks on Open MPI): rank 0's peak read 105.9 or 113.6 MiB
 * between identical runs, by whether Open MPI's non-blocking reduce-scatter's 8 MiB temporary was mapped.
 *
 * The values: the mmap threshold at 8 MiB keeps the GEMM library's per-call scratch on the heap (oneDNN's packing
 * buffers, up to 4.7 MB a thread on gpt2-en), where it is reused without page faults: a threshold at glibc's
 * initial 128 KiB maps them afresh on every call (38 thousand more page faults a step on gpt2-en, 150 MB zeroed).
 * Communication buffers as large as a gradient bucket or a shard are mapped and given back when freed. The trim
 * threshold at twice the mmap threshold (glibc's own rule when it moves them): at its initial 128 KiB the heap's
 * top, where that scratch sits, was given back after each call and faulted in again (17.6 thousand faults a step).
 * A user's MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ or glibc.malloc tunables win.
 *
 * The heap's top keeps what was freed there (up to the trim threshold), so a resident size read as the base of a
 * plan is read after malloc_trim: the start-up matmul measurement's operands (12.6 MB) freed before the trainer
 * planned were counted in its base, and a model's allocations then reused them (gpt2-tiny's plans 7.5 MiB high). */
#include "core/heap.h"

#include <stdlib.h>
#include <string.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "core/proc.h"

enum { MMAP_THRESHOLD = 8 << 20, TRIM_THRESHOLD = 2 * MMAP_THRESHOLD };

int llm4d_heap_fix(void) {
#ifdef __GLIBC__
    const char *tun = getenv("GLIBC_TUNABLES");
    if (getenv("MALLOC_MMAP_THRESHOLD_") || getenv("MALLOC_TRIM_THRESHOLD_") ||
        (tun && (strstr(tun, "mmap_threshold") || strstr(tun, "trim_threshold"))))
        return 0;
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 && mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1;
#else
    return 0;
#endif
}

long long llm4d_heap_resident(void) {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
    return llm4d_proc_kb("/proc/self/status", "VmRSS");
}
