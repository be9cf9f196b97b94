/* test_comm_mpi.c — the communicators against values computed by hand, under MPI or alone.
 *
 * Started by mpirun (tests/test_comm.sh runs it with -np 2 and -np 4) it checks every collective of the mpi
 * backend on the world, the groups made from 4-rank topologies (members and order, via all-gathers of world
 * ranks compared with the topology's member lists), and the byte counts against the ring formulas. Started
 * alone (as its own ctest) it runs the same program on the self backend: a world of one, where collectives are
 * identities and every byte count is zero. Rank 0 prints one line per check; other ranks print only failures;
 * the totals are summed over the world. Values are small integers and halves so float sums are exact. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/runtime.h"
#include "rank_tally.h"

static void test_collectives(rank_tally *t, llm4d_comm *w) {
    llm4d_err err = {0};
    const int n = w->size, r = w->rank;
    char what[200];
    enum { K = 1000 };

    float f[K];
    for (int i = 0; i < K; i++) f[i] = (float)r + 0.5f * (float)i;
    must(llm4d_comm_allreduce(w, f, K, LLM4D_COMM_F32, &err), &err);
    int ok = 1;
    for (int i = 0; i < K; i++) ok &= f[i] == (float)(n * (n - 1) / 2) + (float)n * 0.5f * (float)i;
    snprintf(what, sizeof what, "allreduce f32 x%d on %d ranks: sum of ranks + n*i/2", K, n);
    rank_check(t, ok, what);

    double d[3] = {r * 0.25, -1.0, 1e300 / 8};
    must(llm4d_comm_allreduce(w, d, 3, LLM4D_COMM_F64, &err), &err);
    rank_check(t, d[0] == 0.25 * n * (n - 1) / 2 && d[1] == -n && d[2] == n * (1e300 / 8), "allreduce f64");

    int64_t q[2] = {((int64_t)1 << 40) + r, -(int64_t)r * 3};
    must(llm4d_comm_allreduce(w, q, 2, LLM4D_COMM_I64, &err), &err);
    rank_check(t, q[0] == ((int64_t)n << 40) + n * (n - 1) / 2 && q[1] == -3 * (int64_t)(n * (n - 1) / 2),
          "allreduce i64 beyond 32 bits");

    /* three "buckets" in flight at once, progressed by test, finished in a different order */
    enum { NB = 3, BK = 4096 };
    static float buckets[NB][BK];
    llm4d_comm_req reqs[NB];
    memset(reqs, 0, sizeof reqs);
    for (int b = 0; b < NB; b++) {
        for (int i = 0; i < BK; i++) buckets[b][i] = (float)(r + b * 10 + i % 7);
        must(llm4d_comm_iallreduce(w, buckets[b], BK, LLM4D_COMM_F32, &reqs[b], &err), &err);
    }
    int done = 0, polls = 0;
    while (!done && polls++ < 1000000) must(llm4d_comm_test(&reqs[1], &done, &err), &err);
    ok = done && reqs[1].comm == NULL;
    must(llm4d_comm_wait(&reqs[2], &err), &err);
    must(llm4d_comm_waitall(reqs, NB, &err), &err);
    must(llm4d_comm_wait(&reqs[0], &err), &err); /* already waited: returns at once */
    for (int b = 0; b < NB; b++)
        for (int i = 0; i < BK; i++) ok &= buckets[b][i] == (float)(n * (n - 1) / 2 + n * (b * 10 + i % 7));
    rank_check(t, ok, "iallreduce: 3 buckets in flight, test until done, wait out of order, sums right");

    /* reduce-scatter: rank r's block j holds 1000*r + j*K2 + i; rank j receives block j summed */
    enum { K2 = 250 };
    float *rs_send = malloc(sizeof(float) * K2 * (size_t)n), rs_recv[K2];
    for (int j = 0; j < n; j++)
        for (int i = 0; i < K2; i++) rs_send[j * K2 + i] = (float)(1000 * r + j * K2 + i);
    must(llm4d_comm_reduce_scatter(w, rs_send, rs_recv, K2, LLM4D_COMM_F32, &err), &err);
    ok = 1;
    for (int i = 0; i < K2; i++) ok &= rs_recv[i] == (float)(1000 * n * (n - 1) / 2 + n * (r * K2 + i));
    rank_check(t, ok, "reduce_scatter f32: my block of the sum");
    llm4d_comm_req rq = {0};
    memset(rs_recv, 0, sizeof rs_recv);
    must(llm4d_comm_ireduce_scatter(w, rs_send, rs_recv, K2, LLM4D_COMM_F32, &rq, &err), &err);
    must(llm4d_comm_wait(&rq, &err), &err);
    ok = 1;
    for (int i = 0; i < K2; i++) ok &= rs_recv[i] == (float)(1000 * n * (n - 1) / 2 + n * (r * K2 + i));
    rank_check(t, ok, "ireduce_scatter f32 + wait");
    free(rs_send);

    /* all-gather: block r = 100*r + i; then in place (send = own block of recv) */
    float *ag = malloc(sizeof(float) * K2 * (size_t)n), mine[K2];
    for (int i = 0; i < K2; i++) mine[i] = (float)(100 * r + i);
    must(llm4d_comm_allgather(w, mine, ag, K2, LLM4D_COMM_F32, &err), &err);
    ok = 1;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < K2; i++) ok &= ag[j * K2 + i] == (float)(100 * j + i);
    rank_check(t, ok, "allgather f32: blocks in rank order");
    memset(ag, 0, sizeof(float) * K2 * (size_t)n);
    memcpy(ag + (size_t)r * K2, mine, sizeof mine);
    must(llm4d_comm_iallgather(w, ag + (size_t)r * K2, ag, K2, LLM4D_COMM_F32, &rq, &err), &err);
    must(llm4d_comm_wait(&rq, &err), &err);
    ok = 1;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < K2; i++) ok &= ag[j * K2 + i] == (float)(100 * j + i);
    rank_check(t, ok, "iallgather in place (send = own block of recv)");
    free(ag);

    /* broadcast from the last rank, raw bytes from rank 0 */
    int64_t b[4];
    for (int i = 0; i < 4; i++) b[i] = r == n - 1 ? 7 * i + 1 : -1;
    must(llm4d_comm_broadcast(w, b, 4, LLM4D_COMM_I64, n - 1, &err), &err);
    rank_check(t, b[0] == 1 && b[1] == 8 && b[2] == 15 && b[3] == 22, "broadcast i64 from the last rank");
    char text[16];
    snprintf(text, sizeof text, r == 0 ? "from rank zero" : "garbage %d", r);
    must(llm4d_comm_broadcast(w, text, sizeof text, LLM4D_COMM_BYTE, 0, &err), &err);
    rank_check(t, strcmp(text, "from rank zero") == 0, "broadcast raw bytes from rank 0");

    if (n > 1) {
        /* a ring with isend/irecv (both directions at once cannot deadlock), then blocking 0 -> 1 -> 0 */
        double out[64], in[64];
        for (int i = 0; i < 64; i++) out[i] = r * 1000.0 + i;
        llm4d_comm_req sr[2] = {{0}, {0}};
        int next = (r + 1) % n, prev = (r + n - 1) % n;
        must(llm4d_comm_irecv(w, in, 64, LLM4D_COMM_F64, prev, 5, &sr[0], &err), &err);
        must(llm4d_comm_isend(w, out, 64, LLM4D_COMM_F64, next, 5, &sr[1], &err), &err);
        must(llm4d_comm_waitall(sr, 2, &err), &err);
        ok = 1;
        for (int i = 0; i < 64; i++) ok &= in[i] == prev * 1000.0 + i;
        rank_check(t, ok, "isend/irecv around the ring");
        if (r == 0) {
            must(llm4d_comm_send(w, out, 64, LLM4D_COMM_F64, 1, 9, &err), &err);
            must(llm4d_comm_recv(w, in, 64, LLM4D_COMM_F64, 1, 9, &err), &err);
            rank_check(t, in[1] == 2.0 && in[63] == 126.0, "send to rank 1, receive its doubled reply");
        } else if (r == 1) {
            must(llm4d_comm_recv(w, in, 64, LLM4D_COMM_F64, 0, 9, &err), &err);
            for (int i = 0; i < 64; i++) in[i] *= 2;
            must(llm4d_comm_send(w, in, 64, LLM4D_COMM_F64, 0, 9, &err), &err);
        }
    }
    must(llm4d_comm_barrier(w, &err), &err);
}

/* The ring-cost byte counts of comm.h, on a fresh counter. */
static void test_bytes(rank_tally *t, llm4d_comm *w) {
    llm4d_err err = {0};
    const uint64_t n = (uint64_t)w->size;
    char what[200];
    llm4d_comm_stats_reset(w);
    enum { K = 1000 };
    static float a[K], big[K * 8], small[K];
    must(llm4d_comm_allreduce(w, a, K, LLM4D_COMM_F32, &err), &err);
    llm4d_comm_req rq = {0};
    must(llm4d_comm_iallreduce(w, a, K, LLM4D_COMM_F32, &rq, &err), &err);
    must(llm4d_comm_wait(&rq, &err), &err);
    must(llm4d_comm_reduce_scatter(w, big, small, K / n, LLM4D_COMM_F32, &err), &err);
    must(llm4d_comm_allgather(w, small, big, K / n, LLM4D_COMM_F32, &err), &err);
    must(llm4d_comm_broadcast(w, a, K, LLM4D_COMM_F32, 0, &err), &err);
    llm4d_comm_stats s = llm4d_comm_stats_read(w);
    uint64_t want_ar = 2 * (2 * (n - 1) * K * 4 / n);
    snprintf(what, sizeof what, "allreduce + iallreduce of 4000 B over %d ranks: %llu B = 2 x 2(n-1)/n x 4000 (%llu)",
             w->size, (unsigned long long)s.bytes[LLM4D_COMM_OP_ALLREDUCE], (unsigned long long)want_ar);
    rank_check(t, s.bytes[LLM4D_COMM_OP_ALLREDUCE] == want_ar && s.calls[LLM4D_COMM_OP_ALLREDUCE] == 2, what);
    uint64_t want_rs = (n - 1) * (K / n) * 4; /* (n-1)/n of the n blocks of input */
    snprintf(what, sizeof what, "reduce_scatter: %llu B = (n-1)/n x input (%llu)",
             (unsigned long long)s.bytes[LLM4D_COMM_OP_REDUCE_SCATTER], (unsigned long long)want_rs);
    rank_check(t, s.bytes[LLM4D_COMM_OP_REDUCE_SCATTER] == want_rs, what);
    snprintf(what, sizeof what, "allgather: %llu B = (n-1)/n x output (%llu)",
             (unsigned long long)s.bytes[LLM4D_COMM_OP_ALLGATHER], (unsigned long long)want_rs);
    rank_check(t, s.bytes[LLM4D_COMM_OP_ALLGATHER] == want_rs, what);
    uint64_t want_bc = n > 1 ? K * 4 : 0;
    snprintf(what, sizeof what, "broadcast: %llu B = payload (%llu; 0 alone)",
             (unsigned long long)s.bytes[LLM4D_COMM_OP_BROADCAST], (unsigned long long)want_bc);
    rank_check(t, s.bytes[LLM4D_COMM_OP_BROADCAST] == want_bc, what);
    rank_check(t, llm4d_comm_stats_sent(&s) == want_ar + 2 * want_rs + want_bc, "total sent = sum of the kinds");
    if (n == 1) rank_check(t, llm4d_comm_stats_sent(&s) == 0, "a world of one moves zero bytes");
    if (n > 1) {
        llm4d_comm_stats_reset(w);
        double x[10] = {0};
        int r = w->rank;
        llm4d_comm_req sr[2] = {{0}, {0}};
        must(llm4d_comm_irecv(w, x, 5, LLM4D_COMM_F64, (r + (int)n - 1) % (int)n, 1, &sr[0], &err), &err);
        must(llm4d_comm_isend(w, x + 5, 5, LLM4D_COMM_F64, (r + 1) % (int)n, 1, &sr[1], &err), &err);
        must(llm4d_comm_waitall(sr, 2, &err), &err);
        s = llm4d_comm_stats_read(w);
        rank_check(t, s.bytes[LLM4D_COMM_OP_SEND] == 40 && s.bytes[LLM4D_COMM_OP_RECV] == 40 &&
                     llm4d_comm_stats_sent(&s) == 40,
              "send 40 B counted as sent, recv 40 B counted apart");
    }
    llm4d_comm_stats_reset(w);
    s = llm4d_comm_stats_read(w);
    rank_check(t, llm4d_comm_stats_sent(&s) == 0 && s.calls[LLM4D_COMM_OP_ALLREDUCE] == 0, "reset clears the counters");
}

/* Each group of a topology: all-gathering world ranks must give the topology's member list in order, an
 * all-reduce of 1 gives the group size, and a group all-reduce is counted with the group's n. */
static void test_groups(rank_tally *t, llm4d_comm *w, int dp, int pp, int sh, int mp) {
    llm4d_err err = {0};
    llm4d_topology topo;
    must(llm4d_topology_init(&topo, w->size, w->rank, dp, pp, sh, mp, &err), &err);
    llm4d_comm_groups g;
    must(llm4d_comm_groups_create(&g, w, &topo, &err), &err);
    char what[200];
    int ok = 1;
    for (int a = 0; a <= LLM4D_NAXES; a++) {
        llm4d_comm *c = a < LLM4D_NAXES ? g.axis[a] : g.data;
        int want[64], got[64];
        if (a < LLM4D_NAXES) llm4d_topology_group_ranks(&topo, (llm4d_axis)a, want);
        else llm4d_topology_data_group_ranks(&topo, want);
        int64_t me = w->rank, gathered[64];
        must(llm4d_comm_allgather(c, &me, gathered, 1, LLM4D_COMM_I64, &err), &err);
        for (int i = 0; i < c->size; i++) got[i] = (int)gathered[i];
        int64_t one = 1;
        must(llm4d_comm_allreduce(c, &one, 1, LLM4D_COMM_I64, &err), &err);
        int size_ok = c->size == (a < LLM4D_NAXES ? topo.degree[a] : topo.data_world) && one == c->size;
        int members_ok = memcmp(got, want, sizeof(int) * (size_t)c->size) == 0;
        if (!size_ok || !members_ok) {
            printf("rank %d: %s group size %d, members", w->rank, c->name, c->size);
            for (int i = 0; i < c->size; i++) printf(" %d(want %d)", got[i], want[i]);
            printf("\n");
        }
        ok &= size_ok && members_ok;
    }
    snprintf(what, sizeof what, "dp%d x pp%d x sharding%d x mp%d: every group's members, in coordinate order", dp,
             pp, sh, mp);
    rank_check(t, ok, what);
    /* test_comm.sh starts every rank on this one machine (and alone, the world is this process): the rank's place
     * on its host is its world rank, of the world's size */
    snprintf(what, sizeof what, "  the ranks on this host: this rank %d of %d (want %d of %d)", g.host_rank,
             g.host_ranks, w->rank, w->size);
    rank_check(t, g.host_rank == w->rank && g.host_ranks == w->size, what);

    llm4d_comm_groups_stats_reset(&g);
    static float a[1024];
    must(llm4d_comm_allreduce(g.axis[LLM4D_AXIS_MODEL], a, 1024, LLM4D_COMM_F32, &err), &err);
    must(llm4d_comm_allreduce(g.data, a, 1024, LLM4D_COMM_F32, &err), &err);
    llm4d_comm_stats s = llm4d_comm_groups_stats(&g);
    uint64_t want = 2 * (uint64_t)(mp - 1) * 4096 / (uint64_t)mp +
                    2 * (uint64_t)(topo.data_world - 1) * 4096 / (uint64_t)topo.data_world;
    snprintf(what, sizeof what, "  group stats: mp + data all-reduce of 4096 B = %llu B (want %llu)",
             (unsigned long long)llm4d_comm_stats_sent(&s), (unsigned long long)want);
    rank_check(t, llm4d_comm_stats_sent(&s) == want && s.calls[LLM4D_COMM_OP_ALLREDUCE] == 2, what);
    llm4d_comm_groups_destroy(&g);
}

int main(int argc, char **argv) {
    llm4d_runtime rt;
    llm4d_err err = {0};
    if (llm4d_runtime_init(&rt, &argc, &argv, &err) != LLM4D_OK) return llm4d_runtime_fail(NULL, NULL, &err);
    rank_tally t = {.rank = rt.rank};
    if (rt.rank == 0)
        printf("world of %d on the %s backend (thread level %d)\n", rt.world_size, rt.world->ops->backend,
               rt.thread_level);
    rank_check(&t, rt.under_mpi == llm4d_runtime_launched_by_mpi(), "MPI used exactly when an MPI launcher started us");
    rank_check(&t, strcmp(rt.world->ops->backend, rt.under_mpi ? "mpi" : "self") == 0, "backend name");

    test_collectives(&t, rt.world);
    test_bytes(&t, rt.world);
    int n = rt.world_size;
    test_groups(&t, rt.world, n, 1, 1, 1);
    if (n == 4) {
        test_groups(&t, rt.world, 2, 1, 1, 2);
        test_groups(&t, rt.world, 1, 2, 2, 1);
        test_groups(&t, rt.world, 2, 1, 2, 1);
        test_groups(&t, rt.world, 1, 1, 1, 4);
    }
    if (n == 2) test_groups(&t, rt.world, 1, 2, 1, 1);

    int64_t totals[2] = {t.pass, t.fail};
    must(llm4d_comm_allreduce(rt.world, totals, 2, LLM4D_COMM_I64, &err), &err);
    if (rt.rank == 0) printf("%lld passed, %lld failed\n", (long long)totals[0], (long long)totals[1]);
    llm4d_runtime_finalize(&rt);
    return totals[1] ? 1 : 0;
}
