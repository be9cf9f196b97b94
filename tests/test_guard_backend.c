/* test_guard_backend.c — the guard backend (src/backend/guard.c) refuses what the device boundary forbids, and only
 * that. Each forbidden act runs in a forked child, whose death is the check:
 *   - the host reading a tensor (device memory) outside a backend call dies of SIGSEGV, and the guard's handler
 *     printed the faulting address and a stack;
 *   - the host writing one dies the same way;
 *   - a kernel given a host pointer (not device, not pinned memory) is refused by name and aborts, a typed tensor's
 *     pointer as well;
 *   - a D2H copy whose host side is device memory aborts.
 * And what is allowed works: kernels and copies on device memory, the host on pinned memory, a copy's pageable host
 * side, memory freed and allocated again reads as zeros, and the values computed (fp32 and a conversion to bf16)
 * equal the cpu backend's; the Llama family's kernels are checked against their extents both ways (a SwiGLU input
 * too short is refused, a RoPE block ending where its last row's heads end is not; a grouped-query attention's qkv
 * of (NH + 2 NKV) heads a token is its extent, one of fewer kv heads is refused). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tally.h"
#include "backend/backend.h"

/* Run fn(be) in a child whose stderr goes to a pipe; the signal it died of (0: exited) and what it printed. */
static int in_child(void (*fn)(llm4d_backend *), llm4d_backend *be, char *out, size_t n) {
    int fd[2];
    if (pipe(fd) != 0) return -1;
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        fn(be);
        _exit(0);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < n && (r = read(fd[0], out + got, n - 1 - got)) > 0) got += (size_t)r;
    out[got] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

static llm4d_mem mem;

/* after a backend method has opened and closed the arena: the host is locked out again */
static void host_reads(llm4d_backend *be) {
    volatile float *p = be->alloc(be, &mem, LLM4D_MEM_PARAMS, 4096);
    be->zero(be, (void *)p, 4096);
    printf("%f\n", p[3]); /* the fault is here */
}

static void host_writes(llm4d_backend *be) {
    float *p = be->alloc(be, &mem, LLM4D_MEM_PARAMS, 4096);
    be->scale(be, p, 2.0f, 1024);
    p[0] = 1.0f;
}

static void kernel_gets_host_memory(llm4d_backend *be) {
    float *dev = be->alloc(be, &mem, LLM4D_MEM_ACTIVATIONS, 64 * sizeof(float));
    static float host[64];
    be->add(be, dev, host, 64);
}

static void typed_kernel_gets_host_memory(llm4d_backend *be) {
    uint16_t *dev = be->alloc(be, &mem, LLM4D_MEM_ACTIVATIONS, 64 * sizeof(uint16_t));
    static float host[64];
    be->convert(be, llm4d_t(dev, LLM4D_BF16), llm4d_ct32(host), 64);
}

/* SwiGLU reads [N, 2F]: an input of N x F elements runs past its allocation (the list's extent, methods.h) */
static void swiglu_input_too_short(llm4d_backend *be) {
    float *out = be->alloc(be, &mem, LLM4D_MEM_ACTIVATIONS, 4 * 8 * sizeof(float));
    float *inp = be->alloc(be, &mem, LLM4D_MEM_ACTIVATIONS, 4 * 8 * sizeof(float));
    be->swiglu_forward(be, llm4d_t32(out), llm4d_ct32(inp), 4, 8);
}

/* Grouped-query attention reads qkv rows of (NH + 2 NKV) HS (methods.h): one allocated for 1 kv head of 4 query
 * heads, given to an attention of 2 kv heads, runs past its allocation */
static void gqa_qkv_too_short(llm4d_backend *be) {
    enum { B = 1, T = 4, NH = 4, HS = 2 };
    float *out = be->alloc(be, &mem, LLM4D_MEM_ACTIVATIONS, B * T * NH * HS * sizeof(float));
    float *lse = be->alloc(be, &mem, LLM4D_MEM_ACTIVATIONS, B * NH * T * sizeof(float));
    float *qkv = be->alloc(be, &mem, LLM4D_MEM_ACTIVATIONS, B * T * (NH + 2) * HS * sizeof(float));
    const llm4d_attn_shape s = {.B = B, .T = T, .NH = NH, .HS = HS, .NH_total = NH, .NKV = 2};
    be->attention_forward(be, llm4d_t32(out), lse, llm4d_ct32(qkv), s, NULL);
}

static void d2h_into_device(llm4d_backend *be) {
    float *a = be->alloc(be, &mem, LLM4D_MEM_ACTIVATIONS, 256), *b = be->alloc(be, &mem, LLM4D_MEM_ACTIVATIONS, 256);
    be->copy_async(be, b, a, 256, LLM4D_D2H, LLM4D_STREAM_COMPUTE);
}

static void nothing_forbidden(llm4d_backend *be) {
    float *dev = be->alloc(be, &mem, LLM4D_MEM_ACTIVATIONS, 64 * sizeof(float));
    float *pin = be->alloc_host(be, &mem, LLM4D_MEM_WORKSPACE, 64 * sizeof(float));
    pin[0] = 1.0f;
    be->add(be, dev, pin, 64);
    be->free(be, &mem, LLM4D_MEM_ACTIVATIONS, dev, 64 * sizeof(float));
    be->free_host(be, &mem, LLM4D_MEM_WORKSPACE, pin, 64 * sizeof(float));
}

int main(void) {
    tally T = {0, 0};
    llm4d_err err = {0};
    llm4d_backend *g = NULL, *cpu = NULL;
    if (llm4d_backend_guard_create(&g, 1, &err) || llm4d_backend_cpu_create(&cpu, 1, &err)) {
        printf("backend: %s\n0 passed, 1 failed\n", err.msg);
        return 1;
    }
    char out[8192], detail[300];
    struct {
        void (*fn)(llm4d_backend *);
        int sig;
        const char *says, *what;
    } cases[] = {
        {host_reads, SIGSEGV, "segmentation fault at address",
         "the host reading a tensor dies of SIGSEGV, with a stack"},
        {host_writes, SIGSEGV, "segmentation fault at address", "the host writing a tensor dies of SIGSEGV"},
        {kernel_gets_host_memory, SIGABRT, "add was given", "a kernel given host memory is refused by name"},
        {typed_kernel_gets_host_memory, SIGABRT, "convert was given",
         "a kernel given host memory in a typed tensor is refused by name"},
        {swiglu_input_too_short, SIGABRT, "swiglu_forward was given",
         "a kernel of the Llama family given a tensor shorter than its extent is refused by name"},
        {gqa_qkv_too_short, SIGABRT, "attention_forward was given",
         "a grouped-query attention given a qkv shorter than its NH + 2 NKV heads is refused by name"},
        {d2h_into_device, SIGABRT, "D2H with device memory on the host side", "a D2H copy into device memory aborts"},
        {nothing_forbidden, 0, "", "kernels on device and pinned memory, the host on pinned memory: no fault"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int sig = in_child(cases[k].fn, g, out, sizeof out);
        const int ok = sig == cases[k].sig && strstr(out, cases[k].says) != NULL &&
                       (cases[k].sig != SIGSEGV || strstr(out, "stack"));
        snprintf(detail, sizeof detail, "signal %d (want %d): %.200s", sig, cases[k].sig, out);
        check(&T, ok, cases[k].what, detail);
    }

    /* what is allowed, against the cpu backend: a linear layer, a reduction, copies both ways */
    enum { N = 8, C = 16, OC = 24 };
    float x[N * C], w[OC * C], b[OC], y_cpu[N * OC], y_g[N * OC];
    uint32_t st = 7;
    for (int i = 0; i < N * C; i++) st = st * 1664525u + 1013904223u, x[i] = (float)(st >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < OC * C; i++) st = st * 1664525u + 1013904223u, w[i] = (float)(st >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < OC; i++) b[i] = 0.01f * (float)i;
    cpu->linear_forward(cpu, llm4d_t32(y_cpu), llm4d_ct32(x), w, b, N, C, OC);
    float *dx = g->alloc(g, &mem, LLM4D_MEM_ACTIVATIONS, sizeof x), *dw = g->alloc(g, &mem, LLM4D_MEM_PARAMS, sizeof w);
    float *db = g->alloc(g, &mem, LLM4D_MEM_PARAMS, sizeof b), *dy = g->alloc(g, &mem, LLM4D_MEM_ACTIVATIONS, sizeof y_g);
    g->copy_async(g, dx, x, sizeof x, LLM4D_H2D, LLM4D_STREAM_COMPUTE);
    g->copy_async(g, dw, w, sizeof w, LLM4D_H2D, LLM4D_STREAM_COMPUTE);
    g->copy_async(g, db, b, sizeof b, LLM4D_H2D, LLM4D_STREAM_COMPUTE);
    g->linear_forward(g, llm4d_t32(dy), llm4d_ct32(dx), dw, db, N, C, OC);
    g->copy_async(g, y_g, dy, sizeof y_g, LLM4D_D2H, LLM4D_STREAM_COMPUTE);
    check(&T, !memcmp(y_cpu, y_g, sizeof y_g), "a linear layer on the guard equals the cpu backend's, bit for bit", "");
    const double s_cpu = cpu->sumsq(cpu, y_cpu, N * OC), s_g = g->sumsq(g, dy, N * OC);
    const float *many[2] = {dy, dx};
    const size_t len[2] = {N * OC, N * C};
    double each[2];
    const double s_many = g->sumsq_many(g, 2, many, len, each);
    snprintf(detail, sizeof detail, "%.17g %.17g %.17g", s_cpu, s_g, each[0]);
    check(&T, s_cpu == s_g && each[0] == s_g && s_many == each[0] + each[1] && each[1] == g->sumsq(g, dx, N * C),
          "sumsq and the fused sumsq_many read back the cpu backend's sums", detail);
    /* a typed kernel: the layer's output rounded to bf16 */
    uint16_t h_cpu[N * OC], h_g[N * OC];
    uint16_t *dh = g->alloc(g, &mem, LLM4D_MEM_ACTIVATIONS, sizeof h_g);
    cpu->convert(cpu, llm4d_t(h_cpu, LLM4D_BF16), llm4d_ct32(y_cpu), N * OC);
    g->convert(g, llm4d_t(dh, LLM4D_BF16), llm4d_ct32(dy), N * OC);
    g->copy_async(g, h_g, dh, sizeof h_g, LLM4D_D2H, LLM4D_STREAM_COMPUTE);
    check(&T, !memcmp(h_cpu, h_g, sizeof h_g), "a conversion to bf16 on the guard equals the cpu backend's", "");
    g->free(g, &mem, LLM4D_MEM_ACTIVATIONS, dh, sizeof h_g);
    /* RoPE over rows ld apart on an allocation that ends with the last row's heads (its extent, exactly), in
     * place, then RMSNorm: the cpu backend's bits */
    const llm4d_rope_shape rs = {.N = 5, .NH = 2, .HS = 4, .ld = 13, .T = 3, .tok0 = 1, .theta = 1e4f};
    enum { RN = 4 * 13 + 8 };
    float r_cpu[RN], r_g[RN], rstd_cpu[4], rms_g[32];
    memcpy(r_cpu, x, sizeof r_cpu);
    cpu->rope_forward(cpu, llm4d_t32(r_cpu), llm4d_ct32(r_cpu), rs);
    float *dr = g->alloc(g, &mem, LLM4D_MEM_ACTIVATIONS, sizeof r_g);
    float *drs = g->alloc(g, &mem, LLM4D_MEM_ACTIVATIONS, 16);
    g->copy_async(g, dr, x, sizeof r_g, LLM4D_H2D, LLM4D_STREAM_COMPUTE);
    g->rope_forward(g, llm4d_t32(dr), llm4d_ct32(dr), rs);
    g->copy_async(g, r_g, dr, sizeof r_g, LLM4D_D2H, LLM4D_STREAM_COMPUTE);
    int same_r = !memcmp(r_cpu, r_g, sizeof r_g);
    cpu->rmsnorm_forward(cpu, llm4d_t32(r_cpu), rstd_cpu, llm4d_ct32(x), w, 4, 8, 1e-5f);
    g->rmsnorm_forward(g, llm4d_t32(dr), drs, llm4d_ct32(dx), dw, 4, 8, 1e-5f);
    g->copy_async(g, rms_g, dr, sizeof rms_g, LLM4D_D2H, LLM4D_STREAM_COMPUTE);
    same_r &= !memcmp(r_cpu, rms_g, sizeof rms_g);
    check(&T, same_r, "RoPE on rows ld apart (its extent exactly) and RMSNorm on the guard: the cpu backend's bits",
          "");
    g->free(g, &mem, LLM4D_MEM_ACTIVATIONS, dr, sizeof r_g), g->free(g, &mem, LLM4D_MEM_ACTIVATIONS, drs, 16);
    /* grouped-query attention (4 query heads on 1 kv head) on allocations of exactly its extents (qkv and dqkv
     * (NH + 2 NKV) HS a token): the cpu backend's bits, forward and backward (qkv from x and w, dout w) */
    {
        enum { AB = 2, AT = 5, AH = 4, AS = 4, AQ = AB * AT * (AH + 2) * AS, AO = AB * AT * AH * AS };
        enum { AL = AB * AH * AT };
        const llm4d_attn_shape as = {.B = AB, .T = AT, .NH = AH, .HS = AS, .NH_total = AH, .NKV = 1};
        _Static_assert(AQ <= N * C + OC * C && AO <= OC * C, "qkv from x and w, dout from w");
        float q[AQ], o_cpu[AO], l_cpu[AL], g_cpu[AQ], o_g[AO], l_g[AL], g_g[AQ];
        memcpy(q, x, sizeof x), memcpy(q + N * C, w, (AQ - N * C) * sizeof(float));
        cpu->attention_forward(cpu, llm4d_t32(o_cpu), l_cpu, llm4d_ct32(q), as, NULL);
        cpu->attention_backward(cpu, llm4d_t32(g_cpu), llm4d_ct32(w), llm4d_ct32(o_cpu), llm4d_ct32(q), l_cpu, as,
                                NULL);
        float *dq = g->alloc(g, &mem, LLM4D_MEM_ACTIVATIONS, sizeof q);
        float *dg = g->alloc(g, &mem, LLM4D_MEM_ACTIVATIONS, sizeof q);
        float *dO = g->alloc(g, &mem, LLM4D_MEM_ACTIVATIONS, sizeof o_g);
        float *dL = g->alloc(g, &mem, LLM4D_MEM_ACTIVATIONS, sizeof l_g);
        g->copy_async(g, dq, q, sizeof q, LLM4D_H2D, LLM4D_STREAM_COMPUTE);
        g->attention_forward(g, llm4d_t32(dO), dL, llm4d_ct32(dq), as, NULL);
        g->attention_backward(g, llm4d_t32(dg), llm4d_ct32(dw), llm4d_ct32(dO), llm4d_ct32(dq), dL, as, NULL);
        g->copy_async(g, o_g, dO, sizeof o_g, LLM4D_D2H, LLM4D_STREAM_COMPUTE);
        g->copy_async(g, l_g, dL, sizeof l_g, LLM4D_D2H, LLM4D_STREAM_COMPUTE);
        g->copy_async(g, g_g, dg, sizeof g_g, LLM4D_D2H, LLM4D_STREAM_COMPUTE);
        check(&T, !memcmp(o_cpu, o_g, sizeof o_g) && !memcmp(l_cpu, l_g, sizeof l_g) &&
                      !memcmp(g_cpu, g_g, sizeof g_g),
              "grouped-query attention on the guard (qkv of its extent exactly): the cpu backend's bits", "");
        g->free(g, &mem, LLM4D_MEM_ACTIVATIONS, dq, sizeof q), g->free(g, &mem, LLM4D_MEM_ACTIVATIONS, dg, sizeof q);
        g->free(g, &mem, LLM4D_MEM_ACTIVATIONS, dO, sizeof o_g);
        g->free(g, &mem, LLM4D_MEM_ACTIVATIONS, dL, sizeof l_g);
    }
    /* freed and allocated again: zeros, as alloc promises */
    g->free(g, &mem, LLM4D_MEM_ACTIVATIONS, dy, sizeof y_g);
    float *again = g->alloc(g, &mem, LLM4D_MEM_ACTIVATIONS, sizeof y_g);
    g->copy_async(g, y_g, again, sizeof y_g, LLM4D_D2H, LLM4D_STREAM_COMPUTE);
    int zeros = 1;
    for (int i = 0; i < N * OC; i++) zeros &= y_g[i] == 0.0f;
    check(&T, zeros, "device memory freed and allocated again reads as zeros", "");
    check(&T, !g->host_addressable && cpu->host_addressable, "the guard says its device is not host memory", "");
    g->free(g, &mem, LLM4D_MEM_ACTIVATIONS, again, sizeof y_g);
    g->free(g, &mem, LLM4D_MEM_ACTIVATIONS, dx, sizeof x);
    g->free(g, &mem, LLM4D_MEM_PARAMS, dw, sizeof w);
    g->free(g, &mem, LLM4D_MEM_PARAMS, db, sizeof b);
    size_t held = 0;
    for (int c = 0; c < LLM4D_MEM_NCATEGORIES; c++) held += mem.bytes[c];
    check(&T, held == 0, "every byte allocated is accounted and given back", "");
    g->destroy(g);
    cpu->destroy(cpu);
    return tally_summary(&T);
}
