/* gemm_shape.c — a GPU GEMM's time from its shape by tile and wave quantization and a roofline (see gemm_shape.h).
 * Only profiles with a "gemm_shape" object use it: a measured CPU profile prices its kernels as it always did. */
#include "plan/gemm_shape.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const prec_keys[4] = {"fp32", "bf16", "fp16", "tf32"};

/* Seconds of the compute of one tile choice: the waves of tiles over the SMs, each a K loop at the SM's share of
 * the peak plus the epilogue, every SM writing its tile's output at once through the shared memory bandwidth. */
static double tile_seconds(const llm4d_gemm_shape *g, const int tile[2], double M, double N, double K, double peak,
                           double out_bytes) {
    const double tiles = ceil(M / tile[0]) * ceil(N / tile[1]);
    const double waves = ceil(tiles / g->sms);
    const double per_sm = peak * 1e9 / g->sms * g->mainloop_eff;
    const double kloop = 2.0 * tile[0] * tile[1] * K / per_sm;
    const double epilogue = (double)tile[0] * tile[1] * out_bytes * g->sms / (g->mem_gbps * 1e9);
    return waves * (kloop + epilogue);
}

double llm4d_gemm_shape_seconds(const llm4d_gemm_shape *g, double M, double N, double K, int prec, double in_bytes,
                                double out_bytes, double launch_s) {
    if (g->sms < 1 || g->n_tiles < 1 || M <= 0 || N <= 0 || K <= 0) return 0;
    const double peak = g->peak_gflops[prec >= 0 && prec < 4 ? prec : 0];
    if (!(peak > 0)) return 0;
    double best = INFINITY;
    for (int i = 0; i < g->n_tiles; i++) {
        const double t = tile_seconds(g, g->tile[i], M, N, K, peak, out_bytes);
        if (t < best) best = t;
    }
    /* every operand read once and the output written once: a GEMM thin in any dimension waits on memory */
    const double bytes = (M * K + K * N) * in_bytes + M * N * out_bytes;
    const double memory = bytes / (g->mem_gbps * 1e9);
    return launch_s + (best > memory ? best : memory);
}

double llm4d_gemm_shape_call_s(const llm4d_gemm_shape *g, const llm4d_rc_call *c, int prec, double launch_s) {
    if (g->sms < 1) return 0;
    const double es = prec == 1 || prec == 2 ? 2.0 : 4.0; /* 16-bit operands under bf16 / fp16 */
    const double N = (double)c->d[0], C = (double)c->d[1], OC = (double)c->d[2];
    if (c->op == LLM4D_RC_LINEAR_FWD) return llm4d_gemm_shape_seconds(g, N, OC, C, prec, es, es, launch_s);
    if (c->op != LLM4D_RC_LINEAR_BWD) return 0;
    double t = 0;
    if (c->d[4]) t += llm4d_gemm_shape_seconds(g, N, C, OC, prec, es, es, launch_s); /* dinp = dout W */
    if (c->d[5]) t += llm4d_gemm_shape_seconds(g, OC, C, N, prec, es, 4.0, launch_s); /* dw += dout^T inp, fp32 */
    return t;
}

double llm4d_gemm_shape_price(const llm4d_gemm_shape *g, const llm4d_rc_call *c, int prec, double launch_s,
                              double s[LLM4D_WORK_N]) {
    const double t = llm4d_gemm_shape_call_s(g, c, prec, launch_s);
    if (t > 0) s[llm4d_rc_kind(c)] += t;
    return t;
}

/* ---- JSON ---- */

static int fail(char *what, size_t n, const char *msg) {
    snprintf(what, n, "\"gemm_shape\": %s", msg);
    return -1;
}

static int positive(const cJSON *o, const char *key, double *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x) || !(x->valuedouble > 0)) return 0;
    *out = x->valuedouble;
    return 1;
}

int llm4d_gemm_shape_parse(const cJSON *o, llm4d_gemm_shape *g, char *what, size_t n) {
    memset(g, 0, sizeof *g);
    if (!o) return 0;
    if (!cJSON_IsObject(o)) return fail(what, n, "is not an object");
    double sms = 0;
    if (!positive(o, "sms", &sms) || sms != floor(sms) || sms > 1e6)
        return fail(what, n, "\"sms\" is not a positive whole number of multiprocessors");
    if (!positive(o, "mainloop_efficiency", &g->mainloop_eff) || g->mainloop_eff > 1)
        return fail(what, n, "\"mainloop_efficiency\" is not a fraction in (0, 1]");
    if (!positive(o, "memory_gbps", &g->mem_gbps)) return fail(what, n, "\"memory_gbps\" is not a positive number");
    const cJSON *peak = cJSON_GetObjectItemCaseSensitive(o, "peak_gflops");
    if (!cJSON_IsObject(peak)) return fail(what, n, "\"peak_gflops\" is not an object of GFLOP/s by precision");
    for (int q = 0; q < 4; q++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(peak, prec_keys[q]);
        if (!x) continue; /* a precision without a peak keeps the flat rate */
        if (!cJSON_IsNumber(x) || x->valuedouble < 0)
            return fail(what, n, "a \"peak_gflops\" entry is not a number of GFLOP/s");
        g->peak_gflops[q] = x->valuedouble;
    }
    const cJSON *tiles = cJSON_GetObjectItemCaseSensitive(o, "tiles"), *t;
    if (!cJSON_IsArray(tiles) || cJSON_GetArraySize(tiles) < 1 || cJSON_GetArraySize(tiles) > LLM4D_GEMM_SHAPE_TILES)
        return fail(what, n, "\"tiles\" is not a list of 1 to 8 [rows, columns] tiles");
    cJSON_ArrayForEach(t, tiles) {
        const cJSON *r = cJSON_GetArrayItem(t, 0), *c = cJSON_GetArrayItem(t, 1);
        if (!cJSON_IsArray(t) || cJSON_GetArraySize(t) != 2 || !cJSON_IsNumber(r) || !cJSON_IsNumber(c) ||
            !(r->valuedouble >= 1 && r->valuedouble <= 4096) || !(c->valuedouble >= 1 && c->valuedouble <= 4096))
            return fail(what, n, "a tile is not [rows, columns] of 1 to 4096 each");
        g->tile[g->n_tiles][0] = (int)r->valuedouble, g->tile[g->n_tiles][1] = (int)c->valuedouble;
        g->n_tiles++;
    }
    g->sms = (int)sms;
    return 0;
}

void llm4d_gemm_shape_to_json(cJSON *profile, const llm4d_gemm_shape *g) {
    if (g->sms < 1) return;
    cJSON *o = cJSON_AddObjectToObject(profile, "gemm_shape");
    if (!o) return;
    cJSON_AddNumberToObject(o, "sms", g->sms);
    cJSON *tiles = cJSON_AddArrayToObject(o, "tiles");
    for (int i = 0; tiles && i < g->n_tiles; i++) {
        cJSON *t = cJSON_CreateArray();
        cJSON_AddItemToArray(t, cJSON_CreateNumber(g->tile[i][0]));
        cJSON_AddItemToArray(t, cJSON_CreateNumber(g->tile[i][1]));
        cJSON_AddItemToArray(tiles, t);
    }
    cJSON *peak = cJSON_AddObjectToObject(o, "peak_gflops");
    for (int q = 0; peak && q < 4; q++)
        if (g->peak_gflops[q] > 0) cJSON_AddNumberToObject(peak, prec_keys[q], g->peak_gflops[q]);
    cJSON_AddNumberToObject(o, "mainloop_efficiency", g->mainloop_eff);
    cJSON_AddNumberToObject(o, "memory_gbps", g->mem_gbps);
}
