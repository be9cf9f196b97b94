/* calib_worker.c — one rank of a calibration job (`llm4d launch --nproc k -- __plancal ...`; calibrate.h): what
 * needs several processes on the host at once, measured as a training job meets it (MPI started the same way, the
 * watchdog's polling on, every group of a size busy at the same time), written by rank 0 as a profile fragment:
 *   base         the resident size of a rank before its model (runtime, backend, its start-up measurement);
 *   collectives  all-reduce, reduce-scatter, all-gather over groups of every size dividing k (consecutive ranks,
 *                all groups at once), and a message each way between pairs, by bytes: the slowest rank's time
 *                (median of the repetitions), and the growth of the resident peak the library caused on a
 *                group's first rank, its other even ranks and its odd ones;
 *   shares       the model's micro-batch (its recorded calls, replayed) on all k ranks at once against rank 0
 *                alone, by kind of work, when k ranks of t threads fit the cores;
 *   overlap      (k = 2) a background all-reduce progressed between the replayed kernels, as the engines do:
 *                what fraction of the computing time it advanced by;
 *   wait_cpu     (k = 2) the processor time a blocking wait burns while a peer is late;
 *   pair_wait    (k ranks of t threads outnumbering the cores) what a small all-reduce in pairs costs a computing
 *                rank in processor time, as a tensor-parallel group meets it. */
#include "plan/calibrate.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_shm.h"
#include "comm/host_check.h"
#include "comm/runtime.h"
#include "core/heap.h"
#include "core/proc.h"
#include "plan/replay.h"
#include "plan/trace.h"

typedef struct {
    const char *out, *model, *comm_path;
    int threads, seq, layers, amp, quick;
} wopts;

/* The peak resident bytes since the last reset_peak (Linux: writing 5 to clear_refs sets VmHWM to VmRSS). */
static double hwm(void) { return (double)llm4d_proc_kb("/proc/self/status", "VmHWM"); }
/* The heap's free pages returned first (llm4d_heap_resident), then the peak reset to the live size: a temporary the
 * library takes from free heap memory shows as growth too, whatever the calls before left free (rank 0 of a 16-rank
 * all-reduce read 0 or 2 and 8 MB between identical calibrations before). Returns that size. */
static double reset_peak(void) {
    const double live = (double)llm4d_heap_resident();
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) fputs("5", f), fclose(f);
    return live;
}

static int cmpd(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One collective of `bytes` on comm (op as llm4d_comm_op; SEND: a message each way between ranks 0 and 1). */
static llm4d_code once(llm4d_comm *c, int op, float *a, float *b, size_t bytes, llm4d_err *err) {
    const size_t n = bytes / sizeof(float), g = (size_t)c->size;
    switch (op) {
    case LLM4D_PROF_AR_SHARED: /* a is shared in place (series) */
    case LLM4D_COMM_OP_ALLREDUCE: return llm4d_comm_allreduce(c, a, n, LLM4D_COMM_F32, err);
    case LLM4D_COMM_OP_REDUCE_SCATTER: return llm4d_comm_reduce_scatter(c, a, b, n / g, LLM4D_COMM_F32, err);
    case LLM4D_COMM_OP_ALLGATHER: return llm4d_comm_allgather(c, a, b, n / g, LLM4D_COMM_F32, err);
    default:
        if (c->rank == 0) {
            LLM4D_TRY(llm4d_comm_send(c, a, n, LLM4D_COMM_F32, 1, 7, err));
            return llm4d_comm_recv(c, a, n, LLM4D_COMM_F32, 1, 8, err);
        }
        LLM4D_TRY(llm4d_comm_recv(c, a, n, LLM4D_COMM_F32, 0, 7, err));
        return llm4d_comm_send(c, a, n, LLM4D_COMM_F32, 0, 8, err);
    }
}

/* One series: op over groups of g consecutive ranks, every size. */
static llm4d_code series(llm4d_comm *world, int g, int op, const wopts *o, llm4d_profile *frag, llm4d_err *err) {
    const double all[] = {16e3, 256e3, 2e6, 8e6, 32e6}, quick[] = {64e3, 4e6, 16e6};
    const double *sizes = o->quick ? quick : all;
    const int ns = o->quick ? 3 : 5, reps = o->quick ? 2 : 4;
    llm4d_comm *c = NULL;
    LLM4D_TRY(llm4d_comm_split(world, world->rank / g, world->rank, "plancal", &c, err));
    /* where the ranks are: a hostfile spreads them over hosts, and a series across hosts prices the groups of a
     * layout that span hosts (price.c keeps the two kinds apart) */
    llm4d_comm *here = NULL, *wide = NULL;
    int same = 1, same_w = 1;
    llm4d_code rc = llm4d_host_split(c, &here, &same, err);
    if (rc == LLM4D_OK) rc = llm4d_host_split(world, &wide, &same_w, err);
    const int hosts = rc == LLM4D_OK && same ? c->size / here->size : 1;
    llm4d_prof_coll pc = {.op = op, .group = g, .ranks_on_host = rc == LLM4D_OK ? wide->size : world->size,
                          .hosts = hosts > 1 ? hosts : 1, .n = ns};
    llm4d_comm_destroy(here);
    llm4d_comm_destroy(wide);
    /* the all-reduce over buffers shared in place: only where the trainer shares its gradients (one host, its path) */
    int spans = 0; /* hosts */
    const int shared = op == LLM4D_PROF_AR_SHARED;
    if (shared && (llm4d_shm_host_ranks(c, &spans) < 2 || spans > 1)) {
        llm4d_comm_destroy(c);
        return rc;
    }
    /* On the shared-memory path the group's new segment becomes resident as its first collectives touch it: the
     * memory plan counts segments (plan/memplan_shm.c), so they are made resident here, by one collective of the
     * largest size, before any temporary is measured. */
    if (rc == LLM4D_OK && llm4d_shm_host_ranks(c, NULL) > 1) {
        const size_t big = (size_t)sizes[ns - 1] / (4 * (size_t)g) * (4 * (size_t)g);
        float *a = calloc(big / sizeof(float) + 1, sizeof(float)), *b = calloc(big / sizeof(float) + 1, sizeof(float));
        rc = a && b ? once(c, op, a, b, big, err) : llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
        free(a), free(b);
    }
    for (int s = 0; rc == LLM4D_OK && s < ns; s++) {
        const size_t bytes = (size_t)sizes[s] / (4 * (size_t)g) * (4 * (size_t)g), span = (bytes + 4095) / 4096 * 4096;
        /* a shared buffer must be whole pages; the others are allocated as before, since the library's temporaries
         * measured below depend on the heap's state (an aligned allocation instead of calloc hid 2-8 MB of Open
         * MPI's all-reduce temporaries over 16 ranks) */
        float *a = shared ? aligned_alloc(4096, span) : calloc(bytes / sizeof(float) + 1, sizeof(float));
        float *b = calloc(bytes / sizeof(float) + 1, sizeof(float));
        if (!a || !b) {
            free(a), free(b);
            rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
            break;
        }
        double t[16];
        memset(a, 1, shared ? span : bytes), memset(b, 1, bytes); /* the buffers resident before the peak is reset */
        int ok = 1;
        char why[200];
        if (shared) rc = llm4d_shm_share(c, a, span, &ok, why, sizeof why, err);
        /* the peers' pages the sums touch are the memory plan's (memplan_shm.c), not a temporary: touched first */
        if (rc == LLM4D_OK && ok && shared) rc = once(c, op, a, b, bytes, err);
        if (rc != LLM4D_OK || !ok) { /* not shared (every rank alike): no series */
            pc.n = 0;
            free(a), free(b);
            break;
        }
        const double h0 = reset_peak();
        for (int r = 0; rc == LLM4D_OK && r <= reps; r++) {
            rc = llm4d_comm_barrier(world, err);
            const double t0 = omp_get_wtime();
            if (rc == LLM4D_OK) rc = once(c, op, a, b, bytes, err);
            double dt = omp_get_wtime() - t0;
            if (op == LLM4D_COMM_OP_SEND) dt /= 2; /* one way */
            if (rc == LLM4D_OK) rc = llm4d_comm_allreduce_max(world, &dt, 1, LLM4D_COMM_F64, err);
            if (r > 0) t[r - 1] = dt; /* the first is a warm-up */
        }
        const double grew = hwm() - h0;
        double temp[3] = {c->rank == 0 ? grew : 0, c->rank > 0 && c->rank % 2 == 0 ? grew : 0, c->rank % 2 ? grew : 0};
        if (rc == LLM4D_OK) rc = llm4d_comm_allreduce_max(world, temp, 3, LLM4D_COMM_F64, err);
        qsort(t, (size_t)reps, sizeof *t, cmpd);
        pc.bytes[s] = (double)bytes, pc.seconds[s] = t[reps / 2];
        pc.temp_first[s] = temp[0] > 0 ? temp[0] : 0, pc.temp_other[s] = temp[1] > 0 ? temp[1] : 0;
        pc.temp_odd[s] = temp[2] > 0 ? temp[2] : 0;
        if (shared) llm4d_shm_unshare(c, a);
        free(a), free(b);
    }
    llm4d_comm_destroy(c);
    if (rc == LLM4D_OK && world->rank == 0 && pc.n) rc = llm4d_profile_add_coll(frag, &pc, err);
    return rc;
}

/* The processor time a blocking wait burns while a peer is late by about a scheduler's time slice, as on an
 * oversubscribed host where a peer is descheduled (comm.c's waits poll a while, then sleep between polls): rank 1
 * sleeps 3 ms before it joins a small all-reduce; the median of rank 0's processor time over the call, known to
 * every rank. */
static llm4d_code wait_cpu(llm4d_comm *world, double *out, llm4d_err *err) {
    double v[7] = {0};
    float x[16] = {0};
    for (int r = 0; r < 7; r++) {
        LLM4D_TRY(llm4d_comm_barrier(world, err));
        if (world->rank == 1) {
            const struct timespec late = {0, 3000000};
            nanosleep(&late, NULL);
        }
        struct timespec a, b;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
        LLM4D_TRY(llm4d_comm_allreduce(world, x, 16, LLM4D_COMM_F32, err));
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
        v[r] = world->rank == 0 ? (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec) : 0;
    }
    qsort(v, 7, sizeof *v, cmpd);
    double m = v[3];
    LLM4D_TRY(llm4d_comm_allreduce_max(world, &m, 1, LLM4D_COMM_F64, err));
    *out = m;
    return LLM4D_OK;
}

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The trace replayed once, with a 16-float all-reduce over `pair` after every `every` calls: the processor seconds
 * the rank spends inside those all-reduces (*cpu) and how many it made (*calls). */
static llm4d_code replay_waits(llm4d_replay *rp, llm4d_comm *pair, int every, double *cpu, int *calls,
                               llm4d_err *err) {
    float x[16] = {0};
    const int n = rp->rec->n;
    *calls = 0, *cpu = 0;
    for (int i = 0; i < n; i++) {
        llm4d_replay_run(rp, i, i + 1, NULL);
        if (i % every == every - 1) {
            const double c0 = cpu_now();
            LLM4D_TRY(llm4d_comm_allreduce(pair, x, 16, LLM4D_COMM_F32, err));
            *cpu += cpu_now() - c0;
            (*calls)++;
        }
    }
    return LLM4D_OK;
}

/* The model's whole micro-batch (mb 1, one process) recorded, for the shares, the overlap and the pair waits. */
static llm4d_code share_trace(const wopts *o, llm4d_backend *be, llm4d_mbtrace *t, llm4d_err *err) {
    llm4d_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    llm4d_config_defaults(cfg);
    char layers[48], seq[16];
    snprintf(layers, sizeof layers, "Model.num_layers=%d", o->layers);
    snprintf(seq, sizeof seq, "%d", o->seq);
    char *argv[] = {"--model_name_or_path", (char *)o->model, "-o", layers, "--max_seq_len", seq, "--input_dir", "x",
                    "--use_amp", o->amp ? "true" : "false"};
    llm4d_code rc = llm4d_config_parse_args(cfg, 10, argv, err);
    if (rc == LLM4D_OK) rc = llm4d_config_finalize(cfg, 1, err);
    llm4d_pp_plan pp = {0};
    llm4d_topology topo;
    if (rc == LLM4D_OK) rc = llm4d_pp_plan_make(&pp, cfg, err);
    if (rc == LLM4D_OK) rc = llm4d_topology_init(&topo, 1, 0, 1, 1, 1, 1, err);
    if (rc == LLM4D_OK) rc = llm4d_mbtrace_make(t, cfg, &topo, &pp, be, err);
    llm4d_pp_plan_free(&pp);
    free(cfg);
    return rc;
}

/* Seconds by kind of `reps` replays (after a warm-up); with comm, llm4d_comm_progress after every call. */
static void replay_kinds(llm4d_replay *rp, int reps, llm4d_comm *comm, double out[LLM4D_WORK_N]) {
    const int n = rp->rec->n;
    double (*s)[LLM4D_WORK_N] = calloc((size_t)n, sizeof *s);
    memset(out, 0, LLM4D_WORK_N * sizeof *out);
    if (!s) return;
    llm4d_replay_run(rp, 0, n, NULL);
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < n; i++) {
            llm4d_replay_run(rp, i, i + 1, s + i);
            for (int k = 0; k < LLM4D_WORK_N; k++) out[k] += s[i][k] > 0 ? s[i][k] : 0;
            if (comm) {
                llm4d_err e;
                llm4d_comm_progress(comm, &e);
            }
        }
    free(s);
}

/* The model's micro-batch recorded and ready to replay (on failure nothing is left to free). */
static llm4d_code share_replay(const wopts *o, llm4d_backend *be, llm4d_mbtrace *t, llm4d_replay *rp,
                               llm4d_err *err) {
    LLM4D_TRY(share_trace(o, be, t, err));
    const llm4d_code rc = llm4d_replay_init(rp, &t->rec, be, err);
    if (rc != LLM4D_OK) llm4d_mbtrace_free(t);
    return rc;
}

/* On a host whose ranks outnumber its cores, what a blocking all-reduce in pairs costs the rank in processor time
 * while every rank of the host computes, as the tensor-parallel groups' all-reduces between a layer's kernels do:
 * every rank replays the model's micro-batch with an all-reduce over its pair of consecutive ranks after every 8
 * calls (about a layer's kernels between two), and the processor time spent inside those all-reduces, per call,
 * is the cost: the waits for a descheduled partner (polling, then sleeping) and the operation's own work, which the
 * collectives' series, measured with no computing beside them, do not hold. The host's mean, the median of as many
 * rounds as fit in about SPAN_S seconds (the first replay, which warms the kernels up, gives the pace), 3 to 7.
 * It was the difference between replays with and without the all-reduces, which also held what the waits do to
 * the kernels around them, but a difference of two replays' times is noisy: from 3 rounds it read 0 to 1.9 ms
 * between calibrations of one 2-vCPU Zen 4 VM at 8 and 16 ranks (-5 to +1.4 ms a round replaying two blocks of
 * gpt2-en), where about 0.1 ms priced gpt2-tiny's oversubscribed tensor-parallel layouts within 10 % and 1.9 ms
 * 3.8x slow. */
static llm4d_code pair_waits(llm4d_comm *world, llm4d_backend *be, const wopts *o, llm4d_profile *frag,
                             llm4d_err *err) {
    enum { MAX_ROUNDS = 7, MIN_ROUNDS = 3, EVERY = 8 };
    const double SPAN_S = 15;
    llm4d_mbtrace t;
    llm4d_replay rp;
    LLM4D_TRY(share_replay(o, be, &t, &rp, err));
    llm4d_comm *pair = NULL;
    llm4d_code rc = llm4d_comm_split(world, world->rank / 2, world->rank, "plancal_pair", &pair, err);
    double pace = omp_get_wtime();
    if (rc == LLM4D_OK) llm4d_replay_run(&rp, 0, rp.rec->n, NULL);
    pace = omp_get_wtime() - pace;
    if (rc == LLM4D_OK) rc = llm4d_comm_allreduce_max(world, &pace, 1, LLM4D_COMM_F64, err);
    int rounds = pace > 0 ? (int)(SPAN_S / pace) : MAX_ROUNDS;
    rounds = o->quick ? 1 : rounds < MIN_ROUNDS ? MIN_ROUNDS : rounds > MAX_ROUNDS ? MAX_ROUNDS : rounds;
    double per[MAX_ROUNDS] = {0};
    for (int q = 0; rc == LLM4D_OK && q < rounds; q++) {
        double cpu = 0;
        int calls = 0;
        rc = llm4d_comm_barrier(world, err);
        if (rc == LLM4D_OK) rc = replay_waits(&rp, pair, EVERY, &cpu, &calls, err);
        double v = calls > 0 ? cpu / calls : 0;
        if (rc == LLM4D_OK) rc = llm4d_comm_allreduce(world, &v, 1, LLM4D_COMM_F64, err);
        per[q] = v / world->size;
    }
    llm4d_comm_destroy(pair);
    llm4d_replay_free(&rp);
    llm4d_mbtrace_free(&t);
    qsort(per, (size_t)rounds, sizeof per[0], cmpd);
    llm4d_prof_share w = {.threads = o->threads, .ranks = world->size};
    w.factor[0] = per[rounds / 2];
    if (rc == LLM4D_OK && world->rank == 0) llm4d_profile_add_pair_wait(frag, &w);
    return rc;
}

static llm4d_code shares(llm4d_comm *world, llm4d_backend *be, const wopts *o, llm4d_profile *frag, llm4d_err *err) {
    llm4d_mbtrace t;
    llm4d_replay rp;
    LLM4D_TRY(share_replay(o, be, &t, &rp, err));
    llm4d_code rc = LLM4D_OK;
    /* rank 0 alone, then every rank at once, in alternation: the median of the rounds' ratios (one round's ratio
     * moved from 0.84 to 1.14 between calibrations of one idle VM, and it scales every multi-rank layout's time).
     * The rounds go on for a few seconds, at least five: five rounds of gpt2-tiny's micro-batch took 50 ms, inside
     * one slow moment of a VM (a calibration of a 2-vCPU EPYC read 1.17-1.22 against 1.00-1.06 for the others that
     * hour, and every 2-rank layout's prediction moved with it) */
    enum { MAX_ROUNDS = 64, MIN_ROUNDS = 5 };
    const int reps = o->quick ? 1 : 3;
    const double span = o->quick ? 0.5 : 3.0, t_start = omp_get_wtime();
    double ratio[LLM4D_WORK_N][MAX_ROUNDS] = {{0}};
    int rounds = 0;
    for (int more = 1; rc == LLM4D_OK && more && rounds < MAX_ROUNDS; rounds++) {
        double alone[LLM4D_WORK_N] = {0}, together[LLM4D_WORK_N + 1] = {0};
        rc = llm4d_comm_barrier(world, err);
        if (rc == LLM4D_OK && world->rank == 0) replay_kinds(&rp, reps, NULL, alone);
        if (rc == LLM4D_OK) rc = llm4d_comm_barrier(world, err);
        if (rc == LLM4D_OK) replay_kinds(&rp, reps, NULL, together);
        /* rank 0's clock decides whether another round follows, for every rank (the sum carries it) */
        together[LLM4D_WORK_N] = world->rank == 0 && (rounds + 1 < MIN_ROUNDS || omp_get_wtime() - t_start < span);
        if (rc == LLM4D_OK) rc = llm4d_comm_allreduce(world, together, LLM4D_WORK_N + 1, LLM4D_COMM_F64, err);
        more = together[LLM4D_WORK_N] > 0.5;
        for (int k = 0; k < LLM4D_WORK_N; k++)
            ratio[k][rounds] = alone[k] > 1e-6 ? together[k] / world->size / alone[k] : 1.0;
    }
    llm4d_prof_share sh = {.threads = o->threads, .ranks = world->size};
    for (int k = 0; k < LLM4D_WORK_N; k++) {
        qsort(ratio[k], (size_t)rounds, sizeof ratio[k][0], cmpd);
        sh.factor[k] = ratio[k][rounds / 2];
    }
    if (rc == LLM4D_OK && world->rank == 0) llm4d_profile_add_share(frag, &sh);
    /* the overlap rate: a 2-rank job, an all-reduce in flight while the trace replays */
    if (rc == LLM4D_OK && world->size == 2) {
        const size_t n = (size_t)(o->quick ? 4 : 16) << 20;
        float *buf = calloc(n, sizeof *buf);
        double comm_s = 0, comp[LLM4D_WORK_N], both[LLM4D_WORK_N], comp_s = 0, both_s = 0;
        if (!buf) rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
        for (int r = 0; rc == LLM4D_OK && r < 2; r++) {
            rc = llm4d_comm_barrier(world, err);
            const double t0 = omp_get_wtime();
            if (rc == LLM4D_OK) rc = llm4d_comm_allreduce(world, buf, n, LLM4D_COMM_F32, err);
            comm_s = omp_get_wtime() - t0;
        }
        if (rc == LLM4D_OK) rc = llm4d_comm_barrier(world, err);
        if (rc == LLM4D_OK) replay_kinds(&rp, 1, NULL, comp);
        llm4d_comm_req req = {0};
        if (rc == LLM4D_OK) rc = llm4d_comm_barrier(world, err);
        const double t0 = omp_get_wtime();
        if (rc == LLM4D_OK) rc = llm4d_comm_iallreduce(world, buf, n, LLM4D_COMM_F32, &req, err);
        if (rc == LLM4D_OK) replay_kinds(&rp, 1, world, both);
        if (rc == LLM4D_OK) rc = llm4d_comm_wait(&req, err);
        const double wall = omp_get_wtime() - t0;
        for (int k = 0; k < LLM4D_WORK_N; k++) comp_s += comp[k], both_s += both[k];
        /* hidden = what the all-reduce did not add to the computing */
        double rate = comp_s > 0 ? (comm_s + comp_s - wall) / comp_s : 0;
        rate = rate < 0 ? 0 : rate > 1 ? 1 : rate;
        if (rc == LLM4D_OK) rc = llm4d_comm_allreduce(world, &rate, 1, LLM4D_COMM_F64, err);
        frag->overlap = rate / 2;
        (void)both_s;
        free(buf);
    }
    llm4d_replay_free(&rp);
    llm4d_mbtrace_free(&t);
    return rc;
}

static int parse(int argc, char **argv, wopts *o) {
    *o = (wopts){.threads = 1, .seq = 256, .layers = 12, .model = "gpt2-en", .comm_path = "auto"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--amp")) o->amp = 1;
        else if (!strcmp(a, "--quick")) o->quick = 1;
        else if (!v) return 0;
        else if (!strcmp(a, "--out")) o->out = v, i++;
        else if (!strcmp(a, "--threads")) o->threads = atoi(v), i++;
        else if (!strcmp(a, "--model")) o->model = v, i++;
        else if (!strcmp(a, "--seq")) o->seq = atoi(v), i++;
        else if (!strcmp(a, "--layers")) o->layers = atoi(v), i++;
        else if (!strcmp(a, "--comm_path")) o->comm_path = v, i++;
        else return 0;
    }
    return o->out && o->threads > 0 && o->seq > 0 && o->layers > 0;
}

int llm4d_calibrate_worker(int argc, char **argv) {
    wopts o;
    if (!parse(argc, argv, &o)) {
        fprintf(stderr, "llm4d __plancal: --out FILE [--threads T --model NAME --seq S --layers L --amp --quick "
                "--comm_path P] (started by llm4d plan --calibrate)\n");
        return 2;
    }
    llm4d_err err = {0};
    llm4d_runtime rt;
    if (llm4d_runtime_init(&rt, NULL, NULL, &err) != LLM4D_OK) return llm4d_runtime_fail(NULL, NULL, &err);
    if (rt.world->watch) llm4d_watch_set(rt.world->watch, 0, 1800); /* the trainer's polling waits */
    llm4d_backend *be = NULL;
    llm4d_profile frag;
    llm4d_profile_init(&frag);
    frag.cores = 1;
    /* the collectives' paths the planned job takes (its comm_path, as llm4d_job_setup sets them up): their times
     * and their memory (the shared-memory path leaves no library temporaries) are what a run will meet */
    llm4d_code rc = rt.world_size > 1 ? llm4d_comm_use_paths(rt.world, o.comm_path, 0, 0, &err) : LLM4D_OK;
    if (rc == LLM4D_OK) rc = llm4d_backend_cpu_create(&be, o.threads, &err);
    if (rc == LLM4D_OK && o.amp) rc = be->set_precision(be, LLM4D_PREC_BF16, &err);
    /* the base: what a rank holds when the trainer plans (its start-up measurement is already done and freed) */
    if (rc == LLM4D_OK && be->matmul_peak_gflops) be->matmul_peak_gflops(be);
    double base = (double)llm4d_heap_resident();
    if (rc == LLM4D_OK) rc = llm4d_comm_allreduce_max(rt.world, &base, 1, LLM4D_COMM_F64, &err);
    frag.n_base = 1, frag.base_ranks[0] = rt.world_size, frag.base_bytes[0] = base;
    const int k = rt.world_size;
    for (int g = 2; rc == LLM4D_OK && g <= k; g++) {
        if (k % g) continue;
        for (int op = LLM4D_COMM_OP_ALLREDUCE; rc == LLM4D_OK && op <= LLM4D_COMM_OP_ALLGATHER; op++)
            rc = series(rt.world, g, op, &o, &frag, &err);
        if (rc == LLM4D_OK) rc = series(rt.world, g, LLM4D_PROF_AR_SHARED, &o, &frag, &err);
        if (rc == LLM4D_OK && g == 2) rc = series(rt.world, 2, LLM4D_COMM_OP_SEND, &o, &frag, &err);
    }
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (rc == LLM4D_OK && k >= 2 && (long)k * o.threads <= cores) rc = shares(rt.world, be, &o, &frag, &err);
    if (rc == LLM4D_OK && k >= 2 && k % 2 == 0 && (long)k * o.threads > cores)
        rc = pair_waits(rt.world, be, &o, &frag, &err);
    if (rc == LLM4D_OK && k == 2) rc = wait_cpu(rt.world, &frag.wait_cpu_s, &err);
    if (rc == LLM4D_OK && rt.rank == 0) rc = llm4d_profile_save(&frag, o.out, &err);
    llm4d_profile_free(&frag);
    if (be) be->destroy(be);
    if (rc != LLM4D_OK) return llm4d_runtime_fail(&rt, NULL, &err);
    llm4d_runtime_finalize(&rt);
    return 0;
}
