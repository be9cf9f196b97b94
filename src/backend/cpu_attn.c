/* cpu_attn.c — causal self-attention of the fast CPU backend, flash-style.
 *
 * FlashAttention-2's scheme: queries in row blocks of ATT_TB, keys in blocks of ATT_KB, only the blocks left of /
 * on the diagonal computed (about half the FLOPs of the full square), an online softmax in forward, and no T x T
 * matrix anywhere: forward keeps the log-sum-exp of each row and backward rebuilds each block's probabilities from
 * it. At GPT-2 124M with B=8, T=1024 this saves 384 MiB of probabilities per layer plus a 384 MiB backward
 * scratch. The blocks of all heads are many small independent GEMMs, so threads take whole tasks and run them
 * single-threaded, with the softmax and dropout in between while the block is in per-thread scratch (faster than
 * oneDNN's batched GEMM over heads with each GEMM split across threads). Q, K, V, dout, out and dqkv are typed
 * tensors (backend/tensor.h): the packing reads them in whatever type they are stored, the outputs are rounded into
 * theirs once, when a head's rows are done; the statistics (lse, D, the running max and sum) stay fp32.
 *
 * Every GEMM operand and output is dense. Q, K, V (and backward's dout) are packed once per call into per-head
 * [T, HS] panels in the operand precision, and backward accumulates dQ, dK, dV of a head in per-thread [T, HS]
 * fp32 panels added into dqkv when the head is done. Views with row strides of 3C (qkv) or C (out) send oneDNN to
 * its generic gemm:jit kernel; dense panels get brgemm, on AMX tiles in bf16 (Sapphire Rapids, one thread, a
 * 128 x 256 x 64 block: 5 us against 11 us strided; the whole attention several times faster). The packing is the
 * operand conversion bf16 needs anyway, written to another place; in fp32 it is a copy (one pass over qkv, and
 * dout in backward), for brgemm's 15-35 % over gemm:jit on these blocks.
 *
 * On AMX CPUs in bf16 (where T and HS are whole tiles, as in every GPT-2 size) the blocks' products run on llm4d's
 * own AMX kernel instead (cpu_amx.h, llm4d_amx_gemm_block, one thread per task like oneDNN's here), whose per-call
 * cost on a 128 x 256 x 64 block is a few tile loads and stores, where oneDNN's brgemm kept these products at 13-26 %
 * of the AMX peak. Every operand is then in the tiles its product reads: Q, K, V and dout packed once per call, per
 * head (Q as A tiles for S and as B tiles for dK; K^T and K; V and V^T; dout as A and as B tiles), P~ and dS written
 * into A tiles by the softmax pass, and their transposes (dV's and dK's operands) packed from the fp32 blocks while
 * they are in cache. The scores are scaled in the softmax pass rather than by the GEMM. GPT-2 124M at B=2 T=1024 on
 * two Sapphire Rapids threads: attention 0.34 -> 0.27 s a step.
 *
 * Grouped-query attention (backend.h llm4d_attn_shape.NKV): K and V are packed once per kv head and every query
 * head of the group reads its kv head's panels; forward's tasks stay per query head. Backward's task is a kv head
 * with the query heads of its group in order on one thread, so a kv head's dK and dV are summed in the thread's
 * panels in a fixed order (no atomics, the same bits at any thread count); in multi-head attention that is one
 * query head a task, as before. */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#include "backend/cpu_amx.h"
#include "backend/cpu_impl.h"

/* Causal attention query block (rows per task and per GEMM). 128 keeps the wasted upper-triangle work at 1/16 for
 * T = 1024 while each GEMM is still large enough to run near peak. */
#ifndef ATT_TB
#define ATT_TB 128
#endif


/* Position of (b,h,t1,0) in the attention-dropout stream (backend.h). */
static uint64_t att_row_pos(const llm4d_attn_shape *s, const llm4d_dropout *d, int b, int h, int t1) {
    return (((uint64_t)d->sample_ids[b] * s->NH_total + s->head0 + h) * s->T + t1) * s->T;
}

/* The mask bits of row (b,h,t1) from key c0 on (c0 a multiple of 32: the key blocks are), when the caller keeps them
 * (llm4d_dropout.bits): forward stores what it draws, backward reads them instead of drawing the Philox words a
 * second time (the dropout was a third of a bf16 attention's time at B=2 T=1024, p = 0.1). */
static uint32_t *att_bits(const llm4d_attn_shape *s, const llm4d_dropout *d, int b, int h, int t1, int c0) {
    return d->bits + (((size_t)b * s->NH + h) * s->T + t1) * LLM4D_MASK_WORDS(s->T) + (size_t)c0 / 32;
}

/* Flash-style (FlashAttention-2) attention: the scores are never stored whole. A task takes a block of ATT_TB
 * query rows and walks the key blocks of ATT_KB keys left of and on the diagonal; forward keeps a running max
 * and sum per row (online softmax, rescaling the output accumulator when the max grows) and leaves only the
 * log-sum-exp per row; backward recomputes each block's probabilities from it. ATT_KB = 256 keeps the per-thread
 * blocks (four ATT_TB x ATT_KB arrays, 512 KiB) within L2 while halving the GEMM calls of a 128-key block. The
 * causal waste is only the upper triangle of the diagonal ATT_TB x ATT_TB square, as keys >= the block's last
 * row are never computed. */
#ifndef ATT_KB
#define ATT_KB 256
#endif
_Static_assert(ATT_KB <= DROP_CHUNK, "one drop_mults call covers a key block row");
_Static_assert(ATT_KB % 32 == 0, "a key block starts a word of the mask bits (and is whole AMX tiles)");
_Static_assert(ATT_TB % 32 == 0, "a row block is whole AMX tiles");

/* The GEMMs of (row block i, key block j) of one head, on dense operands: the packed Q, K, V and dout panels and
 * the per-thread accumulators have rows HS apart, the per-thread blocks rows n apart (a block whose rows were
 * wider than its n columns would send oneDNN to gemm:jit with a scalar epilogue: 26x slower). Rows [r0, r1) of the
 * block (m of them), keys [c0, c1) (n of them). */
enum { P_S, P_PV, P_DP, P_DV, P_DQ, P_DK, ATT_NPRIM };

typedef struct {
    const llm4d_attn_shape *s;
    const llm4d_dropout *drop; /* NULL when not dropping */
    int T, HS, C, C3, nblk, nkb;
    int NKV, grp;          /* key/value heads, and query heads per kv head (query head h reads kv head h / grp) */
    int Ckv;               /* NKV x HS: K's (and V's) width in a qkv row of C3 = C + 2 Ckv */
    float scale;
    float sscale;          /* the scale the softmax applies to S: 1 where oneDNN's GEMM did (its alpha) */
    float keep;            /* a kept probability's multiplier, 1/(1-p) (as drop_mults computes it) */
    llm4d_cpu_fmt fmt;
    size_t esz;            /* bytes of one GEMM operand element */
    const void *qkv;       /* Q, K, V packed: Q [B][NH][T][HS], then K and V [B][NKV][T][HS] each, in the operand
                            * precision */
    const void *dout;      /* backward: dout packed, [B][NH][T][HS] */
    llm4d_dnnl_prim **prims;
    /* amx: the products on the AMX kernel, every operand in the tiles its product reads (cpu_amx.h), packed per
     * head; a head's pack of a [T, HS] operand is head_el elements, its A tiles' and B^T tiles' 16-row groups kt_hs
     * tiles apart, its B tiles' 16-column groups kt_t tiles apart. */
    int amx;
    int64_t kt_hs, kt_t;
    size_t head_el;
    const uint16_t *qa, *kbt, *vb;            /* S = Q K^T: Q as A, K^T as B; O += P~ V: V as B */
    const uint16_t *qb, *kb, *vbt, *dya, *dyb; /* dK += dS^T Q, dQ += dS K, dP~ = dout V^T, dV += P~^T dout */
} att_call;

/* Query head (b, h)'s part of a per-head AMX pack of Q or dout. */
static const uint16_t *att_head(const att_call *ac, const uint16_t *pack, int b, int h) {
    return pack + ((size_t)b * (size_t)ac->s->NH + (size_t)h) * ac->head_el;
}

/* Key/value head (b, g)'s part of a per-head AMX pack of K or V. */
static const uint16_t *att_kvhead(const att_call *ac, const uint16_t *pack, int b, int g) {
    return pack + ((size_t)b * (size_t)ac->NKV + (size_t)g) * ac->head_el;
}

static llm4d_dnnl_prim **att_prim(const att_call *ac, int i, int j) {
    return ac->prims + ((size_t)i * ac->nkb + j) * ATT_NPRIM;
}

static void att_prims(cpu_ctx *cx, const att_call *ac, int backward) {
    const int T = ac->T, HS = ac->HS;
    for (int i = 0; i < ac->nblk; i++) {
        const int r0 = i * ATT_TB, r1 = r0 + ATT_TB < T ? r0 + ATT_TB : T, m = r1 - r0;
        for (int j = 0; j * ATT_KB < r1; j++) {
            const int c0 = j * ATT_KB, n = (c0 + ATT_KB < r1 ? c0 + ATT_KB : r1) - c0;
            llm4d_dnnl_prim **q = att_prim(ac, i, j);
            llm4d_dnnl_mm mm = llm4d_cpu_gemm_2d(cx, m, n, HS, 0, HS, 1, HS, n, 0); /* S = scale Q K^T */
            mm.alpha = ac->scale;
            q[P_S] = llm4d_dnnl_get_mt(cx->dnnl, &mm);
            if (!backward) {
                mm = llm4d_cpu_gemm_2d(cx, m, HS, n, 0, n, 0, HS, HS, 1); /* O += P~ V */
                q[P_PV] = llm4d_dnnl_get_mt(cx->dnnl, &mm);
                continue;
            }
            mm = llm4d_cpu_gemm_2d(cx, m, n, HS, 0, HS, 1, HS, n, 0); /* dP~ = dout V^T */
            q[P_DP] = llm4d_dnnl_get_mt(cx->dnnl, &mm);
            mm = llm4d_cpu_gemm_2d(cx, n, HS, m, 1, n, 0, HS, HS, 1); /* dV += P~^T dout */
            q[P_DV] = llm4d_dnnl_get_mt(cx->dnnl, &mm);
            mm = llm4d_cpu_gemm_2d(cx, m, HS, n, 0, n, 0, HS, HS, 1); /* dQ += dS K */
            q[P_DQ] = llm4d_dnnl_get_mt(cx->dnnl, &mm);
            mm = llm4d_cpu_gemm_2d(cx, n, HS, m, 1, n, 0, HS, HS, 1); /* dK += dS^T Q */
            q[P_DK] = llm4d_dnnl_get_mt(cx->dnnl, &mm);
        }
    }
}

/* Floats of one thread's scratch: S and dP blocks (fp32), the P~ and dS blocks in operand precision (sized as
 * fp32), the m x HS output accumulator, the running max and sum, and backward's D of a whole head and its dQ, dK,
 * dV accumulators. Rounded to 64 bytes so every thread's slice (and the accumulators) start aligned. */
static size_t att_thread_floats(int T, int HS) {
    const size_t Dfl = ((size_t)T + 15) & ~(size_t)15;
    const size_t n = 4 * (size_t)ATT_TB * ATT_KB + (size_t)ATT_TB * HS + 2 * (size_t)ATT_TB + Dfl + 3 * (size_t)T * HS;
    return (n + 15) & ~(size_t)15;
}

/* Pack [B, T, NH * HS] rows (dout: kv 0) or qkv's [B, T, (NH + 2 NKV) * HS] rows (kv 1) into per-head panels in the
 * operand precision, [B][NH][T][HS] for the query heads, then [B][NKV][T][HS] for K and for V: every head's panel
 * dense (att_row finds them). */
static void *att_pack(cpu_ctx *cx, int slot, llm4d_ctensor src, const att_call *ac, int kv) {
    const llm4d_attn_shape *s = ac->s;
    const int T = s->T, HS = s->HS, NH = s->NH, NKV = ac->NKV, C = ac->C, rowlen = kv ? ac->C3 : C;
    const size_t es = llm4d_cpu_operand_bytes(cx->fmt), panel = (size_t)T * HS, qpart = (size_t)s->B * NH * panel;
    const size_t kvpart = (size_t)s->B * NKV * panel;
    char *dst = llm4d_cpu_slot(cx, slot, (size_t)s->B * T * rowlen * es);
    const llm4d_cpu_fmt fmt = cx->fmt;
    const long rows = (long)s->B * T;
#pragma omp parallel for schedule(static)
    for (long bt = 0; bt < rows; bt++) {
        const long b = bt / T, t = bt % T;
        const size_t in = (size_t)bt * rowlen;
        for (int h = 0; h < NH; h++) {
            const size_t e = ((size_t)b * NH + (size_t)h) * panel + (size_t)t * HS;
            llm4d_cpu_convert_typed(fmt, dst + e * es, src, in + (size_t)h * HS, (size_t)HS);
        }
        for (int p = 0; kv && p < 2; p++)
            for (int g = 0; g < NKV; g++) {
                const size_t e = qpart + (size_t)p * kvpart + ((size_t)b * NKV + (size_t)g) * panel + (size_t)t * HS;
                llm4d_cpu_convert_typed(fmt, dst + e * es, src, in + (size_t)C + (size_t)p * ac->Ckv + (size_t)g * HS,
                                        (size_t)HS);
            }
    }
    return dst;
}

/* The AMX path's operands: per head, Q, K, V (and dout) in the tile layouts of the products that read them, in
 * conversion slots 0 (the forward's three), 1 (backward's three more) and 2 (dout's two): at most 3, 3 and 2 times
 * B T C elements (K and V have NKV heads, Q and dout NH), within what the memory plan gives the slots (cpu.c
 * cpu_operand_workspace). */
static void att_pack_amx(cpu_ctx *cx, att_call *ac, llm4d_ctensor qkv, llm4d_ctensor dout) {
    const llm4d_attn_shape *s = ac->s;
    const int T = s->T, HS = s->HS, NH = s->NH, C = ac->C, C3 = ac->C3, grp = ac->grp;
    const long nbh = (long)s->B * NH;
    const size_t he = ac->head_el, part = (size_t)nbh * he, kvpart = (size_t)s->B * ac->NKV * he;
    uint16_t *p0 = llm4d_cpu_slot(cx, 0, (part + 2 * kvpart) * sizeof(uint16_t));
    uint16_t *p1 = dout.p ? llm4d_cpu_slot(cx, 1, (part + 2 * kvpart) * sizeof(uint16_t)) : NULL;
    uint16_t *p2 = dout.p ? llm4d_cpu_slot(cx, 2, 2 * part * sizeof(uint16_t)) : NULL;
    ac->qa = p0, ac->kbt = p0 + part, ac->vb = p0 + part + kvpart;
    if (dout.p) ac->qb = p1, ac->kb = p1 + part, ac->vbt = p1 + part + kvpart, ac->dya = p2, ac->dyb = p2 + part;
    /* heads side by side, each packer on one thread (nested regions run on the calling thread); a kv head is packed
     * with the first query head of its group */
#pragma omp parallel for schedule(static)
    for (long bh = 0; bh < nbh; bh++) {
        const long b = bh / NH, h = bh % NH, g = h / grp;
        const size_t row0 = (size_t)b * T * C3;
        const llm4d_ctensor q = llm4d_ct_at(qkv, row0 + (size_t)h * HS);
        const llm4d_ctensor k = llm4d_ct_at(qkv, row0 + C + (size_t)g * HS);
        const llm4d_ctensor v = llm4d_ct_at(qkv, row0 + C + ac->Ckv + (size_t)g * HS);
        const size_t o = (size_t)bh * he, okv = ((size_t)b * ac->NKV + (size_t)g) * he;
        const int kv = h % grp == 0;
        llm4d_amx_pack_a(p0 + o, q, C3, T, HS, LLM4D_ACT_NONE);
        if (kv) {
            llm4d_amx_pack_b_t(p0 + part + okv, k, C3, T, HS);
            llm4d_amx_pack_b(p0 + part + kvpart + okv, v, C3, T, HS, LLM4D_ACT_NONE);
        }
        if (!dout.p) continue;
        const llm4d_ctensor dy = llm4d_ct_at(dout, (size_t)b * T * C + (size_t)h * HS);
        llm4d_amx_pack_b(p1 + o, q, C3, T, HS, LLM4D_ACT_NONE);
        if (kv) {
            llm4d_amx_pack_b(p1 + part + okv, k, C3, T, HS, LLM4D_ACT_NONE);
            llm4d_amx_pack_b_t(p1 + part + kvpart + okv, v, C3, T, HS);
        }
        llm4d_amx_pack_a(p2 + o, dy, C, T, HS, LLM4D_ACT_NONE);
        llm4d_amx_pack_b(p2 + part + o, dy, C, T, HS, LLM4D_ACT_NONE);
    }
}

/* Set up one call: the operands in the working precision, room for the primitive handles and each thread's
 * scratch (both grown on the first call of a larger shape only), and the primitives themselves. */
static att_call att_begin(cpu_ctx *cx, const llm4d_attn_shape *s, const llm4d_dropout *drop, llm4d_ctensor qkv,
                          llm4d_ctensor dout) {
    att_call ac = {.s = s, .drop = drop_on(drop) ? drop : NULL, .T = s->T, .HS = s->HS, .C = s->NH * s->HS};
    ac.NKV = llm4d_attn_nkv(*s);
    LLM4D_ASSERT(s->NH % ac.NKV == 0, "attention: %d query heads do not split into %d key/value heads", s->NH, ac.NKV);
    ac.grp = s->NH / ac.NKV;
    ac.Ckv = ac.NKV * s->HS;
    ac.C3 = ac.C + 2 * ac.Ckv;
    ac.nblk = (ac.T + ATT_TB - 1) / ATT_TB;
    ac.nkb = (ac.T + ATT_KB - 1) / ATT_KB;
    ac.scale = 1.0f / sqrtf((float)ac.HS);
    ac.keep = ac.drop ? 1.0f / (1.0f - ac.drop->p) : 1.0f;
    ac.fmt = cx->fmt;
    ac.esz = llm4d_cpu_operand_bytes(cx->fmt);
    /* whole tiles only (every GPT-2 size has HS = 64; rows and keys then never end inside a tile) */
    ac.amx = cx->amx && ac.HS % LLM4D_AMX_KB == 0 && ac.T % LLM4D_AMX_MB == 0;
    ac.kt_hs = ac.HS / LLM4D_AMX_KB;
    ac.kt_t = ac.T / LLM4D_AMX_KB;
    ac.head_el = (size_t)ac.T * (size_t)ac.HS;
    ac.sscale = ac.amx ? ac.scale : 1.0f;
    cx->att_amx |= ac.amx;
    /* the linear layers' conversion slots are free between kernels: Q, K, V are packed once per call (a conversion
     * where they are not stored in the operand precision, else the attention's own layout work) */
    {
        const int same = ac.amx ? qkv.t == LLM4D_BF16 : llm4d_cpu_in_place(cx->fmt, qkv.t);
        WORK_SCOPE(cx, same ? LLM4D_WORK_ATTN : LLM4D_WORK_CONVERT);
        if (ac.amx) {
            att_pack_amx(cx, &ac, qkv, dout);
        } else {
            ac.qkv = att_pack(cx, 0, qkv, &ac, 1);
            ac.dout = dout.p ? att_pack(cx, 1, dout, &ac, 0) : NULL;
        }
    }
    const size_t nprim = (size_t)ac.nblk * ac.nkb * ATT_NPRIM;
    if (nprim > cx->prims_cap) {
        free(cx->prims);
        cx->prims = malloc(nprim * sizeof *cx->prims);
        LLM4D_ASSERT(cx->prims != NULL, "out of memory for %zu attention primitive handles", nprim);
        cx->prims_cap = nprim;
    }
    ac.prims = cx->prims;
    const size_t per = att_thread_floats(ac.T, ac.HS), need = (size_t)omp_get_max_threads() * per;
    if (need > cx->work_cap) {
        free(cx->work);
        cx->work = aligned_alloc(64, need * sizeof(float));
        LLM4D_ASSERT(cx->work != NULL, "out of memory for the attention's per-thread blocks (%zu floats)", need);
        cx->work_cap = need;
    }
    if (!ac.amx) att_prims(cx, &ac, dout.p != NULL);
    return ac;
}

/* Row t of batch row b in part p of the packed qkv: of query head h in Q (p = 0; also the packed dout's), of
 * key/value head h in K (p = 1) or V (p = 2). */
static const void *att_row(const att_call *ac, const void *base, int p, int b, int h, int t) {
    const size_t B = (size_t)ac->s->B, heads = p ? (size_t)ac->NKV : (size_t)ac->s->NH;
    const size_t part = p ? B * (size_t)ac->s->NH + (size_t)(p - 1) * B * (size_t)ac->NKV : 0; /* panels before */
    const size_t e = ((part + (size_t)b * heads + (size_t)h) * ac->T + (size_t)t) * ac->HS;
    return (const char *)base + e * ac->esz;
}

/* Row of n operand-format elements from fp32 src, whose first lim entries are valid and the rest zero. dst may
 * be src itself in the fp32 formats (the rounding is element by element). Single-threaded: called inside the
 * tasks' parallel region. */
static void att_store_row(const att_call *ac, void *dst, const float *src, int lim, int n) {
    llm4d_cpu_convert_block(ac->fmt, dst, src, (size_t)lim);
    memset((char *)dst + (size_t)lim * ac->esz, 0, (size_t)(n - lim) * ac->esz);
}

/* Row r of a block's operand from the fp32 row src, whose first lim entries are valid: in row order at blk (n
 * elements a row, in the operand precision), or on the AMX path as row r of the block's A tiles, src's tail zeroed
 * in place (backward packs the fp32 block transposed afterwards; blk NULL: that alone). */
static void att_put_row(const att_call *ac, void *blk, int r, float *src, int lim, int n) {
    if (lim < 0) lim = 0;
    if (!ac->amx) {
        att_store_row(ac, (char *)blk + (size_t)r * n * ac->esz, src, lim, n);
        return;
    }
    memset(src + lim, 0, (size_t)(n - lim) * sizeof(float));
    if (blk) llm4d_amx_pack_a_row_piece(blk, n, r, src, 0, n);
}

/* S = Q K^T for rows [r0, r0 + m) of query head (b, h) and keys [c0, c0 + n) of its kv head g: scaled on oneDNN's
 * path (the primitive's alpha), unscaled on the AMX path (the softmax scales it). */
static void att_scores(cpu_ctx *cx, const att_call *ac, int b, int h, int g, int i, int j, int r0, int c0, int m,
                       int n, float *S) {
    if (ac->amx) {
        const int64_t rs = ac->kt_hs * 512;
        llm4d_amx_gemm_block(S, n, att_head(ac, ac->qa, b, h) + (size_t)(r0 / 16) * rs, rs,
                             att_kvhead(ac, ac->kbt, b, g) + (size_t)(c0 / 16) * rs, rs, m, n, (int)ac->kt_hs, 0);
        return;
    }
    llm4d_dnnl_run_mt(cx->dnnl, att_prim(ac, i, j)[P_S], att_row(ac, ac->qkv, 0, b, h, r0),
                      att_row(ac, ac->qkv, 1, b, g, c0), NULL, S);
}

/* C [M, HS] (row stride HS) += A B on the AMX path: A the block's tiles (K = k elements), B rows [k0, k0 + k) of a
 * head's B tiles of a [T, HS] operand. */
static void att_acc_hs(const att_call *ac, float *C, const uint16_t *A, const uint16_t *Bhead, int k0, int M, int k) {
    const int kt = (k + LLM4D_AMX_KB - 1) / LLM4D_AMX_KB;
    llm4d_amx_gemm_block(C, ac->HS, A, (int64_t)kt * 512, Bhead + (size_t)(k0 / LLM4D_AMX_KB) * 512, ac->kt_t * 512, M,
                         ac->HS, kt, 1);
}

/* One forward task: rows [r0, r1) of query head h of batch row b. */
static void att_forward_task(cpu_ctx *cx, const att_call *ac, float *work, int b, int h, int i, llm4d_tensor out,
                             float *lse) {
    const int T = ac->T, HS = ac->HS, C = ac->C, g = h / ac->grp;
    const int r0 = i * ATT_TB, r1 = r0 + ATT_TB < T ? r0 + ATT_TB : T, m = r1 - r0;
    float *S = work, *Pop = S + 2 * ATT_TB * ATT_KB, *O = S + 4 * ATT_TB * ATT_KB, *rmax = O + ATT_TB * HS;
    float *rsum = rmax + ATT_TB;
    memset(O, 0, (size_t)m * HS * sizeof(float));
    for (int r = 0; r < m; r++) rmax[r] = -INFINITY, rsum[r] = 0.0f;
    /* fp32 without dropout multiplies the exponentials in place; otherwise P~ goes to the operand block */
    const int in_place = ac->fmt == LLM4D_CPU_FP32 && !ac->drop;
    void *pa = in_place ? (void *)S : (void *)Pop;
    for (int j = 0; j * ATT_KB < r1; j++) {
        const int c0 = j * ATT_KB, c1 = c0 + ATT_KB < r1 ? c0 + ATT_KB : r1, n = c1 - c0;
        att_scores(cx, ac, b, h, g, i, j, r0, c0, m, n, S);
        for (int r = 0; r < m; r++) {
            const int t1 = r0 + r, lim = (t1 < c1 - 1 ? t1 : c1 - 1) - c0 + 1; /* keys t2 <= t1 of the block */
            float *srow = S + (size_t)r * n;
            if (lim <= 0) { /* a row of the diagonal block that sees none of these keys */
                att_put_row(ac, pa, r, srow, 0, n);
                continue;
            }
            float mx = rmax[r];
#pragma omp simd reduction(max : mx)
            for (int t = 0; t < lim; t++) {
                srow[t] *= ac->sscale;
                mx = srow[t] > mx ? srow[t] : mx;
            }
            /* the first block always holds key 0, so rmax is finite from then on */
            const float f = rmax[r] == -INFINITY ? 0.0f : vexp(rmax[r] - mx);
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int t = 0; t < lim; t++) {
                srow[t] = vexp(srow[t] - mx);
                sum += srow[t];
            }
            rsum[r] = rsum[r] * f + sum;
            rmax[r] = mx;
            if (f != 1.0f) {
                float *o = O + (size_t)r * HS;
#pragma omp simd
                for (int c = 0; c < HS; c++) o[c] *= f;
            }
            if (ac->drop) {
                float mult[DROP_CHUNK];
                drop_mults(ac->drop, att_row_pos(ac->s, ac->drop, b, h, t1) + (uint64_t)c0, lim, mult);
#pragma omp simd
                for (int t = 0; t < lim; t++) srow[t] *= mult[t];
                if (ac->drop->bits) drop_bits_store(att_bits(ac->s, ac->drop, b, h, t1, c0), mult, lim);
            }
            att_put_row(ac, pa, r, srow, lim, n);
        }
        if (ac->amx)
            att_acc_hs(ac, O, pa, att_kvhead(ac, ac->vb, b, g), c0, m, n);
        else
            llm4d_dnnl_run_mt(cx->dnnl, att_prim(ac, i, j)[P_PV], pa, att_row(ac, ac->qkv, 2, b, g, c0), NULL, O);
    }
    for (int r = 0; r < m; r++) {
        const float inv = 1.0f / rsum[r], *o = O + (size_t)r * HS;
        const size_t at = ((size_t)b * T + r0 + r) * C + (size_t)h * HS;
        float *y = cpu_out(out, at, S); /* the score block is done with: a row of it holds a 16-bit row's values */
#pragma omp simd
        for (int c = 0; c < HS; c++) y[c] = o[c] * inv;
        cpu_done(out, at, y, (size_t)HS);
        lse[((size_t)b * ac->s->NH + h) * T + r0 + r] = rmax[r] + logf(rsum[r]);
    }
}

/* Threads take whole (head, row block) tasks and run their GEMMs single-threaded (llm4d_dnnl_run_mt): attention
 * is many small independent GEMMs, better run side by side than each split over the threads, and the softmax of
 * a block happens while the block is in cache. */
void llm4d_cpu_attention_forward(llm4d_backend *be, llm4d_tensor out, float *lse, llm4d_ctensor qkv,
                                 llm4d_attn_shape s, const llm4d_dropout *drop) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ATTN);
    cpu_ctx *cx = ctx_of(be);
    const att_call ac = att_begin(cx, &s, drop, qkv, (llm4d_ctensor){NULL, LLM4D_F32});
    const long nbh = (long)s.B * s.NH, ntasks = (long)ac.nblk * nbh;
    const size_t per = att_thread_floats(ac.T, ac.HS);
#pragma omp parallel
    {
        float *work = cx->work + (size_t)omp_get_thread_num() * per;
        if (ac.amx) llm4d_amx_tiles_on();
        /* largest row blocks first, so the dynamic schedule ends with the small ones */
#pragma omp for schedule(dynamic, 1)
        for (long task = 0; task < ntasks; task++) {
            const int i = ac.nblk - 1 - (int)(task / nbh), bh = (int)(task % nbh);
            att_forward_task(cx, &ac, work, bh / s.NH, bh % s.NH, i, out, lse);
        }
        if (ac.amx) llm4d_amx_tiles_off();
    }
}

/* Rows [0, T) of a head's [T, HS] fp32 panel P into dqkv from element at0 on, rows C3 apart. */
static void att_store_panel(const att_call *ac, llm4d_tensor dqkv, size_t at0, const float *P) {
    const int T = ac->T, HS = ac->HS;
    if (dqkv.t != LLM4D_F32) {
        for (int t = 0; t < T; t++) llm4d_cpu_store(dqkv, at0 + (size_t)t * ac->C3, P + (size_t)t * HS, (size_t)HS);
        return;
    }
    for (int t = 0; t < T; t++) {
        float *row = (float *)dqkv.p + at0 + (size_t)t * ac->C3;
        const float *q = P + (size_t)t * HS;
#pragma omp simd
        for (int c = 0; c < HS; c++) row[c] = q[c];
    }
}

/* Query head h of batch row b, reading kv head g: its blocks in order, dQ into the thread's dQ panel (stored into
 * dqkv at the end), dK and dV added into the thread's panels of kv head g. */
static void att_backward_head(cpu_ctx *cx, const att_call *ac, float *work, int b, int h, int g, llm4d_tensor dqkv,
                              llm4d_ctensor dout, llm4d_ctensor out, const float *lse) {
    const int T = ac->T, HS = ac->HS, C = ac->C;
    float *S = work, *dP = S + ATT_TB * ATT_KB, *Pop = dP + ATT_TB * ATT_KB, *dSop = Pop + ATT_TB * ATT_KB;
    float *D = S + 4 * ATT_TB * ATT_KB + ATT_TB * HS + 2 * ATT_TB;
    float *dQ = D + (((size_t)T + 15) & ~(size_t)15), *dK = dQ + (size_t)T * HS, *dV = dK + (size_t)T * HS;
    const size_t y0 = (size_t)b * T * C + (size_t)h * HS;
    const float *lrow = lse + ((size_t)b * ac->s->NH + h) * T;
    memset(dQ, 0, (size_t)T * HS * sizeof(float));
    /* D_t = sum_t2 P~ dP~ = dout_t . out_t: the softmax backward's row term, from the kept output (16-bit rows
     * widened into the score blocks, free until the first block's GEMM) */
    for (int t = 0; t < T; t++) {
        const float *dy = cpu_in(dout, y0 + (size_t)t * C, (size_t)HS, S);
        const float *y = cpu_in(out, y0 + (size_t)t * C, (size_t)HS, S + HS);
        float d = 0.0f;
#pragma omp simd reduction(+ : d)
        for (int c = 0; c < HS; c++) d += dy[c] * y[c];
        D[t] = d;
    }
    const int in_place = ac->fmt == LLM4D_CPU_FP32;            /* dS overwrites dP */
    const int p_in_place = in_place && !ac->drop;              /* P~ is P, in S */
    void *pa = p_in_place ? (void *)S : (void *)Pop, *da = in_place ? (void *)dP : (void *)dSop;
    for (int i = 0; i < ac->nblk; i++) {
        const int r0 = i * ATT_TB, r1 = r0 + ATT_TB < T ? r0 + ATT_TB : T, m = r1 - r0;
        for (int j = 0; j * ATT_KB < r1; j++) {
            const int c0 = j * ATT_KB, c1 = c0 + ATT_KB < r1 ? c0 + ATT_KB : r1, n = c1 - c0;
            llm4d_dnnl_prim **p = ac->amx ? NULL : att_prim(ac, i, j);
            const void *qi = NULL, *kj = NULL, *vj = NULL, *dyi = NULL;
            att_scores(cx, ac, b, h, g, i, j, r0, c0, m, n, S);
            if (ac->amx) {
                const int64_t rs = ac->kt_hs * 512;
                llm4d_amx_gemm_block(dP, n, att_head(ac, ac->dya, b, h) + (size_t)(r0 / 16) * rs, rs,
                                     att_kvhead(ac, ac->vbt, b, g) + (size_t)(c0 / 16) * rs, rs, m, n, (int)ac->kt_hs,
                                     0);
            } else {
                qi = att_row(ac, ac->qkv, 0, b, h, r0), kj = att_row(ac, ac->qkv, 1, b, g, c0);
                vj = att_row(ac, ac->qkv, 2, b, g, c0), dyi = att_row(ac, ac->dout, 0, b, h, r0);
                llm4d_dnnl_run_mt(cx->dnnl, p[P_DP], dyi, vj, NULL, dP);
            }
            for (int r = 0; r < m; r++) {
                const int t1 = r0 + r, lim = (t1 < c1 - 1 ? t1 : c1 - 1) - c0 + 1;
                float *srow = S + (size_t)r * n, *grow = dP + (size_t)r * n;
                if (lim <= 0) {
                    att_put_row(ac, pa, r, srow, 0, n);
                    att_put_row(ac, da, r, grow, 0, n);
                    continue;
                }
                const float l = lrow[t1], Dt = D[t1];
#pragma omp simd
                for (int t = 0; t < lim; t++) srow[t] = vexp(ac->sscale * srow[t] - l); /* P */
                float pt[ATT_KB]; /* P~ = mult P, when dropping */
                if (ac->drop) {
                    /* dP = mult dP~ in place */
                    float mult[DROP_CHUNK];
                    if (ac->drop->bits)
                        drop_bits_mults(att_bits(ac->s, ac->drop, b, h, t1, c0), lim, ac->keep, mult);
                    else
                        drop_mults(ac->drop, att_row_pos(ac->s, ac->drop, b, h, t1) + (uint64_t)c0, lim, mult);
#pragma omp simd
                    for (int t = 0; t < lim; t++) {
                        pt[t] = srow[t] * mult[t];
                        grow[t] *= mult[t];
                    }
                }
                /* dS = scale P (dP - D) */
#pragma omp simd
                for (int t = 0; t < lim; t++) grow[t] = ac->scale * srow[t] * (grow[t] - Dt);
                if (ac->amx) { /* the fp32 block becomes P~ and dS, packed after the loop */
                    if (ac->drop) memcpy(srow, pt, (size_t)lim * sizeof(float));
                    att_put_row(ac, NULL, r, srow, lim, n);
                    att_put_row(ac, da, r, grow, lim, n);
                } else {
                    att_put_row(ac, pa, r, ac->drop ? pt : srow, lim, n);
                    att_put_row(ac, da, r, grow, lim, n);
                }
            }
            if (ac->amx) {
                /* P~^T and dS^T as A tiles (the dS rows went into theirs in the loop) */
                const int km = (m + LLM4D_AMX_KB - 1) / LLM4D_AMX_KB;
                uint16_t *pta = pa, *dsta = (uint16_t *)da + llm4d_amx_a_elems(m, n);
                llm4d_amx_pack_a_t_block(pta, llm4d_ct32(S), n, n, m, 0, km, 0, INT64_MAX);
                llm4d_amx_pack_a_t_block(dsta, llm4d_ct32(dP), n, n, m, 0, km, 0, INT64_MAX);
                att_acc_hs(ac, dV + (size_t)c0 * HS, pta, att_head(ac, ac->dyb, b, h), r0, n, m);
                att_acc_hs(ac, dQ + (size_t)r0 * HS, da, att_kvhead(ac, ac->kb, b, g), c0, m, n);
                att_acc_hs(ac, dK + (size_t)c0 * HS, dsta, att_head(ac, ac->qb, b, h), r0, n, m);
                continue;
            }
            llm4d_dnnl_run_mt(cx->dnnl, p[P_DV], pa, dyi, NULL, dV + (size_t)c0 * HS);
            llm4d_dnnl_run_mt(cx->dnnl, p[P_DQ], da, kj, NULL, dQ + (size_t)r0 * HS);
            llm4d_dnnl_run_mt(cx->dnnl, p[P_DK], da, qi, NULL, dK + (size_t)c0 * HS);
        }
    }
    att_store_panel(ac, dqkv, (size_t)b * T * ac->C3 + (size_t)h * HS, dQ);
}

/* One backward task: kv head g of batch row b and the query heads of its group, in order on one thread (dK and dV
 * of a key block receive a contribution from every row block at or below it, of every query head of the group:
 * they accumulate in the thread's dense panels, written into dqkv at the end, so the sums' order is fixed and
 * different tasks write disjoint columns of dqkv). Multi-head attention: one query head a task. */
static void att_backward_task(cpu_ctx *cx, const att_call *ac, float *work, int b, int g, llm4d_tensor dqkv,
                              llm4d_ctensor dout, llm4d_ctensor out, const float *lse) {
    const int T = ac->T, HS = ac->HS;
    float *D = work + 4 * ATT_TB * ATT_KB + ATT_TB * HS + 2 * ATT_TB;
    float *dK = D + (((size_t)T + 15) & ~(size_t)15) + (size_t)T * HS, *dV = dK + (size_t)T * HS;
    memset(dK, 0, 2 * (size_t)T * HS * sizeof(float));
    for (int h = g * ac->grp; h < (g + 1) * ac->grp; h++)
        att_backward_head(cx, ac, work, b, h, g, dqkv, dout, out, lse);
    const size_t k0 = (size_t)b * T * ac->C3 + (size_t)ac->C + (size_t)g * HS;
    att_store_panel(ac, dqkv, k0, dK);
    att_store_panel(ac, dqkv, k0 + (size_t)ac->Ckv, dV);
}

void llm4d_cpu_attention_backward(llm4d_backend *be, llm4d_tensor dqkv, llm4d_ctensor dout, llm4d_ctensor out,
                                  llm4d_ctensor qkv, const float *lse, llm4d_attn_shape s, const llm4d_dropout *drop) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ATTN);
    cpu_ctx *cx = ctx_of(be);
    const att_call ac = att_begin(cx, &s, drop, qkv, dout);
    const size_t per = att_thread_floats(ac.T, ac.HS);
#pragma omp parallel
    {
        float *work = cx->work + (size_t)omp_get_thread_num() * per;
        if (ac.amx) llm4d_amx_tiles_on();
#pragma omp for schedule(dynamic, 1)
        for (long bg = 0; bg < (long)s.B * ac.NKV; bg++)
            att_backward_task(cx, &ac, work, (int)(bg / ac.NKV), (int)(bg % ac.NKV), dqkv, dout, out, lse);
        if (ac.amx) llm4d_amx_tiles_off();
    }
}

size_t llm4d_cpu_attention_workspace(const cpu_ctx *cx) {
    return cx->work_cap * sizeof(float) + cx->prims_cap * sizeof *cx->prims;
}

void llm4d_cpu_attention_free(cpu_ctx *cx) {
    free(cx->work);
    free(cx->prims);
    cx->work = NULL;
    cx->prims = NULL;
    cx->work_cap = cx->prims_cap = 0;
}
