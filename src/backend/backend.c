/* backend.c — choosing the backend a run names (backend.h llm4d_backend_create): the one place that maps a device
 * name to a table (the names themselves: core/devname.h), so the trainer and the generate verb accept the same names
 * and refuse the others alike. */
#include "backend/backend.h"

#include <string.h>

#include "core/devname.h"

int llm4d_backend_has_host(const char *device) { return !strcmp(device, "guard"); }

int llm4d_backend_host_addressable(const char *device) { return !strcmp(device, "cpu"); }

llm4d_code llm4d_backend_create(llm4d_backend **out, const llm4d_backend_opts *o, llm4d_err *err) {
    const char *device = o->device;
    const int ref = o->ref, nthreads = o->nthreads;
    *out = NULL;
    if (!strcmp(device, "cpu"))
        return ref ? llm4d_backend_ref_create(out, err) : llm4d_backend_cpu_create(out, nthreads, err);
    if (!strcmp(device, "guard")) {
        if (ref)
            return llm4d_fail(err, LLM4D_EUSER, "--device guard runs the cpu backend's kernels; drop --backend ref");
        return llm4d_backend_guard_create(out, nthreads, err);
    }
    if (!strcmp(device, "cuda") || !strcmp(device, "gpu")) {
        if (ref)
            return llm4d_fail(err, LLM4D_EUSER, "--backend ref runs on the CPU; drop it or use --device cpu");
        return llm4d_backend_cuda_create(out, o->host_rank, err);
    }
    return llm4d_fail(err, LLM4D_EUSER, "--device %s: the devices are " LLM4D_DEVICE_NAMES "; use --device cpu",
                      device);
}
