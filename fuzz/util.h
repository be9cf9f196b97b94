/* util.h — what the libFuzzer harnesses of fuzz/ share.
 *
 * Most of llm4d's parsers read files by path (a YAML file and its `_base_`, an npz archive, a Megatron pair, a
 * checkpoint directory), so a harness turns one fuzz input into a few files in a scratch directory and calls the
 * parser on them. One input holds several files separated by the line FZ_SEP; the seed corpora (fuzz/corpus/<name>)
 * and the dictionary (fuzz/fuzz.dict) contain it, so mutations keep the files apart.
 *
 * libFuzzer calls LLVMFuzzerTestOneInput(data, size) with no context argument, so the scratch directory is the one
 * piece of process-wide state here: created on first use under $TMPDIR (or /tmp), emptied before every input and
 * removed at exit. The harnesses are test programs; the library they drive keeps no such state. */
#ifndef LLM4D_FUZZ_UTIL_H
#define LLM4D_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "data/corpus.h"

#define FZ_SEP "\n--8<--\n"
#define FZ_MAX_PARTS 8

typedef struct {
    const uint8_t *p;
    size_t n;
} fz_part;

/* Split data at every FZ_SEP into at most max parts (the last part takes the rest); returns the count (>= 1). */
int fz_split(const uint8_t *data, size_t size, fz_part *parts, int max);

/* The scratch directory, emptied (every file and subdirectory removed): call once at the start of each input. */
const char *fz_fresh_dir(void);

/* Write n bytes to <scratch>/<rel> (creating parent directories); the full path goes to path (cap bytes).
 * Aborts on an I/O error: a harness that cannot write its own scratch files must not report "no crash". */
void fz_write(const char *rel, const void *p, size_t n, char *path, size_t cap);

/* Touch every byte of [p, p + n) so the sanitizers check that the whole range a parser handed out is readable;
 * returns a value the caller must use (so the reads are not optimised away). */
unsigned fz_touch(const void *p, size_t n);

/* A directory of the repository (fuzz/vocab, ...) at run time: $LLM4D_SRC_DIR/<rel>, else the source directory
 * the harness was built from. */
const char *fz_src_path(const char *rel, char *buf, size_t cap);

/* A parser refused its input: rc must be LLM4D_EUSER (bad input) with a one-line message, anything else (an
 * internal error, I/O error, an empty or multi-line message) is a finding. With FZ_VERBOSE=1 in the environment the
 * message is printed, to see why a seed is refused. */
void fz_refused(const char *what, llm4d_code rc, const llm4d_err *err);

/* Abort with a message: a property the harness checks does not hold (libFuzzer records the input). */
void fz_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* Read a corpus's tokens (the first 2^20, in windows of 4096) and check its document index against the token
 * count and every token against max_id: the property of the token-file harnesses (npz, Megatron). */
void fz_walk_corpus(const llm4d_corpus *c);

#endif
