/* view.h — a host view of device memory: how code outside src/backend reads or writes a tensor with the CPU
 * (checkpoints, hashes, debug dumps). Where the backend's device memory is host memory (host_addressable) the view
 * is the tensor itself and costs nothing; elsewhere it is a pinned copy, filled from the device when opened for
 * reading and copied back when a view opened for writing is closed. Every host access to a tensor goes through one
 * of these (or through an explicit copy), which is what the guard backend checks. */
#ifndef LLM4D_BACKEND_VIEW_H
#define LLM4D_BACKEND_VIEW_H

#include "backend/backend.h"

enum { LLM4D_VIEW_READ = 1, LLM4D_VIEW_WRITE = 2 };

typedef struct {
    void *host;          /* what the host reads or writes (NULL: an empty view) */
    void *dev;           /* the device memory viewed */
    size_t bytes;
    int mode;            /* LLM4D_VIEW_READ | LLM4D_VIEW_WRITE */
    int staged;          /* host is a pinned copy */
} llm4d_view;

/* A view of bytes at dev (dev NULL or bytes 0: an empty view). Staging buffers are accounted under
 * LLM4D_MEM_WORKSPACE; out of memory is an error. */
llm4d_code llm4d_view_open(llm4d_view *v, llm4d_backend *be, llm4d_mem *mem, void *dev, size_t bytes, int mode,
                           llm4d_err *err);
/* Copies a written view back and frees the staging; the view is empty afterwards. */
void llm4d_view_close(llm4d_view *v, llm4d_backend *be, llm4d_mem *mem);

#endif
