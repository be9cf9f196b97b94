/* backend.h — the kernel method table, and the contract between the backend and everything above it.
 *
 * The model never calls oneDNN, OpenMP or cuBLAS directly: it calls `be->op(be, ...)` on a table of function
 * pointers with an opaque context (ggml style). The tables: `cpu` (oneDNN matmul + OpenMP kernels, the fast path),
 * `ref` (plain loops, written for obviousness, the oracle every fast kernel is tested against) and `guard` (cpu's
 * kernels on memory the host cannot touch outside backend calls: the proof of the contract below, backend/guard.c).
 * `cuda` (backend/cuda/) implements the same operations on a GPU's memory.
 * The methods are listed once, in backend/methods.h: the struct below, the guard's forwarding and the planner's
 * recording backend (plan/record.c) are made from that list, so a new method is an entry there and its real
 * implementations (cpu, ref, cuda).
 *
 * THE CONTRACT
 * Memory. `alloc` returns DEVICE memory: every tensor (parameters, gradients, optimizer states, activations,
 *   communication buffers, batches once uploaded) lives there. `alloc_host` returns PINNED HOST memory: the host
 *   may read and write it, asynchronous copies may use it, kernels may read and write it (zero-copy; slow on a
 *   device across a bus, used for offloaded optimizer states and staging). Every pointer a kernel or a copy receives
 *   is one of the two, except the host side of a copy (below). Nothing outside src/backend reads or writes device
 *   memory with the CPU: it copies to or from host memory, or asks for a host view (backend/view.h), which is the
 *   tensor itself when `host_addressable` is set (cpu, ref: device memory is host memory) and a staged copy
 *   otherwise (guard, CUDA).
 * Streams and order. Work goes to a stream (LLM4D_STREAM_COMPUTE: every kernel; LLM4D_STREAM_COMM: the
 *   communicator's copies) and runs in the order given there; the two streams are independent. Every kernel
 *   method is enqueued on COMPUTE and may return before it has run (asynchronous). Methods returning a value to the
 *   host (dot, sumsq, sumsq_many, sample) wait for the work before them on COMPUTE and for their own. Events order
 *   the streams: event_record marks the point reached on a stream, stream_wait makes a stream wait for an event,
 *   event_sync and stream_sync make the host wait. Whoever hands a buffer from one stream to the other records and
 *   waits: the model records the event of a gradient's last kernel and gives it to the engines with grads_done; the
 *   communicator's data plane (comm/comm.h) has finished its copies back to the device before it returns a
 *   received buffer (a blocking call returns, or test/wait reports the operation complete).
 * Copies. copy is device to device on COMPUTE. copy_async / copy_2d take a kind: H2D, D2H, D2D. The host side of
 *   an H2D or D2H copy may be pinned (then the copy is asynchronous: the host must not touch that memory until
 *   an event recorded after the copy has completed) or ordinary host memory (then the call returns once the host
 *   memory may be reused, H2D, or holds the data, D2H: synchronous, as CUDA's pageable copies are).
 * Write or add. Forward kernels overwrite their outputs. A gradient is written where nothing else contributes to
 *   it and added to where several things do: gelu_backward, attention_backward and dropout_add_backward write; the
 *   linear layers' input gradient is written or added as the caller says (llm4d_store); the weight, bias,
 *   LayerNorm and embedding gradients, dropout_backward's input gradient and layernorm_backward's input gradient
 *   add (+=) (micro-batches, vocabulary blocks and the residual stream accumulate into them); the caller zeroes a
 *   gradient buffer when a new accumulation starts. Each method's comment (methods.h) says which.
 *
 * Types. Activations and their gradients are typed tensors (tensor.h: fp32, bf16 or fp16, said per argument);
 *   everything else a kernel touches is fp32. A kernel rounds a typed result once, when it stores it.
 * Conventions (llm.c's): outputs first, then inputs, then sizes. Shapes are row-major; a weight of a linear layer
 * is [OC, C] (out features, in features) and y = x W^T + b.
 *
 * Randomness (dropout) is a pure function of (seed, stream, global position) (core/rng.h). Kernels receive, per
 * batch row, the global index of its sample (`sample_ids`, device memory), so a mask does not depend on which rank
 * or thread computes it, and backward recomputes the mask instead of storing it. Initial weights are the same kind
 * of function (init_param), so every backend and every layout draws the same numbers.
 *
 * Parallelism needs the kernels to work on slices: an activation of a micro-batch is [N, C] tokens, possibly a
 * contiguous run of the flattened [B*T] tokens (sequence parallel splits them over the tensor-parallel ranks), so
 * the dropouts take the run's first token (`tok0`); the embedding and the cross-entropy take a range of vocabulary
 * rows (vocabulary-parallel embedding and LM head, and ZeRO's vocabulary blocks); linear_backward computes the input
 * gradient and the weight gradient independently (pipeline zero-bubble schedules run them at different times). */
#ifndef LLM4D_BACKEND_BACKEND_H
#define LLM4D_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/mem.h"
#include "backend/methods.h"
#include "backend/tensor.h"

/* Where a dropout's random numbers come from. p == 0 disables the dropout (no random numbers are drawn).
 * Element (n, c) of an [N, C] activation is token tok0 + n of the micro-batch's flattened [B*T] tokens, i.e. batch
 * row b = (tok0 + n) / T at position t = (tok0 + n) % T; its global position is (sample_ids[b] * T + t) * C + c. */
typedef struct {
    float p;                    /* drop probability; kept values are scaled by 1/(1-p) ("upscale_in_train") */
    uint64_t seed;
    uint64_t stream;            /* llm4d_rng_stream(LLM4D_RNG_DROPOUT, layer, site, step) */
    const int64_t *sample_ids;  /* [B] global sample index of each batch row */
    int T;                      /* sequence length (tokens per batch row) */
    int64_t tok0;               /* first token of the activation in the flattened micro-batch */
    /* The attention's dropout only, may be NULL: [B][NH][T][LLM4D_MASK_WORDS(T)] words in which attention_forward
     * stores the mask it draws, bit t2 % 32 of word t2 / 32 of row (b, h, t1) set where probability (t1, t2) is
     * kept (t2 <= t1; the other bits are unspecified), and from which attention_backward reads it back instead of
     * drawing it again. A backend may ignore it (draw the mask in backward too): the bits are the same draws. */
    uint32_t *bits;
} llm4d_dropout;

/* Words of one attention row's mask bits (llm4d_dropout.bits). */
#define LLM4D_MASK_WORDS(T) (((size_t)(T) + 31) / 32)

/* Attention geometry: the local heads are heads [head0, head0 + NH) of NH_total (tensor parallel splits heads).
 * Grouped-query attention (Llama 2 70B, Llama 3): NKV key/value heads, query head h reading kv head h / (NH / NKV)
 * (Hugging Face's repeat_kv; NKV = 1 is multi-query attention). NKV = 0 means NH (multi-head attention), so every
 * caller that leaves it out keeps GPT-2's attention. head0 and NH_total count query heads: a head's dropout
 * positions are its query head's. */
typedef struct {
    int B, T;       /* batch rows, sequence length */
    int NH;         /* local query heads */
    int HS;         /* head size */
    int head0;      /* global index of the first local head */
    int NH_total;   /* heads of the whole model */
    int NKV;        /* local key/value heads, dividing NH; 0: NH */
} llm4d_attn_shape;

/* The local key/value heads of s (llm4d_attn_shape.NKV, 0 read as NH). */
static inline int llm4d_attn_nkv(llm4d_attn_shape s) { return s.NKV > 0 ? s.NKV : s.NH; }

/* Rotary position embedding geometry (rope_forward): N rows of a [B, T] micro-batch's tokens, row n being token
 * tok0 + n of the flattened micro-batch at position (tok0 + n) % T (position_forward's rule: a sequence-parallel or
 * pipeline slice passes its first token), each holding NH heads of HS values from its first element, rows ld
 * elements apart (ld >= NH x HS: the Q and K heads of a fused qkv row, the V heads after them left alone). */
typedef struct {
    int N;          /* rows */
    int NH, HS;     /* heads turned in each row, head size (even) */
    int ld;         /* elements from a row's first to the next's */
    int T;          /* sequence length */
    int64_t tok0;   /* the first row's token in the flattened micro-batch */
    float theta;    /* the frequencies' base: 10000 (Llama 1, 2), 500000 (Llama 3) */
} llm4d_rope_shape;

typedef struct llm4d_backend llm4d_backend;

/* The largest GEMM operands of a step, in elements (for the memory plan: operand_workspace). made: the largest a
 * backend may have to materialise itself in any precision (an activation applied to a layer's input, attention's
 * packed panels); read: the largest any GEMM reads (made, or the LM head's logits gradient), which a backend
 * converts when it is not stored in the GEMM's precision; rows, cols: no operand has more rows (tokens) or columns
 * (features, vocabulary entries) than these, which bounds what a backend that pads its operands' sides adds to them;
 * act: the type the step's activations are stored in (tensor.h), which decides what needs converting at all. */
typedef struct {
    size_t made, read;
    size_t rows, cols;
    llm4d_ftype act;
} llm4d_operand_sizes;

/* How a kernel stores a result: over what the output held, or added to it (a gradient with several parts). */
typedef enum { LLM4D_WRITE = 0, LLM4D_ADD } llm4d_store;

/* An element-wise activation a linear layer applies to its input as it reads it (linear_forward_act). */
typedef enum { LLM4D_ACT_NONE = 0, LLM4D_ACT_GELU } llm4d_act;

/* Kinds of work the backend's own timers tell apart (work_stats): where a step's time goes, measured by the
 * backend around its kernels (not by a profiler). Each kernel's time is counted once, in the innermost kind
 * (the operand conversions inside a linear layer count as LLM4D_WORK_CONVERT, not as its GEMM). */
typedef enum {
    LLM4D_WORK_GEMM = 0, /* the linear layers' and the LM head's GEMMs (bias and bias gradient included) */
    LLM4D_WORK_ATTN,     /* attention forward and backward: its block GEMMs, softmax, dropout */
    LLM4D_WORK_OPTIM,    /* the optimizer's passes: AdamW (with the gradient zeroing and the low-precision weight
                          * copies fused into its pass) and the gradient norm's sum of squares */
    LLM4D_WORK_LOSS,     /* the softmax cross-entropy */
    LLM4D_WORK_CONVERT,  /* conversions between types around a GEMM: operands not stored in the GEMM's precision
                          * (fp32 activations under O1, weights whose copy was stale, 16-bit ones widened for an
                          * fp32 GEMM) and outputs a GEMM could not write in their type; packing an operand that
                          * needs no conversion into the layout a kernel reads counts as the kernel's work; the
                          * attention's per-block conversions count as attention */
    LLM4D_WORK_ELEM,     /* every other kernel: embeddings, LayerNorm, GELU, dropout, zeroing, copies */
    LLM4D_WORK_N
} llm4d_work;

/* Cumulative since the backend's creation. */
typedef struct {
    double seconds[LLM4D_WORK_N];
    double calls[LLM4D_WORK_N];
    double optim_bytes; /* memory traffic the optimizer's passes need: every byte they must read or write once */
} llm4d_work_stats;

/* Names of the kinds ("gemm", "attention", ...), for logs and metrics. */
static inline const char *llm4d_work_name(int k) {
    static const char *const names[LLM4D_WORK_N] = {"gemm", "attention", "optimizer", "cross_entropy", "convert",
                                                    "elementwise"};
    return k >= 0 && k < LLM4D_WORK_N ? names[k] : "?";
}

/* Precision of the matmul operands (linear layers, attention GEMMs): what a GEMM multiplies, whatever type its
 * typed arguments are stored in (tensor.h). An fp32 activation is rounded to the precision as the GEMM reads it (O1,
 * Paddle's level: fp32 activations, 16-bit GEMM operands), a bf16 activation under bf16 is read as it is (O2: the
 * model keeps its activations in the precision's type). Accumulation, statistics and the loss stay fp32. */
typedef enum { LLM4D_PREC_FP32 = 0, LLM4D_PREC_BF16, LLM4D_PREC_FP16, LLM4D_PREC_TF32 } llm4d_precision;
/* LLM4D_PREC_TF32: fp32 operands multiplied by tensor cores with 10-bit significands (a GPU's format; the CPU
 * backends refuse it). */

/* The two streams every backend has (the contract above). */
typedef enum { LLM4D_STREAM_COMPUTE = 0, LLM4D_STREAM_COMM, LLM4D_NSTREAMS } llm4d_stream;

/* Which side of a copy is where: host to device, device to host, device to device. */
typedef enum { LLM4D_H2D = 0, LLM4D_D2H, LLM4D_D2D } llm4d_copy_kind;

/* A point on a stream (event_record); each backend defines what it holds. */
typedef struct llm4d_event llm4d_event;

/* How init_param draws one parameter entry (model/params.h): element j of the entry (a box of a global tensor,
 * row-major, `cols` columns) is global element g = (off0 + j / cols) * gcols + off1 + j % cols; its value is
 * std * N(0, 1) from Philox (seed, stream, g) for g < real and 0 beyond (the embedding's padding rows), or `value`
 * for every element when std == 0 (LayerNorm weights 1, biases 0). */
typedef struct {
    float std, value;
    uint64_t seed, stream;
    int64_t off0, off1, cols, gcols, real;
} llm4d_init_spec;

/* How sample draws a token (model/generate.h has the rules): temperature 0 (or top_k 1) is greedy, else the logits
 * over the temperature, cut to the top_k largest (0: no cut) and to the smallest most probable set reaching top_p
 * (1: no cut); the draw is Philox (seed, LLM4D_RNG_SAMPLE) at counter j. */
typedef struct {
    float temperature;
    int top_k;
    float top_p;
    uint64_t seed;
} llm4d_sampling;

/* Bytes of device scratch sample needs for a vocabulary of V: a (logit, id) candidate and a probability per id. */
#define LLM4D_SAMPLE_SCRATCH(V) ((size_t)(V) * 16)

struct llm4d_backend {
    const char *name;   /* "cpu", "ref", "guard", "cuda" */
    void *ctx;
    int nthreads;

    int host_addressable; /* 1: device memory is host memory (a host view is the tensor itself) */
    /* The devices the processes on this host are spread over (local rank r takes device r mod ndevices), which
     * the memory plan divides the ranks by to know how many share this device's memory; 0: the device is the
     * host's memory, shared by every rank on the host. */
    int ndevices;
    /* The backend whose kernels run with the host's CPUs on pinned host memory (alloc_host's), owned by this one:
     * where an optimizer over host-resident states runs (ZeRO-Offload's CPU Adam: gradients staged device to host,
     * AdamW on the host, parameters staged back). It never receives device memory. NULL: this backend itself
     * (device memory is host memory, or kernels read pinned memory in place). */
    llm4d_backend *host;

    /* The methods, one function pointer each, as backend/methods.h lists them (with what each does). */
#define LLM4D_METHOD_FIELD(shape, name, params, ...) LLM4D_RT_##shape(*name) params;
    LLM4D_BACKEND_METHODS(LLM4D_METHOD_FIELD)
#undef LLM4D_METHOD_FIELD
};

#ifndef __cplusplus
/* The struct is its six fields above and the list's methods, nothing else: a function pointer added by hand would
 * be a method the guard and the recorder do not have (a field that is not a method is added to this count). */
#define LLM4D_METHOD_ONE(...) +1
_Static_assert(sizeof(struct llm4d_backend) ==
                   offsetof(struct llm4d_backend, host) + sizeof(llm4d_backend *) +
                       (0 LLM4D_BACKEND_METHODS(LLM4D_METHOD_ONE)) * sizeof(void (*)(void)),
               "struct llm4d_backend holds a method that is not in backend/methods.h");
#undef LLM4D_METHOD_ONE
#endif

/* nthreads <= 0: all cores (OMP default). The fast CPU backend; fills err on failure (no oneDNN engine, ...). */
llm4d_code llm4d_backend_cpu_create(llm4d_backend **out, int nthreads, llm4d_err *err);
/* The naive reference backend: plain loops, the oracle for tests. */
llm4d_code llm4d_backend_ref_create(llm4d_backend **out, llm4d_err *err);
/* The guard backend (backend/guard.c): the cpu backend's kernels on device memory the host cannot touch outside
 * backend calls, so that any host access to a tensor crashes with a stack. */
llm4d_code llm4d_backend_guard_create(llm4d_backend **out, int nthreads, llm4d_err *err);
/* The CUDA backend (backend/cuda/): kernels and cuBLASLt GEMMs on the GPU this process is given (host_rank, its
 * index among the ranks on its host, modulo the GPUs it sees). A build without CUDA, or a machine without a usable
 * GPU, is a user error saying so. */
llm4d_code llm4d_backend_cuda_create(llm4d_backend **out, int host_rank, llm4d_err *err);
/* The backend kernels on pinned host memory run on (llm4d_backend.host, or be itself). */
static inline llm4d_backend *llm4d_backend_host(llm4d_backend *be) { return be->host ? be->host : be; }
/* The gradients in [p, p + bytes) start over (a step, a ZeRO bucket): reset where the backend can (grads_reset:
 * its kernels' first writes store), written with zeros otherwise. */
static inline void llm4d_grads_start(llm4d_backend *be, void *p, size_t bytes) {
    if (be->grads_reset) be->grads_reset(be, p, bytes);
    else be->zero(be, p, bytes);
}
/* Whether the backend device names has a host backend of its own (llm4d_backend.host set): an offloaded optimizer
 * then stages through pinned buffers, which the memory plan counts before any backend exists. */
int llm4d_backend_has_host(const char *device);
/* Whether the backend device names keeps its tensors in host memory (llm4d_backend.host_addressable: cpu), known
 * before any backend exists: the plans ask it of the configured device. */
int llm4d_backend_host_addressable(const char *device);
/* What a run asks of its backend. */
typedef struct {
    const char *device; /* "cpu", "guard", or "cuda" (also "gpu", the seeds' name) */
    int ref;            /* device cpu: the reference kernels */
    int nthreads;       /* <= 0: all cores (OMP default) */
    int host_rank;      /* the process's index among the ranks on its host (comm.h llm4d_comm_groups; 0 for a lone
                         * process), which picks a GPU; known from MPI, so a backend is made after MPI_Init */
} llm4d_backend_opts;
/* The backend a run names (o->device); anything else is a user error naming the devices this build has. */
llm4d_code llm4d_backend_create(llm4d_backend **out, const llm4d_backend_opts *o, llm4d_err *err);

#endif
