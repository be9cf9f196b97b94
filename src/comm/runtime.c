/* runtime.c — MPI or not, the world communicator, and ending a job on error (see runtime.h). */
#include "comm/runtime.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int llm4d_runtime_launched_by_mpi(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return 1;
    }
    return 0;
}

llm4d_code llm4d_runtime_init(llm4d_runtime *rt, int *argc, char ***argv, llm4d_err *err) {
    memset(rt, 0, sizeof *rt);
    if (!llm4d_runtime_launched_by_mpi()) {
        LLM4D_TRY(llm4d_comm_self_create("world", &rt->world, err));
        rt->world_size = 1;
        llm4d_watch_init(&rt->watch, 0, NULL, err);
        return llm4d_comm_watch_world(rt->world, &rt->watch, err);
    }
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return llm4d_fail(err, LLM4D_EINTERNAL, "MPI_Init_thread failed; check that mpirun and llm4d use the same "
                                                "MPI installation");
    rt->under_mpi = 1;
    rt->thread_level = provided;
    if (provided < MPI_THREAD_FUNNELED) {
        llm4d_runtime_finalize(rt);
        return llm4d_fail(err, LLM4D_EINTERNAL,
                          "MPI provides thread level %d, below MPI_THREAD_FUNNELED (%d) which llm4d's OpenMP "
                          "kernels need; use an MPI built with thread support",
                          provided, MPI_THREAD_FUNNELED);
    }
    llm4d_code rc = llm4d_comm_mpi_world(&rt->world, err);
    if (rc != LLM4D_OK) {
        llm4d_runtime_finalize(rt);
        return rc;
    }
    rt->world_size = rt->world->size;
    rt->rank = rt->world->rank;
    rc = llm4d_watch_init(&rt->watch, rt->rank, rt->world_size > 1 ? getenv("LLM4D_PROGRESS_DIR") : NULL, err);
    if (rc == LLM4D_OK) rc = llm4d_comm_watch_world(rt->world, &rt->watch, err);
    if (rc != LLM4D_OK) llm4d_runtime_finalize(rt);
    return rc;
}

void llm4d_runtime_finalize(llm4d_runtime *rt) {
    llm4d_comm_destroy(rt->world);
    rt->world = NULL;
    llm4d_watch_free(&rt->watch);
    if (rt->under_mpi) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
        rt->under_mpi = 0;
    }
}

int llm4d_exit_code(llm4d_code code) {
    if (code == LLM4D_OK) return 0;
    return code == LLM4D_EUSER || code == LLM4D_EIO ? 2 : 1; /* a timed-out peer (LLM4D_ETIMEOUT) is not the input's fault */
}

int llm4d_runtime_fail(llm4d_runtime *rt, const char *verb, const llm4d_err *err) {
    int code = llm4d_exit_code(err->code);
    if (code == 0) code = 1; /* failing with "OK" is a caller bug; still fail */
    fflush(stdout);
    if (rt && rt->world_size > 1) fprintf(stderr, "llm4d: rank %d: %s\n", rt->rank, err->msg);
    else if (verb) fprintf(stderr, "llm4d %s: %s\n", verb, err->msg);
    else fprintf(stderr, "llm4d: %s\n", err->msg);
    fflush(stderr);
    if (rt && rt->world && rt->world_size > 1) llm4d_comm_abort(rt->world, code);
    if (rt) llm4d_runtime_finalize(rt);
    return code;
}
