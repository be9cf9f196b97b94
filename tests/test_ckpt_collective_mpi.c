/* test_ckpt_collective_mpi.c — collective (multi-writer) checkpoint saving, under MPI or alone.
 *
 * The model is a small GPT whose groups do not divide evenly (hidden 30, 3 layers, vocab 1000 padded to 1024,
 * 63 positions), so a table aligned to 4 has holes at the end of groups and shard boundaries fall inside rows of
 * wte, c_attn, ... Every element of params, Adam m and v gets a distinct pseudo-random value that depends only on
 * (step, kind, parameter, element), so the same state can be built in any layout and compared bit for bit.
 *
 * Modes (argv[1]):
 *   (none)            the whole scenario in a fresh temporary directory, on however many ranks started it
 *                     (tests/test_ckpt_collective.sh: alone, -np 2, -np 4; ctest also runs it alone):
 *     1. ZeRO shards of a sharding degree 4 (rank r saves the shards q with q % n == r, nothing gathered) load
 *        bit-identically as one process (aligned table, holes zero), into the unaligned table, and as every shard
 *        of sharding degrees 2, 3 and 8;
 *     2. dp x sharding replicas, parameters placed as ZeRO-1/2 hold them (whole, flat) and m, v compact: only
 *        replica 0 writes (writes = 0 elsewhere), the manifest lists its files only;
 *        and a sharding degree of 256, which cuts wte into more than 256 slices (the reader's old limit);
 *     3. failures on one rank — an add that fails, a write that fails (RLIMIT_FSIZE makes the kernel refuse it),
 *        two ranks writing the same file name, llm4d_ckpt_save_mark_failed, an output_dir rank 0 cannot create —
 *        make every rank return the same error naming that rank, and leave `latest`, the previous checkpoint and
 *        the directory (no temporaries) as they were;
 *     4. a later save prunes to keep_last.
 *   save DIR STEP     save the state of STEP collectively (sharding 4 over the ranks) into DIR, keep_last 0
 *                     (the shell kills ranks in the middle of this with LLM4D_CKPT_KILL_AT / _RANK)
 *   verify PATH STEP  (alone) PATH resolves to step STEP and loads bit-identically whole, unaligned and as shards
 * Rank 0 prints one line per check; other ranks print only their failures; the totals are summed over the world and
 * the last line is "N passed, M failed". */
#define _GNU_SOURCE
#include <dirent.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/gpt_ckpt.h"
#include "comm/comm.h"
#include "comm/runtime.h"
#include "model/shard_range.h"
#include "rank_tally.h"

/* rank_tally.h's must(), naming what failed */
static void must_named(llm4d_code rc, const llm4d_err *err, const char *what) {
    if (rc != LLM4D_OK) {
        fprintf(stderr, "%s: %s\n", what, err->msg);
        exit(1);
    }
}

/* ---- the model and its states ---- */

static llm4d_model_config model(void) {
    llm4d_model_config m;
    memset(&m, 0, sizeof m);
    m.vocab_size = 1000;
    m.vocab_size_divisible_unit = 128;
    m.padded_vocab_size = 1024;
    m.hidden_size = 30;
    m.num_layers = 3;
    m.num_attention_heads = 3;
    m.ffn_hidden_size = 120;
    m.max_position_embeddings = 63;
    m.hidden_dropout_prob = 0.1f;
    m.attention_probs_dropout_prob = 0.1f;
    m.initializer_range = 0.02f;
    m.eos_token_id = 999;
    return m;
}

typedef struct {
    llm4d_param_table t;
    float *p, *m, *v; /* t.total elements each */
} state;

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A value exactly representable, never zero, determined by (step, kind, parameter, element) only. */
static float value(int64_t step, int kind, int param, size_t j) {
    uint64_t h = mix(mix(mix((uint64_t)step * 4 + (uint64_t)kind) + (uint64_t)param) + j);
    float f = (float)((h >> 40) + 1) / 16777216.0f; /* (0, 1] in steps of 2^-24 */
    return kind == 2 ? f : 2.0f * f - 1.0f;
}

/* The state of `step` in a table aligned to `align`: holes and wte's padding rows zero. */
static void state_make(state *s, int align, int64_t step) {
    llm4d_err err = {0};
    llm4d_model_config m = model();
    llm4d_model_part part = llm4d_model_part_whole(&m);
    part.align = align;
    must_named(llm4d_param_table_build(&s->t, &m, &part, &err), &err, "building the table");
    float **bufs[3] = {&s->p, &s->m, &s->v};
    for (int k = 0; k < 3; k++) {
        float *b = calloc(s->t.total, sizeof *b);
        if (!b) exit(1);
        for (int i = 0; i < s->t.n; i++) {
            const llm4d_param *p = &s->t.p[i];
            const size_t real = (size_t)p->rows_real * (p->ndim == 2 ? (size_t)p->shape[1] : 1);
            for (size_t j = 0; j < real; j++) b[p->offset + j] = value(step, k, i, j);
        }
        *bufs[k] = b;
    }
}

static void state_free(state *s) {
    free(s->p);
    free(s->m);
    free(s->v);
    llm4d_param_table_free(&s->t);
}

/* The ranges of shards {q : q % stride == first} of sharding degree N, back to back (local buffers). */
typedef struct {
    int n;
    size_t lo[512 * 16], hi[512 * 16], off[512 * 16], total;
} ranges;

static void ranges_of(ranges *r, const llm4d_param_table *t, int N, int first, int stride) {
    r->n = 0;
    r->total = 0;
    for (int q = first; q < N; q += stride) {
        llm4d_shard_sizes z;
        if (r->n + t->n_groups > (int)(sizeof r->lo / sizeof r->lo[0])) {
            printf("FAIL - %d shards of %d groups overflow the test's range table\n", N, t->n_groups);
            exit(1);
        }
        int g = llm4d_shard_ranges(t, N, q, r->lo + r->n, r->hi + r->n, r->off + r->n, &z);
        for (int k = 0; k < g; k++) r->off[r->n + k] += r->total;
        r->n += g;
        r->total += z.local_total;
    }
}

/* Copy the ranges out of full buffers into compact local ones (what a sharding engine holds). */
static void extract(const ranges *r, const float *full, float *local) {
    for (int k = 0; k < r->n; k++) memcpy(local + r->off[k], full + r->lo[k], (r->hi[k] - r->lo[k]) * sizeof(float));
}

typedef struct {
    float *p, *m, *v;
} locals;

static void locals_make(locals *l, const ranges *r, const state *s) {
    size_t n = r->total ? r->total : 1;
    l->p = malloc(n * sizeof(float));
    l->m = malloc(n * sizeof(float));
    l->v = malloc(n * sizeof(float));
    if (!l->p || !l->m || !l->v) exit(1);
    if (s) {
        extract(r, s->p, l->p);
        extract(r, s->m, l->m);
        extract(r, s->v, l->v);
    }
}

static void locals_free(locals *l) {
    free(l->p);
    free(l->m);
    free(l->v);
}

static int same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* ---- directory inspection ---- */

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int count_tmp(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strncmp(e->d_name, ".tmp_", 5) == 0;
    closedir(d);
    return n;
}

static int exists(const char *dir, const char *name) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    return stat(p, &st) == 0;
}

static int latest_is(const char *dir, int64_t step) {
    char p[2048], buf[64] = {0}, want[64];
    snprintf(p, sizeof p, "%s/latest", dir);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[k] = 0;
    snprintf(want, sizeof want, "step_%lld\n", (long long)step);
    return strcmp(buf, want) == 0;
}

/* Files in step_<step>/meta.json's manifest, -1 when it cannot be read. */
static int manifest_files(const char *dir, int64_t step) {
    char p[2048];
    snprintf(p, sizeof p, "%s/step_%lld", dir, (long long)step);
    llm4d_ckpt *c;
    llm4d_err err = {0};
    if (llm4d_ckpt_open(&c, p, &err) != LLM4D_OK) return -1;
    int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(llm4d_ckpt_meta(c), "files"));
    llm4d_ckpt_close(c);
    return n;
}

/* ---- loading checks (each rank runs them on its own) ---- */

/* ok on every rank (a check whose work was split over the ranks). */
static int all_ok(llm4d_comm *w, int ok) {
    int64_t bad = !ok;
    llm4d_err err = {0};
    must_named(llm4d_comm_allreduce(w, &bad, 1, LLM4D_COMM_I64, &err), &err, "allreduce");
    return bad == 0;
}

/* PATH holds the state of `step`: whole (aligned to 4, holes zero), unaligned, and every shard of degrees 2, 3, 8.
 * The loads are shared out over the ranks of w (load k on rank k % n), which then agree on each check. */
static void verify_loads(rank_tally *t, llm4d_comm *w, const char *path, int64_t step, const char *label) {
    char what[2400];
    llm4d_err err = {0};
    llm4d_model_config m = model();
    const int aligns[5] = {4, 1, 2, 3, 8}, n = llm4d_comm_size(w), rank = llm4d_comm_rank(w);
    for (int a = 0; a < 5; a++) {
        state want;
        state_make(&want, aligns[a], step);
        if (a < 2) { /* whole, on rank a % n */
            int ok = 1, meta_ok = 1;
            if (a % n == rank) {
                float *p = malloc(want.t.total * sizeof *p), *mm = malloc(want.t.total * sizeof *mm),
                      *v = malloc(want.t.total * sizeof *v);
                memset(p, 0x7f, want.t.total * sizeof *p); /* holes must come back zero, not untouched */
                int has_optim = -1;
                int64_t got_step = -2;
                cJSON *meta = NULL;
                const size_t whole[2] = {0, want.t.total};
                const llm4d_ckpt_state st = llm4d_ckpt_state_range(&want.t, whole, p, mm, v);
                llm4d_code rc = llm4d_gpt_ckpt_load(path, &m, &st, &has_optim, &meta, &got_step, &err);
                ok = rc == LLM4D_OK && got_step == step && has_optim == 1 && same(p, want.p, want.t.total) &&
                     same(mm, want.m, want.t.total) && same(v, want.v, want.t.total);
                if (!ok)
                    fprintf(stderr, "rank %d: whole load: rc %d %s, step %lld, has_optim %d\n", rank, (int)rc,
                            rc ? err.msg : "", (long long)got_step, has_optim);
                const cJSON *note = meta ? cJSON_GetObjectItemCaseSensitive(meta, "note") : NULL;
                meta_ok = cJSON_IsString(note) && strcmp(note->valuestring, "collective") == 0 &&
                          cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(meta, "model"));
                cJSON_Delete(meta);
                free(p);
                free(mm);
                free(v);
            }
            snprintf(what, sizeof what, "%s: load whole into the %s table (rank %d): step %lld, has_optim 1, "
                     "params/m/v bit-identical", label, a == 0 ? "aligned-4" : "unaligned", a % n, (long long)step);
            rank_check(t, all_ok(w, ok), what);
            if (a == 0)
                rank_check(t, all_ok(w, meta_ok), "meta.json keeps the caller's keys (rank 0's meta), has \"model\"");
        } else { /* every shard of sharding degree aligns[a] */
            int ok = 1;
            for (int q = rank; q < aligns[a] && ok; q += n) {
                ranges r;
                ranges_of(&r, &want.t, aligns[a], q, aligns[a]);
                locals got, exp;
                locals_make(&got, &r, NULL);
                locals_make(&exp, &r, &want);
                memset(got.p, 0x7f, r.total * sizeof(float));
                int has_optim = -1;
                /* degree 3 places the parameters as ZeRO-1/2 hold them: whole, in the flat buffer (params_off = lo) */
                const int flat = aligns[a] == 3;
                float *pf = flat ? malloc(want.t.total * sizeof *pf) : NULL;
                if (flat) memset(pf, 0x7f, want.t.total * sizeof *pf);
                const llm4d_ckpt_state st = {.t = &want.t, .n = r.n, .lo = r.lo, .hi = r.hi,
                                             .params = flat ? pf : got.p, .params_off = flat ? r.lo : NULL,
                                             .m = got.m, .v = got.v, .state_off = r.off};
                llm4d_code rc = llm4d_gpt_ckpt_load(path, &m, &st, &has_optim, NULL, NULL, &err);
                if (flat) extract(&r, pf, got.p);
                ok = rc == LLM4D_OK && has_optim == 1 && same(got.p, exp.p, r.total) && same(got.m, exp.m, r.total) &&
                     same(got.v, exp.v, r.total);
                free(pf);
                if (!ok) fprintf(stderr, "shard %d of %d: rc %d %s\n", q, aligns[a], (int)rc, rc ? err.msg : "");
                locals_free(&got);
                locals_free(&exp);
            }
            snprintf(what, sizeof what, "%s: every shard of sharding degree %d (table aligned to %d) loads "
                     "bit-identically (m, v compact; params %s)", label, aligns[a], aligns[a],
                     aligns[a] == 3 ? "into the flat buffer, as ZeRO-1/2" : "compact, as ZeRO-3");
            rank_check(t, all_ok(w, ok), what);
        }
        state_free(&want);
    }
}

/* ---- saving ---- */

/* Save the state of `step` as ZeRO shards of degree N: this rank saves shards q % n == rank. */
static llm4d_code save_sharded(llm4d_comm *w, const char *dir, int64_t step, int N, int keep_last, llm4d_err *err) {
    state s;
    state_make(&s, N, step);
    ranges r;
    ranges_of(&r, &s.t, N, llm4d_comm_rank(w), llm4d_comm_size(w));
    locals l;
    locals_make(&l, &r, &s);
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "note", "collective");
    llm4d_model_config m = model();
    const llm4d_ckpt_state st = {.t = &s.t, .n = r.n, .lo = r.lo, .hi = r.hi, .params = l.p, .m = l.m, .v = l.v,
                                 .state_off = r.off};
    const llm4d_ckpt_dest d = {.output_dir = dir, .step = step, .keep_last = keep_last, .writes = r.n > 0};
    llm4d_code rc = llm4d_gpt_ckpt_save_collective(w, &d, &m, &st, llm4d_comm_rank(w) == 0 ? meta : NULL, err);
    cJSON_Delete(meta);
    locals_free(&l);
    state_free(&s);
    return rc;
}

static uint64_t fnv(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Every rank returned the same code and message. */
static int same_everywhere(llm4d_comm *w, llm4d_code rc, const llm4d_err *err) {
    const int n = llm4d_comm_size(w);
    int64_t mine[2] = {rc, (int64_t)(fnv(rc ? err->msg : "") >> 1)}, *all = calloc((size_t)n * 2, sizeof *all);
    llm4d_err e2 = {0};
    must_named(llm4d_comm_allgather(w, mine, all, 2, LLM4D_COMM_I64, &e2), &e2, "allgather");
    int ok = 1;
    for (int r = 0; r < n; r++) ok &= all[2 * r] == mine[0] && all[2 * r + 1] == mine[1];
    free(all);
    return ok;
}

/* After a failed save of `step`: everything as it was (latest = prev, no step_<step>, no temporaries). */
static void check_untouched(rank_tally *t, llm4d_comm *w, const char *dir, int64_t step, int64_t prev,
                            const char *label) {
    llm4d_err err = {0};
    must_named(llm4d_comm_barrier(w, &err), &err, "barrier");
    char name[64], what[600];
    snprintf(name, sizeof name, "step_%lld", (long long)step);
    snprintf(what, sizeof what, "%s: latest still step_%lld, no %s, no temporary directory left", label,
             (long long)prev, name);
    const int ok = latest_is(dir, prev) && !exists(dir, name) && count_tmp(dir) == 0;
    if (!ok)
        fprintf(stderr, "rank %d: latest_is %d, exists %d, count_tmp %d\n", llm4d_comm_rank(w), latest_is(dir, prev),
                exists(dir, name), count_tmp(dir));
    rank_check(t, ok, what);
    must_named(llm4d_comm_barrier(w, &err), &err, "barrier"); /* before rank 0 starts the next save */
}

/* The failure checks: `fail_rank` fails in the way `how` says. */
static void failure_case(rank_tally *t, llm4d_comm *w, const char *dir, int64_t step, int64_t prev, const char *how) {
    const int n = llm4d_comm_size(w), rank = llm4d_comm_rank(w), fail_rank = n - 1;
    llm4d_err err = {0};
    state s;
    state_make(&s, 4, step);
    ranges r;
    ranges_of(&r, &s.t, 4, rank, n);
    locals l;
    locals_make(&l, &r, &s);
    llm4d_model_config m = model();
    cJSON *meta = cJSON_CreateObject();
    llm4d_gpt_ckpt_meta(meta, &m, 1, &err);
    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    char tag[32], sub[2048];
    snprintf(tag, sizeof tag, "_r%03d", rank);
    const char *out = dir;
    if (strcmp(how, "dup") == 0) snprintf(tag, sizeof tag, "_same");
    if (strcmp(how, "mkdir") == 0) { /* a path under a regular file: rank 0 cannot create it */
        snprintf(sub, sizeof sub, "%s/step_%lld/meta.json/sub", dir, (long long)prev);
        out = sub;
    }
    if (strcmp(how, "fsize") == 0 && rank == fail_rank) {
        signal(SIGXFSZ, SIG_IGN); /* the write then fails with EFBIG instead of killing the process */
        struct rlimit lim = {.rlim_cur = 4096, .rlim_max = old.rlim_max};
        setrlimit(RLIMIT_FSIZE, &lim);
    }
    llm4d_ckpt_saver *sv = NULL;
    llm4d_code rc = llm4d_ckpt_save_begin_collective(&sv, w, out, step, 1, &err);
    if (rc == LLM4D_OK) {
        const llm4d_ckpt_state st = {.t = &s.t, .n = r.n, .lo = r.lo, .hi = r.hi, .params = l.p, .m = l.m,
                                     .v = l.v, .state_off = r.off};
        llm4d_gpt_ckpt_add(sv, &st, tag, &err);
        if (strcmp(how, "add") == 0 && rank == fail_rank) {
            static const float x[2] = {1, 2};
            const int64_t shp[1] = {2};
            const llm4d_ckpt_box box = {LLM4D_ST_F32, 1, shp, NULL, NULL};
            llm4d_ckpt_save_tensor(sv, "bad name.safetensors", "x", &box, x, &err);
            /* later adds return the kept failure */
            const size_t first[2] = {0, 10};
            const llm4d_ckpt_state late = llm4d_ckpt_state_range(&s.t, first, s.p, NULL, NULL);
            llm4d_gpt_ckpt_add(sv, &late, "_late", &err);
        }
        if (strcmp(how, "mark") == 0 && rank == fail_rank) {
            llm4d_err why = {0};
            llm4d_fail(&why, LLM4D_ENOMEM, "no memory for the staging buffer (injected)");
            llm4d_ckpt_save_mark_failed(sv, &why);
        }
        rc = llm4d_ckpt_save_commit_collective(sv, rank == 0 ? meta : NULL, 0, &err);
    }
    if (strcmp(how, "fsize") == 0 && rank == fail_rank) setrlimit(RLIMIT_FSIZE, &old);
    char want[128], what[1200];
    const int who = strcmp(how, "dup") == 0 || strcmp(how, "mkdir") == 0 ? 0 : fail_rank;
    const char *needle = strcmp(how, "add") == 0     ? "bad name.safetensors"
                         : strcmp(how, "fsize") == 0 ? "File too large"
                         : strcmp(how, "dup") == 0   ? "is written by rank 0 and by rank 1"
                         : strcmp(how, "mark") == 0  ? "(injected)"
                                                     : "cannot create output directory";
    if (n > 1 && strcmp(how, "dup") != 0) snprintf(want, sizeof want, "rank %d: ", who);
    else want[0] = 0;
    const int named = rc != LLM4D_OK && strncmp(err.msg, want, strlen(want)) == 0 && strstr(err.msg, needle);
    snprintf(what, sizeof what, "%s on rank %d: every rank returns the same error %d naming it: %s", how,
             strcmp(how, "dup") == 0 ? 1 : who, (int)rc, rc ? err.msg : "(success!)");
    rank_check(t, named && same_everywhere(w, rc, &err), what);
    check_untouched(t, w, dir, step, prev, how);
    cJSON_Delete(meta);
    locals_free(&l);
    state_free(&s);
}

static void scenario(rank_tally *t, llm4d_comm *w) {
    const int n = llm4d_comm_size(w), rank = llm4d_comm_rank(w);
    llm4d_err err = {0};
    char dir[256] = {0}, what[1200];
    if (rank == 0) {
        snprintf(dir, sizeof dir, "/tmp/llm4d_ckcoll_XXXXXX");
        if (!mkdtemp(dir)) exit(1);
        strcat(dir, "/out"); /* the saver creates it */
    }
    must_named(llm4d_comm_broadcast(w, dir, sizeof dir, LLM4D_COMM_BYTE, 0, &err), &err, "broadcast");

    /* 1. sharding degree 4 over n ranks */
    llm4d_code rc = save_sharded(w, dir, 10, 4, 0, &err);
    snprintf(what, sizeof what, "save step 10 as 4 ZeRO shards over %d rank(s), each rank its own: rc %d %s", n,
             (int)rc, rc ? err.msg : "");
    rank_check(t, rc == LLM4D_OK && same_everywhere(w, rc, &err), what);
    const int writers4 = n < 4 ? n : 4;
    snprintf(what, sizeof what, "latest = step_10, manifest lists 3 x %d files, no temporary left", writers4);
    rank_check(t, latest_is(dir, 10) && manifest_files(dir, 10) == 3 * writers4 && count_tmp(dir) == 0, what);
    verify_loads(t, w, dir, 10, "step 10");
    must_named(llm4d_comm_barrier(w, &err), &err, "barrier"); /* every rank checked before the next save */

    /* 2. dp x sharding: replicas other than 0 write nothing */
    {
        const int S = n >= 2 ? n / 2 : 1, q = rank % S, replica = rank / S;
        state s;
        state_make(&s, S, 11);
        ranges r;
        ranges_of(&r, &s.t, S, q, S);
        locals l;
        locals_make(&l, &r, &s);
        llm4d_model_config m = model();
        cJSON *meta = cJSON_CreateObject();
        cJSON_AddStringToObject(meta, "note", "collective");
        /* as ZeRO-1/2 hold them: parameters whole in the flat buffer, m and v compact */
        const llm4d_ckpt_state st = {.t = &s.t, .n = r.n, .lo = r.lo, .hi = r.hi, .params = s.p, .params_off = r.lo,
                                     .m = l.m, .v = l.v, .state_off = r.off};
        const llm4d_ckpt_dest d = {.output_dir = dir, .step = 11, .writes = replica == 0};
        rc = llm4d_gpt_ckpt_save_collective(w, &d, &m, &st, meta, &err);
        snprintf(what, sizeof what, "save step 11 as dp%d x sharding%d (params flat, m/v compact), replica 0 writes: rc "
                 "%d %s, manifest lists 3 x %d files", n / S, S, (int)rc, rc ? err.msg : "", S);
        rank_check(t, rc == LLM4D_OK && latest_is(dir, 11) && manifest_files(dir, 11) == 3 * S, what);
        verify_loads(t, w, dir, 11, "step 11");
        must_named(llm4d_comm_barrier(w, &err), &err, "barrier"); /* every rank checked before the next save */
        cJSON_Delete(meta);
        locals_free(&l);
        state_free(&s);
    }

    /* 2b. sharding degree 512: wte is cut into more slices than the reader once accepted (256) */
    rc = save_sharded(w, dir, 12, 512, 0, &err);
    {
        char p12[300];
        snprintf(p12, sizeof p12, "%s/step_12", dir);
        llm4d_ckpt *c = NULL;
        llm4d_ckpt_info info = {0};
        int found = rc == LLM4D_OK && llm4d_ckpt_open(&c, p12, &err) == LLM4D_OK &&
                    llm4d_ckpt_find(c, LLM4D_GPT_CKPT_MODEL, "transformer.wte.weight", &info);
        llm4d_ckpt_close(c);
        snprintf(what, sizeof what, "save step 12 as 512 ZeRO shards: rc %d %s; wte stored as %d slices (> 256)",
                 (int)rc, rc ? err.msg : "", info.nslices);
        rank_check(t, found && info.nslices > 256, what);
    }
    verify_loads(t, w, dir, 12, "step 12 (512 shards)");
    must_named(llm4d_comm_barrier(w, &err), &err, "barrier");

    /* 3. a failing rank */
    failure_case(t, w, dir, 20, 12, "add");
    failure_case(t, w, dir, 21, 12, "fsize");
    if (n > 1) failure_case(t, w, dir, 22, 12, "dup");
    failure_case(t, w, dir, 23, 12, "mark");
    failure_case(t, w, dir, 24, 12, "mkdir");
    verify_loads(t, w, dir, 12, "after the failures, latest");
    must_named(llm4d_comm_barrier(w, &err), &err, "barrier"); /* every rank checked before the next save */

    /* 4. keep_last 2 keeps step 30 (just saved) and step 12 */
    rc = save_sharded(w, dir, 30, 4, 2, &err);
    must_named(llm4d_comm_barrier(w, &err), &err, "barrier");
    snprintf(what, sizeof what, "save step 30 with keep_last 2: rc %d %s; step_30 and step_12 kept, step_10 and "
             "step_11 pruned", (int)rc, rc ? err.msg : "");
    rank_check(t, rc == LLM4D_OK && latest_is(dir, 30) && exists(dir, "step_30") && exists(dir, "step_12") &&
                      !exists(dir, "step_11") && !exists(dir, "step_10") && count_tmp(dir) == 0,
               what);

    must_named(llm4d_comm_barrier(w, &err), &err, "barrier");
    if (rank == 0) {
        *strrchr(dir, '/') = 0;
        nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    }
}

int main(int argc, char **argv) {
    llm4d_runtime rt;
    llm4d_err err = {0};
    must_named(llm4d_runtime_init(&rt, &argc, &argv, &err), &err, "runtime");
    llm4d_comm *w = rt.world;
    rank_tally t = {.rank = llm4d_comm_rank(w)};
    if (t.rank == 0) printf("world of %d on the %s backend\n", llm4d_comm_size(w), w->ops->backend);
    if (argc >= 4 && strcmp(argv[1], "save") == 0) {
        const int64_t step = atoll(argv[3]);
        llm4d_code rc = save_sharded(w, argv[2], step, 4, 0, &err);
        char what[1200];
        snprintf(what, sizeof what, "save step %lld into %s: rc %d %s", (long long)step, argv[2], (int)rc,
                 rc ? err.msg : "");
        rank_check(&t, rc == LLM4D_OK, what);
    } else if (argc >= 4 && strcmp(argv[1], "verify") == 0) {
        verify_loads(&t, w, argv[2], atoll(argv[3]), argv[2]);
    } else if (argc == 1) {
        scenario(&t, w);
    } else {
        fprintf(stderr, "usage: %s [save DIR STEP | verify PATH STEP]\n", argv[0]);
        return 2;
    }
    int64_t sums[2] = {t.pass, t.fail};
    must_named(llm4d_comm_allreduce(w, sums, 2, LLM4D_COMM_I64, &err), &err, "allreduce");
    if (t.rank == 0) printf("%lld passed, %lld failed\n", (long long)sums[0], (long long)sums[1]);
    llm4d_runtime_finalize(&rt);
    return sums[1] == 0 && sums[0] > 0 ? 0 : 1;
}
