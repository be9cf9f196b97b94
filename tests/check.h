/* check.h — the tally shared by the C tests: one line per check ("ok   ..." or "FAIL ..."), then the closing line
 * `N passed, N failed` that ctest's log and CI read, and the exit status. Header-only (static inline) because every
 * tests/test_*.c is its own executable. */
#ifndef LLM4D_TESTS_CHECK_H
#define LLM4D_TESTS_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int check_passed, check_failed;

static inline void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void check(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok)
        check_passed++;
    else
        check_failed++;
}

/* Print the closing line; the process's exit status (non-zero when any check failed). */
static inline int check_summary(void) {
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}

/* n zeroed floats (at least one), or exit: tests have no use for an allocation failure beyond saying so */
static inline float *falloc(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

#endif
