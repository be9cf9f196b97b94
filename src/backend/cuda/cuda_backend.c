/* cuda_backend.c — the CUDA backend (`--device cuda`, `Global.device: gpu`): the device, its memory, streams,
 * events and copies of backend.h's contract, and the method table.
 *
 * Why it is shaped this way:
 * - Which GPU: a process takes GPU (local rank mod the GPUs it sees), so `llm4d launch` puts one rank per GPU when
 *   there are enough, and several ranks on one GPU when there are not (that is how the layouts are tested on a
 *   one-GPU machine; the communicator then stages through pinned memory, comm/comm_nccl.c says which).
 * - Memory is allocated once: device memory is carved from regions of an arena (dev_arena.h); the memory plan's
 *   total is taken in one region before the model allocates (reserve), and a request the regions cannot hold adds
 *   a region (cudaMalloc), so a run the plan underestimated still works. A freed block is reused by later
 *   allocations without a cudaFree (which would synchronise the device).
 * - Pinned host memory is page-aligned host memory registered with CUDA (cudaHostRegister, mapped): page alignment
 *   is what direct I/O into it needs (parallel/offload.c), and on a 64-bit host with unified addressing kernels
 *   may read it through the same pointer (backend.h: zero-copy, for offloaded optimizer states).
 * - Two streams that do not synchronise with the legacy default stream: COMPUTE for every kernel, COMM for the
 *   communicator's copies (and NCCL's operations, comm/comm_nccl.c). Events are CUDA events without timing.
 * - Copies are cudaMemcpyAsync with the direction inferred (unified addressing): pinned host memory gives truly
 *   asynchronous copies, ordinary host memory the synchronous behaviour backend.h describes (CUDA's own rules for
 *   pageable memory).
 * - Errors inside methods (which return nothing) abort with the CUDA error and the call (CU_CHECK): they mean a
 *   broken device or a bug. Creation returns a one-line user error when there is no GPU to use. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_api.h"
#include "backend/cuda/cuda_impl.h"

#ifndef LLM4D_CUDA_ARCHS
#define LLM4D_CUDA_ARCHS "90"
#endif

#define ALIGN ((size_t)256)                 /* every device block: cuBLASLt and 16-byte vector loads need 16 */
#define REGION_MIN ((size_t)256 << 20)      /* a region added on demand: at least this much */
#define REGION_ROUND ((size_t)2 << 20)      /* regions are whole 2 MiB pages */
#define PAGE ((size_t)4096)

struct llm4d_event {
    cudaEvent_t e;
};

void llm4d_cuda_die(const char *file, int line, const char *what, const char *why) {
    fflush(stdout);
    fprintf(stderr, "llm4d cuda: %s:%d: %s failed: %s\n", file, line, what, why);
    abort();
}

const char *cublasLt_status(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "cuBLAS not initialised";
    case CUBLAS_STATUS_ALLOC_FAILED: return "cuBLAS allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "cuBLAS invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "cuBLAS architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "cuBLAS execution failed";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "cuBLAS internal error";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "cuBLAS: not supported";
    default: return "cuBLAS error";
    }
}

llm4d_ftype llm4d_cuda_fmt_of(llm4d_precision p) {
    return p == LLM4D_PREC_BF16 ? LLM4D_BF16 : p == LLM4D_PREC_FP16 ? LLM4D_F16 : LLM4D_F32;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* device memory */

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* A new region of at least `bytes` (more when that is small, so small requests do not each cost a cudaMalloc). */
static int add_region(cuda_ctx *cx, size_t bytes, size_t at_least) {
    size_t want = round_up(bytes > at_least ? bytes : at_least, REGION_ROUND);
    void *p = NULL;
    if (cudaMalloc(&p, want) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky-free error state of the failed call */
        want = round_up(bytes, REGION_ROUND);
        if (want == 0 || cudaMalloc(&p, want) != cudaSuccess) {
            (void)cudaGetLastError();
            return 0;
        }
    }
    if (!llm4d_dev_arena_add(cx->arena, p, want)) {
        cudaFree(p);
        return 0;
    }
    return 1;
}

void *llm4d_cuda_dev_alloc(cuda_ctx *cx, size_t bytes) {
    void *p = llm4d_dev_arena_alloc(cx->arena, bytes);
    if (!p && add_region(cx, round_up(bytes ? bytes : 1, ALIGN), REGION_MIN)) p = llm4d_dev_arena_alloc(cx->arena, bytes);
    if (!p) return NULL;
    /* zeroed, as alloc promises, before any later kernel (compute stream) or copy (comm stream, which waits) */
    CU_CHECK(cudaMemsetAsync(p, 0, bytes ? bytes : 1, cx->stream[LLM4D_STREAM_COMPUTE]));
    CU_CHECK(cudaEventRecord(cx->alloc_ev, cx->stream[LLM4D_STREAM_COMPUTE]));
    CU_CHECK(cudaStreamWaitEvent(cx->stream[LLM4D_STREAM_COMM], cx->alloc_ev, 0));
    return p;
}

void llm4d_cuda_dev_free(cuda_ctx *cx, void *p) {
    if (!p) return;
    LLM4D_ASSERT(llm4d_dev_arena_free(cx->arena, p), "cuda: free of %p, which the arena did not allocate", p);
}

void *llm4d_cuda_ws(cuda_ctx *cx, int w, size_t bytes) {
    if (bytes > cx->ws_cap[w]) {
        llm4d_cuda_dev_free(cx, cx->ws[w]);
        const size_t cap = round_up(bytes, ALIGN);
        cx->ws[w] = llm4d_cuda_dev_alloc(cx, cap);
        LLM4D_ASSERT(cx->ws[w] != NULL, "cuda: out of device memory for a %zu-byte workspace", cap);
        cx->ws_cap[w] = cap;
    }
    return cx->ws[w];
}

static void *cu_alloc(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, size_t bytes) {
    void *p = llm4d_cuda_dev_alloc(cctx(be), bytes);
    if (p) llm4d_mem_account(mem, c, (long long)bytes);
    return p;
}

static void cu_free(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, void *p, size_t bytes) {
    if (!p) return;
    llm4d_wcache_drop(&cctx(be)->wc, p, bytes); /* copies of weights that lived here */
    llm4d_cuda_dev_free(cctx(be), p);
    llm4d_mem_account(mem, c, -(long long)bytes);
}

static void *cu_alloc_host(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, size_t bytes) {
    const size_t rounded = round_up(bytes ? bytes : 1, PAGE);
    void *p = NULL;
    if (posix_memalign(&p, PAGE, rounded) != 0) return NULL;
    memset(p, 0, rounded);
    if (cudaHostRegister(p, rounded, cudaHostRegisterPortable | cudaHostRegisterMapped) != cudaSuccess) {
        (void)cudaGetLastError();
        free(p);
        return NULL;
    }
    (void)be;
    llm4d_mem_account(mem, c, (long long)bytes);
    return p;
}

static void cu_free_host(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, void *p, size_t bytes) {
    (void)be;
    if (!p) return;
    CU_CHECK(cudaHostUnregister(p));
    free(p);
    llm4d_mem_account(mem, c, -(long long)bytes);
}

/* The device's free memory and what the arena holds unused: what this rank can still allocate. */
static void cu_mem_info(llm4d_backend *be, size_t *free_bytes, size_t *total_bytes) {
    cuda_ctx *cx = cctx(be);
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) (void)cudaGetLastError(), f = t = 0;
    *free_bytes = f + (llm4d_dev_arena_capacity(cx->arena) - llm4d_dev_arena_used(cx->arena));
    *total_bytes = t;
}

/* The plan's bytes in one region (beyond what the arena has free); a device that cannot give them at once is left
 * to the regions added on demand. */
static void cu_reserve(llm4d_backend *be, size_t bytes) {
    cuda_ctx *cx = cctx(be);
    const size_t spare = llm4d_dev_arena_capacity(cx->arena) - llm4d_dev_arena_used(cx->arena);
    if (bytes <= spare) return;
    if (add_region(cx, bytes - spare, 0)) cx->reserved += round_up(bytes - spare, REGION_ROUND);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* copies, streams, events */

static void cu_zero(llm4d_backend *be, void *p, size_t bytes) {
    const int m = llm4d_cuda_work_begin(cctx(be), LLM4D_WORK_ELEM);
    CU_CHECK(cudaMemsetAsync(p, 0, bytes, cstream(be)));
    llm4d_cuda_work_end(cctx(be), m);
}

static void cu_copy(llm4d_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
    const int m = llm4d_cuda_work_begin(cctx(be), LLM4D_WORK_ELEM);
    const char *s = src;
    char *d = dst;
    if (d < s + bytes && s < d + bytes) { /* overlapping (memmove): through a workspace */
        void *tmp = llm4d_cuda_ws(cctx(be), WS_OP1, bytes);
        CU_CHECK(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDefault, cstream(be)));
        src = tmp;
    }
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cstream(be))); /* either side may be pinned */
    llm4d_cuda_work_end(cctx(be), m);
}

static void cu_copy_async(llm4d_backend *be, void *dst, const void *src, size_t bytes, llm4d_copy_kind kind,
                          llm4d_stream s) {
    (void)kind; /* unified addressing: CUDA knows where each side is */
    if (!bytes) return;
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cctx(be)->stream[s]));
}

static void cu_copy_2d(llm4d_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                       size_t rows, llm4d_copy_kind kind, llm4d_stream s) {
    (void)kind;
    if (!width || !rows) return;
    CU_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDefault, cctx(be)->stream[s]));
}

static llm4d_event *cu_event_create(llm4d_backend *be) {
    (void)be;
    llm4d_event *ev = calloc(1, sizeof *ev);
    if (!ev) return NULL;
    if (cudaEventCreateWithFlags(&ev->e, cudaEventDisableTiming) != cudaSuccess) {
        (void)cudaGetLastError();
        free(ev);
        return NULL;
    }
    return ev;
}

static void cu_event_destroy(llm4d_backend *be, llm4d_event *ev) {
    (void)be;
    if (!ev) return;
    cudaEventDestroy(ev->e);
    free(ev);
}

static void cu_event_record(llm4d_backend *be, llm4d_event *ev, llm4d_stream s) {
    CU_CHECK(cudaEventRecord(ev->e, cctx(be)->stream[s]));
}

static void cu_stream_wait(llm4d_backend *be, llm4d_stream s, const llm4d_event *ev) {
    CU_CHECK(cudaStreamWaitEvent(cctx(be)->stream[s], ev->e, 0));
}

static void cu_event_sync(llm4d_backend *be, const llm4d_event *ev) {
    (void)be;
    CU_CHECK(cudaEventSynchronize(ev->e));
}

static void cu_stream_sync(llm4d_backend *be, llm4d_stream s) { CU_CHECK(cudaStreamSynchronize(cctx(be)->stream[s])); }

/* ---------------------------------------------------------------------------------------------------------- */
/* what the backend holds and says */

static size_t cu_workspace_bytes(llm4d_backend *be) {
    const cuda_ctx *cx = cctx(be);
    size_t n = cx->lt_ws_bytes + llm4d_wcache_bytes(&cx->wc);
    for (int w = 0; w < WS_N; w++) n += cx->ws_cap[w];
    return n;
}

static void cu_work_stats(llm4d_backend *be, llm4d_work_stats *out) {
    memset(out, 0, sizeof *out);
    llm4d_cuda_timers_read(cctx(be), out->seconds, out->calls);
    out->optim_bytes = cctx(be)->optim_bytes;
}

static void cu_describe_memory(llm4d_backend *be, char *buf, size_t n) {
    const cuda_ctx *cx = cctx(be);
    snprintf(buf, n, "device memory: GPU %d (%s, sm_%d%d, %.1f GiB), carved from %d region(s) of %.2f GiB (%.2f GiB "
             "reserved for the memory plan); pinned host memory registered with CUDA", cx->device, cx->gpu_name,
             cx->cc_major, cx->cc_minor, cx->total_mem / 1073741824.0, llm4d_dev_arena_nregions(cx->arena),
             llm4d_dev_arena_capacity(cx->arena) / 1073741824.0, cx->reserved / 1073741824.0);
}

static void cu_destroy(llm4d_backend *be) {
    if (!be) return;
    cuda_ctx *cx = be->ctx;
    if (cx) {
        for (int s = 0; s < LLM4D_NSTREAMS; s++)
            if (cx->stream[s]) cudaStreamSynchronize(cx->stream[s]);
        llm4d_wcache_free(&cx->wc);
        llm4d_cuda_gemm_free(cx);
        llm4d_cuda_timers_destroy(cx->tm);
        if (cx->red_host) cudaFreeHost(cx->red_host);
        if (cx->tab_host) cudaFreeHost(cx->tab_host);
        free(cx->sample_host);
        if (cx->arena) {
            for (int i = 0; i < llm4d_dev_arena_nregions(cx->arena); i++) cudaFree(llm4d_dev_arena_region(cx->arena, i, NULL));
            llm4d_dev_arena_destroy(cx->arena);
        }
        if (cx->alloc_ev) cudaEventDestroy(cx->alloc_ev);
        for (int s = 0; s < LLM4D_NSTREAMS; s++)
            if (cx->stream[s]) cudaStreamDestroy(cx->stream[s]);
        free(cx);
    }
    free(be);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* creation */

/* host_rank: the process's index among the ranks on its host (backend.h llm4d_backend_opts). */
static llm4d_code open_device(cuda_ctx *cx, int host_rank, llm4d_err *err) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        const char *why = e == cudaErrorInsufficientDriver ? "no NVIDIA driver, or one older than this build's CUDA"
                          : e != cudaSuccess                ? cudaGetErrorString(e)
                                                            : "no CUDA device";
        (void)cudaGetLastError();
        return llm4d_fail(err, LLM4D_EUSER, "--device cuda: this machine has no usable GPU (%s); use --device cpu",
                          why);
    }
    cx->ndevices = n;
    cx->device = (host_rank > 0 ? host_rank : 0) % n;
    cudaError_t r = cudaSetDevice(cx->device);
    struct cudaDeviceProp prop;
    if (r == cudaSuccess) r = cudaGetDeviceProperties(&prop, cx->device);
    if (r != cudaSuccess)
        return llm4d_fail(err, LLM4D_EUSER, "--device cuda: GPU %d cannot be used (%s); use --device cpu", cx->device,
                          cudaGetErrorString(r));
    snprintf(cx->gpu_name, sizeof cx->gpu_name, "%s", prop.name);
    cx->sm_count = prop.multiProcessorCount;
    cx->cc_major = prop.major;
    cx->cc_minor = prop.minor;
    cx->total_mem = prop.totalGlobalMem;
    r = llm4d_k_probe();
    if (r != cudaSuccess)
        return llm4d_fail(err, LLM4D_EUSER, "--device cuda: this build's kernels are for sm_%s but GPU %d (%s) is "
                          "sm_%d%d (%s); rebuild with -DCMAKE_CUDA_ARCHITECTURES=%d%d", LLM4D_CUDA_ARCHS, cx->device,
                          cx->gpu_name, prop.major, prop.minor, cudaGetErrorString(r), prop.major, prop.minor);
    int hp = 0;
    cudaDeviceGetAttribute(&hp, cudaDevAttrCanUseHostPointerForRegisteredMem, cx->device);
    cx->host_ptr_ok = hp;
    return LLM4D_OK;
}

static llm4d_code setup(cuda_ctx *cx, int host_rank, llm4d_err *err) {
    LLM4D_TRY(open_device(cx, host_rank, err));
    for (int s = 0; s < LLM4D_NSTREAMS; s++)
        if (cudaStreamCreateWithFlags(&cx->stream[s], cudaStreamNonBlocking) != cudaSuccess)
            return llm4d_fail(err, LLM4D_EINTERNAL, "cuda: cannot create a stream");
    if (cudaEventCreateWithFlags(&cx->alloc_ev, cudaEventDisableTiming) != cudaSuccess)
        return llm4d_fail(err, LLM4D_EINTERNAL, "cuda: cannot create an event");
    cx->arena = llm4d_dev_arena_create(ALIGN);
    cx->tm = llm4d_cuda_timers_create();
    if (!cx->arena || !cx->tm) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory creating the CUDA backend");
    cx->red_host_cap = 4096;
    if (cudaMallocHost((void **)&cx->red_host, cx->red_host_cap * sizeof(double)) != cudaSuccess)
        return llm4d_fail(err, LLM4D_ENOMEM, "cuda: out of pinned host memory");
    cx->prec = LLM4D_PREC_FP32;
    cx->fmt = LLM4D_F32;
    return llm4d_cuda_gemm_init(cx, err);
}

llm4d_code llm4d_backend_cuda_create(llm4d_backend **out, int host_rank, llm4d_err *err) {
    *out = NULL;
    llm4d_backend *be = calloc(1, sizeof *be);
    cuda_ctx *cx = calloc(1, sizeof *cx);
    if (!be || !cx) {
        free(be);
        free(cx);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory creating the CUDA backend");
    }
    be->ctx = cx;
    llm4d_cuda_wcache_init(cx);
    const llm4d_code rc = setup(cx, host_rank, err);
    if (rc != LLM4D_OK) {
        cu_destroy(be);
        return rc;
    }
    be->name = "cuda";
    be->nthreads = 1;
    be->host_addressable = 0;
    be->ndevices = cx->ndevices;
    be->alloc = cu_alloc, be->free = cu_free, be->alloc_host = cu_alloc_host, be->free_host = cu_free_host;
    be->mem_info = cu_mem_info, be->reserve = cu_reserve;
    be->zero = cu_zero, be->copy = cu_copy, be->copy_async = cu_copy_async, be->copy_2d = cu_copy_2d;
    be->event_create = cu_event_create, be->event_destroy = cu_event_destroy, be->event_record = cu_event_record;
    be->stream_wait = cu_stream_wait, be->event_sync = cu_event_sync, be->stream_sync = cu_stream_sync;
    be->workspace_bytes = cu_workspace_bytes, be->work_stats = cu_work_stats;
    be->describe_memory = cu_describe_memory, be->destroy = cu_destroy;
    llm4d_cuda_gemm_install(be);
    llm4d_cuda_ops_install(be);
    *out = be;
    return LLM4D_OK;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* cuda_api.h: what the communicator asks of a CUDA backend */

int llm4d_cuda_is(const llm4d_backend *be) { return be && be->destroy == cu_destroy; }

void *llm4d_cuda_stream(llm4d_backend *be, llm4d_stream s) {
    return llm4d_cuda_is(be) ? (void *)cctx(be)->stream[s] : NULL;
}

void *llm4d_cuda_event_handle(const llm4d_event *ev) { return ev ? (void *)ev->e : NULL; }

int llm4d_cuda_device_id(llm4d_backend *be, char *id, size_t n) {
    if (!llm4d_cuda_is(be)) return 0;
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, cctx(be)->device) != cudaSuccess) return (void)cudaGetLastError(), 0;
    /* the PCI location names the physical GPU across processes (device indices are per process) */
    snprintf(id, n, "%04x:%02x:%02x", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
    return 1;
}

void llm4d_cuda_set_attention_portable(llm4d_backend *be, int on) {
    if (llm4d_cuda_is(be)) cctx(be)->attn_simt_only = on;
}
