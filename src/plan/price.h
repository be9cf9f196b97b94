/* price.h — seconds of recorded calls and of collectives, read from a machine profile (plan/profile.h).
 *
 * A kernel call is priced, in order of preference, by: the profile's measurement of exactly that call (method,
 * sizes, dropout, threads, precision); the same call measured at another thread count, scaled by the profile's
 * rates at the two counts; in a machine profile (a grid of shapes: plan/grid.h), interpolation log-log in work
 * between the nearest measured calls of the same method and flags on either side of the call's work (FLOP for
 * GEMMs and attention, bytes for the rest), at the nearest thread count measured scaled by the profile's rates
 * (one side only: that call scaled by work); the measured call of the same method nearest in sizes (log distance), at its rate
 * (FLOP/s for GEMMs and attention, bytes/s for the rest); the profile's fallback rates. A collective is
 * interpolated in bytes between the profile's measured sizes for its kind, group size, ranks on the host and hosts
 * spanned (the nearest measured ranks on the host when that count was not measured), else latency + ring bytes /
 * bandwidth. The share functions say how much slower work runs when ranks share a host's cores. */
#ifndef LLM4D_PLAN_PRICE_H
#define LLM4D_PLAN_PRICE_H

#include "plan/profile.h"
#include "plan/record.h"

typedef struct {
    const llm4d_profile *prof;
    int threads; /* per rank */
    int prec;    /* llm4d_precision */
} llm4d_pricer;

/* How a call was priced (for --explain and the tests). */
typedef enum {
    LLM4D_PRICE_EXACT = 0, LLM4D_PRICE_THREADS, LLM4D_PRICE_NEAREST, LLM4D_PRICE_FALLBACK,
    LLM4D_PRICE_GRID /* a machine profile's grid (profile.h machine), interpolated in work */
} llm4d_price_how;

/* Seconds of call c on one rank running alone, added to s[kind] by the backend's kinds of work; returns how. */
llm4d_price_how llm4d_price_call(const llm4d_pricer *pr, const llm4d_rc_call *c, double s[LLM4D_WORK_N]);

/* Seconds of one collective (llm4d_comm_op: ALLREDUCE, REDUCE_SCATTER, ALLGATHER; SEND: one message to a
 * neighbour) of `bytes` (the whole buffer: profile.h) over `group` ranks, with ranks_on_host ranks of the job on a
 * host and the group spanning `hosts` hosts; temp (may be NULL) receives the bytes the library allocates for it on
 * the group's first rank [0], its other even ranks [1] and its odd ranks [2] (llm4d_coll_temp_of picks). */
double llm4d_price_coll(const llm4d_profile *p, int op, double bytes, int group, int ranks_on_host, int hosts,
                        double temp[3]);
/* Which of llm4d_price_coll's temporaries the group's rank `index` holds. */
static inline double llm4d_coll_temp_of(const double temp[3], int index) {
    return temp[index == 0 ? 0 : index % 2 ? 2 : 1];
}

/* The ranks of `threads` threads that fill the profile's cores (at least 1). */
int llm4d_price_fill(const llm4d_profile *p, int threads);

/* The processor time a blocking wait of a `group`-rank collective burns, expected, on a host whose ranks' threads
 * outnumber its cores: the profile's pair wait measured at (about) this many ranks, for a larger group scaled by
 * the chance that the cores do not run the whole group at once against a pair's; without one, wait_cpu_s (a wait
 * for a member descheduled) times that chance. Time the ranks still computing lose, so a stage counts it with its
 * kernels, slowed by the host's time-slicing as they are; 0 where the cores suffice (a waiting rank then takes no
 * one's core). */
double llm4d_price_wait(const llm4d_profile *p, int threads, int ranks_on_host, int group);

/* The slowdown of each kind of work (time over the time alone) when `active` ranks of `threads` threads compute at
 * once on a host of the profile's cores: the measured shares where the host is not oversubscribed, and beyond
 * its cores the time-slicing (threads over cores) on top of the share at full occupancy. */
void llm4d_price_share(const llm4d_profile *p, int threads, int active, double slow[LLM4D_WORK_N]);

/* The bus-bandwidth cost of a collective in bytes moved per rank (ring algorithms: profile.h's byte convention). */
double llm4d_coll_ring_bytes(int op, double bytes, int group);

#endif
