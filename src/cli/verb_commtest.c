/* verb_commtest.c — `llm4d __commtest`, a small collective job for the launcher's tests (tests/test_launch.sh):
 * it builds the topology and its groups, prints them, and all-reduces a vector every step, checking the sums;
 * --fail_rank/--fail_step make one rank fail a "user check" mid-job, as a rank that finds bad input would. */
#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/launch.h"
#include "core/error.h"
#include "core/log.h"
#include "comm/comm.h"
#include "comm/runtime.h"
#include "comm/topology.h"

static int commtest_usage(void) {
    fprintf(stderr, "usage: llm4d __commtest [--steps N] [--sleep_ms MS] [--floats K] [--dp D --pp P --sharding S "
                    "--mp M] [--fail_rank R --fail_step S]\n");
    return 2;
}

int llm4d_cmd_commtest(int argc, char **argv) {
    int steps = 10, sleep_ms = 0, floats = 1024, deg[4] = {0, 1, 1, 1}, fail_rank = -1, fail_step = 0, bad = 0;
    static const char *const keys[] = {"--steps", "--sleep_ms", "--floats", "--dp",
                                       "--pp",    "--sharding", "--mp",     "--fail_rank",
                                       "--fail_step"};
    int *dst[] = {&steps, &sleep_ms, &floats, &deg[0], &deg[1], &deg[2], &deg[3], &fail_rank, &fail_step};
    for (int i = 1; i < argc; i++) {
        int matched = 0;
        for (size_t k = 0; k < sizeof keys / sizeof keys[0] && !matched; k++) {
            const char *v = llm4d_launch_opt(argc, argv, &i, keys[k], &bad);
            if (v) {
                if (!llm4d_launch_int(v, -1, INT_MAX, dst[k])) return commtest_usage();
                matched = 1;
            }
        }
        if (!matched) return commtest_usage();
    }

    llm4d_runtime rt;
    llm4d_err err = {0};
    if (llm4d_runtime_init(&rt, NULL, NULL, &err) != LLM4D_OK) return llm4d_runtime_fail(NULL, NULL, &err);
    printf("llm4d commtest: rank %d of %d, pid %ld, %s backend, %d OpenMP threads\n", rt.rank, rt.world_size,
           (long)getpid(), rt.world->ops->backend, omp_get_max_threads());
    fflush(stdout);
    llm4d_log log = {stdout, 1};
    llm4d_topology topo;
    if (deg[0] == 0 && llm4d_topology_derive_dp(rt.world_size, deg[1], deg[2], deg[3], &deg[0], &err) != LLM4D_OK)
        return llm4d_runtime_fail(&rt, NULL, &err);
    if (llm4d_topology_init(&topo, rt.world_size, rt.rank, deg[0], deg[1], deg[2], deg[3], &err) != LLM4D_OK)
        return llm4d_runtime_fail(&rt, NULL, &err);
    llm4d_topology_print(&topo, &log);
    llm4d_comm_groups g;
    if (llm4d_comm_groups_create(&g, rt.world, &topo, &err) != LLM4D_OK) return llm4d_runtime_fail(&rt, NULL, &err);

    float *x = malloc(sizeof(float) * (size_t)(floats > 0 ? floats : 1));
    if (!x) {
        llm4d_fail(&err, LLM4D_ENOMEM, "commtest: out of memory");
        return llm4d_runtime_fail(&rt, NULL, &err);
    }
    const int w = topo.data_world;
    for (int s = 0; s < steps; s++) {
        if (rt.rank == fail_rank && s == fail_step) {
            llm4d_fail(&err, LLM4D_EUSER, "commtest: simulated bad input on rank %d at step %d (--fail_rank); "
                                          "remove --fail_rank to run normally", rt.rank, s);
            free(x);
            llm4d_comm_groups_destroy(&g);
            return llm4d_runtime_fail(&rt, NULL, &err);
        }
        for (int i = 0; i < floats; i++) x[i] = (float)(topo.data_rank + s + i % 5);
        llm4d_comm_req req = {0};
        if (llm4d_comm_iallreduce(g.data, x, (size_t)floats, LLM4D_COMM_F32, &req, &err) != LLM4D_OK ||
            llm4d_comm_wait(&req, &err) != LLM4D_OK)
            return llm4d_runtime_fail(&rt, NULL, &err);
        for (int i = 0; i < floats; i++)
            if (x[i] != (float)(w * (w - 1) / 2 + w * (s + i % 5))) {
                llm4d_fail(&err, LLM4D_EINTERNAL, "commtest: step %d element %d is %g, expected %d", s, i,
                           (double)x[i], w * (w - 1) / 2 + w * (s + i % 5));
                return llm4d_runtime_fail(&rt, NULL, &err);
            }
        if (s % 100 == 0 || s == steps - 1) {
            printf("llm4d commtest: step %d ok\n", s);
            fflush(stdout);
        }
        if (sleep_ms > 0) {
            struct timespec ts = {sleep_ms / 1000, (long)(sleep_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    llm4d_comm_stats st = llm4d_comm_groups_stats(&g);
    printf("llm4d commtest: done, %d steps, %llu bytes sent\n", steps,
           (unsigned long long)llm4d_comm_stats_sent(&st));
    fflush(stdout);
    free(x);
    llm4d_comm_groups_destroy(&g);
    llm4d_runtime_finalize(&rt);
    return 0;
}
