/* host.h — what the CPU backends (cpu, ref, and guard through cpu) share because their device IS the host: the
 * memory spaces, copies, streams and events of backend.h's contract in their trivial form, the host's memory for
 * the memory plan, and the operations whose one implementation serves every CPU backend (initial weights, the
 * key/value-cache attention of generation, sampling). Private to src/backend. */
#ifndef LLM4D_BACKEND_HOST_H
#define LLM4D_BACKEND_HOST_H

#include "backend/backend.h"

/* Fill the entries above into a table whose kernels run on the host: alloc_host, free_host, mem_info, copy_async,
 * copy_2d, the events and streams, sumsq_many and dot_acc (through the table's own sumsq and dot), init_param,
 * attention_cached, sample; and mark it host_addressable. The table's alloc, free, zero, copy stay its own. */
void llm4d_host_install(llm4d_backend *be);

/* The host's memory: MemAvailable (or what the cgroup's limit leaves, if less) and MemTotal; 0 when unknown. */
void llm4d_host_mem_info(size_t *free_bytes, size_t *total_bytes);

/* host_ops.c and host_sample.c: the operations, with the table's signatures */
void llm4d_host_init_param(llm4d_backend *be, float *dst, const llm4d_init_spec *spec, int64_t j0, int64_t j1);
void llm4d_host_attention_cached(llm4d_backend *be, float *out, const float *qkv, const float *kc, const float *vc,
                                 int n, int p0, int NH, int NKV, int HS, float *scores, int ld);
int32_t llm4d_host_sample(llm4d_backend *be, const float *logits, int V, const llm4d_sampling *s, uint64_t j,
                          void *scratch);

#endif
