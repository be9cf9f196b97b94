/* offload.c — optimizer states in a node-local file, streamed through a window (see offload.h).
 *
 * The helper thread runs a FIFO of read and write jobs; the main thread submits "read w+1", computes window w,
 * submits "write w", and waits only for "read w" before computing it. Window buffers rotate over three slots, so
 * the read of window w+1 reuses the slot of window w-2, whose write the FIFO has finished before it. The thread
 * touches only the file, its window buffers and its mappings, never MPI (the runtime is MPI_THREAD_FUNNELED).
 *
 * A checkpoint reads and writes the states through a shared mapping of the file (llm4d_offload_map), and every page
 * of a file mapping that a process has touched counts in its resident set until it is unmapped: saving gpt2-en's
 * ZeRO-1 shard over 2 ranks touched all 475 MiB of Adam m and v, so the run's peak with offload (1679 MiB) was above
 * the peak without it (1656 MiB). So while a stream is mapped the helper thread, idle then (a checkpoint streams no
 * windows), unmaps the mapping's pages from the process every TRIM_US (madvise MADV_DONTNEED; under the mutex that
 * llm4d_offload_unmap takes before munmap, so never on an address range the mapping has left). The data stays in
 * the page cache and the file (a dirty page's bit goes to the cache, and msync writes it), so the checkpoint only
 * faults again what it reads twice. What it touches between two trims is bounded by the scheduler, not by the
 * period: on a 2-vCPU VM with two busy ranks the thread woke up to 20-85 ms late, and a save's peak rose by 2-6 MiB
 * (gpt2-tiny, 20 MiB of states) and 7-21 MiB (gpt2-en). The windows, idle too, give their pages back for the
 * duration (give_back_windows: 14.8 and 24 MiB there), so that those pages take the windows' place in the peak
 * instead of adding to it: gpt2-en's peak with offload and a checkpoint is 1205-1213 MiB, gpt2-tiny's equals its
 * peak without the checkpoint. */
#define _GNU_SOURCE
#include "parallel/offload.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define ALIGN 4096                          /* O_DIRECT: buffer, offset and length alignment */
#define WINDOW_MAX ((size_t)1 << 20)        /* elements per stream per window: 4 MiB ... */
#define WINDOWS_MIN 4                       /* ... or less, so that a small state still streams in >= 4 windows */
#define NSLOTS 3                            /* window buffers per stream: ahead, current, behind */
#define MAX_STREAMS 3
#define MAX_JOBS 64
#define TMPFS_MAGIC_NUMBER 0x01021994
#define TRIM_US 1000                        /* how often a mapped stream's pages are dropped (us) */

typedef struct {
    int write;   /* 0 read, 1 write */
    int slot;
    size_t off, len;
    int done;
} job;

struct llm4d_offload {
    char path[1024];
    int fd;          /* buffered */
    int fd_direct;   /* O_DIRECT, -1 when the file system refuses it */
    int tmpfs;
    size_t n, stride; /* elements per stream; bytes between streams (aligned) */
    size_t window;    /* elements per stream per window, a multiple of ALIGN / sizeof(float) */
    int nstreams;
    llm4d_backend *be;
    llm4d_mem *mem;
    float *win[NSLOTS][MAX_STREAMS];
    float *map[MAX_STREAMS];
    /* the helper thread */
    pthread_t thread;
    int thread_on, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job jobs[MAX_JOBS];
    int run, tail;    /* jobs [run, tail) (modulo MAX_JOBS) are queued; run is the next the thread runs */
    int io_errno;     /* the first I/O failure */
};

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* All of [off, off+len) of one stream, retrying short transfers. */
static int io(const llm4d_offload *o, int fd, int write, int stream, size_t off, size_t len, float *buf) {
    char *p = (char *)buf;
    size_t done = 0, bytes = len * sizeof(float);
    const off_t base = (off_t)(stream * o->stride + off * sizeof(float));
    while (done < bytes) {
        ssize_t r = write ? pwrite(fd, p + done, bytes - done, base + (off_t)done)
                          : pread(fd, p + done, bytes - done, base + (off_t)done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r < 0 ? errno : EIO;
        done += (size_t)r;
    }
    return 0;
}

static int run_job(llm4d_offload *o, const job *j) {
    /* O_DIRECT needs whole aligned blocks: the last window's length is rounded up (the file is padded) */
    const int fd = o->fd_direct >= 0 ? o->fd_direct : o->fd;
    const size_t len = o->fd_direct >= 0 ? round_up(j->len, ALIGN / sizeof(float)) : j->len;
    for (int s = 0; s < o->nstreams; s++) {
        int e = io(o, fd, j->write, s, j->off, len, o->win[j->slot][s]);
        if (e) return e;
        if (j->write && o->fd_direct < 0) { /* buffered: push the pages out and drop them from the cache */
            const off_t at = (off_t)(s * o->stride + j->off * sizeof(float));
            sync_file_range(o->fd, at, (off_t)(len * sizeof(float)),
                            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
            posix_fadvise(o->fd, at, (off_t)(len * sizeof(float)), POSIX_FADV_DONTNEED);
        }
    }
    return 0;
}

/* Drop the mapped streams' pages from the process (with o->mu held): they stay in the page cache and the file. */
static int trim_maps(llm4d_offload *o) {
    int mapped = 0;
    for (int s = 0; s < o->nstreams; s++)
        if (o->map[s]) madvise(o->map[s], o->stride, MADV_DONTNEED), mapped = 1;
    return mapped;
}

/* Wait for a job or a stop; while a stream is mapped, trim the mappings every TRIM_US meanwhile. */
static void idle(llm4d_offload *o) {
    while (!o->stop && o->run == o->tail) {
        if (!trim_maps(o)) {
            pthread_cond_wait(&o->cv, &o->mu);
            continue;
        }
        struct timespec at;
        clock_gettime(CLOCK_REALTIME, &at);
        at.tv_nsec += TRIM_US * 1000L;
        if (at.tv_nsec >= 1000000000L) at.tv_sec++, at.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&o->cv, &o->mu, &at);
    }
}

static void *worker(void *arg) {
    llm4d_offload *o = arg;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        idle(o);
        if (o->stop) break;
        const job j = o->jobs[o->run % MAX_JOBS];
        pthread_mutex_unlock(&o->mu);
        const int e = o->io_errno ? 0 : run_job(o, &j); /* after a failure the rest only completes */
        pthread_mutex_lock(&o->mu);
        if (e && !o->io_errno) o->io_errno = e;
        o->jobs[o->run % MAX_JOBS].done = 1;
        o->run++;
        pthread_cond_broadcast(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

/* Queue a job (FIFO); returns its id. */
static int submit(llm4d_offload *o, int write, int slot, size_t off, size_t len) {
    pthread_mutex_lock(&o->mu);
    while (o->tail - o->run >= MAX_JOBS) pthread_cond_wait(&o->cv, &o->mu);
    const int id = o->tail++;
    o->jobs[id % MAX_JOBS] = (job){write, slot, off, len, 0};
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    return id;
}

static void wait_job(llm4d_offload *o, int id) {
    pthread_mutex_lock(&o->mu);
    while (o->run <= id) pthread_cond_wait(&o->cv, &o->mu);
    pthread_mutex_unlock(&o->mu);
}

static void wait_all(llm4d_offload *o) {
    pthread_mutex_lock(&o->mu);
    while (o->run != o->tail) pthread_cond_wait(&o->cv, &o->mu);
    pthread_mutex_unlock(&o->mu);
}

static llm4d_code io_error(llm4d_offload *o, const char *what, int e, llm4d_err *err) {
    return llm4d_fail(err, LLM4D_EUSER, "sharding_offload: %s %s failed: %s; free space there or choose another "
                      "--offload_dir", what, o->path, strerror(e));
}

llm4d_code llm4d_offload_stream(llm4d_offload *o, void (*fn)(void *ctx, size_t off, size_t len, float **bufs),
                                void *ctx, llm4d_err *err) {
    const size_t W = o->window, nw = (o->n + W - 1) / W;
    int reads[2] = {-1, -1};
    if (nw > 0) reads[0] = submit(o, 0, 0, 0, o->n < W ? o->n : W);
    for (size_t w = 0; w < nw; w++) {
        const size_t off = w * W, len = o->n - off < W ? o->n - off : W;
        if (w + 1 < nw) {
            const size_t off1 = off + W, len1 = o->n - off1 < W ? o->n - off1 : W;
            reads[(w + 1) % 2] = submit(o, 0, (int)((w + 1) % NSLOTS), off1, len1);
        }
        wait_job(o, reads[w % 2]);
        if (o->io_errno) break;
        float *bufs[MAX_STREAMS] = {0};
        for (int s = 0; s < o->nstreams; s++) bufs[s] = o->win[w % NSLOTS][s];
        fn(ctx, off, len, bufs);
        o->be->stream_sync(o->be, LLM4D_STREAM_COMPUTE); /* the kernels fn enqueued on the window have run */
        submit(o, 1, (int)(w % NSLOTS), off, len);
    }
    wait_all(o);
    if (o->io_errno) return io_error(o, "reading or writing the offloaded states in", o->io_errno, err);
    return LLM4D_OK;
}

/* elements [off, off + n) of a stream into host memory: from the mapping when there is one (it may hold newer data
 * than the file: a load in progress), else from the file */
static llm4d_code read_host(llm4d_offload *o, int stream, size_t off, size_t n, float *dst, llm4d_err *err) {
    if (o->map[stream]) {
        memcpy(dst, o->map[stream] + off, n * sizeof(float));
        return LLM4D_OK;
    }
    const int e = io(o, o->fd, 0, stream, off, n, dst);
    if (e) return io_error(o, "reading", e, err);
    return LLM4D_OK;
}

llm4d_code llm4d_offload_read(llm4d_offload *o, int stream, size_t off, size_t n, float *dst, llm4d_err *err) {
    llm4d_backend *be = o->be;
    if (be->host_addressable) return read_host(o, stream, off, n, dst, err); /* device memory is host memory */
    /* through a window (idle outside llm4d_offload_stream), a window's length at a time */
    float *bounce = o->win[0][0];
    for (size_t done = 0; done < n;) {
        const size_t k = n - done < o->window ? n - done : o->window;
        be->stream_sync(be, LLM4D_STREAM_COMPUTE); /* the window's last upload has been read */
        LLM4D_TRY(read_host(o, stream, off + done, k, bounce, err));
        be->copy_async(be, dst + done, bounce, k * sizeof(float), LLM4D_H2D, LLM4D_STREAM_COMPUTE);
        done += k;
    }
    return LLM4D_OK;
}

/* The windows' pages given back to the kernel while a checkpoint maps the streams: no window is streamed then, each
 * is read into before it is used again, and the pages the mapping holds between two trims take their place instead
 * of adding to the peak. Only where the backend's pinned memory is the process's own (the cpu backends'
 * page-aligned blocks; a GPU's pinned pages are the driver's). */
static void give_back_windows(llm4d_offload *o) {
    if (!o->be->host_addressable) return;
    for (int k = 0; k < NSLOTS; k++)
        for (int s = 0; s < o->nstreams; s++)
            if (o->win[k][s]) madvise(o->win[k][s], o->window * sizeof(float), MADV_DONTNEED);
}

float *llm4d_offload_map(llm4d_offload *o, int stream) {
    if (o->map[stream]) return o->map[stream];
    void *p = mmap(NULL, o->stride, PROT_READ | PROT_WRITE, MAP_SHARED, o->fd, (off_t)(stream * o->stride));
    if (p == MAP_FAILED) return NULL;
    int first = 1;
    for (int s = 0; s < o->nstreams; s++) first &= !o->map[s];
    if (first) give_back_windows(o);
    pthread_mutex_lock(&o->mu);
    o->map[stream] = p;
    pthread_cond_broadcast(&o->cv); /* the helper thread starts trimming it */
    pthread_mutex_unlock(&o->mu);
    return p;
}

llm4d_code llm4d_offload_unmap(llm4d_offload *o, llm4d_err *err) {
    int e = 0;
    for (int s = 0; s < o->nstreams; s++) {
        if (!o->map[s]) continue;
        /* msync writes the dirty pages of the file's range, those the trims moved to the page cache included */
        if (msync(o->map[s], o->stride, MS_SYNC) != 0 && !e) e = errno;
        pthread_mutex_lock(&o->mu); /* no trim in flight on the range being unmapped */
        munmap(o->map[s], o->stride);
        o->map[s] = NULL;
        pthread_mutex_unlock(&o->mu);
        posix_fadvise(o->fd, (off_t)(s * o->stride), (off_t)o->stride, POSIX_FADV_DONTNEED);
    }
    if (e) return io_error(o, "writing back", e, err);
    return LLM4D_OK;
}

void llm4d_offload_describe(const llm4d_offload *o, char *buf, size_t n) {
    snprintf(buf, n, "%d streams of %zu elements in %s (unlinked), window %zu elements x %d per stream (%.1f MiB "
             "in memory), %s%s",
             o->nstreams, o->n, o->path, o->window, NSLOTS,
             (double)NSLOTS * o->nstreams * o->window * sizeof(float) / 1048576.0,
             o->fd_direct >= 0 ? "direct I/O (no page cache)" : "buffered I/O, pages dropped after each write",
             o->tmpfs ? "; offload_dir is a tmpfs (memory): offloading there frees no memory" : "");
}

void llm4d_offload_close(llm4d_offload *o) {
    if (!o) return;
    if (o->thread_on) {
        pthread_mutex_lock(&o->mu);
        o->stop = 1;
        pthread_cond_broadcast(&o->cv);
        pthread_mutex_unlock(&o->mu);
        pthread_join(o->thread, NULL);
    }
    llm4d_err ignored;
    llm4d_offload_unmap(o, &ignored);
    for (int k = 0; k < NSLOTS; k++)
        for (int s = 0; s < o->nstreams; s++)
            if (o->win[k][s]) o->be->free_host(o->be, o->mem, LLM4D_MEM_OPTIM, o->win[k][s], o->window * sizeof(float));
    if (o->fd_direct >= 0) close(o->fd_direct);
    if (o->fd >= 0) close(o->fd);
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    free(o);
}

/* Elements of one window for a state of n elements. */
static size_t window_of(size_t n) {
    const size_t w = round_up((n + WINDOWS_MIN - 1) / WINDOWS_MIN, ALIGN / sizeof(float));
    return w > WINDOW_MAX ? WINDOW_MAX : w;
}

size_t llm4d_offload_window(size_t n) { return window_of(n); }

size_t llm4d_offload_memory(size_t n, int nstreams) {
    return (size_t)NSLOTS * (size_t)nstreams * window_of(n) * sizeof(float);
}

llm4d_code llm4d_offload_open(llm4d_offload **out, const char *dir, int rank, size_t n, int nstreams,
                              llm4d_backend *be, llm4d_mem *mem, llm4d_err *err) {
    *out = NULL;
    LLM4D_ASSERT(nstreams >= 1 && nstreams <= MAX_STREAMS, "%d offload streams", nstreams);
    llm4d_offload *o = calloc(1, sizeof *o);
    if (!o) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    o->fd = o->fd_direct = -1;
    o->n = n;
    o->nstreams = nstreams;
    o->be = be;
    o->mem = mem;
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    if (!dir || !dir[0]) dir = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/var/tmp";
    snprintf(o->path, sizeof o->path, "%s/.llm4d_offload_rank%d_XXXXXX", dir, rank);
    o->fd = mkstemp(o->path);
    if (o->fd < 0) {
        llm4d_code rc = llm4d_fail(err, LLM4D_EUSER, "sharding_offload: cannot create the offload file %s: %s; set "
                                   "--offload_dir to a writable local directory", o->path, strerror(errno));
        llm4d_offload_close(o);
        return rc;
    }
    unlink(o->path); /* nothing is left behind, whatever happens to the run */
    struct statfs fs;
    o->tmpfs = fstatfs(o->fd, &fs) == 0 && (unsigned long)fs.f_type == TMPFS_MAGIC_NUMBER;
    o->window = window_of(n);
    o->stride = round_up(round_up(n, o->window) * sizeof(float), ALIGN);
    if (ftruncate(o->fd, (off_t)(o->stride * (size_t)nstreams)) != 0) {
        llm4d_code rc = llm4d_fail(err, LLM4D_EUSER, "sharding_offload: cannot size the offload file to %zu bytes in "
                                   "%s: %s; free space there or choose another --offload_dir",
                                   o->stride * (size_t)nstreams, dir, strerror(errno));
        llm4d_offload_close(o);
        return rc;
    }
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", o->fd); /* the unlinked file, opened again for direct I/O */
    o->fd_direct = open(self, O_RDWR | O_DIRECT);
    for (int k = 0; k < NSLOTS; k++)
        for (int s = 0; s < nstreams; s++) /* pinned (the optimizer's kernels read them), page-aligned (direct I/O) */
            if (!(o->win[k][s] = be->alloc_host(be, mem, LLM4D_MEM_OPTIM, o->window * sizeof(float)))) {
                llm4d_offload_close(o);
                return llm4d_fail(err, LLM4D_ENOMEM, "out of memory for the offload window");
            }
    if (pthread_create(&o->thread, NULL, worker, o) != 0) {
        llm4d_offload_close(o);
        return llm4d_fail(err, LLM4D_EINTERNAL, "sharding_offload: cannot start the I/O thread");
    }
    o->thread_on = 1;
    *out = o;
    return LLM4D_OK;
}
