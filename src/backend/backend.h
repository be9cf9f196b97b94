/* backend.h — the kernel method table, and the contract between the backend and everything above it.
 *
 * The model never calls oneDNN, OpenMP or cuBLAS directly: it calls `be->op(be, ...)` on a table of function
 * pointers with an opaque context (ggml style). The tables: `cpu` (oneDNN matmul + OpenMP kernels, the fast path),
 * `ref` (plain loops, written for obviousness, the oracle every fast kernel is tested against) and `guard` (cpu's
 * kernels on memory the host cannot touch outside backend calls: the proof of the contract below, backend/guard.c).
 * `cuda` (backend/cuda/) implements the same operations on a GPU's memory.
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
 *   gradient buffer when a new accumulation starts. Each method's comment below says which.
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

/* Attention geometry: the local heads are heads [head0, head0 + NH) of NH_total (tensor parallel splits heads). */
typedef struct {
    int B, T;       /* batch rows, sequence length */
    int NH;         /* local heads */
    int HS;         /* head size */
    int head0;      /* global index of the first local head */
    int NH_total;   /* heads of the whole model */
} llm4d_attn_shape;

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

    /* Memory spaces (the contract). alloc: device memory, zeroed, accounted in mem under c; NULL when out of
     * memory. alloc_host: pinned host memory, zeroed, page-aligned (direct I/O can use it), accounted alike. */
    void *(*alloc)(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, size_t bytes);
    void (*free)(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, void *p, size_t bytes);
    void *(*alloc_host)(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, size_t bytes);
    void (*free_host)(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, void *p, size_t bytes);
    /* The device's free and total bytes now (the memory plan's budget; a CPU backend: the host's available
     * memory, the cgroup's limit if lower, and its total). */
    void (*mem_info)(llm4d_backend *be, size_t *free_bytes, size_t *total_bytes);
    /* The memory plan (train/memplan.c) has counted `bytes` for what this rank will allocate: a device backend
     * may take them from the device now, in one piece that alloc then carves (allocations beyond it still work).
     * Not an error when the device cannot give that much at once. NULL: nothing to reserve (host memory). */
    void (*reserve)(llm4d_backend *be, size_t bytes);

    /* Device memory set to zero, and copied device to device (memmove semantics), on COMPUTE. */
    void (*zero)(llm4d_backend *be, void *p, size_t bytes);
    void (*copy)(llm4d_backend *be, void *dst, const void *src, size_t bytes);
    /* bytes from src to dst, the sides as kind says, on stream s (asynchronous where the host side is pinned). */
    void (*copy_async)(llm4d_backend *be, void *dst, const void *src, size_t bytes, llm4d_copy_kind kind,
                       llm4d_stream s);
    /* rows of `width` bytes, rows apart by spitch in src and dpitch in dst (a column block of a matrix). */
    void (*copy_2d)(llm4d_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                    size_t rows, llm4d_copy_kind kind, llm4d_stream s);

    /* Streams and events (the contract). event_create returns NULL when out of memory. */
    llm4d_event *(*event_create)(llm4d_backend *be);
    void (*event_destroy)(llm4d_backend *be, llm4d_event *ev);
    void (*event_record)(llm4d_backend *be, llm4d_event *ev, llm4d_stream s);
    void (*stream_wait)(llm4d_backend *be, llm4d_stream s, const llm4d_event *ev);
    void (*event_sync)(llm4d_backend *be, const llm4d_event *ev);
    void (*stream_sync)(llm4d_backend *be, llm4d_stream s);

    /* TYPED ARGUMENTS (tensor.h). The activations and their gradients are llm4d_tensor / llm4d_ctensor arguments:
     * each may be fp32, bf16 or fp16, independently of the others, and a method reads them as fp32 values,
     * computes in fp32 (or wider) and rounds each typed output once, on store, to its own type. A result that is
     * added to (+=) a 16-bit tensor is its old value plus the new part, rounded once. Weights, weight and bias
     * gradients, LayerNorm and softmax statistics and losses are `float *`: always fp32. */

    /* out[N,OC] = inp[N,C] W[OC,C]^T + b[OC]; b may be NULL. */
    void (*linear_forward)(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, const float *w, const float *b,
                           int N, int C, int OC);
    /* dinp[N,C] (=|+=) dout W (dinp_store);  dw[OC,C] += dout^T inp;  db[OC] += column sums of dout. Any of dinp
     * (a NULL pointer), dw, db may be NULL (not computed): zero-bubble pipelines compute dinp first and dw, db
     * later. A block's layers write their input gradient (LLM4D_WRITE: no buffer to clear first, and the GEMM does
     * not read it); the LM head adds each vocabulary block's part (LLM4D_ADD). */
    void (*linear_backward)(llm4d_backend *be, llm4d_tensor dinp, llm4d_store dinp_store, float *dw, float *db,
                            llm4d_ctensor dout, llm4d_ctensor inp, const float *w, int N, int C, int OC);
    /* The same with the input read through an activation: out = act(inp) W^T + b; dinp (=|+=) dout W (the gradient
     * with respect to act(inp), the layer's real input), dw += dout^T act(inp), db as above. act(inp) is never
     * stored: the backend applies it while making its GEMM operand, so the MLP's second layer, which reads GELU of
     * the first layer's output, costs no pass that writes the GELU output, forward or backward. */
    void (*linear_forward_act)(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, llm4d_act act,
                               const float *w, const float *b, int N, int C, int OC);
    void (*linear_backward_act)(llm4d_backend *be, llm4d_tensor dinp, llm4d_store dinp_store, float *dw, float *db,
                                llm4d_ctensor dout, llm4d_ctensor inp, llm4d_act act, const float *w, int N, int C,
                                int OC);

    /* Token embedding over the vocabulary rows [row0, row0 + nrows) held in w[nrows, C]:
     * out[n] += w[tokens[n] - row0] for the tokens in that range; the other rows of out are left as they are
     * (a vocabulary-parallel rank or a ZeRO vocabulary block adds its part, the sum over parts is the lookup). */
    void (*embedding_forward)(llm4d_backend *be, float *out, const int32_t *tokens, const float *w, int row0,
                              int nrows, int N, int C);
    /* dw[tokens[n] - row0] += dout[n] for the tokens in [row0, row0 + nrows). The embeddings' activations are fp32:
     * the model sums the lookup's parts (vocabulary blocks, ranks) and the positions in fp32 before the dropout
     * rounds the result into the residual stream's type. */
    void (*embedding_backward)(llm4d_backend *be, float *dw, const float *dout, const int32_t *tokens, int row0,
                               int nrows, int N, int C);
    /* Position embedding of tokens tok0 .. tok0+N-1 of a flattened [B, T] micro-batch: out[n] += wpe[(tok0+n) % T]. */
    void (*position_forward)(llm4d_backend *be, float *out, const float *wpe, int N, int C, int T, int64_t tok0);
    void (*position_backward)(llm4d_backend *be, float *dwpe, const float *dout, int N, int C, int T, int64_t tok0);
    /* out[N,C] += b[C] (a row-parallel layer adds its bias once, after the reduction of its fp32 partial sums);
     * db[C] += column sums of dout. */
    void (*bias_forward)(llm4d_backend *be, float *out, const float *b, int N, int C);
    void (*bias_backward)(llm4d_backend *be, float *db, llm4d_ctensor dout, int N, int C);

    /* LayerNorm over the last dim (eps 1e-5); mean and rstd [N] are kept for backward. Backward adds (+=) to dinp,
     * dw and db (the residual stream's gradient, and every micro-batch's part of the weights'). */
    void (*layernorm_forward)(llm4d_backend *be, llm4d_tensor out, float *mean, float *rstd, llm4d_ctensor inp,
                              const float *w, const float *b, int N, int C);
    void (*layernorm_backward)(llm4d_backend *be, llm4d_tensor dinp, float *dw, float *db, llm4d_ctensor dout,
                               llm4d_ctensor inp, const float *w, const float *mean, const float *rstd, int N,
                               int C);

    /* GELU, tanh approximation (GPT-2). The model applies GELU inside linear_forward_act and calls only the
     * backward; the forward stays for the tests (each backend's kernel against the reference, and the objective
     * whose finite differences check gelu_backward). */
    void (*gelu_forward)(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, size_t n);
    /* dinp = gelu'(inp) * dout: written, not added (see the backward kernels' note below). */
    void (*gelu_backward)(llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor inp, llm4d_ctensor dout, size_t n);

    /* Causal self-attention, scale 1/sqrt(HS). qkv [B,T,3*NH*HS] holds Q for all local heads, then K, then V
     * (GPT-2's layout); out [B,T,NH*HS]; lse [B,NH,T] receives each query row's log-sum-exp of its scaled causal
     * scores, all backward needs to rebuild the probabilities P = exp(S - lse) (no T x T matrix is kept).
     * Probabilities are dropped with `drop`, the position of (b,h,t1,t2) being
     * ((sample_ids[b]*NH_total + head0 + h)*T + t1)*T + t2. */
    void (*attention_forward)(llm4d_backend *be, llm4d_tensor out, float *lse, llm4d_ctensor qkv,
                              llm4d_attn_shape s, const llm4d_dropout *drop);
    /* dqkv = d(out)/d(qkv) . dout, given forward's out and lse for the same qkv and drop. Written, not added:
     * gelu_backward, attention_backward and dropout_add_backward produce a block's activation gradients that
     * nothing else contributes to, so they overwrite their outputs; accumulating would need a zeroing pass before
     * and a read of the zeros during (at B=8 T=1024, 11 of the 18 N x C buffers a block's backward cleared, about
     * 3 % of a bf16 step). The linear layers, LayerNorm and dropout_backward add (+=): their outputs collect
     * several contributions (micro-batches, vocabulary blocks, the residual stream). */
    void (*attention_backward)(llm4d_backend *be, llm4d_tensor dqkv, llm4d_ctensor dout, llm4d_ctensor out,
                               llm4d_ctensor qkv, const float *lse, llm4d_attn_shape s, const llm4d_dropout *drop);

    /* out[N,C] = dropout(inp), in place (the same memory and type) or not (positions: llm4d_dropout). */
    void (*dropout_forward)(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, int N, int C,
                            const llm4d_dropout *drop);
    /* dinp += mask * dout / (1-p) */
    void (*dropout_backward)(llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor dout, int N, int C,
                             const llm4d_dropout *drop);
    /* out = res + dropout(x): the residual connection after a sublayer (x: the sublayer's fp32 output, or any
     * type). */
    void (*dropout_add_forward)(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor res, llm4d_ctensor x, int N, int C,
                                const llm4d_dropout *drop);
    /* dres = dout; dx = mask * dout / (1-p): written, not added (attention_backward's note) */
    void (*dropout_add_backward)(llm4d_backend *be, llm4d_tensor dres, llm4d_tensor dx, llm4d_ctensor dout, int N,
                                 int C, const llm4d_dropout *drop);

    /* Softmax cross-entropy of N rows over a vocabulary of V real entries, in parts: logits[N, Vl] are the columns
     * of vocabulary entries [v0, v0 + Vl) (a vocabulary-parallel rank's slice or a vocabulary block; entries >= V
     * are padding: no probability, zero gradient). The softmax statistics are kept per row in planar form,
     * stats[0..N) = running max m, stats[N..2N) = sum of exp(logit - m), stats[2N..3N) = the target's logit (0 when
     * the target is not in this part), so that parts combine: over blocks with `merge` (an online softmax), over
     * ranks by a MAX all-reduce of m, xent_rescale, then a SUM all-reduce of the last 2N.
     * merge = 0: stats = this part's statistics; merge = 1: stats = stats combined with this part's. */
    void (*xent_forward)(llm4d_backend *be, float *stats, llm4d_ctensor logits, const int32_t *targets, int N,
                         int Vl, int v0, int V, int merge);
    /* stats[N..2N) *= exp(stats[0..N) - gmax); stats[0..N) = gmax (gmax: the max over all parts). */
    void (*xent_rescale)(llm4d_backend *be, float *stats, const float *gmax, int N);
    /* With the combined stats: losses[i] = m + log(s) - target logit (NULL: not written);
     * dlogits[i, j] = (softmax_ij - onehot_ij) * dloss[i] over this part's columns (written in dlogits' type, the
     * operand of the LM head's backward GEMM; may alias logits when their types agree; NULL: no gradient). */
    void (*xent_backward)(llm4d_backend *be, float *losses, llm4d_tensor dlogits, llm4d_ctensor logits,
                          const float *stats, const int32_t *targets, const float *dloss, int N, int Vl, int v0,
                          int V);

    /* Paddle's AdamW on n elements, step t >= 1:
     *   g = grads*grad_scale; p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     *   p -= lr*sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v) + eps*sqrt(1-b2^t))
     * in one pass over params, grads, m and v; zero_grads: grads[i] = 0 afterwards in the same pass (the storage
     * is done with them: the next step accumulates from zero). A backend that keeps low-precision copies of the
     * weights (weights_changed) rewrites the copies of these parameters in the same pass. */
    void (*adamw)(llm4d_backend *be, float *params, float *grads, float *m, float *v, size_t n, float lr,
                  float beta1, float beta2, float eps, float wd, int t, float grad_scale, int zero_grads);
    /* sum of squares in double, summed in a fixed order (so the result does not depend on thread count); returned
     * to the host (synchronises) */
    double (*sumsq)(llm4d_backend *be, const float *x, size_t n);
    /* The fused form the gradient norm uses: the sums of squares of n tensors x[k] of len[k] elements, in one pass
     * and one read-back; each (NULL: not wanted) receives every tensor's, the return value is their sum taken in k
     * order (each[k] equal to sumsq of that tensor, so the norm's bits do not depend on which form ran). */
    double (*sumsq_many)(llm4d_backend *be, int n, const float *const *x, const size_t *len, double *each);
    /* sum of a[i] * b[i] in double, in a fixed order; b NULL: sum of a. dot returns it to the host (synchronises);
     * dot_acc adds it to *acc, a double in device memory, on COMPUTE (the loss of each micro-batch, read back once
     * per step). */
    double (*dot)(llm4d_backend *be, const float *a, const float *b, size_t n);
    void (*dot_acc)(llm4d_backend *be, double *acc, const float *a, const float *b, size_t n);
    /* dst[i] += src[i] */
    void (*add)(llm4d_backend *be, float *dst, const float *src, size_t n);
    /* x *= s */
    void (*scale)(llm4d_backend *be, float *x, float s, size_t n);
    /* dst[i] = src[i] in dst's type (rounded once), for i < n; a copy when the types agree. */
    void (*convert)(llm4d_backend *be, llm4d_tensor dst, llm4d_ctensor src, size_t n);
    /* bf16 payloads of the gradient reductions (Distributed.grad_comm_dtype): dst[i] = bf16(src[i]), rounded to
     * nearest even as core/bf16.h says; and dst[i] (=|+=) the fp32 value of src[i]. NULL: the backend cannot (then
     * bf16 gradient traffic is refused at start-up). */
    void (*to_bf16)(llm4d_backend *be, uint16_t *dst, const float *src, size_t n);
    void (*from_bf16)(llm4d_backend *be, float *dst, const uint16_t *src, size_t n, llm4d_store store);

    /* Initial weights: dst[j - j0] for elements [j0, j1) of a parameter entry, as spec says (init_param's type). */
    void (*init_param)(llm4d_backend *be, float *dst, const llm4d_init_spec *spec, int64_t j0, int64_t j1);

    /* Generation over a key/value cache (model/generate.h): n new query rows at positions p0 .. p0 + n - 1, row i
     * of qkv [n, 3C] holding its Q, K, V (C = NH x HS, heads side by side), attend causally over the cache rows
     * [0, p0 + i] of kc, vc [T_max, C] (the new rows' keys and values already copied there), no dropout:
     * out[i, h] = softmax_j (q_ih . k_jh / sqrt(HS)) v_jh. scores: scratch of n x NH x ld floats, ld >= p0 + n. */
    void (*attention_cached)(llm4d_backend *be, float *out, const float *qkv, const float *kc, const float *vc, int n,
                             int p0, int NH, int HS, float *scores, int ld);
    /* The token drawn from logits[V] (device memory) for draw j as s says; scratch: LLM4D_SAMPLE_SCRATCH(V) bytes
     * of device memory. Returned to the host (synchronises). */
    int32_t (*sample)(llm4d_backend *be, const float *logits, int V, const llm4d_sampling *s, uint64_t j,
                      void *scratch);

    /* Switch the matmul precision; a CPU without the needed instructions is a user error saying so. NULL: fp32 only. */
    llm4d_code (*set_precision)(llm4d_backend *be, llm4d_precision p, llm4d_err *err);

    /* GFLOP/s of a large GEMM in the current precision, measured now (best of a few runs): the denominator of
     * the model FLOPs utilisation the trainer reports. NULL: unknown (the reference backend). */
    double (*matmul_peak_gflops)(llm4d_backend *be);
    /* Bytes the backend holds outside llm4d_mem's books (converted operands, attention scratch, oneDNN
     * scratchpads, low-precision weight copies); NULL: none. */
    size_t (*workspace_bytes)(llm4d_backend *be);
    /* The memory plan's estimate of the operand part of that: the bytes the backend will hold for the GEMM operands
     * it converts or makes in precision prec, for a step whose largest operands are `s`. NULL: none. */
    size_t (*operand_workspace)(llm4d_backend *be, llm4d_operand_sizes s, llm4d_precision prec);

    /* Weights in low precision. A backend may keep a converted (bf16) copy of each weight a linear layer reads
     * (the `w` of linear_forward/linear_backward), made on first use and reused until the weight changes, so a
     * weight is converted once per update instead of once per GEMM. The contract: a linear layer's `w` is a
     * parameter; `adamw` keeps the copies of what it updates current, and whoever else writes weights says so
     * before their next GEMM: weights_changed(be, NULL, 0), every copy may be stale (the trainer, before an
     * optimizer update, whose engine may gather other ranks' updated shards into the weights, and after loading
     * weights), or weights_changed(be, p, bytes), the copies of weights inside [p, p + bytes) are stale (the model,
     * when a ZeRO-3 gather buffer was refilled with another group's weights). Memory returned through `free`
     * drops its copies. NULL: the backend keeps no copies (nothing to tell). */
    void (*weights_changed)(llm4d_backend *be, const void *p, size_t bytes);
    /* Bytes the backend's copies of one weight element take in precision prec, all its copies together (a bf16
     * copy: 2; the AMX path's two tile layouts: 4): the memory plan's size of the copies. NULL only where
     * weights_changed is. */
    size_t (*weight_copy_bytes)(llm4d_backend *be, llm4d_precision prec);

    /* The backend's own timers (llm4d_work): seconds, calls and the optimizer's bytes, cumulative since creation.
     * NULL: not measured. */
    void (*work_stats)(llm4d_backend *be, llm4d_work_stats *out);
    /* One line naming the instruction set and the GEMM implementations the backend's library chose (oneDNN's
     * "brg:avx512_core_bf16" ...) for the linear layers and for the attention so far. NULL: nothing to say. */
    void (*describe_gemms)(llm4d_backend *be, char *buf, size_t n);
    /* One line saying where the device memory is, for the start-up log. NULL: host memory, nothing to say. */
    void (*describe_memory)(llm4d_backend *be, char *buf, size_t n);

    void (*destroy)(llm4d_backend *be);
};

/* nthreads <= 0: all cores (OMP default). The fast CPU backend; fills err on failure (no oneDNN engine, ...). */
llm4d_code llm4d_backend_cpu_create(llm4d_backend **out, int nthreads, llm4d_err *err);
/* The naive reference backend: plain loops, the oracle for tests. */
llm4d_code llm4d_backend_ref_create(llm4d_backend **out, llm4d_err *err);
/* The guard backend (backend/guard.c): the cpu backend's kernels on device memory the host cannot touch outside
 * backend calls, so that any host access to a tensor crashes with a stack. */
llm4d_code llm4d_backend_guard_create(llm4d_backend **out, int nthreads, llm4d_err *err);
/* The CUDA backend (backend/cuda/): kernels and cuBLASLt GEMMs on the GPU this process is given (its local rank
 * modulo the GPUs it sees). A build without CUDA, or a machine without a usable GPU, is a user error saying so. */
llm4d_code llm4d_backend_cuda_create(llm4d_backend **out, llm4d_err *err);
/* The backend kernels on pinned host memory run on (llm4d_backend.host, or be itself). */
static inline llm4d_backend *llm4d_backend_host(llm4d_backend *be) { return be->host ? be->host : be; }
/* Whether the backend device names has a host backend of its own (llm4d_backend.host set): an offloaded optimizer
 * then stages through pinned buffers, which the memory plan counts before any backend exists. */
int llm4d_backend_has_host(const char *device);
/* The backend a run names: device "cpu" (with ref: the reference kernels), "guard", or "cuda" (also "gpu", the
 * seeds' name); anything else is a user error naming the devices this build has. */
llm4d_code llm4d_backend_create(llm4d_backend **out, const char *device, int ref, int nthreads, llm4d_err *err);

#endif
