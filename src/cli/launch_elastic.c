/* launch_elastic.c — `llm4d launch --nnodes MIN:MAX --hostfile FILE`: a job that goes on with the hosts that are
 * there, as torchrun's elastic `--nnodes MIN:MAX` and PaddlePaddle's elastic launch do (see launch.h).
 *
 * Hosts. The hostfile is Open MPI's (one host per line; `slots=N` and any other word after the name are ignored;
 * `#` starts a comment) and lists the hosts the job may use, in order of preference. --nproc counts the processes
 * at MAX hosts and is a multiple of MAX: every host runs per_node = nproc / MAX of them.
 *
 * Probes. Before the first run and before every restart the launcher asks every host of the hostfile, all at once,
 * whether it is there: `mpirun -np 1 --host H llm4d __probe`, through the remote-shell agent the job itself uses
 * (ssh, or OMPI_MCA_plm_rsh_agent), within PROBE_TIMEOUT_S. A run uses the first MAX hosts that answered, in the
 * hostfile's order; fewer than MIN ends the job with one line. So a host that stops answering is left out at the
 * next restart, and one that answers again is taken back at the one after: the job shrinks and grows back. Each
 * run gets a hostfile of its own (`host slots=per_node` for the hosts it uses), and mpirun `--map-by slot`, so
 * rank r of a run runs on its host r / per_node.
 *
 * The layout. Which degrees change with the number of processes W: a train job keeps its model-parallel degrees
 * (mp_degree, pp_degree: a model's shards are sized to fit in memory) and its global batch, so it trains the same
 * model; its data-parallel side takes up the difference: dp x sharding = W / (mp x pp), sharding = gcd(the
 * configured sharding_degree, that), and gradient accumulation grows as dp x sharding falls (local batch = global
 * / (dp x sharding)). The checkpoint is resharded on load as for any --resume into another layout, and the data
 * stream and dropout masks are the same in every layout, so the losses after a shrink are the uninterrupted run's
 * but for the summation order (tests/test_elastic.sh: within 1e-5). The launcher appends the new degrees as the
 * train verb's flags, which win over the configuration file's, and checks every host count from MIN to MAX before
 * anything runs: a job that could not continue on fewer hosts is refused at the start, not after a failure. */
#define _GNU_SOURCE /* gethostname */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/launch.h"
#include "core/error.h"

/* How long a host has to answer a probe: an ssh connection to a host that is down times out in about this. */
#define PROBE_TIMEOUT_S 30
#define PROBE_PARALLEL 64

int llm4d_launch_nnodes(const char *s, int *min, int *max) {
    char lo[32], *colon = strchr(s, ':');
    if (!colon) return llm4d_launch_int(s, 1, 1 << 16, min) && (*max = *min, 1);
    if ((size_t)(colon - s) >= sizeof lo) return 0;
    memcpy(lo, s, (size_t)(colon - s));
    lo[colon - s] = 0;
    return llm4d_launch_int(lo, 1, 1 << 16, min) && llm4d_launch_int(colon + 1, 1, 1 << 16, max) && *min <= *max;
}

void llm4d_launch_hosts_free(llm4d_launch_hosts *h) {
    free(h->host);
    memset(h, 0, sizeof *h);
}

llm4d_code llm4d_launch_hosts_read(const char *path, int min, int max, int nproc, llm4d_launch_hosts *h,
                                   llm4d_err *err) {
    memset(h, 0, sizeof *h);
    h->min = min, h->max = max;
    if (nproc % max)
        return llm4d_fail(err, LLM4D_EUSER, "--nproc %d is not a multiple of --nnodes' most hosts, %d: --nproc counts "
                          "the processes on %d hosts, the same number on each", nproc, max, max);
    h->per_node = nproc / max;
    FILE *f = fopen(path, "r");
    if (!f) return llm4d_fail(err, LLM4D_EUSER, "cannot read the hostfile %s: %s", path, strerror(errno));
    char line[1024];
    llm4d_code rc = LLM4D_OK;
    int cap = 0;
    while (rc == LLM4D_OK && fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#'), *p = line, name[LLM4D_HOST_NAME_MAX];
        if (hash) *hash = 0;
        while (isspace((unsigned char)*p)) p++;
        size_t len = strcspn(p, " \t\r\n");
        if (!len) continue;
        if (len >= sizeof name) {
            rc = llm4d_fail(err, LLM4D_EUSER, "the hostfile %s names a host longer than %zu characters", path,
                            sizeof name - 1);
            break;
        }
        memcpy(name, p, len);
        name[len] = 0;
        for (int i = 0; i < h->n; i++)
            if (!strcmp(h->host[i].name, name))
                rc = llm4d_fail(err, LLM4D_EUSER, "the hostfile %s lists %s twice; with --nnodes each host is listed "
                                "once and runs --nproc / MAX processes", path, name);
        if (rc == LLM4D_OK && h->n == cap) {
            cap = cap ? 2 * cap : 16;
            llm4d_launch_host *more = realloc(h->host, (size_t)cap * sizeof *more);
            if (more) h->host = more;
            else rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory reading the hostfile");
        }
        if (rc == LLM4D_OK) {
            memset(&h->host[h->n], 0, sizeof h->host[h->n]);
            snprintf(h->host[h->n].name, sizeof h->host[h->n].name, "%s", name);
            h->n++;
        }
    }
    fclose(f);
    if (rc == LLM4D_OK && h->n < max)
        rc = llm4d_fail(err, LLM4D_EUSER, "the hostfile %s lists %d host%s, and --nnodes %d:%d asks for up to %d; "
                        "list at least %d hosts or lower the most", path, h->n, h->n == 1 ? "" : "s", min, max, max,
                        max);
    if (rc != LLM4D_OK) llm4d_launch_hosts_free(h);
    return rc;
}

/* The last line a probe's mpirun wrote (why the host did not answer), into buf. */
static void last_line(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    char line[512];
    buf[0] = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        const size_t n = strlen(line) < cap ? strlen(line) : cap - 1; /* a long line cut, not an error */
        if (n) memcpy(buf, line, n), buf[n] = 0;
    }
    if (f) fclose(f);
}

/* Starts host i's probe: mpirun's output (the remote shell's complaint) goes to a file, read when it fails. */
static pid_t probe_start(const llm4d_launch_hosts *h, int i, const char *mpirun, const char *exe, const char *path) {
    const pid_t pid = fork();
    if (pid == 0) {
        const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
        const char *args[16];
        int k = 0;
        args[k++] = mpirun;
        args[k++] = "-q";
        if (geteuid() == 0) args[k++] = "--allow-run-as-root";
        args[k++] = "-np", args[k++] = "1", args[k++] = "--host", args[k++] = h->host[i].name;
        args[k++] = exe, args[k++] = "__probe", args[k] = NULL;
        execvp(mpirun, (char **)args);
        fprintf(stderr, "cannot run %s: %s\n", mpirun, strerror(errno));
        _exit(127);
    }
    return pid;
}

int llm4d_launch_hosts_probe(llm4d_launch_hosts *h, const char *mpirun, const char *exe, const char *log_dir) {
    pid_t *pid = calloc((size_t)h->n, sizeof *pid);
    double *until = calloc((size_t)h->n, sizeof *until);
    if (!pid || !until) {
        free(pid);
        free(until);
        return 0;
    }
    char path[PATH_MAX];
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < h->n; i++) {
        h->host[i].up = 0;
        snprintf(h->host[i].why, sizeof h->host[i].why, "its probe could not be started");
    }
    /* at most PROBE_PARALLEL at once (a large cluster is not asked for a thousand remote shells at the same time),
     * each given PROBE_TIMEOUT_S from its own start */
    for (int next = 0, running = 0; next < h->n || running > 0;) {
        while (next < h->n && running < PROBE_PARALLEL) {
            snprintf(path, sizeof path, "%s/.probe.%d", log_dir, next);
            pid[next] = probe_start(h, next, mpirun, exe, path);
            until[next] = llm4d_launch_now() + PROBE_TIMEOUT_S;
            running += pid[next] > 0;
            next++;
        }
        for (int i = 0; i < next; i++) {
            if (pid[i] <= 0) continue;
            int status;
            const pid_t w = waitpid(pid[i], &status, WNOHANG);
            if (w == 0 && llm4d_launch_now() < until[i]) continue;
            snprintf(path, sizeof path, "%s/.probe.%d", log_dir, i);
            if (w == 0) { /* no answer in time: a host that is down, or a remote shell waiting on it */
                kill(pid[i], SIGKILL);
                waitpid(pid[i], &status, 0);
                snprintf(h->host[i].why, sizeof h->host[i].why, "no answer in %d s", PROBE_TIMEOUT_S);
            } else if (w == pid[i] && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
                h->host[i].up = 1;
            } else {
                char line[160];
                last_line(path, line, sizeof line);
                snprintf(h->host[i].why, sizeof h->host[i].why, "%s", line[0] ? line : "its probe failed");
            }
            unlink(path);
            pid[i] = 0;
            running--;
        }
        if (running > 0) {
            struct timespec ts = {0, 50 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    free(pid);
    free(until);
    int up = 0;
    for (int i = 0; i < h->n; i++) up += h->host[i].up;
    return up;
}

int llm4d_launch_hosts_pick(const llm4d_launch_hosts *h, int *use) {
    int n = 0;
    for (int i = 0; i < h->n && n < h->max; i++)
        if (h->host[i].up) use[n++] = i;
    return n;
}

int llm4d_launch_hosts_write(const llm4d_launch_hosts *h, const int *use, int n, const char *path) {
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    for (int i = 0; i < n; i++) fprintf(f, "%s slots=%d\n", h->host[use[i]].name, h->per_node);
    const int bad = fclose(f) != 0;
    return bad || rename(tmp, path) != 0 ? -1 : 0;
}

void llm4d_launch_hosts_describe(const llm4d_launch_hosts *h, const int *use, int n, char *buf, size_t cap) {
    size_t len = (size_t)snprintf(buf, cap, "%d of %d host%s (", n, h->n, h->n == 1 ? "" : "s");
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? " " : "", h->host[use[i]].name);
    for (int i = 0, first = 1; i < h->n && len < cap; i++)
        if (!h->host[i].up) {
            len += (size_t)snprintf(buf + len, cap - len, "%s%s: %s", first ? "; not answering: " : ", ",
                                    h->host[i].name, h->host[i].why);
            first = 0;
        }
    if (len < cap) snprintf(buf + len, cap - len, ")");
}

static int gcd(int a, int b) {
    while (b) {
        const int t = a % b;
        a = b, b = t;
    }
    return a;
}

int llm4d_launch_layout(const llm4d_launch_job *job, int world, llm4d_launch_layout_args *out) {
    memset(out, 0, sizeof *out);
    if (!job->train) return 1; /* another verb: the process count is all that changes */
    const int model = job->mp_degree * job->pp_degree;
    if (model < 1 || world % model) return 0;
    const int dps = world / model;
    out->sharding = gcd(job->sharding_degree, dps);
    out->dp = dps / out->sharding;
    snprintf(out->val[0], sizeof out->val[0], "%d", out->dp);
    snprintf(out->val[1], sizeof out->val[1], "%d", out->sharding);
    snprintf(out->val[2], sizeof out->val[2], "%lld", job->global_batch_size);
    const char *keys[] = {"--dp_degree", "--sharding_degree", "--global_batch_size"};
    for (int i = 0; i < 3; i++) out->argv[out->argc++] = (char *)keys[i], out->argv[out->argc++] = out->val[i];
    out->argv[out->argc++] = "--local_batch_size"; /* derived again from the global batch */
    out->argv[out->argc++] = "0";
    return 1;
}

/* `llm4d __probe`: what a probe runs on a host; answering is all it does. */
int llm4d_cmd_probe(int argc, char **argv) {
    (void)argc, (void)argv;
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown");
    printf("llm4d __probe: %s answers\n", host);
    return 0;
}
