/* backend_pair.h — the fast CPU backend and the reference backend its kernels are checked against, opened together by
 * the kernel tests. Header-only (static inline), as check.h: every tests/test_*.c is its own executable. */
#ifndef LLM4D_TESTS_BACKEND_PAIR_H
#define LLM4D_TESTS_BACKEND_PAIR_H

#include <stdio.h>

#include "backend/backend.h"

/* Both backends, or 0 after the closing line of a run that could not start (the test then returns 1). */
static inline int backend_pair_open(llm4d_backend **cpu, llm4d_backend **ref) {
    llm4d_err err = {0};
    if (llm4d_backend_cpu_create(cpu, 0, &err) != LLM4D_OK || llm4d_backend_ref_create(ref, &err) != LLM4D_OK) {
        printf("FAIL - backend creation: %s\n0 passed, 1 failed\n", err.msg);
        return 0;
    }
    printf("# cpu backend, %d threads\n", (*cpu)->nthreads);
    return 1;
}

#endif
