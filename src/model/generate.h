/* generate.h — autoregressive generation with a key/value cache, and sampling.
 *
 * Training's forward (gpt.h) recomputes every position; generating n tokens that way costs O(n^2) positions. Here
 * each layer keeps the keys and values of every position seen so far (K and V caches of [T_max, NKV x HS] per
 * layer, the key/value heads side by side as in the qkv product's output: NKV < NH under grouped-query attention),
 * so feeding a new token costs one position: its query attends over the cache. The prompt is fed in chunks of
 * several positions at once (matrix-matrix products), each position attending causally over the cache up to
 * itself. Everything runs on the backend: the normalisation, the linear layers, the activation, the rotary
 * positions, the attention over the cache (backend.h attention_cached) and the draw of the next token (backend.h
 * sample); the host sends the tokens and reads back the token drawn (and the logits, when a caller asks). Eval mode:
 * no dropout. The weights are borrowed from the caller's flat parameter buffer (params.h layout, device memory).
 * Every model the description allows (config.h: LayerNorm or RMSNorm, learned or rotary positions, GELU or
 * SwiGLU, biases or none, a tied or an untied head, NKV key/value heads) runs; the parts absent are NULL here.
 *
 * Sampling draws token j of a generation from the counter-based generator (core/rng.h, purpose LLM4D_RNG_SAMPLE),
 * keyed by (seed, j), so a run is reproducible and does not depend on threads. temperature 0 (or top_k 1) is greedy
 * decoding (the lowest id among equal maxima); otherwise the logits are divided by the temperature, cut to the top_k
 * largest (0: no cut), then to the smallest set of most probable tokens whose probability reaches top_p (1: no
 * cut), and one token is drawn from the renormalised rest. Only the real vocabulary (not the padding) is sampled. */
#ifndef LLM4D_MODEL_GENERATE_H
#define LLM4D_MODEL_GENERATE_H

#include <stdint.h>

#include "backend/backend.h"
#include "config/config.h"
#include "core/mem.h"
#include "model/params.h"

/* A block's weights; a bias the model does not have is NULL (every bias without biases, the norms' with RMSNorm). */
typedef struct {
    const float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} llm4d_gen_layer;

typedef struct {
    llm4d_model_config cfg;
    llm4d_backend *be;
    llm4d_mem *mem;
    const float *wte, *wpe, *lnfw, *lnfb; /* wpe NULL with rotary positions, lnfb NULL with RMSNorm */
    const float *head;                    /* the LM head [Vp, C]: lm_head's weight when untied, else wte */
    llm4d_gen_layer *layers;
    int NKV, QKV, FC;   /* key/value heads; widths of the qkv product ((NH + 2 NKV) HS) and of c_fc's (F or 2F) */
    int T_max;          /* positions the cache holds (<= max_position_embeddings) */
    int chunk;          /* most positions computed at once */
    int pos;            /* positions in the cache */
    float *kc, *vc;     /* [L, T_max, NKV x HS] */
    /* scratch for `chunk` rows (swi: SwiGLU's output [chunk, F], NULL with GELU) */
    float *x, *ln, *mean, *rstd, *qkv, *atty, *proj, *fch, *swi, *scores, *logits;
    int32_t *tok;       /* [chunk] the tokens being fed, uploaded */
    float *last_logits; /* [Vp]: the logits of the last position fed (device memory) */
    float *host_logits; /* [Vp] pinned: last_logits for the token callback, where the device is not host memory */
    size_t cache_bytes;
} llm4d_gen;

/* The whole model's weights as generation reads them: the flat buffer (device memory) laid out by the table of
 * the configuration's model. The three only mean something together. */
typedef struct {
    const llm4d_model_config *cfg;
    const llm4d_param_table *table;
    const float *params;
} llm4d_gen_weights;

/* Set up generation over w (its params borrowed: they must outlive g) for sequences of up to T_max positions,
 * feeding at most `chunk` positions at a time. */
llm4d_code llm4d_gen_create(llm4d_gen *g, const llm4d_gen_weights *w, llm4d_backend *be, llm4d_mem *mem, int T_max,
                            int chunk, llm4d_err *err);
void llm4d_gen_destroy(llm4d_gen *g);
/* Forget the cached positions (start a new sequence). */
void llm4d_gen_reset(llm4d_gen *g);

/* Feed n tokens (host memory) at positions pos .. pos+n-1 (any n; chunked internally). Afterwards g->last_logits
 * holds the logits ([padded_vocab_size], device memory) of the last position; logits_all (host memory), when not
 * NULL, receives [n, padded_vocab_size] logits, one row per position fed. A token outside the vocabulary or a
 * sequence longer than T_max is a user error. */
llm4d_code llm4d_gen_feed(llm4d_gen *g, const int32_t *tokens, int n, float *logits_all, llm4d_err *err);

/* The settings (backend.h llm4d_sampling: temperature 0 greedy, top_k 0 no cut, top_p 1 no cut, seed) on a backend,
 * with the device scratch its sample operation needs. */
typedef struct {
    llm4d_sampling s;
    int V;                   /* real vocabulary: ids 0 .. V-1 */
    llm4d_backend *be;
    llm4d_mem *mem;
    void *scratch;           /* LLM4D_SAMPLE_SCRATCH(V) bytes of device memory */
} llm4d_sampler;

/* Check the settings (temperature >= 0, top_k >= 0, 0 < top_p <= 1): a bad one is a user error naming it. be NULL:
 * only the check (nothing is allocated; such a sampler cannot pick). */
llm4d_code llm4d_sampler_init(llm4d_sampler *smp, llm4d_backend *be, llm4d_mem *mem, const llm4d_sampling *s, int V,
                              llm4d_err *err);
void llm4d_sampler_free(llm4d_sampler *smp);
/* The token drawn for generated token number j from logits (device memory, at least V of them). */
int32_t llm4d_sampler_pick(llm4d_sampler *smp, const float *logits, uint64_t j);

typedef struct {
    int prompt_tokens, new_tokens;
    double prompt_seconds, new_seconds; /* feeding the prompt; generating the new tokens */
    int stopped_at_eos, stopped_at_limit;
} llm4d_gen_stats;

/* Called for each generated token with the logits it was drawn from ([padded_vocab_size], host memory). */
typedef void (*llm4d_gen_token_fn)(void *ctx, int32_t id, const float *logits);

/* What to generate from what: the prompt, how far to go, when to stop, and who hears of each token. */
typedef struct {
    const int32_t *prompt;      /* n_prompt >= 1 tokens, host memory */
    int n_prompt;
    int max_new;                /* generate at most this many tokens */
    int eos_id;                 /* stop after this token (< 0: never) */
    float *prompt_logits;       /* NULL, or receives the prompt's [n_prompt, padded_vocab_size] logits */
    llm4d_gen_token_fn on_token; /* NULL, or called with ctx for each generated token */
    void *ctx;
} llm4d_gen_request;

/* Reset, feed the request's prompt, then generate up to max_new tokens into out: stopping after eos_id or when the
 * cache is full (stats->stopped_at_limit). *n_out receives the number generated. A prompt longer than T_max is a
 * user error. */
llm4d_code llm4d_generate(llm4d_gen *g, llm4d_sampler *smp, const llm4d_gen_request *req, int32_t *out, int *n_out,
                          llm4d_gen_stats *stats, llm4d_err *err);

#endif
