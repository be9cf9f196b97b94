/* profile.c — a machine profile in memory and as a JSON file (see profile.h). Kernel entries are stored compactly,
 * one array per entry ([op, drop, prec, threads, d0..d7, s0..s5, ty]), since a calibration writes thousands. The
 * element types (ty) came last, when activations could be 16 bits: a row without them (18 numbers, a profile from
 * before) reads as all fp32, which is what it measured. The process's residue is "residual_beyond_plan_bytes",
 * measured beyond a plan that holds the libraries' working set of a step (plan/memplan.h); a profile from before
 * has "residual_bytes", measured beyond a plan without it, and reads as that less the working set. A calibration
 * writes "calibration" (complete, setup, measured_for, parts_skipped, and for a machine calibration machine_grid); a
 * profile without it (written by hand, or calibrated before it existed) reads as complete, and one without
 * machine_grid as a model's calibration. */
#include "plan/profile.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plan/memplan.h"

#define FORMAT 1
#define KROW (4 + LLM4D_RC_DIMS + LLM4D_WORK_N + 1) /* a kernel row's numbers (the last, ty, may be missing) */

void llm4d_profile_init(llm4d_profile *p) {
    memset(p, 0, sizeof *p);
    snprintf(p->device, sizeof p->device, "cpu");
    p->kernel_s = 2e-6;
    p->coll_latency_s[0] = 5e-6, p->coll_latency_s[1] = 2e-5;
    p->coll_gbps[0] = 2.0, p->coll_gbps[1] = 1.0;
    p->disk_read_gbps = p->disk_write_gbps = 1.0;
}

void llm4d_profile_free(llm4d_profile *p) {
    free(p->kernels);
    free(p->colls);
    memset(p, 0, sizeof *p);
}

static int key_cmp(const llm4d_prof_kernel *a, const llm4d_prof_kernel *b) {
    if (a->op != b->op) return a->op < b->op ? -1 : 1;
    if (a->prec != b->prec) return a->prec < b->prec ? -1 : 1;
    if (a->threads != b->threads) return a->threads < b->threads ? -1 : 1;
    if (a->drop != b->drop) return a->drop < b->drop ? -1 : 1;
    if (a->ty != b->ty) return a->ty < b->ty ? -1 : 1;
    for (int i = 0; i < LLM4D_RC_DIMS; i++)
        if (a->d[i] != b->d[i]) return a->d[i] < b->d[i] ? -1 : 1;
    return 0;
}
static int key_cmp_v(const void *a, const void *b) { return key_cmp(a, b); }

void llm4d_profile_sort(llm4d_profile *p) {
    if (p->n_kernels > 1) qsort(p->kernels, (size_t)p->n_kernels, sizeof *p->kernels, key_cmp_v);
    p->sorted = 1;
}

/* The entry of k's key in p (NULL: none): bisected once sorted, scanned while a calibration fills it. */
static llm4d_prof_kernel *entry_of(const llm4d_profile *p, const llm4d_prof_kernel *k) {
    if (!p->sorted) {
        for (int i = 0; i < p->n_kernels; i++)
            if (!key_cmp(&p->kernels[i], k)) return &p->kernels[i];
        return NULL;
    }
    if (p->n_kernels == 0) return NULL; /* a profile of rates only (bench/profiles/): no table to search */
    return bsearch(k, p->kernels, (size_t)p->n_kernels, sizeof *p->kernels, key_cmp_v);
}

const llm4d_prof_kernel *llm4d_profile_find(const llm4d_profile *p, const llm4d_rc_call *c, int threads, int prec) {
    llm4d_prof_kernel key = {.op = c->op, .drop = c->drop > 0, .prec = (uint8_t)prec, .ty = c->ty,
                             .threads = threads};
    memcpy(key.d, c->d, sizeof key.d);
    return entry_of(p, &key);
}

llm4d_code llm4d_profile_add_kernel(llm4d_profile *p, const llm4d_prof_kernel *k, llm4d_err *err) {
    llm4d_prof_kernel *had = entry_of(p, k);
    if (had) { /* the same key: its place in the order stays */
        *had = *k;
        return LLM4D_OK;
    }
    if (p->n_kernels == p->cap_kernels) {
        const int cap = p->cap_kernels ? 2 * p->cap_kernels : 256;
        llm4d_prof_kernel *nk = realloc(p->kernels, (size_t)cap * sizeof *nk);
        if (!nk) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
        p->kernels = nk, p->cap_kernels = cap;
    }
    p->kernels[p->n_kernels++] = *k;
    p->sorted = 0;
    return LLM4D_OK;
}

static double kernel_seconds(const llm4d_prof_kernel *k) {
    double t = 0;
    for (int j = 0; j < LLM4D_WORK_N; j++) t += k->s[j];
    return t;
}

llm4d_code llm4d_profile_merge_pass(llm4d_profile *p, const llm4d_profile *q, int *outliers, llm4d_err *err) {
    int n = 0;
    for (int i = 0; i < q->n_kernels; i++) {
        const llm4d_prof_kernel *k = &q->kernels[i];
        llm4d_prof_kernel *had = entry_of(p, k);
        if (!had) {
            LLM4D_TRY(llm4d_profile_add_kernel(p, k, err));
            continue;
        }
        const double a = kernel_seconds(had), b = kernel_seconds(k);
        if (a > LLM4D_PROFILE_OUTLIER * b) *had = *k, n++;
        else if (b > LLM4D_PROFILE_OUTLIER * a) n++;
        else
            for (int j = 0; j < LLM4D_WORK_N; j++) had->s[j] = (had->s[j] + k->s[j]) / 2;
    }
    if (outliers) *outliers = n;
    return LLM4D_OK;
}

llm4d_code llm4d_profile_add_coll(llm4d_profile *p, const llm4d_prof_coll *c, llm4d_err *err) {
    if (p->n_colls == p->cap_colls) {
        const int cap = p->cap_colls ? 2 * p->cap_colls : 32;
        llm4d_prof_coll *nc = realloc(p->colls, (size_t)cap * sizeof *nc);
        if (!nc) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
        p->colls = nc, p->cap_colls = cap;
    }
    p->colls[p->n_colls++] = *c;
    return LLM4D_OK;
}

/* Put s into a table keyed by (threads, ranks): replacing the entry of its key, else appended while there is room. */
static void put_keyed(llm4d_prof_share *tab, int *n, int cap, const llm4d_prof_share *s) {
    for (int i = 0; i < *n; i++)
        if (tab[i].threads == s->threads && tab[i].ranks == s->ranks) {
            tab[i] = *s;
            return;
        }
    if (*n < cap) tab[(*n)++] = *s;
}

void llm4d_profile_add_share(llm4d_profile *p, const llm4d_prof_share *s) {
    put_keyed(p->share, &p->n_share, (int)(sizeof p->share / sizeof p->share[0]), s);
}

void llm4d_profile_add_pair_wait(llm4d_profile *p, const llm4d_prof_share *w) {
    put_keyed(p->pair_wait, &p->n_pair_wait, (int)(sizeof p->pair_wait / sizeof p->pair_wait[0]), w);
}

void llm4d_profile_add_for(llm4d_profile *p, const char *what) {
    for (int i = 0; i < p->n_for; i++)
        if (!strcmp(p->measured_for[i], what)) return;
    const int cap = (int)(sizeof p->measured_for / sizeof p->measured_for[0]);
    if (p->n_for == cap) memmove(p->measured_for[0], p->measured_for[1], (size_t)(cap - 1) * sizeof p->measured_for[0]);
    else p->n_for++;
    snprintf(p->measured_for[p->n_for - 1], sizeof p->measured_for[0], "%s", what);
}

void llm4d_profile_default_path(char *buf, size_t n) {
    const char *home = getenv("HOME");
    snprintf(buf, n, "%s/.cache/llm4d/machine.json", home && home[0] ? home : ".");
}

/* ---- JSON ---- */

static const char *const prec_names[3] = {"fp32", "bf16", "fp16"};
static const char *const coll_names[] = {[LLM4D_COMM_OP_ALLREDUCE] = "allreduce",
                                         [LLM4D_COMM_OP_REDUCE_SCATTER] = "reduce_scatter",
                                         [LLM4D_COMM_OP_ALLGATHER] = "allgather", [LLM4D_COMM_OP_BROADCAST] = "broadcast",
                                         [LLM4D_COMM_OP_SEND] = "send", [LLM4D_PROF_AR_SHARED] = "allreduce_shared"};

static cJSON *num_array(const double *x, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(x[i]));
    return a;
}

static cJSON *to_json(const llm4d_profile *p) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "llm4d_machine_profile", FORMAT);
    cJSON_AddStringToObject(o, "name", p->name);
    cJSON_AddStringToObject(o, "cpu", p->cpu);
    cJSON_AddStringToObject(o, "device", p->device);
    cJSON_AddStringToObject(o, "measured", p->when);
    cJSON_AddNumberToObject(o, "load_average", p->load);
    cJSON_AddNumberToObject(o, "cores", p->cores);
    cJSON_AddNumberToObject(o, "memory_bytes", p->memory_bytes);
    if (p->memory_per_rank_bytes > 0) cJSON_AddNumberToObject(o, "memory_per_rank_bytes", p->memory_per_rank_bytes);
    if (p->calibrated) {
        cJSON *cal = cJSON_AddObjectToObject(o, "calibration");
        cJSON_AddBoolToObject(cal, "complete", p->complete);
        cJSON_AddStringToObject(cal, "setup", p->setup);
        cJSON_AddNumberToObject(cal, "parts_skipped", p->parts_skipped);
        cJSON *f = cJSON_AddArrayToObject(cal, "measured_for");
        for (int i = 0; i < p->n_for; i++) cJSON_AddItemToArray(f, cJSON_CreateString(p->measured_for[i]));
        if (p->machine) cJSON_AddStringToObject(cal, "machine_grid", p->grid);
    }
    cJSON *proc = cJSON_AddObjectToObject(o, "process");
    cJSON *base = cJSON_AddArrayToObject(proc, "base");
    for (int i = 0; i < p->n_base; i++) {
        const double pair[2] = {p->base_ranks[i], p->base_bytes[i]};
        cJSON_AddItemToArray(base, num_array(pair, 2));
    }
    cJSON_AddNumberToObject(proc, "residual_beyond_plan_bytes", p->residual_bytes);
    if (p->n_residue == 2) {
        cJSON *pts = cJSON_AddArrayToObject(proc, "residual_points");
        for (int i = 0; i < 2; i++) {
            const double pair[2] = {p->residue_plan[i], p->residue_at[i]};
            cJSON_AddItemToArray(pts, num_array(pair, 2));
        }
    }
    cJSON *sh = cJSON_AddArrayToObject(o, "shares");
    for (int i = 0; i < p->n_share; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "threads", p->share[i].threads);
        cJSON_AddNumberToObject(e, "ranks", p->share[i].ranks);
        cJSON_AddItemToObject(e, "factor", num_array(p->share[i].factor, LLM4D_WORK_N));
        cJSON_AddItemToArray(sh, e);
    }
    cJSON_AddNumberToObject(o, "overlap", p->overlap);
    cJSON_AddNumberToObject(o, "oversubscription_penalty", p->oversub_penalty);
    cJSON_AddNumberToObject(o, "wait_cpu_s", p->wait_cpu_s);
    cJSON_AddBoolToObject(o, "grads_reset", p->grads_reset);
    cJSON *pw = cJSON_AddArrayToObject(o, "pair_waits");
    for (int i = 0; i < p->n_pair_wait; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "threads", p->pair_wait[i].threads);
        cJSON_AddNumberToObject(e, "ranks", p->pair_wait[i].ranks);
        cJSON_AddNumberToObject(e, "cpu_s", p->pair_wait[i].factor[0]);
        cJSON_AddItemToArray(pw, e);
    }
    cJSON *fb = cJSON_AddObjectToObject(o, "fallback");
    for (int q = 0; q < 3; q++) {
        char k[32];
        snprintf(k, sizeof k, "gemm_gflops_%s", prec_names[q]);
        cJSON_AddItemToObject(fb, k, num_array(p->gemm_gflops[q], LLM4D_PROF_MAXT + 1));
        snprintf(k, sizeof k, "attention_gflops_%s", prec_names[q]);
        cJSON_AddItemToObject(fb, k, num_array(p->attn_gflops[q], LLM4D_PROF_MAXT + 1));
    }
    cJSON_AddItemToObject(fb, "memory_gbps", num_array(p->mem_gbps, LLM4D_PROF_MAXT + 1));
    cJSON_AddNumberToObject(fb, "kernel_s", p->kernel_s);
    cJSON_AddItemToObject(fb, "collective_latency_s", num_array(p->coll_latency_s, 2));
    cJSON_AddItemToObject(fb, "collective_gbps", num_array(p->coll_gbps, 2));
    cJSON_AddNumberToObject(fb, "disk_read_gbps", p->disk_read_gbps);
    cJSON_AddNumberToObject(fb, "disk_write_gbps", p->disk_write_gbps);
    llm4d_gemm_shape_to_json(o, &p->gemm_shape);
    cJSON *ks = cJSON_AddArrayToObject(o, "kernels");
    for (int i = 0; i < p->n_kernels; i++) {
        const llm4d_prof_kernel *k = &p->kernels[i];
        double row[KROW];
        row[0] = k->op, row[1] = k->drop, row[2] = k->prec, row[3] = k->threads;
        for (int j = 0; j < LLM4D_RC_DIMS; j++) row[4 + j] = (double)k->d[j];
        for (int j = 0; j < LLM4D_WORK_N; j++) row[4 + LLM4D_RC_DIMS + j] = k->s[j];
        row[KROW - 1] = k->ty;
        cJSON_AddItemToArray(ks, num_array(row, KROW));
    }
    cJSON *cs = cJSON_AddArrayToObject(o, "collectives");
    for (int i = 0; i < p->n_colls; i++) {
        const llm4d_prof_coll *c = &p->colls[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "op", coll_names[c->op]);
        cJSON_AddNumberToObject(e, "group", c->group);
        cJSON_AddNumberToObject(e, "ranks_on_host", c->ranks_on_host);
        cJSON_AddNumberToObject(e, "hosts", c->hosts);
        cJSON_AddItemToObject(e, "bytes", num_array(c->bytes, c->n));
        cJSON_AddItemToObject(e, "seconds", num_array(c->seconds, c->n));
        cJSON_AddItemToObject(e, "temp_first", num_array(c->temp_first, c->n));
        cJSON_AddItemToObject(e, "temp_other", num_array(c->temp_other, c->n));
        cJSON_AddItemToObject(e, "temp_odd", num_array(c->temp_odd, c->n));
        cJSON_AddItemToArray(cs, e);
    }
    return o;
}

llm4d_code llm4d_profile_save(const llm4d_profile *p, const char *path, llm4d_err *err) {
    cJSON *o = to_json(p);
    char *text = o ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!text) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory writing the machine profile");
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    const int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    const int closed = f && fclose(f) == 0;
    free(text);
    if (!ok || !closed || rename(tmp, path) != 0) {
        const int e = errno;
        unlink(tmp);
        return llm4d_fail(err, LLM4D_EUSER, "cannot write the machine profile %s: %s; choose a writable --machine_profile",
                          path, strerror(e));
    }
    return LLM4D_OK;
}

/* ---- reading: every field checked, a bad one named ---- */

typedef struct {
    const char *path;
    llm4d_err *err;
    int bad;
} reader;

static llm4d_code garbled(reader *r, const char *what) {
    if (!r->bad)
        llm4d_fail(r->err, LLM4D_EUSER, "machine profile %s: %s; write it again with `llm4d plan --calibrate "
                   "--machine_profile %s`", r->path, what, r->path);
    r->bad = 1;
    return LLM4D_EUSER;
}

static double num(reader *r, const cJSON *o, const char *key, double def, int required) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x) {
        if (required) {
            char what[96];
            snprintf(what, sizeof what, "the field \"%s\" is missing", key);
            garbled(r, what);
        }
        return def;
    }
    if (!cJSON_IsNumber(x)) {
        char what[96];
        snprintf(what, sizeof what, "\"%s\" is not a number", key);
        garbled(r, what);
        return def;
    }
    return x->valuedouble;
}

static void str(const cJSON *o, const char *key, char *buf, size_t n) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsString(x)) snprintf(buf, n, "%s", x->valuestring);
}

/* An array of at most max numbers into out; its length (-1 and garbled when not an array of numbers). */
static int nums(reader *r, const cJSON *a, double *out, int max, const char *what) {
    if (!a) return 0;
    if (!cJSON_IsArray(a)) return garbled(r, what), -1;
    int n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        if (!cJSON_IsNumber(x) || n >= max) return garbled(r, what), -1;
        out[n++] = x->valuedouble;
    }
    return n;
}

/* Element types packed 2 bits per argument (llm4d_rc_call.ty), each one an llm4d_ftype. */
static int types_ok(double ty) {
    if (!(ty >= 0 && ty <= 65535) || ty != (double)(unsigned)ty) return 0;
    for (unsigned t = (unsigned)ty; t; t >>= 2)
        if ((t & 3u) >= LLM4D_NFTYPES) return 0;
    return 1;
}

static void read_tables(reader *r, const cJSON *o, llm4d_profile *p) {
    const cJSON *ks = cJSON_GetObjectItemCaseSensitive(o, "kernels"), *e;
    cJSON_ArrayForEach(e, ks) {
        double row[KROW];
        const int n = nums(r, e, row, KROW, "a kernel entry is not an array of 18 or 19 numbers");
        if (n == KROW - 1) row[KROW - 1] = 0; /* written before the element types: all fp32 */
        if ((n != KROW && n != KROW - 1) || row[0] < 0 || row[0] >= LLM4D_RC_NKERNELS || row[2] < 0 ||
            row[2] > 2 || row[3] < 1 || !types_ok(row[KROW - 1])) {
            garbled(r, "a kernel entry is not [op, drop, precision, threads, 8 sizes, 6 seconds, element types]");
            return;
        }
        llm4d_prof_kernel k = {.op = (uint16_t)row[0], .drop = row[1] != 0, .prec = (uint8_t)row[2],
                               .ty = (uint16_t)row[KROW - 1], .threads = (int)row[3]};
        for (int j = 0; j < LLM4D_RC_DIMS; j++) k.d[j] = (int64_t)row[4 + j];
        for (int j = 0; j < LLM4D_WORK_N; j++) k.s[j] = row[4 + LLM4D_RC_DIMS + j];
        if (llm4d_profile_add_kernel(p, &k, r->err) != LLM4D_OK) return (void)(r->bad = 1);
    }
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(o, "collectives");
    cJSON_ArrayForEach(e, cs) {
        llm4d_prof_coll c = {0};
        char op[32] = "";
        str(e, "op", op, sizeof op);
        c.op = -1;
        for (int k = 0; k < (int)(sizeof coll_names / sizeof coll_names[0]); k++)
            if (coll_names[k] && !strcmp(op, coll_names[k])) c.op = k;
        c.op = c.op == LLM4D_COMM_OP_BROADCAST ? -1 : c.op;
        if (c.op < 0)
            return (void)garbled(r, "a collective's \"op\" is not allreduce, allreduce_shared, reduce_scatter, "
                                    "allgather or send");
        c.group = (int)num(r, e, "group", 0, 1);
        c.ranks_on_host = (int)num(r, e, "ranks_on_host", 0, 1);
        c.hosts = (int)num(r, e, "hosts", 1, 0);
        c.n = nums(r, cJSON_GetObjectItemCaseSensitive(e, "bytes"), c.bytes, LLM4D_PROF_SIZES,
                   "a collective's \"bytes\" is not a list of sizes");
        const int ns = nums(r, cJSON_GetObjectItemCaseSensitive(e, "seconds"), c.seconds, LLM4D_PROF_SIZES,
                            "a collective's \"seconds\" is not a list of times");
        nums(r, cJSON_GetObjectItemCaseSensitive(e, "temp_first"), c.temp_first, LLM4D_PROF_SIZES,
             "a collective's \"temp_first\" is not a list of sizes");
        nums(r, cJSON_GetObjectItemCaseSensitive(e, "temp_other"), c.temp_other, LLM4D_PROF_SIZES,
             "a collective's \"temp_other\" is not a list of sizes");
        /* a profile from before temp_odd: temp_other was every non-first rank's */
        if (nums(r, cJSON_GetObjectItemCaseSensitive(e, "temp_odd"), c.temp_odd, LLM4D_PROF_SIZES,
                 "a collective's \"temp_odd\" is not a list of sizes") <= 0)
            memcpy(c.temp_odd, c.temp_other, sizeof c.temp_odd);
        if (r->bad) return;
        if (c.n < 1 || ns != c.n || c.group < 1 || c.ranks_on_host < 1 || c.hosts < 1)
            return (void)garbled(r, "a collective entry needs group, ranks_on_host >= 1 and as many seconds as bytes");
        for (int k = 1; k < c.n; k++)
            if (!(c.bytes[k] > c.bytes[k - 1])) return (void)garbled(r, "a collective's bytes are not increasing");
        if (llm4d_profile_add_coll(p, &c, r->err) != LLM4D_OK) return (void)(r->bad = 1);
    }
}

static void read_json(reader *r, const cJSON *o, llm4d_profile *p) {
    if (!cJSON_IsObject(o)) return (void)garbled(r, "it is not a JSON object");
    if (num(r, o, "llm4d_machine_profile", 0, 1) != FORMAT && !r->bad)
        return (void)garbled(r, "it is not a version-1 llm4d machine profile");
    str(o, "name", p->name, sizeof p->name);
    str(o, "cpu", p->cpu, sizeof p->cpu);
    str(o, "device", p->device, sizeof p->device);
    str(o, "measured", p->when, sizeof p->when);
    p->load = num(r, o, "load_average", 0, 0);
    p->cores = (int)num(r, o, "cores", 0, 1);
    p->memory_bytes = num(r, o, "memory_bytes", 0, 0);
    p->memory_per_rank_bytes = num(r, o, "memory_per_rank_bytes", 0, 0);
    if (!r->bad && !(p->memory_per_rank_bytes >= 0)) return (void)garbled(r, "\"memory_per_rank_bytes\" must be >= 0");
    if (!r->bad && p->cores < 1) return (void)garbled(r, "\"cores\" must be at least 1");
    const cJSON *cal = cJSON_GetObjectItemCaseSensitive(o, "calibration"), *e;
    p->complete = 1;
    if (cal) {
        if (!cJSON_IsObject(cal)) return (void)garbled(r, "\"calibration\" is not an object");
        p->calibrated = 1;
        p->complete = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(cal, "complete"));
        p->parts_skipped = (int)num(r, cal, "parts_skipped", 0, 0);
        str(cal, "setup", p->setup, sizeof p->setup);
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(cal, "measured_for"))
            if (cJSON_IsString(e)) llm4d_profile_add_for(p, e->valuestring);
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(cal, "machine_grid");
        if (g && !cJSON_IsString(g)) return (void)garbled(r, "\"machine_grid\" is not a string");
        if (g) p->machine = 1, snprintf(p->grid, sizeof p->grid, "%s", g->valuestring);
    }
    const cJSON *proc = cJSON_GetObjectItemCaseSensitive(o, "process");
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(proc, "base")) {
        double pair[2];
        if (nums(r, e, pair, 2, "a process base is not [ranks, bytes]") != 2 || p->n_base >= 64) break;
        p->base_ranks[p->n_base] = (int)pair[0], p->base_bytes[p->n_base++] = pair[1];
    }
    if (proc && cJSON_GetObjectItemCaseSensitive(proc, "residual_beyond_plan_bytes"))
        p->residual_bytes = num(r, proc, "residual_beyond_plan_bytes", 0, 0);
    else if (proc && cJSON_GetObjectItemCaseSensitive(proc, "residual_bytes")) /* measured before the plan held it */
        p->residual_bytes = num(r, proc, "residual_bytes", 0, 0) - (double)LLM4D_MEMPLAN_LIBRARIES;
    p->n_residue = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(proc, "residual_points")) {
        double pair[2];
        if (nums(r, e, pair, 2, "a residual point is not [plan bytes, bytes]") != 2 || p->n_residue >= 2) break;
        p->residue_plan[p->n_residue] = pair[0], p->residue_at[p->n_residue++] = pair[1];
    }
    if (p->n_residue != 2 || !(p->residue_plan[0] > 0) || !(p->residue_plan[1] > p->residue_plan[0]))
        p->n_residue = 0; /* not two increasing sizes: the one residue */
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "shares")) {
        llm4d_prof_share s = {.threads = (int)num(r, e, "threads", 1, 1), .ranks = (int)num(r, e, "ranks", 1, 1)};
        if (nums(r, cJSON_GetObjectItemCaseSensitive(e, "factor"), s.factor, LLM4D_WORK_N,
                 "a share's \"factor\" is not 6 numbers") != LLM4D_WORK_N)
            return (void)garbled(r, "a share's \"factor\" is not 6 numbers");
        llm4d_profile_add_share(p, &s);
    }
    p->overlap = num(r, o, "overlap", 0, 0);
    p->oversub_penalty = num(r, o, "oversubscription_penalty", 0, 0);
    p->wait_cpu_s = num(r, o, "wait_cpu_s", 0, 0);
    const cJSON *gr = cJSON_GetObjectItemCaseSensitive(o, "grads_reset");
    if (gr && !cJSON_IsBool(gr)) return (void)garbled(r, "\"grads_reset\" is not true or false");
    p->grads_reset = cJSON_IsTrue(gr);
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "pair_waits")) {
        llm4d_prof_share w = {.threads = (int)num(r, e, "threads", 1, 1), .ranks = (int)num(r, e, "ranks", 1, 1)};
        w.factor[0] = num(r, e, "cpu_s", 0, 1);
        llm4d_profile_add_pair_wait(p, &w);
    }
    const cJSON *fb = cJSON_GetObjectItemCaseSensitive(o, "fallback");
    if (fb) {
        for (int q = 0; q < 3; q++) {
            char k[32];
            snprintf(k, sizeof k, "gemm_gflops_%s", prec_names[q]);
            nums(r, cJSON_GetObjectItemCaseSensitive(fb, k), p->gemm_gflops[q], LLM4D_PROF_MAXT + 1,
                 "a fallback rate is not a list of at most 65 numbers (index: threads)");
            snprintf(k, sizeof k, "attention_gflops_%s", prec_names[q]);
            nums(r, cJSON_GetObjectItemCaseSensitive(fb, k), p->attn_gflops[q], LLM4D_PROF_MAXT + 1,
                 "a fallback rate is not a list of at most 65 numbers (index: threads)");
        }
        nums(r, cJSON_GetObjectItemCaseSensitive(fb, "memory_gbps"), p->mem_gbps, LLM4D_PROF_MAXT + 1,
             "\"memory_gbps\" is not a list of at most 65 numbers (index: threads)");
        p->kernel_s = num(r, fb, "kernel_s", p->kernel_s, 0);
        nums(r, cJSON_GetObjectItemCaseSensitive(fb, "collective_latency_s"), p->coll_latency_s, 2,
             "\"collective_latency_s\" is not [within a host, across hosts]");
        nums(r, cJSON_GetObjectItemCaseSensitive(fb, "collective_gbps"), p->coll_gbps, 2,
             "\"collective_gbps\" is not [within a host, across hosts]");
        p->disk_read_gbps = num(r, fb, "disk_read_gbps", p->disk_read_gbps, 0);
        p->disk_write_gbps = num(r, fb, "disk_write_gbps", p->disk_write_gbps, 0);
    }
    if (!r->bad && !(p->coll_gbps[0] > 0 && p->coll_gbps[1] > 0 && p->disk_read_gbps > 0 && p->disk_write_gbps > 0))
        return (void)garbled(r, "its collective and disk rates must be positive");
    char what[160];
    if (llm4d_gemm_shape_parse(cJSON_GetObjectItemCaseSensitive(o, "gemm_shape"), &p->gemm_shape, what, sizeof what))
        return (void)garbled(r, what);
    read_tables(r, o, p);
}

llm4d_code llm4d_profile_load(llm4d_profile *p, const char *path, llm4d_err *err) {
    llm4d_profile_init(p);
    FILE *f = fopen(path, "r");
    if (!f)
        return llm4d_fail(err, LLM4D_EUSER, "cannot read the machine profile %s: %s; measure this machine with "
                          "`llm4d plan --calibrate` (or name a profile with --machine_profile FILE)", path,
                          strerror(errno));
    char *text = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 > cap) {
            char *nt = realloc(text, cap = 2 * cap + 65536);
            if (!nt) {
                free(text);
                fclose(f);
                return llm4d_fail(err, LLM4D_ENOMEM, "out of memory reading %s", path);
            }
            text = nt;
        }
        const size_t got = fread(text + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    text[n] = 0;
    cJSON *o = cJSON_Parse(text);
    free(text);
    reader r = {path, err, 0};
    if (!o) garbled(&r, "it is not valid JSON");
    else read_json(&r, o, p);
    cJSON_Delete(o);
    if (r.bad) {
        llm4d_profile_free(p);
        llm4d_profile_init(p);
        return err->code ? err->code : LLM4D_EUSER;
    }
    llm4d_profile_sort(p);
    return LLM4D_OK;
}

double llm4d_profile_residual(const llm4d_profile *p, double plan_bytes) {
    if (p->n_residue != 2) return p->residual_bytes;
    const double x0 = p->residue_plan[0], x1 = p->residue_plan[1];
    if (plan_bytes <= x0) return p->residue_at[0];
    if (plan_bytes >= x1) return p->residue_at[1];
    return p->residue_at[0] + (p->residue_at[1] - p->residue_at[0]) * (plan_bytes - x0) / (x1 - x0);
}
