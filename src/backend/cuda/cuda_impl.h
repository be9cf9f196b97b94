/* cuda_impl.h — what the host files of the CUDA backend share (private to src/backend/cuda).
 *
 * The backend is split by kind of work: cuda_backend.c (the device, its memory, streams, events and copies, the
 * method table), cuda_timers.c (the work timers), cuda_gemm.c (cuBLASLt and the linear layers), cuda_wcache.c (the
 * low-precision copies of the weights), cuda_ops.c (every other method: the kernels of the k_*.cu files launched
 * with their arguments, the reductions read back, the attention's choice of kernel, sampling). All of it is C17 on
 * the CUDA runtime's and cuBLASLt's C interfaces; the CUDA C++ is in the .cu files behind cuda_kernels.h.
 *
 * Activations arrive typed (tensor.h); the GEMMs multiply operands of one type, the precision's (cuda_ctx.fmt), so an
 * operand stored in another type is converted into a workspace first, and an output cuBLASLt cannot write in its
 * type is written in fp32 to a workspace and stored by a kernel (cuda_gemm.c).
 *
 * There is no global state: the context below holds the device, the streams, the cuBLASLt handle, the arena of
 * device memory and every workspace, and the method table holds the context. */
#ifndef LLM4D_BACKEND_CUDA_IMPL_H
#define LLM4D_BACKEND_CUDA_IMPL_H

#include <stdio.h>
#include <stdlib.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/dev_arena.h"
#include "backend/wcache.h"

/* A CUDA or cuBLAS failure inside a method (which returns no error code) is a broken device or a bug: abort with
 * where and what, as LLM4D_ASSERT does. The creation path returns errors instead. */
void llm4d_cuda_die(const char *file, int line, const char *what, const char *why) __attribute__((noreturn));
#define CU_CHECK(call)                                                                                           \
    do {                                                                                                         \
        const cudaError_t cu_e_ = (call);                                                                        \
        if (cu_e_ != cudaSuccess) llm4d_cuda_die(__FILE__, __LINE__, #call, cudaGetErrorString(cu_e_));          \
    } while (0)
#define LT_CHECK(call)                                                                                           \
    do {                                                                                                         \
        const cublasStatus_t lt_s_ = (call);                                                                     \
        if (lt_s_ != CUBLAS_STATUS_SUCCESS) llm4d_cuda_die(__FILE__, __LINE__, #call, cublasLt_status(lt_s_));  \
    } while (0)
/* after a kernel launch: a bad configuration is reported at once, not at the next synchronisation */
#define CU_LAUNCHED() CU_CHECK(cudaGetLastError())
const char *cublasLt_status(cublasStatus_t s);

typedef struct cuda_timers cuda_timers;
typedef struct cuda_gemms cuda_gemms;

/* Workspaces the backend keeps in device memory, grown (never shrunk) to the largest request. */
enum {
    WS_OP0 = 0, /* converted GEMM operands: the input (or output gradient), and the attention's bf16 qkv */
    WS_OP1,     /* the second operand: act(input) for a weight gradient, the attention's bf16 dout */
    WS_OUT,     /* a GEMM's fp32 result for an output cuBLASLt cannot write in its type */
    WS_BIAS,    /* a bias copied to 16-byte alignment for the epilogue of a 16-bit output */
    WS_PART,    /* column-sum partials (bias, LayerNorm), the attention's row terms D */
    WS_RED,     /* reduction partials (doubles) and their chunk tables */
    WS_N
};

typedef struct {
    int device;                         /* the CUDA device index */
    int ndevices;                       /* the CUDA devices this process sees (local ranks are spread over them) */
    char gpu_name[256];
    int sm_count, cc_major, cc_minor;
    size_t total_mem;
    int host_ptr_ok;                    /* kernels may use pinned host pointers as they are (UVA) */
    cudaStream_t stream[LLM4D_NSTREAMS];
    cudaEvent_t alloc_ev;               /* orders the zeroing of new memory before the comm stream's use */
    cublasLtHandle_t lt;
    void *lt_ws;                        /* cuBLASLt's workspace */
    size_t lt_ws_bytes;
    llm4d_dev_arena *arena;             /* every device allocation */
    size_t reserved;                    /* bytes of the region reserve made (0: none) */
    llm4d_precision prec;
    llm4d_ftype fmt;                    /* the type GEMM operands are stored in under prec */
    void *ws[WS_N];
    size_t ws_cap[WS_N];
    double *red_host;                   /* pinned: reduction results read back */
    size_t red_host_cap;                /* doubles */
    void *tab_host;                     /* pinned: chunk tables uploaded (sumsq_many) */
    size_t tab_host_cap;                /* bytes */
    void *sample_host;                  /* host scratch of sample (the draw runs on the host) */
    size_t sample_cap;
    int attn_simt_only;                 /* tests: the portable attention kernels even where tensor cores could run */
    cuda_timers *tm;
    llm4d_wcache wc;                    /* low-precision copies of the weights (wcache.h; cuda_wcache.c) */
    cuda_gemms *gm;
    double optim_bytes;
} cuda_ctx;

static inline cuda_ctx *cctx(llm4d_backend *be) { return (cuda_ctx *)be->ctx; }
static inline cudaStream_t cstream(llm4d_backend *be) { return cctx(be)->stream[LLM4D_STREAM_COMPUTE]; }

/* cuda_backend.c: device memory from the arena (growing it by a region when full), zeroed on the compute stream;
 * NULL when the device is out of memory. */
void *llm4d_cuda_dev_alloc(cuda_ctx *cx, size_t bytes);
void llm4d_cuda_dev_free(cuda_ctx *cx, void *p);
/* Workspace w with room for at least `bytes` (grown from the arena; the old contents are not kept). */
void *llm4d_cuda_ws(cuda_ctx *cx, int w, size_t bytes);
/* The type a precision stores its GEMM operands in (fp32 and tf32: fp32). */
llm4d_ftype llm4d_cuda_fmt_of(llm4d_precision p);

/* cuda_timers.c: time the launches between begin and end on the compute stream as kind k (backend.h llm4d_work). */
cuda_timers *llm4d_cuda_timers_create(void);
void llm4d_cuda_timers_destroy(cuda_timers *t);
/* Each stretch is also counted by where it began (function and line): with LLM4D_CUDA_SITES=FILE in the environment
 * the backend writes that table to FILE when it is destroyed (a diagnostic for bench/bench_gpu.sh: which method's
 * kernels take the step, where no profiler is installed). */
int llm4d_cuda_work_begin_at(cuda_ctx *cx, int kind, const char *func, int line);
#define llm4d_cuda_work_begin(cx, kind) llm4d_cuda_work_begin_at((cx), (kind), __func__, __LINE__)
void llm4d_cuda_work_end(cuda_ctx *cx, int mark);
/* seconds and calls per kind so far (synchronises the compute stream) */
void llm4d_cuda_timers_read(cuda_ctx *cx, double *seconds, double *calls);

/* cuda_wcache.c: the weights' low-precision copies in device memory (the table, cx->wc, is wcache.h's). init gives
 * the table its storage (at creation); weight is the copy of weight w (n elements) in the operands' type cx->fmt,
 * converted now if missing or stale (w itself in fp32). */
void llm4d_cuda_wcache_init(cuda_ctx *cx);
const void *llm4d_cuda_weight(cuda_ctx *cx, const float *w, size_t n);

/* cuda_gemm.c: cuBLASLt set-up and the linear-layer methods installed into the table */
llm4d_code llm4d_cuda_gemm_init(cuda_ctx *cx, llm4d_err *err);
void llm4d_cuda_gemm_free(cuda_ctx *cx);
void llm4d_cuda_gemm_install(llm4d_backend *be);
/* cuda_ops.c: the other kernel methods */
void llm4d_cuda_ops_install(llm4d_backend *be);

#endif
