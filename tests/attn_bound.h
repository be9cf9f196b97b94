/* attn_bound.h — per-element error bounds of the causal attention (backend.h attention_forward/backward) whose GEMM
 * operands are rounded to a low-precision format and whose stored output may be rounded too, against the exact
 * values (the reference backend's, computed in double): tests/test_kernels.c (bf16 / fp16 operands) and
 * tests/test_kernels16_gemm.c (16-bit tensors as well). Header-only, as check.h.
 *
 * Rounding to a format with a p-bit significand errs by at most u = 2^-p relative (bf16: p = 8, u = 2^-8; fp16:
 * p = 11, u = 2^-11, plus an absolute 2^-25 where a value falls below fp16's normal range; fp32 operands: u = 0).
 * First-order propagation through the algorithm, err(x) the absolute error of x, computed in double from the exact
 * values of one query row:
 *   S_j = scale q.k_j, q and k rounded:      err(S_j) <= 2u scale sum|q||k_j| <= eS (the row's largest)
 *   P_j = exp(S_j - max)/sum, exp(S_j - lse): err(P_j) <= P_j 2 eS (the shift and the normaliser move by <= eS)
 *   P~_j = m_j P_j rounded as an operand:     err(P~_j) <= P~_j (2 eS + u)
 *   out = sum_j P~_j v_j, v rounded:          err(out) <= sum_j P~_j |v_j| (2 eS + 2u);   err(lse) <= eS
 *   dP~_j = dout.v_j, both rounded:           err(dP~_j) <= 2u sum|dout||v_j|
 *   D = dout.out (out from this forward, stored in a format of unit uo):
 *                                             err(D) <= sum |dout| (err(out) + uo |out|)
 *   dS_j = scale P_j (m_j dP~_j - D), rounded: err(dS_j) <= scale P_j (2 eS |m_j dP~_j - D| + m_j err(dP~_j)
 *                                              + err(D)) + u |dS_j|
 *   dQ = sum_j dS_j k_j, dK_j += dS_j q, dV_j += P~_j dout: each term errs by err(a)|b| + |a||b| u.
 * plus fp32 accumulation, 1e-5 of the sum of magnitudes (md for dqkv, included in bo). The callers multiply the
 * bound by 1.25 for the second-order terms (exp(eS) - 1 exceeds eS by eS^2/2). */
#ifndef LLM4D_TESTS_ATTN_BOUND_H
#define LLM4D_TESTS_ATTN_BOUND_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "core/rng.h"

/* A format's unit roundoff u and the absolute error of its underflow (tiny). */
typedef struct {
    double u, tiny;
} lp_format;

/* The bounds for qkv [B,T,C3] (C3 = (NH + 2 NKV) HS: backend.h's layout, query head h reading kv head h / (NH/NKV))
 * and dout [B,T,C] (the exact inputs: what both backends read), oref the exact forward output, operands in format
 * fm, the output backward reads stored in format fo ({0, 0}: fp32): bo [B,T,C] of out, bl [B,NH,T] of lse,
 * bd [B,T,C3] of dqkv without fp32 accumulation, md [B,T,C3] the magnitudes the accumulation's 1e-5 applies to
 * (a kv head's summed over the query heads of its group). bo, bl, bd, md must be zeroed. */
static inline void attn_bounds(const float *qkv, const float *dout, const float *oref, llm4d_attn_shape s,
                               const llm4d_dropout *drop, lp_format fm, lp_format fo, double *bo, double *bl,
                               double *bd, double *md) {
    const int B = s.B, T = s.T, NH = s.NH, HS = s.HS, C = NH * HS, NKV = llm4d_attn_nkv(s), C3 = C + 2 * NKV * HS;
    const int grp = NH / NKV, Ckv = NKV * HS;
    const float p = drop->p;
    double *P = malloc((size_t)T * sizeof(double)), *M = malloc((size_t)T * sizeof(double));
    if (!P || !M) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    const double u = fm.u, sc = 1.0 / sqrt((double)HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t1 = 0; t1 < T; t1++) {
                const float *q = qkv + ((size_t)b * T + t1) * C3 + h * HS;
                const float *dy = dout + ((size_t)b * T + t1) * C + h * HS;
                const size_t oi = ((size_t)b * T + t1) * C + h * HS;
                double mx = -INFINITY, eSm = 0.0;
                for (int t2 = 0; t2 <= t1; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * C3 + C + h / grp * HS;
                    double d = 0.0, a = 0.0;
                    for (int i = 0; i < HS; i++) d += (double)q[i] * k[i], a += fabs((double)q[i] * k[i]);
                    P[t2] = d * sc;
                    mx = fmax(mx, P[t2]);
                    eSm = fmax(eSm, 2 * u * sc * a + 2 * fm.tiny * HS);
                }
                double sum = 0.0;
                for (int t2 = 0; t2 <= t1; t2++) sum += P[t2] = exp(P[t2] - mx);
                for (int t2 = 0; t2 <= t1; t2++) {
                    P[t2] /= sum;
                    uint64_t pos = (((uint64_t)drop->sample_ids[b] * s.NH_total + s.head0 + h) * T + t1) * T + t2;
                    uint32_t w[4];
                    llm4d_rng_block(drop->seed, drop->stream, pos >> 2, w);
                    M[t2] = p == 0.0f ? 1.0 : llm4d_rng_u01(w[pos & 3]) >= p ? 1.0 / (1.0 - p) : 0.0;
                }
                const double eP = 2 * eSm + u; /* relative error of P~ as an operand */
                bl[((size_t)b * NH + h) * T + t1] = eSm + 1e-6 * (fabs(mx) + 1.0);
                double Dt = 0.0, eD = 0.0;
                for (int c = 0; c < HS; c++) {
                    double e = 0.0, mag = 0.0;
                    for (int t2 = 0; t2 <= t1; t2++) {
                        const size_t vi = ((size_t)b * T + t2) * C3 + C + Ckv + h / grp * HS + c;
                        const double t = P[t2] * M[t2] * fabs(qkv[vi]);
                        e += t * (eP + u) + M[t2] * P[t2] * fm.tiny;
                        mag += t;
                    }
                    bo[oi + c] = e + 1e-5 * mag;
                    Dt += (double)dy[c] * oref[oi + c];
                    eD += fabs(dy[c]) * (bo[oi + c] + fo.u * fabs(oref[oi + c]) + fo.tiny);
                }
                for (int t2 = 0; t2 <= t1; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * C3 + C + h / grp * HS, *v = k + Ckv;
                    double dp = 0.0, dpa = 0.0;
                    for (int c = 0; c < HS; c++) dp += (double)dy[c] * v[c], dpa += fabs((double)dy[c] * v[c]);
                    const double g = M[t2] * dp - Dt, dS = sc * P[t2] * g;
                    const double edP = M[t2] * (2 * u * dpa + 2 * fm.tiny * HS); /* of m dP~ */
                    const double edS = sc * P[t2] * (2 * eSm * fabs(g) + edP + eD) + u * fabs(dS) + fm.tiny;
                    const size_t qi = ((size_t)b * T + t1) * C3 + h * HS;
                    const size_t ki = ((size_t)b * T + t2) * C3 + C + h / grp * HS;
                    for (int c = 0; c < HS; c++) {
                        bd[qi + c] += edS * fabs(k[c]) + fabs(dS * k[c]) * u;
                        md[qi + c] += fabs(dS * k[c]);
                        bd[ki + c] += edS * fabs(q[c]) + fabs(dS * q[c]) * u;
                        md[ki + c] += fabs(dS * q[c]);
                        const double pv = M[t2] * P[t2] * fabs(dy[c]);
                        bd[ki + Ckv + c] += pv * (eP + u) + M[t2] * fm.tiny * fabs(dy[c]);
                        md[ki + Ckv + c] += pv;
                    }
                }
            }
    free(P), free(M);
}

#endif
