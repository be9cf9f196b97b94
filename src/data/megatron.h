/* megatron.h — Megatron-LM's indexed dataset (`P.bin` + `P.idx`, "mmap" implementation), written and read.
 *
 * P.bin is every sequence's token ids back to back. P.idx ("MMIDIDX" format, little-endian) is:
 *   magic "MMIDIDX\0\0" (9 bytes) | version u64 = 1 | dtype code u8 (1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64,
 *   7 f64, 8 u16) | n sequences u64 | n doc_idx entries u64 (= documents + 1) | sizes i32[n] | pointers i64[n]
 *   (byte offset of each sequence in P.bin) | doc_idx i64[documents + 1] (first sequence of each document, then n).
 * llm4d writes one sequence per document (no sentence splitting, as for GPT), ids as uint16 when the vocabulary
 * has fewer than 65500 entries (Megatron's best_fitting_dtype), else int32. The reader maps P.bin (never reads
 * it whole) and treats each sequence as a document, as Megatron's GPT dataset does. */
#ifndef LLM4D_DATA_MEGATRON_H
#define LLM4D_DATA_MEGATRON_H

#include <stdint.h>
#include <stdio.h>

#include "core/error.h"
#include "data/corpus.h"

typedef struct {
    char bin_path[1100], idx_path[1100]; /* final names */
    char bin_tmp[1120], idx_tmp[1120];   /* written here, renamed at finish */
    FILE *bin;
    llm4d_dtype dtype; /* LLM4D_DT_U16 or LLM4D_DT_I32 */
    int32_t *sizes;
    int64_t n, cap;
    void *stage; /* conversion buffer for one document */
    size_t stage_cap;
} llm4d_megatron_writer;

/* Start writing P.bin / P.idx (to temporary names). dtype: LLM4D_DT_U16 or LLM4D_DT_I32. */
llm4d_code llm4d_megatron_writer_open(llm4d_megatron_writer *w, const char *prefix, llm4d_dtype dtype,
                                      llm4d_err *err);
/* Append one document of n ids (each must fit the dtype). */
llm4d_code llm4d_megatron_writer_add(llm4d_megatron_writer *w, const int32_t *ids, int64_t n, llm4d_err *err);
/* Write the index, flush both files to disk and rename them to their final names (P.idx last). On failure the
 * temporaries are removed. */
llm4d_code llm4d_megatron_writer_finish(llm4d_megatron_writer *w, llm4d_err *err);
/* Drop everything written (after an error elsewhere); safe after finish and on a zeroed writer. */
void llm4d_megatron_writer_abort(llm4d_megatron_writer *w);

/* Open a Megatron pair as a corpus. path may be the prefix P, P.bin or P.idx. The .bin stays memory-mapped;
 * corrupt, truncated or mismatched files and an unknown version or dtype are user errors naming the file. */
llm4d_code llm4d_corpus_open_megatron(llm4d_corpus *c, const char *path, llm4d_err *err);

#endif
