/* error.c — filling llm4d_err messages and failing internal assertions (see error.h). */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

llm4d_code llm4d_fail(llm4d_err *err, llm4d_code code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
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
