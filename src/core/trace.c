/* trace.c — recording spans and writing them as Trace Event JSON (see trace.h). */
#include "core/trace.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"

static const char *const kind_cat[LLM4D_TR_NKINDS] = {
    "step", "data", "compute", "compute", "compute", "comm", "wait", "optimizer", "checkpoint",
};

/* A step number at *p (digits only); advances *p. 0 when there is none or it overflows. */
static int64_t step_number(const char **p) {
    int64_t v = 0;
    const char *s = *p;
    while (*s >= '0' && *s <= '9') {
        if (v > (INT64_MAX - 9) / 10) return 0;
        v = v * 10 + (*s++ - '0');
    }
    if (s == *p) return 0;
    *p = s;
    return v;
}

llm4d_code llm4d_trace_parse_steps(const char *text, int64_t *first, int64_t *last, llm4d_err *err) {
    const char *p = text;
    *first = step_number(&p);
    *last = *first;
    if (*first > 0 && *p == '-') {
        p++;
        *last = *p ? step_number(&p) : INT64_MAX;
    }
    if (*first < 1 || *last < *first || *p)
        return llm4d_fail(err, LLM4D_EUSER, "trace_steps '%s' is not a range of steps; give FIRST-LAST such as "
                          "--trace_steps 5-6 (steps count from 1; one step: 5; to the end: 5-)", text);
    return LLM4D_OK;
}

llm4d_code llm4d_trace_create(llm4d_trace **out, const char *dir, const llm4d_trace_process *p, int64_t first,
                              int64_t last, double origin, llm4d_err *err) {
    const int rank = p->rank;
    const char *process = p->name, *other = p->other;
    *out = NULL;
    llm4d_trace *t = calloc(1, sizeof *t);
    if (!t) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory for the trace");
    t->first = first;
    t->last = last;
    t->rank = rank;
    t->origin = origin;
    snprintf(t->process, sizeof t->process, "%s", process);
    snprintf(t->other, sizeof t->other, "%s", other);
    if (strlen(dir) + 32 > sizeof t->path) {
        free(t);
        return llm4d_fail(err, LLM4D_EUSER, "--trace directory name is too long (%zu characters); choose a shorter one",
                          strlen(dir));
    }
    snprintf(t->path, sizeof t->path, "%s/trace.rank%d.json", dir, rank);
    /* refuse now, not after hours of training: the directory must exist or be creatable, and writable */
    FILE *f = NULL;
    if (llm4d_mkdir_p(dir, 0777) != 0 || !(f = fopen(t->path, "w"))) {
        const int e = errno;
        free(t);
        return llm4d_fail(err, LLM4D_EUSER, "cannot write the trace %s/trace.rank%d.json: %s; choose a writable "
                          "--trace directory", dir, rank, strerror(e));
    }
    fclose(f);
    remove(t->path); /* written after the last traced step; absent until then */
    *out = t;
    return LLM4D_OK;
}

void llm4d_trace_destroy(llm4d_trace *t) {
    if (!t) return;
    free(t->ev);
    free(t);
}

llm4d_trace_event *llm4d_trace_add(llm4d_trace *t, llm4d_trace_kind kind, const char *name, double t0, double t1) {
    if (t->n == t->cap) {
        const size_t cap = t->cap ? 2 * t->cap : 4096;
        llm4d_trace_event *ev = t->n < LLM4D_TRACE_MAX_SPANS ? realloc(t->ev, cap * sizeof *ev) : NULL;
        if (!ev) {
            t->lost++;
            return NULL;
        }
        t->ev = ev;
        t->cap = cap;
    }
    llm4d_trace_event *e = &t->ev[t->n++];
    e->t0 = t0;
    e->t1 = t1;
    e->a = e->b = e->c = -1;
    e->kind = (uint8_t)kind;
    const size_t k = strnlen(name, sizeof e->name - 1); /* truncated to fit */
    memcpy(e->name, name, k);
    e->name[k] = 0;
    e->group[0] = 0;
    t->written = 0;
    return e;
}

double llm4d_trace_record_span(llm4d_trace *t, llm4d_trace_kind kind, const char *name, int64_t a, double t0) {
    const double now = llm4d_now();
    llm4d_trace_event *e = llm4d_trace_add(t, kind, name, t0, now);
    if (e) e->a = a;
    return now;
}

double llm4d_trace_record_pass(llm4d_trace *t, llm4d_trace_kind kind, int mb, int chunk, double t0) {
    const double now = llm4d_now();
    static const char letter[] = {[LLM4D_TR_FORWARD] = 'F', [LLM4D_TR_BACKWARD] = 'B', [LLM4D_TR_WEIGHT] = 'W'};
    char name[24];
    if (chunk >= 0) snprintf(name, sizeof name, "%c%d.%d", letter[kind], mb, chunk);
    else snprintf(name, sizeof name, "%c%d", letter[kind], mb);
    llm4d_trace_event *e = llm4d_trace_add(t, kind, name, t0, now);
    if (e) e->a = mb, e->b = chunk;
    return now;
}

/* ---- writing ---- */

/* s as the body of a JSON string (quotes, backslashes and control characters escaped). */
static void put_string(FILE *f, const char *s) {
    for (; *s; s++) {
        const unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
}

/* Nanoseconds since the origin: whole numbers, so a child's rounded span stays inside its parent's. */
static int64_t ns_of(const llm4d_trace *t, double when) { return llround((when - t->origin) * 1e9); }

/* Parents before their children: by start, then the longer first. */
static int by_start(const void *pa, const void *pb) {
    const llm4d_trace_event *a = pa, *b = pb;
    if (a->t0 != b->t0) return a->t0 < b->t0 ? -1 : 1;
    if (a->t1 != b->t1) return a->t1 > b->t1 ? -1 : 1;
    return 0;
}

static void put_args(FILE *f, const llm4d_trace_event *e) {
    switch ((llm4d_trace_kind)e->kind) {
    case LLM4D_TR_FORWARD:
    case LLM4D_TR_BACKWARD:
    case LLM4D_TR_WEIGHT:
        fprintf(f, "{\"mb\": %" PRId64, e->a);
        if (e->b >= 0) fprintf(f, ", \"chunk\": %" PRId64, e->b);
        fputc('}', f);
        return;
    case LLM4D_TR_COMM:
    case LLM4D_TR_WAIT:
        fprintf(f, "{\"group\": \"");
        put_string(f, e->group);
        fputc('"', f);
        if (e->a >= 0) fprintf(f, ", \"bytes\": %" PRId64, e->a);
        if (e->b >= 0) fprintf(f, ", \"peer\": %" PRId64, e->b);
        if (e->c > 0) fprintf(f, ", \"seq\": %" PRId64, e->c);
        fputc('}', f);
        return;
    default:
        fprintf(f, "{\"step\": %" PRId64 "}", e->a);
    }
}

llm4d_code llm4d_trace_write(llm4d_trace *t, llm4d_err *err) {
    qsort(t->ev, t->n, sizeof *t->ev, by_start);
    char tmp[sizeof t->path + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", t->path);
    FILE *f = fopen(tmp, "w");
    if (!f) return llm4d_fail(err, LLM4D_EUSER, "cannot write the trace %s: %s; choose a writable --trace directory",
                              tmp, strerror(errno));
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"rank\": %d, \"steps\": [%" PRId64 ", %" PRId64 "], "
            "\"lost_spans\": %" PRId64 "%s%s},\n\"traceEvents\": [\n", t->rank, t->first,
            t->last == INT64_MAX ? (int64_t)-1 : t->last, t->lost, t->other[0] ? ", " : "", t->other);
    /* metadata: the process's name and place in a merged view, the thread's name */
    fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"ts\": 0, \"pid\": %d, \"tid\": 0, \"args\": {\"name\": "
            "\"", t->rank);
    put_string(f, t->process);
    fprintf(f, "\"}},\n{\"name\": \"process_sort_index\", \"ph\": \"M\", \"ts\": 0, \"pid\": %d, \"tid\": 0, \"args\": "
            "{\"sort_index\": %d}},\n{\"name\": \"thread_name\", \"ph\": \"M\", \"ts\": 0, \"pid\": %d, \"tid\": 0, "
            "\"args\": {\"name\": \"main (computes, calls MPI)\"}}", t->rank, t->rank, t->rank);
    for (size_t i = 0; i < t->n; i++) {
        const llm4d_trace_event *e = &t->ev[i];
        const int64_t ns0 = ns_of(t, e->t0), ns1 = ns_of(t, e->t1);
        fprintf(f, ",\n{\"name\": \"");
        put_string(f, e->name);
        /* whole nanoseconds below 2^53 print exactly as microseconds with three decimals */
        fprintf(f, "\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, \"pid\": %d, \"tid\": 0, "
                "\"args\": ", kind_cat[e->kind], (double)ns0 / 1000, (double)(ns1 - ns0) / 1000, t->rank);
        put_args(f, e);
        fputc('}', f);
    }
    fprintf(f, "\n]}\n");
    const int bad = ferror(f);
    if (fclose(f) != 0 || bad || rename(tmp, t->path) != 0) {
        const int e = errno;
        remove(tmp);
        return llm4d_fail(err, LLM4D_EUSER, "cannot write the trace %s: %s; choose a writable --trace directory",
                          t->path, strerror(e));
    }
    t->written = 1;
    return LLM4D_OK;
}
