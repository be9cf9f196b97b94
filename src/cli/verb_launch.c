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
 * Restarts (--max_restarts N, or the train config's Engine.save_load.max_restarts): a crash (a rank killed, a
 * rank's worker killed, a non-zero exit other than 2, the watchdog ending a hung job) is followed by one line,
 * `llm4d launch: restart 1 of N in 1 s: <what ended it> at step S; resuming from DIR/step_K (M steps lost)`, and
 * the job runs again, from the checkpoint `--resume output_dir` loads (the same command with --resume output_dir;
 * the first run's command when there is no checkpoint yet), under a new run id. A user error and a stop by a
 * signal are never restarted. The delay doubles while the job keeps failing from the same checkpoint (1, 2, 4 s,
 * at most 30), and the third failure in a row from the same checkpoint ends the restarts: the fault is then in the
 * job, not in a machine. The log of the rank that failed is kept as DIR/failed.<k>.workerlog.<rank>.
 *
 * Elasticity (--nnodes MIN:MAX with --hostfile, launch_elastic.c): the hosts are probed before the first run and
 * before every restart, each run goes on the first MAX that answer with its own hostfile and, for a train job, the
 * layout those processes hold (appended as flags); mpirun failing on its own (a remote host gone) is restarted
 * too; fewer than MIN hosts answering ends the job with one line. A new set of hosts restarts the count of
 * failures from the same checkpoint.
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

static void launch_usage(FILE *f) {
    fprintf(f, "usage: llm4d launch --nproc N [--hostfile FILE [--nnodes MIN:MAX]] [--log_dir DIR] [--max_restarts N]\n"
               "                    -- VERB [ARGS...]\n"
               "  runs N processes of `llm4d VERB ARGS...` through Open MPI's mpirun (set LLM4D_MPIRUN to use\n"
               "  another mpirun, LLM4D_MPI_VERBOSE=1 to see Open MPI's own messages); each rank writes\n"
               "  DIR/workerlog.<rank> (default DIR: log), rank 0 is also echoed here; exits with the job's exit code\n"
               "  (2 when a rank hit a user error); --max_restarts N restarts a job whose rank died or hung from its\n"
               "  latest checkpoint, up to N times (default: the train config's Engine.save_load.max_restarts, 0);\n"
               "  --nnodes MIN:MAX makes the job elastic: it runs on the hostfile's first MAX hosts that answer\n"
               "  (--nproc / MAX processes on each), and a restart goes on with those that still answer, as long as\n"
               "  MIN do, a train job keeping mp_degree, pp_degree and its global batch while dp_degree and\n"
               "  sharding_degree follow the number of processes\n");
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

/* ---- llm4d launch ---------------------------------------------------------------------------------------- */

/* The configuration of a train command, checked as every rank would check it, and what the launcher keeps of it.
 * local: every rank runs here, so the device and data can be checked here too. */
static llm4d_code check_train(int argc, char **argv, int nproc, int local, llm4d_launch_job *job, llm4d_err *err) {
    char **targs = calloc((size_t)argc + 1, sizeof *targs);
    llm4d_config *cfg = calloc(1, sizeof *cfg);
    llm4d_debug dbg;
    llm4d_code rc = !targs || !cfg ? llm4d_fail(err, LLM4D_ENOMEM, "out of memory")
                                   : llm4d_job_config(llm4d_job_take_debug(argc, argv, targs, &dbg), targs, nproc,
                                                      cfg, NULL, err);
    if (rc == LLM4D_OK && local) rc = llm4d_job_precheck(cfg, err);
    if (rc == LLM4D_OK) {
        job->train = 1;
        snprintf(job->output_dir, sizeof job->output_dir, "%s", cfg->output_dir);
        job->max_steps = (long long)cfg->max_steps;
        job->save_steps = (long long)cfg->save_steps;
        job->max_restarts = cfg->max_restarts;
        job->mp_degree = cfg->dist.mp_degree;
        job->pp_degree = cfg->dist.pp_degree;
        job->sharding_degree = cfg->dist.sharding_degree;
        job->global_batch_size = (long long)cfg->global_batch_size;
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


/* ---- one run of the job ---------------------------------------------------------------------------------- */

/* What every run of the job shares. */
typedef struct {
    int nproc;
    const char *hostfile, *log_dir, *mpirun;
    int elastic;     /* --nnodes: each run on its own hostfile, rank r on its host r / slots (--map-by slot) */
    char exe[PATH_MAX], host[256];
} launch_setup;

/* How one run of the job ended. */
typedef enum { END_OK, END_USER, END_STOPPED, END_CRASH, END_MPIRUN } end_kind;
typedef struct {
    end_kind kind;
    int code;                /* what the launcher exits with for it */
    int sig, passed_on;      /* END_STOPPED: the signal; passed_on: it was sent to the launcher, which passed it on */
    llm4d_exit_record cause; /* END_USER, END_CRASH: the rank that ended the job */
    int mpirun_code;
    double started;
} run_end;

/* Runs mpirun once with the command cmdv (NULL-terminated) under a new run id, waits for it, and says how the job
 * ended. Returns 0, or -1 when mpirun could not be run at all (said here; end->code is the exit code). */
static int run_once(const launch_setup *ls, char **cmdv, run_end *end) {
    memset(end, 0, sizeof *end);
    char run_id[LLM4D_RUN_ID_MAX], shm_dir[PATH_MAX] = "", np[16];
    llm4d_launch_clean_log_dir(ls->log_dir, ls->nproc);
    llm4d_launch_make_run_id(run_id, sizeof run_id);
    /* Open MPI's shared-memory files go to a directory of this job's, unless the user chose where */
    struct stat st;
    const char *user_shm = getenv("OMPI_MCA_btl_vader_backing_directory");
    if (!(user_shm && user_shm[0]) && stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(shm_dir, sizeof shm_dir, LLM4D_SHM_DIR_PREFIX "%s", run_id);
        if (mkdir(shm_dir, 0700) != 0) shm_dir[0] = 0; /* then Open MPI's default */
    }
    snprintf(np, sizeof np, "%d", ls->nproc);
    int n_cmd = 0;
    while (cmdv[n_cmd]) n_cmd++;
    char **args = calloc((size_t)(n_cmd + 32), sizeof *args);
    if (!args) return end->code = 1, -1;
    int k = 0;
    args[k++] = (char *)ls->mpirun;
    if (!mpi_verbose()) args[k++] = "-q";
    args[k++] = "--oversubscribe";
    args[k++] = "--bind-to";
    args[k++] = "none";
    if (geteuid() == 0) args[k++] = "--allow-run-as-root";
    if (shm_dir[0]) args[k++] = "--mca", args[k++] = "btl_vader_backing_directory", args[k++] = shm_dir;
    args[k++] = "-np";
    args[k++] = np;
    if (ls->hostfile) args[k++] = "--hostfile", args[k++] = (char *)ls->hostfile;
    if (ls->elastic) args[k++] = "--map-by", args[k++] = "slot";
    args[k++] = (char *)ls->exe;
    args[k++] = "__worker";
    args[k++] = "--log_dir";
    args[k++] = (char *)ls->log_dir;
    args[k++] = "--run_id";
    args[k++] = run_id;
    if (shm_dir[0]) args[k++] = "--shm_dir", args[k++] = shm_dir;
    args[k++] = "--launch_host";
    args[k++] = (char *)ls->host;
    args[k++] = "--";
    for (int i = 0; i < n_cmd; i++) args[k++] = cmdv[i];
    args[k] = NULL;

    fflush(stdout);
    fflush(stderr);
    end->started = llm4d_launch_now();
    /* Signals arrive through sigtimedwait below rather than a handler, so no global state is needed. */
    sigset_t set, old;
    llm4d_launch_block_signals(&set, &old, 1);
    int errpipe[2]; /* reports a failed exec of mpirun */
    pid_t pid = -1;
    if (pipe2(errpipe, O_CLOEXEC) != 0 || (pid = fork()) < 0) {
        perror("llm4d launch: starting mpirun");
        sigprocmask(SIG_SETMASK, &old, NULL);
        free(args);
        llm4d_launch_remove_shm_dir(shm_dir);
        return end->code = 1, -1;
    }
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        close(errpipe[0]);
        execvp(ls->mpirun, args);
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
                ls->mpirun, strerror(exec_errno));
        return end->code = 2, -1;
    }

    int status = 0, received = 0;
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
            end->passed_on = sig;
        }
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    end->mpirun_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (end->mpirun_code == 0) {
        llm4d_launch_remove_shm_dir(shm_dir);
        return end->kind = END_OK, end->code = 0, 0;
    }

    /* mpirun can return while the workers it stopped are still writing their records: give them a moment (a
     * worker killed outright writes none, hence the time limit; once a cause is known, a shorter one for an
     * earlier cause still being written). Records of another run (a shared log_dir) do not count. */
    llm4d_exit_record cause = {0};
    int stopped = 0, missing = -1; /* ranks a passed-on signal ended; the first rank without a record */
    for (int tries = 0, waited_after_cause = 0; tries < 40 && waited_after_cause < 6; tries++) {
        if (cause.valid) waited_after_cause++;
        int n_valid = 0;
        cause.valid = 0, stopped = 0, missing = -1;
        for (int r = 0; r < ls->nproc; r++) {
            llm4d_exit_record e;
            if (!llm4d_exit_record_read(ls->log_dir, r, &e) || strcmp(e.run_id, run_id)) {
                if (missing < 0) missing = r;
                continue;
            }
            n_valid++;
            stopped += e.signaled && e.forwarded;
            if (llm4d_exit_record_is_cause(&e) && (!cause.valid || e.time < cause.time)) cause = e;
        }
        if (n_valid == ls->nproc) break;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    /* every rank has ended (or been killed): the job's files in shared memory can go */
    llm4d_launch_remove_shm_dir(shm_dir);

    /* a rank ended by the interrupt itself (a terminal's Ctrl-C reaches the whole process group) was stopped too */
    const int interrupted = cause.valid && cause.signaled && received &&
                            (cause.value == SIGINT || cause.value == SIGTERM || cause.value == SIGHUP);
    if (!cause.valid && !received && missing >= 0 && !ls->hostfile) {
        /* a rank whose worker was killed outright (the OOM killer, kill -9 of the wrong process) leaves no record;
         * the others were ended by mpirun's shutdown (with a hostfile, records of remote ranks are not here) */
        end->kind = END_CRASH, end->code = end->mpirun_code;
        end->cause = (llm4d_exit_record){.valid = 0, .rank = missing};
    } else if ((!cause.valid || interrupted) && (received || (stopped && !ls->elastic))) { /* stopped, not failing */
        end->kind = END_STOPPED;
        end->sig = end->passed_on ? end->passed_on : received;
        end->code = 128 + (end->sig ? end->sig : SIGTERM);
    } else if (!cause.valid) { /* elastic: also ranks stopped by mpirun with no cause in sight (a host gone) */
        end->kind = END_MPIRUN, end->code = end->mpirun_code;
    } else {
        end->cause = cause;
        end->kind = !cause.signaled && cause.value == 2 ? END_USER : END_CRASH;
        end->code = cause.signaled ? 128 + cause.value : cause.value;
    }
    return 0;
}

/* ---- what the launcher says about a run that did not succeed ---------------------------------------------- */

static void say_stopped(const launch_setup *ls, const llm4d_launch_job *job, const run_end *end) {
    (void)ls;
    const long long step = job->train ? llm4d_launch_step_reached(job->output_dir, end->started) : 0;
    char at[96] = "";
    if (step > 0) snprintf(at, sizeof at, " at step %lld of %lld", step, job->max_steps);
    if (end->sig)
        fprintf(stderr, "llm4d launch: the job was stopped by signal %d (%s)%s%s\n", end->sig, strsignal(end->sig),
                end->passed_on ? " sent to the launcher" : "", at);
    else fprintf(stderr, "llm4d launch: the job was stopped by a signal to mpirun%s\n", at);
}

/* A user error: its one line, once (all of rank 0's log was echoed). */
static void say_user_error(const launch_setup *ls, const run_end *end) {
    char line[1100], shown[1100];
    if (end->cause.rank != 0 && error_line(ls->log_dir, end->cause.rank, line, sizeof line) &&
        !error_line(ls->log_dir, 0, shown, sizeof shown))
        fprintf(stderr, "%s\n", line);
}

/* The rank that ended the job and how; a rank without a record ended with its worker. */
static void describe(char *buf, size_t cap, const llm4d_exit_record *e) {
    if (e->valid) llm4d_exit_record_describe(buf, cap, e);
    else snprintf(buf, cap, "rank %d ended without an exit record (its worker process was killed)", e->rank);
}

/* A crash: which rank, how, and the end of its log (rank 0's was shown). */
static void say_crash(const launch_setup *ls, const run_end *end) {
    char what[128], path[PATH_MAX];
    describe(what, sizeof what, &end->cause);
    fprintf(stderr, "llm4d launch: %s; see %s/workerlog.%d\n", what, ls->log_dir, end->cause.rank);
    if (end->cause.rank != 0) {
        snprintf(path, sizeof path, "%s/workerlog.%d", ls->log_dir, end->cause.rank);
        fprintf(stderr, "llm4d launch: last lines of %s:\n", path);
        print_tail(stderr, path, 6, "  | ");
    }
}

/* ---- restarts --------------------------------------------------------------------------------------------- */

/* A job that fails this many times in a row from the same checkpoint is not restarted again: the failure is in the
 * job, not in a machine, and restarting would only repeat it. */
#define SAME_CHECKPOINT_LIMIT 3
#define RESTART_DELAY_MAX_S 30

/* Waits s seconds unless SIGINT, SIGTERM or SIGHUP comes first: 0, or that signal. */
static int wait_or_signal(int s) {
    sigset_t set, old;
    llm4d_launch_block_signals(&set, &old, 0);
    const double until = llm4d_launch_now() + s;
    int sig = 0;
    for (double left; !sig && (left = until - llm4d_launch_now()) > 0;) {
        struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        const int got = sigtimedwait(&set, NULL, &ts);
        if (got > 0) sig = got;
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    return sig;
}

/* The failed run's log of the rank that ended it, kept beside the next run's as failed.<k>.workerlog.<rank>. */
static void keep_failed_log(const launch_setup *ls, const run_end *end, int k, char *kept, size_t cap) {
    char from[PATH_MAX];
    snprintf(from, sizeof from, "%s/workerlog.%d", ls->log_dir, end->cause.rank);
    snprintf(kept, cap, "%s/failed.%d.workerlog.%d", ls->log_dir, k, end->cause.rank);
    if (rename(from, kept) != 0) kept[0] = 0;
}

/* ---- elasticity: --nnodes MIN:MAX (launch_elastic.c) ------------------------------------------------------ */

typedef struct {
    int on;
    llm4d_launch_hosts hosts;
    int *use, n_use;                 /* the hosts of the next run, as indices into hosts */
    llm4d_launch_layout_args layout; /* a train job's degrees on them */
    char hostfile[PATH_MAX];         /* the next run's hostfile (hosts and slots), in log_dir */
} elastic_state;

/* Every host count from MIN to MAX must hold the job (MAX's is the command as given, checked already): the first
 * that cannot is one line, before anything runs rather than at a failure. */
static llm4d_code elastic_check(const elastic_state *el, int n_cmd, char **cmdv, const llm4d_launch_job *job,
                                llm4d_err *err) {
    char **words = calloc((size_t)n_cmd + 10, sizeof *words);
    if (!words) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    llm4d_code rc = LLM4D_OK;
    const llm4d_launch_hosts *h = &el->hosts;
    for (int c = h->min; c < h->max && rc == LLM4D_OK; c++) {
        const int world = c * h->per_node;
        llm4d_launch_layout_args lay;
        if (!llm4d_launch_layout(job, world, &lay)) {
            rc = llm4d_fail(err, LLM4D_EUSER, "--nnodes %d:%d: on %d host%s the job would have %d process%s, which "
                            "its mp_degree %d x pp_degree %d does not divide; raise MIN to a host count it divides",
                            h->min, h->max, c, c == 1 ? "" : "s", world, world == 1 ? "" : "es", job->mp_degree,
                            job->pp_degree);
            break;
        }
        if (!job->train) continue;
        memcpy(words, cmdv, (size_t)n_cmd * sizeof *words);
        memcpy(words + n_cmd, lay.argv, (size_t)lay.argc * sizeof *words);
        llm4d_launch_job scratch = {0};
        llm4d_err why = {0};
        if (check_train(n_cmd + lay.argc, words, world, 0, &scratch, &why) != LLM4D_OK)
            rc = llm4d_fail(err, LLM4D_EUSER, "--nnodes %d:%d: on %d host%s (%d processes: dp_degree %d x "
                            "sharding_degree %d) the job cannot run: %s; raise MIN", h->min, h->max, c,
                            c == 1 ? "" : "s", world, lay.dp, lay.sharding, why.msg);
    }
    free(words);
    return rc;
}

/* Probes the hosts and sets the next run up on the first MAX that answer: its hostfile, process count and layout.
 * Returns how many hosts it uses (fewer than MIN: nothing is set up; -1: the hostfile could not be written);
 * *changed when they are not the last run's. */
static int elastic_next(launch_setup *ls, elastic_state *el, const llm4d_launch_job *job, int *changed) {
    const int before = el->n_use;
    int *prev = malloc((size_t)el->hosts.max * sizeof *prev);
    if (!prev) return -1;
    memcpy(prev, el->use, (size_t)before * sizeof *prev);
    llm4d_launch_hosts_probe(&el->hosts, ls->mpirun, ls->exe, ls->log_dir);
    const int n = el->n_use = llm4d_launch_hosts_pick(&el->hosts, el->use);
    *changed = n != before || memcmp(prev, el->use, (size_t)n * sizeof *prev) != 0;
    free(prev);
    if (n < el->hosts.min) return n;
    ls->nproc = n * el->hosts.per_node;
    llm4d_launch_layout(job, ls->nproc, &el->layout); /* every count from MIN to MAX was checked at the start */
    if (llm4d_launch_hosts_write(&el->hosts, el->use, n, el->hostfile) != 0) {
        fprintf(stderr, "llm4d launch: cannot write the run's hostfile %s: %s\n", el->hostfile, strerror(errno));
        return -1;
    }
    ls->hostfile = el->hostfile;
    ls->elastic = 1;
    return n;
}

/* "2 processes (dp_degree 1 x sharding_degree 2)" for the next run. */
static void elastic_layout(const launch_setup *ls, const elastic_state *el, const llm4d_launch_job *job, char *buf,
                           size_t cap) {
    const int n = snprintf(buf, cap, "%d process%s", ls->nproc, ls->nproc == 1 ? "" : "es");
    if (job->train && n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, " (dp_degree %d x sharding_degree %d x mp_degree %d x pp_degree %d, "
                 "global batch %lld)", el->layout.dp, el->layout.sharding, job->mp_degree, job->pp_degree,
                 job->global_batch_size);
}

int llm4d_cmd_launch(int argc, char **argv) {
    int nproc = 0, bad = 0, cmd = -1, max_restarts = -1;
    launch_setup ls = {.log_dir = "log"};
    elastic_state el = {0};
    int nn_min = 0, nn_max = 0;
    const char *v;
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
        } else if ((v = llm4d_launch_opt(argc, argv, &i, "--max_restarts", &bad)) ||
                   (v = llm4d_launch_opt(argc, argv, &i, "--max_restart", &bad))) {
            if (!llm4d_launch_int(v, 0, 1000, &max_restarts)) {
                fprintf(stderr, "llm4d launch: --max_restarts '%s' is not a count in [0, 1000]\n", v);
                return 2;
            }
        } else if ((v = llm4d_launch_opt(argc, argv, &i, "--nnodes", &bad))) {
            if (!llm4d_launch_nnodes(v, &nn_min, &nn_max)) {
                fprintf(stderr, "llm4d launch: --nnodes '%s' is not MIN:MAX hosts (1 <= MIN <= MAX) or a host count\n",
                        v);
                return 2;
            }
            el.on = 1;
        } else if ((v = llm4d_launch_opt(argc, argv, &i, "--hostfile", &bad))) ls.hostfile = v;
        else if ((v = llm4d_launch_opt(argc, argv, &i, "--log_dir", &bad))) ls.log_dir = v;
        else if (bad) {
            fprintf(stderr, "llm4d launch: %s needs a value\n", argv[i]);
            return 2;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "llm4d launch: unknown option '%s'; options: --nproc N --hostfile FILE --nnodes MIN:MAX "
                            "--log_dir DIR --max_restarts N, then -- and the command\n", argv[i]);
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
    llm4d_launch_job job = {0};
    if (!strcmp(argv[cmd], "train")) { /* what every rank would refuse alike is one line here, not one per rank */
        llm4d_err err = {0};
        const llm4d_code rc = check_train(argc - cmd, argv + cmd, nproc, !ls.hostfile, &job, &err);
        if (rc != LLM4D_OK) { /* the verb's form (cli.h): this process is `llm4d launch` */
            fprintf(stderr, "llm4d launch: %s\n", err.msg);
            return llm4d_exit_code(rc);
        }
    }
    if (max_restarts < 0) max_restarts = job.max_restarts; /* launch's flag over the train config's key */
    if (ls.hostfile && access(ls.hostfile, R_OK) != 0) {
        fprintf(stderr, "llm4d launch: cannot read the hostfile %s: %s\n", ls.hostfile, strerror(errno));
        return 2;
    }
    if (el.on) { /* the hosts, and the job on every count of them */
        llm4d_err err = {0};
        llm4d_code rc = ls.hostfile ? llm4d_launch_hosts_read(ls.hostfile, nn_min, nn_max, nproc, &el.hosts, &err)
                                    : llm4d_fail(&err, LLM4D_EUSER, "--nnodes needs --hostfile FILE: the hosts the job "
                                                 "may run on, one per line");
        if (rc == LLM4D_OK) rc = elastic_check(&el, argc - cmd, argv + cmd, &job, &err);
        if (rc == LLM4D_OK && !(el.use = calloc((size_t)nn_max, sizeof *el.use)))
            rc = llm4d_fail(&err, LLM4D_ENOMEM, "out of memory");
        if (rc != LLM4D_OK) {
            fprintf(stderr, "llm4d launch: %s\n", err.msg);
            llm4d_launch_hosts_free(&el.hosts);
            free(el.use);
            return llm4d_exit_code(rc);
        }
    }
    if (llm4d_mkdir_p(ls.log_dir, 0755) != 0) {
        fprintf(stderr, "llm4d launch: cannot create the log directory %s: %s; choose another with --log_dir\n",
                ls.log_dir, strerror(errno));
        return 2;
    }
    if (llm4d_launch_self_exe(ls.exe, sizeof ls.exe) != 0) {
        fprintf(stderr, "llm4d launch: cannot find the llm4d executable through /proc/self/exe\n");
        return 1;
    }
    if (gethostname(ls.host, sizeof ls.host - 1) != 0 || !ls.host[0]) snprintf(ls.host, sizeof ls.host, "unknown");
    ls.mpirun = getenv("LLM4D_MPIRUN");
    if (!ls.mpirun || !*ls.mpirun) ls.mpirun = "mpirun";
    ls.nproc = nproc;
    llm4d_launch_remove_matching(ls.log_dir, "failed.", ""); /* an earlier launch's failed runs' logs */
    const int n_cmd = argc - cmd;
    char **cmdv = calloc((size_t)n_cmd + 4 + 8, sizeof *cmdv); /* + --resume DIR, + an elastic run's layout */
    if (!cmdv) return 1;
    char restarting[64] = "", hosts[1024] = "";
    if (max_restarts > 0)
        snprintf(restarting, sizeof restarting, "; up to %d restart%s after a failure", max_restarts,
                 max_restarts == 1 ? "" : "s");
    if (el.on) {
        snprintf(el.hostfile, sizeof el.hostfile, "%s/.hostfile", ls.log_dir);
        int changed;
        const int n = elastic_next(&ls, &el, &job, &changed);
        llm4d_launch_hosts_describe(&el.hosts, el.use, n < 0 ? 0 : n, hosts, sizeof hosts);
        if (n < nn_min) {
            if (n >= 0)
                fprintf(stderr, "llm4d launch: cannot start: %s answer%s, and --nnodes %d:%d needs at least %d\n",
                        hosts, n == 1 ? "s" : "", nn_min, nn_max, nn_min);
            llm4d_launch_hosts_free(&el.hosts);
            free(el.use);
            free(cmdv);
            return 1;
        }
        char lay[256];
        elastic_layout(&ls, &el, &job, lay, sizeof lay);
        fprintf(stderr, "llm4d launch: elastic (--nnodes %d:%d): on %s, as %s\n", nn_min, nn_max, hosts, lay);
    }
    fprintf(stderr, "llm4d launch: %d process%s, logs in %s/workerlog.<rank>, rank 0 shown here%s\n", ls.nproc,
            ls.nproc == 1 ? "" : "es", ls.log_dir, restarting);

    const char *resume = NULL; /* the first run is the command as given */
    long long from = -1;       /* the step of the checkpoint the failing runs resumed from */
    int restarts = 0, same = 0, code;
    for (;;) {
        const int words = llm4d_launch_command_with_resume(n_cmd, argv + cmd, resume, cmdv);
        if (el.on && el.n_use < nn_max) { /* fewer hosts than the command was written for: its layout on them */
            memcpy(cmdv + words, el.layout.argv, (size_t)el.layout.argc * sizeof *cmdv);
            cmdv[words + el.layout.argc] = NULL;
        }
        run_end end;
        if (run_once(&ls, cmdv, &end) != 0) {
            code = end.code;
            break;
        }
        code = end.code;
        if (end.kind == END_OK) break;
        if (end.kind == END_USER) { /* never restarted: the same input fails the same way */
            say_user_error(&ls, &end);
            break;
        }
        if (end.kind == END_STOPPED) {
            say_stopped(&ls, &job, &end);
            llm4d_launch_say_resume(&job, argc, argv, cmd);
            break;
        }
        if (end.kind == END_MPIRUN) {
            fprintf(stderr, "llm4d launch: mpirun exited with code %d; see %s/workerlog.*%s\n", end.mpirun_code,
                    ls.log_dir, mpi_verbose() ? " and mpirun's messages above" : ", and run again with "
                                                "LLM4D_MPI_VERBOSE=1 to see Open MPI's messages");
            if (!el.on) { /* elastic: a host that went away ends mpirun so; the probe says whether one did */
                llm4d_launch_say_resume(&job, argc, argv, cmd);
                break;
            }
        } else say_crash(&ls, &end);
        if (restarts >= max_restarts) {
            if (max_restarts > 0)
                fprintf(stderr, "llm4d launch: not restarting: all %d restart%s used (--max_restarts)\n",
                        max_restarts, max_restarts == 1 ? " was" : "s were");
            llm4d_launch_say_resume(&job, argc, argv, cmd);
            break;
        }
        char ckpt[PATH_MAX + 64], kept[PATH_MAX + 64] = "", moved[1400] = "";
        int changed = 0;
        if (el.on) { /* the hosts that still answer */
            const int n = elastic_next(&ls, &el, &job, &changed);
            llm4d_launch_hosts_describe(&el.hosts, el.use, n < 0 ? 0 : n, hosts, sizeof hosts);
            if (n < nn_min) {
                if (n >= 0)
                    fprintf(stderr, "llm4d launch: not restarting: %s answer%s, and --nnodes %d:%d needs at least "
                                    "%d\n", hosts, n == 1 ? "s" : "", nn_min, nn_max, nn_min);
                llm4d_launch_say_resume(&job, argc, argv, cmd);
                break;
            }
            if (changed) {
                char lay[256];
                elastic_layout(&ls, &el, &job, lay, sizeof lay);
                snprintf(moved, sizeof moved, "; now on %s, as %s", hosts, lay);
            }
        }
        long long step = 0;
        const int have = llm4d_launch_latest(&job, ckpt, sizeof ckpt, &step);
        same = step == from && !changed ? same + 1 : 1; /* another set of hosts is a new start */
        from = step;
        if (same >= SAME_CHECKPOINT_LIMIT) {
            fprintf(stderr, "llm4d launch: not restarting: the job failed %d times in a row from %s without saving a "
                            "newer checkpoint, so the failure is in the job; see %s/workerlog.%d\n",
                    same, have ? ckpt : "the start", ls.log_dir, end.cause.rank);
            llm4d_launch_say_resume(&job, argc, argv, cmd);
            break;
        }
        const long long reached = job.train ? llm4d_launch_step_reached(job.output_dir, end.started) : 0;
        int delay = 1 << (same - 1); /* at once after progress; backing off while the same failure repeats */
        if (delay > RESTART_DELAY_MAX_S) delay = RESTART_DELAY_MAX_S;
        char what[128], at[48] = "", lost[48] = "", log[PATH_MAX + 96] = "";
        if (end.kind == END_MPIRUN) snprintf(what, sizeof what, "mpirun exited with code %d", end.mpirun_code);
        else {
            keep_failed_log(&ls, &end, restarts + 1, kept, sizeof kept);
            describe(what, sizeof what, &end.cause);
        }
        if (reached > 0) snprintf(at, sizeof at, " at step %lld", reached);
        if (reached > step)
            snprintf(lost, sizeof lost, " (%lld step%s lost)", reached - step, reached - step == 1 ? "" : "s");
        if (kept[0]) snprintf(log, sizeof log, "; its log is now %s", kept);
        fprintf(stderr, "llm4d launch: restart %d of %d in %d s: %s%s; %s%s%s%s%s\n", restarts + 1, max_restarts,
                delay, what, at, have ? "resuming from " : "starting again (no checkpoint yet)", have ? ckpt : "", lost,
                moved, log);
        const int sig = wait_or_signal(delay);
        if (sig) {
            fprintf(stderr, "llm4d launch: stopped by signal %d (%s) before restarting\n", sig, strsignal(sig));
            llm4d_launch_say_resume(&job, argc, argv, cmd);
            code = 128 + sig;
            break;
        }
        restarts++;
        resume = have ? job.output_dir : NULL;
    }
    free(cmdv);
    if (el.on) {
        unlink(el.hostfile);
        llm4d_launch_hosts_free(&el.hosts);
        free(el.use);
    }
    return code;
}
