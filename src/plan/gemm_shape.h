/* gemm_shape.h — a GPU GEMM's time by its shape (M, N, K), for machine profiles written from published figures.
 *
 * A profile of rates alone prices every GEMM at one fraction of the peak, whatever its shape; on a GPU the fraction
 * depends on the shape. cuBLAS splits the output into tiles (e.g. 256 x 128), runs one tile per streaming
 * multiprocessor at a time, in waves over the SMs: a partial tile or a partial last wave costs a whole one (tile and
 * wave quantization, NVIDIA's "Matrix Multiplication Background User's Guide"), and every tile pays its epilogue
 * (the tile's output written to memory) however short its K loop. A GEMM with little work per byte is bound by
 * memory instead. So a GEMM's seconds here are
 *     launch + max(waves x (K-loop of one tile at the SM's share of the peak x mainloop_efficiency + epilogue),
 *                  bytes / memory bandwidth)
 * with the tile the profile lists that gives the least time (cuBLAS's heuristics choose among several), and
 * mainloop_efficiency the one number fitted to a published measurement (the profile's "gemm_shape" says which).
 *
 * The profile's "gemm_shape" object (absent: this pricing is off, as for every measured CPU profile):
 *   {"sms": 108, "tiles": [[256, 128], [128, 256], [128, 128], [128, 64], [64, 128]],
 *    "peak_gflops": {"fp32": 19500, "bf16": 312000, "fp16": 312000, "tf32": 156000},
 *    "mainloop_efficiency": 0.93, "memory_gbps": 2039}
 * (where each number comes from belongs in the profile's "sources", with the others). */
#ifndef LLM4D_PLAN_GEMM_SHAPE_H
#define LLM4D_PLAN_GEMM_SHAPE_H

#include <stddef.h>

#include "plan/record.h"

struct cJSON;

#define LLM4D_GEMM_SHAPE_TILES 8

typedef struct {
    int sms;                                 /* 0: no shape model (the flat fallback rate prices GEMMs) */
    int n_tiles;
    int tile[LLM4D_GEMM_SHAPE_TILES][2];     /* output tile rows x columns */
    double peak_gflops[4];                   /* by llm4d_precision: fp32, bf16, fp16, tf32 */
    double mainloop_eff;                     /* fraction of an SM's peak its K loop runs at */
    double mem_gbps;                         /* the device memory's bandwidth (epilogues, memory-bound GEMMs) */
} llm4d_gemm_shape;

/* Seconds of one GEMM C[M, N] = A[M, K] B[K, N] at precision prec (llm4d_precision), operands of in_bytes per
 * element and the output of out_bytes, with launch_s added; 0 when g has no model. */
double llm4d_gemm_shape_seconds(const llm4d_gemm_shape *g, double M, double N, double K, int prec, double in_bytes,
                                double out_bytes, double launch_s);

/* Seconds of a recorded linear layer's GEMMs (forward: one; backward: the input's and the weight's gradients, as
 * the call computes them), each with launch_s; 0 for any other call or when g has no model (the caller prices it
 * as before). */
double llm4d_gemm_shape_call_s(const llm4d_gemm_shape *g, const llm4d_rc_call *c, int prec, double launch_s);
/* The same added to s[the call's kind of work] (price.c's convention); returns the seconds added (0: not priced). */
double llm4d_gemm_shape_price(const llm4d_gemm_shape *g, const llm4d_rc_call *c, int prec, double launch_s,
                              double s[LLM4D_WORK_N]);

/* Read the profile's "gemm_shape" object (NULL: none, g stays off) into g; 0, or -1 with what is wrong in what. */
int llm4d_gemm_shape_parse(const struct cJSON *o, llm4d_gemm_shape *g, char *what, size_t n);
/* Add g to a profile's JSON object as "gemm_shape" (a profile written back keeps it); nothing when g is off. */
void llm4d_gemm_shape_to_json(struct cJSON *profile, const llm4d_gemm_shape *g);

#endif
