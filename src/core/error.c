/* error.c — filling llm4d_err messages and failing internal assertions (see error.h).
 *
 * Messages quote what the user gave (a YAML key, a tensor name, a token from encoder.json, bytes of a header), and
 * a bad file can hold anything there: a newline would break the promise of one line per error, an escape sequence
 * would reach the terminal. So every control character that ends up in a message is replaced by '?', here, once,
 * rather than at each of the places that quote input (the fuzzers found several). */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Control characters (C0 and DEL) become '?': a message is one line of printable text. */
static void one_line(char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) *s = '?';
}

llm4d_code llm4d_fail(llm4d_err *err, llm4d_code code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        one_line(err->msg);
        err->code = code;
    }
    return code;
}

llm4d_code llm4d_wrap(llm4d_err *err, const char *fmt, ...) {
    if (!err) return LLM4D_EINTERNAL;
    char prefix[512], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* prefix, ": ", then as much of the old message as fits */
    size_t np = strnlen(prefix, sizeof prefix), no = strnlen(old, sizeof old - 1);
    size_t cap = sizeof err->msg - 1, k = 0;
    for (size_t i = 0; i < np && k < cap; i++) err->msg[k++] = prefix[i];
    for (const char *s = ": "; *s && k < cap; s++) err->msg[k++] = *s;
    for (size_t i = 0; i < no && k < cap; i++) err->msg[k++] = old[i];
    err->msg[k] = 0;
    one_line(err->msg);
    return err->code;
}

void llm4d_assert_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
    fprintf(stderr, "llm4d internal error at %s:%d: assertion `%s` failed: ", file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}
