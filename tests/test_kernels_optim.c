/* test_kernels_optim.c — the fast CPU backend's fused optimizer pass against the reference backend, its
 * low-precision weight copies, and the backend's own timers (test_kernels.c covers every other kernel).
 *
 * AdamW fused with the gradient zeroing must give the reference's parameters and states (it computes the same
 * float formula in the same order, so to the last bit but for the compiler's contraction choices: 1e-6 relative)
 * and leave the gradients zero, or untouched without zero_grads, over sizes that cross its chunks. The timers must
 * put each kernel's time in its kind (a linear layer in gemm, its operand conversions in convert, LayerNorm in
 * elementwise, the cross-entropy in loss, AdamW and the norm in optimizer), count every second once (nested
 * scopes), and count the optimizer's bytes: 32 per element for AdamW with zeroing, 28 without, 4 for the norm.
 * The weight copies (bf16, and fp16-rounded fp32) must never change a result: every linear layer computed with a
 * kept copy equals, bit for bit, the same layer on a fresh backend that converts the weight now, after AdamW
 * rewrote the copy in its pass, after an update that covered only part of a weight (stale: converted again), after
 * weights_changed for a range or for everything, after memory freed and reused through the backend, and even after
 * a write nobody announced (the sampled-elements guard); and a kept copy must really be reused (the weight is not
 * converted again: only the activations are). Both GEMMs that read a weight are checked (the forward and the input
 * gradient), so on the AMX path both tile layouts of a weight, which AdamW's pass writes, are. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dnnl.h>

#include "backend/backend.h"
#include "backend/cpu_amx.h"
#include "backend/cpu_impl.h"
#include "core/rng.h"
#include "core/timer.h"
#include "backend_pair.h"
#include "check.h"

static uint64_t g_stream = 1;

static void fill(float *x, size_t n, float scale) {
    uint64_t st = g_stream++;
    for (size_t i = 0; i < n; i++) x[i] = scale * llm4d_rng_normal(4321, st, i);
}

static float *frand(size_t n, float scale) {
    float *p = falloc(n);
    fill(p, n, scale);
    return p;
}

static double maxrel(const float *a, const float *b, size_t n) {
    double w = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]) / fmax(fabs((double)b[i]), 1e-6);
        if (!(d <= w)) w = d;
    }
    return w;
}

static llm4d_work_stats stats(llm4d_backend *be) {
    llm4d_work_stats w;
    be->work_stats(be, &w);
    return w;
}

/* three steps of the fused pass on cpu against ref, zeroing or not */
static void test_adamw_fused(llm4d_backend *cpu, llm4d_backend *ref, size_t n, int zero) {
    float *p1 = frand(n, 1.0f), *p2 = falloc(n), *m1 = falloc(n), *m2 = falloc(n), *v1 = falloc(n), *v2 = falloc(n);
    float *g1 = falloc(n), *g2 = falloc(n), *gk = falloc(n);
    memcpy(p2, p1, n * sizeof(float));
    int grads_ok = 1;
    for (int t = 1; t <= 3; t++) {
        fill(gk, n, 1.0f);
        gk[0] = 0.0f; /* v = 0 at step 1: the eps branch */
        memcpy(g1, gk, n * sizeof(float));
        memcpy(g2, gk, n * sizeof(float));
        const float wd = t == 2 ? 0.0f : 0.1f;
        cpu->adamw(cpu, p1, g1, m1, v1, n, 1e-3f, 0.9f, 0.95f, 1e-8f, wd, t, 0.5f, zero);
        ref->adamw(ref, p2, g2, m2, v2, n, 1e-3f, 0.9f, 0.95f, 1e-8f, wd, t, 0.5f, zero);
        for (size_t i = 0; i < n; i++) {
            grads_ok &= g1[i] == g2[i];
            grads_ok &= zero ? g1[i] == 0.0f : g1[i] == gk[i];
        }
    }
    const double ep = maxrel(p1, p2, n), em = maxrel(m1, m2, n), ev = maxrel(v1, v2, n);
    check(ep <= 1e-6 && em <= 1e-6 && ev <= 1e-6, "adamw fused n=%zu zero_grads=%d: params, m, v vs ref (rel %.1e "
          "%.1e %.1e)", n, zero, ep, em, ev);
    check(grads_ok, "adamw fused n=%zu: gradients %s, as ref", n, zero ? "zeroed" : "untouched");
    free(p1), free(p2), free(m1), free(m2), free(v1), free(v2), free(g1), free(g2), free(gk);
}

static void test_optim_bytes(llm4d_backend *cpu) {
    const size_t n = 40000;
    float *p = frand(n, 1.0f), *g = frand(n, 1.0f), *m = falloc(n), *v = falloc(n);
    llm4d_work_stats a = stats(cpu);
    cpu->adamw(cpu, p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1, 1.0f, 1);
    llm4d_work_stats b = stats(cpu);
    cpu->adamw(cpu, p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 2, 1.0f, 0);
    llm4d_work_stats c = stats(cpu);
    (void)cpu->sumsq(cpu, g, n);
    llm4d_work_stats d = stats(cpu);
    check(b.optim_bytes - a.optim_bytes == 32.0 * n && c.optim_bytes - b.optim_bytes == 28.0 * n &&
              d.optim_bytes - c.optim_bytes == 4.0 * n,
          "optimizer bytes: AdamW with zeroing 32/element, without 28, the norm 4 (%.0f %.0f %.0f for n=%zu)",
          b.optim_bytes - a.optim_bytes, c.optim_bytes - b.optim_bytes, d.optim_bytes - c.optim_bytes, n);
    check(d.calls[LLM4D_WORK_OPTIM] - a.calls[LLM4D_WORK_OPTIM] == 3 && d.seconds[LLM4D_WORK_OPTIM] >
          a.seconds[LLM4D_WORK_OPTIM], "AdamW and the norm are timed as optimizer work");
    free(p), free(g), free(m), free(v);
}

/* the kind a method's time lands in, and that the kinds add up to no more than the time spent in the calls */
static void test_timers(llm4d_backend *cpu) {
    const int N = 256, C = 384, OC = 512, V = 1000;
    float *x = frand((size_t)N * C, 1.0f), *w = frand((size_t)OC * C, 0.05f), *b = frand(OC, 0.1f);
    float *y = falloc((size_t)N * OC), *lnw = frand(C, 1.0f), *lnb = frand(C, 0.1f), *mean = falloc(N);
    float *rstd = falloc(N), *logits = frand((size_t)N * V, 1.0f), *st = falloc(3 * (size_t)N);
    int32_t *tg = malloc(N * sizeof *tg);
    for (int i = 0; i < N; i++) tg[i] = (i * 7) % V;
    llm4d_work_stats s0 = stats(cpu);
    const double t0 = llm4d_now();
    cpu->linear_forward(cpu, llm4d_t32(y), llm4d_ct32(x), w, b, N, C, OC);
    const llm4d_work_stats s1 = stats(cpu);
    cpu->layernorm_forward(cpu, llm4d_t32(x), mean, rstd, llm4d_ct32(x), lnw, lnb, N, C);
    const llm4d_work_stats s2 = stats(cpu);
    cpu->xent_forward(cpu, st, llm4d_ct32(logits), tg, N, V, 0, V, 0);
    const llm4d_work_stats s3 = stats(cpu);
    const double wall = llm4d_now() - t0;
    double sum = 0.0;
    for (int k = 0; k < LLM4D_WORK_N; k++) sum += s3.seconds[k] - s0.seconds[k];
    check(s1.calls[LLM4D_WORK_GEMM] == s0.calls[LLM4D_WORK_GEMM] + 1 &&
              s1.seconds[LLM4D_WORK_GEMM] > s0.seconds[LLM4D_WORK_GEMM] &&
              s1.calls[LLM4D_WORK_CONVERT] == s0.calls[LLM4D_WORK_CONVERT],
          "fp32 linear forward: one gemm call, no conversion");
    check(s2.calls[LLM4D_WORK_ELEM] == s1.calls[LLM4D_WORK_ELEM] + 1 &&
              s2.seconds[LLM4D_WORK_ELEM] > s1.seconds[LLM4D_WORK_ELEM],
          "LayerNorm is element-wise work");
    check(s3.calls[LLM4D_WORK_LOSS] == s2.calls[LLM4D_WORK_LOSS] + 1 &&
              s3.seconds[LLM4D_WORK_LOSS] > s2.seconds[LLM4D_WORK_LOSS],
          "the cross-entropy is loss work");
    check(sum > 0 && sum <= wall, "the kinds' seconds (%.3g s) add up to at most the calls' wall time (%.3g s)", sum,
          wall);
    char d[512] = "";
    cpu->describe_gemms(cpu, d, sizeof d);
    check(strstr(d, "oneDNN ISA") != NULL && strstr(d, "linear GEMMs: ") != NULL && strstr(d, " x") != NULL,
          "describe_gemms names the ISA and the linear GEMMs' implementation: %s", d);
    llm4d_err err = {0};
    check(cpu->set_precision(cpu, LLM4D_PREC_BF16, &err) == LLM4D_OK, "set_precision(bf16) on this CPU: %s",
          err.msg[0] ? err.msg : "accepted");
    s0 = stats(cpu);
    cpu->linear_forward(cpu, llm4d_t32(y), llm4d_ct32(x), w, b, N, C, OC);
    const llm4d_work_stats s4 = stats(cpu);
    check(s4.calls[LLM4D_WORK_CONVERT] > s0.calls[LLM4D_WORK_CONVERT] &&
              s4.seconds[LLM4D_WORK_CONVERT] > s0.seconds[LLM4D_WORK_CONVERT] &&
              s4.calls[LLM4D_WORK_GEMM] == s0.calls[LLM4D_WORK_GEMM] + 1,
          "bf16 linear forward: its operand conversions are timed as convert, nested inside one gemm call");
    cpu->describe_gemms(cpu, d, sizeof d);
    /* the format follows the CPU: bf16 storage with AVX512-BF16, bf16-rounded fp32 without */
    const int native = __builtin_cpu_supports("avx512bf16");
    check(strstr(d, native ? "operands bf16;" : "operands fp32 holding bf16-rounded values") != NULL,
          "bf16 operands stored as this CPU allows (%s AVX512-BF16): %s", native ? "with" : "without", d);
    /* and the linear layers run on llm4d's AMX kernel exactly where the CPU has AMX and oneDNN is not capped below it
     * (ONEDNN_MAX_CPU_ISA, which the ctest variants set) */
#ifdef LLM4D_AMX_EMULATE /* built as test_kernels_optim_amxemu: the plain-C tile kernel stands in for AMX */
    const int amx = native != 0;
#else
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    const int amx = native && llm4d_amx_usable() && (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx;
#endif
    check((strstr(d, "AMX kernel") != NULL) == amx, "bf16 linear layers %s llm4d's AMX kernel", amx ? "on" : "not on");
    cpu->set_precision(cpu, LLM4D_PREC_FP32, &err);
    free(x), free(w), free(b), free(y), free(lnw), free(lnb), free(mean), free(rstd), free(logits), free(st);
    free(tg);
}

/* y = x w^T and dx = dy w on a fresh backend in precision prec: the reference for the kept copies */
static void fresh_linear(llm4d_precision prec, float *y, float *dx, const float *x, const float *dy, const float *w,
                         int N, int C, int OC) {
    llm4d_backend *be;
    llm4d_err err = {0};
    if (llm4d_backend_cpu_create(&be, 0, &err) != LLM4D_OK || be->set_precision(be, prec, &err) != LLM4D_OK) {
        printf("FAIL - fresh backend: %s\n", err.msg);
        exit(1);
    }
    be->linear_forward(be, llm4d_t32(y), llm4d_ct32(x), w, NULL, N, C, OC);
    be->linear_backward(be, llm4d_t32(dx), LLM4D_WRITE, NULL, NULL, llm4d_ct32(dy), llm4d_ct32(x), w, N, C, OC);
    be->destroy(be);
}

/* a linear layer's forward and input gradient (the GEMMs that read the weight) with cpu's kept copies of w, against a
 * fresh backend: identical, and how many conversions they made */
static int same_as_fresh(llm4d_backend *cpu, llm4d_precision prec, const float *x, const float *w, int N, int C,
                         int OC, double *conversions) {
    float *y1 = falloc((size_t)N * OC), *y2 = falloc((size_t)N * OC), *dy = falloc((size_t)N * OC);
    float *dx1 = falloc((size_t)N * C), *dx2 = falloc((size_t)N * C);
    for (size_t i = 0; i < (size_t)N * OC; i++) dy[i] = x[i % ((size_t)N * C)] - 0.5f * x[(i * 7) % ((size_t)N * C)];
    const llm4d_work_stats a = stats(cpu);
    cpu->linear_forward(cpu, llm4d_t32(y1), llm4d_ct32(x), w, NULL, N, C, OC);
    cpu->linear_backward(cpu, llm4d_t32(dx1), LLM4D_WRITE, NULL, NULL, llm4d_ct32(dy), llm4d_ct32(x), w, N, C, OC);
    const llm4d_work_stats b = stats(cpu);
    *conversions = b.calls[LLM4D_WORK_CONVERT] - a.calls[LLM4D_WORK_CONVERT];
    fresh_linear(prec, y2, dx2, x, dy, w, N, C, OC);
    const int same = memcmp(y1, y2, (size_t)N * OC * sizeof(float)) == 0 &&
                     memcmp(dx1, dx2, (size_t)N * C * sizeof(float)) == 0;
    free(y1), free(y2), free(dy), free(dx1), free(dx2);
    return same;
}

/* fp32_kernels: the bf16 numerics on the fp32 kernels (LLM4D_FAULT=bf16slow), whose copies are bf16-rounded fp32 */
static void test_weight_copies(llm4d_backend *cpu, llm4d_precision prec, int fp32_kernels, const char *name) {
    enum { N = 64, C = 200, OC = 96 };
    const size_t nw = (size_t)OC * C;
    llm4d_err err = {0};
    if (cpu->set_precision(cpu, prec, &err) != LLM4D_OK) {
        check(0, "%s: %s", name, err.msg);
        return;
    }
    /* The copies a weight has: one in row order (oneDNN reads it in both GEMMs), or on the AMX path two, the tiles of W
     * (the input gradient) and of W^T (the forward). Each use converts two activations (x, and dy for the input
     * gradient) and, when its copies are missing or stale, the weight once per copy. Whether this precision's linear
     * layers are on the AMX kernel is the backend's own rule (cpu_impl.h), not the GEMMs the backend describes: after
     * a bf16 case there those name the AMX kernel in every precision ("other precisions" after it). Where the CPU
     * has AMX, bf16 runs there even when its oneDNN GEMMs are faked slower: the AMX kernel is not oneDNN's. */
    const int amx = llm4d_cpu_amx_for(prec), nc = amx ? 2 : 1, acts = 2;
    llm4d_mem mem = {0};
    float *x = frand((size_t)N * C, 1.0f), *w = cpu->alloc(cpu, &mem, LLM4D_MEM_PARAMS, nw * sizeof(float));
    float *g = falloc(nw), *m = falloc(nw), *v = falloc(nw);
    fill(w, nw, 0.05f);
    double conv;
    int ok = same_as_fresh(cpu, prec, x, w, N, C, OC, &conv);
    check(ok && conv == acts + nc, "%s: first use converts the weight (%d cop%s) and the activations (%g conversions), "
          "results as a fresh backend", name, nc, nc > 1 ? "ies" : "y", conv);
    ok = same_as_fresh(cpu, prec, x, w, N, C, OC, &conv);
    check(ok && conv == acts, "%s: second use reuses the weight's copies (%g conversions: the activations)", name,
          conv);
    /* an update through the backend: the copy is rewritten in AdamW's pass */
    cpu->weights_changed(cpu, NULL, 0);
    fill(g, nw, 1.0f);
    const llm4d_work_stats a = stats(cpu);
    cpu->adamw(cpu, w, g, m, v, nw, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f, 1);
    const llm4d_work_stats b = stats(cpu);
    /* bf16 copies are 2 bytes where the CPU has AVX512-BF16 (or AMX), bf16-rounded fp32 elsewhere (cpu_impl.h) */
    const double eb =
        amx || (prec == LLM4D_PREC_BF16 && !fp32_kernels && __builtin_cpu_supports("avx512bf16")) ? 2.0 : 4.0;
    check(b.optim_bytes - a.optim_bytes == (32.0 + nc * eb) * nw, "%s: AdamW's pass also writes the cop%s (%.0f "
          "bytes per element)", name, nc > 1 ? "ies" : "y", (b.optim_bytes - a.optim_bytes) / nw);
    ok = same_as_fresh(cpu, prec, x, w, N, C, OC, &conv);
    check(ok && conv == acts, "%s: after AdamW the rewritten copies are used (%g conversions), results as fresh", name,
          conv);
    /* an update that covers half of the weight (a ZeRO-1/2 shard): the rest comes from elsewhere, stale copy */
    cpu->weights_changed(cpu, NULL, 0);
    fill(g, nw, 1.0f);
    cpu->adamw(cpu, w, g, m, v, nw / 2, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 2, 1.0f, 1);
    for (size_t i = nw / 2; i < nw; i++) w[i] *= 1.5f; /* "gathered" from another rank */
    ok = same_as_fresh(cpu, prec, x, w, N, C, OC, &conv);
    check(ok && conv == acts + nc, "%s: an update of half the weight leaves the copies stale: converted again (%g), as "
          "fresh", name, conv);
    /* a range announced as changed (a ZeRO-3 gather buffer refilled) */
    for (size_t i = 0; i < nw; i++) w[i] = -w[i];
    cpu->weights_changed(cpu, w + 10, 4 * sizeof(float));
    ok = same_as_fresh(cpu, prec, x, w, N, C, OC, &conv);
    check(ok && conv == acts + nc, "%s: weights_changed(range) makes the copies stale (%g conversions), as fresh", name,
          conv);
    /* memory returned through the backend drops its copy; reused with only element 1 changed (which the guard does
     * not sample), a kept copy would go unnoticed */
    ok = same_as_fresh(cpu, prec, x, w, N, C, OC, &conv); /* the copy exists */
    float *old = falloc(nw);
    memcpy(old, w, nw * sizeof(float));
    const size_t ws0 = cpu->workspace_bytes(cpu);
    cpu->free(cpu, &mem, LLM4D_MEM_PARAMS, w, nw * sizeof(float));
    const size_t ws1 = cpu->workspace_bytes(cpu);
    check(ok && ws0 - ws1 >= (size_t)(nw * eb * nc), "%s: memory freed through the backend drops its copies (%zu "
          "bytes)", name, ws0 - ws1);
    float *w2 = cpu->alloc(cpu, &mem, LLM4D_MEM_PARAMS, nw * sizeof(float));
    memcpy(w2, old, nw * sizeof(float));
    w2[1] += 1.0f;
    ok = same_as_fresh(cpu, prec, x, w2, N, C, OC, &conv);
    check(ok && conv == acts + nc, "%s: memory reused after free (%s address) gets new copies", name,
          w2 == w ? "the same" : "another");
    w = w2;
    free(old);
    /* a write nobody announced: caught by the sampled elements */
    for (size_t i = 0; i < nw; i++) w[i] = 0.02f * (float)(i % 7) - 0.05f;
    ok = same_as_fresh(cpu, prec, x, w, N, C, OC, &conv);
    check(ok && conv == acts + nc, "%s: an unannounced rewrite is caught by the sampled elements (%g conversions)", name,
          conv);
    cpu->free(cpu, &mem, LLM4D_MEM_PARAMS, w, nw * sizeof(float));
    check(mem.bytes[LLM4D_MEM_PARAMS] == 0, "%s: weights freed", name);
    cpu->set_precision(cpu, LLM4D_PREC_FP32, &err);
    free(x), free(g), free(m), free(v);
}

int main(void) {
    llm4d_backend *cpu, *ref;
    llm4d_err err = {0};
    if (!backend_pair_open(&cpu, &ref)) return 1;
    const size_t sizes[] = {1, 17, 16384 + 5, 100003};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int zero = 0; zero < 2; zero++) test_adamw_fused(cpu, ref, sizes[i], zero);
    test_optim_bytes(cpu);
    test_timers(cpu);
    /* the tested backend and the fresh ones each measure bf16 against fp32 (cpu.c set_precision); on a loaded
     * machine they could choose differently, so each run of the bf16 case says which: the native bf16 kernels, and
     * the bf16 numerics on the fp32 kernels (where bf16 is the slower) */
    setenv("LLM4D_FAULT", "bf16fast@1", 1);
    test_weight_copies(cpu, LLM4D_PREC_BF16, 0, "bf16 weight copies");
    llm4d_backend *slow;
    setenv("LLM4D_FAULT", "bf16slow@1", 1);
    if (llm4d_backend_cpu_create(&slow, 0, &err) != LLM4D_OK) {
        printf("FAIL - backend creation: %s\n", err.msg);
        return 1;
    }
    test_weight_copies(slow, LLM4D_PREC_BF16, 1, "bf16 weight copies on the fp32 kernels (bf16 the slower)");
    slow->destroy(slow);
    unsetenv("LLM4D_FAULT");
    test_weight_copies(cpu, LLM4D_PREC_FP16, 0, "fp16 weight copies");
    cpu->destroy(cpu);
    ref->destroy(ref);
    return check_summary();
}
