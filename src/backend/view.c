/* view.c — host views of device memory (see view.h). */
#include "backend/view.h"

#include <string.h>

llm4d_code llm4d_view_open(llm4d_view *v, llm4d_backend *be, llm4d_mem *mem, void *dev, size_t bytes, int mode,
                           llm4d_err *err) {
    *v = (llm4d_view){.dev = dev, .bytes = bytes, .mode = mode};
    if (!dev || !bytes) return LLM4D_OK;
    if (be->host_addressable) {
        be->stream_sync(be, LLM4D_STREAM_COMPUTE); /* the kernels writing it have run */
        v->host = dev;
        return LLM4D_OK;
    }
    v->host = be->alloc_host(be, mem, LLM4D_MEM_WORKSPACE, bytes);
    if (!v->host)
        return llm4d_fail(err, LLM4D_ENOMEM, "out of host memory staging %zu bytes of device memory", bytes);
    v->staged = 1;
    if (mode & LLM4D_VIEW_READ) {
        be->copy_async(be, v->host, dev, bytes, LLM4D_D2H, LLM4D_STREAM_COMPUTE);
        be->stream_sync(be, LLM4D_STREAM_COMPUTE);
    }
    return LLM4D_OK;
}

void llm4d_view_close(llm4d_view *v, llm4d_backend *be, llm4d_mem *mem) {
    if (v->staged) {
        if (v->mode & LLM4D_VIEW_WRITE) {
            be->copy_async(be, v->dev, v->host, v->bytes, LLM4D_H2D, LLM4D_STREAM_COMPUTE);
            be->stream_sync(be, LLM4D_STREAM_COMPUTE);
        }
        be->free_host(be, mem, LLM4D_MEM_WORKSPACE, v->host, v->bytes);
    }
    memset(v, 0, sizeof *v);
}
