/* launch_common.c — the run id, the exit records and the housekeeping of `llm4d launch` and its workers (see
 * launch.h). */
#define _GNU_SOURCE /* strsignal */
#include "cli/launch.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

const char *llm4d_launch_opt(int argc, char **argv, int *i, const char *key, int *bad) {
    size_t n = strlen(key);
    if (strncmp(argv[*i], key, n) != 0) return NULL;
    if (argv[*i][n] == '=') return argv[*i] + n + 1;
    if (argv[*i][n] != '\0') return NULL;
    if (*i + 1 >= argc) {
        *bad = 1;
        return NULL;
    }
    (*i)++;
    return argv[*i];
}

int llm4d_launch_int(const char *s, long lo, long hi, int *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

int llm4d_launch_self_exe(char *buf, size_t cap) {
    ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
    if (n <= 0 || (size_t)n >= cap - 1) return -1;
    buf[n] = '\0';
    return 0;
}

double llm4d_launch_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int llm4d_run_id_valid(const char *id) {
    if (!isalnum((unsigned char)id[0])) return 0; /* "-": a record without one */
    size_t n = 0;
    for (; id[n]; n++)
        if (!isalnum((unsigned char)id[n]) && id[n] != '-') return 0;
    return n > 0 && n < LLM4D_RUN_ID_MAX;
}

void llm4d_launch_make_run_id(char *buf, size_t cap) {
    /* the time says when, the pid tells apart two launches in one second on one host, the random bits two hosts */
    unsigned short r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        r = (unsigned short)(ts.tv_nsec ^ (ts.tv_nsec >> 16));
    }
    const time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y%m%d-%H%M%S", &tm);
    snprintf(buf, cap, "%s-%ld-%04x", when, (long)getpid(), (unsigned)r);
}

void llm4d_launch_block_signals(sigset_t *set, sigset_t *old, int chld) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);
    if (chld) sigaddset(set, SIGCHLD);
    sigprocmask(SIG_BLOCK, set, old);
}

static void record_path(char *buf, size_t cap, const char *log_dir, int rank) {
    snprintf(buf, cap, "%s/" LLM4D_EXIT_RECORD_PREFIX "%d", log_dir, rank);
}

void llm4d_exit_record_write(const char *log_dir, const llm4d_exit_record *e) {
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    record_path(path, sizeof path, log_dir, e->rank);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "pid %ld\nsignaled %d\nvalue %d\nforwarded %d\ntime %.6f\nrun %s\n", e->pid, e->signaled, e->value,
            e->forwarded, e->time, e->run_id[0] ? e->run_id : "-");
    if (fclose(f) == 0) rename(tmp, path); /* whole or absent, never half written */
}

int llm4d_exit_record_read(const char *log_dir, int rank, llm4d_exit_record *e) {
    char path[PATH_MAX];
    record_path(path, sizeof path, log_dir, rank);
    memset(e, 0, sizeof *e);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int n = fscanf(f, "pid %ld\nsignaled %d\nvalue %d\nforwarded %d\ntime %lf", &e->pid, &e->signaled, &e->value,
                   &e->forwarded, &e->time);
    char id[LLM4D_RUN_ID_MAX] = "";
    if (n == 5 && fscanf(f, " run %63s", id) == 1 && llm4d_run_id_valid(id)) snprintf(e->run_id, sizeof e->run_id,
                                                                                       "%s", id);
    fclose(f);
    e->rank = rank;
    e->valid = n == 5;
    return e->valid;
}

int llm4d_exit_record_is_cause(const llm4d_exit_record *e) {
    if (!e->valid) return 0;
    if (!e->signaled) return e->value != 0;
    return !e->forwarded;
}

void llm4d_exit_record_describe(char *buf, size_t cap, const llm4d_exit_record *e) {
    if (e->signaled)
        snprintf(buf, cap, "rank %d (pid %ld) was killed by signal %d (%s)", e->rank, e->pid, e->value,
                 strsignal(e->value));
    else snprintf(buf, cap, "rank %d (pid %ld) exited with code %d", e->rank, e->pid, e->value);
}

/* name = prefix + a decimal number (and nothing else): that number, else -1. */
static long numbered(const char *name, const char *prefix) {
    const size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) || !isdigit((unsigned char)name[n])) return -1;
    char *end;
    const long v = strtol(name + n, &end, 10);
    return *end ? -1 : v;
}

void llm4d_launch_clean_log_dir(const char *log_dir, int nproc) {
    DIR *d = opendir(log_dir);
    if (!d) return;
    const struct dirent *de;
    char path[PATH_MAX];
    while ((de = readdir(d))) {
        const char *name = de->d_name;
        const long log_rank = numbered(name, "workerlog.");
        const int stale = !strncmp(name, LLM4D_EXIT_RECORD_PREFIX, strlen(LLM4D_EXIT_RECORD_PREFIX)) ||
                          numbered(name, "progress.") >= 0 || log_rank >= nproc;
        if (!stale || snprintf(path, sizeof path, "%s/%s", log_dir, name) >= (int)sizeof path) continue;
        unlink(path);
    }
    closedir(d);
}

int llm4d_launch_remove_matching(const char *dir, const char *prefix, const char *suffix) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    const struct dirent *de;
    char path[PATH_MAX];
    int removed = 0;
    const size_t np = strlen(prefix), ns = strlen(suffix);
    while ((de = readdir(d))) {
        const size_t n = strlen(de->d_name);
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || n < np + ns) continue;
        if (strncmp(de->d_name, prefix, np) || strcmp(de->d_name + n - ns, suffix)) continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path) continue;
        removed += unlink(path) == 0;
    }
    closedir(d);
    return removed;
}

void llm4d_launch_remove_shm_dir(const char *dir) {
    if (!dir || !dir[0]) return;
    llm4d_launch_remove_matching(dir, "", "");
    rmdir(dir);
}
