/* test_trace.c — the trace recorder (core/trace.h) and the communicator's hook into it (comm/comm_trace.h), in one
 * process, without a model:
 *   - --trace_steps: the accepted forms and the refused ones (one line, a user error);
 *   - off costs nothing: a NULL trace and an unarmed one record nothing and read no clock;
 *   - armed, spans and passes are named as the schedule lists name actions (F3, B2.1, W0) with their numbers;
 *   - a collective on a communicator whose watch carries the trace is a span naming the operation, its group and
 *     payload bytes; a non-blocking operation's wait names what it finished; tests (polls) are not recorded;
 *   - the file parses as JSON with every event carrying ph, ts, pid and tid, spans sorted parents first, and
 *     spans that nest in time still nest after rounding to the file's nanoseconds (a child ending a fraction of a
 *     nanosecond before its parent, both rounded);
 *   - a directory that cannot be written is refused at creation with one line naming it;
 *   - a recorded pass costs well under 2 us (two clock reads and a record; no I/O, no formatting).
 * The file is read back with cJSON, an independent parser. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "comm/comm.h"
#include "comm/comm_trace.h"
#include "core/trace.h"

static void steps_cases(void) {
    const struct {
        const char *text;
        int64_t first, last;
    } good[] = {{"5-6", 5, 6}, {"5", 5, 5}, {"5-", 5, INT64_MAX}, {"1-1000000", 1, 1000000}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int64_t a = 0, b = 0;
        llm4d_err err = {0};
        const llm4d_code rc = llm4d_trace_parse_steps(good[i].text, &a, &b, &err);
        check(rc == LLM4D_OK && a == good[i].first && b == good[i].last, "trace_steps '%s' -> %lld..%lld",
              good[i].text, (long long)a, (long long)b);
    }
    const char *bad[] = {"", "abc", "0", "0-3", "6-5", "5-6x", "-3", "1-2-3", "5 - 6", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t a, b;
        llm4d_err err = {0};
        const llm4d_code rc = llm4d_trace_parse_steps(bad[i], &a, &b, &err);
        check(rc == LLM4D_EUSER && strstr(err.msg, "--trace_steps 5-6") && !strchr(err.msg, '\n'),
              "trace_steps '%s' refused: %s", bad[i], err.msg);
    }
}

static cJSON *read_json(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    static char buf[1 << 20];
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return cJSON_Parse(buf);
}

static const cJSON *event_named(const cJSON *events, const char *name) {
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        const cJSON *n = cJSON_GetObjectItem(e, "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name)) return e;
    }
    return NULL;
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static double arg(const cJSON *e, const char *key) { return num(cJSON_GetObjectItem(e, "args"), key); }

int main(void) {
    steps_cases();

    /* off: NULL, and created but not armed */
    check(llm4d_trace_now(NULL) == 0 && llm4d_trace_span(NULL, LLM4D_TR_OPTIM, "x", 1, 5) == 0 &&
              llm4d_trace_pass(NULL, LLM4D_TR_FORWARD, 0, -1, 5) == 0,
          "a NULL trace records nothing and reads no clock");
    char dir[] = "/tmp/llm4d_test_trace_XXXXXX";
    if (!mkdtemp(dir)) return fprintf(stderr, "mkdtemp failed\n"), 1;
    char sub[sizeof dir + 16];
    snprintf(sub, sizeof sub, "%s/t", dir);
    llm4d_trace *t = NULL;
    llm4d_err err = {0};
    const double origin = llm4d_now();
    const llm4d_trace_process me = {3, "rank 3 (test)", "\"who\": \"test_trace\""};
    check(llm4d_trace_create(&t, sub, &me, 2, 3, origin, &err) == LLM4D_OK,
          "created a trace of steps 2-3 in a new directory: %s", err.msg);
    if (!t) return check_summary();
    llm4d_trace_arm(t, 1);
    check(llm4d_trace_now(t) == 0 && llm4d_trace_span(t, LLM4D_TR_OPTIM, "x", 1, 5) == 0 && t->n == 0,
          "step 1 (not traced): nothing recorded");

    /* armed: a step with passes, an optimizer span and communication on a self communicator carrying the trace */
    llm4d_trace_arm(t, 2);
    llm4d_comm *world = NULL;
    llm4d_comm_watch watch;
    llm4d_watch_init(&watch, 0, NULL, &err);
    const int made = llm4d_comm_self_create("world", &world, &err) == LLM4D_OK &&
                     llm4d_comm_watch_world(world, &watch, &err) == LLM4D_OK;
    watch.trace = t;
    const double s0 = llm4d_now();
    const double f0 = llm4d_trace_now(t);
    const double b0 = llm4d_trace_pass(t, LLM4D_TR_FORWARD, 3, -1, f0);
    double x[4] = {1, 2, 3, 4};
    int polled = 0;
    if (made) {
        llm4d_comm_allreduce(world, x, 4, LLM4D_COMM_F64, &err);
        llm4d_comm_req req = {0};
        llm4d_comm_iallreduce(world, x, 2, LLM4D_COMM_F32, &req, &err);
        llm4d_comm_test(&req, &polled, &err);
        llm4d_comm_req req2 = {0};
        llm4d_comm_iallreduce(world, x, 3, LLM4D_COMM_F32, &req2, &err);
        llm4d_comm_wait(&req2, &err);
    }
    const double w0 = llm4d_trace_pass(t, LLM4D_TR_BACKWARD, 2, 1, b0);
    llm4d_trace_pass(t, LLM4D_TR_WEIGHT, 0, -1, w0);
    llm4d_trace_span(t, LLM4D_TR_OPTIM, "optimizer", 2, llm4d_trace_now(t));
    llm4d_trace_record_span(t, LLM4D_TR_STEP, "step 2", 2, s0);
    /* a parent and a child whose ends differ by a fraction of a nanosecond, and a child starting with its parent */
    llm4d_trace_add(t, LLM4D_TR_STEP, "parent", origin + 10.0000000004, origin + 10.0000010006);
    llm4d_trace_add(t, LLM4D_TR_DATA, "child", origin + 10.0000000004, origin + 10.0000010004);
    for (int i = 0; i < 6000; i++)
        llm4d_trace_add(t, LLM4D_TR_DATA, "many", origin + 20 + i * 1e-6, origin + 20 + i * 1e-6);
    check(t->lost == 0 && t->n == 6000 + 2 + 9, "every span kept as the array grew: %zu spans", t->n);
    /* what a span costs when recording (two clock reads and a record; bench/bench_trace.sh has the whole step):
     * loose enough for a loaded machine, tight enough to catch I/O or formatting per span */
    const size_t before = t->n;
    const double c0 = llm4d_now();
    for (int i = 0; i < 100000; i++) llm4d_trace_pass(t, LLM4D_TR_FORWARD, i & 7, -1, llm4d_trace_now(t));
    const double per = (llm4d_now() - c0) / 100000;
    check(per < 2e-6 && t->n == before + 100000, "a recorded pass costs %.0f ns (under 2 us)", per * 1e9);
    while (t->n < LLM4D_TRACE_MAX_SPANS && llm4d_trace_add(t, LLM4D_TR_DATA, "full", origin + 30, origin + 30)) {}
    for (int i = 0; i < 5; i++) /* past the cap: kept no more, counted */
        llm4d_trace_add(t, LLM4D_TR_DATA, "full", origin + 30, origin + 30);
    check(t->n == LLM4D_TRACE_MAX_SPANS && t->lost == 5, "at most %d spans kept, the rest counted as lost (%zu kept, "
          "%lld lost)", LLM4D_TRACE_MAX_SPANS, t->n, (long long)t->lost);
    t->n = before;
    t->lost = 0;
    check(llm4d_trace_write(t, &err) == LLM4D_OK, "written: %s", err.msg);

    cJSON *doc = read_json(t->path);
    const cJSON *events = cJSON_GetObjectItem(doc, "traceEvents");
    check(cJSON_IsArray(events), "%s parses as JSON with a traceEvents array", t->path);
    int all = 1, n = 0, sorted = 1, nested = 1;
    double prev_ts = -1, stack_end[64];
    int depth = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        n++;
        all &= cJSON_IsString(cJSON_GetObjectItem(e, "ph")) && cJSON_IsNumber(cJSON_GetObjectItem(e, "ts")) &&
               num(e, "pid") == 3 && num(e, "tid") == 0;
        if (strcmp(cJSON_GetObjectItem(e, "ph")->valuestring, "X")) continue;
        const long long ts = llround(num(e, "ts") * 1000), end = ts + llround(num(e, "dur") * 1000);
        sorted &= ts >= prev_ts;
        prev_ts = (double)ts;
        while (depth && stack_end[depth - 1] <= ts && !(stack_end[depth - 1] == ts && end == ts)) depth--;
        if (depth) nested &= end <= stack_end[depth - 1];
        if (depth < 64) stack_end[depth++] = (double)end;
    }
    check(all && n == (int)t->n + 3, "all %d events have ph, ts, pid 3 and tid 0 (3 metadata events)", n);
    check(sorted && nested, "spans sorted by start and nested (each inside the one enclosing its start)");
    const cJSON *pn = event_named(events, "process_name");
    check(pn && !strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(pn, "args"), "name")->valuestring, "rank 3 (test)"),
          "the process is named");
    const cJSON *other = cJSON_GetObjectItem(doc, "otherData");
    check(num(other, "rank") == 3 && cJSON_IsString(cJSON_GetObjectItem(other, "who")), "otherData has the rank and "
          "the caller's members");
    const cJSON *f3 = event_named(events, "F3"), *b21 = event_named(events, "B2.1"), *w0e = event_named(events, "W0");
    check(f3 && b21 && w0e && arg(f3, "mb") == 3 && isnan(arg(f3, "chunk")) && arg(b21, "mb") == 2 &&
              arg(b21, "chunk") == 1 && !strcmp(cJSON_GetObjectItem(b21, "cat")->valuestring, "compute"),
          "passes named F3, B2.1, W0 with their micro-batch and chunk");
    const cJSON *ar = event_named(events, "allreduce"), *wt = event_named(events, "wait iallreduce");
    const cJSON *group = ar ? cJSON_GetObjectItem(cJSON_GetObjectItem(ar, "args"), "group") : NULL;
    check(ar && arg(ar, "bytes") == 32 && cJSON_IsString(group) && !strcmp(group->valuestring, "world:0/1") &&
              arg(ar, "seq") == 1,
          "the blocking all-reduce: group world:0/1, 32 payload bytes (4 doubles), collective #1");
    int posts = 0, tests = 0;
    cJSON_ArrayForEach(e, events) {
        posts += !strcmp(cJSON_GetObjectItem(e, "name")->valuestring, "iallreduce");
        tests += !strcmp(cJSON_GetObjectItem(e, "name")->valuestring, "test");
    }
    const cJSON *post = event_named(events, "iallreduce");
    check(made && posts == 2 && post && arg(post, "bytes") == 8 && tests == 0,
          "two non-blocking posts (the first of 8 bytes), no test recorded (%d posts, %d tests)", posts, tests);
    check(wt && !strcmp(cJSON_GetObjectItem(wt, "cat")->valuestring, "wait") && isnan(arg(wt, "bytes")),
          "the wait names the operation it finished (wait iallreduce)");
    const cJSON *parent = event_named(events, "parent"), *child = event_named(events, "child");
    check(parent && child && num(child, "ts") >= num(parent, "ts") &&
              llround((num(child, "ts") + num(child, "dur")) * 1000) <=
                  llround((num(parent, "ts") + num(parent, "dur")) * 1000),
          "a child ending 0.2 ns before its parent still ends inside it in the file");
    cJSON_Delete(doc);
    llm4d_comm_destroy(world);
    remove(t->path);
    llm4d_trace_destroy(t);

    /* a directory that cannot be created: a path under a regular file */
    char file[sizeof dir + 16], bad[sizeof dir + 32];
    snprintf(file, sizeof file, "%s/file", dir);
    FILE *fp = fopen(file, "w");
    if (fp) fclose(fp);
    snprintf(bad, sizeof bad, "%s/sub", file);
    llm4d_trace *u = NULL;
    err = (llm4d_err){0};
    const llm4d_code rc = llm4d_trace_create(&u, bad, &(llm4d_trace_process){0, "p", ""}, 1, 1, 0, &err);
    check(rc == LLM4D_EUSER && !u && strstr(err.msg, bad) && strstr(err.msg, "choose a writable --trace directory"),
          "an unwritable --trace directory refused: %s", err.msg);
    remove(file);
    rmdir(sub);
    rmdir(dir);
    return check_summary();
}
