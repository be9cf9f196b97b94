/* error.h — how llm4d reports failure.
 *
 * Library functions that can fail return an llm4d_code and fill an llm4d_err with one human line that names the
 * problem and, for user errors, the fix (control characters quoted from input become '?', so it stays one line).
 * The message is printed once, at the edge (the CLI), which maps LLM4D_EUSER to exit code 2. Internal invariants
 * use LLM4D_ASSERT, which prints file:line and aborts: those are bugs in llm4d, never the user's fault. */
#ifndef LLM4D_CORE_ERROR_H
#define LLM4D_CORE_ERROR_H

#include <stddef.h>

typedef enum {
    LLM4D_OK = 0,
    LLM4D_EUSER = 2,     /* bad input: config, flags, data files, checkpoints. The CLI exits with 2. */
    LLM4D_EIO = 3,       /* the system refused (disk full, permission): also reported as exit 2 with the path */
    LLM4D_ENOMEM = 4,    /* an allocation failed */
    LLM4D_EINTERNAL = 5, /* a library we call failed in a way the user cannot fix */
    LLM4D_ETIMEOUT = 6,  /* a peer did not answer within the communication timeout (comm/watch.h) */
} llm4d_code;

typedef struct {
    llm4d_code code;
    char msg[1024];
} llm4d_err;

/* Fill err (if not NULL) with a printf-style message; returns code so callers can `return llm4d_fail(...)`. */
llm4d_code llm4d_fail(llm4d_err *err, llm4d_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prefix an existing message with context ("reading data/x.npz: ..."); returns err->code. */
llm4d_code llm4d_wrap(llm4d_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Propagate a failure: `LLM4D_TRY(f(...));` returns the code from the enclosing function when f fails. */
#define LLM4D_TRY(expr)                                                                                          \
    do {                                                                                                         \
        llm4d_code llm4d_try_rc_ = (expr);                                                                       \
        if (llm4d_try_rc_ != LLM4D_OK) return llm4d_try_rc_;                                                     \
    } while (0)

void llm4d_assert_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

/* An internal invariant; the message should show the values involved. */
#define LLM4D_ASSERT(cond, ...)                                                                                  \
    do {                                                                                                         \
        if (!(cond)) llm4d_assert_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                                   \
    } while (0)

#endif
