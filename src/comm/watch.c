/* watch.c — the watchdog's progress boards and flight recorder (see watch.h). */
#include "comm/watch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/timer.h"

#define BOARD_MAGIC 0x6c346462u /* "bd4l" */

/* What a rank publishes about itself. Written only by its rank; read by peers with read() (a torn read can only
 * blur a diagnostic, never a decision). Times are CLOCK_REALTIME, comparable between processes of a host. */
typedef struct llm4d_board {
    uint32_t magic;
    int32_t world_rank, pid;
    char host[64];         /* where pid means something */
    int64_t step;
    double current_since;  /* when it entered `current`, or left the last operation */
    char current[96];      /* the operation it waits in, "" while computing */
    int32_t nslots;
    struct {
        char key[40];
        uint64_t entered;  /* collectives entered on this group */
    } slot[LLM4D_WATCH_COMMS];
} llm4d_board;

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void board_path(const char *dir, int rank, char *buf, size_t n) {
    snprintf(buf, n, "%s/progress.%d", dir, rank);
}

llm4d_code llm4d_watch_init(llm4d_comm_watch *w, int world_rank, const char *dir, llm4d_err *err) {
    memset(w, 0, sizeof *w);
    w->world_rank = world_rank;
    if (!dir || !dir[0]) return LLM4D_OK;
    if (strlen(dir) >= sizeof w->dir - 32)
        return llm4d_fail(err, LLM4D_EUSER, "LLM4D_PROGRESS_DIR is too long (%zu characters)", strlen(dir));
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    char path[sizeof w->dir + 32];
    board_path(dir, world_rank, path, sizeof path);
    const int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || ftruncate(fd, sizeof(llm4d_board)) != 0) {
        const int e = errno;
        if (fd >= 0) close(fd);
        return llm4d_fail(err, LLM4D_EIO, "cannot create the progress board %s: %s; check LLM4D_PROGRESS_DIR", path,
                          strerror(e));
    }
    void *p = mmap(NULL, sizeof(llm4d_board), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return llm4d_fail(err, LLM4D_EIO, "cannot map the progress board %s: %s", path, strerror(errno));
    w->board = p;
    w->board->world_rank = world_rank;
    w->board->pid = (int32_t)getpid();
    gethostname(w->board->host, sizeof w->board->host - 1);
    w->board->current_since = wall_now();
    w->board->magic = BOARD_MAGIC;
    return LLM4D_OK;
}

void llm4d_watch_free(llm4d_comm_watch *w) {
    if (w->board) {
        munmap(w->board, sizeof(llm4d_board));
        char path[sizeof w->dir + 32];
        board_path(w->dir, w->world_rank, path, sizeof path);
        unlink(path);
    }
    w->board = NULL;
}

void llm4d_watch_set(llm4d_comm_watch *w, int64_t step, double timeout_s) {
    w->step = step;
    w->timeout_s = timeout_s;
    if (w->board) w->board->step = step;
}

uint64_t llm4d_watch_begin(llm4d_comm_watch *w, const char *op, const char *group, const char *key, uint64_t seq,
                           int peer, size_t count) {
    const uint64_t num = ++w->n_ops;
    llm4d_flight *f = &w->ring[num % LLM4D_FLIGHT_N];
    *f = (llm4d_flight){.num = num, .seq = seq, .peer = peer, .count = count, .step = w->step, .t_start = llm4d_now()};
    snprintf(f->op, sizeof f->op, "%s", op);
    snprintf(f->group, sizeof f->group, "%s", group);
    llm4d_board *b = w->board;
    if (b) {
        if (seq > 0) {
            int k = 0;
            while (k < b->nslots && strcmp(b->slot[k].key, key)) k++;
            if (k == b->nslots && k < LLM4D_WATCH_COMMS) {
                snprintf(b->slot[k].key, sizeof b->slot[k].key, "%s", key);
                b->nslots = k + 1;
            }
            if (k < LLM4D_WATCH_COMMS) b->slot[k].entered = seq;
        }
        snprintf(b->current, sizeof b->current, "%s #%llu on %s", op, (unsigned long long)seq, group);
        if (peer >= 0) snprintf(b->current, sizeof b->current, "%s with rank %d of %s", op, peer, group);
        b->current_since = wall_now();
    }
    return num;
}

void llm4d_watch_end(llm4d_comm_watch *w, uint64_t num) {
    llm4d_flight *f = &w->ring[num % LLM4D_FLIGHT_N];
    if (f->num == num && f->t_end == 0) f->t_end = llm4d_now();
    if (w->board && num == w->n_ops) { /* the latest operation is done: the rank computes (or starts another) */
        w->board->current[0] = 0;
        w->board->current_since = wall_now();
    }
}

/* A peer's board, 0 when it cannot be read (another host, not started, already gone). */
static int read_board(const llm4d_comm_watch *w, int rank, llm4d_board *b) {
    char path[sizeof w->dir + 32];
    board_path(w->dir, rank, path, sizeof path);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    const ssize_t got = read(fd, b, sizeof *b);
    close(fd);
    return got == (ssize_t)sizeof *b && b->magic == BOARD_MAGIC && b->world_rank == rank;
}

/* What the process of a board on this host is doing according to the kernel ("" when running or sleeping). */
static const char *process_state(const llm4d_board *b) {
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    if (strncmp(host, b->host, sizeof host)) return "";
    char path[64], stat[512];
    snprintf(path, sizeof path, "/proc/%d/stat", b->pid);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ", no longer running";
    const ssize_t n = read(fd, stat, sizeof stat - 1);
    close(fd);
    if (n <= 0) return "";
    stat[n] = 0;
    const char *paren = strrchr(stat, ')'); /* "pid (comm) S ...": the state follows the command's name */
    const char st = paren && paren[1] ? paren[2] : '?';
    switch (st) {
    case 'T': case 't': return ", STOPPED (a stop signal or a debugger)";
    case 'Z': case 'X': return ", no longer running";
    case 'D': return ", in uninterruptible sleep (waiting for I/O)";
    default: return "";
    }
}

/* "rank 3 (pid 123): step 5, in allreduce #4 on dp for 12 s" or "..., computing for 12 s" */
static void describe(const llm4d_board *b, double now, char *buf, size_t n) {
    if (b->current[0])
        snprintf(buf, n, "rank %d (pid %d%s): step %lld, in %s for %.0f s", b->world_rank, b->pid, process_state(b),
                 (long long)b->step, b->current, now - b->current_since);
    else
        snprintf(buf, n, "rank %d (pid %d%s): step %lld, computing (no communication) for %.0f s", b->world_rank,
                 b->pid, process_state(b), (long long)b->step, now - b->current_since);
}

static void print_flight(const llm4d_comm_watch *w) {
    const double now = llm4d_now();
    printf("llm4d watchdog: the last %d communication operations of rank %d (oldest first):\n", LLM4D_FLIGHT_N,
           w->world_rank);
    for (uint64_t k = w->n_ops >= LLM4D_FLIGHT_N ? w->n_ops - LLM4D_FLIGHT_N + 1 : 1; k <= w->n_ops; k++) {
        const llm4d_flight *f = &w->ring[k % LLM4D_FLIGHT_N];
        if (f->num != k) continue;
        char peer[32] = "";
        if (f->peer >= 0) snprintf(peer, sizeof peer, " with rank %d", f->peer);
        char took[48];
        if (f->t_end > 0) snprintf(took, sizeof took, "took %.6f s", f->t_end - f->t_start);
        else snprintf(took, sizeof took, "PENDING for %.1f s", now - f->t_start);
        printf("  op %llu: %s #%llu on %s%s, %zu elements, step %lld, started %.3f s ago, %s\n",
               (unsigned long long)f->num, f->op, (unsigned long long)f->seq, f->group, peer, f->count,
               (long long)f->step, now - f->t_start, took);
    }
    fflush(stdout);
}

void llm4d_watch_report(llm4d_comm_watch *w, const char *key, uint64_t seq, int peer, const int *members, int n,
                        char *who, size_t who_n) {
    print_flight(w);
    size_t k = 0;
    who[0] = 0;
    if (!w->dir[0]) {
        k += (size_t)snprintf(who, who_n, "its ranks are world ranks");
        for (int i = 0; i < n && k < who_n; i++) k += (size_t)snprintf(who + k, who_n - k, " %d", members[i]);
        if (k < who_n) snprintf(who + k, who_n - k, " (run through llm4d launch to learn which did not arrive)");
        return;
    }
    const double now = wall_now();
    llm4d_board b;
    char d[192];
    if (peer >= 0) {
        if (read_board(w, members[peer], &b)) {
            describe(&b, now, d, sizeof d);
            snprintf(who, who_n, "waiting for %s", d);
        } else {
            snprintf(who, who_n, "waiting for world rank %d, whose progress is not visible from here", members[peer]);
        }
        return;
    }
    int missing = 0, unknown = 0;
    k += (size_t)snprintf(who, who_n, "not arrived:");
    for (int i = 0; i < n && k < who_n; i++) {
        if (members[i] == w->world_rank) continue;
        if (!read_board(w, members[i], &b)) {
            unknown++;
            continue;
        }
        uint64_t entered = 0;
        for (int s = 0; s < b.nslots && s < LLM4D_WATCH_COMMS; s++)
            if (!strcmp(b.slot[s].key, key)) entered = b.slot[s].entered;
        if (entered >= seq) continue;
        describe(&b, now, d, sizeof d);
        k += (size_t)snprintf(who + k, who_n - k, "%s %s", missing ? ";" : "", d);
        missing++;
    }
    if (!missing) {
        /* Every peer entered the collective, yet it does not finish: a peer may have been stopped or died inside
         * it (its board still says it is in there), which the kernel's view of its process tells apart from a
         * transfer stuck in the network. */
        k = (size_t)snprintf(who, who_n, "every visible rank of the group entered it");
        int halted = 0;
        for (int i = 0; i < n && k < who_n; i++) {
            if (members[i] == w->world_rank || !read_board(w, members[i], &b) || !process_state(&b)[0]) continue;
            describe(&b, now, d, sizeof d);
            k += (size_t)snprintf(who + k, who_n - k, "%s %s", halted ? ";" : ", but", d);
            halted++;
        }
        if (!halted && k < who_n) snprintf(who + k, who_n - k, " (a transfer is stuck)");
    }
    if (unknown && k < who_n)
        snprintf(who + strlen(who), who_n - strlen(who), " (%d rank(s) not visible from this host)", unknown);
}
