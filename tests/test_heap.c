/* test_heap.c — the malloc policy every verb fixes at start-up (core/heap.c): a large temporary is given back when
 * freed whatever was freed before it, and a scratch block reused call after call stays resident. Left to glibc's
 * moving thresholds, the first check fails (a freed 16 MiB block raises the mmap threshold, so the 12 MiB block
 * after it comes from the heap and stays resident once freed) and the second can too (at the initial trim threshold
 * of 128 KiB the heap's top is given back after each use and faulted in again). Resident sizes are the kernel's
 * (/proc/self/status), faults getrusage's. */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "check.h"
#include "core/heap.h"
#include "core/proc.h"

static double rss_mib(void) { return (double)llm4d_proc_kb("/proc/self/status", "VmRSS") / (1 << 20); }

static long minor_faults(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

/* a block of n bytes, every page written */
static char *touched(size_t n) {
    char *p = malloc(n);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(p, 1, n);
    __asm__ volatile("" : : "r"(p) : "memory"); /* the pages written, however the caller uses the block */
    return p;
}

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

int main(void) {
#ifdef UNDER_ASAN
    printf("skipped: the address sanitizer's allocator replaces glibc's; the policy is glibc's\n");
    return 77;
#endif
    const int fixed = llm4d_heap_fix();
    check(fixed == 1, "llm4d_heap_fix sets the thresholds (returned %d)", fixed);

    /* a large temporary after a larger one was freed: mapped, and given back when freed */
    free(touched(16u << 20));
    const double before = rss_mib();
    char *t = touched(12u << 20);
    const double during = rss_mib();
    free(t);
    const double after = rss_mib();
    check(during - before > 11.0, "a 12 MiB temporary is resident while held (+%.1f MiB)", during - before);
    check(after - before < 1.0, "and given back when freed, after a 16 MiB block was freed (%+.1f MiB)",
          after - before);

    /* a 4 MiB scratch block freed and taken again: the same pages, no new faults */
    free(touched(4u << 20));
    const long f0 = minor_faults();
    for (int i = 0; i < 8; i++) free(touched(4u << 20));
    const long faults = minor_faults() - f0;
    check(faults < 256, "a 4 MiB scratch block reused 8 times faults %ld pages in (it has 1024)", faults);

    /* the user's environment wins */
    setenv("MALLOC_MMAP_THRESHOLD_", "131072", 1);
    check(llm4d_heap_fix() == 0, "MALLOC_MMAP_THRESHOLD_ set by the user: the policy leaves it");
    unsetenv("MALLOC_MMAP_THRESHOLD_");
    setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1048576", 1);
    check(llm4d_heap_fix() == 0, "a glibc.malloc threshold tunable set by the user: the policy leaves it");
    return check_summary();
}
