/* safetensors.h — Hugging Face's safetensors format, written and read.
 *
 * Checkpoints and `convert` exports are safetensors files so that other tools (transformers, safetensors,
 * a hand-written numpy parser) open them directly. The format: an 8-byte little-endian header length N, N bytes of
 * JSON `{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}` padded with spaces,
 * then the raw little-endian data; offsets are relative to the start of the data.
 *
 * Writer: tensors are laid out sorted by element size (largest first), then by name, which is the order the
 * reference implementation uses. The header is padded so the data starts on an 8-byte boundary, and because the
 * data is packed without gaps in decreasing element size, every tensor is naturally aligned inside a mapping and
 * the data pointers the reader hands out can be used in place. The writer does not copy tensor data: it writes
 * straight from the caller's pointers, which must stay valid until llm4d_st_writer_write returns.
 *
 * Reader: the file is memory-mapped and validated completely before anything is returned: header length within
 * the file, JSON valid and of the expected shape, dtypes known, shape x element size == byte length, offsets within
 * the data, no overlap and no gap (the data is covered exactly, as the reference reader demands), no duplicate
 * names, metadata values strings. Every problem is a user error naming the file and, where there is one, the
 * tensor. The host is assumed little-endian (x86-64, aarch64), as the format is. */
#ifndef LLM4D_CKPT_SAFETENSORS_H
#define LLM4D_CKPT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/fault.h"

typedef enum {
    LLM4D_ST_BOOL = 0, LLM4D_ST_U8, LLM4D_ST_I8, LLM4D_ST_U16, LLM4D_ST_I16, LLM4D_ST_F16, LLM4D_ST_BF16,
    LLM4D_ST_U32, LLM4D_ST_I32, LLM4D_ST_F32, LLM4D_ST_U64, LLM4D_ST_I64, LLM4D_ST_F64,
    LLM4D_ST_NDTYPES
} llm4d_st_dtype;

#define LLM4D_ST_MAX_DIMS 8
/* The reference implementation refuses headers above 100 MB; so do we (a corrupt length must not make us
 * allocate gigabytes). */
#define LLM4D_ST_MAX_HEADER (100u * 1000u * 1000u)

/* "F32", "BF16", ... as written in the header. */
const char *llm4d_st_dtype_name(llm4d_st_dtype dt);
/* Parse a header dtype string; returns 0 when unknown. */
int llm4d_st_dtype_parse(const char *s, llm4d_st_dtype *out);
size_t llm4d_st_dtype_size(llm4d_st_dtype dt);
/* 1 for F16, BF16, F32, F64 (the dtypes llm4d_st_convert converts between). */
int llm4d_st_dtype_is_float(llm4d_st_dtype dt);
/* Convert n elements between float dtypes (F16/BF16/F32/F64; rounding to nearest even when narrowing), or copy
 * when src and dst dtypes are equal (any dtype). Returns 0 when the pair is not supported. */
int llm4d_st_convert(void *dst, llm4d_st_dtype dst_dt, const void *src, llm4d_st_dtype src_dt, size_t n);

/* One tensor of a file being read (data points into the mapping) or written (data is the caller's). */
typedef struct {
    char *name;
    llm4d_st_dtype dtype;
    int ndim;
    int64_t shape[LLM4D_ST_MAX_DIMS];
    const void *data;
    size_t nbytes;
} llm4d_st_tensor;

/* ---- writing ---- */

typedef struct {
    int n, cap;
    llm4d_st_tensor *t;
    int n_meta, cap_meta;
    char **meta_key, **meta_val;
} llm4d_st_writer;

enum {
    LLM4D_ST_WRITE_FSYNC = 1,  /* fsync the file before closing it */
    LLM4D_ST_WRITE_ATOMIC = 2, /* write <path>.tmp<pid> then rename over path (and fsync the directory) */
};

void llm4d_st_writer_init(llm4d_st_writer *w);
/* Add a tensor (name is copied, data is not: it must stay valid until the write). ndim 0 is a scalar. A duplicate
 * name (found when the file is written), a name "__metadata__", an empty name or a negative dimension is an
 * internal error (the caller's bug). */
llm4d_code llm4d_st_writer_add(llm4d_st_writer *w, const char *name, llm4d_st_dtype dt, int ndim,
                               const int64_t *shape, const void *data, llm4d_err *err);
/* Set a `__metadata__` entry (both strings copied; setting a key again replaces its value). */
llm4d_code llm4d_st_writer_meta(llm4d_st_writer *w, const char *key, const char *value, llm4d_err *err);
/* Write the file. crc32_out and bytes_out (either may be NULL) receive zlib's crc32 of the whole file and its
 * size, computed while writing so nobody has to read the file back. Errors name the path. */
llm4d_code llm4d_st_writer_write(const llm4d_st_writer *w, const char *path, int flags, uint32_t *crc32_out,
                                 uint64_t *bytes_out, llm4d_err *err);
/* What a checkpoint saver hooks into a write (store_save.c), for its crash and fault tests: after_header(ctx) is called
 * after the header is written and before the data (a kill point), and every create, write, fsync and rename of the
 * file is counted by fault (core/fault.h), which may make one fail. Any member may be NULL. */
typedef struct {
    void (*after_header)(void *ctx);
    void *ctx;
    llm4d_fault *fault;
} llm4d_st_write_hooks;
llm4d_code llm4d_st_writer_write_hooked(const llm4d_st_writer *w, const char *path, int flags,
                                        uint32_t *crc32_out, uint64_t *bytes_out, const llm4d_st_write_hooks *hooks,
                                        llm4d_err *err);
void llm4d_st_writer_free(llm4d_st_writer *w);

/* ---- reading ---- */

typedef struct {
    char path[1024];          /* for messages */
    void *map;                /* the whole file, read-only (NULL for llm4d_st_parse) */
    size_t map_len;
    const uint8_t *data;      /* start of the data section */
    size_t data_len;
    size_t header_len;        /* N from the first 8 bytes */
    int n;                    /* tensors, in header order */
    llm4d_st_tensor *t;
    int n_meta;               /* __metadata__ entries */
    char **meta_key, **meta_val;
} llm4d_st_file;

/* Map and validate a file. */
llm4d_code llm4d_st_open(llm4d_st_file *f, const char *path, llm4d_err *err);
/* Validate an image held in memory (buf must outlive f); `what` names it in messages. */
llm4d_code llm4d_st_parse(llm4d_st_file *f, const void *buf, size_t len, const char *what, llm4d_err *err);
/* NULL when absent. */
const llm4d_st_tensor *llm4d_st_find(const llm4d_st_file *f, const char *name);
const char *llm4d_st_meta(const llm4d_st_file *f, const char *key);
void llm4d_st_close(llm4d_st_file *f);

int64_t llm4d_st_numel(int ndim, const int64_t *shape);

#endif
