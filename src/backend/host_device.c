/* host_device.c — backend.h's device contract for a device that is the host (see host.h).
 *
 * Every CPU backend runs its kernels synchronously on the calling thread (and its OpenMP team), so a stream is the
 * program order itself: an event is complete as soon as it is recorded, waits return at once, and an asynchronous
 * copy is a memmove. Pinned host memory is ordinary host memory. The fused reductions are the table's per-tensor
 * ones taken in order, so that their bits equal what a loop over sumsq or dot gives. */
#include "backend/host.h"

#include "core/proc.h"

#include <stdlib.h>
#include <string.h>

struct llm4d_event {
    int recorded;
};

#define PAGE ((size_t)4096)

/* Page-aligned, as a device's pinned memory is (and as direct I/O into it needs: parallel/offload.c). */
static void *host_alloc_host(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, size_t bytes) {
    (void)be;
    const size_t rounded = bytes ? (bytes + PAGE - 1) / PAGE * PAGE : PAGE;
    void *p = aligned_alloc(PAGE, rounded);
    if (!p) return NULL;
    llm4d_mem_prefer_huge(p, rounded);
    memset(p, 0, rounded);
    llm4d_mem_account(mem, c, (long long)bytes);
    return p;
}

static void host_free_host(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, void *p, size_t bytes) {
    (void)be;
    llm4d_mem_free(mem, c, p, bytes);
}

void llm4d_host_mem_info(size_t *free_bytes, size_t *total_bytes) {
    long long avail = llm4d_proc_kb("/proc/meminfo", "MemAvailable");
    long long total = llm4d_proc_kb("/proc/meminfo", "MemTotal");
    const long long max = llm4d_cgroup_value("memory.max"), cur = llm4d_cgroup_value("memory.current");
    if (max > 0 && cur >= 0 && (avail < 0 || max - cur < avail)) avail = max - cur;
    if (max > 0 && (total < 0 || max < total)) total = max;
    *free_bytes = avail > 0 ? (size_t)avail : 0;
    *total_bytes = total > 0 ? (size_t)total : 0;
}

static void host_mem_info(llm4d_backend *be, size_t *free_bytes, size_t *total_bytes) {
    (void)be;
    llm4d_host_mem_info(free_bytes, total_bytes);
}

static void host_copy_async(llm4d_backend *be, void *dst, const void *src, size_t bytes, llm4d_copy_kind kind,
                            llm4d_stream s) {
    (void)kind, (void)s;
    if (kind == LLM4D_D2D) { /* the table's own copy: the fast backend's is parallel */
        be->copy(be, dst, src, bytes);
        return;
    }
    memmove(dst, src, bytes);
}

static void host_copy_2d(llm4d_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                         size_t rows, llm4d_copy_kind kind, llm4d_stream s) {
    (void)be, (void)kind, (void)s;
    for (size_t r = 0; r < rows; r++) memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
}

static llm4d_event *host_event_create(llm4d_backend *be) {
    (void)be;
    return calloc(1, sizeof(llm4d_event));
}

static void host_event_destroy(llm4d_backend *be, llm4d_event *ev) {
    (void)be;
    free(ev);
}

static void host_event_record(llm4d_backend *be, llm4d_event *ev, llm4d_stream s) {
    (void)be, (void)s;
    ev->recorded = 1;
}

static void host_stream_wait(llm4d_backend *be, llm4d_stream s, const llm4d_event *ev) { (void)be, (void)s, (void)ev; }
static void host_event_sync(llm4d_backend *be, const llm4d_event *ev) { (void)be, (void)ev; }
static void host_stream_sync(llm4d_backend *be, llm4d_stream s) { (void)be, (void)s; }

static double host_sumsq_many(llm4d_backend *be, int n, const float *const *x, const size_t *len, double *each) {
    double acc = 0.0;
    for (int k = 0; k < n; k++) {
        const double s = be->sumsq(be, x[k], len[k]);
        if (each) each[k] = s;
        acc += s;
    }
    return acc;
}

static void host_dot_acc(llm4d_backend *be, double *acc, const float *a, const float *b, size_t n) {
    *acc += be->dot(be, a, b, n);
}

void llm4d_host_install(llm4d_backend *be) {
    be->host_addressable = 1;
    be->alloc_host = host_alloc_host;
    be->free_host = host_free_host;
    be->mem_info = host_mem_info;
    be->copy_async = host_copy_async;
    be->copy_2d = host_copy_2d;
    be->event_create = host_event_create;
    be->event_destroy = host_event_destroy;
    be->event_record = host_event_record;
    be->stream_wait = host_stream_wait;
    be->event_sync = host_event_sync;
    be->stream_sync = host_stream_sync;
    be->sumsq_many = host_sumsq_many;
    be->dot_acc = host_dot_acc;
    be->init_param = llm4d_host_init_param;
    be->attention_cached = llm4d_host_attention_cached;
    be->sample = llm4d_host_sample;
}
