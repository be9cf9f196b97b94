/* trace.h — per-rank timelines of chosen training steps, in Chrome's Trace Event format.
 *
 * metrics.jsonl says how long each step took and how much of it went to each kind of work; it cannot say in
 * which order things ran, nor which rank waited for which. A timeline can: `--trace DIR --trace_steps 5-6` makes
 * every rank write DIR/trace.rank<R>.json after step 6, the Trace Event JSON that chrome://tracing, Perfetto and
 * the PyTorch profiler's export use. Each file is one process (pid = world rank) with one thread (tid 0: the
 * thread that calls MPI, which records every span), so the files of a job merged into one (`llm4d report
 * --merge_trace`) show the pipeline schedule as the papers draw it: a row per stage, F, B and W boxes per
 * micro-batch and chunk, the gaps between them the bubble.
 *
 * What is recorded (complete events, ph "X", that nest): the step; its data read; the forward, backward and
 * weight passes per micro-batch (and chunk, in a pipeline); every communication call, with its group and payload
 * bytes (a non-blocking operation's post, then the wait that finishes it, naming what it waited for); the
 * optimizer (gradient norm, clipping, AdamW); a checkpoint save. Communication is recorded by the communicator
 * itself (comm/comm_trace.h), which reaches the trace through the process's watch (comm/watch.h), the object every
 * communicator of the job already carries.
 *
 * Cost: tracing off, the trainer holds NULL and every hook is one test of a pointer (no clock read: the
 * llm4d_trace_now below returns 0 without reading it). On, in a step that is not traced, one more test of a flag.
 * In a traced step a span is two clock reads and a fixed-size record appended to an array that grows by doubling
 * (no I/O, no formatting); the file is formatted and written once, after the last traced step.
 *
 * Timestamps are microseconds since an origin every rank of the job agrees on (the earliest wall-clock time at
 * which a rank opened its trace, converted to each rank's monotonic clock), so the files of one job line up.
 * Durations are computed from timestamps rounded to whole nanoseconds, so a span inside another stays inside it
 * in the file. Nothing here is global: the trace is a value owned by the trainer. */
#ifndef LLM4D_CORE_TRACE_H
#define LLM4D_CORE_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/timer.h"

/* The most spans a trace keeps (about 27 MB): later ones are counted as lost, not kept, so tracing "5-" (to the
 * end) of a long run cannot take the host's memory; viewers do not open much larger files anyway. */
#define LLM4D_TRACE_MAX_SPANS (1 << 18)

/* What a span is; its category in the file ("cat") and the meaning of its numbers a, b, c. */
typedef enum {
    LLM4D_TR_STEP = 0, /* cat "step":       a the step */
    LLM4D_TR_DATA,     /* cat "data":       a the step (reading its batch) */
    LLM4D_TR_FORWARD,  /* cat "compute":    a micro-batch, b chunk (-1: no pipeline chunks) */
    LLM4D_TR_BACKWARD, /* cat "compute":    the same (a pipeline's split backward: the input gradient only) */
    LLM4D_TR_WEIGHT,   /* cat "compute":    the same, the weight-gradient pass of a split backward */
    LLM4D_TR_COMM,     /* cat "comm":       a payload bytes, b peer (-1: none), c the group's collective number */
    LLM4D_TR_WAIT,     /* cat "wait":       the same, for the wait that finishes a non-blocking operation */
    LLM4D_TR_OPTIM,    /* cat "optimizer":  a the step */
    LLM4D_TR_CKPT,     /* cat "checkpoint": a the step saved */
    LLM4D_TR_NKINDS
} llm4d_trace_kind;

typedef struct {
    double t0, t1;     /* llm4d_now() */
    int64_t a, b, c;
    uint8_t kind;      /* llm4d_trace_kind */
    char name[23];     /* "F3", "B2.1", "allreduce", "wait irecv" */
    char group[40];    /* communication: the group's key ("dp:0/2", comm.h) */
} llm4d_trace_event;

typedef struct llm4d_trace {
    int on;                   /* a traced step is running: record */
    int64_t first, last;      /* the steps to trace */
    int rank;
    double origin;            /* the llm4d_now() value written as ts 0 */
    llm4d_trace_event *ev;
    size_t n, cap;
    int64_t lost;             /* spans dropped: past LLM4D_TRACE_MAX_SPANS or out of memory (said in the file) */
    int written;              /* the file holds every span recorded so far */
    uint64_t pending_bytes;   /* the payload of the communication call being started (comm_trace.h) */
    char path[1100];          /* DIR/trace.rank<R>.json */
    char process[160];        /* the process's name in viewers: "rank 3 (dp 0, pp 1, sharding 0, mp 1)" */
    char other[512];          /* a JSON object's members for "otherData" (the version, the rank's coordinates) */
} llm4d_trace;

/* "5-6", "5" (one step) or "5-" (from 5 to the end): the first and last step to trace. A user error naming the
 * expected form otherwise (steps count from 1). */
llm4d_code llm4d_trace_parse_steps(const char *text, int64_t *first, int64_t *last, llm4d_err *err);

/* The process a trace is of: its world rank, its name in viewers and the members of "otherData" (see the struct;
 * other may be ""). */
typedef struct {
    int rank;
    const char *name;
    const char *other;
} llm4d_trace_process;

/* A trace of steps [first, last] of process p, written to dir/trace.rank<rank>.json: dir is created, and a user
 * error (naming the directory and the fix) when it cannot be or the file cannot be written there. origin: the
 * llm4d_now() value of timestamp 0. */
llm4d_code llm4d_trace_create(llm4d_trace **out, const char *dir, const llm4d_trace_process *p, int64_t first,
                              int64_t last, double origin, llm4d_err *err);
void llm4d_trace_destroy(llm4d_trace *t); /* NULL is fine */

static inline int llm4d_trace_on(const llm4d_trace *t) { return t && t->on; }
/* The clock when recording, 0 otherwise (a hook's start time costs nothing when off). */
static inline double llm4d_trace_now(const llm4d_trace *t) { return llm4d_trace_on(t) ? llm4d_now() : 0; }
/* Record from now on when step is one of the traced steps, stop otherwise. */
static inline void llm4d_trace_arm(llm4d_trace *t, int64_t step) {
    if (t) t->on = step >= t->first && step <= t->last;
}

/* Append a span (t must be recording); NULL when the trace is full or the array cannot grow (the span is counted as
 * lost). The name is truncated to fit. */
llm4d_trace_event *llm4d_trace_add(llm4d_trace *t, llm4d_trace_kind kind, const char *name, double t0, double t1);

/* A span of kind from t0 to now, with number a (the step, for STEP, DATA, OPTIM and CKPT). Returns now (0 when
 * not recording), so passes can be chained. */
double llm4d_trace_record_span(llm4d_trace *t, llm4d_trace_kind kind, const char *name, int64_t a, double t0);
static inline double llm4d_trace_span(llm4d_trace *t, llm4d_trace_kind kind, const char *name, int64_t a, double t0) {
    return llm4d_trace_on(t) ? llm4d_trace_record_span(t, kind, name, a, t0) : 0;
}
/* A forward, backward or weight pass of micro-batch mb (chunk: -1 without pipeline chunks) from t0 to now, named
 * as schedule.h's lists name actions ("F3", "B3.1"). Returns now (0 when not recording). */
double llm4d_trace_record_pass(llm4d_trace *t, llm4d_trace_kind kind, int mb, int chunk, double t0);
static inline double llm4d_trace_pass(llm4d_trace *t, llm4d_trace_kind kind, int mb, int chunk, double t0) {
    return llm4d_trace_on(t) ? llm4d_trace_record_pass(t, kind, mb, chunk, t0) : 0;
}

/* Write every span recorded so far to the file (replacing it). A user error naming the path when it fails. */
llm4d_code llm4d_trace_write(llm4d_trace *t, llm4d_err *err);


#endif
