/* npz.h — numpy's .npy arrays and .npz archives (a zip of .npy members), read and written.
 *
 * Paddle stores tokenized corpora as npz (`ids`, `lens`) and npy, and PaddleNLP caches its sample index as .npy
 * files, so llm4d reads and writes both. Zip handling is libzip's (stored and deflated members). The .npy header
 * is parsed strictly: a malformed or unsupported header is a user error naming the file and the member. */
#ifndef LLM4D_DATA_NPZ_H
#define LLM4D_DATA_NPZ_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "data/corpus.h"

typedef struct {
    char name[64];       /* member name without ".npy" (npz) */
    llm4d_dtype dtype;
    int ndim;
    int64_t shape[4];
    void *data;          /* C order, little-endian */
    size_t nbytes;
    int owned;           /* 1: data was malloc'ed by the reader (free with llm4d_array_free) */
} llm4d_array;

size_t llm4d_dtype_size(llm4d_dtype dt);
int64_t llm4d_array_numel(const llm4d_array *a);

/* Parse a .npy image held in memory; out->data points into buf (not owned). `what` names it in messages. */
llm4d_code llm4d_npy_parse(const void *buf, size_t len, const char *what, llm4d_array *out, llm4d_err *err);
/* Read a .npy file (whole, owned copy). */
llm4d_code llm4d_npy_read(const char *path, llm4d_array *out, llm4d_err *err);
/* Read member `name` (without .npy) of an npz archive (owned copy). A missing member is a user error. */
llm4d_code llm4d_npz_read(const char *path, const char *name, llm4d_array *out, llm4d_err *err);
/* Write arrays into an npz (deflated if compress). Written to a temporary name and renamed, so a crash never
 * leaves a partial file under the final name. */
llm4d_code llm4d_npz_write(const char *path, const llm4d_array *arrays, int n, int compress, llm4d_err *err);
/* Write one .npy file, atomically as above. */
llm4d_code llm4d_npy_write(const char *path, const llm4d_array *a, llm4d_err *err);
void llm4d_array_free(llm4d_array *a);

#endif
