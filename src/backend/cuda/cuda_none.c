/* cuda_none.c — the CUDA backend's entry points in a build without CUDA (CMake's LLM4D_CUDA OFF, the default, or
 * AUTO with no nvcc found):
 * asking for the device is a user error that says how to get it, and cuda_api.h's questions answer "not CUDA". */
#include "backend/backend.h"
#include "backend/cuda/cuda_api.h"

llm4d_code llm4d_backend_cuda_create(llm4d_backend **out, int host_rank, llm4d_err *err) {
    (void)host_rank;
    *out = NULL;
    return llm4d_fail(err, LLM4D_EUSER, "--device cuda: this build of llm4d has no CUDA backend; configure it with "
                      "-DLLM4D_CUDA=ON (needs the CUDA toolkit: README, \"The CUDA backend\") or use --device cpu");
}

int llm4d_cuda_is(const llm4d_backend *be) {
    (void)be;
    return 0;
}

void *llm4d_cuda_stream(llm4d_backend *be, llm4d_stream s) {
    (void)be, (void)s;
    return NULL;
}

void *llm4d_cuda_event_handle(const llm4d_event *ev) {
    (void)ev;
    return NULL;
}

int llm4d_cuda_device_id(llm4d_backend *be, char *id, size_t n) {
    (void)be, (void)id, (void)n;
    return 0;
}

void llm4d_cuda_set_attention_portable(llm4d_backend *be, int on) { (void)be, (void)on; }
