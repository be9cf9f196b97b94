/* shm_footprint.c — how much of a shared-memory segment (comm_shm.h) a rank makes resident, for the memory plan.
 *
 * A segment holds, per rank, two slots of S bytes; the kernel counts a page of it in a process's resident set once
 * that process has written or read it, so what a rank holds depends on which parts of which slots its collectives
 * touch, not on the segment's size: on 16 ranks an all-reduce touches about 3/16 of each peer's slots, an
 * all-gather all of them. Per slot parity (consecutive chunks alternate; any two collectives use both), with c the
 * bytes of a chunk (a collective shorter than a chunk: all of it) and n ranks:
 *   all-reduce, one phase (<= LLM4D_SHM_SMALL_BYTES)  own slot [0, c); every peer's [0, c) (each rank sums all)
 *   all-reduce, fused                                  own slot [0, c) (the peers' pieces in, its own sum); from
 *                                                      each peer its own piece (to sum) and the peer's (the sum)
 *   reduce-scatter                                     own slot: the n - 1 pieces of its peers; from each peer its
 *                                                      own piece
 *   all-gather                                         own slot [0, c); every peer's [0, c)
 * where a piece is c / n rounded up to cache lines and a chunk of an all-reduce or reduce-scatter is n pieces of
 * S / n rounded down to cache lines (an all-gather's is S). Regions are counted in whole pages; the header is one
 * page or a few. Measured with tests/test_plan.sh against the peak resident set of 2-rank runs. */
#include "comm/comm_shm.h"

#define PAGE ((size_t)4096)

static size_t pages(size_t b) { return (b + PAGE - 1) / PAGE * PAGE; }
static size_t min_z(size_t a, size_t b) { return a < b ? a : b; }
static size_t max_z(size_t a, size_t b) { return a > b ? a : b; }

size_t llm4d_shm_resident(int n, size_t slot_bytes, llm4d_shm_use use) {
    if (n < 2) return 0;
    const size_t S = slot_bytes ? (slot_bytes + PAGE - 1) & ~(PAGE - 1) : LLM4D_SHM_SLOT_BYTES;
    const size_t N = (size_t)n, line = LLM4D_SHM_LINE;
    const size_t piece_max = S / N / line * line, chunk = piece_max * N; /* a fused or reduce-scatter chunk */
    size_t own = 0, peer = 0; /* bytes of the own slot and of each peer's slot touched, per parity */
    if (use.allreduce && use.allreduce <= LLM4D_SHM_SMALL_BYTES && use.allreduce <= S) {
        own = max_z(own, use.allreduce);
        peer = max_z(peer, use.allreduce);
    } else if (use.allreduce) {
        const size_t c = min_z(use.allreduce, chunk), piece = ((c + N - 1) / N + line - 1) / line * line;
        own = max_z(own, c);
        peer = max_z(peer, 2 * pages(min_z(piece, c))); /* two pieces apart */
    }
    if (use.rs_block) {
        const size_t p = min_z(use.rs_block, piece_max);
        own = max_z(own, (N - 1) * p);
        peer = max_z(peer, pages(p));
    }
    if (use.ag_block) {
        const size_t c = min_z(use.ag_block, S);
        own = max_z(own, c);
        peer = max_z(peer, c);
    }
    return llm4d_shm_head_bytes(n) + 2 * (pages(own) + (N - 1) * pages(min_z(peer, S)));
}
