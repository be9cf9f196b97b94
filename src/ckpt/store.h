/* store.h — checkpoint directories: atomic, checksummed, layout-independent.
 *
 * Layout of an output directory:
 *   output_dir/step_<N>/meta.json          the caller's JSON object, plus "files" (added by the store):
 *                                           {"<file>": {"bytes": <size>, "crc32": <zlib crc32>}, ...}
 *   output_dir/step_<N>/<any>.safetensors   tensors (any number of files, any split the caller chooses)
 *   output_dir/step_<N>/<other files>       opaque blobs the caller adds (for example an HF config.json)
 *   output_dir/latest                       "step_<N>\n": the newest complete checkpoint
 *
 * Global names and slices. Every tensor is saved under its GLOBAL name (HF GPT-2's) with its GLOBAL shape. A file
 * may hold the whole tensor or a box-shaped slice of it (offset per dimension + slice shape), so a layout that
 * splits a weight over ranks saves one slice per rank and any other layout reads it back:
 *   - a whole tensor is stored under its global name with its global shape, exactly what any safetensors tool
 *     expects, and needs no extra record;
 *   - a partial slice is stored under "<global name>@<off0>,<off1>,..." (its local shape) and recorded in the
 *     file's `__metadata__` under the key "llm4d.slices", whose value is JSON text:
 *       {"<local name>": {"name": "<global name>", "shape": [global shape], "offset": [offset per dim]}, ...}
 *     Every tensor file also gets `"format": "pt"` in its metadata, which transformers requires.
 *     Keeping the record inside each file (not in meta.json) makes every file self-describing: a file moved or
 *     read alone still says what it holds.
 * A flat C-order element range of a tensor (a ZeRO partition boundary need not fall on a row) is saved as the
 * at most 2*(ndim-1)+1 boxes that make it up (llm4d_ckpt_save_range) and can be read back the same way.
 * The reader assembles any requested box of a global tensor from whatever slices the checkpoint holds (written as
 * 2 row-slices, read whole or as 4 other row-slices, ...), converting between float dtypes if asked. Slices of one
 * name must not overlap inside the requested box (ambiguous data is refused) and must cover it; there is no limit
 * on the number of slices of a tensor (a ZeRO run of N ranks writes up to 3N per matrix).
 *
 * Names are unique per checkpoint unless the caller separates kinds by file: every lookup takes an optional file
 * prefix, so "model.safetensors" and "optimizer_m.safetensors" may both use the HF names (prefix "model" and
 * "optimizer_m" pick one), or the caller may prefix names instead; with a NULL prefix all files are searched.
 *
 * Atomic save. Files are written into output_dir/.tmp_step_<N>_<pid>/, each fsync'ed, then meta.json, then the
 * directory is fsync'ed and renamed to step_<N>, output_dir is fsync'ed, and `latest` is replaced by writing
 * latest.tmp, fsync, rename, fsync output_dir. A crash at any point leaves `latest` naming a complete checkpoint.
 * If step_<N> exists already (a run resumed from an older checkpoint reaching step N again), the new directory is
 * swapped in with renameat2(RENAME_EXCHANGE), so step_<N> is at every instant either the old or the new complete
 * checkpoint; the old one is then removed. On a file system without RENAME_EXCHANGE the save is refused as a user
 * error and nothing is touched. Stale .tmp_step_* / .tmp_del_step_* directories (a killed save or prune) are
 * removed at the next save.
 * keep_last K > 0 then keeps the step just saved (the one `latest` names) and the K-1 highest-numbered other
 * step_* directories, removing the rest; each is first renamed to a .tmp_del_ name, so a crash during removal
 * never leaves a half-deleted step_*.
 *
 * Load. The path is a step directory (it holds meta.json) or an output directory (its `latest`; without one, the
 * highest-numbered step_* that has a meta.json). Every file in the manifest is mapped and its size and crc32
 * checked before anything is used; files not in the manifest are ignored. Every problem (unreadable meta.json,
 * missing or corrupt file, bad slice record, missing tensor, shape mismatch, uncovered region) is a user error
 * naming the path and tensor.
 *
 * Fault injection (tests only): LLM4D_CKPT_KILL_AT=<point> makes the saver raise(SIGKILL) at that point:
 *   mid_file              the first tensor file has its header but not its data
 *   after_first_file      the first tensor file is complete
 *   before_dir_fsync      all files and meta.json written, temporary directory not yet fsync'ed
 *   before_rename         temporary directory complete and synced
 *   after_rename          step_<N> in place, `latest` not yet updated
 *   latest_partial        latest.tmp half written
 *   before_latest_rename  latest.tmp complete and synced
 *   before_prune          `latest` updated, old checkpoints not yet pruned
 *   before_agree          (collective) this rank's files are written, the status exchange has not started
 * LLM4D_CKPT_KILL_RANK=<r> limits the kill to rank r of a collective saver's communicator (default: every rank
 * that reaches the point; a single-process saver is rank 0).
 * LLM4D_FAULT=<error>[:<op>]@<N> (core/fault.h) makes the N-th create, write, fsync or rename of each save fail with
 * ENOSPC, EIO, EACCES, ... (LLM4D_FAULT_RANK=<r>: on rank r only); the saver counts its own operations through
 * the file layer (core/fs.h), so tests/test_save_faults.sh can fail every operation of a save in turn. Every such
 * failure is reported as one line naming the path and the error, with what `latest` still names appended.
 *
 * Collective save (several writers, no gathering). Every rank of a communicator (the world, say) opens one saver
 * with llm4d_ckpt_save_begin_collective: rank 0 creates output_dir and the temporary directory
 * .tmp_step_<N>_<pid of rank 0> and removes stale ones; the name is broadcast, and every rank checks that it sees
 * the directory (output_dir must be on a file system all ranks share). Each rank then adds ITS OWN tensors, ranges
 * and blobs to files whose names no other rank uses (a per-rank tag such as "_r003" in the name); nothing is
 * communicated while adding. llm4d_ckpt_save_commit_collective, called by every rank:
 *   1. each rank writes and fsyncs its files (and the temporary directory), unless it did so already with
 *      llm4d_ckpt_save_write_collective (file I/O only: an asynchronous save runs it on a writer thread);
 *   2. all ranks exchange a status record (allgather): if any rank failed — an add that failed earlier (the first
 *      failure is kept in the saver), a write error, llm4d_ckpt_save_mark_failed — rank 0 removes the temporary
 *      directory and EVERY rank returns that rank's error, prefixed "rank R:"; nothing under a final name changed;
 *   3. the manifest entries (file, bytes, crc32) of every rank are allgathered; rank 0 refuses a file name written
 *      by two ranks and a file it cannot see with the announced size, then does exactly what a single writer does
 *      (meta.json with the whole manifest, fsync, rename to step_<N>, `latest`, prune);
 *   4. rank 0 broadcasts its result, so every rank returns the same code and message.
 * A rank killed at any point leaves `latest` naming the previous complete checkpoint (the job dies with it; the
 * orphaned temporary directory is removed by the next save). Ranks holding a replica of data another rank saves
 * (data-parallel copies of a ZeRO shard) pass writes = 0: they take part in the collectives, and their add calls
 * succeed and record nothing, so every rank can run the same saving code. */
#ifndef LLM4D_CKPT_STORE_H
#define LLM4D_CKPT_STORE_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt/safetensors.h"
#include "core/error.h"
#include "comm/comm.h"

#define LLM4D_CKPT_FILE_MAX 128 /* longest file name inside a checkpoint directory */

/* ---- saving ---- */

typedef struct llm4d_ckpt_saver llm4d_ckpt_saver;

/* A box of a tensor, as saved and as read: its element type, its global shape (ndim dims), and the box-shaped part
 * meant, an offset per dimension plus the slice's shape. offset NULL means all zeros; slice NULL means the global
 * shape (the whole tensor). The flat-range calls (*_range) take the tensor only: their offset and slice are NULL. */
typedef struct {
    llm4d_st_dtype dtype;
    int ndim;
    const int64_t *shape;  /* global; reading: the shape the caller requires (NULL: any) */
    const int64_t *offset;
    const int64_t *slice;
} llm4d_ckpt_box;

/* Create output_dir if needed (and its parents), create the temporary directory, remove stale temporaries.
 * An output_dir that cannot be created or written is a user error naming it; nothing existing is touched. */
llm4d_code llm4d_ckpt_save_begin(llm4d_ckpt_saver **out, const char *output_dir, int64_t step, llm4d_err *err);

/* Add the box of tensor `name` (the whole tensor, or a slice of it) to `file` (a plain name ending in
 * ".safetensors"). `data` holds the slice in C order and is not copied: it must stay valid until the file is written
 * (llm4d_ckpt_save_flush or commit). A slice outside the global shape or added twice is an internal error
 * (LLM4D_EINTERNAL). */
llm4d_code llm4d_ckpt_save_tensor(llm4d_ckpt_saver *s, const char *file, const char *name, const llm4d_ckpt_box *box,
                                  const void *data, llm4d_err *err);
/* Add the flat C-order element range [begin, end) of tensor (a box without offset and slice; a ZeRO partition
 * boundary, say, need not fall on a row): it is stored as the few boxes that make it up (at most 2*(ndim-1)+1). data
 * holds end-begin elements. */
llm4d_code llm4d_ckpt_save_range(llm4d_ckpt_saver *s, const char *file, const char *name, const llm4d_ckpt_box *tensor,
                                 int64_t begin, int64_t end, const void *data, llm4d_err *err);
/* Add an opaque file (a plain name not ending in ".safetensors"); data is not copied (see above). */
llm4d_code llm4d_ckpt_save_blob(llm4d_ckpt_saver *s, const char *file, const void *data, size_t len,
                                llm4d_err *err);
/* Write `file` now, so the memory its tensors point to may be reused (for example one staging buffer per kind).
 * On a collective saver, a failure of this or of the add calls above is also kept for the collective commit. */
llm4d_code llm4d_ckpt_save_flush(llm4d_ckpt_saver *s, const char *file, llm4d_err *err);
/* Write what is left, meta.json (a copy of `meta`, a JSON object or NULL, with "files" set by the store; a "files"
 * key of the caller's is replaced), make step_<N> the new checkpoint, update `latest`, then prune to keep_last
 * (<= 0 keeps all). Consumes s whether it succeeds or not; on failure the temporary directory is removed and the
 * previous checkpoints and `latest` are untouched. */
llm4d_code llm4d_ckpt_save_commit(llm4d_ckpt_saver *s, const cJSON *meta, int keep_last, llm4d_err *err);
/* Give up: remove the temporary directory and free s. On a collective saver it only frees s (the other ranks may
 * still be writing into the shared directory): use it only when the job is ending anyway; otherwise call
 * llm4d_ckpt_save_mark_failed and then llm4d_ckpt_save_commit_collective, which fails on every rank. */
void llm4d_ckpt_save_abort(llm4d_ckpt_saver *s);

/* ---- collective saving (see the top comment) ---- */

/* Collective over comm: every rank calls it with the same output_dir and step. writes = 0 makes this rank a
 * participant that writes nothing (its add/flush calls return LLM4D_OK and record nothing). On failure (rank 0
 * cannot create the directories, a rank cannot see them) every rank returns the same error and *out = NULL. */
llm4d_code llm4d_ckpt_save_begin_collective(llm4d_ckpt_saver **out, llm4d_comm *comm, const char *output_dir,
                                            int64_t step, int writes, llm4d_err *err);
/* Record a failure of this rank that the store did not see (a staging buffer that could not be allocated, say), so
 * that the next llm4d_ckpt_save_commit_collective fails on every rank with it. The first failure recorded wins.
 * Collective savers only (a single writer simply calls llm4d_ckpt_save_abort); ignored otherwise. */
void llm4d_ckpt_save_mark_failed(llm4d_ckpt_saver *s, const llm4d_err *why);
/* Step 1 of the commit ahead of it: write and fsync this rank's files (and the temporary directory). It only does
 * file I/O, no communication, so it may run on another thread than the one that calls MPI (an asynchronous save's
 * writer), provided no other thread uses s meanwhile; the commit then goes on from step 2. A failure is kept in s
 * (the commit fails on every rank with it) and returned; a second call does nothing. Not needed before a commit. */
llm4d_code llm4d_ckpt_save_write_collective(llm4d_ckpt_saver *s, llm4d_err *err);
/* Collective over the saver's communicator; consumes s on every rank. meta is used on rank 0 only (other ranks may
 * pass NULL); keep_last as in llm4d_ckpt_save_commit. Returns the same code and message on every rank. */
llm4d_code llm4d_ckpt_save_commit_collective(llm4d_ckpt_saver *s, const cJSON *meta, int keep_last,
                                             llm4d_err *err);

/* ---- loading ---- */

typedef struct llm4d_ckpt llm4d_ckpt;

typedef struct {
    llm4d_st_dtype dtype;                  /* of the first slice found */
    int ndim;
    int64_t shape[LLM4D_ST_MAX_DIMS];      /* global shape */
    int nslices;
} llm4d_ckpt_info;

/* Resolve `path` to a step directory (see the top comment) into dir (size n). */
llm4d_code llm4d_ckpt_resolve(const char *path, char *dir, size_t n, llm4d_err *err);
/* Resolve, read meta.json, map and verify every file in its manifest, index the tensors. */
llm4d_code llm4d_ckpt_open(llm4d_ckpt **out, const char *path, llm4d_err *err);
void llm4d_ckpt_close(llm4d_ckpt *c);

const char *llm4d_ckpt_dir(const llm4d_ckpt *c);  /* the resolved step directory */
int64_t llm4d_ckpt_step(const llm4d_ckpt *c);     /* N of step_<N>, or -1 if the directory is named otherwise */
const cJSON *llm4d_ckpt_meta(const llm4d_ckpt *c); /* meta.json, "files" included; owned by c */

/* Distinct global tensor names, sorted (files matching file_prefix only; NULL: all). Returns the count; names[i]
 * for i < count when names is not NULL (pointers owned by c). */
int llm4d_ckpt_names(const llm4d_ckpt *c, const char *file_prefix, const char **names, int max);
/* 1 and *info filled when the checkpoint holds `name` (in files matching file_prefix), else 0. */
int llm4d_ckpt_find(const llm4d_ckpt *c, const char *file_prefix, const char *name, llm4d_ckpt_info *info);

/* Read the box [offset, offset + slice) of global tensor `name` into out (C order, of the box's dtype and ndim).
 * box->shape: the global shape the caller requires (NULL: any); a different one is a user error saying the
 * checkpoint was written for another model; a NULL slice then means the global shape found. Stored float dtypes
 * convert to the box's; other dtypes must match. On error the contents of out are unspecified. */
llm4d_code llm4d_ckpt_read(const llm4d_ckpt *c, const char *file_prefix, const char *name, const llm4d_ckpt_box *box,
                           void *out, llm4d_err *err);
/* Read the flat C-order element range [begin, end) of a tensor whose global shape must be tensor->shape (a box
 * without offset and slice). */
llm4d_code llm4d_ckpt_read_range(const llm4d_ckpt *c, const char *file_prefix, const char *name,
                                 const llm4d_ckpt_box *tensor, int64_t begin, int64_t end, void *out, llm4d_err *err);
/* An opaque file's bytes (mapped, owned by c; verified); NULL when the manifest has no such file. */
const void *llm4d_ckpt_blob(const llm4d_ckpt *c, const char *file, size_t *len);

#endif
