/* calibrate.c — measuring this machine into a machine profile (see calibrate.h): the process memory and what needs
 * several ranks (collectives, shares, overlap) in jobs of the hidden verb __plancal (calib_worker.c), whose results
 * are merged here; then the kernels, in this process (calib_kernels.c). */
#include "plan/calibrate.h"

#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/proc.h"
#include "plan/calib_kernels.h"
#include "plan/coverage.h"
#include "plan/data_mem.h"
#include "plan/replay.h"
#include "plan/search.h"
#include "plan/memplan.h"

/* ---- the jobs ---- */

/* Run argv (NULL-terminated) and wait; its exit code (-1: it could not start). */
static int run(char **argv) {
    const pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        execv(argv[0], argv);
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) < 0) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The model the jobs' shares and overlap replay (one process, micro-batch 1: calib_worker.c): its layers as the
 * preset finalizes them (the parsed configuration's own default is another model's), and its sequence halved
 * while that micro-batch's replay needs more than SHARE_BYTES: the shares are ratios of the same calls run alone
 * and together, and gpt2-en's micro-batch at sequence 1024 held 3.3 GB on each of the 2 ranks and replayed for
 * minutes before the first kernel was measured. */
#define SHARE_BYTES ((size_t)512 << 20)
static void share_shape(const llm4d_calibrate_opts *o, int *seq, int *layers) {
    *seq = o->base->data.max_seq_len, *layers = o->base->model.num_layers;
    llm4d_config *base = malloc(sizeof *base), *cfg = malloc(sizeof *cfg);
    for (int first = 1; base && cfg; first = 0) {
        *base = *o->base;
        base->data.max_seq_len = *seq;
        llm4d_pp_plan pp = {0};
        llm4d_topology topo;
        llm4d_mbtrace t;
        llm4d_err err = {0};
        if (llm4d_plan_single(base, o->global, cfg, &pp, &err) != LLM4D_OK) break;
        if (first) *layers = cfg->model.num_layers;
        const int made = llm4d_layout_stage_topo(cfg, 0, &topo, &err) == LLM4D_OK &&
                         llm4d_mbtrace_make(&t, cfg, &topo, &pp, NULL, &err) == LLM4D_OK;
        llm4d_pp_plan_free(&pp);
        if (!made) break;
        const size_t bytes = llm4d_replay_bytes(&t.rec);
        llm4d_mbtrace_free(&t);
        if (bytes <= SHARE_BYTES || *seq <= 64) break;
        *seq /= 2;
    }
    free(base), free(cfg);
}

/* The model the jobs and the training run measure on: the asked model (its sequence bounded: share_shape), or for a
 * machine calibration, which has none, two blocks of gpt2-en at sequence 64 (the presets' usual GEMMs; its twelve
 * blocks at 1024 took each rank 2.8 GB and minutes of a loaded 2-vCPU VM for ratios that two blocks measure). */
static const char *jobs_model(const llm4d_calibrate_opts *o, int *seq, int *layers) {
    if (o->machine) return *seq = 64, *layers = 2, "gpt2-en";
    share_shape(o, seq, layers);
    return o->base->model.name_or_path[0] ? o->base->model.name_or_path : "gpt2-en";
}

/* One measuring job of k ranks (the worker writes its findings as a profile fragment to out). */
static llm4d_code job(const llm4d_calibrate_opts *o, const char *dir, int k, int threads, const char *out,
                      llm4d_err *err) {
    char np[16], th[16], logs[1100], gb[32];
    snprintf(np, sizeof np, "%d", k);
    snprintf(th, sizeof th, "%d", threads);
    snprintf(logs, sizeof logs, "%s/log%d", dir, k);
    snprintf(gb, sizeof gb, "%lld", o->global);
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)o->self;
    if (k > 1) { /* one rank runs without MPI, as a single-process training run does */
        argv[n++] = "launch", argv[n++] = "--nproc", argv[n++] = np, argv[n++] = "--log_dir", argv[n++] = logs;
        if (o->hostfile) argv[n++] = "--hostfile", argv[n++] = (char *)o->hostfile;
        argv[n++] = "--";
    }
    argv[n++] = "__plancal", argv[n++] = "--out", argv[n++] = (char *)out, argv[n++] = "--threads";
    argv[n++] = th;
    char seq[16], layers[16];
    int S, L;
    argv[n++] = "--model", argv[n++] = (char *)jobs_model(o, &S, &L);
    snprintf(seq, sizeof seq, "%d", S);
    snprintf(layers, sizeof layers, "%d", L);
    argv[n++] = "--seq", argv[n++] = seq, argv[n++] = "--layers", argv[n++] = layers;
    if (o->base->use_amp) argv[n++] = "--amp";
    if (o->quick) argv[n++] = "--quick";
    argv[n++] = "--comm_path", argv[n++] = (char *)o->base->dist.comm_path;
    argv[n] = NULL;
    (void)gb;
    const int code = run(argv);
    if (code != 0)
        return llm4d_fail(err, LLM4D_EINTERNAL, "the %d-rank measuring job failed (exit %d); its logs are in %s", k,
                          code, logs);
    return LLM4D_OK;
}

/* Merge a worker's fragment (a profile file) into prof. */
static llm4d_code merge(llm4d_profile *prof, const char *path, llm4d_err *err) {
    llm4d_profile f;
    LLM4D_TRY(llm4d_profile_load(&f, path, err));
    llm4d_code rc = LLM4D_OK;
    for (int i = 0; i < f.n_colls && rc == LLM4D_OK; i++) rc = llm4d_profile_add_coll(prof, &f.colls[i], err);
    for (int i = 0; i < f.n_share; i++) llm4d_profile_add_share(prof, &f.share[i]);
    for (int i = 0; i < f.n_pair_wait; i++) llm4d_profile_add_pair_wait(prof, &f.pair_wait[i]);
    for (int i = 0; i < f.n_base && prof->n_base < 64; i++)
        prof->base_ranks[prof->n_base] = f.base_ranks[i], prof->base_bytes[prof->n_base++] = f.base_bytes[i];
    if (f.overlap > 0) prof->overlap = f.overlap;
    if (f.oversub_penalty > 0) prof->oversub_penalty = f.oversub_penalty;
    if (f.wait_cpu_s > 0) prof->wait_cpu_s = f.wait_cpu_s;
    if (f.coll_gbps[0] > 0 && f.coll_latency_s[0] > 0)
        prof->coll_gbps[0] = f.coll_gbps[0], prof->coll_latency_s[0] = f.coll_latency_s[0];
    llm4d_profile_free(&f);
    return rc;
}

static void describe_machine(llm4d_profile *p) {
    p->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (p->cores < 1) p->cores = 1;
    const long long mt = llm4d_proc_kb("/proc/meminfo", "MemTotal");
    p->memory_bytes = mt > 0 ? (double)mt : 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(p->cpu, sizeof p->cpu, "%s", strchr(line, ':') + 2);
            p->cpu[strcspn(p->cpu, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
    struct utsname u;
    if (uname(&u) == 0) snprintf(p->name, sizeof p->name, "%s", u.nodename);
    const time_t now = time(NULL);
    struct tm tmv;
    strftime(p->when, sizeof p->when, "%Y-%m-%dT%H:%M:%S", localtime_r(&now, &tmv));
    double la[1] = {0};
    FILE *l = fopen("/proc/loadavg", "r");
    if (l && fscanf(l, "%lf", &la[0]) == 1) p->load = la[0];
    if (l) fclose(l);
}

/* What a short training run holds beyond what the planner counts for it: its closing line "memory plan against the
 * run: planned X MiB, peak resident set Y MiB" and its start-up line "memory plan: A MiB to allocate on top of H MiB
 * held now". The planner counts the calibration job's base (measured in a process that has set up less than a
 * trainer: 1.7-1.9 MiB less on a 2-vCPU EPYC at 1 and 16 ranks, which made a 34 MiB pipeline rank's plan 5 % low),
 * the data loader's index and the plan (A, the libraries' working set of a step included: plan/memplan.h); the
 * residue is the rest: Y - A - base - data, what this machine holds beyond that working set (negative where it
 * holds less). */
static double residual_of(const char *log, double base, double data, double *planned_out, double *peak_out,
                          double *plan_bytes) {
    FILE *f = fopen(log, "r");
    char line[1024];
    double planned = 0, peak = 0, add = -1, held = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "memory plan against the run: planned ");
        if (p) sscanf(p, "memory plan against the run: planned %lf MiB, peak resident set %lf", &planned, &peak);
        p = strstr(line, "memory plan: ");
        if (p && sscanf(p, "memory plan: %lf MiB to allocate on top of %lf MiB held now", &add, &held) != 2) add = -1;
    }
    if (f) fclose(f);
    *planned_out = planned, *peak_out = peak, *plan_bytes = add > 0 ? add * 1048576.0 : 0;
    if (peak <= 0 || add < 0) return 0; /* the run did not get that far: no residue known */
    return (peak - add) * 1048576.0 - base - data;
}

/* The residue of a short training run of model (seq, L layers; o's data and precision) in tmp (residual_of);
 * *plan_bytes: what its plan allocated (0: the run did not get that far). */
static double residue_run(const llm4d_calibrate_opts *o, const char *tmp, const char *model, int seq, int L,
                          double base1, double *plan_bytes) {
    enum { RUN_STEPS = 3 }; /* of global batch 1, micro-batch 1 */
    char log[1200], outd[1200], seqs[16], layers[48], steps[16];
    snprintf(log, sizeof log, "%s/train.log", tmp);
    snprintf(outd, sizeof outd, "%s/out", tmp);
    snprintf(seqs, sizeof seqs, "%d", seq);
    snprintf(layers, sizeof layers, "Model.num_layers=%d", L);
    snprintf(steps, sizeof steps, "%d", RUN_STEPS);
    /* through a shell that forks it: a process started straight from this one would inherit this one's peak
     * resident size (Linux keeps the maximum across fork and exec), which is what the run measures */
    char *argv[] = {"/bin/sh", "-c", "\"$@\"; exit $?", "sh", (char *)o->self, "train", "--model_name_or_path",
                    (char *)model, "--input_dir", (char *)o->base->data.input_dir, "--max_seq_len", seqs, "-o", layers,
                    "--global_batch_size", "1", "--micro_batch_size", "1", "--max_steps", steps, "--save_steps",
                    "-1", "--logging_freq", "1", "--output_dir", outd, "--use_amp",
                    o->base->use_amp ? "true" : "false", NULL};
    const pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(log, "w", stdout) || !freopen(log, "a", stderr)) _exit(127);
        execv(argv[0], argv);
        _exit(127);
    }
    int ws = 0;
    if (pid > 0) waitpid(pid, &ws, 0);
    /* the run's own data index, as the planner counts it (its batch and steps; one data rank) */
    double data = 0, planned = 0, peak = 0;
    llm4d_config *run = malloc(sizeof *run);
    if (run) {
        *run = *o->base;
        run->global_batch_size = 1, run->local_batch_size = 1, run->max_steps = RUN_STEPS;
        run->data.max_seq_len = seq;
        llm4d_err derr = {0};
        if (llm4d_plan_data_bytes(run, 1, &data, &derr) != LLM4D_OK) data = 0;
        free(run);
    }
    const double r = residual_of(log, base1, data, &planned, &peak, plan_bytes);
    fprintf(stderr, "llm4d plan --calibrate: a training process of %s (%d layers, sequence %d) holds %+.1f MiB beyond "
            "its base, data index and plan (its own plan %.1f MiB, peak resident %.1f MiB)\n", model, L, seq,
            r / 1048576.0, planned, peak);
    return r;
}

/* A re-run of a calibration continues what an earlier one at the same path measured when it is this machine's (host
 * name, processor, cores) with the same setup (the collectives' path, the hostfile, --quick: what the jobs
 * measured on): its kernels are kept (a part whose calls are all measured replays nothing) and so are its jobs (a
 * rank count in its process bases was measured). Anything else is measured afresh. */
static void setup_of(const llm4d_calibrate_opts *o, char *buf, size_t n) {
    snprintf(buf, n, "comm_path %s, hostfile %s%s", o->base->dist.comm_path, o->hostfile ? o->hostfile : "none",
             o->quick ? ", quick" : "");
}

static int continues(const llm4d_profile *old, const llm4d_profile *now, const char *setup) {
    return old->calibrated && !strcmp(old->name, now->name) && !strcmp(old->cpu, now->cpu) &&
           old->cores == now->cores && !strcmp(old->setup, setup);
}

static int job_done(const llm4d_profile *p, int k) {
    for (int i = 0; i < p->n_base; i++)
        if (p->base_ranks[i] == k) return 1;
    return 0;
}

/* What the kernels are measured for, as the planner names it when the profile cannot price another model (the
 * model's sizes as one process finalizes them: plan/coverage.h). */
static void measured_for(const llm4d_calibrate_opts *o, char *buf, size_t n) {
    llm4d_config *c = malloc(sizeof *c);
    llm4d_pp_plan pp = {0};
    llm4d_err err = {0};
    const int ok = c && llm4d_plan_single(o->base, o->global, c, &pp, &err) == LLM4D_OK;
    llm4d_pp_plan_free(&pp);
    const llm4d_config *m = ok ? c : o->base;
    snprintf(buf, n, "%.48s (hidden %d, %d layers) at sequence %d, %s, global batch %lld, up to %d ranks",
             m->model.name_or_path[0] ? m->model.name_or_path : "model", m->model.hidden_size, m->model.num_layers,
             m->data.max_seq_len, llm4d_memplan_precision(m) == LLM4D_PREC_FP32 ? "fp32" : "bf16", o->global,
             o->max_ranks);
    free(c);
}

llm4d_code llm4d_calibrate(const llm4d_calibrate_opts *o0, llm4d_err *err) {
    llm4d_calibrate_opts o = *o0;
    llm4d_calib_progress pg = {.path = o.profile_path, .t0 = omp_get_wtime()};
    if (o.budget_s > 0) pg.deadline = pg.t0 + o.budget_s;
    llm4d_profile prof;
    llm4d_profile_init(&prof);
    describe_machine(&prof);
    if (o.max_ranks <= 0) o.max_ranks = prof.cores;
    if (o.global <= 0) o.global = o.max_ranks;
    char setup[256], what[160];
    setup_of(&o, setup, sizeof setup);
    /* an earlier calibration at this path, continued when it can be */
    llm4d_profile old;
    llm4d_err lerr = {0};
    if (access(o.profile_path, F_OK) == 0 && llm4d_profile_load(&old, o.profile_path, &lerr) == LLM4D_OK) {
        if (continues(&old, &prof, setup)) {
            fprintf(stderr, "llm4d plan --calibrate: continuing the calibration in %s (%s: %d kernel shapes, %d "
                    "collective series kept; remove the file to measure afresh)\n", o.profile_path,
                    old.complete ? "complete" : "interrupted", old.n_kernels, old.n_colls);
            snprintf(old.when, sizeof old.when, "%s", prof.when);
            old.load = prof.load;
            llm4d_profile_free(&prof);
            prof = old;
        } else {
            fprintf(stderr, "llm4d plan --calibrate: %s was measured on %s (%s, %d cores) with %s: measuring afresh\n",
                    o.profile_path, old.name, old.cpu, old.cores, old.calibrated ? old.setup : "no calibration record");
            llm4d_profile_free(&old);
        }
    }
    prof.calibrated = 1, prof.complete = 0;
    snprintf(prof.setup, sizeof prof.setup, "%s", setup);
    llm4d_grid grid;
    if (o.machine) {
        char why[256];
        if (!llm4d_grid_parse(o.grid, &grid, why, sizeof why)) {
            llm4d_profile_free(&prof);
            return llm4d_fail(err, LLM4D_EUSER, "%s", why);
        }
        char desc[128];
        llm4d_grid_describe(&grid, desc, sizeof desc);
        snprintf(what, sizeof what, "a machine grid (%s), %s", desc,
                 o.quick ? (llm4d_memplan_precision(o.base) == LLM4D_PREC_FP32 ? "fp32" : "bf16") : "fp32 and bf16");
        /* a grid measured before into this file is kept (its points replay nothing): the two grids' union */
        if (prof.machine && strcmp(prof.grid, desc))
            fprintf(stderr, "llm4d plan --calibrate --machine: %s held the grid %s; adding %s\n", o.profile_path,
                    prof.grid, desc);
        prof.machine = 1;
        snprintf(prof.grid, sizeof prof.grid, "%s", desc);
    } else {
        measured_for(&o, what, sizeof what);
    }
    llm4d_profile_add_for(&prof, what);
    /* the directory of the profile must exist (the default one is made) */
    char dir[LLM4D_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", o.profile_path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = 0;
        for (char *p = dir + 1; *p; p++)
            if (*p == '/') *p = 0, mkdir(dir, 0755), *p = '/';
        mkdir(dir, 0755);
    }
    char tmp[] = "/tmp/llm4d-calibrate-XXXXXX";
    if (!mkdtemp(tmp)) {
        llm4d_profile_free(&prof);
        return llm4d_fail(err, LLM4D_EIO, "cannot make a temporary directory in /tmp: %s", strerror(errno));
    }
    fprintf(stderr, "llm4d plan --calibrate: %s, %d cores, load average %.2f now%s\n", prof.cpu, prof.cores, prof.load,
            prof.load > 0.5 * prof.cores ? " (a busy machine measures slow: the profile records the load)" : "");
    /* marked unfinished from the start: a re-run continues it */
    llm4d_code rc = llm4d_calib_checkpoint(&prof, &pg, err);
    /* process base, collectives, shares: a job per rank count (one rank: no MPI, as a single-process run); first,
     * since they take about the same time whatever the model, and the time budget bounds the kernels after them */
    for (int k = 1; rc == LLM4D_OK && k <= o.max_ranks; k *= 2) {
        if (job_done(&prof, k)) {
            fprintf(stderr, "llm4d plan --calibrate: %d rank%s: measured before\n", k, k == 1 ? "" : "s");
            continue;
        }
        char out[1200], a[32];
        snprintf(out, sizeof out, "%s/part%d.json", tmp, k);
        const int threads = prof.cores / k > 0 ? prof.cores / k : 1;
        rc = job(&o, tmp, k, threads, out, err);
        if (rc == LLM4D_OK) rc = merge(&prof, out, err);
        if (rc == LLM4D_OK) rc = llm4d_calib_checkpoint(&prof, &pg, err);
        fprintf(stderr, "llm4d plan --calibrate: %d rank%s measured (%s elapsed)\n", k, k == 1 ? "" : "s",
                llm4d_calib_mmss(omp_get_wtime() - pg.t0, a, sizeof a));
    }
    /* the residue of a short training run, when the configuration names data that exists; a machine calibration,
     * which prices any model, measures it at two sizes (the residue grows with the model: oneDNN's packing buffers
     * and primitives for wider layers: +0.2-0.3 MiB for gpt2-tiny, +3.3-5.0 for two blocks of GPT-2 124M on a Zen 4),
     * and the planner interpolates by a rank's plan (llm4d_profile_residual) */
    struct stat st;
    if (rc == LLM4D_OK && o.base->data.input_dir[0] && stat(o.base->data.input_dir, &st) == 0) {
        double base1 = 0;
        for (int i = 0; i < prof.n_base; i++)
            if (prof.base_ranks[i] == 1) base1 = prof.base_bytes[i];
        int share_seq, L; /* the model's layers as finalized */
        const char *model = jobs_model(&o, &share_seq, &L);
        prof.n_residue = 0;
        if (o.machine) {
            double plan = 0;
            const double r = residue_run(&o, tmp, "gpt2-tiny", share_seq, L, base1, &plan);
            if (plan > 0) prof.residue_plan[0] = plan, prof.residue_at[0] = r, prof.n_residue = 1;
        }
        double plan = 0;
        prof.residual_bytes = residue_run(&o, tmp, model, o.machine ? share_seq : o.base->data.max_seq_len, L, base1,
                                          &plan);
        if (prof.n_residue == 1 && plan > prof.residue_plan[0])
            prof.residue_plan[1] = plan, prof.residue_at[1] = prof.residual_bytes, prof.n_residue = 2;
        else
            prof.n_residue = 0;
    }
    if (rc == LLM4D_OK)
        rc = o.machine ? llm4d_calib_measure_grid(&o, &grid, &prof, &pg, err)
                       : llm4d_calib_measure_kernels(&o, &prof, &pg, err);
    prof.complete = rc == LLM4D_OK && pg.late == 0;
    if (rc == LLM4D_OK) rc = llm4d_calib_checkpoint(&prof, &pg, err);
    if (rc == LLM4D_OK) {
        char a[32];
        fprintf(stderr, "llm4d plan --calibrate: wrote %s (%d kernel shapes, %d collective series) in %s", o.profile_path,
                prof.n_kernels, prof.n_colls, llm4d_calib_mmss(omp_get_wtime() - pg.t0, a, sizeof a));
        if (pg.late)
            fprintf(stderr, "; the time budget (--calibrate_budget %.0f) left %d of the %s unmeasured, "
                    "priced from the nearest measured: run the same command again to measure them\n", o.budget_s,
                    pg.late, o.machine ? "grid points" : "model's parts");
        else
            fputc('\n', stderr);
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "llm4d plan --calibrate: could not remove %s\n", tmp);
    llm4d_profile_free(&prof);
    return rc;
}
