/* matmul_peak.c — what the CPU can do: oneDNN matmul throughput, and how close the backend's kernels get.
 *
 * The training step's efficiency target is stated against this machine's matmul peak, so the peak is measured
 * here the same way the backend runs its GEMMs (a cached oneDNN primitive, cpu_dnnl.h), on large shapes: a
 * 2048^3 square and the GPT-2 124M MLP shape (8192 x 768 x 3072, both orientations). Best of several runs after
 * a warm-up. fp32 always; bf16 inputs with fp32 accumulation and output when the CPU has avx512_bf16 (oneDNN's
 * brg:avx512_core_bf16 kernel), and on AMX CPUs llm4d's own AMX kernel (src/backend/cpu_amx.h), the bf16 peak being
 * the faster of the two. Threads: OMP_NUM_THREADS (oneDNN uses the OpenMP runtime).
 *
 * Output (machine-readable lines):  fp32_peak_gflops: X   bf16_peak_gflops: Y   (0 when unsupported)
 * Usage: matmul_peak [--ops | --linear | --attention] [--no-lmhead] [--tokens N] [--reps N]. On a shared machine
 * take the best of many runs. --attention: the peaks, then only the attention's timings (a quick loop for work on
 * cpu_attn.c); --linear: the peaks, then only the linear layers (and the LM head unless --no-lmhead).
 *
 * With --ops it then times the backend itself at GPT-2 124M shapes (N = B*T = 8192, or --tokens N): linear
 * forward and backward for each layer shape including the 50304-wide LM head, and attention forward + backward at
 * B=8, T=1024, NH=12, HS=64 (p = 0 and p = 0.1), printing GFLOP/s and the fraction of the fp32 peak; with
 * avx512_bf16 the linear layers (the LM head for a chunk of at most 512 tokens, as the model runs it) and the
 * attention again with bf16 GEMM operands ("linear bf16 ...", "attention bf16 ...", against the bf16 peak); a bf16
 * linear layer's time includes its operand conversions, as in a training step. */
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_amx.h"
#include "backend/cpu_dnnl.h"
#include "core/rng.h"
#include "core/timer.h"

static void *xalloc(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p) {
        fprintf(stderr, "matmul_peak: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static void fill_f32(float *x, size_t n, uint64_t stream) {
    for (size_t i = 0; i < n; i++) x[i] = 0.02f * (float)((i * 2654435761u + stream) % 1000) - 10.0f;
}

/* round-to-nearest-even fp32 -> bf16 bits */
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* best GFLOP/s of reps runs of C[M,N] = A[M,K] B[K,N] */
static double time_matmul(llm4d_dnnl *d, int64_t M, int64_t N, int64_t K, llm4d_dnnl_type t, int reps,
                          const char **impl) {
    size_t es = t == LLM4D_DNNL_BF16 ? 2 : 4;
    void *a = xalloc((size_t)M * K * es), *b = xalloc((size_t)K * N * es);
    float *c = xalloc((size_t)M * N * sizeof(float));
    if (t == LLM4D_DNNL_BF16) {
        for (size_t i = 0; i < (size_t)M * K; i++) ((uint16_t *)a)[i] = to_bf16(0.001f * (float)(i % 997));
        for (size_t i = 0; i < (size_t)K * N; i++) ((uint16_t *)b)[i] = to_bf16(0.001f * (float)(i % 991));
    } else {
        fill_f32(a, (size_t)M * K, 1);
        fill_f32(b, (size_t)K * N, 2);
    }
    llm4d_dnnl_mm mm = llm4d_dnnl_mm_2d(M, N, K, 0, K, 0, N, N, 0);
    mm.ab_type = t;
    llm4d_err err = {0};
    if (llm4d_dnnl_prepare(d, &mm, impl, &err) != LLM4D_OK) {
        fprintf(stderr, "matmul_peak: %s\n", err.msg);
        exit(1);
    }
    llm4d_dnnl_matmul(d, &mm, a, b, NULL, c); /* warm-up: page faults, caches, thread pool */
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = llm4d_now();
        llm4d_dnnl_matmul(d, &mm, a, b, NULL, c);
        double dt = llm4d_now() - t0;
        if (dt < best) best = dt;
    }
    free(a), free(b), free(c);
    return 2.0 * (double)M * N * K / best / 1e9;
}

static double peak(llm4d_dnnl *d, llm4d_dnnl_type t, const char *name, int reps) {
    static const int64_t shapes[][3] = {{2048, 2048, 2048}, {8192, 3072, 768}, {8192, 768, 3072}};
    double best = 0.0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const char *impl = "?";
        double g = time_matmul(d, shapes[i][0], shapes[i][1], shapes[i][2], t, reps, &impl);
        printf("# %s M=%lld N=%lld K=%lld: %.1f GFLOP/s (%s)\n", name, (long long)shapes[i][0],
               (long long)shapes[i][1], (long long)shapes[i][2], g, impl);
        if (g > best) best = g;
    }
    return best;
}

/* llm4d's AMX kernel (src/backend/cpu_amx.h) on the same shapes, operands packed as the backend packs them: on AMX
 * machines the bf16 peak is the faster of the two, since the linear layers run on it. */
static double amx_peak(int reps) {
    static const int shapes[][3] = {{2048, 2048, 2048}, {8192, 3072, 768}, {8192, 768, 3072}};
    double best = 0.0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int M = shapes[i][0], N = shapes[i][1], K = shapes[i][2];
        float *x = xalloc((size_t)M * K * 4), *w = xalloc((size_t)N * K * 4), *c = xalloc((size_t)M * N * 4);
        uint16_t *a = xalloc(llm4d_amx_a_elems(M, K) * 2), *b = xalloc(llm4d_amx_b_elems(K, N) * 2);
        fill_f32(x, (size_t)M * K, 1);
        fill_f32(w, (size_t)N * K, 2);
        llm4d_amx_pack_a(a, llm4d_ct32(x), K, M, K, LLM4D_ACT_NONE);
        llm4d_amx_pack_b_t(b, llm4d_ct32(w), K, N, K);
        llm4d_amx_gemm(c, N, a, b, NULL, M, N, K, 0); /* warm-up */
        double t = 1e30;
        for (int r = 0; r < reps; r++) {
            const double t0 = llm4d_now();
            llm4d_amx_gemm(c, N, a, b, NULL, M, N, K, 0);
            const double dt = llm4d_now() - t0;
            if (dt < t) t = dt;
        }
        const double g = 2.0 * M * N * K / t / 1e9;
        printf("# bf16 M=%d N=%d K=%d: %.1f GFLOP/s (llm4d's AMX kernel)\n", M, N, K, g);
        if (g > best) best = g;
        free(x), free(w), free(c), free(a), free(b);
    }
    return best;
}

/* ---------------------------------------------------------------------------------------------------------- */

static double best_of(int reps, void (*fn)(void *), void *arg) {
    fn(arg); /* warm-up (creates the primitives) */
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = llm4d_now();
        fn(arg);
        double dt = llm4d_now() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

typedef struct {
    llm4d_backend *be;
    int N, C, OC;
    llm4d_ftype t; /* the activations' type: fp32, or bf16 as AMP O2 keeps them */
    float *w, *b, *dw, *db;
    void *inp, *out, *dout, *dinp;
} lin_args;

static void lin_fwd(void *p) {
    lin_args *a = p;
    a->be->linear_forward(a->be, llm4d_t(a->out, a->t), llm4d_ct(a->inp, a->t), a->w, a->b, a->N, a->C, a->OC);
}

/* fp32: the input gradient added, as before tensors had types; O2: written, as a block's layers do */
static void lin_bwd(void *p) {
    lin_args *a = p;
    a->be->linear_backward(a->be, llm4d_t(a->dinp, a->t), a->t == LLM4D_F32 ? LLM4D_ADD : LLM4D_WRITE, a->dw, a->db,
                           llm4d_ct(a->dout, a->t), llm4d_ct(a->inp, a->t), a->w, a->N, a->C, a->OC);
}

/* prec names the backend's current GEMM operand precision; peak is that precision's matmul peak; t the type of the
 * activations (bf16: AMP O2's, read and written in place where the GEMM's operands are bf16) */
static void bench_linear_t(llm4d_backend *be, int N, int C, int OC, int bias, const char *prec, double peak, int reps,
                           llm4d_ftype t) {
    lin_args a = {be, N, C, OC, t, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    const size_t es = llm4d_ftype_size(t);
    float *inp = xalloc((size_t)N * C * 4), *dout = xalloc((size_t)N * OC * 4);
    a.inp = xalloc((size_t)N * C * es), a.w = xalloc((size_t)OC * C * 4), a.b = bias ? xalloc((size_t)OC * 4) : NULL;
    a.out = xalloc((size_t)N * OC * es), a.dout = xalloc((size_t)N * OC * es), a.dinp = xalloc((size_t)N * C * es);
    a.dw = xalloc((size_t)OC * C * 4), a.db = bias ? xalloc((size_t)OC * 4) : NULL;
    fill_f32(inp, (size_t)N * C, 3);
    fill_f32(a.w, (size_t)OC * C, 4);
    if (bias) fill_f32(a.b, OC, 5), memset(a.db, 0, (size_t)OC * 4);
    fill_f32(dout, (size_t)N * OC, 6);
    for (size_t i = 0; i < (size_t)N * C; i++) llm4d_ftype_set(llm4d_t(a.inp, t), i, inp[i]);
    for (size_t i = 0; i < (size_t)N * OC; i++) llm4d_ftype_set(llm4d_t(a.dout, t), i, dout[i]);
    memset(a.dinp, 0, (size_t)N * C * es);
    memset(a.dw, 0, (size_t)OC * C * 4);
    double flop = 2.0 * N * C * OC;
    double tf = best_of(reps, lin_fwd, &a), tb = best_of(reps, lin_bwd, &a);
    printf("linear%s%s%s N=%d C=%d OC=%d bias=%d: forward %.1f ms %.1f GFLOP/s (%.0f%% of peak), backward %.1f ms "
           "%.1f GFLOP/s (%.0f%%)\n",
           strcmp(prec, "fp32") ? " " : "", strcmp(prec, "fp32") ? prec : "", t == LLM4D_F32 ? "" : " O2", N, C, OC,
           bias, tf * 1e3, flop / tf / 1e9, 100 * flop / tf / 1e9 / peak, tb * 1e3, 2 * flop / tb / 1e9,
           100 * 2 * flop / tb / 1e9 / peak);
    free(inp), free(dout);
    free(a.inp), free(a.w), free(a.b), free(a.out), free(a.dout), free(a.dinp), free(a.dw), free(a.db);
}

static void bench_linear(llm4d_backend *be, int N, int C, int OC, int bias, const char *prec, double peak, int reps) {
    bench_linear_t(be, N, C, OC, bias, prec, peak, reps, LLM4D_F32);
}

typedef struct {
    llm4d_backend *be;
    llm4d_attn_shape s;
    llm4d_dropout *drop;
    float *qkv, *out, *lse, *dout, *dqkv;
} att_args;

static void att_fwd(void *p) {
    att_args *a = p;
    a->be->attention_forward(a->be, llm4d_t32(a->out), a->lse, llm4d_ct32(a->qkv), a->s, a->drop);
}

static void att_bwd(void *p) {
    att_args *a = p;
    a->be->attention_backward(a->be, llm4d_t32(a->dqkv), llm4d_ct32(a->dout), llm4d_ct32(a->out), llm4d_ct32(a->qkv),
                              a->lse, a->s, a->drop);
}

/* prec names the backend's current GEMM operand precision; peak is that precision's matmul peak */
static void bench_attention(llm4d_backend *be, float p, const char *prec, double peak, int reps) {
    llm4d_attn_shape s = {8, 1024, 12, 64, 0, 12, 0};
    int64_t sids[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    /* as the model runs it: with dropout, the mask drawn in forward is kept as bits for backward */
    uint32_t *bits = p > 0.0f ? xalloc((size_t)s.B * s.NH * s.T * LLM4D_MASK_WORDS(s.T) * sizeof(uint32_t)) : NULL;
    llm4d_dropout drop = {p, 1, llm4d_rng_stream(LLM4D_RNG_DROPOUT, 0, LLM4D_DROP_ATTN_PROBS, 1), sids, s.T, 0, bits};
    const size_t C = (size_t)s.NH * s.HS, nqkv = (size_t)s.B * s.T * 3 * C, nout = (size_t)s.B * s.T * C;
    const size_t nlse = (size_t)s.B * s.NH * s.T;
    att_args a = {be, s, &drop, xalloc(nqkv * 4), xalloc(nout * 4), xalloc(nlse * 4), xalloc(nout * 4),
                  xalloc(nqkv * 4)};
    for (size_t i = 0; i < nqkv; i++) a.qkv[i] = llm4d_rng_normal(1, 2, i);
    for (size_t i = 0; i < nout; i++) a.dout[i] = llm4d_rng_normal(1, 3, i);
    memset(a.dqkv, 0, nqkv * 4);
    /* forward runs first, so backward gets a real out and lse */
    double tf = best_of(reps, att_fwd, &a), tb = best_of(reps, att_bwd, &a);
    /* useful (causal) FLOPs: QK^T and PV forward, 4 products backward, each 2*B*NH*HS*T(T+1)/2 (backward's
     * recomputation of QK^T is not counted as useful) */
    double prod = 2.0 * s.B * s.NH * s.HS * (double)s.T * (s.T + 1) / 2.0;
    printf("attention%s%s B=%d T=%d NH=%d HS=%d p=%.1f: forward %.1f ms, backward %.1f ms, total %.1f ms "
           "(%.1f causal GFLOP/s, %.0f%% of %s peak)\n",
           strcmp(prec, "fp32") ? " " : "", strcmp(prec, "fp32") ? prec : "", s.B, s.T, s.NH, s.HS, p, tf * 1e3,
           tb * 1e3, (tf + tb) * 1e3, 6 * prod / (tf + tb) / 1e9, 100 * 6 * prod / (tf + tb) / 1e9 / peak, prec);
    free(a.qkv), free(a.out), free(a.lse), free(a.dout), free(a.dqkv), free(bits);
}

int main(int argc, char **argv) {
    int ops = 0, lmhead = 1, linear = 1, attention = 1, reps = 5, ntok = 8192;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ops") == 0)
            ops = 1;
        else if (strcmp(argv[i], "--no-lmhead") == 0)
            lmhead = 0;
        else if (strcmp(argv[i], "--attention") == 0)
            ops = 1, linear = 0, lmhead = 0;
        else if (strcmp(argv[i], "--linear") == 0)
            ops = 1, attention = 0;
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
            ops = 1, ntok = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: matmul_peak [--ops | --linear | --attention] [--no-lmhead] [--tokens N] "
                            "[--reps N (best of N, default 5)]\n");
            return 2;
        }
    }
    llm4d_dnnl *d;
    llm4d_err err = {0};
    if (llm4d_dnnl_create(&d, &err) != LLM4D_OK) {
        fprintf(stderr, "matmul_peak: %s\n", err.msg);
        return 1;
    }
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    int has_bf16 = (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
    double f32 = peak(d, LLM4D_DNNL_F32, "fp32", reps);
    double bf16 = has_bf16 ? peak(d, LLM4D_DNNL_BF16, "bf16", reps) : 0.0;
    if (has_bf16 && (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx && llm4d_amx_usable()) {
        const double amx = amx_peak(reps);
        if (amx > bf16) bf16 = amx;
    }
    if (!has_bf16) printf("# bf16: the CPU lacks avx512_bf16 (oneDNN ISA 0x%x)\n", (unsigned)isa);
    printf("# oneDNN scratchpad for these shapes: %.1f MiB\n", llm4d_dnnl_scratch_bytes(d) / 1048576.0);
    printf("fp32_peak_gflops: %.1f\n", f32);
    printf("bf16_peak_gflops: %.1f\n", bf16);
    llm4d_dnnl_destroy(d);
    fflush(stdout);
    if (!ops) return 0;

    llm4d_backend *be;
    if (llm4d_backend_cpu_create(&be, 0, &err) != LLM4D_OK) {
        fprintf(stderr, "matmul_peak: %s\n", err.msg);
        return 1;
    }
    printf("# backend cpu, %d threads, GPT-2 124M shapes, N = B*T = %d\n", be->nthreads, ntok);
    if (linear) {
        bench_linear(be, ntok, 768, 2304, 1, "fp32", f32, reps); /* qkv */
        bench_linear(be, ntok, 768, 768, 1, "fp32", f32, reps);  /* attention projection */
        bench_linear(be, ntok, 768, 3072, 1, "fp32", f32, reps); /* MLP up */
        bench_linear(be, ntok, 3072, 768, 1, "fp32", f32, reps); /* MLP down */
        if (has_bf16 && be->set_precision(be, LLM4D_PREC_BF16, &err) == LLM4D_OK) {
            for (int o2 = 0; o2 <= 1; o2++) { /* fp32 activations (O1), then bf16 ones (O2) */
                const llm4d_ftype t = o2 ? LLM4D_BF16 : LLM4D_F32;
                bench_linear_t(be, ntok, 768, 2304, 1, "bf16", bf16, reps, t);
                bench_linear_t(be, ntok, 768, 768, 1, "bf16", bf16, reps, t);
                bench_linear_t(be, ntok, 768, 3072, 1, "bf16", bf16, reps, t);
                bench_linear_t(be, ntok, 3072, 768, 1, "bf16", bf16, reps, t);
                if (lmhead) bench_linear_t(be, ntok < 512 ? ntok : 512, 768, 50304, 0, "bf16", bf16, reps, t);
            }
            be->set_precision(be, LLM4D_PREC_FP32, &err);
        }
    }
    fflush(stdout);
    if (attention) bench_attention(be, 0.0f, "fp32", f32, reps);
    if (attention) bench_attention(be, 0.1f, "fp32", f32, reps);
    fflush(stdout);
    if (attention && has_bf16 && be->set_precision(be, LLM4D_PREC_BF16, &err) == LLM4D_OK) {
        bench_attention(be, 0.0f, "bf16", bf16, reps);
        bench_attention(be, 0.1f, "bf16", bf16, reps);
        be->set_precision(be, LLM4D_PREC_FP32, &err);
        fflush(stdout);
    }
    if (lmhead) bench_linear(be, ntok, 768, 50304, 0, "fp32", f32, reps < 2 ? reps : 2); /* LM head (tied, no bias) */
    be->destroy(be);
    return 0;
}
