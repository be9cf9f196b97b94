/* amx_sweep.c — which blocking of llm4d's AMX GEMM (src/backend/cpu_amx.h llm4d_amx_blocking) runs each of GPT-2
 * 124M's products fastest on this machine, against the blocking the kernel picks by default.
 *
 * Every product a bf16 training step runs on the kernel (each linear layer's forward, input gradient and weight
 * gradient, and the LM head's for its chunk of at most 512 tokens) at the given token counts, on packed operands of
 * the model's sizes. Per shape a search: the C block sides over a grid at the default's K block and walk order,
 * then the K block and the order at the best sides, then the sides again; each candidate timed as the fastest of
 * --reps runs (a neighbour on a shared machine can only slow a run). Then the default and the best are timed again,
 * five times each, alternating, and the gain printed from the medians. Every candidate's C is compared bit for bit
 * with the default's (no blocking may change a bit): a difference is printed and the exit status is 1. Threads:
 * OMP_NUM_THREADS.
 *   amx_sweep [--tokens N]... [--reps R]       (default: --tokens 256 --tokens 2048 --reps 2)
 * Output: one line per shape, "sweep <name> M N K: default mc x nc x kc order o: X GFLOP/s; best ...: Y GFLOP/s
 * (+Z %)", then a summary of the time the whole set takes with each. Exits 77 saying why where the CPU has no AMX. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_amx.h"
#include "core/timer.h"

static void *xalloc(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p) {
        fprintf(stderr, "amx_sweep: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

typedef struct {
    const char *name;
    int M, N, K, bias, accumulate;
} shape;

typedef struct {
    const shape *s;
    uint16_t *A, *B;
    float *bias, *c, *c0, *want; /* C, its contents before an accumulating call, the default's result */
    int mismatches;              /* blockings whose C differed from the default's */
} problem;

static void fill(float *x, size_t n, unsigned stream) {
    for (size_t i = 0; i < n; i++) x[i] = 0.002f * (float)((i * 2654435761u + stream) % 1000) - 1.0f;
}

static void make(problem *p, const shape *s) {
    p->s = s;
    p->mismatches = 0;
    float *x = xalloc((size_t)s->M * s->K * 4), *w = xalloc((size_t)s->N * s->K * 4);
    fill(x, (size_t)s->M * s->K, 1);
    fill(w, (size_t)s->N * s->K, 2);
    p->A = xalloc(llm4d_amx_a_elems(s->M, s->K) * 2);
    p->B = xalloc(llm4d_amx_b_elems(s->K, s->N) * 2);
    llm4d_amx_pack_a(p->A, llm4d_ct32(x), s->K, s->M, s->K, LLM4D_ACT_NONE);
    llm4d_amx_pack_b_t(p->B, llm4d_ct32(w), s->K, s->N, s->K);
    free(x), free(w);
    const size_t nc = (size_t)s->M * s->N;
    p->bias = xalloc((size_t)s->N * 4), p->c = xalloc(nc * 4), p->c0 = xalloc(nc * 4), p->want = xalloc(nc * 4);
    fill(p->bias, (size_t)s->N, 3);
    fill(p->c0, nc, 4);
}

static void drop(problem *p) { free(p->A), free(p->B), free(p->bias), free(p->c), free(p->c0), free(p->want); }

static void call(problem *p, const llm4d_amx_blocking *bk) {
    const shape *s = p->s;
    llm4d_amx_gemm_with(bk, p->c, s->N, p->A, p->B, s->bias ? p->bias : NULL, s->M, s->N, s->K, s->accumulate);
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* the fastest of reps calls, in seconds (after one from C0 that is checked against the default's bits; the later calls
 * accumulate onto it, which changes no timing) */
static double timed(problem *p, const llm4d_amx_blocking *bk, int reps) {
    const size_t nc = (size_t)p->s->M * p->s->N;
    memcpy(p->c, p->c0, nc * 4);
    call(p, bk);
    if (memcmp(p->c, p->want, nc * 4) != 0) {
        printf("MISMATCH %s M=%d N=%d K=%d: blocking %d x %d x %d order %d changed C's bits\n", p->s->name, p->s->M,
               p->s->N, p->s->K, bk->mc, bk->nc, bk->kc, bk->order);
        p->mismatches++;
    }
    double t[64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) {
        const double t0 = llm4d_now();
        call(p, bk);
        t[r] = llm4d_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    return t[0];
}

static int64_t pad32(int64_t n) { return (n + 31) / 32 * 32; }

/* the sides worth trying along a dimension of n (padded): 64 to 1024 by powers of two, and the whole of it where that
 * is smaller (blocks of 32 cost more in the kernel's calls than they win in balance; larger than 1024 leaves L2) */
static int sides_of(int n, int out[8]) {
    int k = 0;
    for (int v = 64; v <= 1024 && v < pad32(n); v *= 2) out[k++] = v;
    if (pad32(n) <= 1024 || k == 0) out[k++] = (int)pad32(n);
    return k;
}

static void search_sides(problem *p, llm4d_amx_blocking *best, double *tbest, int nth, int reps) {
    int ms[8], ns[8];
    const int nm = sides_of(p->s->M, ms), nn = sides_of(p->s->N, ns);
    for (int i = 0; i < nm; i++)
        for (int j = 0; j < nn; j++) {
            llm4d_amx_blocking bk = *best;
            bk.mc = ms[i], bk.nc = ns[j];
            const int64_t blocks = (pad32(p->s->M) + bk.mc - 1) / bk.mc * ((pad32(p->s->N) + bk.nc - 1) / bk.nc);
            if (blocks < nth || (bk.mc == best->mc && bk.nc == best->nc)) continue;
            const double t = timed(p, &bk, reps);
            if (t < *tbest) *tbest = t, *best = bk;
        }
}

static void search_k(problem *p, llm4d_amx_blocking *best, double *tbest, int reps) {
    static const int kcs[] = {64, 128, 256, 384, 512, 768, 1024, 2048};
    for (int order = 0; order < 2; order++)
        for (size_t i = 0; i <= sizeof kcs / sizeof kcs[0]; i++) {
            llm4d_amx_blocking bk = *best;
            bk.order = order;
            bk.kc = i < sizeof kcs / sizeof kcs[0] ? kcs[i] : (int)pad32(p->s->K); /* and all of K at once */
            if (bk.kc > pad32(p->s->K) && i < sizeof kcs / sizeof kcs[0]) continue;
            if (bk.kc == best->kc && bk.order == best->order) continue;
            const double t = timed(p, &bk, reps);
            if (t < *tbest) *tbest = t, *best = bk;
        }
}

int main(int argc, char **argv) {
    int tokens[8], ntok = 0, reps = 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0 && ntok < 8)
            tokens[ntok++] = atoi(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: amx_sweep [--tokens N]... [--reps R]\n");
            return 2;
        }
    }
    if (!ntok) tokens[ntok++] = 256, tokens[ntok++] = 2048;
    if (!__builtin_cpu_supports("avx512bf16") || !llm4d_amx_usable()) {
        printf("amx_sweep: skipped: this CPU has no AMX (or the kernel did not grant its tile state)\n");
        return 77;
    }
    const int nth = omp_get_max_threads();
    printf("# amx_sweep: %d threads, the fastest of %d runs per candidate\n", nth, reps);
    int mismatches = 0;
    for (int ti = 0; ti < ntok; ti++) {
        const int T = tokens[ti], Tc = T < 512 ? T : 512;
        /* a block's four linear layers (C, OC), each run by all GPT2_LAYERS blocks */
        enum { GPT2_LAYERS = 12, LINEARS = 4, LAYER_PRODUCTS = 3 * LINEARS };
        static const int layers[LINEARS][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
        shape shapes[LAYER_PRODUCTS + 3];
        int ns = 0;
        double total_def = 0, total_best = 0;
        for (int l = 0; l < LINEARS; l++) {
            const int C = layers[l][0], OC = layers[l][1];
            shapes[ns++] = (shape){"forward", T, OC, C, 1, 0};
            shapes[ns++] = (shape){"input-grad", T, C, OC, 0, 0};
            shapes[ns++] = (shape){"weight-grad", OC, C, T, 0, 1};
        }
        shapes[ns++] = (shape){"head-forward", Tc, 50304, 768, 0, 0};
        shapes[ns++] = (shape){"head-input-grad", Tc, 768, 50304, 0, 1};
        shapes[ns++] = (shape){"head-weight-grad", 50304, 768, Tc, 0, 1};
        for (int i = 0; i < ns; i++) {
            const shape *s = &shapes[i];
            problem p;
            make(&p, s);
            llm4d_amx_blocking def;
            llm4d_amx_blocking_of(s->M, s->N, s->K, nth, &def);
            memcpy(p.c, p.c0, (size_t)s->M * s->N * 4);
            call(&p, &def);
            memcpy(p.want, p.c, (size_t)s->M * s->N * 4);
            llm4d_amx_blocking best = def;
            double tbest = timed(&p, &def, reps);
            search_sides(&p, &best, &tbest, nth, reps);
            search_k(&p, &best, &tbest, reps);
            search_sides(&p, &best, &tbest, nth, reps);
            double td[5], tb[5];
            for (int r = 0; r < 5; r++) td[r] = timed(&p, &def, reps), tb[r] = timed(&p, &best, reps);
            qsort(td, 5, sizeof td[0], cmp_double);
            qsort(tb, 5, sizeof tb[0], cmp_double);
            const double flop = 2.0 * s->M * s->N * s->K;
            /* the layers' products run GPT2_LAYERS times a step, the head's as many times as there are chunks */
            const double times = i < LAYER_PRODUCTS ? GPT2_LAYERS : (double)T / Tc;
            total_def += times * td[2], total_best += times * tb[2];
            printf("sweep T=%d %s M=%d N=%d K=%d: default %d x %d x %d order %d: %.1f GFLOP/s; best %d x %d x %d order "
                   "%d: %.1f GFLOP/s (%+.1f %%)\n", T, s->name, s->M, s->N, s->K, def.mc, def.nc, def.kc, def.order,
                   flop / td[2] / 1e9, best.mc, best.nc, best.kc, best.order, flop / tb[2] / 1e9,
                   100.0 * (td[2] / tb[2] - 1.0));
            fflush(stdout);
            mismatches += p.mismatches;
            drop(&p);
        }
        printf("sweep T=%d: a step's products on the kernel %.1f ms with the default blockings, %.1f ms with the best "
               "(%+.1f %%)\n", T, 1e3 * total_def, 1e3 * total_best, 100.0 * (total_def / total_best - 1.0));
    }
    if (mismatches) printf("amx_sweep: %d blockings changed C's bits (see MISMATCH above)\n", mismatches);
    return mismatches != 0;
}
