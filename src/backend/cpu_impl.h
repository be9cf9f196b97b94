/* cpu_impl.h — what the files of the fast CPU backend share (private to src/backend/cpu*.c).
 *
 * The backend is split by kind of work: cpu.c (memory, operand precision, the linear layers, reductions, the
 * method table), cpu_attn.c (flash-style causal attention), cpu_elem.c (the element-wise kernels: embeddings,
 * LayerNorm, GELU, dropout, cross-entropy), cpu_llama.c (the Llama family's: RMSNorm, RoPE, SwiGLU), cpu_optim.c
 * (the optimizer's passes), cpu_wcache.c (the weights' low-precision copies, kept in the table every backend
 * shares, wcache.h). They share the context, the timers, the vectorisable exp and the GEMM helpers declared here,
 * and the dropout masks of cpu_drop.h. */
#ifndef LLM4D_BACKEND_CPU_IMPL_H
#define LLM4D_BACKEND_CPU_IMPL_H

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_dnnl.h"
#include "backend/cpu_drop.h"
#include "backend/wcache.h"
#include "core/rng.h"

/* How the GEMM operands are stored. bf16 goes to oneDNN's bf16 kernels (2 bytes an element) on CPUs with
 * AVX512-BF16. Elsewhere, and for fp16 (no CPU here multiplies fp16), an operand is fp32 holding values rounded to
 * the format's precision: the product of two such values (8- or 11-bit significands) is exact in fp32 and the
 * accumulation is fp32, so the GEMM computes what the format's own kernel would, up to the order of summation,
 * at fp32 speed plus the rounding pass. */
typedef enum {
    LLM4D_CPU_FP32 = 0,  /* fp32 training: operands read in place */
    LLM4D_CPU_BF16,      /* bf16 storage, oneDNN bf16 kernels */
    LLM4D_CPU_FP32_BF16, /* fp32 storage of bf16-rounded values (CPUs without AVX512-BF16) */
    LLM4D_CPU_FP32_FP16, /* fp32 storage of fp16-rounded values */
} llm4d_cpu_fmt;
/* The format for precision p on this CPU. */
llm4d_cpu_fmt llm4d_cpu_fmt_of(llm4d_precision p);
/* Whether the linear layers' GEMMs in precision p run on our AMX kernel (cpu_amx.h): bf16 storage, a CPU with AMX
 * whose tile state the kernel granted, and oneDNN's ISA not capped below AMX (ONEDNN_MAX_CPU_ISA, which the tests
 * use to run an AMX machine the way an AVX512-BF16 one runs). */
int llm4d_cpu_amx_for(llm4d_precision p);

/* How a weight's low-precision copy is laid out (cpu_wcache.c): in the weight's own row order (oneDNN's operand),
 * or as the AMX kernel's B tiles of W (the input gradient dX = dY W) or of W^T (the forward Y = X W^T). */
typedef enum { LLM4D_CPU_ROWS = 0, LLM4D_CPU_TILES_W, LLM4D_CPU_TILES_WT } llm4d_cpu_layout;

/* The gradient ranges owed zeros (cpu_owed.c): sorted, disjoint byte ranges [lo, hi). */
typedef struct {
    uintptr_t lo, hi;
} llm4d_cpu_range;
typedef struct {
    llm4d_cpu_range *r;
    int n, cap;
} llm4d_cpu_owed;

typedef struct {
    llm4d_dnnl *dnnl;
    float *work;             /* attention: its blocks and accumulators, grown only for larger shapes */
    size_t work_cap;         /* floats */
    llm4d_dnnl_prim **prims; /* attention GEMM handles, ATT_NPRIM per (row block, key block) */
    size_t prims_cap;
    llm4d_cpu_fmt fmt;       /* how the operands of all GEMMs are stored */
    int bf16_checked, bf16_slow; /* set_precision measured the bf16 and fp32 peaks; bf16's was the slower */
    int bf16_faked;              /* the tests said so (LLM4D_FAULT=bf16slow@1, core/fault.h) */
    double peak_fp32, peak_bf16; /* those peaks, GFLOP/s (describe_gemms says why the format was chosen) */
    int amx;                 /* the linear layers' GEMMs run on the AMX kernel, operands in its tiles (cpu_amx.h) */
    int att_amx;             /* an attention ran its products on the AMX kernel (cpu_attn.c), for describe_gemms */
    int lin_amx;             /* a linear layer ran on it (cpu.c), likewise */
    void *cvt[4];            /* converted copies of the GEMM operands: two (attention: qkv and dout), three on the
                              * AMX path (a weight gradient's two tiled operands beside the input gradient's; the
                              * attention's per-head tiles); slot 2 a block of a transposed weight elsewhere (cpu.c,
                              * dinp_by_blocks); slot 3 the fp32 result of a GEMM that cannot store its output's
                              * 16-bit type itself (cpu.c, gemm_out) */
    size_t cvt_cap[4];       /* bytes */
    int avx2_nocopy;         /* oneDNN's sgemm is its AVX2 one: go around its no-copy kernels (cpu.c nocopy_fp32) */
    double *colsum;          /* partial column sums of an output gradient (a bias gradient fused into its conversion) */
    size_t colsum_cap;       /* doubles */
    llm4d_wcache wc;         /* low-precision copies of the weights (wcache.h; stored by cpu_wcache.c) */
    llm4d_cpu_owed owed;     /* gradients reset and not yet written (cpu_owed.c) */
    /* the backend's own timers (backend.h, work_stats): exclusive seconds and calls per kind of work */
    double work_s[LLM4D_WORK_N], work_calls[LLM4D_WORK_N];
    double optim_bytes;
    int work_cur;            /* the kind being timed now, -1 outside any kernel */
} cpu_ctx;

static inline cpu_ctx *ctx_of(llm4d_backend *be) { return (cpu_ctx *)be->ctx; }

/* ---------------------------------------------------------------------------------------------------------- */
/* timers: WORK_SCOPE(cx, kind) at the top of a method times the rest of its body as `kind`. Scopes nest (a linear
 * layer converting its operands): the inner time is moved from the outer kind to the inner one, so every second
 * is counted once. Only the calling thread times (never inside a parallel region); one clock read per entry and
 * exit, tens of nanoseconds against kernels of microseconds at least. */

typedef struct {
    cpu_ctx *cx;
    double t0;
    int outer;
} work_mark;

static inline work_mark work_enter(cpu_ctx *cx, int kind) {
    work_mark m = {cx, omp_get_wtime(), cx->work_cur};
    cx->work_cur = kind;
    cx->work_calls[kind] += 1;
    return m;
}

static inline void work_leave(work_mark *m) {
    cpu_ctx *cx = m->cx;
    const double dt = omp_get_wtime() - m->t0;
    cx->work_s[cx->work_cur] += dt;
    if (m->outer >= 0) cx->work_s[m->outer] -= dt;
    cx->work_cur = m->outer;
}

#define WORK_SCOPE(cx, kind) work_mark work_mark_ __attribute__((cleanup(work_leave), unused)) = work_enter(cx, kind)

/* ---------------------------------------------------------------------------------------------------------- */
/* vectorisable math */

/* exp(x) for x in [-87, 88] (clamped outside): Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, then a degree-6
 * Taylor polynomial (truncation < 1.3e-7 relative) and 2^n built in the exponent bits. */
static inline float vexp(float x) {
    /* two plain clamps, not a nested conditional: GCC makes VMAXPS/VMINPS of these, but if-converted the nested
     * form into mask arithmetic through general registers (GELU's backward 40 % slower) */
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    /* n = round(x / ln2) by the 1.5*2^23 trick: ternaries and this trick vectorise, libm's floorf/fminf may not */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.428606765330187e-06f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* GELU, tanh approximation (GPT-2): gelu(x) = 0.5 x (1 + tanh u) = x sigmoid(2u), u = K (x + 0.044715 x^3).
 * With e = exp(-2|u|) <= 1 and q = 1/(1 + e): sigmoid(2u) = q for u >= 0, e q for u < 0, and
 * sigmoid(2u) (1 - sigmoid(2u)) = e q^2 for both signs. No overflow, no clamp beyond vexp's own, and no
 * cancellation: 1 - tanh^2 u computed as 1 - th*th lost the derivative's digits where |tanh u| is near 1, and
 * tanh clamped at |u| <= 9 left sech^2(9) = 6e-8 times a polynomial derivative of ~120 (x = -30: 9e-5 absolute
 * error in the gradient). Both functions agree with the double-precision formulas to 6e-7 absolute on [-60, 60]. */
#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
static inline float vgelu(float x) {
    const float u = GELU_K * (x + 0.044715f * x * x * x), e = vexp(-2.0f * fabsf(u)), q = 1.0f / (1.0f + e);
    return x * (u >= 0.0f ? q : e * q);
}
/* d gelu / dx = s + x 2 s (1 - s) du/dx, s = sigmoid(2u) */
static inline float vgelu_grad(float x) {
    const float u = GELU_K * (x + 0.044715f * x * x * x), e = vexp(-2.0f * fabsf(u)), q = 1.0f / (1.0f + e);
    const float s = u >= 0.0f ? q : e * q;
    return s + 2.0f * x * e * q * q * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* typed tensors (backend/tensor.h), cpu_cast.c: the kernels compute in fp32 on rows or pieces of their tensors.
 * An fp32 tensor is used in place (its kernel then runs the very loops it ran before tensors had types: the fp32
 * path keeps its bits); a 16-bit one is widened into a buffer on the way in and rounded once on the way out. */

/* dst[k] = element i + k of t as fp32, k < n (exact: bf16 and fp16 values are fp32 values). */
void llm4d_cpu_load(float *dst, llm4d_ctensor t, size_t i, size_t n);
/* element i + k of t = src[k] rounded to t's type (to nearest even), k < n. */
void llm4d_cpu_store(llm4d_tensor t, size_t i, const float *src, size_t n);

/* n values of t from element i as fp32: t's own memory when it is fp32, else widened into buf. */
static inline const float *cpu_in(llm4d_ctensor t, size_t i, size_t n, float *buf) {
    if (t.t == LLM4D_F32) return (const float *)t.p + i;
    llm4d_cpu_load(buf, t, i, n);
    return buf;
}
/* Where a kernel writes n fp32 results for element i on of t: t itself when it is fp32, else buf, which cpu_done
 * then rounds into t. A kernel that adds (+=) to t starts buf from t's values (cpu_acc). */
static inline float *cpu_out(llm4d_tensor t, size_t i, float *buf) { return t.t == LLM4D_F32 ? (float *)t.p + i : buf; }
static inline float *cpu_acc(llm4d_tensor t, size_t i, size_t n, float *buf) {
    if (t.t == LLM4D_F32) return (float *)t.p + i;
    llm4d_cpu_load(buf, (llm4d_ctensor){t.p, t.t}, i, n);
    return buf;
}
static inline void cpu_done(llm4d_tensor t, size_t i, const float *buf, size_t n) {
    if (t.t != LLM4D_F32) llm4d_cpu_store(t, i, buf, n);
}
/* A thread's buffer of n floats for the rows it widens (NULL for n == 0: a kernel whose tensors are all fp32 needs
 * none), allocated inside the kernel's parallel region and freed at its end with free(). */
float *llm4d_cpu_thread_buf(size_t n);

/* ---------------------------------------------------------------------------------------------------------- */
/* shared between the files (cpu.c) */

/* Reductions (sumsq, dot) sum chunks of a size that depends only on n and add the partials in chunk order, so the
 * thread count cannot change the result. At most SUMSQ_MAXCHUNKS partials live on the stack. */
#define SUMSQ_MINCHUNK 16384
#define SUMSQ_MAXCHUNKS 4096

/* Bytes of one GEMM operand element in format fmt. */
static inline size_t llm4d_cpu_operand_bytes(llm4d_cpu_fmt fmt) { return fmt == LLM4D_CPU_BF16 ? 2 : 4; }
/* n floats to operand format fmt: on the calling thread (inside parallel regions), or parallelised. */
void llm4d_cpu_convert_block(llm4d_cpu_fmt fmt, void *dst, const float *src, size_t n);
void llm4d_cpu_convert(llm4d_cpu_fmt fmt, void *dst, const float *src, size_t n);
/* Elements [i, i + n) of a typed tensor to operand format fmt, on the calling thread. */
void llm4d_cpu_convert_typed(llm4d_cpu_fmt fmt, void *dst, llm4d_ctensor src, size_t i, size_t n);
/* Whether format fmt stores GEMM operands as tensors of type t do: a GEMM then reads such a tensor in place. */
static inline int llm4d_cpu_in_place(llm4d_cpu_fmt fmt, llm4d_ftype t) {
    return (fmt == LLM4D_CPU_FP32 && t == LLM4D_F32) || (fmt == LLM4D_CPU_BF16 && t == LLM4D_BF16);
}
/* Conversion slot `slot` (0 to 3) with room for at least `bytes`: the linear layers' operands, the attention's
 * packed operands, a transposed weight block, a GEMM's fp32 result. */
void *llm4d_cpu_slot(cpu_ctx *cx, int slot, size_t bytes);
/* The operand `src` (n elements) in the working precision, in conversion slot `slot` (0 or 1): src itself where
 * it is stored so (llm4d_cpu_in_place). */
const void *llm4d_cpu_operand(cpu_ctx *cx, int slot, llm4d_ctensor src, size_t n);
/* The operand act(src), the activation applied in the conversion's pass (src itself for LLM4D_ACT_NONE in place). */
const void *llm4d_cpu_operand_act(cpu_ctx *cx, int slot, llm4d_ctensor src, size_t n, llm4d_act act);
/* A 2-D GEMM (llm4d_dnnl_mm_2d's arguments) whose operands are in the working precision. */
llm4d_dnnl_mm llm4d_cpu_gemm_2d(const cpu_ctx *cx, int64_t M, int64_t N, int64_t K, int ta, int64_t lda, int tb,
                                int64_t ldb, int64_t ldc, int accumulate);
/* n floats to bf16 on the calling thread (AVX512-BF16: only called in format LLM4D_CPU_BF16). */
void llm4d_cpu_cvt_bf16_block(uint16_t *d, const float *s, size_t n);

/* cpu_attn.c */
void llm4d_cpu_attention_forward(llm4d_backend *be, llm4d_tensor out, float *lse, llm4d_ctensor qkv,
                                 llm4d_attn_shape s, const llm4d_dropout *drop);
void llm4d_cpu_attention_backward(llm4d_backend *be, llm4d_tensor dqkv, llm4d_ctensor dout, llm4d_ctensor out,
                                  llm4d_ctensor qkv, const float *lse, llm4d_attn_shape s, const llm4d_dropout *drop);
size_t llm4d_cpu_attention_workspace(const cpu_ctx *cx);
void llm4d_cpu_attention_free(cpu_ctx *cx);

/* cpu_linear.c: fills the linear layers' entries and operand_workspace */
void llm4d_cpu_linear_install(llm4d_backend *be);
/* The format precision p runs in on this backend: llm4d_cpu_fmt_of's, unless set_precision found the CPU's bf16
 * GEMMs slower than its fp32 ones (cpu.c); and the bytes of one operand element in it. */
llm4d_cpu_fmt llm4d_cpu_fmt_for(const cpu_ctx *cx, llm4d_precision p);
size_t llm4d_cpu_operand_bytes_of(llm4d_backend *be, llm4d_precision prec);
/* cpu_elem.c: fills the element-wise entries of the method table */
void llm4d_cpu_elem_install(llm4d_backend *be);
/* cpu_cast.c: the convert method */
void llm4d_cpu_cast_install(llm4d_backend *be);
/* cpu_llama.c: the Llama family's element-wise entries (RMSNorm, RoPE, SwiGLU) */
void llm4d_cpu_llama_install(llm4d_backend *be);
/* A normalisation's weight and bias gradients (cpu_elem.c): dw += sum over rows of dout (x - mean) rstd, db += sum
 * of dout (NULL: no bias), mean NULL for RMSNorm; over fixed blocks of channels with the rows in order, in double,
 * so no result depends on the thread count. Its loop is a worksharing one: call it inside an omp parallel region. */
void llm4d_cpu_norm_wgrad(llm4d_ctensor dout, llm4d_ctensor inp, const float *mean, const float *rstd, float *dw,
                          float *db, int N, int C);
/* cpu_wcache.c: the weights' low-precision copies, in host memory (the table is wcache.h's) */
/* gives cx->wc its storage; at creation */
void llm4d_cpu_wcache_init(cpu_ctx *cx);
/* w (n elements, a linear layer's weight) in the working precision: its copy, made now if it has none or a stale
 * one; w itself in fp32 mode. */
const void *llm4d_cpu_weight(cpu_ctx *cx, const float *w, size_t n);
/* The weight w [rows, cols] as the AMX kernel's B tiles (layout LLM4D_CPU_TILES_W or LLM4D_CPU_TILES_WT), a copy
 * kept like the others. */
const uint16_t *llm4d_cpu_weight_tiles(cpu_ctx *cx, const float *w, int rows, int cols, llm4d_cpu_layout layout);

/* cpu_owed.c: gradients reset without being zeroed (backend.h grads_reset). A kernel about to write bytes of a
 * gradient at p asks llm4d_cpu_grad_take: 1 when all of them are owed zeros (the kernel writes them, as if adding
 * to zeros; they are owed no more), else 0 after writing zeros over any owed part (the kernel adds). A kernel that
 * only adds, or reads a range, calls llm4d_cpu_grad_settle (p NULL: everything owed); one that overwrites a range
 * with other values calls llm4d_cpu_grad_written (its owed parts are dropped unwritten). */
int llm4d_cpu_grad_take(cpu_ctx *cx, const void *p, size_t bytes);
void llm4d_cpu_grad_settle(cpu_ctx *cx, const void *p, size_t bytes);
void llm4d_cpu_grad_written(cpu_ctx *cx, const void *p, size_t bytes);
void llm4d_cpu_owed_install(llm4d_backend *be);
/* bytes of zeros at p, on the backend's threads above a megabyte (cpu.c) */
void llm4d_cpu_memzero(void *p, size_t bytes);

/* cpu_optim.c: fills the optimizer's entries (adamw, sumsq) */
void llm4d_cpu_optim_install(llm4d_backend *be);

#endif
