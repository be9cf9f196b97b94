/* cpu_dnnl.c — oneDNN matmul primitive cache (see cpu_dnnl.h for why it exists).
 *
 * Each cache entry holds the primitive and, per thread slot, one memory object per argument; running an entry
 * only swaps the data handles (a pointer store on the CPU engine) and executes on the slot's stream with the
 * slot's scratchpad. Lookup is a linear scan over the entries with
 * the most recent hit tried first: a GPT step issues a few dozen distinct GEMMs, each many times, and the scan
 * costs nanoseconds against GEMMs of milliseconds. */
#include "backend/cpu_dnnl.h"

#include <dnnl.h>
#include <dnnl_debug.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The normalized key: all fields of llm4d_dnnl_mm with unused batch strides zeroed and no padding garbage, so
 * memcmp is a valid equality. */
typedef struct {
    int64_t v[20];
    uint32_t alpha_bits;
    int32_t accumulate, has_bias, ab_type, c_type;
} mm_key;

enum { ARG_A, ARG_B, ARG_C, ARG_BIAS, ARG_SCRATCH, NARGS };
static const int arg_ids[NARGS] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS, DNNL_ARG_SCRATCHPAD};

/* Execution resources are per thread slot: slot 0 serves calls from outside parallel regions (which run on
 * thread 0 anyway), slots 0..n-1 serve llm4d_dnnl_run_mt from the threads of a parallel region. */
typedef struct {
    mm_key key;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t md[NARGS];
    int used[NARGS];
    size_t scratch_bytes;
    const char *impl;
    int nslots;
    int mt;                      /* prepared for llm4d_dnnl_run_mt */
    dnnl_memory_t (*mem)[NARGS]; /* [nslots][NARGS] */
} mm_entry;

struct llm4d_dnnl {
    dnnl_engine_t engine;
    int nthreads;           /* thread slots with a stream and a scratchpad */
    dnnl_stream_t *streams; /* [nthreads] */
    void **scratch;         /* [nthreads], each scratch_cap bytes */
    size_t scratch_cap;
    mm_entry **entries;
    int n, cap, last;
};

static mm_key make_key(const llm4d_dnnl_mm *mm) {
    mm_key k;
    memset(&k, 0, sizeof k);
    int i = 0;
    k.v[i++] = mm->batch[0];
    k.v[i++] = mm->batch[1];
    k.v[i++] = mm->M;
    k.v[i++] = mm->N;
    k.v[i++] = mm->K;
    k.v[i++] = mm->batch[0] > 1 ? mm->a_bs[0] : 0;
    k.v[i++] = mm->batch[1] > 1 ? mm->a_bs[1] : 0;
    k.v[i++] = mm->a_rs;
    k.v[i++] = mm->a_cs;
    k.v[i++] = mm->batch[0] > 1 ? mm->b_bs[0] : 0;
    k.v[i++] = mm->batch[1] > 1 ? mm->b_bs[1] : 0;
    k.v[i++] = mm->b_rs;
    k.v[i++] = mm->b_cs;
    k.v[i++] = mm->batch[0] > 1 ? mm->c_bs[0] : 0;
    k.v[i++] = mm->batch[1] > 1 ? mm->c_bs[1] : 0;
    k.v[i++] = mm->c_rs;
    k.v[i++] = mm->c_cs;
    memcpy(&k.alpha_bits, &mm->alpha, sizeof k.alpha_bits);
    k.accumulate = mm->accumulate != 0;
    k.has_bias = mm->has_bias != 0;
    k.ab_type = (int32_t)mm->ab_type;
    k.c_type = (int32_t)mm->c_type;
    return k;
}

llm4d_dnnl_mm llm4d_dnnl_mm_2d(int64_t M, int64_t N, int64_t K, int ta, int64_t lda, int tb, int64_t ldb,
                               int64_t ldc, int accumulate) {
    llm4d_dnnl_mm mm;
    memset(&mm, 0, sizeof mm);
    mm.batch[0] = mm.batch[1] = 1;
    mm.M = M;
    mm.N = N;
    mm.K = K;
    mm.a_rs = ta ? 1 : lda;
    mm.a_cs = ta ? lda : 1;
    mm.b_rs = tb ? 1 : ldb;
    mm.b_cs = tb ? ldb : 1;
    mm.c_rs = ldc;
    mm.c_cs = 1;
    mm.alpha = 1.0f;
    mm.accumulate = accumulate;
    return mm;
}

#define DNNL_CHECK(call, what)                                                                                   \
    do {                                                                                                         \
        dnnl_status_t st_ = (call);                                                                              \
        if (st_ != dnnl_success) {                                                                               \
            rc = llm4d_fail(err, LLM4D_EINTERNAL, "oneDNN %s failed: %s (check the oneDNN installation)", what,  \
                            dnnl_status2str(st_));                                                               \
            goto done;                                                                                           \
        }                                                                                                        \
    } while (0)

static llm4d_code ensure_threads(llm4d_dnnl *d, int n, llm4d_err *err);

llm4d_code llm4d_dnnl_create(llm4d_dnnl **out, llm4d_err *err) {
    llm4d_code rc = LLM4D_OK;
    *out = NULL;
    llm4d_dnnl *d = calloc(1, sizeof *d);
    if (!d) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory creating the oneDNN context");
    DNNL_CHECK(dnnl_engine_create(&d->engine, dnnl_cpu, 0), "engine creation");
    rc = ensure_threads(d, 1, err);
    if (rc != LLM4D_OK) goto done;
    *out = d;
    return LLM4D_OK;
done:
    llm4d_dnnl_destroy(d);
    return rc;
}

static void entry_free(mm_entry *e) {
    if (!e) return;
    if (e->prim) dnnl_primitive_destroy(e->prim);
    for (int t = 0; t < e->nslots; t++)
        for (int i = 0; i < NARGS; i++)
            if (e->mem[t][i]) dnnl_memory_destroy(e->mem[t][i]);
    free(e->mem);
    free(e);
}

void llm4d_dnnl_destroy(llm4d_dnnl *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) entry_free(d->entries[i]);
    free(d->entries);
    for (int t = 0; t < d->nthreads; t++) {
        if (d->streams[t]) dnnl_stream_destroy(d->streams[t]);
        free(d->scratch[t]);
    }
    free(d->streams);
    free(d->scratch);
    if (d->engine) dnnl_engine_destroy(d->engine);
    free(d);
}

/* Give every thread slot a scratchpad of at least `bytes` (existing contents are not kept). */
static llm4d_code grow_scratch(llm4d_dnnl *d, size_t bytes, llm4d_err *err) {
    if (bytes <= d->scratch_cap) return LLM4D_OK;
    size_t cap = (bytes + 4095) & ~(size_t)4095;
    for (int t = 0; t < d->nthreads; t++) {
        free(d->scratch[t]);
        d->scratch[t] = aligned_alloc(64, cap);
        if (!d->scratch[t]) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory for oneDNN scratchpads (%zu bytes)", cap);
    }
    d->scratch_cap = cap;
    return LLM4D_OK;
}

/* Streams and scratchpads for n thread slots. */
static llm4d_code ensure_threads(llm4d_dnnl *d, int n, llm4d_err *err) {
    llm4d_code rc = LLM4D_OK;
    if (n <= d->nthreads) return LLM4D_OK;
    dnnl_stream_t *st = realloc(d->streams, (size_t)n * sizeof *st);
    if (st) d->streams = st;
    void **sc = realloc(d->scratch, (size_t)n * sizeof *sc);
    if (sc) d->scratch = sc;
    if (!st || !sc) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory for oneDNN thread resources");
    for (int t = d->nthreads; t < n; t++) {
        d->streams[t] = NULL;
        d->scratch[t] = d->scratch_cap ? aligned_alloc(64, d->scratch_cap) : NULL;
        d->nthreads = t + 1; /* so destroy frees what exists */
        if (d->scratch_cap && !d->scratch[t])
            return llm4d_fail(err, LLM4D_ENOMEM, "out of memory for oneDNN scratchpads");
        DNNL_CHECK(dnnl_stream_create(&d->streams[t], d->engine, dnnl_stream_default_flags), "stream creation");
    }
done:
    return rc;
}

/* Memory objects for thread slots 0..n-1 of an entry. */
static llm4d_code ensure_slots(llm4d_dnnl *d, mm_entry *e, int n, llm4d_err *err) {
    llm4d_code rc = LLM4D_OK;
    if (n <= e->nslots) return LLM4D_OK;
    dnnl_memory_t(*mem)[NARGS] = realloc(e->mem, (size_t)n * sizeof *mem);
    if (!mem) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory for oneDNN memory objects");
    e->mem = mem;
    for (int t = e->nslots; t < n; t++) {
        for (int i = 0; i < NARGS; i++) e->mem[t][i] = NULL;
        e->nslots = t + 1;
        for (int i = 0; i < NARGS; i++)
            if (e->used[i])
                DNNL_CHECK(dnnl_memory_create(&e->mem[t][i], &e->md[i], d->engine, DNNL_MEMORY_NONE), "memory");
    }
done:
    return rc;
}

int llm4d_dnnl_cache_size(const llm4d_dnnl *d) { return d->n; }

void llm4d_dnnl_impls(const llm4d_dnnl *d, int mt, char *buf, size_t n) {
    if (n == 0) return;
    buf[0] = 0;
    size_t len = 0;
    for (int i = 0; i < d->n; i++) {
        const mm_entry *e = d->entries[i];
        if (e->mt != mt) continue;
        int seen = 0, count = 0; /* each name once, with its count */
        for (int j = 0; j < d->n; j++) {
            const int same = d->entries[j]->mt == mt && strcmp(d->entries[j]->impl, e->impl) == 0;
            if (j < i) seen |= same;
            else count += same;
        }
        if (seen) continue;
        int w = snprintf(buf + len, n - len, "%s%s x%d", len ? ", " : "", e->impl, count);
        if (w < 0 || (size_t)w >= n - len) break;
        len += (size_t)w;
    }
}

size_t llm4d_dnnl_scratch_bytes(const llm4d_dnnl *d) { return d->scratch_cap; }

/* A [batch..., rows, cols] descriptor with only the batch dims larger than 1 (oneDNN picks its fast kernels
 * for plain layouts; size-1 dims with arbitrary strides can make a descriptor look non-plain). */
static dnnl_status_t md_init(dnnl_memory_desc_t *md, const llm4d_dnnl_mm *mm, int64_t rows, int64_t cols,
                             const int64_t bs[2], int64_t rs, int64_t cs, dnnl_data_type_t dt) {
    dnnl_dims_t dims, strides;
    int nd = 0;
    for (int i = 0; i < 2; i++)
        if (mm->batch[i] > 1) {
            dims[nd] = mm->batch[i];
            strides[nd] = bs[i];
            nd++;
        }
    dims[nd] = rows;
    strides[nd] = rs;
    dims[nd + 1] = cols;
    strides[nd + 1] = cs;
    return dnnl_memory_desc_init_by_strides(md, nd + 2, dims, dt, strides);
}

static int batch_ndims(const llm4d_dnnl_mm *mm) { return (mm->batch[0] > 1) + (mm->batch[1] > 1); }

/* oneDNN lists the implementations that can run a matmul best first, by its own heuristics. One heuristic is wrong
 * here: in fp32 with a row-major B (the input-gradient and weight-gradient GEMMs: B is W or the layer's input), its
 * first choice, brgemm, is erratic in N while its gemm:jit (the MKL-style sgemm) is steady. Measured on Sapphire
 * Rapids, 2 threads, GPT-2 124M shapes with 8192 tokens: brgemm 178 / 148 GFLOP/s for the MLP projection's two
 * backward GEMMs (N = 3072; N = 5120 is as bad, 2048 and 4096 are not) against gemm:jit's 382 / 375, and over all
 * fp32 row-major-B GEMMs of a layer 890 ms (brgemm) against 620 ms (gemm:jit); at 256 tokens gemm:jit is as fast or
 * faster but for two shapes (-1 %, -5 %). The choice is by rule, not by timing, so that a run's kernels, hence its
 * bits, do not depend on how busy the machine was when it started. The single-threaded attention blocks (mt) keep
 * brgemm, which is faster at their size. */
static int prefer_gemm_jit(const llm4d_dnnl_mm *mm, int mt) {
    return !mt && mm->ab_type == LLM4D_DNNL_F32 && mm->b_cs == 1 && mm->b_rs != 1 && batch_ndims(mm) == 0;
}

/* The primitive descriptor for desc: oneDNN's first choice, or its gemm:jit where prefer_gemm_jit says so (and it
 * is offered). */
static dnnl_status_t choose_pd(dnnl_primitive_desc_t *pd, const dnnl_matmul_desc_t *desc,
                               const_dnnl_primitive_attr_t attr, dnnl_engine_t engine, int want_jit) {
    *pd = NULL;
    if (!want_jit) return dnnl_primitive_desc_create(pd, desc, attr, engine, NULL);
    dnnl_primitive_desc_iterator_t it = NULL;
    dnnl_status_t st = dnnl_primitive_desc_iterator_create(&it, desc, attr, engine, NULL);
    if (st != dnnl_success) return st;
    dnnl_primitive_desc_t first = NULL;
    do {
        dnnl_primitive_desc_t c = dnnl_primitive_desc_iterator_fetch(it);
        if (!c) continue;
        const char *name = NULL;
        if (dnnl_primitive_desc_query(c, dnnl_query_impl_info_str, 0, &name) == dnnl_success && name &&
            strncmp(name, "gemm:", 5) == 0) {
            *pd = c;
            break;
        }
        if (!first) first = c;
        else dnnl_primitive_desc_destroy(c);
    } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
    dnnl_primitive_desc_iterator_destroy(it);
    if (*pd) {
        if (first) dnnl_primitive_desc_destroy(first);
        return dnnl_success;
    }
    *pd = first;
    return first ? dnnl_success : dnnl_unimplemented;
}

static llm4d_code entry_create(llm4d_dnnl *d, const llm4d_dnnl_mm *mm, int mt, mm_entry **out, llm4d_err *err) {
    llm4d_code rc = LLM4D_OK;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_desc_t pd = NULL;
    mm_entry *e = calloc(1, sizeof *e);
    if (!e) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory creating a oneDNN matmul");
    e->key = make_key(mm);

    dnnl_data_type_t abt = mm->ab_type == LLM4D_DNNL_BF16 ? dnnl_bf16 : dnnl_f32;
    DNNL_CHECK(md_init(&e->md[ARG_A], mm, mm->M, mm->K, mm->a_bs, mm->a_rs, mm->a_cs, abt), "memory desc (A)");
    DNNL_CHECK(md_init(&e->md[ARG_B], mm, mm->K, mm->N, mm->b_bs, mm->b_rs, mm->b_cs, abt), "memory desc (B)");
    const dnnl_data_type_t ct = mm->c_type == LLM4D_DNNL_BF16 ? dnnl_bf16 : dnnl_f32;
    DNNL_CHECK(md_init(&e->md[ARG_C], mm, mm->M, mm->N, mm->c_bs, mm->c_rs, mm->c_cs, ct), "memory desc (C)");
    e->used[ARG_A] = e->used[ARG_B] = e->used[ARG_C] = 1;
    if (mm->has_bias) {
        dnnl_dims_t dims, strides;
        int nd = batch_ndims(mm) + 2;
        for (int i = 0; i < nd; i++) dims[i] = 1, strides[i] = mm->N;
        dims[nd - 1] = mm->N;
        strides[nd - 1] = 1;
        DNNL_CHECK(dnnl_memory_desc_init_by_strides(&e->md[ARG_BIAS], nd, dims, dnnl_f32, strides),
                   "memory desc (bias)");
        e->used[ARG_BIAS] = 1;
    }
    dnnl_matmul_desc_t desc;
    DNNL_CHECK(dnnl_matmul_desc_init(&desc, &e->md[ARG_A], &e->md[ARG_B], mm->has_bias ? &e->md[ARG_BIAS] : NULL,
                                     &e->md[ARG_C]),
               "matmul desc");

    DNNL_CHECK(dnnl_primitive_attr_create(&attr), "attr creation");
    DNNL_CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "scratchpad mode");
    if (mm->alpha != 1.0f) DNNL_CHECK(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &mm->alpha), "scales");
    if (mm->accumulate) {
        DNNL_CHECK(dnnl_post_ops_create(&ops), "post-ops creation");
        DNNL_CHECK(dnnl_post_ops_append_sum(ops, 1.0f), "sum post-op");
        DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, ops), "post-ops");
    }
    DNNL_CHECK(choose_pd(&pd, &desc, attr, d->engine, prefer_gemm_jit(mm, mt)), "matmul primitive desc");
    e->md[ARG_SCRATCH] = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    e->scratch_bytes = dnnl_memory_desc_get_size(&e->md[ARG_SCRATCH]);
    e->used[ARG_SCRATCH] = e->scratch_bytes > 0;
    DNNL_CHECK(dnnl_primitive_create(&e->prim, pd), "matmul primitive");
    /* The impl string belongs to a primitive desc: take it from the one the primitive keeps. */
    const_dnnl_primitive_desc_t ppd = NULL;
    DNNL_CHECK(dnnl_primitive_get_primitive_desc(e->prim, &ppd), "primitive desc query");
    DNNL_CHECK(dnnl_primitive_desc_query(ppd, dnnl_query_impl_info_str, 0, &e->impl), "impl query");
    rc = grow_scratch(d, e->scratch_bytes, err);
    if (rc == LLM4D_OK) rc = ensure_slots(d, e, 1, err);
done:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (ops) dnnl_post_ops_destroy(ops);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (rc != LLM4D_OK) {
        entry_free(e);
        e = NULL;
    }
    *out = e;
    return rc;
}

static mm_entry *lookup(llm4d_dnnl *d, const mm_key *k) {
    if (d->last < d->n && memcmp(&d->entries[d->last]->key, k, sizeof *k) == 0) return d->entries[d->last];
    for (int i = 0; i < d->n; i++)
        if (memcmp(&d->entries[i]->key, k, sizeof *k) == 0) {
            d->last = i;
            return d->entries[i];
        }
    return NULL;
}

/* mt: for llm4d_dnnl_run_mt (decides the implementation of a new entry; an existing one is reused either way). */
static llm4d_code get_entry(llm4d_dnnl *d, const llm4d_dnnl_mm *mm, int mt, mm_entry **out, llm4d_err *err) {
    mm_key k = make_key(mm);
    mm_entry *e = lookup(d, &k);
    if (!e) {
        LLM4D_TRY(entry_create(d, mm, mt, &e, err));
        if (d->n == d->cap) {
            int cap = d->cap ? 2 * d->cap : 32;
            mm_entry **p = realloc(d->entries, (size_t)cap * sizeof *p);
            if (!p) {
                entry_free(e);
                return llm4d_fail(err, LLM4D_ENOMEM, "out of memory growing the oneDNN matmul cache");
            }
            d->entries = p;
            d->cap = cap;
        }
        d->last = d->n;
        d->entries[d->n++] = e;
    }
    *out = e;
    return LLM4D_OK;
}

llm4d_code llm4d_dnnl_prepare(llm4d_dnnl *d, const llm4d_dnnl_mm *mm, const char **impl, llm4d_err *err) {
    mm_entry *e;
    LLM4D_TRY(get_entry(d, mm, 0, &e, err));
    if (impl) *impl = e->impl;
    return LLM4D_OK;
}

static void run(llm4d_dnnl *d, mm_entry *e, int slot, const void *a, const void *b, const float *bias, void *c) {
    void *ptrs[NARGS] = {(void *)a, (void *)b, c, (void *)bias, d->scratch[slot]};
    LLM4D_ASSERT(!e->used[ARG_BIAS] || bias != NULL, "matmul created with a bias called without one (M=%lld)",
                 (long long)e->key.v[2]);
    dnnl_exec_arg_t args[NARGS];
    int na = 0;
    for (int i = 0; i < NARGS; i++)
        if (e->used[i]) {
            dnnl_memory_set_data_handle(e->mem[slot][i], ptrs[i]);
            args[na++] = (dnnl_exec_arg_t){arg_ids[i], e->mem[slot][i]};
        }
    dnnl_status_t st = dnnl_primitive_execute(e->prim, d->streams[slot], na, args);
    if (st == dnnl_success) st = dnnl_stream_wait(d->streams[slot]);
    LLM4D_ASSERT(st == dnnl_success, "oneDNN matmul execution failed: %s", dnnl_status2str(st));
}

static mm_entry *get_or_abort(llm4d_dnnl *d, const llm4d_dnnl_mm *mm, int mt) {
    mm_entry *e;
    llm4d_err err = {0};
    llm4d_code rc = get_entry(d, mm, mt, &e, &err);
    LLM4D_ASSERT(rc == LLM4D_OK, "matmul M=%lld N=%lld K=%lld batch=%lldx%lld: %s", (long long)mm->M,
                 (long long)mm->N, (long long)mm->K, (long long)mm->batch[0], (long long)mm->batch[1], err.msg);
    return e;
}

void llm4d_dnnl_matmul(llm4d_dnnl *d, const llm4d_dnnl_mm *mm, const void *a, const void *b, const float *bias,
                       void *c) {
    run(d, get_or_abort(d, mm, 0), 0, a, b, bias, c);
}

llm4d_dnnl_prim *llm4d_dnnl_get_mt(llm4d_dnnl *d, const llm4d_dnnl_mm *mm) {
    LLM4D_ASSERT(!omp_in_parallel(), "llm4d_dnnl_get_mt called inside a parallel region%s", "");
    mm_entry *e = get_or_abort(d, mm, 1);
    e->mt = 1;
    int n = omp_get_max_threads();
    llm4d_err err = {0};
    llm4d_code rc = ensure_threads(d, n, &err);
    if (rc == LLM4D_OK) rc = ensure_slots(d, e, n, &err);
    LLM4D_ASSERT(rc == LLM4D_OK, "oneDNN per-thread resources for %d threads: %s", n, err.msg);
    return (llm4d_dnnl_prim *)e;
}

void llm4d_dnnl_run_mt(llm4d_dnnl *d, llm4d_dnnl_prim *p, const void *a, const void *b, const float *bias,
                       float *c) {
    mm_entry *e = (mm_entry *)p;
    int t = omp_get_thread_num();
    LLM4D_ASSERT(t < e->nslots && t < d->nthreads, "thread %d beyond the %d slots prepared by llm4d_dnnl_get_mt", t,
                 e->nslots);
    run(d, e, t, a, b, bias, c);
}
