/* prepare.h — turn raw text into a tokenized training corpus (`llm4d prepare-data`).
 *
 * Input: JSON lines (the text under a key, as PaddleNLP's preprocess_data.py and Megatron's preprocess_data.py
 * read them) or plain text (one document per line, or documents separated by blank lines), plain or gzip'ed.
 * Each document is `.strip()`ped as Paddle's script does, empty documents are dropped, the rest are GPT-2
 * tokenized in parallel (order preserved) and, with append_eos, ended with the end-of-text token (<|endoftext|>,
 * or a tokenizer.json's: data/tokenizer.h).
 * Output: Paddle's `P_ids.npz` (arrays ids uint16 and lens int32) or Megatron's `P.bin` + `P.idx`. Nothing
 * appears under the final names unless the whole run succeeds. Bad input (invalid UTF-8 or JSON, a missing key,
 * an empty corpus) is a user error naming the file and line. */
#ifndef LLM4D_DATA_PREPARE_H
#define LLM4D_DATA_PREPARE_H

#include <stdint.h>
#include <stdio.h>

#include "core/error.h"

typedef enum { LLM4D_PREP_NPZ = 0, LLM4D_PREP_MMAP } llm4d_prep_format;
typedef enum { LLM4D_PREP_AUTO = 0, LLM4D_PREP_JSONL, LLM4D_PREP_TEXT } llm4d_prep_input;

typedef struct {
    const char *const *inputs; /* files (plain or .gz) or directories (their regular files, sorted) */
    int n_inputs;
    llm4d_prep_input input_kind; /* AUTO: .jsonl/.json (optionally .gz) are JSON lines, anything else text */
    const char *json_key;        /* "text" */
    int split_on_blank_lines;    /* text input: documents are separated by blank lines instead of one per line */
    const char *output_prefix;   /* P: writes P_ids.npz or P.bin + P.idx */
    llm4d_prep_format format;
    int append_eos;
    int workers;               /* tokenizing threads; 0 = all cores */
    const char *vocab_dir;     /* directory of encoder.json and vocab.bpe, or a tokenizer.json (data/tokenizer.h) */
    FILE *progress;            /* a live progress line is drawn here when not NULL (a terminal) */
    size_t chunk_bytes;        /* text per parallel batch; 0 = 8 MB (tests use tiny chunks to cross boundaries) */
} llm4d_prep_opts;

typedef struct {
    int64_t n_docs;        /* documents written */
    int64_t n_empty;       /* documents dropped because empty after strip */
    int64_t n_tokens;      /* tokens written (EOS included) */
    int64_t bytes_in;      /* bytes of text read (after decompression) */
    double seconds;
    int workers;
    char outputs[2][1100]; /* the files written ("" for the second with npz) */
} llm4d_prep_stats;

llm4d_code llm4d_prepare(const llm4d_prep_opts *o, llm4d_prep_stats *st, llm4d_err *err);

#endif
