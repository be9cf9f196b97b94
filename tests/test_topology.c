/* test_topology.c — the 4D rank grid against tables worked out by hand.
 *
 * The main table is the issue's 8-process layout dp2 x pp2 x sharding1 x mp2: with the model axis fastest,
 * rank = (dp_idx*2 + pp_idx)*2 + mp_idx, so rank 5 is (dp 1, pp 0, mp 1). Every rank's four groups are written
 * out literally below (not recomputed from the formula), then other layouts, the printout, and bad degrees. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm/topology.h"


static int same(const int *a, const int *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* One rank's expected view: index and members per axis (dp, pp, sharding, mp), data rank. */
typedef struct {
    int idx[4];
    int members[4][4];
    int data_rank;
} expect;

static void check_rank(const llm4d_topology *t, const expect *e, const char *layout) {
    char what[200];
    for (int a = 0; a < LLM4D_NAXES; a++) {
        int got[64];
        llm4d_topology_group_ranks(t, (llm4d_axis)a, got);
        snprintf(what, sizeof what, "%s rank %d: %s index %d (want %d), members match", layout, t->rank,
                 llm4d_axis_name((llm4d_axis)a), t->index[a], e->idx[a]);
        check(t->index[a] == e->idx[a] && same(got, e->members[a], t->degree[a]), "%s", what);
    }
    snprintf(what, sizeof what, "%s rank %d: data rank %d (want %d)", layout, t->rank, t->data_rank, e->data_rank);
    check(t->data_rank == e->data_rank, "%s", what);
}

static void test_8_dp2_pp2_mp2(void) {
    /*               dp pp sh mp    dp group    pp group    sh    mp group   data */
    static const expect table[8] = {
        {{0, 0, 0, 0}, {{0, 4}, {0, 2}, {0}, {0, 1}}, 0},
        {{0, 0, 0, 1}, {{1, 5}, {1, 3}, {1}, {0, 1}}, 0},
        {{0, 1, 0, 0}, {{2, 6}, {0, 2}, {2}, {2, 3}}, 0},
        {{0, 1, 0, 1}, {{3, 7}, {1, 3}, {3}, {2, 3}}, 0},
        {{1, 0, 0, 0}, {{0, 4}, {4, 6}, {4}, {4, 5}}, 1},
        {{1, 0, 0, 1}, {{1, 5}, {5, 7}, {5}, {4, 5}}, 1},
        {{1, 1, 0, 0}, {{2, 6}, {4, 6}, {6}, {6, 7}}, 1},
        {{1, 1, 0, 1}, {{3, 7}, {5, 7}, {7}, {6, 7}}, 1},
    };
    for (int r = 0; r < 8; r++) {
        llm4d_topology t;
        llm4d_err err = {0};
        llm4d_code rc = llm4d_topology_init(&t, 8, r, 2, 2, 1, 2, &err);
        check(rc == LLM4D_OK && t.data_world == 2, "dp2 x pp2 x sharding1 x mp2 on 8 ranks accepted");
        if (rc == LLM4D_OK) check_rank(&t, &table[r], "dp2pp2sh1mp2");
    }
}

/* The seed's 4-GPU example: sharding 2 x dp 2. Its log shows rank 0 with sharding group [0, 1] and pure dp group
 * endpoints[0], endpoints[2], i.e. [0, 2]. */
static void test_4_dp2_sh2(void) {
    static const expect table[4] = {
        {{0, 0, 0, 0}, {{0, 2}, {0}, {0, 1}, {0}}, 0},
        {{0, 0, 1, 0}, {{1, 3}, {1}, {0, 1}, {1}}, 1},
        {{1, 0, 0, 0}, {{0, 2}, {2}, {2, 3}, {2}}, 2},
        {{1, 0, 1, 0}, {{1, 3}, {3}, {2, 3}, {3}}, 3},
    };
    for (int r = 0; r < 4; r++) {
        llm4d_topology t;
        llm4d_err err = {0};
        check(llm4d_topology_init(&t, 4, r, 2, 1, 2, 1, &err) == LLM4D_OK, "dp2 x sharding2 on 4 ranks accepted");
        check_rank(&t, &table[r], "dp2sh2");
        int data[4];
        llm4d_topology_data_group_ranks(&t, data);
        static const int all[4] = {0, 1, 2, 3};
        check(t.data_world == 4 && same(data, all, 4), "dp2sh2: data group is the whole world in data-rank order");
    }
}

/* pp2 x sharding2 x mp2 (dp 1) on 8 ranks: rank = (pp*2 + sh)*2 + mp; rank 5 = (pp 1, sh 0, mp 1). */
static void test_8_pp2_sh2_mp2(void) {
    llm4d_topology t;
    llm4d_err err = {0};
    check(llm4d_topology_init(&t, 8, 5, 1, 2, 2, 2, &err) == LLM4D_OK, "pp2 x sharding2 x mp2 accepted");
    static const expect e5 = {{0, 1, 0, 1}, {{5}, {1, 5}, {5, 7}, {4, 5}}, 0};
    check_rank(&t, &e5, "pp2sh2mp2");
    int data[2];
    llm4d_topology_data_group_ranks(&t, data);
    check(data[0] == 5 && data[1] == 7 && t.data_world == 2, "pp2sh2mp2 rank 5: data group [5, 7]");
}

/* dp2 x pp2 x sharding2 x mp2 on 16 ranks: rank = ((dp*2 + pp)*2 + sh)*2 + mp; rank 11 = (dp 1, pp 0, sh 1, mp 1). */
static void test_16_all2(void) {
    llm4d_topology t;
    llm4d_err err = {0};
    check(llm4d_topology_init(&t, 16, 11, 2, 2, 2, 2, &err) == LLM4D_OK, "dp2 x pp2 x sharding2 x mp2 accepted");
    static const expect e11 = {{1, 0, 1, 1}, {{3, 11}, {11, 15}, {9, 11}, {10, 11}}, 3};
    check_rank(&t, &e11, "all2");
    int data[4];
    llm4d_topology_data_group_ranks(&t, data);
    static const int want[4] = {1, 3, 9, 11};
    check(t.data_world == 4 && same(data, want, 4), "all2 rank 11: data group [1, 3, 9, 11], data rank 3 of 4");
    int idx[4] = {1, 1, 0, 1};
    check(llm4d_topology_rank_at(&t, idx) == 13, "all2: coordinates (1,1,0,1) are rank 13");
}

/* Group ids: equal exactly when two ranks are in the same group, on every axis and for the data group. */
static void test_group_ids(void) {
    enum { W = 24 };
    llm4d_topology t[W];
    llm4d_err err = {0};
    int ok = 1;
    for (int r = 0; r < W; r++) ok &= llm4d_topology_init(&t[r], W, r, 2, 3, 2, 2, &err) == LLM4D_OK;
    for (int a = 0; a < LLM4D_NAXES; a++)
        for (int r = 0; r < W; r++)
            for (int q = 0; q < W; q++) {
                int members[8], in = 0;
                llm4d_topology_group_ranks(&t[r], (llm4d_axis)a, members);
                for (int i = 0; i < t[r].degree[a]; i++) in |= members[i] == q;
                ok &= in == (llm4d_topology_group_id(&t[r], (llm4d_axis)a) ==
                             llm4d_topology_group_id(&t[q], (llm4d_axis)a));
            }
    for (int r = 0; r < W; r++)
        for (int q = 0; q < W; q++) {
            int members[8], in = 0;
            llm4d_topology_data_group_ranks(&t[r], members);
            for (int i = 0; i < t[r].data_world; i++) in |= members[i] == q;
            ok &= in == (llm4d_topology_data_group_id(&t[r]) == llm4d_topology_data_group_id(&t[q]));
        }
    check(ok, "dp2 x pp3 x sharding2 x mp2: group ids equal iff same group (4 axes + data group)");
}

static void test_world1(void) {
    llm4d_topology t;
    llm4d_err err = {0};
    int ok = llm4d_topology_init(&t, 1, 0, 1, 1, 1, 1, &err) == LLM4D_OK;
    static const expect e = {{0, 0, 0, 0}, {{0}, {0}, {0}, {0}}, 0};
    check(ok && t.data_world == 1, "world of 1 accepted");
    check_rank(&t, &e, "world1");
}

static void test_print(void) {
    llm4d_topology t;
    llm4d_err err = {0};
    llm4d_topology_init(&t, 8, 5, 2, 2, 1, 2, &err);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    llm4d_log log = {f, 1};
    llm4d_topology_print(&t, &log);
    fclose(f);
    static const char *const want[] = {
        "] - global world size: 8\n", "] - global rank: 5\n",     "] - mp group size: 2\n",
        "] - mp rank: 1\n",           "] - mp group ranks: [4, 5]\n", "] - sharding group size: 1\n",
        "] - sharding rank: 0\n",     "] - sharding group ranks: [5]\n", "] - pp group size: 2\n",
        "] - pp rank: 0\n",           "] - pp group ranks: [5, 7]\n", "] - dp group size: 2\n",
        "] - dp rank: 1\n",           "] - dp group ranks: [1, 5]\n", "] - data rank: 1 of 2",
    };
    const char *pos = text;
    int ok = 1;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *hit = strstr(pos, want[i]);
        if (!hit) {
            printf("  missing or out of order: %s", want[i]);
            ok = 0;
        } else pos = hit;
    }
    check(ok, "printout of rank 5 (dp2 pp2 mp2): size, rank and members per group, in the seeds' order mp, "
              "sharding, pp, dp");
    check(strstr(text, "[    INFO] - ##############################") != NULL, "printout uses the INFO log prefix");
    free(text);

    /* a long group is elided in the middle so the line stays readable */
    llm4d_topology_init(&t, 64, 0, 64, 1, 1, 1, &err);
    f = open_memstream(&text, &len);
    log.out = f;
    llm4d_topology_print(&t, &log);
    fclose(f);
    check(strstr(text, "dp group ranks: [0, 1, 2, 3, 4, 5, 6, 7, ..., 60, 61, 62, 63]\n") != NULL,
          "a 64-member group prints its first 8 and last 4 members");
    free(text);
}

static void test_bad_degrees(void) {
    llm4d_topology t;
    llm4d_err err = {0};
    llm4d_code rc = llm4d_topology_init(&t, 4, 0, 2, 2, 1, 2, &err);
    printf("  message: %s\n", err.msg);
    check(rc == LLM4D_EUSER &&
              strstr(err.msg, "dp_degree 2 x pp_degree 2 x sharding_degree 1 x mp_degree 2 = 8") != NULL &&
              strstr(err.msg, "4 processes") != NULL,
          "product 8 on 4 processes refused with the arithmetic");
    rc = llm4d_topology_init(&t, 4, 0, 1, 1, 0, 4, &err);
    printf("  message: %s\n", err.msg);
    check(rc == LLM4D_EUSER && strstr(err.msg, "sharding_degree is 0") != NULL, "sharding_degree 0 refused");
    rc = llm4d_topology_init(&t, 4, 0, 4, 1, 1, -1, &err);
    check(rc == LLM4D_EUSER && strstr(err.msg, "mp_degree is -1") != NULL, "mp_degree -1 refused");
    rc = llm4d_topology_init(&t, 1, 0, 1, 1, 1, 2, &err);
    printf("  message: %s\n", err.msg);
    check(rc == LLM4D_EUSER && strstr(err.msg, "= 2, but the job has 1 process;") != NULL,
          "mp 2 on one process refused");
    rc = llm4d_topology_init(&t, 2, 0, 65536, 65536, 65536, 65536, &err);
    printf("  message: %s\n", err.msg);
    check(rc == LLM4D_EUSER && strstr(err.msg, "mp_degree 65536 = more than 2^63, but") != NULL,
          "degrees whose product overflows 64 bits refused (no wrap-around to a false match)");
    rc = llm4d_topology_init(&t, 0, 0, 1 << 16, 1 << 16, 1 << 16, 1 << 16, &err); /* 2^64 wraps to 0 */
    check(rc == LLM4D_EUSER, "degrees whose product wraps to 0 refused on an (impossible) world of 0");

    int dp = 0;
    check(llm4d_topology_derive_dp(8, 2, 1, 2, &dp, &err) == LLM4D_OK && dp == 2, "dp derived: 8 / (2*1*2) = 2");
    rc = llm4d_topology_derive_dp(6, 1, 1, 4, &dp, &err);
    printf("  message: %s\n", err.msg);
    check(rc == LLM4D_EUSER && strstr(err.msg, "6 processes / (pp_degree 1 x sharding_degree 1 x mp_degree 4 = 4)"),
          "dp not derivable from 6 / 4 refused with the arithmetic");
}

int main(void) {
    test_8_dp2_pp2_mp2();
    test_4_dp2_sh2();
    test_8_pp2_sh2_mp2();
    test_16_all2();
    test_group_ids();
    test_world1();
    test_print();
    test_bad_degrees();
    return check_summary();
}
