/* launch_worker.c — `llm4d __worker`, what `llm4d launch` has mpirun start on every rank (see verb_launch.c for
 * the launcher, launch.h for what they share).
 *
 *   llm4d __worker --log_dir DIR --run_id ID [--shm_dir SHM] [--launch_host H] -- VERB ARGS...
 *
 * It reads its rank from the launcher's environment, truncates DIR/workerlog.<rank> (Paddle's launcher layout),
 * forks the real rank — `llm4d VERB ARGS...` exec'd with stdout and stderr going to that file — and stays as its
 * parent:
 *   - rank 0's output goes through a pipe that the worker copies both to the file and to its own stdout, which
 *     mpirun forwards to the terminal: rank 0 is echoed, the other ranks only write their files;
 *   - the rank runs with PR_SET_PDEATHSIG = SIGKILL, so when mpirun kills a worker its rank dies too; a
 *     termination signal the worker receives is passed on to the rank (SIGKILL 5 s later if it is still there);
 *   - OMP_NUM_THREADS, unless set, becomes cores / ranks on this host, so N ranks do not each start one
 *     OpenMP thread per core;
 *   - the first line of DIR/workerlog.<rank> names the host the rank runs on and the run id (a multi-host job's
 *     logs usually end up side by side; the report matches logs to runs by the id); the rank gets the id as
 *     LLM4D_RUN_ID;
 *   - SHM, the job's directory for Open MPI's shared-memory segments, is made on this host before the rank starts,
 *     and this rank's files in it are removed when it has ended (launch.h);
 *   - when the rank ends the worker records how (DIR/.workerexit.<rank>) and exits with the same status (128 +
 *     signal for a signal).
 * The launcher names the rank that ended the job from the records on its host. A rank on another host (H, the
 * launcher's, differs from this one) is named here instead, on stderr, which mpirun forwards. */
#define _GNU_SOURCE /* pipe2, signalfd */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/launch.h"
#include "core/fs.h"

/* The job's rank of this process, from the MPI launcher's environment; -1 when not started by one. */
static int env_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        int r;
        if (v && llm4d_launch_int(v, 0, INT_MAX, &r)) return r;
    }
    return -1;
}

static int env_local(const char *name, int fallback) {
    const char *v = getenv(name);
    int x;
    return v && llm4d_launch_int(v, 0, INT_MAX, &x) ? x : fallback;
}

/* What the ended rank leaves in shared memory that nobody else will remove: its Open MPI segment in the job's
 * directory (vader_segment.<host>.<job>.<local rank>; the other ranks keep their mappings), and llm4d's own
 * segments named after its pid that a kill caught between creation and unlinking (comm_shm.c, shm_share.c). */
static void clean_shm(const char *shm_dir, long rank_pid) {
    char suffix[32], prefix[48];
    if (shm_dir && shm_dir[0]) {
        snprintf(suffix, sizeof suffix, ".%d", env_local("OMPI_COMM_WORLD_LOCAL_RANK", 0));
        llm4d_launch_remove_matching(shm_dir, "vader_segment.", suffix);
        rmdir(shm_dir); /* the host's last rank to end takes the directory too */
    }
    snprintf(prefix, sizeof prefix, "llm4d-%ld-", rank_pid);
    llm4d_launch_remove_matching("/dev/shm", prefix, "");
}

int llm4d_cmd_worker(int argc, char **argv) {
    const char *log_dir = "log", *run_id = "", *shm_dir = NULL, *launch_host = NULL, *v;
    int bad = 0, cmd = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            cmd = i + 1;
            break;
        }
        if ((v = llm4d_launch_opt(argc, argv, &i, "--log_dir", &bad))) log_dir = v;
        else if ((v = llm4d_launch_opt(argc, argv, &i, "--run_id", &bad))) run_id = v;
        else if ((v = llm4d_launch_opt(argc, argv, &i, "--shm_dir", &bad))) shm_dir = v;
        else if ((v = llm4d_launch_opt(argc, argv, &i, "--launch_host", &bad))) launch_host = v;
        else {
            fprintf(stderr, "llm4d __worker: unexpected argument '%s' (this verb is started by llm4d launch)\n",
                    argv[i]);
            return 2;
        }
    }
    int rank = env_rank();
    if (cmd < 0 || cmd >= argc || rank < 0 || bad || (run_id[0] && !llm4d_run_id_valid(run_id))) {
        fprintf(stderr, "llm4d __worker: run by `llm4d launch` under mpirun only (no rank in the environment, no "
                        "command or a bad --run_id)\n");
        return 2;
    }
    if (llm4d_mkdir_p(log_dir, 0755) != 0) { /* on another host of a hostfile job the directory may not exist yet */
        fprintf(stderr, "llm4d __worker: rank %d cannot create %s: %s\n", rank, log_dir, strerror(errno));
        return 2;
    }
    /* the job's shared-memory directory on this host (all its ranks race to make it; EEXIST is success) */
    if (shm_dir && mkdir(shm_dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "llm4d __worker: rank %d cannot create %s: %s\n", rank, shm_dir, strerror(errno));
        return 2;
    }
    char log_path[PATH_MAX], exe[PATH_MAX];
    snprintf(log_path, sizeof log_path, "%s/workerlog.%d", log_dir, rank);
    int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
        fprintf(stderr, "llm4d __worker: rank %d cannot write %s: %s\n", rank, log_path, strerror(errno));
        return 2;
    }
    if (llm4d_launch_self_exe(exe, sizeof exe) != 0) {
        fprintf(stderr, "llm4d __worker: cannot find the llm4d executable through /proc/self/exe\n");
        return 1;
    }
    /* which host ran this rank (the first thing to know when one rank of a multi-host job misbehaves), and which
     * job: the report reads only the logs of the run it reports */
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown (%s)", strerror(errno));
    if (run_id[0]) {
        dprintf(log_fd, "llm4d worker: rank %d runs on host %s (run %s)\n", rank, host, run_id);
        setenv("LLM4D_RUN_ID", run_id, 1);
    } else {
        dprintf(log_fd, "llm4d worker: rank %d runs on host %s\n", rank, host);
    }
    /* rank 0 only: its stdout and stderr come through pipes that this worker copies to the file and to its own
     * stdout and stderr (which mpirun forwards to the terminal) */
    int pipes[2][2] = {{-1, -1}, {-1, -1}};
    if (rank == 0 && (pipe2(pipes[0], O_CLOEXEC) != 0 || pipe2(pipes[1], O_CLOEXEC) != 0)) {
        perror("llm4d __worker: pipe");
        return 1;
    }

    sigset_t set, old;
    llm4d_launch_block_signals(&set, &old, 1);
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
        const int local = env_local("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        char threads[24];
        snprintf(threads, sizeof threads, "%ld", local > 0 && cores / local > 1 ? cores / local : 1);
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

    llm4d_exit_record rec = {.rank = rank, .pid = (long)child};
    snprintf(rec.run_id, sizeof rec.run_id, "%s", run_id);
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
                if (killed_at == 0) killed_at = llm4d_launch_now();
            }
        }
        if (!reaped) {
            int st;
            if (waitpid(child, &st, WNOHANG) == child) {
                reaped = 1;
                rec.time = llm4d_launch_now();
                rec.signaled = WIFSIGNALED(st);
                rec.value = rec.signaled ? WTERMSIG(st) : WEXITSTATUS(st);
            } else if (killed_at > 0 && llm4d_launch_now() - killed_at > 5.0) {
                kill(child, SIGKILL);
                killed_at = llm4d_launch_now() + 1e9; /* once */
            }
        }
    }
    unlink(board); /* a rank that was killed could not remove its own */
    clean_shm(shm_dir, (long)child);
    rec.valid = 1;
    llm4d_exit_record_write(log_dir, &rec);
    if (rec.signaled || rec.value != 0) {
        char what[128], line[256];
        llm4d_exit_record_describe(what, sizeof what, &rec);
        const int cause = llm4d_exit_record_is_cause(&rec);
        int len = snprintf(line, sizeof line, "llm4d worker: %s%s\n", what, cause ? "" : " as the job was being stopped");
        (void)llm4d_write_all(log_fd, line, (size_t)len);
        /* the launcher names the cause from this record; one on another host it may not see is named here */
        if (cause && launch_host && strcmp(launch_host, host) != 0)
            (void)llm4d_write_all(STDERR_FILENO, line, (size_t)len);
    }
    close(log_fd);
    return rec.signaled ? 128 + rec.value : rec.value;
}
