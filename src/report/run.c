/* run.c — a run read back from its directory, and its state (see run.h). */
#define _GNU_SOURCE /* strsignal */
#include "report/run.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/store.h"
#include "core/proc.h"

const cJSON *llm4d_rp_get(const cJSON *info, const char *path) {
    const cJSON *o = info;
    char key[128];
    for (const char *p = path; o && *p;) {
        const size_t n = strcspn(p, ".");
        snprintf(key, sizeof key, "%.*s", (int)n, p);
        o = cJSON_GetObjectItemCaseSensitive(o, key);
        p += n + (p[n] == '.');
    }
    return o;
}

double llm4d_rp_num(const cJSON *info, const char *path, double fallback) {
    const cJSON *v = llm4d_rp_get(info, path);
    return cJSON_IsNumber(v) ? v->valuedouble : fallback;
}

const char *llm4d_rp_str(const cJSON *info, const char *path, const char *fallback) {
    const cJSON *v = llm4d_rp_get(info, path);
    return cJSON_IsString(v) ? v->valuestring : fallback;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

llm4d_code llm4d_rp_read_whole(const char *path, char **text, size_t *n, llm4d_err *err) {
    *text = NULL, *n = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return LLM4D_OK;
        return llm4d_fail(err, LLM4D_EUSER, "cannot read %s: %s; make it readable", path, strerror(errno));
    }
    size_t cap = 0;
    for (;;) {
        if (*n + 65536 > cap) {
            char *t = realloc(*text, cap = 2 * cap + 131072);
            if (!t) {
                free(*text), *text = NULL;
                fclose(f);
                return llm4d_fail(err, LLM4D_ENOMEM, "out of memory reading %s", path);
            }
            *text = t;
        }
        const size_t got = fread(*text + *n, 1, cap - *n, f);
        *n += got;
        if (!got) break;
    }
    const int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(*text), *text = NULL;
        return llm4d_fail(err, LLM4D_EUSER, "cannot read %s; make it readable", path);
    }
    return LLM4D_OK;
}

/* run.json, whole; NULL info when absent. */
static llm4d_code read_info(llm4d_rp_run *r, const char *path, llm4d_err *err) {
    char *text;
    size_t n;
    LLM4D_TRY(llm4d_rp_read_whole(path, &text, &n, err));
    if (!text) return LLM4D_OK;
    r->info = cJSON_ParseWithLength(text, n);
    free(text);
    if (!r->info || !cJSON_IsObject(r->info))
        return llm4d_fail(err, LLM4D_EUSER, "%s is not a JSON object: the file is damaged; remove it to report from "
                          "metrics.jsonl and the logs alone", path);
    return LLM4D_OK;
}

/* "out (dp2 pp2)": the directory's name and the degrees above 1. */
static void make_label(llm4d_rp_run *r) {
    const char *base = strrchr(r->dir, '/');
    base = base && base[1] ? base + 1 : r->dir;
    char layout[96] = "";
    static const char *const axes[] = {"dp", "pp", "sharding", "mp"};
    size_t k = 0;
    for (int a = 0; a < 4 && k < sizeof layout; a++) {
        char path[32];
        snprintf(path, sizeof path, "layout.degrees.%s", axes[a]);
        const int d = (int)llm4d_rp_num(r->info, path, 1);
        if (d > 1) k += (size_t)snprintf(layout + k, sizeof layout - k, "%s%s%d", k ? " " : "", axes[a], d);
    }
    if (!k && r->info) snprintf(layout, sizeof layout, "1 process");
    snprintf(r->label, sizeof r->label, "%.60s%s%.90s%s", base, layout[0] ? " (" : "", layout, layout[0] ? ")" : "");
}

/* A signal that asks a process to stop (a terminal's Ctrl-C, a scheduler's or a user's kill): an interrupt. */
static int is_interrupt(int sig) { return sig == SIGINT || sig == SIGTERM || sig == SIGHUP; }

/* Was this rank stopped: a signal its worker passed on (the job was being stopped), or an interrupt itself? */
static int stopped_rank(const llm4d_rp_rank *k) {
    return k->exited && k->signaled && (k->forwarded || is_interrupt(k->exit_value));
}

/* Did this rank end the job by failing, rather than being ended by it (the launcher's rule, interrupts aside)? */
static int ended_job(const llm4d_rp_rank *k) {
    return k->exited && (k->signaled ? !stopped_rank(k) : k->exit_value != 0);
}

/* "; the latest checkpoint is out/step_10 (--resume out continues from it)", or that there is none. */
static void resume_note(const llm4d_rp_run *r, char *buf, size_t n) {
    if (r->latest[0]) snprintf(buf, n, "; the latest checkpoint is %s (--resume %s continues from it)", r->latest,
                               r->dir);
    else snprintf(buf, n, "; no checkpoint was saved, so a new run starts over");
}

/* Whether the process that wrote run.json still runs: 1 yes, 0 gone, -1 cannot tell (another host or PID namespace
 * than this one, or a run.json from before it named its process). who: "pid P on host H". */
static int writer_alive(const cJSON *info, char *who, size_t n) {
    const char *host = llm4d_rp_str(info, "machine.host", NULL), *ns = llm4d_rp_str(info, "process.pid_ns", NULL);
    const double pid = llm4d_rp_num(info, "process.pid", -1), ticks = llm4d_rp_num(info, "process.start_ticks", -1);
    char here[256], my_ns[64];
    if (!host || !ns || !(pid > 0) || !(ticks >= 0) || gethostname(here, sizeof here - 1) != 0) return -1;
    here[sizeof here - 1] = 0;
    if (strcmp(host, here) || llm4d_proc_pid_ns(my_ns, sizeof my_ns) != 0 || strcmp(ns, my_ns)) return -1;
    snprintf(who, n, "pid %.0f on host %.200s", pid, host);
    return llm4d_proc_start_ticks((int)pid) == (long long)ticks;
}

static void decide_state(llm4d_rp_run *r) {
    const int64_t last = r->ns ? r->s[r->ns - 1].step : 0;
    for (int i = r->ns - 1; i >= 0 && !r->last_good; i--)
        if (isfinite(r->s[i].loss)) r->last_good = r->s[i].step;
    const llm4d_rp_rank *cause = NULL, *said = NULL, *stop = NULL;
    int all_exited = r->nranks > 0;
    for (int i = 0; i < r->nranks; i++) {
        const llm4d_rp_rank *k = &r->ranks[i];
        if (!k->have_log) continue;
        if (!k->exited) all_exited = 0;
        if (ended_job(k) && !cause) cause = k;
        if (k->error[0] && !said) said = k;
        /* the signal that stopped the job: a rank's own interrupt says it better than the SIGTERM passed on */
        if (stopped_rank(k) && (!stop || (!k->forwarded && stop->forwarded))) stop = k;
    }
    char what[1100] = "", resume[2 * PATH_MAX + 200]; /* both paths whole: latest and the run directory */
    if (cause && cause->error[0]) snprintf(what, sizeof what, "%s", cause->error);
    else if (cause && cause->signaled) snprintf(what, sizeof what, "rank %d was killed by signal %d (%s)", cause->rank,
                                                cause->exit_value, strsignal(cause->exit_value));
    else if (cause) snprintf(what, sizeof what, "rank %d exited with code %d", cause->rank, cause->exit_value);
    else if (said) snprintf(what, sizeof what, "%s", said->error);
    resume_note(r, resume, sizeof resume);
    char good[64] = "no step finished";
    if (r->last_good) snprintf(good, sizeof good, "the last good step is %lld", (long long)r->last_good);
    char of[48] = "";
    if (r->max_steps > 0) snprintf(of, sizeof of, " of %lld", (long long)r->max_steps);
    /* without logs, how run.json says the run ended (its writer adds it), else whether its writer is still there */
    const char *end = r->nranks ? NULL : llm4d_rp_str(r->info, "end.status", NULL);
    char who[300] = "";
    const int alive = r->nranks || end ? -1 : writer_alive(r->info, who, sizeof who);
    if (!what[0] && end && !strcmp(end, "failed")) /* (no cause: a rank that ended the job sets what) */
        snprintf(what, sizeof what, "%s", llm4d_rp_str(r->info, "end.error", "(no message)"));
    if (what[0]) {
        r->state = LLM4D_RP_FAILED;
        snprintf(r->state_line, sizeof r->state_line, "failed (%s): %s%s", good, what, cause || end ? resume : "");
    } else if (stop) {
        r->state = LLM4D_RP_STOPPED;
        snprintf(r->state_line, sizeof r->state_line, "stopped at step %lld%s by signal %d (%s)%s%s",
                 (long long)last, of, stop->exit_value, strsignal(stop->exit_value),
                 stop->forwarded ? ", passed on to every rank by the launcher" : "", resume);
    } else if (r->max_steps > 0 && last >= r->max_steps) {
        r->state = LLM4D_RP_FINISHED;
        snprintf(r->state_line, sizeof r->state_line, "finished: %lld steps", (long long)last);
    } else if (all_exited) {
        r->state = LLM4D_RP_FINISHED;
        snprintf(r->state_line, sizeof r->state_line, "ended after step %lld (every rank exited with code 0)",
                 (long long)last);
    } else if (end) { /* "finished" before max_steps: a run.json edited, or a future way to end early */
        r->state = LLM4D_RP_FINISHED;
        snprintf(r->state_line, sizeof r->state_line, "ended after step %lld (its process said it finished)",
                 (long long)last);
    } else if (alive == 0) {
        r->state = LLM4D_RP_STOPPED;
        snprintf(r->state_line, sizeof r->state_line, "stopped at step %lld%s: its process (%s) is gone without "
                 "saying how it ended (interrupted or killed)%s", (long long)last, of, who, resume);
    } else {
        r->state = LLM4D_RP_RUNNING;
        char blind[PATH_MAX + 200] = "";
        if (r->foreign_logs && !r->nranks)
            snprintf(blind, sizeof blind, "; the worker logs in %.3000s belong to another run (%s%.63s), so none was read and "
                     "a run that stopped cannot be told from one going on", r->log_dir,
                     r->foreign_id[0] ? "run " : "logs without a run id", r->foreign_id);
        else if (!r->nranks && alive == 1)
            snprintf(blind, sizeof blind, "; its process (%s) is running", who);
        else if (!r->nranks)
            snprintf(blind, sizeof blind, "; without worker logs a run that stopped cannot be told from one going on%s",
                     llm4d_rp_get(r->info, "process") ? " (its process ran on another host, or in another PID "
                                                        "namespace, than this report)" : "");
        if (last)
            snprintf(r->state_line, sizeof r->state_line, "in progress: step %lld%s%s%s", (long long)last, of,
                     r->partial_line ? " (the next step's line is being written)" : "", blind);
        else snprintf(r->state_line, sizeof r->state_line, "in progress: no step finished yet%s", blind);
    }
}

llm4d_code llm4d_rp_run_load(llm4d_rp_run *r, const char *dir, const char *log_dir, llm4d_err *err) {
    memset(r, 0, sizeof *r);
    if (!exists(dir))
        return llm4d_fail(err, LLM4D_EUSER, "run directory %s does not exist; give the output_dir of a training run "
                          "(where its metrics.jsonl is)", dir);
    if (!is_dir(dir))
        return llm4d_fail(err, LLM4D_EUSER, "%s is not a directory; give the output_dir of a training run (where its "
                          "metrics.jsonl is)", dir);
    if (strlen(dir) >= sizeof r->dir - 32)
        return llm4d_fail(err, LLM4D_EUSER, "run directory name is too long (%zu characters)", strlen(dir));
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    while (strlen(r->dir) > 1 && r->dir[strlen(r->dir) - 1] == '/') r->dir[strlen(r->dir) - 1] = 0;
    char metrics[PATH_MAX + 32], info[PATH_MAX + 32];
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", r->dir);
    snprintf(info, sizeof info, "%s/run.json", r->dir);
    if (!exists(metrics) && !exists(info))
        return llm4d_fail(err, LLM4D_EUSER, "%s holds neither metrics.jsonl nor run.json, so it is not the output_dir "
                          "of a training run; give the --output_dir a run was started with", dir);
    LLM4D_TRY(read_info(r, info, err));
    LLM4D_TRY(llm4d_rp_read_metrics(r, metrics, err));
    r->max_steps = (int64_t)llm4d_rp_num(r->info, "max_steps", 0);
    if (log_dir) {
        if (!is_dir(log_dir))
            return llm4d_fail(err, LLM4D_EUSER, "--log_dir %s is not a directory; give the directory `llm4d launch "
                              "--log_dir` wrote the run's workerlog.<rank> files to", log_dir);
        snprintf(r->log_dir, sizeof r->log_dir, "%s", log_dir);
    } else {
        const char *l = llm4d_rp_str(r->info, "log_dir", NULL);
        if (l && is_dir(l)) snprintf(r->log_dir, sizeof r->log_dir, "%s", l);
    }
    const char *id = llm4d_rp_str(r->info, "run_id", NULL);
    r->run_id = id && id[0] ? id : NULL;
    llm4d_err none;
    if (llm4d_ckpt_resolve(r->dir, r->latest, sizeof r->latest, &none) != LLM4D_OK) r->latest[0] = 0;
    LLM4D_TRY(llm4d_rp_read_logs(r, (int)llm4d_rp_num(r->info, "layout.world_size", 0), err));
    make_label(r);
    decide_state(r);
    return LLM4D_OK;
}

void llm4d_rp_run_free(llm4d_rp_run *r) {
    free(r->s);
    free(r->e);
    free(r->ranks);
    cJSON_Delete(r->info);
    memset(r, 0, sizeof *r);
}
