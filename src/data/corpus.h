/* corpus.h — a tokenized corpus: all documents' token ids concatenated, and the length of each document.
 *
 * This is the common view of every token file format llm4d reads (Paddle's `*_ids.npz` with arrays `ids` and
 * `lens`, Paddle's newer `*_ids.npy` + `*_idx.npz` pair, Megatron's `.bin` + `.idx`). Ids keep the width they
 * have on disk (uint16 for GPT-2's vocabulary, or int32/int64) and may be memory-mapped; readers copy windows
 * out as int32. Every structural problem in a file is a user error naming the file and what is wrong. */
#ifndef LLM4D_DATA_CORPUS_H
#define LLM4D_DATA_CORPUS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef enum { LLM4D_DT_U16 = 0, LLM4D_DT_I32, LLM4D_DT_I64, LLM4D_DT_U32 } llm4d_dtype;

typedef struct {
    char path[1024];     /* the ids file it came from: P_ids.npz or P_ids.npy (P is the prefix for caches) */
    llm4d_dtype dtype;   /* width of ids */
    const void *ids;     /* n_tokens ids */
    int64_t n_tokens;
    int32_t *lens;       /* n_docs document lengths; sum == n_tokens */
    int64_t n_docs;
    int64_t *doc_start;  /* n_docs + 1 prefix sums of lens */
    int64_t max_id;      /* largest id in the corpus (checked against the vocabulary once) */
    int n_found;         /* corpora in the directory llm4d_corpus_open was given (it opened the first) */
    /* ownership, for close */
    void *owned_ids;
    void *map;
    size_t map_len;
} llm4d_corpus;

/* Open a Paddle `*_ids.npz` (arrays ids and lens, stored or deflated; ids uint16/int32/int64). */
llm4d_code llm4d_corpus_open_npz(llm4d_corpus *c, const char *path, llm4d_err *err);
/* The corpora a directory holds, as full paths in sorted order of their names, each one corpus that
 * llm4d_corpus_open opens. Precedence:
 *   1. Paddle files by PaddleNLP's rule (get_train_data_file): the files ending `_idx.npz` (new format, ids in
 *      P_ids.npy beside each); only if there are none, the files ending `_ids.npz` (old format).
 *   2. Megatron pairs: every `P.idx` (its `P.bin` must be beside it), except one whose P is also the prefix of a
 *      Paddle file chosen in 1: that is the same corpus written in both formats, and the Paddle file is read.
 * Nothing found is a user error naming the expected names. *paths is freed by llm4d_corpus_list_free. */
llm4d_code llm4d_corpus_list(const char *dir, char ***paths, int *n, llm4d_err *err);
void llm4d_corpus_list_free(char **paths, int n);

/* Open ONE corpus named by a path: a token file by its suffix (P_ids.npz; P_ids.npy or P_idx.npz for the pair;
 * P.bin or P.idx for Megatron, memory-mapped), a prefix P when no file P exists (P.idx, else P_idx.npz, else
 * P_ids.npz), or a directory: the first of llm4d_corpus_list's corpora, n_found saying how many there were.
 * Training reads every corpus of a directory (data/blend.h); this single-corpus form is for tools and tests. */
llm4d_code llm4d_corpus_open(llm4d_corpus *c, const char *input_dir, llm4d_err *err);
void llm4d_corpus_close(llm4d_corpus *c);

/* Copy ids [start, start+n) as int32 into out (start + n <= n_tokens). */
void llm4d_corpus_read(const llm4d_corpus *c, int64_t start, int64_t n, int32_t *out);

#endif
