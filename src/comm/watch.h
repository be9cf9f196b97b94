/* watch.h — the communication watchdog and flight recorder.
 *
 * A rank that stops answering (stopped, stuck in a kernel, its host gone quiet) leaves its peers waiting in their
 * next collective forever: MPI has no deadline. So every communication wait of llm4d goes through here: the
 * wrappers of comm.c start each operation non-blocking and poll it, and an operation that has not completed
 * within the watch's timeout ends the job with a line naming the operation, its group and member ranks, the step,
 * and which ranks did not arrive. The timeout is generous for start-up and the first step (loading, first-touch
 * allocation, a slow first save) and tighter afterwards, as torchtitan's is; the trainer sets it per phase.
 *
 * Which ranks did not arrive: each rank keeps a progress board, a small file (`progress.<world rank>` in the
 * directory LLM4D_PROGRESS_DIR names; `llm4d launch` sets it to its log directory) mapped into memory, holding its
 * step, the operation it is in (or "computing") and, per communicator, how many collectives it has entered. The
 * rank that times out reads its peers' boards: a member that entered fewer collectives on that group has not
 * arrived, and its board says where it is instead. Boards cost a few stores per operation; ranks on another host
 * without a shared log directory are reported as not visible. Under plain mpirun there is no board and the line
 * lists the group's ranks.
 *
 * The flight recorder is a ring of each rank's last LLM4D_FLIGHT_N operations (kind, group, sequence number,
 * peer, elements, step, start and duration or "pending"), printed to the rank's log (stdout) when its watchdog
 * fires, so the last things a hung job did can be read from the logs.
 *
 * One watch per process, owned by the runtime and shared by every communicator split from its world (comm.h);
 * only the thread that calls MPI touches it (MPI_THREAD_FUNNELED). */
#ifndef LLM4D_COMM_WATCH_H
#define LLM4D_COMM_WATCH_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/fault.h"

#define LLM4D_FLIGHT_N 32
#define LLM4D_WATCH_COMMS 24

typedef struct {
    uint64_t num;       /* the process's operation number (0: an empty slot) */
    char op[20];        /* "allreduce", "recv", ... */
    char group[24];
    uint64_t seq;       /* the group's collective sequence number (0 for point to point) */
    int peer;           /* point to point: the peer's rank in the group; -1 for collectives */
    size_t count;       /* elements */
    int64_t step;
    double t_start;     /* llm4d_now() */
    double t_end;       /* 0: pending */
} llm4d_flight;

struct llm4d_board;

typedef struct llm4d_comm_watch {
    double timeout_s;   /* an operation not done within this ends the job; 0: waits block without a deadline */
    int64_t step;       /* the trainer's step (0: start-up) */
    int world_rank;
    llm4d_flight ring[LLM4D_FLIGHT_N];
    uint64_t n_ops;
    struct llm4d_board *board; /* this rank's board (mapped), NULL without a progress directory */
    char dir[1024];     /* the progress directory ("" without) */
    /* LLM4D_FAULT=collective@K (core/fault.h), read at the first operation: comm.c fails a collective with it */
    int fault_read, fault_fired;
    llm4d_code fault_rc;
    llm4d_err fault_err;
    llm4d_fault fault;
    struct llm4d_trace *trace; /* core/trace.h: the spans of the traced steps (comm_trace.h); NULL: tracing off */
} llm4d_comm_watch;

/* dir NULL or "": no progress board (the watchdog still fires, without saying who did not arrive). */
llm4d_code llm4d_watch_init(llm4d_comm_watch *w, int world_rank, const char *dir, llm4d_err *err);
/* Unmaps and removes this rank's board. */
void llm4d_watch_free(llm4d_comm_watch *w);
/* The phase: the step now running (0 before the first) and the timeout that applies to it. */
void llm4d_watch_set(llm4d_comm_watch *w, int64_t step, double timeout_s);

/* An operation starts: recorded in the ring and on the board (`key` names the group the same way on every
 * member; seq > 0 for collectives). Returns its number, for llm4d_watch_end. */
uint64_t llm4d_watch_begin(llm4d_comm_watch *w, const char *op, const char *group, const char *key, uint64_t seq,
                           int peer, size_t count);
/* It completed (a number no longer in the ring is ignored). */
void llm4d_watch_end(llm4d_comm_watch *w, uint64_t num);

/* The watchdog fired on an operation of a group whose members have world ranks members[0..n): writes to `who`
 * which members have not arrived (for a collective of sequence seq on `key`) or where the peer is (point to
 * point: peer >= 0, a rank of the group), and prints the flight recorder to stdout (which holds the operation). */
void llm4d_watch_report(llm4d_comm_watch *w, const char *key, uint64_t seq, int peer, const int *members, int n,
                        char *who, size_t who_n);

#endif
