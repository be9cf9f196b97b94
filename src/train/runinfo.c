/* runinfo.c — output_dir/run.json: what produced a run, for `llm4d report` (and for whoever reads the directory
 * a year later).
 *
 * metrics.jsonl has the numbers of every step but not their context: which version, which machine, which layout,
 * which configuration. Rank 0 writes that once, at start-up (before the first step, so a run that fails early still
 * has it): the version (train/version.h), the machine (host, CPU, cores, memory, the kernel and OS, threads per rank,
 * backend, precision and its measured matmul peak), the 4D grid with every rank's coordinates and the blocks its
 * pipeline stage holds, every configuration key (config/config_json.c), and where the logs and traces go (the
 * launcher's log directory reaches the rank as LLM4D_PROGRESS_DIR, the launch's run id as LLM4D_RUN_ID). A resumed
 * run rewrites it (start_step says so); metrics.jsonl keeps the history. Written to a temporary name and renamed,
 * so a reader never sees half a file.
 *
 * How the run ended is added when it ends ("end": finished, or failed with the error's line), and "process" names
 * the process that wrote it (pid, start time, PID namespace; the host is machine.host): a run of `llm4d train`
 * without the launcher has no worker logs or exit records, so this is how `llm4d report` tells one that failed, or
 * whose process is gone without a word (a terminal's Ctrl-C, a kill), from one still going on.
 *
 * Format "llm4d run 2": a key given in megabytes (bucket_size_mb) is in megabytes, as the user gave it, rather
 * than in the bytes the configuration holds (format 1, which the report converts back); model.parameters is the
 * whole model's count, model.parameters_rank0 rank 0's part of it (its pipeline stage, its tensor-parallel
 * slice). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "config/schema.h"
#include "core/proc.h"
#include "train/trainer.h"
#include "train/version.h"

/* The value of "key<spaces>: value" in a /proc-style text file, or "" (into buf). */
static void file_field(const char *path, const char *key, char *buf, size_t n) {
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[512];
    const size_t kn = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, kn)) continue;
        const char *v = line + kn;
        while (*v == ' ' || *v == '\t' || *v == ':' || *v == '=' || *v == '"') v++;
        snprintf(buf, n, "%s", v);
        buf[strcspn(buf, "\"\n")] = 0;
        break;
    }
    fclose(f);
}

/* An absolute path for path (as given when it cannot be resolved). */
static void add_path(cJSON *o, const char *name, const char *path) {
    if (!path || !path[0]) {
        cJSON_AddNullToObject(o, name);
        return;
    }
    char abs[PATH_MAX];
    cJSON_AddStringToObject(o, name, realpath(path, abs) ? abs : path);
}

static void add_machine(cJSON *root, const llm4d_trainer *tr) {
    cJSON *m = cJSON_AddObjectToObject(root, "machine");
    char buf[256];
    if (gethostname(buf, sizeof buf - 1) != 0) snprintf(buf, sizeof buf, "unknown");
    buf[sizeof buf - 1] = 0;
    cJSON_AddStringToObject(m, "host", buf);
    file_field("/proc/cpuinfo", "model name", buf, sizeof buf);
    cJSON_AddStringToObject(m, "cpu", buf[0] ? buf : "unknown");
    cJSON_AddNumberToObject(m, "cores", (double)sysconf(_SC_NPROCESSORS_ONLN));
    file_field("/proc/meminfo", "MemTotal", buf, sizeof buf);
    cJSON_AddNumberToObject(m, "memory_gib", atof(buf) / 1048576.0);
    struct utsname u;
    if (uname(&u) == 0) {
        snprintf(buf, sizeof buf, "%s %s %s", u.sysname, u.release, u.machine);
        cJSON_AddStringToObject(m, "kernel", buf);
    }
    file_field("/etc/os-release", "PRETTY_NAME", buf, sizeof buf);
    if (buf[0]) cJSON_AddStringToObject(m, "os", buf);
    cJSON_AddStringToObject(m, "compiler", __VERSION__);
    cJSON_AddStringToObject(m, "backend", tr->be->name);
    cJSON_AddNumberToObject(m, "threads_per_rank", tr->be->nthreads);
    cJSON_AddStringToObject(m, "precision", tr->precision == LLM4D_PREC_FP16   ? "fp16"
                                            : tr->precision == LLM4D_PREC_BF16 ? "bf16"
                                                                               : "fp32");
    if (tr->peak_gflops > 0) cJSON_AddNumberToObject(m, "matmul_peak_gflops", tr->peak_gflops);
}

/* The grid and every rank's place in it: coordinates, and the blocks of its pipeline stage per chunk. */
static llm4d_code add_layout(cJSON *root, const llm4d_trainer *tr, llm4d_err *err) {
    const llm4d_config *c = tr->cfg;
    const llm4d_topology *me = &tr->topo;
    const int P = c->dist.pp_degree, V = c->model.virtual_pp_degree, L = c->model.num_layers;
    cJSON *l = cJSON_AddObjectToObject(root, "layout");
    cJSON_AddNumberToObject(l, "world_size", me->world_size);
    cJSON *deg = cJSON_AddObjectToObject(l, "degrees");
    for (int a = 0; a < LLM4D_NAXES; a++) cJSON_AddNumberToObject(deg, llm4d_axis_name((llm4d_axis)a), me->degree[a]);
    const int sharded = c->dist.sharding_degree > 1, pipelined = tr->ppplan.P > 1;
    cJSON_AddNumberToObject(l, "sharding_stage", sharded ? c->dist.sharding_stage : 0);
    cJSON_AddBoolToObject(l, "sharding_offload", sharded && c->dist.sharding_offload);
    cJSON_AddBoolToObject(l, "sequence_parallel", c->model.sequence_parallel && me->degree[LLM4D_AXIS_MODEL] > 1);
    cJSON_AddStringToObject(l, "pp_schedule", pipelined ? tr->ppplan.runs->name : "none");
    cJSON_AddNumberToObject(l, "virtual_pp_degree", V);
    cJSON_AddNumberToObject(l, "micro_batches", (double)c->accumulate_steps);
    /* the split decided once for the run (parallel/pp_plan.h); no pipeline: one stage of every block */
    const int whole[2] = {0, L};
    const int *lo = pipelined ? tr->ppplan.lo : whole, *hi = pipelined ? tr->ppplan.hi : whole + 1;
    llm4d_code rc = LLM4D_OK;
    (void)err;
    cJSON *ranks = cJSON_AddArrayToObject(l, "ranks");
    for (int r = 0; rc == LLM4D_OK && r < me->world_size; r++) {
        llm4d_topology t;
        rc = llm4d_topology_init(&t, me->world_size, r, me->degree[0], me->degree[1], me->degree[2], me->degree[3],
                                 err);
        if (rc != LLM4D_OK) break;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", r);
        for (int a = 0; a < LLM4D_NAXES; a++) cJSON_AddNumberToObject(o, llm4d_axis_name((llm4d_axis)a), t.index[a]);
        const int s = t.index[LLM4D_AXIS_PIPE];
        cJSON *blocks = cJSON_AddArrayToObject(o, "blocks");
        for (int ch = 0; ch < (pipelined ? V : 1); ch++) {
            const int v = pipelined ? llm4d_pp_vstage(P, ch, s) : 0;
            const int pair[2] = {lo[v], hi[v]};
            cJSON_AddItemToArray(blocks, cJSON_CreateIntArray(pair, 2));
        }
        cJSON_AddBoolToObject(o, "embedding", s == 0);
        cJSON_AddBoolToObject(o, "head", s == P - 1);
        cJSON_AddItemToArray(ranks, o);
    }
    return rc;
}

static void add_model(cJSON *root, const llm4d_trainer *tr) {
    const llm4d_config *c = tr->cfg;
    const llm4d_model_config *m = &c->model;
    cJSON *o = cJSON_AddObjectToObject(root, "model");
    llm4d_model_part whole = llm4d_model_part_whole(m);
    llm4d_param_table t;
    llm4d_err e;
    if (llm4d_param_table_build(&t, m, &whole, &e) == LLM4D_OK) {
        cJSON_AddNumberToObject(o, "parameters", (double)t.total_real);
        llm4d_param_table_free(&t);
    }
    cJSON_AddNumberToObject(o, "parameters_rank0", (double)tr->model.table.total_real);
    cJSON_AddNumberToObject(o, "layers", m->num_layers);
    cJSON_AddNumberToObject(o, "hidden_size", m->hidden_size);
    cJSON_AddNumberToObject(o, "heads", m->num_attention_heads);
    cJSON_AddNumberToObject(o, "vocab_size", m->vocab_size);
    cJSON_AddNumberToObject(o, "max_seq_len", c->data.max_seq_len);
    cJSON_AddNumberToObject(o, "flops_per_token", tr->flops_per_token);
    cJSON_AddNumberToObject(o, "tokens_per_step", (double)c->global_batch_size * c->data.max_seq_len);
}

/* root as output_dir/run.json, written to a temporary name and renamed (a reader never sees half a file) */
static llm4d_code write_run_json(const char *output_dir, const cJSON *root, llm4d_err *err) {
    char *text = cJSON_Print(root);
    if (!text) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    char path[LLM4D_PATH_MAX + 32], tmp[LLM4D_PATH_MAX + 40];
    snprintf(path, sizeof path, "%s/run.json", output_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0) ok = 0;
    const int e = errno;
    free(text);
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return llm4d_fail(err, LLM4D_EUSER, "cannot write %s: %s; choose a writable --output_dir", path,
                          strerror(ok ? errno : e));
    }
    return LLM4D_OK;
}

llm4d_code llm4d_trainer_write_runinfo(llm4d_trainer *tr, llm4d_err *err) {
    if (!tr->is_writer) return LLM4D_OK;
    const llm4d_config *c = tr->cfg;
    cJSON *root = cJSON_CreateObject();
    if (!root) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    cJSON_AddStringToObject(root, "format", "llm4d run 2");
    cJSON_AddStringToObject(root, "version", llm4d_version());
    cJSON_AddStringToObject(root, "version_date", llm4d_version_date());
    const time_t now = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %Z", localtime(&now));
    cJSON_AddStringToObject(root, "started", when);
    cJSON_AddNumberToObject(root, "started_unix_s", (double)now);
    cJSON_AddNumberToObject(root, "start_step", (double)tr->start_step);
    cJSON_AddNumberToObject(root, "max_steps", (double)c->max_steps);
    add_path(root, "output_dir", c->output_dir);
    add_path(root, "log_dir", getenv("LLM4D_PROGRESS_DIR")); /* set by `llm4d launch` to its log directory */
    /* the launch's id, also on the first line of every worker log and in every exit record: the report reads
     * only the logs of this run (cli/launch.h) */
    const char *run_id = getenv("LLM4D_RUN_ID");
    if (run_id && run_id[0]) cJSON_AddStringToObject(root, "run_id", run_id);
    else cJSON_AddNullToObject(root, "run_id");
    add_path(root, "trace_dir", c->trace_dir);
    if (c->trace_dir[0]) {
        const double steps[2] = {(double)c->trace_first, c->trace_last > c->max_steps ? (double)c->max_steps
                                                                                     : (double)c->trace_last};
        cJSON_AddItemToObject(root, "trace_steps", cJSON_CreateDoubleArray(steps, 2));
    }
    add_model(root, tr);
    add_machine(root, tr);
    cJSON *proc = cJSON_AddObjectToObject(root, "process");
    cJSON_AddNumberToObject(proc, "pid", (double)getpid());
    cJSON_AddNumberToObject(proc, "start_ticks", (double)llm4d_proc_start_ticks(0));
    char ns[64];
    if (llm4d_proc_pid_ns(ns, sizeof ns) == 0) cJSON_AddStringToObject(proc, "pid_ns", ns);
    llm4d_code rc = add_layout(root, tr, err);
    cJSON *cfg = llm4d_config_json(c);
    if (cfg) cJSON_AddItemToObject(root, "config", cfg);
    /* megabyte keys as the user gave them (format 2), not in the bytes the configuration holds */
    int nk;
    const llm4d_key *k = llm4d_keys(&nk);
    cJSON *vals = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "values") : NULL;
    for (int i = 0; vals && i < nk; i++)
        if (k[i].type == LLM4D_KT_MB && cJSON_GetObjectItemCaseSensitive(vals, k[i].key))
            cJSON_ReplaceItemInObjectCaseSensitive(
                vals, k[i].key, cJSON_CreateNumber((double)*(const int64_t *)((const char *)c + k[i].off) / 1048576.0));
    if (rc == LLM4D_OK) rc = write_run_json(c->output_dir, root, err);
    if (rc == LLM4D_OK) tr->runinfo = root;
    else cJSON_Delete(root);
    return rc;
}

void llm4d_trainer_runinfo_end(llm4d_trainer *tr, const llm4d_err *failed) {
    if (!tr->runinfo) return; /* not rank 0, or run.json was never written */
    cJSON *end = cJSON_AddObjectToObject(tr->runinfo, "end");
    cJSON_AddStringToObject(end, "status", failed ? "failed" : "finished");
    if (failed) cJSON_AddStringToObject(end, "error", failed->msg);
    cJSON_AddNumberToObject(end, "unix_s", (double)time(NULL));
    llm4d_err err = {0};
    /* the run's own outcome stands; the report then reads the run as its logs or its process say */
    if (write_run_json(tr->cfg->output_dir, tr->runinfo, &err) != LLM4D_OK)
        llm4d_log_warn(&tr->log, "run.json: how the run ended not recorded (%s)", err.msg);
}
