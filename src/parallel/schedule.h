/* schedule.h — pipeline schedules as data: the list of actions each stage runs in a step.
 *
 * A pipeline of P stages runs M micro-batches through V chunks per stage (interleaving: the model is cut into P x V
 * virtual stages, virtual stage v = c P + s on stage s as its local chunk c). A schedule is, per stage, a plain
 * list of actions: compute (F forward, B backward or, split, its input-gradient half, W the weight-gradient half)
 * and communication (RECV_F / SEND_F of a chunk's input / output activation, RECV_B / SEND_B of its gradients).
 * The generator builds the compute order, then places each receive one compute action ahead of the action that
 * needs it (so it is in flight while that previous action computes) and each send right after the action that
 * produced the data; the executor (pipeline.h) runs the list with non-blocking point-to-point operations. The lists
 * are testable without a model (llm4d_pp_schedule_check simulates a whole pipeline).
 *
 * The schedules, for stage s (0-based) of P:
 *   1F1B (Narayanan et al. 2021; Megatron's default): min(P - s - 1, M) warm-up forwards, then one forward and one
 *       backward in turn, then the remaining backwards. At most P - s micro-batches alive on stage s; bubble
 *       (P - 1) / M of the ideal step (F = 1, full B = 2: (P - 1) x 3 units per stage).
 *   interleaved 1F1B (Narayanan et al. 2021, Megatron's virtual pipeline): V chunks per stage, micro-batches in
 *       groups of P; forward k runs chunk (k / P) mod V of micro-batch (k / (P V)) P + k mod P, backwards mirror it;
 *       (P - s - 1) 2 + (V - 1) P warm-up forwards. M must be a multiple of P. Bubble (P - 1) / (V M).
 *   ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", the memory-bounded handcrafted schedule): the
 *       backward split into B (input gradients, on the critical path) and W (weight gradients); F and B in 1F1B's
 *       order, and W of micro-batch j deferred until after B of micro-batch j + s, so the W's fill the tail
 *       bubble. Every stage keeps at most P micro-batches alive (stage 0 as in 1F1B; later stages hold the W
 *       stash longer); with F = B = W the bubble is (P - 1) units per stage, a third of 1F1B's. Needs M >= P.
 *   forward-only: every micro-batch's forward in order (evaluation).
 * "Alive" is from F to the end of B (W when split): the activation slots a chunk needs (peak[c]). */
#ifndef LLM4D_PARALLEL_SCHEDULE_H
#define LLM4D_PARALLEL_SCHEDULE_H

#include <stdint.h>

#include "core/error.h"
#include "model/params.h"

typedef enum {
    LLM4D_PP_F = 0, LLM4D_PP_B, LLM4D_PP_W,
    LLM4D_PP_RECV_F, LLM4D_PP_SEND_F, LLM4D_PP_RECV_B, LLM4D_PP_SEND_B
} llm4d_pp_op;

typedef enum { LLM4D_PP_1F1B = 0, LLM4D_PP_INTERLEAVED, LLM4D_PP_ZBH1, LLM4D_PP_FORWARD } llm4d_pp_kind;

/* What a schedule is, as data (schedule.c has the table): whether it splits the backward into B and W (the model
 * then keeps the linear layers' output gradients until W: gpt.h split_backward), whether it interleaves V > 1
 * chunks per stage, and what runs in its place when the run recomputes activations: ZB-H1's deferred W would need
 * the very activations recompute drops, so with recompute W runs inside the backward and ZB-H1's order is 1F1B's. */
typedef struct {
    llm4d_pp_kind kind;
    const char *name;
    int split_backward;
    int interleaved;
    llm4d_pp_kind with_recompute;
} llm4d_pp_props;

const llm4d_pp_props *llm4d_pp_props_of(llm4d_pp_kind kind);

/* Placement: virtual stage v = c P + s is local chunk c of stage s (so the model's chunks go round the stages V
 * times); its input comes from virtual stage v - 1 and its output goes to v + 1. The first virtual stage (the
 * embedding's) is on stage 0, the last (the head's) on stage P - 1. */
static inline int llm4d_pp_vstage(int P, int chunk, int stage) { return chunk * P + stage; }
static inline int llm4d_pp_stage_of(int P, int v) { return v % P; }
/* The stage of virtual stage v's neighbour before (dir -1) or after (dir +1) it, of V P virtual stages. */
static inline int llm4d_pp_neighbour(int P, int V, int v, int dir) { return (v + V * P + dir) % P; }

typedef struct {
    uint8_t op;      /* llm4d_pp_op */
    uint8_t chunk;   /* local chunk c (virtual stage c P + stage) */
    int32_t mb;      /* micro-batch */
} llm4d_pp_action;

typedef struct {
    llm4d_pp_kind kind;
    int P, V, M, stage;
    int split;                       /* B and W are separate actions */
    int n;                           /* actions */
    llm4d_pp_action *a;
    int peak[LLM4D_MAX_CHUNKS];      /* most micro-batches alive at once on each chunk: its activation slots */
    int recv_depth;                  /* most receives outstanding at once (per direction): receive buffers */
} llm4d_pp_schedule;

/* Schedule names as the config writes them: "1F1B", "interleaved" (or "Interleaved1F1B"), "ZBH1" (or "ZB-H1",
 * "zero_bubble"); case-insensitive. A user error listing the names otherwise. */
llm4d_code llm4d_pp_kind_parse(const char *name, llm4d_pp_kind *out, llm4d_err *err);
const char *llm4d_pp_kind_name(llm4d_pp_kind kind);

/* Whether M micro-batches suit the schedule (a user error saying why and what to choose otherwise). */
llm4d_code llm4d_pp_schedule_fits(llm4d_pp_kind kind, int P, int V, int M, llm4d_err *err);

/* Stage `stage`'s list. */
llm4d_code llm4d_pp_schedule_build(llm4d_pp_schedule *s, llm4d_pp_kind kind, int P, int V, int M, int stage,
                                   llm4d_err *err);
void llm4d_pp_schedule_free(llm4d_pp_schedule *s);

/* Check the P lists of one pipeline by simulating them (llm4d_pp_schedule_simulate with unit times): every action
 * and every micro-batch of every chunk appears as it should, every send meets its receive, and the pipeline
 * finishes (no deadlock). span: the simulated step time; bubble[s]: stage s's idle time (both may be NULL). */
llm4d_code llm4d_pp_schedule_check(const llm4d_pp_schedule *stages, int P, int *span, int *bubble, llm4d_err *err);

/* What a pipeline's stages cost, for llm4d_pp_schedule_simulate: cost[(s x 3 + op) x V + c] seconds of work of op
 * F, B or W (llm4d_pp_op; B is the whole backward when the schedule does not split it) of chunk c on stage s, when
 * it runs alone; p2p_s seconds from the end of a sending action to its data at the receiver; rate[k] (P + 1
 * entries, NULL: all 1) the seconds of work a computing stage does per second when k stages compute at once
 * (stages sharing a machine's cores). */
typedef struct {
    const double *cost;
    double p2p_s;
    const double *rate;
} llm4d_pp_costs;

/* Run the P lists of one pipeline in simulated time (schedule_sim.c): a stage starts its next action when its data
 * is there, sends never block; costs NULL: unit times (F = B = W = 1, a backward that is not split 2, transfers
 * free). span: the step's time; busy[s] (may be NULL): stage s's time computing. A deadlock is an internal error
 * naming where each stage is stuck. */
llm4d_code llm4d_pp_schedule_simulate(const llm4d_pp_schedule *stages, int P, const llm4d_pp_costs *costs, double *span,
                                      double *busy, llm4d_err *err);
/* The same, and end[s] (may be NULL): when stage s's last action ended (a stage done before the step's span waits no
 * more inside its schedule). */
llm4d_code llm4d_pp_schedule_simulate_ends(const llm4d_pp_schedule *stages, int P, const llm4d_pp_costs *costs,
                                           double *span, double *busy, double *end, llm4d_err *err);

/* "F3.1" style text of an action (op, micro-batch, local chunk when V > 1), for logs and tests. */
void llm4d_pp_action_str(const llm4d_pp_schedule *s, const llm4d_pp_action *a, char *buf, int n);

#endif
