/* test_watch.c — what the watchdog's line says about the peers of a timed-out operation (comm/watch.h), with real
 * peer processes in each state, so that the cases a timed launch cannot hit reliably are checked every run.
 *
 * The peer is a forked child with its own progress board in a temporary directory (world rank 1); this process is
 * world rank 0 and asks llm4d_watch_report what to say after "has not completed". Cases:
 *   - the peer computes and has not entered the collective: "not arrived: rank 1 (pid P): ... computing";
 *   - the same peer stopped (SIGSTOP): "not arrived: rank 1 (pid P, STOPPED ...";
 *   - the peer entered the collective and sleeps in it: "every visible rank ... entered it (a transfer is stuck)";
 *   - the peer entered the collective and was stopped inside it (seen in CI: a pipeline stage stopped inside the
 *     tied embedding's all-reduce was reported as a stuck transfer): "... entered it, but rank 1 (pid P, STOPPED";
 *   - point to point with a stopped peer: "waiting for rank 1 (pid P, STOPPED";
 *   - the peer died and left its board: "(pid P, no longer running)";
 *   - no progress directory (plain mpirun): the group's world ranks are listed.
 * The expected phrases are written out here, not built by the code under test. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "comm/watch.h"

static const int members[2] = {0, 1};

/* A peer (world rank 1) that publishes its board, enters `entered` collectives on "dp", or a receive from rank 0
 * when p2p, then stops itself (stop) or waits; the parent learns it is ready from the pipe or waitpid. */
static pid_t peer(const char *dir, int entered, int p2p, int stop, int die) {
    int fd[2];
    if (pipe(fd) != 0) exit(1);
    const pid_t pid = fork();
    if (pid < 0) exit(1);
    if (pid == 0) {
        close(fd[0]);
        llm4d_comm_watch w;
        llm4d_err err = {0};
        if (llm4d_watch_init(&w, 1, dir, &err) != LLM4D_OK) _exit(3);
        llm4d_watch_set(&w, 5, 3);
        for (int k = 1; k <= entered; k++) llm4d_watch_begin(&w, "allreduce", "data group", "dp", (uint64_t)k, -1, 8);
        if (p2p) llm4d_watch_begin(&w, "irecv from", "pp group", "pp", 0, 0, 8);
        if (die) _exit(0); /* the board stays behind, as after a crash */
        if (write(fd[1], "r", 1) != 1) _exit(4);
        if (stop) raise(SIGSTOP);
        for (;;) pause();
    }
    close(fd[1]);
    char c;
    if (die) waitpid(pid, NULL, 0);
    else if (read(fd[0], &c, 1) != 1) exit(1);
    if (stop) waitpid(pid, NULL, WUNTRACED);
    close(fd[0]);
    return pid;
}

static void end_peer(pid_t pid) {
    kill(pid, SIGKILL);
    kill(pid, SIGCONT);
    waitpid(pid, NULL, 0);
}

/* This rank enters collective `seq` on "dp" (or a receive from rank 1) and reports; the line goes to `who`. */
static void report(llm4d_comm_watch *w, uint64_t seq, int p2p, char *who, size_t n) {
    const uint64_t num = p2p ? llm4d_watch_begin(w, "irecv from", "pp group", "pp", 0, 1, 8)
                             : llm4d_watch_begin(w, "allreduce", "data group", "dp", seq, -1, 8);
    llm4d_watch_report(w, p2p ? "pp" : "dp", seq, p2p ? 1 : -1, members, 2, who, n);
    llm4d_watch_end(w, num);
}

static int has(const char *s, const char *part) { return strstr(s, part) != NULL; }

/* Reports (a collective of sequence 1, or point to point) and checks that the line holds `want` with the peer's
 * pid filled in; returns the line for further checks. */
static const char *said(llm4d_comm_watch *w, pid_t pid, int p2p, const char *want, const char *what) {
    static char who[512];
    char part[96];
    report(w, p2p ? 0 : 1, p2p, who, sizeof who);
    snprintf(part, sizeof part, want, (int)pid);
    check(has(who, part), "%s: %s", what, who);
    return who;
}

int main(void) {
    char dir[] = "/tmp/llm4d_test_watch.XXXXXX";
    if (!mkdtemp(dir)) return 1;
    llm4d_comm_watch w;
    llm4d_err err = {0};
    if (llm4d_watch_init(&w, 0, dir, &err) != LLM4D_OK) return 1;
    llm4d_watch_set(&w, 5, 3);

    pid_t p = peer(dir, 0, 0, 0, 0);
    said(&w, p, 0, "not arrived: rank 1 (pid %d): step 5, computing", "a computing peer that has not entered it");
    kill(p, SIGSTOP);
    waitpid(p, NULL, WUNTRACED);
    said(&w, p, 0, "not arrived: rank 1 (pid %d, STOPPED", "... stopped");
    end_peer(p);

    p = peer(dir, 1, 0, 0, 0);
    const char *who = said(&w, p, 0, "every visible rank of the group entered it (a transfer is stuck)",
                           "a running peer inside the same collective");
    check(!has(who, "pid"), "... names no peer: it is running");
    end_peer(p);

    p = peer(dir, 1, 0, 1, 0);
    who = said(&w, p, 0, "entered it, but rank 1 (pid %d, STOPPED", "a peer stopped inside the same collective");
    check(has(who, "in allreduce #1 on data group") && !has(who, "a transfer is stuck"),
          "... is said to be stopped in it, not a stuck transfer");
    end_peer(p);

    p = peer(dir, 0, 1, 1, 0);
    said(&w, p, 1, "waiting for rank 1 (pid %d, STOPPED", "point to point with a stopped peer");
    end_peer(p);

    p = peer(dir, 1, 0, 0, 1);
    said(&w, p, 0, "but rank 1 (pid %d, no longer running)", "a peer that died inside the collective, its board left");

    llm4d_watch_free(&w);
    char path[sizeof dir + 16];
    snprintf(path, sizeof path, "%s/progress.1", dir);
    unlink(path);
    check(rmdir(dir) == 0, "rank 0's board is removed when its watch is freed");

    llm4d_comm_watch plain;
    if (llm4d_watch_init(&plain, 0, NULL, &err) != LLM4D_OK) return 1;
    llm4d_watch_set(&plain, 5, 3);
    said(&plain, 0, 0, "its ranks are world ranks 0 1", "no progress directory: the group's ranks are listed");
    llm4d_watch_free(&plain);
    return check_summary();
}
