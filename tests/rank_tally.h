/* rank_tally.h — the tally of the C tests that run as several MPI ranks (test_comm_mpi, test_comm_shm): rank 0
 * prints one line per check, the other ranks only their failures, so a job's output reads like one process's; the
 * caller sums pass and fail over the world before printing the closing `N passed, N failed` line. must() ends the
 * rank on an error the test did not expect. */
#ifndef LLM4D_TESTS_RANK_TALLY_H
#define LLM4D_TESTS_RANK_TALLY_H

#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"

typedef struct {
    int rank;
    int pass, fail;
} rank_tally;

static inline void rank_check(rank_tally *t, int ok, const char *what) {
    if (ok) t->pass++;
    else t->fail++;
    if (t->rank == 0) printf("%s: %s\n", ok ? "ok" : "FAIL", what);
    else if (!ok) printf("rank %d FAIL: %s\n", t->rank, what);
    fflush(stdout);
}

static inline void must(llm4d_code rc, const llm4d_err *err) {
    if (rc != LLM4D_OK) {
        fprintf(stderr, "llm4d error: %s\n", err->msg);
        exit(1);
    }
}

#endif
