/* store_impl.h — what the checkpoint store's files share (store_save.c, store_files.c, store_load.c,
 * store_range.c): limits, the slice record's key, name checks, the saver's state, and the saver calls the files
 * that add and write a save's contents go through. Private to src/ckpt/store_*.c; the interface is store.h. */
#ifndef LLM4D_CKPT_STORE_IMPL_H
#define LLM4D_CKPT_STORE_IMPL_H

#include "ckpt/store.h"

#include <ctype.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "core/fault.h"

#define SLICES_KEY "llm4d.slices"
#define PATH_MAX_CK 1024 /* longest output_dir / checkpoint path accepted */
#define PBUF 4096       /* buffers for paths composed from those (never truncated) */

/* A plain file name: letters, digits, '.', '_', '-'; not starting with '.'. */
static inline int plain_name(const char *s) {
    if (!s[0] || s[0] == '.' || strlen(s) >= LLM4D_CKPT_FILE_MAX) return 0;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-') return 0;
    return 1;
}

static inline int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* "step_<digits>" -> N, else -1. */
static inline int64_t step_of(const char *name) {
    if (strncmp(name, "step_", 5) != 0 || !name[5]) return -1;
    int64_t n = 0;
    for (const char *p = name + 5; *p; p++) {
        if (!isdigit((unsigned char)*p) || n > (INT64_MAX - 9) / 10) return -1;
        n = n * 10 + (*p - '0');
    }
    return n;
}

/* ---- a save in progress ---- */

typedef struct {
    char name[LLM4D_CKPT_FILE_MAX];
    int is_blob;
    llm4d_st_writer w;   /* tensors */
    cJSON *slices;       /* the llm4d.slices record (NULL while no partial slice was added) */
    const void *blob;
    size_t blob_len;
    int written;
    uint32_t crc;
    uint64_t bytes;
    int *names;          /* open-addressing set of the local names added (index into w.t + 1; 0 = empty) */
    int names_cap;       /* a power of two, more than twice w.n */
} ck_pending;

/* One manifest entry; also the record the ranks of a collective commit exchange (fixed size, sent as raw bytes
 * between copies of the same program). */
typedef struct {
    char name[LLM4D_CKPT_FILE_MAX];
    uint64_t bytes;
    uint32_t crc;
    int32_t rank; /* the writer */
} ck_mentry;

struct llm4d_ckpt_saver {
    char out_dir[PATH_MAX_CK];
    char tmp_dir[PATH_MAX_CK + 128];
    char step_name[64];
    int64_t step;
    pid_t pid;           /* of the process that names the temporary directory (rank 0 of a collective save) */
    char kill_at[64];
    int kill_here;       /* LLM4D_CKPT_KILL_RANK is unset or names this rank */
    llm4d_fault fault;   /* LLM4D_FAULT: this save's file operations are counted here (core/fault.h) */
    int nfiles_written;
    int n, cap;
    ck_pending *f;
    /* collective saves */
    llm4d_comm *comm;    /* NULL: a single writer */
    int rank, writes;
    llm4d_err failed;    /* the first failure of this rank, kept for the collective commit (code 0: none) */
    int own_done, nown;  /* this rank's files are written (llm4d_ckpt_save_write_collective or the commit) ... */
    ck_mentry *own;      /* ... and listed here (nown entries, add order) */
};

static inline void maybe_kill(const llm4d_ckpt_saver *s, const char *point) {
    if (s->kill_here && s->kill_at[0] && strcmp(s->kill_at, point) == 0) raise(SIGKILL);
}

/* store_save.c: -1 when the tensor is to be added, else the code to return (a failed save adds nothing more) */
int llm4d_ck_skip_add(const llm4d_ckpt_saver *s, llm4d_err *err);
/* store_save.c: remember the first failure of this rank (for the collective commit) and return rc */
llm4d_code llm4d_ck_keep_failure(llm4d_ckpt_saver *s, llm4d_code rc, const llm4d_err *err);
/* store_files.c: write one pending file (tensors or blob) under the save's temporary directory, fsync'ed, with its
 * size and crc32 kept for the manifest; a file written already is left alone. */
llm4d_code llm4d_ck_flush_one(llm4d_ckpt_saver *s, ck_pending *p, llm4d_err *err);
/* store_files.c: create path, write len bytes and fsync it (f counts the operations for LLM4D_FAULT); crc: its crc32
 * when not NULL. */
llm4d_code llm4d_ck_write_blob(llm4d_fault *f, const char *path, const void *data, size_t len, uint32_t *crc,
                               llm4d_err *err);

#endif
