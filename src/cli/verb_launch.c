/* verb_launch.c — `llm4d launch`, the multi-process launcher, and its two hidden helpers.
 *
 *   llm4d launch --nproc N [--hostfile FILE] [--log_dir DIR] -- VERB ARGS...
 *
 * runs Open MPI's mpirun (the distributed engine: with a hostfile the same command spans machines) as
 *
 *   mpirun --oversubscribe --bind-to none [--allow-run-as-root] -np N [--hostfile FILE]
 *          /path/to/llm4d __worker --log_dir DIR -- VERB ARGS...
 *
 * --oversubscribe lets N exceed the cores, --bind-to none stops Open MPI pinning every rank to one core when there
 * are more ranks than cores (our ranks run OpenMP threads), and --allow-run-as-root is added only when we are root
 * (containers), because mpirun refuses root otherwise.
 *
 * `__worker` is what mpirun starts on every rank. It reads its rank from the launcher's environment, truncates
 * DIR/workerlog.<rank> (Paddle's launcher layout), forks the real rank — `llm4d VERB ARGS...` exec'd with stdout
 * and stderr going to that file — and stays as its parent:
 *   - rank 0's output goes through a pipe that the worker copies both to the file and to its own stdout, which
 *     mpirun forwards to the terminal: rank 0 is echoed, the other ranks only write their files;
 *   - the rank runs with PR_SET_PDEATHSIG = SIGKILL, so when mpirun kills a worker its rank dies too; a
 *     termination signal the worker receives is passed on to the rank;
 *   - OMP_NUM_THREADS, unless set, becomes cores / ranks on this host, so N ranks do not each start one
 *     OpenMP thread per core;
 *   - the first line of DIR/workerlog.<rank> names the host the rank runs on (a multi-host job's logs usually end
 *     up side by side);
 *   - when the rank ends the worker records how (DIR/.workerexit.<rank>: pid, exit code or signal, whether the
 *     worker had passed a signal on, wall time) and exits with the same status (128 + signal for a signal).
 * mpirun treats a non-zero exit (or MPI_Abort) of any rank as the end of the job and kills the others, so a rank
 * killed with SIGKILL or failing a user check brings every process down within a second or two.
 *
 * After mpirun returns, the launcher reads the .workerexit files to name the rank that ended the job: the earliest
 * one that exited with a non-zero code or died of a signal nobody passed on to it (ranks killed as part of the
 * shutdown are not the cause). It prints e.g. `llm4d launch: rank 1 (pid 4242) was killed by signal 9 (Killed);
 * see log/workerlog.1` plus the last lines of that rank's log, and exits with that rank's code (a user error on
 * any rank: 2), or 128 + signal. With no such record (a remote rank, mpirun itself failing) it reports mpirun's
 * exit code. The launcher passes SIGTERM/SIGHUP/SIGINT sent to it alone on to mpirun (which stops the job) and
 * then exits 128 + signal; a terminal's Ctrl-C already reaches mpirun, which is in the same process group.
 *
 * `__commtest` is a small job for the tests: it builds the topology and its groups, prints them, and all-reduces
 * a vector every step, checking the sums; --fail_rank/--fail_step make one rank fail a "user check" mid-job.
 *
 * Limits: the .workerexit records are read from the launcher's file system, so with a hostfile the culprit is only
 * named when it ran on the launching host (or log_dir is shared); mpirun's exit code is reported otherwise. */
#define _GNU_SOURCE /* pipe2, signalfd, strsignal */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <omp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/job.h"
#include "core/fs.h"
#include "core/error.h"
#include "core/log.h"
#include "comm/comm.h"
#include "comm/runtime.h"
#include "comm/topology.h"

#define EXIT_RECORD_PREFIX ".workerexit."

/* ---------------------------------------------------------------------------------------------------------- */
/* small helpers                                                                                              */

/* `--key value` or `--key=value` at argv[*i]; advances *i past what it used. */
static const char *opt_value(int argc, char **argv, int *i, const char *key, int *bad) {
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

static int parse_int(const char *s, long lo, long hi, int *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

static int self_exe(char *buf, size_t cap) {
    ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
    if (n <= 0 || (size_t)n >= cap - 1) return -1;
    buf[n] = '\0';
    return 0;
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The job's rank of this process, from the MPI launcher's environment; -1 when not started by one. */
static int env_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        int r;
        if (v && parse_int(v, 0, INT_MAX, &r)) return r;
    }
    return -1;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* exit records: how each rank ended, written by __worker, read by launch                                      */

typedef struct {
    int valid;
    int rank;
    long pid;
    int signaled;  /* 1: value is a signal number; 0: value is an exit code */
    int value;
    int forwarded; /* the worker had passed a termination signal on before the rank ended */
    double time;   /* wall clock when the worker saw the rank end */
} exit_record;

static void record_path(char *buf, size_t cap, const char *log_dir, int rank) {
    snprintf(buf, cap, "%s/" EXIT_RECORD_PREFIX "%d", log_dir, rank);
}

static void write_record(const char *log_dir, const exit_record *e) {
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    record_path(path, sizeof path, log_dir, e->rank);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "pid %ld\nsignaled %d\nvalue %d\nforwarded %d\ntime %.6f\n", e->pid, e->signaled, e->value,
            e->forwarded, e->time);
    if (fclose(f) == 0) rename(tmp, path); /* whole or absent, never half written */
}

static int read_record(const char *log_dir, int rank, exit_record *e) {
    char path[PATH_MAX];
    record_path(path, sizeof path, log_dir, rank);
    memset(e, 0, sizeof *e);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int n = fscanf(f, "pid %ld\nsignaled %d\nvalue %d\nforwarded %d\ntime %lf", &e->pid, &e->signaled, &e->value,
                   &e->forwarded, &e->time);
    fclose(f);
    e->rank = rank;
    e->valid = n == 5;
    return e->valid;
}

/* Did this rank end the job (rather than being ended by it)? */
static int record_is_cause(const exit_record *e) {
    if (!e->valid) return 0;
    if (!e->signaled) return e->value != 0;
    return !e->forwarded;
}

static void describe(char *buf, size_t cap, const exit_record *e) {
    if (e->signaled)
        snprintf(buf, cap, "rank %d (pid %ld) was killed by signal %d (%s)", e->rank, e->pid, e->value,
                 strsignal(e->value));
    else snprintf(buf, cap, "rank %d (pid %ld) exited with code %d", e->rank, e->pid, e->value);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* llm4d launch                                                                                               */

static void launch_usage(FILE *f) {
    fprintf(f, "usage: llm4d launch --nproc N [--hostfile FILE] [--log_dir DIR] -- VERB [ARGS...]\n"
               "  runs N processes of `llm4d VERB ARGS...` through Open MPI's mpirun (set LLM4D_MPIRUN to use\n"
               "  another mpirun); each rank writes DIR/workerlog.<rank> (default DIR: log), rank 0 is also echoed\n"
               "  here; exits with the job's exit code (2 when a rank hit a user error)\n");
}

/* The last `lines` lines of a file, each prefixed, to f. */
static void print_tail(FILE *f, const char *path, int lines, const char *prefix) {
    FILE *in = fopen(path, "r");
    if (!in) return;
    if (fseek(in, 0, SEEK_END) == 0) {
        long size = ftell(in);
        long start = size > 8192 ? size - 8192 : 0; /* enough for the last few lines */
        fseek(in, start, SEEK_SET);
    }
    char buf[8193];
    size_t n = fread(buf, 1, sizeof buf - 1, in);
    fclose(in);
    buf[n] = '\0';
    while (n > 0 && buf[n - 1] == '\n') buf[--n] = '\0';
    int seen = 0;
    size_t from = 0;
    for (size_t i = n; i > 0; i--)
        if (buf[i - 1] == '\n' && ++seen == lines) {
            from = i;
            break;
        }
    for (char *line = buf + from, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        fprintf(f, "%s%s\n", prefix, line);
    }
}

/* Removes exit records left by an earlier job in the same log_dir, so they cannot be mistaken for this one's. */
static void remove_old_records(const char *log_dir, int nproc) {
    char path[PATH_MAX];
    for (int r = 0; r < nproc; r++) {
        record_path(path, sizeof path, log_dir, r);
        unlink(path);
    }
}

int llm4d_cmd_launch(int argc, char **argv) {
    int nproc = 0, bad = 0, cmd = -1;
    const char *hostfile = NULL, *log_dir = "log", *v;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            cmd = i + 1;
            break;
        }
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            launch_usage(stdout);
            return 0;
        }
        if ((v = opt_value(argc, argv, &i, "--nproc", &bad))) {
            if (!parse_int(v, 1, 1 << 20, &nproc)) {
                fprintf(stderr, "llm4d launch: --nproc '%s' is not a process count >= 1\n", v);
                return 2;
            }
        } else if ((v = opt_value(argc, argv, &i, "--hostfile", &bad))) hostfile = v;
        else if ((v = opt_value(argc, argv, &i, "--log_dir", &bad))) log_dir = v;
        else if (bad) {
            fprintf(stderr, "llm4d launch: %s needs a value\n", argv[i]);
            return 2;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "llm4d launch: unknown option '%s'; options: --nproc N --hostfile FILE --log_dir DIR, "
                            "then -- and the command\n", argv[i]);
            return 2;
        } else {
            cmd = i; /* the command may follow without `--` */
            break;
        }
        if (bad) {
            fprintf(stderr, "llm4d launch: %s needs a value\n", argv[i]);
            return 2;
        }
    }
    if (nproc < 1) {
        fprintf(stderr, "llm4d launch: give the number of processes with --nproc N\n");
        launch_usage(stderr);
        return 2;
    }
    if (cmd < 0 || cmd >= argc) {
        fprintf(stderr, "llm4d launch: no command to run; e.g. llm4d launch --nproc %d -- train -c config.yaml\n",
                nproc);
        return 2;
    }
    if (!strcmp(argv[cmd], "launch") || !strcmp(argv[cmd], "__worker")) {
        fprintf(stderr, "llm4d launch: the command to launch is `llm4d %s`, which would launch again; give a verb "
                        "such as train\n", argv[cmd]);
        return 2;
    }
    if (!strcmp(argv[cmd], "train")) { /* a bad configuration is one line here, not one per rank */
        char **targs = calloc((size_t)(argc - cmd) + 1, sizeof *targs);
        llm4d_config *cfg = calloc(1, sizeof *cfg);
        llm4d_err err = {0};
        llm4d_job_debug dbg;
        llm4d_code rc = !targs || !cfg ? llm4d_fail(&err, LLM4D_ENOMEM, "out of memory")
                                       : llm4d_job_config(llm4d_job_take_debug(argc - cmd, argv + cmd, targs, &dbg),
                                                          targs, nproc, cfg, NULL, &err);
        free(targs);
        free(cfg);
        if (rc != LLM4D_OK) {
            fprintf(stderr, "llm4d: %s\n", err.msg);
            return llm4d_exit_code(rc);
        }
    }
    if (hostfile && access(hostfile, R_OK) != 0) {
        fprintf(stderr, "llm4d launch: cannot read the hostfile %s: %s\n", hostfile, strerror(errno));
        return 2;
    }
    if (llm4d_mkdir_p(log_dir, 0755) != 0) {
        fprintf(stderr, "llm4d launch: cannot create the log directory %s: %s; choose another with --log_dir\n",
                log_dir, strerror(errno));
        return 2;
    }
    remove_old_records(log_dir, nproc);
    char exe[PATH_MAX];
    if (self_exe(exe, sizeof exe) != 0) {
        fprintf(stderr, "llm4d launch: cannot find the llm4d executable through /proc/self/exe\n");
        return 1;
    }
    const char *mpirun = getenv("LLM4D_MPIRUN");
    if (!mpirun || !*mpirun) mpirun = "mpirun";

    char np[16];
    snprintf(np, sizeof np, "%d", nproc);
    int n_cmd = argc - cmd;
    char **args = calloc((size_t)(n_cmd + 20), sizeof *args);
    if (!args) return 1;
    int k = 0;
    args[k++] = (char *)mpirun;
    args[k++] = "--oversubscribe";
    args[k++] = "--bind-to";
    args[k++] = "none";
    if (geteuid() == 0) args[k++] = "--allow-run-as-root";
    args[k++] = "-np";
    args[k++] = np;
    if (hostfile) {
        args[k++] = "--hostfile";
        args[k++] = (char *)hostfile;
    }
    args[k++] = exe;
    args[k++] = "__worker";
    args[k++] = "--log_dir";
    args[k++] = (char *)log_dir;
    args[k++] = "--";
    for (int i = 0; i < n_cmd; i++) args[k++] = argv[cmd + i];
    args[k] = NULL;

    fprintf(stderr, "llm4d launch: %d process%s, logs in %s/workerlog.<rank>, rank 0 shown here\n", nproc,
            nproc == 1 ? "" : "es", log_dir);
    fflush(stdout);
    fflush(stderr);

    /* Signals arrive through sigtimedwait below rather than a handler, so no global state is needed. */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, &old);

    int errpipe[2]; /* reports a failed exec of mpirun */
    if (pipe2(errpipe, O_CLOEXEC) != 0) {
        perror("llm4d launch: pipe");
        free(args);
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("llm4d launch: fork");
        free(args);
        return 1;
    }
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        close(errpipe[0]);
        execvp(mpirun, args);
        int e = errno;
        (void)llm4d_write_all(errpipe[1], &e, sizeof e); /* a reader gone: nothing useful to do */
        _exit(127);
    }
    close(errpipe[1]);
    int exec_errno = 0;
    ssize_t got = read(errpipe[0], &exec_errno, sizeof exec_errno);
    close(errpipe[0]);
    free(args);
    if (got == (ssize_t)sizeof exec_errno) {
        waitpid(pid, NULL, 0);
        sigprocmask(SIG_SETMASK, &old, NULL);
        fprintf(stderr, "llm4d launch: cannot run %s: %s; install Open MPI (mpirun) or set LLM4D_MPIRUN to its path\n",
                mpirun, strerror(exec_errno));
        return 2;
    }

    int status = 0, passed_on = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) {
            perror("llm4d launch: waitpid");
            status = 1 << 8;
            break;
        }
        siginfo_t info;
        struct timespec tick = {1, 0};
        int sig = sigtimedwait(&set, &info, &tick);
        /* a signal sent to us alone (kill, a scheduler) is passed on; a terminal's Ctrl-C reached mpirun too */
        if (sig > 0 && sig != SIGCHLD && (info.si_code == SI_USER || info.si_code == SI_QUEUE)) {
            kill(pid, sig);
            passed_on = sig;
        }
    }
    sigprocmask(SIG_SETMASK, &old, NULL);

    int mpirun_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (mpirun_code == 0) return 0;

    /* mpirun can return while the workers it stopped are still writing their records: give them a moment (a
     * worker killed outright writes none, hence the time limit; once a cause is known, a shorter one for an
     * earlier cause still being written) */
    exit_record cause = {0};
    for (int tries = 0, waited_after_cause = 0; tries < 40 && waited_after_cause < 6; tries++) {
        if (cause.valid) waited_after_cause++;
        int n_valid = 0;
        cause.valid = 0;
        for (int r = 0; r < nproc; r++) {
            exit_record e;
            if (!read_record(log_dir, r, &e)) continue;
            n_valid++;
            if (record_is_cause(&e) && (!cause.valid || e.time < cause.time)) cause = e;
        }
        if (n_valid == nproc) break;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (!cause.valid && passed_on) {
        fprintf(stderr, "llm4d launch: the job was stopped by signal %d (%s) sent to the launcher\n", passed_on,
                strsignal(passed_on));
        return 128 + passed_on;
    }
    if (!cause.valid) {
        fprintf(stderr, "llm4d launch: mpirun exited with code %d; see %s/workerlog.* and mpirun's messages above\n",
                mpirun_code, log_dir);
        return mpirun_code;
    }
    char what[128];
    describe(what, sizeof what, &cause);
    fprintf(stderr, "llm4d launch: %s; see %s/workerlog.%d\n", what, log_dir, cause.rank);
    if (cause.rank != 0) { /* rank 0's lines were already shown */
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/workerlog.%d", log_dir, cause.rank);
        fprintf(stderr, "llm4d launch: last lines of %s:\n", path);
        print_tail(stderr, path, 6, "  | ");
    }
    return cause.signaled ? 128 + cause.value : cause.value;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* llm4d __worker --log_dir DIR -- VERB ARGS...   (started by mpirun on every rank)                           */

int llm4d_cmd_worker(int argc, char **argv) {
    const char *log_dir = "log", *v;
    int bad = 0, cmd = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            cmd = i + 1;
            break;
        }
        if ((v = opt_value(argc, argv, &i, "--log_dir", &bad))) log_dir = v;
        else {
            fprintf(stderr, "llm4d __worker: unexpected argument '%s' (this verb is started by llm4d launch)\n",
                    argv[i]);
            return 2;
        }
    }
    int rank = env_rank();
    if (cmd < 0 || cmd >= argc || rank < 0) {
        fprintf(stderr, "llm4d __worker: run by `llm4d launch` under mpirun only (no rank in the environment or no "
                        "command)\n");
        return 2;
    }
    if (llm4d_mkdir_p(log_dir, 0755) != 0) { /* on another host of a hostfile job the directory may not exist yet */
        fprintf(stderr, "llm4d __worker: rank %d cannot create %s: %s\n", rank, log_dir, strerror(errno));
        return 2;
    }
    char log_path[PATH_MAX], exe[PATH_MAX];
    snprintf(log_path, sizeof log_path, "%s/workerlog.%d", log_dir, rank);
    int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
        fprintf(stderr, "llm4d __worker: rank %d cannot write %s: %s\n", rank, log_path, strerror(errno));
        return 2;
    }
    if (self_exe(exe, sizeof exe) != 0) {
        fprintf(stderr, "llm4d __worker: cannot find the llm4d executable through /proc/self/exe\n");
        return 1;
    }
    /* which host ran this rank: the first thing to know when one rank of a multi-host job misbehaves */
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown (%s)", strerror(errno));
    dprintf(log_fd, "llm4d worker: rank %d runs on host %s\n", rank, host);
    /* rank 0 only: its stdout and stderr come through pipes that this worker copies to the file and to its own
     * stdout and stderr (which mpirun forwards to the terminal) */
    int pipes[2][2] = {{-1, -1}, {-1, -1}};
    if (rank == 0 && (pipe2(pipes[0], O_CLOEXEC) != 0 || pipe2(pipes[1], O_CLOEXEC) != 0)) {
        perror("llm4d __worker: pipe");
        return 1;
    }

    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, &old);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC);
    if (sfd < 0) {
        perror("llm4d __worker: signalfd");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN); /* if mpirun stops reading rank 0's echo, keep writing the file */
    /* if mpirun (or its daemon) goes away without stopping us, stop the rank as if it had asked */
    pid_t launcher = getppid();
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != launcher) raise(SIGTERM); /* blocked: read from sfd below */

    /* N ranks on one host each starting one OpenMP thread per core would run N x cores threads on the cores;
     * unless the user chose, give each local rank its share */
    if (!getenv("OMP_NUM_THREADS")) {
        const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        int local = 1;
        if (!ls || !parse_int(ls, 1, INT_MAX, &local)) local = 1;
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        char threads[24];
        snprintf(threads, sizeof threads, "%ld", cores / local > 1 ? cores / local : 1);
        setenv("OMP_NUM_THREADS", threads, 1);
    }

    /* the watchdog's progress board of the rank (comm/watch.h) lives beside its log; removed when the rank ends */
    if (!getenv("LLM4D_PROGRESS_DIR")) setenv("LLM4D_PROGRESS_DIR", log_dir, 1);
    char board[PATH_MAX];
    snprintf(board, sizeof board, "%s/progress.%d", getenv("LLM4D_PROGRESS_DIR"), rank);

    pid_t parent = getpid();
    pid_t child = fork();
    if (child < 0) {
        perror("llm4d __worker: fork");
        return 1;
    }
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(137); /* the worker died before prctl took effect */
        dup2(rank == 0 ? pipes[0][1] : log_fd, STDOUT_FILENO);
        dup2(rank == 0 ? pipes[1][1] : log_fd, STDERR_FILENO);
        signal(SIGPIPE, SIG_DFL); /* ignored dispositions survive exec: give the rank the default back */
        sigprocmask(SIG_SETMASK, &old, NULL);
        int n_cmd = argc - cmd;
        char **args = calloc((size_t)n_cmd + 2, sizeof *args);
        if (!args) _exit(1);
        args[0] = exe;
        for (int i = 0; i < n_cmd; i++) args[1 + i] = argv[cmd + i];
        execv(exe, args);
        fprintf(stderr, "llm4d __worker: cannot run %s: %s\n", exe, strerror(errno));
        _exit(127);
    }
    for (int k = 0; k < 2; k++)
        if (pipes[k][1] >= 0) close(pipes[k][1]);

    exit_record rec = {.rank = rank, .pid = (long)child};
    int reaped = 0, open_pipes = rank == 0 ? 2 : 0;
    double killed_at = 0; /* when a signal was passed on; a rank that ignores it gets SIGKILL 5 s later */
    char buf[65536];
    while (!reaped || open_pipes > 0) {
        struct pollfd fds[3] = {{.fd = sfd, .events = POLLIN},
                                {.fd = pipes[0][0], .events = POLLIN},
                                {.fd = pipes[1][0], .events = POLLIN}};
        /* once the rank is gone, drain its pipes but do not wait forever on a descendant that still holds them */
        int timeout = reaped ? 1000 : killed_at > 0 ? 200 : -1;
        int ready = poll(fds, 3, timeout);
        if (ready < 0 && errno == EINTR) continue;
        if (ready == 0 && reaped) break;
        for (int k = 0; k < 2; k++) {
            if (fds[1 + k].fd < 0 || !(fds[1 + k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t n = read(pipes[k][0], buf, sizeof buf);
            if (n > 0) {
                (void)llm4d_write_all(log_fd, buf, (size_t)n); /* a failing log: the terminal still has it */
                (void)llm4d_write_all(k == 0 ? STDOUT_FILENO : STDERR_FILENO, buf, (size_t)n);
            } else if (n == 0 || errno != EINTR) {
                close(pipes[k][0]);
                pipes[k][0] = -1;
                open_pipes--;
            }
        }
        if (fds[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si && si.ssi_signo != SIGCHLD && !reaped) {
                kill(child, (int)si.ssi_signo);
                rec.forwarded = 1;
                if (killed_at == 0) killed_at = wall_now();
            }
        }
        if (!reaped) {
            int st;
            if (waitpid(child, &st, WNOHANG) == child) {
                reaped = 1;
                rec.time = wall_now();
                rec.signaled = WIFSIGNALED(st);
                rec.value = rec.signaled ? WTERMSIG(st) : WEXITSTATUS(st);
            } else if (killed_at > 0 && wall_now() - killed_at > 5.0) {
                kill(child, SIGKILL);
                killed_at = wall_now() + 1e9; /* once */
            }
        }
    }
    unlink(board); /* a rank that was killed could not remove its own */
    rec.valid = 1;
    write_record(log_dir, &rec);
    if (rec.signaled || rec.value != 0) {
        char what[128], line[256];
        describe(what, sizeof what, &rec);
        int len = snprintf(line, sizeof line, "llm4d worker: %s%s\n", what,
                           record_is_cause(&rec) ? "" : " as the job was being stopped");
        (void)llm4d_write_all(log_fd, line, (size_t)len);
        /* the cause also goes to mpirun's terminal; ranks stopped by the shutdown stay quiet there */
        if (record_is_cause(&rec)) (void)llm4d_write_all(STDERR_FILENO, line, (size_t)len);
    }
    close(log_fd);
    return rec.signaled ? 128 + rec.value : rec.value;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* llm4d __commtest   (a small collective job for the launcher's tests)                                       */

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
            const char *v = opt_value(argc, argv, &i, keys[k], &bad);
            if (v) {
                if (!parse_int(v, -1, INT_MAX, dst[k])) return commtest_usage();
                matched = 1;
            }
        }
        if (!matched) return commtest_usage();
    }

    llm4d_runtime rt;
    llm4d_err err = {0};
    if (llm4d_runtime_init(&rt, NULL, NULL, &err) != LLM4D_OK) return llm4d_runtime_fail(NULL, &err);
    printf("llm4d commtest: rank %d of %d, pid %ld, %s backend, %d OpenMP threads\n", rt.rank, rt.world_size,
           (long)getpid(), rt.world->ops->backend, omp_get_max_threads());
    fflush(stdout);
    llm4d_log log = {stdout, 1};
    llm4d_topology topo;
    if (deg[0] == 0 && llm4d_topology_derive_dp(rt.world_size, deg[1], deg[2], deg[3], &deg[0], &err) != LLM4D_OK)
        return llm4d_runtime_fail(&rt, &err);
    if (llm4d_topology_init(&topo, rt.world_size, rt.rank, deg[0], deg[1], deg[2], deg[3], &err) != LLM4D_OK)
        return llm4d_runtime_fail(&rt, &err);
    llm4d_topology_print(&topo, &log);
    llm4d_comm_groups g;
    if (llm4d_comm_groups_create(&g, rt.world, &topo, &err) != LLM4D_OK) return llm4d_runtime_fail(&rt, &err);

    float *x = malloc(sizeof(float) * (size_t)(floats > 0 ? floats : 1));
    if (!x) {
        llm4d_fail(&err, LLM4D_ENOMEM, "commtest: out of memory");
        return llm4d_runtime_fail(&rt, &err);
    }
    const int w = topo.data_world;
    for (int s = 0; s < steps; s++) {
        if (rt.rank == fail_rank && s == fail_step) {
            llm4d_fail(&err, LLM4D_EUSER, "commtest: simulated bad input on rank %d at step %d (--fail_rank); "
                                          "remove --fail_rank to run normally", rt.rank, s);
            free(x);
            llm4d_comm_groups_destroy(&g);
            return llm4d_runtime_fail(&rt, &err);
        }
        for (int i = 0; i < floats; i++) x[i] = (float)(topo.data_rank + s + i % 5);
        llm4d_comm_req req = {0};
        if (llm4d_comm_iallreduce(g.data, x, (size_t)floats, LLM4D_COMM_F32, &req, &err) != LLM4D_OK ||
            llm4d_comm_wait(&req, &err) != LLM4D_OK)
            return llm4d_runtime_fail(&rt, &err);
        for (int i = 0; i < floats; i++)
            if (x[i] != (float)(w * (w - 1) / 2 + w * (s + i % 5))) {
                llm4d_fail(&err, LLM4D_EINTERNAL, "commtest: step %d element %d is %g, expected %d", s, i,
                           (double)x[i], w * (w - 1) / 2 + w * (s + i % 5));
                return llm4d_runtime_fail(&rt, &err);
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
