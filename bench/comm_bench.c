/* comm_bench.c — bus bandwidth of all-reduce, reduce-scatter and all-gather: llm4d's paths beside Open MPI's own
 * collectives, measured side by side in one job (bench/bench_comm.sh runs it for 2..N ranks next to the host's copy
 * bandwidth).
 *
 * Per operation and size (the whole buffer: an all-reduce's, the reduce-scatter's input, the all-gather's output),
 * three contenders take turns, one call each per round, so a change of the machine's load hits all of them alike:
 *   llm4d  llm4d_comm_* on a group with comm_path auto (shared memory on one host), under a watchdog deadline as in
 *          training (so its waits are the polled ones training uses);
 *   l4mpi  the same calls on a group with comm_path mpi (what training used before: MPI's non-blocking collectives,
 *          polled);
 *   mpi    MPI_Allreduce / MPI_Reduce_scatter_block / MPI_Allgather called directly (Open MPI's own, blocking);
 *   l4sh   all-reduce only: llm4d's path over a buffer shared in place with the host's ranks (comm/shm_share.h), as
 *          the data-parallel gradients are: the host's buffers summed where they are, no copies through the slots.
 * A call's time is the slowest rank's, after a barrier; the figure is the median over the rounds. Bus bandwidth
 * follows nccl-tests: all-reduce 2 (n-1)/n x bytes / time, reduce-scatter and all-gather (n-1)/n x bytes / time.
 *
 * Output: one line per (op, size, contender), machine-readable:
 *   op allreduce ranks 2 bytes 25000000 path llm4d time_s 0.00512 busbw_gbps 4.88
 * Usage: mpirun -np N comm_bench [--ops allreduce,reduce_scatter,allgather] [--mb 1,25,100] [--rounds 7]
 *        [--dtype f32|bf16] [--chunk_kb K] [--progress hooks|thread] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/comm_shm.h"
#include "comm/runtime.h"
#include "core/timer.h"

enum { C_LLM4D, C_L4MPI, C_MPI, C_L4SH, NC };
static const char *const cname[NC] = {"llm4d", "l4mpi", "mpi", "l4sh"};

static void die(const char *what, const llm4d_err *err) {
    fprintf(stderr, "comm_bench: %s: %s\n", what, err ? err->msg : "");
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Whether contender k runs op (at dt). */
static int runs(int k, const char *op, llm4d_comm_dtype dt, int shared) {
    if (k == C_MPI) return dt != LLM4D_COMM_BF16;
    if (k == C_L4SH) return shared && !strcmp(op, "allreduce");
    return 1;
}

/* One call of op on count elements by contender k (l4sh: on the shared buffer s); returns the slowest rank's
 * seconds. */
static double one(int k, const char *op, llm4d_comm *l4, llm4d_comm *l4m, void *a, void *b, void *s, size_t count,
                  llm4d_comm_dtype dt) {
    llm4d_err err = {0};
    const int n = l4->size;
    const MPI_Datatype mt = dt == LLM4D_COMM_F32 ? MPI_FLOAT : MPI_UINT16_T; /* bf16 only with llm4d's contenders */
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = llm4d_now();
    llm4d_comm *c = k == C_LLM4D || k == C_L4SH ? l4 : l4m;
    if (k == C_L4SH) a = s;
    llm4d_code rc = LLM4D_OK;
    if (!strcmp(op, "allreduce")) {
        if (k == C_MPI) MPI_Allreduce(MPI_IN_PLACE, a, (int)count, mt, MPI_SUM, MPI_COMM_WORLD);
        else rc = llm4d_comm_allreduce(c, a, count, dt, &err);
    } else if (!strcmp(op, "reduce_scatter")) {
        if (k == C_MPI) MPI_Reduce_scatter_block(a, b, (int)(count / n), mt, MPI_SUM, MPI_COMM_WORLD);
        else rc = llm4d_comm_reduce_scatter(c, a, b, count / n, dt, &err);
    } else {
        const size_t per = count / n, esz = llm4d_comm_dtype_size(dt);
        if (k == C_MPI)
            MPI_Allgather(MPI_IN_PLACE, (int)per, mt, b, (int)per, mt, MPI_COMM_WORLD);
        else
            rc = llm4d_comm_allgather(c, (char *)b + (size_t)l4->rank * per * esz, b, per, dt, &err);
    }
    if (rc != LLM4D_OK) die(op, &err);
    double dt_s = llm4d_now() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &dt_s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return dt_s;
}

int main(int argc, char **argv) {
    llm4d_runtime rt;
    llm4d_err err = {0};
    if (llm4d_runtime_init(&rt, &argc, &argv, &err) != LLM4D_OK || rt.world_size < 2) {
        fprintf(stderr, "comm_bench: run under mpirun with at least 2 ranks\n");
        return 2;
    }
    char ops[128] = "allreduce,reduce_scatter,allgather", mbs[256] = "1,4,16,25,64,100,256";
    int rounds = 7, chunk_kb = 0, thread = 0;
    llm4d_comm_dtype dt = LLM4D_COMM_F32;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--ops")) snprintf(ops, sizeof ops, "%s", argv[i + 1]);
        else if (!strcmp(argv[i], "--mb")) snprintf(mbs, sizeof mbs, "%s", argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--chunk_kb")) chunk_kb = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--progress")) thread = !strcmp(argv[i + 1], "thread");
        else if (!strcmp(argv[i], "--dtype")) dt = !strcmp(argv[i + 1], "bf16") ? LLM4D_COMM_BF16 : LLM4D_COMM_F32;
    }
    if (rounds < 1) rounds = 1;
    /* two groups of every rank, made before any path: one takes the shared-memory path, one stays on MPI */
    llm4d_comm *l4 = NULL, *l4m = NULL;
    if (llm4d_comm_split(rt.world, 0, rt.rank, "bench", &l4, &err) != LLM4D_OK ||
        llm4d_comm_split(rt.world, 0, rt.rank, "bench-mpi", &l4m, &err) != LLM4D_OK ||
        llm4d_comm_use_paths(l4, "auto", (size_t)chunk_kb << 10, thread, &err) != LLM4D_OK ||
        llm4d_comm_use_paths(l4m, "mpi", 0, 0, &err) != LLM4D_OK)
        die("making the groups", &err);
    llm4d_watch_set(&rt.watch, 1, 600); /* a deadline, as training has: the polled waits */
    const int n = rt.world_size;
    const size_t esz = llm4d_comm_dtype_size(dt);
    if (rt.rank == 0)
        printf("# %d ranks, %s; llm4d path: %s\n", n, dt == LLM4D_COMM_F32 ? "fp32" : "bf16", l4->path_desc);
    char *save_ops = NULL;
    for (char *op = strtok_r(ops, ",", &save_ops); op; op = strtok_r(NULL, ",", &save_ops)) {
        char list[256];
        snprintf(list, sizeof list, "%s", mbs);
        char *save_mb = NULL;
        for (char *m = strtok_r(list, ",", &save_mb); m; m = strtok_r(NULL, ",", &save_mb)) {
            size_t count = (size_t)(atof(m) * 1e6) / esz / (size_t)n * (size_t)n; /* whole blocks */
            if (count == 0) count = (size_t)n;
            const size_t bytes = count * esz;
            const size_t span = (bytes + 4095) / 4096 * 4096;
            char *a = malloc(bytes), *b = malloc(bytes), *s = aligned_alloc(4096, span);
            if (!a || !b || !s) die("out of memory", NULL);
            memset(a, 0, bytes); /* first touch; zeros stay zeros under sums */
            memset(b, 0, bytes);
            memset(s, 0, span);
            int shared = 0;
            char why[200];
            if (llm4d_shm_share(l4, s, span, &shared, why, sizeof why, &err) != LLM4D_OK) die("sharing", &err);
            if (!shared && rt.rank == 0 && m == list) printf("# l4sh: no buffer shared in place (%s)\n", why);
            double t[NC][64];
            const int R = rounds < 64 ? rounds : 64;
            for (int k = 0; k < NC; k++)
                if (runs(k, op, dt, shared)) one(k, op, l4, l4m, a, b, s, count, dt); /* warm-up */
            for (int r = 0; r < R; r++)
                for (int k = 0; k < NC; k++)
                    t[k][r] = runs(k, op, dt, shared) ? one(k, op, l4, l4m, a, b, s, count, dt) : 0;
            for (int k = 0; k < NC && rt.rank == 0; k++) {
                if (!runs(k, op, dt, shared)) continue;
                qsort(t[k], (size_t)R, sizeof(double), cmp);
                const double med = R % 2 ? t[k][R / 2] : 0.5 * (t[k][R / 2 - 1] + t[k][R / 2]);
                const double f = !strcmp(op, "allreduce") ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
                printf("op %s ranks %d bytes %zu path %s time_s %.6f busbw_gbps %.3f\n", op, n, bytes, cname[k], med,
                       f * (double)bytes / med / 1e9);
            }
            fflush(stdout);
            llm4d_shm_unshare(l4, s);
            free(a);
            free(b);
            free(s);
        }
    }
    llm4d_comm_destroy(l4);
    llm4d_comm_destroy(l4m);
    llm4d_runtime_finalize(&rt);
    return 0;
}
