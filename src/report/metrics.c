/* metrics.c — reading metrics.jsonl back (see run.h; every field is documented in docs/training.md).
 *
 * The file is appended to by rank 0 as the run goes (a resumed run appends too), one object per line, flushed
 * after each: a step line `{"step": N, ...}` or an evaluation line `{"eval_step": N, ...}`. A reader racing the
 * writer may see the last line without its newline: that line is left out (and said so), not an error. Any other
 * line that is not such an object means the file was damaged, and is refused naming the line. A resumed run may
 * repeat steps after its checkpoint: the later line of a step wins, so the curve is the run the checkpoint
 * continued. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "report/run.h"

/* A number field; NaN when absent or null (JSON has no inf: an overflowed step's norm is null). */
static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void parse_step(const cJSON *o, llm4d_rp_step *s) {
    s->step = (int64_t)num(o, "step");
    s->loss = num(o, "loss");
    s->lr = num(o, "learning_rate");
    s->lr_used = num(o, "lr_used");
    s->grad_norm = num(o, "grad_norm");
    s->loss_scale = num(o, "loss_scale");
    s->ips_total = num(o, "ips_total");
    s->ips = num(o, "ips");
    s->mfu = num(o, "mfu");
    s->batch_cost = num(o, "batch_cost");
    s->reader_cost = num(o, "reader_cost");
    s->tokens = num(o, "tokens");
    s->comm_exposed_s = num(o, "comm_exposed_s");
    s->comm_s = num(o, "comm_s");
    s->pp_idle_s = num(o, "pp_idle_s");
    s->pp_busy_s = num(o, "pp_busy_s");
    s->zero_gather_wait_s = num(o, "zero_gather_wait_s");
    s->zero_reduce_scatter_s = num(o, "zero_reduce_scatter_s");
    s->comm_bytes = num(o, "comm_bytes");
    s->optim_bytes = num(o, "optim_bytes");
    _Static_assert(LLM4D_RP_WORK == LLM4D_WORK_N, "metrics.jsonl's work_s kinds");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(o, "work_s");
    for (int k = 0; k < LLM4D_RP_WORK; k++) s->work_s[k] = num(w, llm4d_work_name(k));
    const double fi = num(o, "found_inf"), sp = num(o, "loss_spike_skipped");
    s->found_inf = fi > 0;
    s->spike_skipped = sp > 0;
}

/* Grow *p (n used, *cap allocated) by one element of size sz; NULL when out of memory. */
static void *grow(void **p, int n, int *cap, size_t sz) {
    if (n == *cap) {
        const int c = *cap ? 2 * *cap : 256;
        void *q = realloc(*p, (size_t)c * sz);
        if (!q) return NULL;
        *p = q;
        *cap = c;
    }
    return (char *)*p + (size_t)n * sz;
}

/* Keep the last line of each step (a resumed run repeats the steps after its checkpoint): sort by step, stable by
 * position, then drop all but the last of equal steps. */
typedef struct {
    llm4d_rp_step s;
    int pos;
} keyed;

static int by_step(const void *pa, const void *pb) {
    const keyed *a = pa, *b = pb;
    if (a->s.step != b->s.step) return a->s.step < b->s.step ? -1 : 1;
    return a->pos - b->pos;
}

static llm4d_code dedupe(llm4d_rp_run *r, llm4d_err *err) {
    if (r->ns < 2) return LLM4D_OK;
    keyed *k = malloc((size_t)r->ns * sizeof *k);
    if (!k) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory reading metrics.jsonl");
    for (int i = 0; i < r->ns; i++) k[i] = (keyed){r->s[i], i};
    qsort(k, (size_t)r->ns, sizeof *k, by_step);
    int n = 0;
    for (int i = 0; i < r->ns; i++) {
        if (i + 1 < r->ns && k[i + 1].s.step == k[i].s.step) continue;
        r->s[n++] = k[i].s;
    }
    r->ns = n;
    free(k);
    return LLM4D_OK;
}

llm4d_code llm4d_rp_read_metrics(llm4d_rp_run *r, const char *path, llm4d_err *err) {
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return LLM4D_OK;
        return llm4d_fail(err, LLM4D_EUSER, "cannot read %s: %s; make it readable, or give another run directory",
                          path, strerror(errno));
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, scap = 0, ecap = 0;
    llm4d_code rc = LLM4D_OK;
    while (rc == LLM4D_OK && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        const int complete = len > 0 && line[len - 1] == '\n';
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue;
        cJSON *o = cJSON_ParseWithLength(line, (size_t)len);
        const int is_step = o && cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "step"));
        const int is_eval = o && cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "eval_step"));
        if (!is_step && !is_eval) {
            cJSON_Delete(o);
            if (!complete && fgetc(f) == EOF) { /* the writer's line in progress */
                r->partial_line = 1;
                break;
            }
            rc = llm4d_fail(err, LLM4D_EUSER, "%s line %d is not a step or evaluation record (%.60s%s); the file is "
                            "damaged: remove that line (or restore the file) and run the report again", path, lineno,
                            line, len > 60 ? "..." : "");
            break;
        }
        if (is_step) {
            llm4d_rp_step *s = grow((void **)&r->s, r->ns, &scap, sizeof *s);
            if (!s) rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory reading %s", path);
            else parse_step(o, s), r->ns++;
        } else {
            llm4d_rp_eval *e = grow((void **)&r->e, r->ne, &ecap, sizeof *e);
            if (!e) rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory reading %s", path);
            else *e = (llm4d_rp_eval){(int64_t)num(o, "eval_step"), num(o, "eval_loss"), num(o, "eval_ppl")}, r->ne++;
        }
        cJSON_Delete(o);
    }
    if (rc == LLM4D_OK && ferror(f))
        rc = llm4d_fail(err, LLM4D_EUSER, "cannot read %s: %s; make it readable", path, strerror(errno));
    free(line);
    fclose(f);
    if (rc == LLM4D_OK) rc = dedupe(r, err);
    /* every step reads the same global batch, so step N has seen N of them (a resumed run's too) */
    for (int i = 0; rc == LLM4D_OK && i < r->ns; i++) r->s[i].tokens_seen = (double)r->s[i].step * r->s[i].tokens;
    return rc;
}
