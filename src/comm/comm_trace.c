/* comm_trace.c — a communication call as a span of the trace (see comm_trace.h). */
#include "comm/comm_trace.h"

#include <stdio.h>
#include <string.h>

void llm4d_comm_trace_record(llm4d_comm *c, const char *what, double t0) {
    llm4d_trace *t = c->watch->trace;
    const uint64_t bytes = t->pending_bytes;
    t->pending_bytes = 0;
    /* polls of outstanding operations: many, short, and the wait that finishes an operation is recorded anyway */
    if (!strcmp(what, "test")) return;
    const double now = llm4d_now();
    const llm4d_comm_watch *w = c->watch;
    const int waited = !strcmp(what, "wait");
    const llm4d_flight *f = NULL;
    if (waited) { /* the operation it finished: the one of this group whose end the watch has just recorded */
        for (int k = 0; k < LLM4D_FLIGHT_N; k++) {
            const llm4d_flight *g = &w->ring[k];
            if (g->num && g->t_end >= t0 && !strcmp(g->group, c->name) && (!f || g->t_end > f->t_end)) f = g;
        }
    } else { /* the operation this call began: the watch's latest */
        const llm4d_flight *g = &w->ring[w->n_ops % LLM4D_FLIGHT_N];
        if (g->num && g->num == w->n_ops && g->t_start >= t0) f = g;
    }
    char name[32];
    snprintf(name, sizeof name, "wait %s", f ? f->op : "");
    llm4d_trace_event *e = llm4d_trace_add(t, waited ? LLM4D_TR_WAIT : LLM4D_TR_COMM, waited ? name : what, t0, now);
    if (!e) return;
    snprintf(e->group, sizeof e->group, "%s", c->key[0] ? c->key : c->name);
    e->a = waited ? -1 : (int64_t)bytes;
    e->b = f ? f->peer : -1;
    e->c = f && f->seq > 0 ? (int64_t)f->seq : -1;
}
