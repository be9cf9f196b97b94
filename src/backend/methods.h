/* methods.h — the backend's methods, stated once: the list every backend table is made from.
 *
 * Why: a method used to be written five times (cpu, ref, cuda, the guard's forwarding and the planner's recording
 * backend), and the last two only restate the signature and what the arguments are. Here each method is one entry,
 * with what those two need to know about it, and the rest is generated: backend.h's struct llm4d_backend (one
 * function pointer per entry, so the list cannot miss a method), the guard's forwarding and argument checks
 * (backend/guard.c) and the recorder's methods with their cost keys (plan/record.c). A new method is an entry here
 * and its real implementations (cpu or the CPU backends' shared host_*.c, ref, cuda); a method the guard or the
 * recorder cannot describe with the attributes below is marked OWN there and written by hand.
 *
 * An entry is X(shape, name, params, args, guard, ptrs, drop, rec, key):
 *   shape   VOID, or RET(type): what the method returns.
 *   name    the method (the struct's field).
 *   params  its parameter list, `llm4d_backend *be` first; args: the same names, in order, as a call passes them.
 *   guard   what the guard does around the cpu backend's method: OPEN (a kernel: the arena is opened, every
 *           argument of ptrs and drop is checked to be device or pinned memory holding its extent, and the method
 *           runs), HOST (host bookkeeping that touches no tensor memory: forwarded as it is) or OWN (in guard.c).
 *   ptrs    the pointer arguments a kernel reads or writes, with their extents, in the order of the recorder's
 *           pointer slots (llm4d_rc_call.p: the parameters' order, except where a comment says): FIN(p, n) and
 *           FOUT(p, n), n fp32 elements read / written; IN(p, bytes) and OUT(p, bytes), other element types;
 *           TIN(t, n) and TOUT(t, n), a typed tensor (tensor.h) of n elements. Written means written or added to
 *           (+=); a NULL pointer is "not given" and not checked. () where the method is not a kernel.
 *   drop    NODROP, or DROP(d, rows, bits): the method takes a dropout d (llm4d_dropout); when it draws
 *           (d->p > 0) it reads `rows` of d->sample_ids and, bits > 0, writes or reads `bits` bytes of d->bits.
 *   rec     what the planner's recording backend does: CALL (append a call: the key below, the pointers of ptrs,
 *           the dropout's probability, sample ids, T and first token), SKIP (nothing, not a step's work; a value
 *           returned is zero), NONE (the recorder has no such method: NULL) or OWN (in plan/record.c).
 *   key     for CALL, (OP, KIND, .d = {...}[, .aux = {...}]): the call's llm4d_rc_op (LLM4D_RC_<OP>), the kind
 *           of work the backend's timers count it as (LLM4D_WORK_<KIND>, what the planner prices it as), and the
 *           designated initialisers of llm4d_rc_call's d (the sizes that decide its cost: the key a machine
 *           profile measures it under) and aux (what only a replay needs). Otherwise ().
 *
 * The extents are what backend.h's contract says a method touches; they are expressions in the parameters, in
 * size_t where a product could pass 2^31. */
#ifndef LLM4D_BACKEND_METHODS_H
#define LLM4D_BACKEND_METHODS_H

/* A parenthesised list without its parentheses. */
#define LLM4D_UNPAREN(...) __VA_ARGS__
/* The return type of a method of shape VOID or RET(type): LLM4D_RT_##shape. */
#define LLM4D_RT_VOID void
#define LLM4D_RT_RET(t) t

/* Rows of sample ids a dropout over N tokens from d->tok0 reads (llm4d_dropout: row b = token / T). */
#define LLM4D_DROP_ROWS(d, N) ((N) > 0 ? (size_t)(((d)->tok0 + (N) - 1) / (d)->T + 1) : 0)
/* Bytes of the attention dropout's mask bits (llm4d_dropout.bits) for shape s. */
#define LLM4D_DROP_BITS(s) ((size_t)(s).B * (s).NH * (s).T * LLM4D_MASK_WORDS((s).T) * sizeof(uint32_t))
/* Elements of an attention shape's [B, T, NH x HS] block (out, dout: one per query head). */
#define LLM4D_ATTN_ELEMS(s) ((size_t)(s).B * (s).T * (s).NH * (s).HS)
/* Local key/value heads of an attention shape (llm4d_attn_shape.NKV, 0 read as NH). */
#define LLM4D_ATTN_NKV(s) ((s).NKV > 0 ? (s).NKV : (s).NH)
/* Elements of qkv and dqkv, [B, T, (NH + 2 NKV) x HS]: each row Q of the NH query heads, then K and V of the NKV
 * key/value heads (three [B, T, NH x HS] blocks in multi-head attention). */
#define LLM4D_ATTN_QKV_ELEMS(s) ((size_t)(s).B * (s).T * ((size_t)(s).NH + 2 * (size_t)LLM4D_ATTN_NKV(s)) * (s).HS)
/* The attention calls' key dimension d[4]: the key/value heads where they are fewer than the query heads, else 0,
 * so that multi-head attention keeps its key (the machine profiles measured before grouped-query attention). */
#define LLM4D_ATTN_KEY_NKV(s) (LLM4D_ATTN_NKV(s) != (s).NH ? LLM4D_ATTN_NKV(s) : 0)
/* Elements from a RoPE block's first to one past its last (llm4d_rope_shape: rows ld apart, NH x HS used of each). */
#define LLM4D_ROPE_ELEMS(s) ((s).N > 0 ? (size_t)((s).N - 1) * (s).ld + (size_t)(s).NH * (s).HS : 0)

#define LLM4D_BACKEND_METHODS(X)                                                                                     \
/* ---- memory spaces (the contract). alloc: device memory, zeroed, accounted in mem under c; NULL when out of       \
 * memory. alloc_host: pinned host memory, zeroed, page-aligned (direct I/O can use it), accounted alike. */         \
X(RET(void *), alloc, (llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, size_t bytes), (be, mem, c, bytes),  \
  OWN, (), NODROP, OWN, ())                                                                                          \
X(VOID, free, (llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, void *p, size_t bytes),                      \
  (be, mem, c, p, bytes), OWN, (), NODROP, OWN, ())                                                                  \
X(RET(void *), alloc_host, (llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, size_t bytes),                  \
  (be, mem, c, bytes), OWN, (), NODROP, OWN, ())                                                                     \
X(VOID, free_host, (llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, void *p, size_t bytes),                 \
  (be, mem, c, p, bytes), OWN, (), NODROP, OWN, ())                                                                  \
/* The device's free and total bytes now (the memory plan's budget; a CPU backend: the host's available memory, the  \
 * cgroup's limit if lower, and its total). */                                                                       \
X(VOID, mem_info, (llm4d_backend *be, size_t *free_bytes, size_t *total_bytes), (be, free_bytes, total_bytes),       \
  HOST, (), NODROP, OWN, ())                                                                                         \
/* The memory plan (plan/memplan.c) has counted `bytes` for what this rank will allocate: a device backend may take \
 * them from the device now, in one piece that alloc then carves (allocations beyond it still work). Not an error    \
 * when the device cannot give that much at once. NULL: nothing to reserve (host memory). */                         \
X(VOID, reserve, (llm4d_backend *be, size_t bytes), (be, bytes), HOST, (), NODROP, NONE, ())                         \
                                                                                                                     \
/* ---- device memory set to zero, and copied device to device (memmove semantics), on COMPUTE */                    \
X(VOID, zero, (llm4d_backend *be, void *p, size_t bytes), (be, p, bytes),                                            \
  OPEN, (OUT(p, bytes)), NODROP, CALL, (ZERO, ELEM, .d = {bytes}))                                                   \
X(VOID, copy, (llm4d_backend *be, void *dst, const void *src, size_t bytes), (be, dst, src, bytes),                  \
  OPEN, (OUT(dst, bytes), IN(src, bytes)), NODROP, CALL, (COPY, ELEM, .d = {bytes}))                                 \
/* bytes from src to dst, the sides as kind says, on stream s (asynchronous where the host side is pinned). */       \
X(VOID, copy_async,                                                                                                  \
  (llm4d_backend *be, void *dst, const void *src, size_t bytes, llm4d_copy_kind kind, llm4d_stream s),               \
  (be, dst, src, bytes, kind, s), OWN, (), NODROP, OWN, ())                                                          \
/* rows of `width` bytes, rows apart by spitch in src and dpitch in dst (a column block of a matrix). */             \
X(VOID, copy_2d,                                                                                                     \
  (llm4d_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t rows,           \
   llm4d_copy_kind kind, llm4d_stream s),                                                                            \
  (be, dst, dpitch, src, spitch, width, rows, kind, s), OWN, (), NODROP, OWN, ())                                    \
                                                                                                                     \
/* ---- streams and events (the contract). event_create returns NULL when out of memory. */                          \
X(RET(llm4d_event *), event_create, (llm4d_backend *be), (be), HOST, (), NODROP, OWN, ())                            \
X(VOID, event_destroy, (llm4d_backend *be, llm4d_event *ev), (be, ev), HOST, (), NODROP, SKIP, ())                   \
X(VOID, event_record, (llm4d_backend *be, llm4d_event *ev, llm4d_stream s), (be, ev, s), HOST, (), NODROP, SKIP, ()) \
X(VOID, stream_wait, (llm4d_backend *be, llm4d_stream s, const llm4d_event *ev), (be, s, ev),                        \
  HOST, (), NODROP, SKIP, ())                                                                                        \
X(VOID, event_sync, (llm4d_backend *be, const llm4d_event *ev), (be, ev), HOST, (), NODROP, SKIP, ())                \
X(VOID, stream_sync, (llm4d_backend *be, llm4d_stream s), (be, s), HOST, (), NODROP, SKIP, ())                       \
                                                                                                                     \
/* ---- TYPED ARGUMENTS (tensor.h). The activations and their gradients are llm4d_tensor / llm4d_ctensor arguments:  \
 * each may be fp32, bf16 or fp16, independently of the others, and a method reads them as fp32 values, computes in  \
 * fp32 (or wider) and rounds each typed output once, on store, to its own type. A result that is added to (+=) a    \
 * 16-bit tensor is its old value plus the new part, rounded once. Weights, weight and bias gradients, LayerNorm and \
 * softmax statistics and losses are `float *`: always fp32. */                                                      \
                                                                                                                     \
/* out[N,OC] = inp[N,C] W[OC,C]^T + b[OC]; b may be NULL. */                                                         \
X(VOID, linear_forward,                                                                                              \
  (llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, const float *w, const float *b, int N, int C, int OC),    \
  (be, out, inp, w, b, N, C, OC),                                                                                    \
  OPEN, (TOUT(out, (size_t)N * OC), TIN(inp, (size_t)N * C), FIN(w, (size_t)OC * C), FIN(b, OC)), NODROP,            \
  CALL, (LINEAR_FWD, GEMM, .d = {N, C, OC, LLM4D_ACT_NONE, b != NULL}))                                              \
/* dinp[N,C] (=|+=) dout W (dinp_store);  dw[OC,C] += dout^T inp;  db[OC] += column sums of dout. Any of dinp (a     \
 * NULL pointer), dw, db may be NULL (not computed): zero-bubble pipelines compute dinp first and dw, db later. A    \
 * block's layers write their input gradient (LLM4D_WRITE: no buffer to clear first, and the GEMM does not read      \
 * it); the LM head adds each vocabulary block's part (LLM4D_ADD). */                                                \
X(VOID, linear_backward,                                                                                             \
  (llm4d_backend *be, llm4d_tensor dinp, llm4d_store dinp_store, float *dw, float *db, llm4d_ctensor dout,           \
   llm4d_ctensor inp, const float *w, int N, int C, int OC),                                                         \
  (be, dinp, dinp_store, dw, db, dout, inp, w, N, C, OC),                                                            \
  OPEN,                                                                                                              \
  (TOUT(dinp, (size_t)N * C), FOUT(dw, (size_t)OC * C), FOUT(db, OC), TIN(dout, (size_t)N * OC),                     \
   TIN(inp, (size_t)N * C), FIN(w, (size_t)OC * C)),                                                                 \
  NODROP, CALL,                                                                                                      \
  (LINEAR_BWD, GEMM,                                                                                                 \
   .d = {N, C, OC, LLM4D_ACT_NONE, dinp.p != NULL, dw != NULL, db != NULL, dinp_store}))                             \
/* The same with the input read through an activation: out = act(inp) W^T + b; dinp (=|+=) dout W (the gradient      \
 * with respect to act(inp), the layer's real input), dw += dout^T act(inp), db as above. act(inp) is never stored:  \
 * the backend applies it while making its GEMM operand, so the MLP's second layer, which reads GELU of the first    \
 * layer's output, costs no pass that writes the GELU output, forward or backward. */                                \
X(VOID, linear_forward_act,                                                                                          \
  (llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, llm4d_act act, const float *w, const float *b, int N,     \
   int C, int OC),                                                                                                   \
  (be, out, inp, act, w, b, N, C, OC),                                                                               \
  OPEN, (TOUT(out, (size_t)N * OC), TIN(inp, (size_t)N * C), FIN(w, (size_t)OC * C), FIN(b, OC)), NODROP,            \
  CALL, (LINEAR_FWD, GEMM, .d = {N, C, OC, act, b != NULL}))                                                         \
X(VOID, linear_backward_act,                                                                                         \
  (llm4d_backend *be, llm4d_tensor dinp, llm4d_store dinp_store, float *dw, float *db, llm4d_ctensor dout,           \
   llm4d_ctensor inp, llm4d_act act, const float *w, int N, int C, int OC),                                          \
  (be, dinp, dinp_store, dw, db, dout, inp, act, w, N, C, OC),                                                       \
  OPEN,                                                                                                              \
  (TOUT(dinp, (size_t)N * C), FOUT(dw, (size_t)OC * C), FOUT(db, OC), TIN(dout, (size_t)N * OC),                     \
   TIN(inp, (size_t)N * C), FIN(w, (size_t)OC * C)),                                                                 \
  NODROP, CALL,                                                                                                      \
  (LINEAR_BWD, GEMM, .d = {N, C, OC, act, dinp.p != NULL, dw != NULL, db != NULL, dinp_store}))                      \
                                                                                                                     \
/* Token embedding over the vocabulary rows [row0, row0 + nrows) held in w[nrows, C]: out[n] += w[tokens[n] - row0]  \
 * for the tokens in that range; the other rows of out are left as they are (a vocabulary-parallel rank or a ZeRO    \
 * vocabulary block adds its part, the sum over parts is the lookup). */                                             \
X(VOID, embedding_forward,                                                                                           \
  (llm4d_backend *be, float *out, const int32_t *tokens, const float *w, int row0, int nrows, int N, int C),         \
  (be, out, tokens, w, row0, nrows, N, C),                                                                           \
  OPEN, (FOUT(out, (size_t)N * C), IN(tokens, N * sizeof(int32_t)), FIN(w, (size_t)nrows * C)), NODROP,              \
  CALL, (EMBED_FWD, ELEM, .d = {nrows, N, C}, .aux = {row0}))                                                        \
/* dw[tokens[n] - row0] += dout[n] for the tokens in [row0, row0 + nrows). The embeddings' activations are fp32: the \
 * model sums the lookup's parts (vocabulary blocks, ranks) and the positions in fp32 before the dropout rounds the  \
 * result into the residual stream's type. */                                                                        \
X(VOID, embedding_backward,                                                                                          \
  (llm4d_backend *be, float *dw, const float *dout, const int32_t *tokens, int row0, int nrows, int N, int C),       \
  (be, dw, dout, tokens, row0, nrows, N, C),                                                                         \
  OPEN, (FOUT(dw, (size_t)nrows * C), FIN(dout, (size_t)N * C), IN(tokens, N * sizeof(int32_t))), NODROP,            \
  CALL, (EMBED_BWD, ELEM, .d = {nrows, N, C}, .aux = {row0}))                                                        \
/* Position embedding of tokens tok0 .. tok0+N-1 of a flattened [B, T] micro-batch: out[n] += wpe[(tok0+n) % T]. */  \
X(VOID, position_forward,                                                                                            \
  (llm4d_backend *be, float *out, const float *wpe, int N, int C, int T, int64_t tok0),                              \
  (be, out, wpe, N, C, T, tok0),                                                                                     \
  OPEN, (FOUT(out, (size_t)N * C), FIN(wpe, (size_t)T * C)), NODROP,                                                 \
  CALL, (POS_FWD, ELEM, .d = {N, C, T}, .aux = {tok0}))                                                              \
X(VOID, position_backward,                                                                                           \
  (llm4d_backend *be, float *dwpe, const float *dout, int N, int C, int T, int64_t tok0),                            \
  (be, dwpe, dout, N, C, T, tok0),                                                                                   \
  OPEN, (FOUT(dwpe, (size_t)T * C), FIN(dout, (size_t)N * C)), NODROP,                                               \
  CALL, (POS_BWD, ELEM, .d = {N, C, T}, .aux = {tok0}))                                                              \
/* out[N,C] += b[C] (a row-parallel layer adds its bias once, after the reduction of its fp32 partial sums);         \
 * db[C] += column sums of dout. */                                                                                  \
X(VOID, bias_forward, (llm4d_backend *be, float *out, const float *b, int N, int C), (be, out, b, N, C),             \
  OPEN, (FOUT(out, (size_t)N * C), FIN(b, C)), NODROP, CALL, (BIAS_FWD, ELEM, .d = {N, C}))                          \
X(VOID, bias_backward, (llm4d_backend *be, float *db, llm4d_ctensor dout, int N, int C), (be, db, dout, N, C),       \
  OPEN, (FOUT(db, C), TIN(dout, (size_t)N * C)), NODROP, CALL, (BIAS_BWD, ELEM, .d = {N, C}))                        \
                                                                                                                     \
/* LayerNorm over the last dim (eps 1e-5); mean and rstd [N] are kept for backward. Backward adds (+=) to dinp, dw   \
 * and db (the residual stream's gradient, and every micro-batch's part of the weights'). */                         \
X(VOID, layernorm_forward,                                                                                           \
  (llm4d_backend *be, llm4d_tensor out, float *mean, float *rstd, llm4d_ctensor inp, const float *w, const float *b, \
   int N, int C),                                                                                                    \
  (be, out, mean, rstd, inp, w, b, N, C),                                                                            \
  OPEN, (TOUT(out, (size_t)N * C), FOUT(mean, N), FOUT(rstd, N), TIN(inp, (size_t)N * C), FIN(w, C), FIN(b, C)),     \
  NODROP, CALL, (LN_FWD, ELEM, .d = {N, C}))                                                                         \
X(VOID, layernorm_backward,                                                                                          \
  (llm4d_backend *be, llm4d_tensor dinp, float *dw, float *db, llm4d_ctensor dout, llm4d_ctensor inp,                \
   const float *w, const float *mean, const float *rstd, int N, int C),                                              \
  (be, dinp, dw, db, dout, inp, w, mean, rstd, N, C),                                                                \
  OPEN,                                                                                                              \
  (TOUT(dinp, (size_t)N * C), FOUT(dw, C), FOUT(db, C), TIN(dout, (size_t)N * C), TIN(inp, (size_t)N * C),           \
   FIN(w, C), FIN(mean, N), FIN(rstd, N)),                                                                           \
  NODROP, CALL, (LN_BWD, ELEM, .d = {N, C}))                                                                         \
                                                                                                                     \
/* GELU, tanh approximation (GPT-2). The model applies GELU inside linear_forward_act and calls only the backward;   \
 * the forward stays for the tests (each backend's kernel against the reference, and the objective whose finite      \
 * differences check gelu_backward). */                                                                              \
X(VOID, gelu_forward, (llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, size_t n), (be, out, inp, n),         \
  OPEN, (TOUT(out, n), TIN(inp, n)), NODROP, CALL, (GELU_FWD, ELEM, .d = {n}))                                       \
/* dinp = gelu'(inp) * dout: written, not added (see attention_backward's note). */                                  \
X(VOID, gelu_backward,                                                                                               \
  (llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor inp, llm4d_ctensor dout, size_t n), (be, dinp, inp, dout, n), \
  OPEN, (TOUT(dinp, n), TIN(inp, n), TIN(dout, n)), NODROP, CALL, (GELU_BWD, ELEM, .d = {n}))                        \
                                                                                                                     \
/* ---- the Llama family (issue 47): RMSNorm, rotary position embeddings, SwiGLU. Activations typed as above. */     \
/* RMSNorm over the last dim (Llama's, Megatron's): out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps); no mean    \
 * subtracted, no bias. rstd [N] is kept for backward (NULL: not kept). */                                           \
X(VOID, rmsnorm_forward,                                                                                             \
  (llm4d_backend *be, llm4d_tensor out, float *rstd, llm4d_ctensor inp, const float *w, int N, int C, float eps),    \
  (be, out, rstd, inp, w, N, C, eps),                                                                                \
  OPEN, (TOUT(out, (size_t)N * C), FOUT(rstd, N), TIN(inp, (size_t)N * C), FIN(w, C)), NODROP,                       \
  CALL, (RMSNORM_FWD, ELEM, .d = {N, C}))                                                                            \
/* With g = dout * w and xhat = x * rstd: dinp += rstd * (g - xhat * mean(g * xhat)); dw += column sums of           \
 * dout * xhat. Both added (+=), as layernorm_backward's (the residual stream's gradient, the micro-batches'). */    \
X(VOID, rmsnorm_backward,                                                                                            \
  (llm4d_backend *be, llm4d_tensor dinp, float *dw, llm4d_ctensor dout, llm4d_ctensor inp, const float *w,           \
   const float *rstd, int N, int C),                                                                                 \
  (be, dinp, dw, dout, inp, w, rstd, N, C),                                                                          \
  OPEN,                                                                                                              \
  (TOUT(dinp, (size_t)N * C), FOUT(dw, C), TIN(dout, (size_t)N * C), TIN(inp, (size_t)N * C), FIN(w, C),             \
   FIN(rstd, N)),                                                                                                    \
  NODROP, CALL, (RMSNORM_BWD, ELEM, .d = {N, C}))                                                                    \
/* Rotary position embedding, Hugging Face Llama's "rotate half" pairing: in each head of HS (even) values, x[i] and \
 * x[i + HS/2] (i < HS/2) turn together by the angle a = pos * theta^(-2i/HS), the complex number                    \
 * x[i] + j x[i + HS/2] times e^{j a}:  out[i] = x[i] cos a - x[i + HS/2] sin a,                                     \
 * out[i + HS/2] = x[i + HS/2] cos a + x[i] sin a. The rows, heads and positions are s's (llm4d_rope_shape): rows    \
 * s.ld elements apart with s.NH heads from their first element, so one call turns the Q and K heads of a fused qkv  \
 * row; elements of a row past its NH heads are not touched. out may be inp (the same memory and type). */           \
X(VOID, rope_forward, (llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, llm4d_rope_shape s),                  \
  (be, out, inp, s),                                                                                                 \
  OPEN, (TOUT(out, LLM4D_ROPE_ELEMS(s)), TIN(inp, LLM4D_ROPE_ELEMS(s))), NODROP,                                     \
  CALL, (ROPE_FWD, ELEM, .d = {s.N, s.NH, s.HS, s.ld}, .aux = {s.T, s.tok0}))                                        \
/* dinp = dout turned by -a (the rotation's transpose): written, not added (attention_backward's note); dinp may be  \
 * dout (the same memory and type: the Q and K parts of dqkv in place). */                                           \
X(VOID, rope_backward, (llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor dout, llm4d_rope_shape s),               \
  (be, dinp, dout, s),                                                                                               \
  OPEN, (TOUT(dinp, LLM4D_ROPE_ELEMS(s)), TIN(dout, LLM4D_ROPE_ELEMS(s))), NODROP,                                   \
  CALL, (ROPE_BWD, ELEM, .d = {s.N, s.NH, s.HS, s.ld}, .aux = {s.T, s.tok0}))                                        \
/* SwiGLU, Llama's MLP activation: row n of inp [N, 2F] holds its gate (F values) then its up projection (F), the    \
 * output of one GEMM whose weight stacks the gate and up weights [2F, C] (a tensor-parallel rank: its F columns of  \
 * each); out[N, F] = silu(gate) * up, silu(g) = g * sigmoid(g). */                                                  \
X(VOID, swiglu_forward, (llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, int N, int F),                      \
  (be, out, inp, N, F),                                                                                              \
  OPEN, (TOUT(out, (size_t)N * F), TIN(inp, 2 * (size_t)N * F)), NODROP, CALL, (SWIGLU_FWD, ELEM, .d = {N, F}))      \
/* dinp [N, 2F], gate part then up part of each row: dout * up * silu'(gate), dout * silu(gate). Written, not added  \
 * (attention_backward's note). */                                                                                   \
X(VOID, swiglu_backward,                                                                                             \
  (llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor inp, llm4d_ctensor dout, int N, int F),                       \
  (be, dinp, inp, dout, N, F),                                                                                       \
  OPEN, (TOUT(dinp, 2 * (size_t)N * F), TIN(inp, 2 * (size_t)N * F), TIN(dout, (size_t)N * F)), NODROP,              \
  CALL, (SWIGLU_BWD, ELEM, .d = {N, F}))                                                                             \
                                                                                                                     \
/* Causal self-attention, scale 1/sqrt(HS). qkv [B,T,(NH+2*NKV)*HS] holds Q for all NH local query heads, then K of  \
 * the NKV key/value heads, then V of them (NKV = NH: GPT-2's layout, [B,T,3*NH*HS]); query head h attends with kv   \
 * head h / (NH/NKV). out [B,T,NH*HS]; lse [B,NH,T] receives each query row's log-sum-exp of its scaled causal       \
 * scores, all backward needs to rebuild the probabilities P = exp(S - lse) (no T x T matrix is kept). Probabilities \
 * are dropped with `drop`, the position of (b,h,t1,t2) (h the query head) being                                     \
 * ((sample_ids[b]*NH_total + head0 + h)*T + t1)*T + t2. */                                                          \
X(VOID, attention_forward,                                                                                           \
  (llm4d_backend *be, llm4d_tensor out, float *lse, llm4d_ctensor qkv, llm4d_attn_shape s,                           \
   const llm4d_dropout *drop),                                                                                       \
  (be, out, lse, qkv, s, drop),                                                                                      \
  OPEN, (TOUT(out, LLM4D_ATTN_ELEMS(s)), FOUT(lse, (size_t)s.B * s.NH * s.T), TIN(qkv, LLM4D_ATTN_QKV_ELEMS(s))),    \
  DROP(drop, s.B, LLM4D_DROP_BITS(s)),                                                                               \
  CALL, (ATTN_FWD, ATTN, .d = {s.B, s.T, s.NH, s.HS, LLM4D_ATTN_KEY_NKV(s)}, .aux = {s.head0, s.NH_total}))          \
/* dqkv (qkv's layout) = d(out)/d(qkv) . dout, given forward's out and lse for the same qkv and drop; a kv head's    \
 * dK and dV sum over the query heads of its group. Written, not added: gelu_backward,                               \
 * attention_backward and dropout_add_backward produce a block's activation gradients that nothing                   \
 * else contributes to, so they overwrite their outputs; accumulating would need a zeroing pass before and a read of \
 * the zeros during (at B=8 T=1024, 11 of the 18 N x C buffers a block's backward cleared, about 3 % of a bf16       \
 * step). The linear layers, LayerNorm and dropout_backward add (+=): their outputs collect several contributions    \
 * (micro-batches, vocabulary blocks, the residual stream). */                                                       \
X(VOID, attention_backward,                                                                                          \
  (llm4d_backend *be, llm4d_tensor dqkv, llm4d_ctensor dout, llm4d_ctensor out, llm4d_ctensor qkv, const float *lse, \
   llm4d_attn_shape s, const llm4d_dropout *drop),                                                                   \
  (be, dqkv, dout, out, qkv, lse, s, drop),                                                                          \
  OPEN,                                                                                                              \
  (TOUT(dqkv, LLM4D_ATTN_QKV_ELEMS(s)), TIN(dout, LLM4D_ATTN_ELEMS(s)), TIN(out, LLM4D_ATTN_ELEMS(s)),               \
   TIN(qkv, LLM4D_ATTN_QKV_ELEMS(s)), FIN(lse, (size_t)s.B * s.NH * s.T)),                                           \
  DROP(drop, s.B, LLM4D_DROP_BITS(s)),                                                                               \
  CALL, (ATTN_BWD, ATTN, .d = {s.B, s.T, s.NH, s.HS, LLM4D_ATTN_KEY_NKV(s)}, .aux = {s.head0, s.NH_total}))          \
                                                                                                                     \
/* out[N,C] = dropout(inp), in place (the same memory and type) or not (positions: llm4d_dropout). */                \
X(VOID, dropout_forward,                                                                                             \
  (llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, int N, int C, const llm4d_dropout *drop),                 \
  (be, out, inp, N, C, drop),                                                                                        \
  OPEN, (TOUT(out, (size_t)N * C), TIN(inp, (size_t)N * C)), DROP(drop, LLM4D_DROP_ROWS(drop, N), 0),                \
  CALL, (DROP_FWD, ELEM, .d = {N, C}))                                                                               \
/* dinp += mask * dout / (1-p) */                                                                                    \
X(VOID, dropout_backward,                                                                                            \
  (llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor dout, int N, int C, const llm4d_dropout *drop),               \
  (be, dinp, dout, N, C, drop),                                                                                      \
  OPEN, (TOUT(dinp, (size_t)N * C), TIN(dout, (size_t)N * C)), DROP(drop, LLM4D_DROP_ROWS(drop, N), 0),              \
  CALL, (DROP_BWD, ELEM, .d = {N, C}))                                                                               \
/* out = res + dropout(x): the residual connection after a sublayer (x: the sublayer's fp32 output, or any type). */ \
X(VOID, dropout_add_forward,                                                                                         \
  (llm4d_backend *be, llm4d_tensor out, llm4d_ctensor res, llm4d_ctensor x, int N, int C,                            \
   const llm4d_dropout *drop),                                                                                       \
  (be, out, res, x, N, C, drop),                                                                                     \
  OPEN, (TOUT(out, (size_t)N * C), TIN(res, (size_t)N * C), TIN(x, (size_t)N * C)),                                  \
  DROP(drop, LLM4D_DROP_ROWS(drop, N), 0), CALL, (DROPADD_FWD, ELEM, .d = {N, C}))                                   \
/* dres = dout; dx = mask * dout / (1-p): written, not added (attention_backward's note) */                          \
X(VOID, dropout_add_backward,                                                                                        \
  (llm4d_backend *be, llm4d_tensor dres, llm4d_tensor dx, llm4d_ctensor dout, int N, int C,                          \
   const llm4d_dropout *drop),                                                                                       \
  (be, dres, dx, dout, N, C, drop),                                                                                  \
  OPEN, (TOUT(dres, (size_t)N * C), TOUT(dx, (size_t)N * C), TIN(dout, (size_t)N * C)),                              \
  DROP(drop, LLM4D_DROP_ROWS(drop, N), 0), CALL, (DROPADD_BWD, ELEM, .d = {N, C}))                                   \
                                                                                                                     \
/* Softmax cross-entropy of N rows over a vocabulary of V real entries, in parts: logits[N, Vl] are the columns of   \
 * vocabulary entries [v0, v0 + Vl) (a vocabulary-parallel rank's slice or a vocabulary block; entries >= V are      \
 * padding: no probability, zero gradient). The softmax statistics are kept per row in planar form,                  \
 * stats[0..N) = running max m, stats[N..2N) = sum of exp(logit - m), stats[2N..3N) = the target's logit (0 when     \
 * the target is not in this part), so that parts combine: over blocks with `merge` (an online softmax), over ranks  \
 * by a MAX all-reduce of m, xent_rescale, then a SUM all-reduce of the last 2N.                                     \
 * merge = 0: stats = this part's statistics; merge = 1: stats = stats combined with this part's. */                 \
X(VOID, xent_forward,                                                                                                \
  (llm4d_backend *be, float *stats, llm4d_ctensor logits, const int32_t *targets, int N, int Vl, int v0, int V,      \
   int merge),                                                                                                       \
  (be, stats, logits, targets, N, Vl, v0, V, merge),                                                                 \
  OPEN, (FOUT(stats, 3 * (size_t)N), TIN(logits, (size_t)N * Vl), IN(targets, N * sizeof(int32_t))), NODROP,         \
  CALL, (XENT_FWD, LOSS, .d = {N, Vl, merge}, .aux = {v0, V}))                                                       \
/* stats[N..2N) *= exp(stats[0..N) - gmax); stats[0..N) = gmax (gmax: the max over all parts). */                    \
X(VOID, xent_rescale, (llm4d_backend *be, float *stats, const float *gmax, int N), (be, stats, gmax, N),             \
  OPEN, (FOUT(stats, 2 * (size_t)N), FIN(gmax, N)), NODROP, CALL, (XENT_RESCALE, LOSS, .d = {N}))                    \
/* With the combined stats: losses[i] = m + log(s) - target logit (NULL: not written); dlogits[i, j] = (softmax_ij - \
 * onehot_ij) * dloss[i] over this part's columns (written in dlogits' type, the operand of the LM head's backward   \
 * GEMM; may alias logits when their types agree; NULL: no gradient). */                                             \
X(VOID, xent_backward,                                                                                               \
  (llm4d_backend *be, float *losses, llm4d_tensor dlogits, llm4d_ctensor logits, const float *stats,                 \
   const int32_t *targets, const float *dloss, int N, int Vl, int v0, int V),                                        \
  (be, losses, dlogits, logits, stats, targets, dloss, N, Vl, v0, V),                                                \
  OPEN,                                                                                                              \
  (FOUT(losses, N), TOUT(dlogits, (size_t)N * Vl), TIN(logits, (size_t)N * Vl), FIN(stats, 3 * (size_t)N),           \
   IN(targets, N * sizeof(int32_t)), FIN(dloss, N)),                                                                 \
  NODROP, CALL, (XENT_BWD, LOSS, .d = {N, Vl, losses != NULL, dlogits.p != NULL}, .aux = {v0, V}))                   \
                                                                                                                     \
/* Paddle's AdamW on n elements, step t >= 1:                                                                        \
 *   g = grads*grad_scale; p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;                                 \
 *   p -= lr*sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v) + eps*sqrt(1-b2^t))                                                \
 * in one pass over params, grads, m and v; zero_grads: grads[i] = 0 afterwards in the same pass (the storage is     \
 * done with them: the next step accumulates from zero). A backend that keeps low-precision copies of the weights    \
 * (weights_changed) rewrites the copies of these parameters in the same pass. */                                    \
X(VOID, adamw,                                                                                                       \
  (llm4d_backend *be, float *params, float *grads, float *m, float *v, size_t n, float lr, float beta1, float beta2, \
   float eps, float wd, int t, float grad_scale, int zero_grads),                                                    \
  (be, params, grads, m, v, n, lr, beta1, beta2, eps, wd, t, grad_scale, zero_grads),                                \
  OPEN, (FOUT(params, n), FOUT(grads, n), FOUT(m, n), FOUT(v, n)), NODROP,                                           \
  CALL, (ADAMW, OPTIM, .d = {n, zero_grads}))                                                                        \
/* Gradients that start over (PyTorch's zero_grad(set_to_none=True)): after grads_reset(p, bytes) the gradients in   \
 * that range read as zeros to every method of the backend, but need not be written: the first kernel that writes   \
 * one (a weight gradient's GEMM, a bias or norm gradient, an embedding's) may store its result instead of adding    \
 * to zeros, which saves the zeroing pass and the read of zeros. grads_settle(p, bytes) writes the zeros no kernel    \
 * wrote over (NULL: every range reset): the model calls it on a group's gradients when their backward is done, the  \
 * trainer on everything after the step's backward, so that nothing outside the backend (a collective, a host view)  \
 * ever reads a range still owed zeros. NULL (both): the storage zeroes its gradients itself. */                     \
X(VOID, grads_reset, (llm4d_backend *be, void *p, size_t bytes), (be, p, bytes), HOST, (), NODROP, NONE, ())         \
X(VOID, grads_settle, (llm4d_backend *be, void *p, size_t bytes), (be, p, bytes),                                    \
  OPEN, (OUT(p, bytes)), NODROP, NONE, ())                                                                           \
/* sum of squares in double, summed in a fixed order (so the result does not depend on thread count); returned to    \
 * the host (synchronises) */                                                                                        \
X(RET(double), sumsq, (llm4d_backend *be, const float *x, size_t n), (be, x, n),                                     \
  OPEN, (FIN(x, n)), NODROP, CALL, (SUMSQ, OPTIM, .d = {n}))                                                         \
/* The fused form the gradient norm uses: the sums of squares of n tensors x[k] of len[k] elements, in one pass and  \
 * one read-back; each (NULL: not wanted) receives every tensor's, the return value is their sum taken in k order    \
 * (each[k] equal to sumsq of that tensor, so the norm's bits do not depend on which form ran). */                   \
X(RET(double), sumsq_many,                                                                                           \
  (llm4d_backend *be, int n, const float *const *x, const size_t *len, double *each), (be, n, x, len, each),         \
  OWN, (), NODROP, OWN, ())                                                                                          \
/* sum of a[i] * b[i] in double, in a fixed order; b NULL: sum of a. dot returns it to the host (synchronises);      \
 * dot_acc adds it to *acc, a double in device memory, on COMPUTE (the loss of each micro-batch, read back once per  \
 * step). dot_acc's acc is the recorder's third pointer, after dot's two (a, b): a replay tells them apart by it. */ \
X(RET(double), dot, (llm4d_backend *be, const float *a, const float *b, size_t n), (be, a, b, n),                    \
  OPEN, (FIN(a, n), FIN(b, n)), NODROP, CALL, (DOT, ELEM, .d = {n, b != NULL}))                                      \
X(VOID, dot_acc, (llm4d_backend *be, double *acc, const float *a, const float *b, size_t n), (be, acc, a, b, n),     \
  OPEN, (FIN(a, n), FIN(b, n), OUT(acc, sizeof(double))), NODROP, CALL, (DOT, ELEM, .d = {n, b != NULL}))            \
/* dst[i] += src[i] */                                                                                               \
X(VOID, add, (llm4d_backend *be, float *dst, const float *src, size_t n), (be, dst, src, n),                         \
  OPEN, (FOUT(dst, n), FIN(src, n)), NODROP, CALL, (ADD, ELEM, .d = {n}))                                            \
/* x *= s */                                                                                                         \
X(VOID, scale, (llm4d_backend *be, float *x, float s, size_t n), (be, x, s, n),                                      \
  OPEN, (FOUT(x, n)), NODROP, CALL, (SCALE, ELEM, .d = {n}))                                                         \
/* dst[i] = src[i] in dst's type (rounded once), for i < n; a copy when the types agree. */                          \
X(VOID, convert, (llm4d_backend *be, llm4d_tensor dst, llm4d_ctensor src, size_t n), (be, dst, src, n),              \
  OPEN, (TOUT(dst, n), TIN(src, n)), NODROP, CALL, (CONVERT, CONVERT, .d = {n}))                                     \
/* bf16 payloads of the gradient reductions (Distributed.grad_comm_dtype): dst[i] = bf16(src[i]), rounded to nearest \
 * even as core/bf16.h says; and dst[i] (=|+=) the fp32 value of src[i]. NULL: the backend cannot (then bf16         \
 * gradient traffic is refused at start-up). */                                                                      \
X(VOID, to_bf16, (llm4d_backend *be, uint16_t *dst, const float *src, size_t n), (be, dst, src, n),                  \
  OPEN, (OUT(dst, n * sizeof(uint16_t)), FIN(src, n)), NODROP, NONE, ())                                             \
X(VOID, from_bf16, (llm4d_backend *be, float *dst, const uint16_t *src, size_t n, llm4d_store store),                \
  (be, dst, src, n, store), OPEN, (FOUT(dst, n), IN(src, n * sizeof(uint16_t))), NODROP, NONE, ())                   \
                                                                                                                     \
/* Initial weights: dst[j - j0] for elements [j0, j1) of a parameter entry, as spec says (init_param's type). The    \
 * recorder skips it: creating the model is not a step's work. */                                                    \
X(VOID, init_param, (llm4d_backend *be, float *dst, const llm4d_init_spec *spec, int64_t j0, int64_t j1),            \
  (be, dst, spec, j0, j1), OPEN, (FOUT(dst, j1 - j0)), NODROP, SKIP, ())                                             \
                                                                                                                     \
/* Generation over a key/value cache (model/generate.h): n new query rows at positions p0 .. p0 + n - 1, row i of    \
 * qkv [n, (NH + 2 NKV) HS] holding its Q (NH heads of HS), K and V (NKV heads each: grouped-query attention when    \
 * NKV < NH; NKV divides NH), attend causally over the cache rows [0, p0 + i] of kc, vc [T_max, NKV HS] (the new     \
 * rows' keys and values already copied there), no dropout; query head h reads key/value head h / (NH / NKV):        \
 * out[i, h] = softmax_j (q_ih . k_jh' / sqrt(HS)) v_jh', out [n, NH HS]. scores: scratch of n x NH x ld floats,     \
 * ld >= p0 + n. */                                                                                                  \
X(VOID, attention_cached,                                                                                            \
  (llm4d_backend *be, float *out, const float *qkv, const float *kc, const float *vc, int n, int p0, int NH,         \
   int NKV, int HS, float *scores, int ld),                                                                          \
  (be, out, qkv, kc, vc, n, p0, NH, NKV, HS, scores, ld),                                                            \
  OPEN,                                                                                                              \
  (FOUT(out, (size_t)n * NH * HS), FIN(qkv, (size_t)n * (NH + 2 * NKV) * HS),                                        \
   FIN(kc, (size_t)(p0 + n) * NKV * HS), FIN(vc, (size_t)(p0 + n) * NKV * HS), FOUT(scores, (size_t)n * NH * ld)),   \
  NODROP, NONE, ())                                                                                                  \
/* The token drawn from logits[V] (device memory) for draw j as s says; scratch: LLM4D_SAMPLE_SCRATCH(V) bytes of    \
 * device memory. Returned to the host (synchronises). */                                                            \
X(RET(int32_t), sample,                                                                                              \
  (llm4d_backend *be, const float *logits, int V, const llm4d_sampling *s, uint64_t j, void *scratch),               \
  (be, logits, V, s, j, scratch),                                                                                    \
  OPEN, (FIN(logits, V), OUT(scratch, LLM4D_SAMPLE_SCRATCH(V))), NODROP, NONE, ())                                   \
                                                                                                                     \
/* ---- the host's side: settings, sizes and reports (no tensor memory touched) */                                   \
/* Switch the matmul precision; a CPU without the needed instructions is a user error saying so. NULL: fp32 only. */ \
X(RET(llm4d_code), set_precision, (llm4d_backend *be, llm4d_precision p, llm4d_err *err), (be, p, err),              \
  HOST, (), NODROP, NONE, ())                                                                                        \
/* GFLOP/s of a large GEMM in the current precision, measured now (best of a few runs): the denominator of the model \
 * FLOPs utilisation the trainer reports. NULL: unknown (the reference backend). */                                  \
X(RET(double), matmul_peak_gflops, (llm4d_backend *be), (be), HOST, (), NODROP, NONE, ())                            \
/* Bytes the backend holds outside llm4d_mem's books (converted operands, attention scratch, oneDNN scratchpads,     \
 * low-precision weight copies); NULL: none. */                                                                      \
X(RET(size_t), workspace_bytes, (llm4d_backend *be), (be), HOST, (), NODROP, NONE, ())                               \
/* The memory plan's estimate of the operand part of that: the bytes the backend will hold for the GEMM operands it  \
 * converts or makes in precision prec, for a step whose largest operands are `s`. NULL: none. */                    \
X(RET(size_t), operand_workspace, (llm4d_backend *be, llm4d_operand_sizes s, llm4d_precision prec), (be, s, prec),   \
  HOST, (), NODROP, NONE, ())                                                                                        \
/* Weights in low precision. A backend may keep a converted (bf16) copy of each weight a linear layer reads (the `w` \
 * of linear_forward/linear_backward), made on first use and reused until the weight changes, so a weight is         \
 * converted once per update instead of once per GEMM. The contract: a linear layer's `w` is a parameter; `adamw`    \
 * keeps the copies of what it updates current, and whoever else writes weights says so before their next GEMM:      \
 * weights_changed(be, NULL, 0), every copy may be stale (the trainer, before an optimizer update, whose engine may  \
 * gather other ranks' updated shards into the weights, and after loading weights), or weights_changed(be, p,        \
 * bytes), the copies of weights inside [p, p + bytes) are stale (the model, when a ZeRO-3 gather buffer was         \
 * refilled with another group's weights). Memory returned through `free` drops its copies. NULL: the backend keeps  \
 * no copies (nothing to tell). */                                                                                   \
X(VOID, weights_changed, (llm4d_backend *be, const void *p, size_t bytes), (be, p, bytes),                           \
  HOST, (), NODROP, OWN, ())                                                                                         \
/* Bytes the backend's copies of one weight element take in precision prec, all its copies together (a bf16 copy: 2; \
 * the AMX path's two tile layouts: 4): the memory plan's size of the copies. NULL only where weights_changed is. */ \
X(RET(size_t), weight_copy_bytes, (llm4d_backend *be, llm4d_precision prec), (be, prec), HOST, (), NODROP, OWN, ())  \
/* The backend's own timers (llm4d_work): seconds, calls and the optimizer's bytes, cumulative since creation. NULL: \
 * not measured. */                                                                                                  \
X(VOID, work_stats, (llm4d_backend *be, llm4d_work_stats *out), (be, out), HOST, (), NODROP, NONE, ())               \
/* One line naming the instruction set and the GEMM implementations the backend's library chose (oneDNN's            \
 * "brg:avx512_core_bf16" ...) for the linear layers and for the attention so far. NULL: nothing to say. */          \
X(VOID, describe_gemms, (llm4d_backend *be, char *buf, size_t n), (be, buf, n), HOST, (), NODROP, NONE, ())          \
/* One line saying where the device memory is, for the start-up log. NULL: host memory, nothing to say. */           \
X(VOID, describe_memory, (llm4d_backend *be, char *buf, size_t n), (be, buf, n), OWN, (), NODROP, NONE, ())          \
                                                                                                                     \
X(VOID, destroy, (llm4d_backend *be), (be), OWN, (), NODROP, OWN, ())

#endif
