/* tally.h — the pass/fail tally of the C tests that hand it down explicitly (check.h keeps one per executable
 * instead): one line per check, "PASS what" or "FAIL what: detail", flushed at once so that the lines of forked
 * children and parents interleave in order; and the closing line `N passed, N failed` that CI reads. */
#ifndef LLM4D_TESTS_TALLY_H
#define LLM4D_TESTS_TALLY_H

#include <stdio.h>

typedef struct {
    int pass, fail;
} tally;

static inline void check(tally *t, int ok, const char *what, const char *detail) {
    if (ok)
        t->pass++;
    else
        t->fail++;
    printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", what, detail && *detail ? ": " : "", detail ? detail : "");
    fflush(stdout);
}

/* Print the closing line; the process's exit status (non-zero when any check failed). */
static inline int tally_summary(const tally *t) {
    printf("%d passed, %d failed\n", t->pass, t->fail);
    return t->fail != 0;
}

#endif
