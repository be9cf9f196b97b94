/* verb_launch.c — `llm4d launch`, the multi-process launcher.
 *
 *   llm4d launch --nproc N [--hostfile FILE] [--log_dir DIR] -- VERB ARGS...
 *
 * runs Open MPI's mpirun (the distributed engine: with a hostfile the same command spans machines) as
 *
 *   mpirun -q --oversubscribe --bind-to none [--allow-run-as-root] --mca btl_vader_backing_directory SHM
 *          -np N [--hostfile FILE] /path/to/llm4d __worker --log_dir DIR --run_id ID --shm_dir SHM
 *          --launch_host HOST -- VERB ARGS...
 *
 * --oversubscribe lets N exceed the cores, --bind-to none stops Open MPI pinning every rank to one core when there
 * are more ranks than cores (our ranks run OpenMP threads), and --allow-run-as-root is added only when we are root
 * (containers), because mpirun refuses root otherwise. -q keeps Open MPI's own banners (MPI_ABORT's eight lines,
 * "N more processes have sent help message", ORTE_ERROR_LOG lines from help messages cut short by the shutdown)
 * off the terminal: llm4d says what happened in one line; LLM4D_MPI_VERBOSE=1 drops -q for debugging Open MPI.
 * SHM is the job's own directory for Open MPI's shared-memory segments (launch.h), removed after the job, so an
 * interrupted or failed job leaves nothing in /dev/shm (unless OMPI_MCA_btl_vader_backing_directory is set: then
 * the user's choice stands). `__worker` (launch_worker.c) is what mpirun starts on every rank.
 *
 * Before starting anything, for `train`, the launcher checks what every rank would check alike: the configuration
 * (cli/job.h), and, when every rank runs on this host (no hostfile), that the device opens and the data read as
 * corpora (llm4d_job_precheck): such an error is one line (`llm4d launch: <message>`) and exit 2, with no process
 * started. It then gives the
 * job a run id (launch.h) and clears what earlier jobs left in DIR that could be taken for this one's.
 *
 * mpirun treats a non-zero exit (or MPI_Abort) of any rank as the end of the job and kills the others, so a rank
 * killed with SIGKILL or failing a user check brings every process down within a second or two. After mpirun
 * returns, the launcher reads the exit records of this run to name the rank that ended the job: the earliest one
 * that exited with a non-zero code or died of a signal nobody passed on to it (ranks killed as part of the
 * shutdown are not the cause). Then, once:
 *   - a user error (exit code 2): the rank's error line (`llm4d: rank R: ...`), unless rank 0's was already echoed;
 *     exit 2;
 *   - a crash (a signal, another code): `llm4d launch: rank 1 (pid 4242) was killed by signal 9 (Killed); see
 *     log/workerlog.1`, the last lines of that rank's log (rank 0's were shown), and how to resume; exits with
 *     that code, or 128 + signal;
 *   - a job stopped by a signal (SIGTERM/SIGHUP/SIGINT sent to the launcher alone are passed on to mpirun; a
 *     terminal's Ctrl-C reaches mpirun, in the same process group, directly): `llm4d launch: the job was stopped by
 *     signal 2 (Interrupt) at step 16 of 100`, and how to resume; exits 128 + signal;
 * where "how to resume" is one line naming the train job's latest checkpoint (output_dir/latest, or the newest
 * step_N) and the command that continues from it (this command with --resume output_dir). With no record to go by
 * (a remote rank, mpirun itself failing) it reports mpirun's exit code.
 *
 * Limits: the exit records are read from the launcher's file system, so with a hostfile the culprit is named here
 * only when it ran on the launching host (or log_dir is shared); a remote worker names its rank on stderr. */
#define _GNU_SOURCE /* pipe2, strsignal */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/job.h"
#include "cli/launch.h"
#include "ckpt/store.h"
#include "core/error.h"
#include "core/fs.h"
#include "comm/runtime.h"

/* What the launcher knows of a train job, for saying how to resume it. */
typedef struct {
    int train;
    char output_dir[PATH_MAX];
    long long max_steps, save_steps;
} job_info;

static void launch_usage(FILE *f) {
    fprintf(f, "usage: llm4d launch --nproc N [--hostfile FILE] [--log_dir DIR] -- VERB [ARGS...]\n"
               "  runs N processes of `llm4d VERB ARGS...` through Open MPI's mpirun (set LLM4D_MPIRUN to use\n"
               "  another mpirun, LLM4D_MPI_VERBOSE=1 to see Open MPI's own messages); each rank writes\n"
               "  DIR/workerlog.<rank> (default DIR: log), rank 0 is also echoed here; exits with the job's exit code\n"
               "  (2 when a rank hit a user error)\n");
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

/* The error line a rank printed (`llm4d: rank R: ...`, comm/runtime.h, or an internal error's) into buf: 1, or 0
 * when its log has none. */
static int error_line(const char *log_dir, int rank, char *buf, size_t cap) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/workerlog.%d", log_dir, rank);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    int found = 0;
    while (!found && (len = getline(&line, &lcap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        found = !strncmp(line, "llm4d: ", 7) || !strncmp(line, "llm4d internal error", 20);
        if (found) snprintf(buf, cap, "%s", line);
    }
    free(line);
    fclose(f);
    return found;
}

/* ---- how to resume -------------------------------------------------------------------------------------- */

/* The name the user ran llm4d by (`build/llm4d`), for a command to copy; the executable's path otherwise. */
static void program_name(char *buf, size_t cap) {
    FILE *f = fopen("/proc/self/cmdline", "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    if (!buf[0] && llm4d_launch_self_exe(buf, cap) != 0) snprintf(buf, cap, "llm4d");
}

/* One shell word: as it is when it needs no quoting, else in single quotes. */
static void put_word(FILE *f, const char *w) {
    int plain = w[0] != 0;
    for (const char *p = w; *p && plain; p++) plain = isalnum((unsigned char)*p) || strchr("_./=:,+@%-", *p);
    if (plain) {
        fputs(w, f);
        return;
    }
    fputc('\'', f);
    for (const char *p = w; *p; p++) *p == '\'' ? fputs("'\\''", f) : fputc(*p, f);
    fputc('\'', f);
}

/* This launch again (resume: with --resume DIR instead of any --resume the command had). */
static void put_command(FILE *f, int argc, char **argv, int cmd, const char *resume) {
    char prog[PATH_MAX];
    program_name(prog, sizeof prog);
    put_word(f, prog);
    for (int i = 0; i < argc; i++) {
        if (i >= cmd && resume && !strcmp(argv[i], "--resume") && i + 1 < argc) {
            i++;
            continue;
        }
        if (i >= cmd && resume && !strncmp(argv[i], "--resume=", 9)) continue;
        fputc(' ', f);
        put_word(f, argv[i]);
    }
    if (resume) {
        fputs(" --resume ", f);
        put_word(f, resume);
    }
}

/* The last training step metrics.jsonl recorded, when this job wrote it (modified since `since`); 0 otherwise. */
static long long step_reached(const char *dir, double since) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    struct stat st;
    if (stat(path, &st) != 0 || (double)st.st_mtime + 1 < since) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[512];
    long long step = 0, s;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "{\"step\": %lld,", &s) == 1) step = s;
    fclose(f);
    return step;
}

/* One line: the train job's latest checkpoint and the command that resumes from it. */
static void say_resume(const job_info *job, int argc, char **argv, int cmd) {
    if (!job->train || !job->output_dir[0]) return;
    char ckpt[PATH_MAX + 64];
    llm4d_err err;
    if (llm4d_ckpt_resolve(job->output_dir, ckpt, sizeof ckpt, &err) == LLM4D_OK) { /* what --resume would load */
        fprintf(stderr, "llm4d launch: the latest checkpoint is %s; to resume from it: ", ckpt);
        put_command(stderr, argc, argv, cmd, job->output_dir);
    } else {
        char why[64] = "save_steps is off";
        if (job->save_steps > 0) snprintf(why, sizeof why, "one is saved every %lld steps", job->save_steps);
        fprintf(stderr, "llm4d launch: %s holds no checkpoint yet (%s); to start again: ", job->output_dir, why);
        put_command(stderr, argc, argv, cmd, NULL);
    }
    fputc('\n', stderr);
}

/* ---- llm4d launch ---------------------------------------------------------------------------------------- */

/* The configuration of a train command, checked as every rank would check it, and what the launcher keeps of it.
 * local: every rank runs here, so the device and data can be checked here too. */
static llm4d_code check_train(int argc, char **argv, int nproc, int local, job_info *job, llm4d_err *err) {
    char **targs = calloc((size_t)argc + 1, sizeof *targs);
    llm4d_config *cfg = calloc(1, sizeof *cfg);
    llm4d_job_debug dbg;
    llm4d_code rc = !targs || !cfg ? llm4d_fail(err, LLM4D_ENOMEM, "out of memory")
                                   : llm4d_job_config(llm4d_job_take_debug(argc, argv, targs, &dbg), targs, nproc,
                                                      cfg, NULL, err);
    if (rc == LLM4D_OK && local) rc = llm4d_job_precheck(cfg, err);
    if (rc == LLM4D_OK) {
        job->train = 1;
        snprintf(job->output_dir, sizeof job->output_dir, "%s", cfg->output_dir);
        job->max_steps = (long long)cfg->max_steps;
        job->save_steps = (long long)cfg->save_steps;
    }
    free(targs);
    free(cfg);
    return rc;
}

/* Open MPI's verbosity: off unless LLM4D_MPI_VERBOSE is set to something other than 0. */
static int mpi_verbose(void) {
    const char *v = getenv("LLM4D_MPI_VERBOSE");
    return v && v[0] && strcmp(v, "0") != 0;
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
        if ((v = llm4d_launch_opt(argc, argv, &i, "--nproc", &bad))) {
            if (!llm4d_launch_int(v, 1, 1 << 20, &nproc)) {
                fprintf(stderr, "llm4d launch: --nproc '%s' is not a process count >= 1\n", v);
                return 2;
            }
        } else if ((v = llm4d_launch_opt(argc, argv, &i, "--hostfile", &bad))) hostfile = v;
        else if ((v = llm4d_launch_opt(argc, argv, &i, "--log_dir", &bad))) log_dir = v;
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
    }
    if (nproc < 1) {
        fprintf(stderr, "llm4d launch: give the number of processes with --nproc N; e.g. llm4d launch --nproc 2 -- "
                        "train -c config.yaml\n");
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
    job_info job = {0};
    if (!strcmp(argv[cmd], "train")) { /* what every rank would refuse alike is one line here, not one per rank */
        llm4d_err err = {0};
        const llm4d_code rc = check_train(argc - cmd, argv + cmd, nproc, !hostfile, &job, &err);
        if (rc != LLM4D_OK) { /* the verb's form (cli.h): this process is `llm4d launch` */
            fprintf(stderr, "llm4d launch: %s\n", err.msg);
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
    char exe[PATH_MAX], run_id[LLM4D_RUN_ID_MAX], host[256] = "", shm_dir[PATH_MAX] = "";
    if (llm4d_launch_self_exe(exe, sizeof exe) != 0) {
        fprintf(stderr, "llm4d launch: cannot find the llm4d executable through /proc/self/exe\n");
        return 1;
    }
    llm4d_launch_clean_log_dir(log_dir, nproc);
    llm4d_launch_make_run_id(run_id, sizeof run_id);
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "unknown");
    /* Open MPI's shared-memory files go to a directory of this job's, unless the user chose where */
    struct stat st;
    const char *user_shm = getenv("OMPI_MCA_btl_vader_backing_directory");
    if (!(user_shm && user_shm[0]) && stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(shm_dir, sizeof shm_dir, LLM4D_SHM_DIR_PREFIX "%s", run_id);
        if (mkdir(shm_dir, 0700) != 0) shm_dir[0] = 0; /* then Open MPI's default */
    }
    const char *mpirun = getenv("LLM4D_MPIRUN");
    if (!mpirun || !*mpirun) mpirun = "mpirun";

    char np[16];
    snprintf(np, sizeof np, "%d", nproc);
    int n_cmd = argc - cmd;
    char **args = calloc((size_t)(n_cmd + 32), sizeof *args);
    if (!args) return 1;
    int k = 0;
    args[k++] = (char *)mpirun;
    if (!mpi_verbose()) args[k++] = "-q";
    args[k++] = "--oversubscribe";
    args[k++] = "--bind-to";
    args[k++] = "none";
    if (geteuid() == 0) args[k++] = "--allow-run-as-root";
    if (shm_dir[0]) {
        args[k++] = "--mca";
        args[k++] = "btl_vader_backing_directory";
        args[k++] = shm_dir;
    }
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
    args[k++] = "--run_id";
    args[k++] = run_id;
    if (shm_dir[0]) {
        args[k++] = "--shm_dir";
        args[k++] = shm_dir;
    }
    args[k++] = "--launch_host";
    args[k++] = host;
    args[k++] = "--";
    for (int i = 0; i < n_cmd; i++) args[k++] = argv[cmd + i];
    args[k] = NULL;

    fprintf(stderr, "llm4d launch: %d process%s, logs in %s/workerlog.<rank>, rank 0 shown here\n", nproc,
            nproc == 1 ? "" : "es", log_dir);
    fflush(stdout);
    fflush(stderr);
    const double started = llm4d_launch_now();

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
        llm4d_launch_remove_shm_dir(shm_dir);
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("llm4d launch: fork");
        free(args);
        llm4d_launch_remove_shm_dir(shm_dir);
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
        llm4d_launch_remove_shm_dir(shm_dir);
        fprintf(stderr, "llm4d launch: cannot run %s: %s; install Open MPI (mpirun) or set LLM4D_MPIRUN to its path\n",
                mpirun, strerror(exec_errno));
        return 2;
    }

    int status = 0, passed_on = 0, received = 0;
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
        if (sig > 0 && sig != SIGCHLD) received = sig;
        /* a signal sent to us alone (kill, a scheduler) is passed on; a terminal's Ctrl-C reached mpirun too */
        if (sig > 0 && sig != SIGCHLD && (info.si_code == SI_USER || info.si_code == SI_QUEUE)) {
            kill(pid, sig);
            passed_on = sig;
        }
    }
    sigprocmask(SIG_SETMASK, &old, NULL);

    int mpirun_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (mpirun_code == 0) {
        llm4d_launch_remove_shm_dir(shm_dir);
        return 0;
    }

    /* mpirun can return while the workers it stopped are still writing their records: give them a moment (a
     * worker killed outright writes none, hence the time limit; once a cause is known, a shorter one for an
     * earlier cause still being written). Records of another run (a shared log_dir) do not count. */
    llm4d_exit_record cause = {0};
    int stopped = 0; /* ranks a passed-on signal ended */
    for (int tries = 0, waited_after_cause = 0; tries < 40 && waited_after_cause < 6; tries++) {
        if (cause.valid) waited_after_cause++;
        int n_valid = 0;
        cause.valid = 0, stopped = 0;
        for (int r = 0; r < nproc; r++) {
            llm4d_exit_record e;
            if (!llm4d_exit_record_read(log_dir, r, &e) || strcmp(e.run_id, run_id)) continue;
            n_valid++;
            stopped += e.signaled && e.forwarded;
            if (llm4d_exit_record_is_cause(&e) && (!cause.valid || e.time < cause.time)) cause = e;
        }
        if (n_valid == nproc) break;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    /* every rank has ended (or been killed): the job's files in shared memory can go */
    llm4d_launch_remove_shm_dir(shm_dir);

    /* a rank ended by the interrupt itself (a terminal's Ctrl-C reaches the whole process group) was stopped too */
    const int interrupted = cause.valid && cause.signaled && received &&
                            (cause.value == SIGINT || cause.value == SIGTERM || cause.value == SIGHUP);
    if ((!cause.valid || interrupted) && (received || stopped)) { /* stopped, not failing */
        const int sig = passed_on ? passed_on : received;
        const long long step = job.train ? step_reached(job.output_dir, started) : 0;
        char at[96] = "";
        if (step > 0) snprintf(at, sizeof at, " at step %lld of %lld", step, job.max_steps);
        if (sig)
            fprintf(stderr, "llm4d launch: the job was stopped by signal %d (%s)%s%s\n", sig, strsignal(sig),
                    passed_on ? " sent to the launcher" : "", at);
        else fprintf(stderr, "llm4d launch: the job was stopped by a signal to mpirun%s\n", at);
        say_resume(&job, argc, argv, cmd);
        return 128 + (sig ? sig : SIGTERM);
    }
    if (!cause.valid) {
        fprintf(stderr, "llm4d launch: mpirun exited with code %d; see %s/workerlog.*%s\n", mpirun_code, log_dir,
                mpi_verbose() ? " and mpirun's messages above" : ", and run again with LLM4D_MPI_VERBOSE=1 to see "
                                                                 "Open MPI's messages");
        say_resume(&job, argc, argv, cmd);
        return mpirun_code;
    }
    char what[128], line[1100];
    llm4d_exit_record_describe(what, sizeof what, &cause);
    const int said = !cause.signaled && error_line(log_dir, cause.rank, line, sizeof line);
    if (said && cause.value == 2) { /* a user error: its one line, once (rank 0's was echoed) */
        char shown[1100]; /* rank 0's log is complete once mpirun has returned, and all of it was echoed */
        if (cause.rank != 0 && !error_line(log_dir, 0, shown, sizeof shown)) fprintf(stderr, "%s\n", line);
        return 2;
    }
    fprintf(stderr, "llm4d launch: %s; see %s/workerlog.%d\n", what, log_dir, cause.rank);
    if (cause.rank != 0) { /* rank 0's lines were already shown */
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/workerlog.%d", log_dir, cause.rank);
        fprintf(stderr, "llm4d launch: last lines of %s:\n", path);
        print_tail(stderr, path, 6, "  | ");
    }
    say_resume(&job, argc, argv, cmd);
    return cause.signaled ? 128 + cause.value : cause.value;
}
