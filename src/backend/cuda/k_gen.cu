// k_gen.cu — generation's attention over the key/value cache on the GPU (backend.h attention_cached), and the probe
// that tells whether this build's kernels run on the device at all.
//
// A block per (new row, query head h): its scores over the cache rows 0 .. p0 + i of key/value head h / (NH / NKV)
// (grouped-query attention; NKV == NH: head h) into the caller's scratch, their maximum and sum by the block in a
// fixed tree, then each output dimension summed over the rows in order, as the CPU backend's loop (host_ops.c) sums
// them. Generation runs one token at a time, so this is small work; what matters is that it reads the cache where
// it lives.
#include "backend/cuda/k_common.cuh"

using namespace llm4d_k;

namespace {

__global__ void __launch_bounds__(kThreads) attention_cached_k(float *out, const float *qkv, const float *kc,
                                                               const float *vc, int p0, int NH, int NKV,
                                                               int HS, float *scores, int ld) {
    __shared__ float shf[kThreads];
    __shared__ double shd[kThreads];
    const int r = blockIdx.x, i = r / NH, h = r % NH, last = p0 + i, C = NH * HS;
    const int KV = NKV * HS, hk = h / (NH / NKV);
    const float scale = 1.0f / sqrtf((float)HS);
    const float *q = qkv + (size_t)i * (C + 2 * KV) + h * HS;
    float *s = scores + (size_t)r * ld;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j <= last; j += kThreads) {
        const float *k = kc + (size_t)j * KV + hk * HS;
        float dot = 0.0f;
        for (int d = 0; d < HS; d++) dot += q[d] * k[d];
        s[j] = dot * scale;
        mx = fmaxf(mx, s[j]);
    }
    mx = block_max(mx, shf);
    float sum = 0.0f;
    for (int j = threadIdx.x; j <= last; j += kThreads) {
        s[j] = expf(s[j] - mx);
        sum += s[j];
    }
    const float inv = 1.0f / (float)block_sum((double)sum, shd); // also orders the writes of s before the reads
    float *o = out + (size_t)i * C + h * HS;
    for (int d = threadIdx.x; d < HS; d += kThreads) {
        float acc = 0.0f;
        for (int j = 0; j <= last; j++) acc += s[j] * inv * vc[(size_t)j * KV + hk * HS + d];
        o[d] = acc;
    }
}

__global__ void probe_k(int *x) {
    if (x) *x = 1;
}

} // namespace

extern "C" {

void llm4d_k_attention_cached(cudaStream_t s, float *out, const float *qkv, const float *kc, const float *vc, int n,
                              int p0, int NH, int NKV, int HS, float *scores, int ld) {
    if (n > 0 && NH > 0)
        attention_cached_k<<<n * NH, kThreads, 0, s>>>(out, qkv, kc, vc, p0, NH, NKV, HS, scores, ld);
}

cudaError_t llm4d_k_probe(void) {
    cudaFuncAttributes a;
    return cudaFuncGetAttributes(&a, probe_k);
}

} // extern "C"
