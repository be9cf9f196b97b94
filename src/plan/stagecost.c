/* stagecost.c — pricing a rank's trace, and the memo of priced traces by model part (see stagecost.h).
 *
 * A part's ZeRO alignment (the sharding degree) pads its groups and nothing else: the model's calls, hooks and
 * activations are those of its unpadded tensors. So a trace is recorded and priced once per part without its
 * alignment, and a part at another alignment takes that pricing with its groups padded again (aligned_copy): a
 * search meets each part at every sharding degree of its world (145B on 192 hosts: 58 thousand priced parts, 9.5
 * thousand recordings), and recording was a quarter of its time. A search's shortcut (with by_count): under --no_memo
 * every part is recorded, so that tests/test_plan_memo.sh compares the two. */
#include "plan/stagecost.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/hmap.h"
#include "parallel/stack.h"
#include "parallel/tensor_parallel.h"

void llm4d_stagecost_free(llm4d_stagecost *s) {
    free(s->chunk);
    free(s->ev);
    llm4d_traffic_shape_free(&s->shape);
    memset(s, 0, sizeof *s);
}

/* A priced call by its cost key (the op, whether a dropout is drawn, the element types, the sizes). */
typedef struct {
    int used;
    uint16_t op;
    uint8_t drop;
    uint16_t ty;
    int64_t d[LLM4D_RC_DIMS];
    double s[LLM4D_WORK_N];
    llm4d_price_how how;
} price_memo;

/* The distinct keys of a trace: a handful per layer kind, however many layers repeat them. So the table starts small
 * and doubles past half full (it was sized to twice the trace's calls, and zeroing that per priced part was a
 * thirtieth of a large search). */
typedef struct {
    price_memo *e;
    size_t cap, n;
    double gemm_rate; /* the fastest linear layer priced (FLOP/s) */
} price_table;

static size_t memo_slot(const price_memo *m, size_t cap, uint16_t op, uint8_t drop, uint16_t ty, const int64_t *d) {
    uint64_t h = 1469598103934665603ull ^ op ^ ((uint64_t)drop << 16) ^ ((uint64_t)ty << 24);
    for (int i = 0; i < LLM4D_RC_DIMS; i++) h = (h ^ (uint64_t)d[i]) * 1099511628211ull;
    size_t j = h & (cap - 1);
    while (m[j].used && (m[j].op != op || m[j].drop != drop || m[j].ty != ty || memcmp(m[j].d, d, sizeof m[j].d)))
        j = (j + 1) & (cap - 1);
    return j;
}

static int memo_grow(price_table *t) {
    if (2 * (t->n + 1) <= t->cap) return 1;
    const size_t cap = 2 * t->cap;
    price_memo *e = calloc(cap, sizeof *e);
    if (!e) return 0;
    for (size_t i = 0; i < t->cap; i++)
        if (t->e[i].used) e[memo_slot(e, cap, t->e[i].op, t->e[i].drop, t->e[i].ty, t->e[i].d)] = t->e[i];
    free(t->e);
    t->e = e, t->cap = cap;
    return 1;
}

/* 0: out of memory */
static int memo_price(price_table *t, const llm4d_pricer *pr, const llm4d_rc_call *x, double s[LLM4D_WORK_N],
                      llm4d_price_how *how) {
    if (!memo_grow(t)) return 0;
    price_memo *m = t->e;
    const size_t j = memo_slot(m, t->cap, x->op, x->drop > 0, x->ty, x->d);
    if (!m[j].used) { /* under half full: a free slot is always found */
        m[j].used = 1, m[j].op = x->op, m[j].drop = x->drop > 0, m[j].ty = x->ty;
        memcpy(m[j].d, x->d, sizeof m[j].d);
        m[j].how = llm4d_price_call(pr, x, m[j].s);
        t->n++;
        if (x->op == LLM4D_RC_LINEAR_FWD || x->op == LLM4D_RC_LINEAR_BWD) {
            double sec = 0;
            for (int i = 0; i < LLM4D_WORK_N; i++) sec += m[j].s[i];
            const double w = llm4d_rc_flops(x), r = sec > 0 ? w / sec : w > 0 ? INFINITY : 0;
            if (r > t->gemm_rate) t->gemm_rate = r;
        }
    }
    *how = m[j].how;
    for (int i = 0; i < LLM4D_WORK_N; i++) s[i] += m[j].s[i];
    return 1;
}

/* What a pricing takes from its part's parameter table: the traffic's shape, the embedding's elements, the total, the
 * tensor-parallel engine's partial sums; the one derivation of a recorded pricing and of one re-padded from it at
 * another alignment (aligned_copy). */
static llm4d_code of_table(llm4d_stagecost *out, const llm4d_param_table *tb, size_t bucket_bytes, llm4d_err *err) {
    LLM4D_TRY(llm4d_traffic_shape_make(&out->shape, tb, bucket_bytes, err));
    out->wte_elems = 0;
    for (int g = 0; g < tb->n_groups; g++)
        if (tb->g[g].kind == LLM4D_G_WTE) out->wte_elems += out->shape.group_len[g];
    out->total = tb->total;
    out->sp_partial = llm4d_tensor_parallel_bytes(tb) / sizeof(float);
    return LLM4D_OK;
}

llm4d_code llm4d_stagecost_price(const llm4d_mbtrace *t, const llm4d_pricer *pr, int ranks_on_host, int coll_ranks,
                                 int tp_hosts, size_t bucket_bytes, llm4d_stagecost *out, llm4d_err *err) {
    memset(out, 0, sizeof *out);
    out->n_chunks = t->n_chunks, out->split = t->split, out->act_elems = t->act_elems, out->act_bytes = t->act_bytes;
    out->chunk = calloc((size_t)t->n_chunks + 1, sizeof *out->chunk);
    const llm4d_param_table *tb = &t->table;
    int n_ev = 0;
    for (int i = 0; i < t->rec.n; i++)
        n_ev += t->rec.calls[i].op == LLM4D_RC_PARAMS_FOR || t->rec.calls[i].op == LLM4D_RC_GRADS_DONE;
    out->ev = calloc((size_t)n_ev + 1, sizeof *out->ev);
    if (!out->chunk || !out->ev || of_table(out, tb, bucket_bytes, err) != LLM4D_OK) {
        llm4d_stagecost_free(out);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory pricing a trace");
    }
    /* a part's layers repeat the same calls: each distinct cost key is priced once */
    price_table memo = {calloc(64, sizeof(price_memo)), 64, 0, 0};
    if (!memo.e) {
        llm4d_stagecost_free(out);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory pricing a trace");
    }
    for (int c = 0; c < t->n_chunks; c++)
        for (int k = 0; k < LLM4D_TRACE_NPASS; k++) {
            double since = 0;
            for (int i = t->lo[k][c]; i < t->hi[k][c]; i++) {
                const llm4d_rc_call *x = &t->rec.calls[i];
                if (x->op < LLM4D_RC_NKERNELS) {
                    double s[LLM4D_WORK_N] = {0};
                    llm4d_price_how how;
                    if (!memo_price(&memo, pr, x, s, &how)) {
                        free(memo.e);
                        llm4d_stagecost_free(out);
                        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory pricing a trace");
                    }
                    if (how == LLM4D_PRICE_EXACT) out->priced_exact++;
                    else out->priced_other++;
                    for (int j = 0; j < LLM4D_WORK_N; j++) out->chunk[c].kinds[k][j] += s[j], since += s[j];
                } else if (x->op == LLM4D_RC_COMM) {
                    const double bytes = (double)x->d[1] * (x->d[0] == LLM4D_COMM_OP_ALLREDUCE ? 1 : (double)x->d[2]);
                    const double spin = llm4d_price_wait(pr->prof, pr->threads, ranks_on_host, (int)x->d[2]);
                    const double s = llm4d_price_coll(pr->prof, (int)x->d[0], bytes, (int)x->d[2], coll_ranks,
                                                      tp_hosts, NULL) +
                                     spin;
                    out->chunk[c].tp[k] += s, since += s, out->spin += spin;
                    if (bytes > out->tp_max_bytes) out->tp_max_bytes = bytes, out->tp_max_op = (int)x->d[0];
                } else if (x->op == LLM4D_RC_PARAMS_FOR || x->op == LLM4D_RC_GRADS_DONE) {
                    out->ev[out->n_ev++] = (llm4d_hook_ev){(uint8_t)k, (uint8_t)x->op, (uint16_t)c, (int)x->d[0], since};
                    since = 0;
                }
            }
            out->chunk[c].tail[k] = since;
        }
    out->gemm_rate = memo.gemm_rate;
    for (size_t i = 0; pr->prof->machine && i < memo.cap; i++) { /* each distinct call once */
        const price_memo *m = &memo.e[i];
        if (!m->used) continue;
        llm4d_rc_call c = {.op = m->op, .ty = m->ty, .drop = m->drop ? 0.1f : 0.0f};
        memcpy(c.d, m->d, sizeof c.d);
        llm4d_beyond_call(pr->prof, &c, pr->prec, &out->beyond);
    }
    free(memo.e);
    return LLM4D_OK;
}

/* ---- the memo ---- */

/* The key: every field of the part and of the layout that changes the calls (not the slots, which change memory
 * only), and the pricing context, as integers (no padding to compare). */
#define KEY_N (3 + 2 * LLM4D_MAX_CHUNKS + 5 + 6 + 4)
typedef struct {
    int64_t v[KEY_N];
} cache_key;

static void make_key(cache_key *k, const llm4d_model_part *p, const llm4d_gpt_layout *l, int ranks_on_host,
                     int coll_ranks, int tp_hosts, size_t bucket_bytes, int by_count) {
    int64_t *v = k->v;
    memset(k, 0, sizeof *k);
    *v++ = p->mp_size, *v++ = p->mp_rank, *v++ = p->n_chunks;
    /* by_count: a chunk by its block count (every block makes the same calls of the same sizes, and the hook
     * events name groups by their place in the part) */
    for (int c = 0; c < LLM4D_MAX_CHUNKS; c++) *v++ = c < p->n_chunks ? by_count ? 0 : p->layer_lo[c] : 0;
    for (int c = 0; c < LLM4D_MAX_CHUNKS; c++)
        *v++ = c < p->n_chunks ? p->layer_hi[c] - (by_count ? p->layer_lo[c] : 0) : 0;
    *v++ = p->embedding, *v++ = p->head, *v++ = p->sequence_parallel, *v++ = p->align, *v++ = p->wte_block_rows;
    *v++ = l->B, *v++ = l->T, *v++ = l->recompute, *v++ = l->split_backward, *v++ = l->no_params, *v++ = l->no_grads;
    *v++ = ranks_on_host, *v++ = coll_ranks, *v++ = tp_hosts, *v++ = (int64_t)bucket_bytes;
}

typedef struct {
    cache_key key;
    llm4d_stagecost cost;
} cache_entry;

/* A part without its alignment (the key's align word 0): the first pricing of it (entries never move) and the table
 * it was recorded with (its groups and entries copied: everything the traffic's shape reads of a table, the
 * embedding's and head's groups included), from which its pricing at any alignment follows. */
typedef struct {
    cache_key key;
    const llm4d_stagecost *cost;
    llm4d_param_table tb; /* the first pricing's table; g [n_groups] and p [n] owned here */
} unaligned_entry;

static void unaligned_free(unaligned_entry *u) {
    if (u) free(u->tb.g), free(u->tb.p), free(u);
}

struct llm4d_stagecost_cache {
    llm4d_hmap index;     /* of cache_entry, each allocated once */
    llm4d_hmap unaligned; /* of unaligned_entry */
    int by_count;
    double gemm_rate; /* the fastest linear layer of its traces */
};

/* Where make_key puts the part's alignment. */
#define KEY_ALIGN (3 + 2 * LLM4D_MAX_CHUNKS + 3)

void llm4d_stagecost_cache_by_count(llm4d_stagecost_cache *c, int on) { c->by_count = on; }

double llm4d_stagecost_cache_gemm_rate(const llm4d_stagecost_cache *c) { return c ? c->gemm_rate : 0; }

llm4d_code llm4d_stagecost_cache_create(llm4d_stagecost_cache **out, llm4d_err *err) {
    llm4d_stagecost_cache *c = calloc(1, sizeof *c);
    if (!c || !llm4d_hmap_init(&c->index, 256) || !llm4d_hmap_init(&c->unaligned, 256)) {
        if (c) llm4d_hmap_free(&c->index), llm4d_hmap_free(&c->unaligned);
        free(c);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    }
    *out = c;
    return LLM4D_OK;
}

void llm4d_stagecost_cache_destroy(llm4d_stagecost_cache *c) {
    if (!c) return;
    for (size_t i = 0; i < c->index.cap; i++) {
        cache_entry *e = c->index.s[i].e;
        if (!e) continue;
        llm4d_stagecost_free(&e->cost);
        free(e);
    }
    for (size_t i = 0; i < c->unaligned.cap; i++) {
        unaligned_free(c->unaligned.s[i].e);
    }
    llm4d_hmap_free(&c->index);
    llm4d_hmap_free(&c->unaligned);
    free(c);
}

/* The key's hash, a word at a time (a byte at a time was a tenth of a large search), finished so that its low bits,
 * which pick the slot, depend on every bit of every word. */
static uint64_t key_hash(const cache_key *k) {
    /* without the chunk words past n_chunks (v[2]): most of the key, and the whole key is still compared */
    const int64_t n = k->v[2] < 0 ? 0 : k->v[2] > LLM4D_MAX_CHUNKS ? LLM4D_MAX_CHUNKS : k->v[2];
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < KEY_N; i++) {
        if (i == 3 + n) i = 3 + LLM4D_MAX_CHUNKS;
        if (i == 3 + LLM4D_MAX_CHUNKS + n) i = 3 + 2 * LLM4D_MAX_CHUNKS;
        h = (h ^ (uint64_t)k->v[i]) * 1099511628211ull;
    }
    h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33;
    return h;
}

static int same_key(const void *entry, const void *key) {
    return !memcmp(&((const cache_entry *)entry)->key, key, sizeof(cache_key));
}

static int same_unaligned(const void *entry, const void *key) {
    return !memcmp(&((const unaligned_entry *)entry)->key, key, sizeof(cache_key));
}

/* u's table: tb's scalars and a copy of its groups and entries (0: out of memory). */
static int unaligned_fill(unaligned_entry *u, const llm4d_param_table *tb) {
    const size_t G = (size_t)tb->n_groups + 1, P = (size_t)tb->n + 1;
    u->tb = *tb;
    u->tb.g = malloc(G * sizeof *u->tb.g);
    u->tb.p = malloc(P * sizeof *u->tb.p);
    if (!u->tb.g || !u->tb.p) return 0;
    memcpy(u->tb.g, tb->g, (size_t)tb->n_groups * sizeof *u->tb.g);
    memcpy(u->tb.p, tb->p, (size_t)tb->n * sizeof *u->tb.p);
    return 1;
}

/* out = u's pricing with the groups padded to `align` as the parameter table pads them (a group begins where the
 * previous one ends, its entries packed from there, and the buffer is rounded up to the alignment after each:
 * llm4d_param_align_up), and what follows from their extents: the traffic's shape (group lengths, gradient
 * windows, data-parallel buckets, the entries summed after backward), the embedding's elements, the total. The
 * table given to the shape is the one the part would build at that alignment, so the shape is the one a recording
 * there would give (tests/test_plan_memo.sh: the memoised search's answers equal the exhaustive one's). */
static llm4d_code aligned_copy(const unaligned_entry *u, int64_t align, size_t bucket_bytes, llm4d_stagecost *out,
                               llm4d_err *err) {
    const llm4d_stagecost *s = u->cost;
    const int G = u->tb.n_groups, P = u->tb.n;
    *out = *s;
    memset(&out->shape, 0, sizeof out->shape);
    out->chunk = malloc(((size_t)s->n_chunks + 1) * sizeof *out->chunk);
    out->ev = malloc(((size_t)s->n_ev + 1) * sizeof *out->ev);
    llm4d_group *grp = malloc(((size_t)G + 1) * sizeof *grp);
    llm4d_param *par = malloc(((size_t)P + 1) * sizeof *par);
    if (!out->chunk || !out->ev || !grp || !par) {
        free(grp), free(par);
        llm4d_stagecost_free(out);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory pricing a trace");
    }
    memcpy(out->chunk, s->chunk, (size_t)s->n_chunks * sizeof *out->chunk);
    memcpy(out->ev, s->ev, (size_t)s->n_ev * sizeof *out->ev);
    memcpy(par, u->tb.p, (size_t)P * sizeof *par);
    size_t total = 0;
    for (int g = 0; g < G; g++) {
        grp[g] = u->tb.g[g];
        grp[g].lo = total;
        for (int i = grp[g].p0; i < grp[g].p1; i++) { /* the group's entries, packed from its new start */
            par[i].offset = total;
            total += par[i].numel;
        }
        total = llm4d_param_align_up(total, align);
        grp[g].hi = total;
    }
    llm4d_param_table tb = u->tb;
    tb.g = grp, tb.p = par, tb.total = total;
    tb.part.align = (int)align;
    const llm4d_code rc = of_table(out, &tb, bucket_bytes, err);
    free(grp), free(par);
    if (rc != LLM4D_OK) llm4d_stagecost_free(out);
    return rc;
}

llm4d_code llm4d_stagecost_get(llm4d_stagecost_cache *cache, const llm4d_pricer *pr, const llm4d_stage_ref *at,
                               const llm4d_backend *like, int ranks_on_host, int tp_hosts,
                               const llm4d_stagecost **out, llm4d_err *err) {
    const llm4d_config *cfg = at->cfg;
    const llm4d_topology *topo = at->topo;
    const llm4d_pp_plan *pp = at->pp;
    llm4d_model_part part;
    llm4d_gpt_layout layout;
    LLM4D_TRY(llm4d_stack_layout(cfg, topo, pp, &part, &layout, err));
    const size_t bucket_bytes = (size_t)cfg->dist.bucket_size_bytes;
    /* A pipeline stage's micro-batch is one action of the schedule simulator, which slows all of it by the
     * time-slicing of the ranks computing at once (steptime.c): its tensor-parallel collectives are priced as on a
     * host with no more ranks than cores, or the slicing would count twice (the series measured with every rank
     * of an oversubscribed host in a collective already hold it). Without a pipeline nothing scales them. */
    const int fill = llm4d_price_fill(pr->prof, pr->threads);
    const int coll_ranks = cfg->dist.pp_degree > 1 && ranks_on_host > fill ? fill : ranks_on_host;
    cache_key k;
    LLM4D_ASSERT(cache, "llm4d_stagecost_get needs a cache");
    make_key(&k, &part, &layout, ranks_on_host, coll_ranks, tp_hosts, bucket_bytes, cache->by_count);
    const uint64_t h = key_hash(&k);
    llm4d_hslot *s = llm4d_hmap_find(&cache->index, h, same_key, &k);
    if (!s) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    if (s->e) {
        *out = &((cache_entry *)s->e)->cost;
        return LLM4D_OK;
    }
    cache_entry *e = malloc(sizeof *e);
    if (!e) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    /* a search's shortcut, like by_count: without it (--no_memo, the tests' oracle) every part is recorded */
    cache_key ku = k;
    ku.v[KEY_ALIGN] = 0;
    const uint64_t hu = key_hash(&ku);
    llm4d_hslot *su = cache->by_count ? llm4d_hmap_find(&cache->unaligned, hu, same_unaligned, &ku) : NULL;
    llm4d_code rc = LLM4D_OK;
    if (cache->by_count && !su) rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    else if (su && su->e) { /* recorded at another alignment */
        rc = aligned_copy(su->e, k.v[KEY_ALIGN], bucket_bytes, &e->cost, err);
    } else {
        llm4d_mbtrace t;
        rc = llm4d_mbtrace_make(&t, cfg, topo, pp, like, err);
        if (rc == LLM4D_OK) {
            rc = llm4d_stagecost_price(&t, pr, ranks_on_host, coll_ranks, tp_hosts, bucket_bytes, &e->cost, err);
            unaligned_entry *u = rc == LLM4D_OK && su ? calloc(1, sizeof *u) : NULL;
            if (rc == LLM4D_OK && su && (!u || !unaligned_fill(u, &t.table))) {
                unaligned_free(u);
                llm4d_stagecost_free(&e->cost);
                rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
            } else if (rc == LLM4D_OK && su) {
                u->key = ku, u->cost = &e->cost;
                su->h = hu, su->e = u, cache->unaligned.n++;
            }
            llm4d_mbtrace_free(&t);
        }
    }
    if (rc != LLM4D_OK) {
        free(e);
        return rc;
    }
    e->key = k;
    if (e->cost.gemm_rate > cache->gemm_rate) cache->gemm_rate = e->cost.gemm_rate;
    s->h = h, s->e = e, cache->index.n++;
    *out = &e->cost;
    return LLM4D_OK;
}
