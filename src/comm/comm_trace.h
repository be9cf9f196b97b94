/* comm_trace.h — the communicator's spans in a trace (core/trace.h).
 *
 * Every communication call of llm4d goes through comm.c's wrappers, so the wrappers are where a trace sees each
 * collective and point-to-point transfer, with its group and bytes, whoever called it (the engines, the pipeline,
 * the trainer). The trace rides on the process's watch (watch.h), which every communicator of the job carries:
 * no communicator or engine needs a new field, and with tracing off (watch->trace NULL) each hook is one test of a
 * pointer. Two hooks, both in comm.c: the payload of the call being started (account), and the span of the call
 * when it returns (done). What the flight recorder already knows about the operation (its peer, its number on the
 * group, and for a wait which operation it finished) is read from the watch's ring rather than passed again. */
#ifndef LLM4D_COMM_COMM_TRACE_H
#define LLM4D_COMM_COMM_TRACE_H

#include "comm/comm.h"
#include "core/trace.h"

/* The trace of c's process (NULL: tracing off). */
static inline llm4d_trace *llm4d_comm_tracer(const llm4d_comm *c) { return c->watch ? c->watch->trace : NULL; }

/* The payload of the operation c is starting. */
static inline void llm4d_comm_trace_bytes(const llm4d_comm *c, uint64_t bytes) {
    llm4d_trace *t = llm4d_comm_tracer(c);
    if (llm4d_trace_on(t)) t->pending_bytes = bytes;
}

void llm4d_comm_trace_record(llm4d_comm *c, const char *what, double t0);
/* The call `what` on c, begun at t0, returns now. */
static inline void llm4d_comm_trace(llm4d_comm *c, const char *what, double t0) {
    if (llm4d_trace_on(llm4d_comm_tracer(c))) llm4d_comm_trace_record(c, what, t0);
}

#endif
