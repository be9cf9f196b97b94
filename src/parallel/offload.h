/* offload.h — optimizer states on a node-local disk, streamed through a bounded memory window (ZeRO-Offload's
 * CPU analogue: host memory -> local disk, as ZeRO-Infinity's NVMe tier).
 *
 * A rank's Adam m and v (and, at stage 3, its fp32 parameter shards) live in one unlinked file in offload_dir
 * (default: $TMPDIR, else /var/tmp: node-local, never the checkpoint directory unless asked), one region per
 * stream. The optimizer step walks them in windows of W = min(2^20, n/4 rounded up to 1024) elements: a helper
 * thread reads window w+1 ahead and writes window w-1 behind while window w is updated, so disk time overlaps
 * compute; three window buffers per stream are all the memory the states take. Reads and writes bypass the page cache (O_DIRECT) where
 * the file system allows it; elsewhere each written window is flushed and dropped from the cache, so the states'
 * bytes really leave memory (a file in the page cache would only move them from the process to the kernel). A
 * tmpfs offload_dir is memory itself: the start-up line says so.
 *
 * The windows are pinned host memory of the backend (backend.h alloc_host): the optimizer's kernels update them
 * in place (on the backend's host backend where it has one: sharding.c stages the gradients and parameters). Stage-3 gathers read one group's parameter shard into device memory (llm4d_offload_read: directly where
 * device memory is host memory, else through a window). Checkpoints map a stream for the duration of a save or load
 * (llm4d_offload_map): file-backed host pages, which the helper thread drops from the process every millisecond
 * meanwhile, the windows' pages given back for the duration, so that a checkpoint does not bring the offloaded
 * states back into memory (offload.c). */
#ifndef LLM4D_PARALLEL_OFFLOAD_H
#define LLM4D_PARALLEL_OFFLOAD_H

#include <stddef.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/mem.h"

enum { LLM4D_OFFLOAD_M = 0, LLM4D_OFFLOAD_V = 1, LLM4D_OFFLOAD_PARAMS = 2 };

typedef struct llm4d_offload llm4d_offload;

/* A file of nstreams x n floats (zeros) in dir (NULL or "": $TMPDIR, else /var/tmp). A directory that cannot hold
 * it is a user error naming it. */
/* The bytes of memory llm4d_offload_open(n, nstreams) holds (its windows; accounted as optimizer memory). */
size_t llm4d_offload_memory(size_t n, int nstreams);
/* Elements per stream of one window (the largest len llm4d_offload_stream hands fn) for n elements. */
size_t llm4d_offload_window(size_t n);
llm4d_code llm4d_offload_open(llm4d_offload **out, const char *dir, int rank, size_t n, int nstreams,
                              llm4d_backend *be, llm4d_mem *mem, llm4d_err *err);
void llm4d_offload_close(llm4d_offload *o);

/* Walk elements [0, n) in windows: fn(ctx, off, len, bufs) with bufs[s] = stream s's elements [off, off + len),
 * which fn may change; every window is written back. */
llm4d_code llm4d_offload_stream(llm4d_offload *o, void (*fn)(void *ctx, size_t off, size_t len, float **bufs),
                                void *ctx, llm4d_err *err);
/* Stream s's elements [off, off + n) into dst (device memory of the backend). */
llm4d_code llm4d_offload_read(llm4d_offload *o, int stream, size_t off, size_t n, float *dst, llm4d_err *err);
/* Stream s as memory (read-write, file-backed) until llm4d_offload_unmap; NULL on failure. */
float *llm4d_offload_map(llm4d_offload *o, int stream);
/* Write back and unmap every mapped stream. */
llm4d_code llm4d_offload_unmap(llm4d_offload *o, llm4d_err *err);
/* Where the file is, the window, and whether the page cache is bypassed. */
void llm4d_offload_describe(const llm4d_offload *o, char *buf, size_t n);

#endif
