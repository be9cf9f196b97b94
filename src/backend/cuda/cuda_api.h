/* cuda_api.h — what code outside the CUDA backend may ask of it, in C, in every build.
 *
 * The communicator's NCCL path (comm/comm_nccl.c) runs its operations on the backend's communication stream and
 * must know which physical GPU each rank has; tests choose the portable attention kernels. A build without CUDA
 * links backend/cuda/cuda_none.c instead, whose answers say "not a CUDA backend", so callers need no #ifdef. */
#ifndef LLM4D_BACKEND_CUDA_API_H
#define LLM4D_BACKEND_CUDA_API_H

#include <stddef.h>

#include "backend/backend.h"

/* Whether be is the CUDA backend. */
int llm4d_cuda_is(const llm4d_backend *be);
/* The cudaStream_t of stream s of a CUDA backend (NULL otherwise). */
void *llm4d_cuda_stream(llm4d_backend *be, llm4d_stream s);
/* The cudaEvent_t of an event of a CUDA backend (NULL otherwise). */
void *llm4d_cuda_event_handle(const llm4d_event *ev);
/* Writes the PCI location of the backend's GPU ("0000:1b:00") into id and returns 1; 0 when be is not CUDA. */
int llm4d_cuda_device_id(llm4d_backend *be, char *id, size_t n);
/* on: the attention runs its portable (fp32 SIMT) kernels even where the tensor-core kernels could (tests). */
void llm4d_cuda_set_attention_portable(llm4d_backend *be, int on);

#endif
