/* gpt_ckpt.h — a GPT training state saved to and loaded from a checkpoint directory (ckpt/store.h).
 *
 * What is written (one step directory, output_dir/step_<N>/):
 *   model<tag>.safetensors    the weights, fp32, under HF GPT-2's global names (transformer.h.0.attn.c_attn.weight,
 *                              ...) with llm4d's layout (a linear weight is [out, in]; `convert` makes HF's Conv1D
 *                              layout) and GLOBAL shapes. The token embedding is stored UNPADDED, [vocab_size, C]:
 *                              padding rows are zero by construction and depend on the vocabulary unit and the
 *                              tensor-parallel degree, so leaving them out makes a checkpoint load under any padding.
 *   optim_m<tag>.safetensors  Adam's first moment, same names and shapes (absent in a weights-only checkpoint)
 *   optim_v<tag>.safetensors  Adam's second moment
 *   meta.json                  the caller's object plus "model" (the geometry, so a checkpoint says which model it
 *                              holds and `generate`/`convert` need no config) and "format" (what kind of checkpoint).
 * In fp32 training the fp32 master weights are the parameters themselves, so nothing else is needed.
 *
 * Slices. A rank's table entry (params.h) is a box of a global tensor (its tensor-parallel slice, a q/k/v part, a
 * vocabulary block); any run of its elements is saved as at most three boxes of the global tensor
 * (llm4d_gpt_ckpt_add_slice) and any box can be read back from whatever boxes the checkpoint holds
 * (llm4d_gpt_ckpt_read_slice), so a checkpoint does not depend on the layout that wrote it: tensor-parallel
 * degree, pipeline stages, sharding degree, or one process.
 *
 * Ranges. A state's range [lo, hi) is a flat range of the rank's parameter buffer layout: a buffer placed for it
 * holds hi - lo elements, element 0 standing for flat index lo. A ZeRO rank saves just the ranges it
 * owns (tensors cut by the range become slices). Only entries whose `owner` flag is set are saved (a
 * tensor-parallel replica or a pipeline stage's copy of the tied embedding is saved once, by its owner); every
 * entry is read. The tag keeps the files of several writers apart ("" for a single process).
 *
 * ZeRO shards. A sharding engine holds several ranges (its shard of every parameter group) back to back in one
 * compact "local" buffer. A state (llm4d_ckpt_state) is n ranges [lo[k], hi[k]) of t's layout with two placements:
 * range k's Adam m and v elements start at m + state_off[k], v + state_off[k] (state_off NULL: back to back in the
 * order given), its parameters at params + params_off[k] (params_off NULL: placed like m and v). So
 *   ZeRO-3 (parameters sharded too):      params = local params,  params_off = NULL, state_off = shard offsets
 *   ZeRO-1/2 (parameters whole, flat):    params = flat buffer,   params_off = lo,   state_off = shard offsets
 * model/shard_range.h computes one rank's ranges and shard offsets, and llm4d_gpt_ckpt_save_collective
 * saves every rank's own ranges at once (store.h's collective save): nothing is gathered, and the result loads under
 * any other sharding degree, as one process, or into the unaligned table. Elements of a range that belong to no
 * tensor (the alignment holes at the end of each group of an aligned table) are not saved and read back as zero.
 *
 * Load checks, before anything is overwritten: every tensor of the range is present with the global shape the
 * table expects (a different model is a user error naming the tensor and both shapes), and, when the caller gives
 * its model configuration, meta.json's "model" agrees with it (the head count, which no shape shows, included). */
#ifndef LLM4D_CKPT_GPT_CKPT_H
#define LLM4D_CKPT_GPT_CKPT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt/store.h"
#include "config/config.h"
#include "model/params.h"

/* File-name stems (store.h file prefixes) of the three kinds of tensors. */
#define LLM4D_GPT_CKPT_MODEL "model"
#define LLM4D_GPT_CKPT_OPTIM_M "optim_m"
#define LLM4D_GPT_CKPT_OPTIM_V "optim_v"

/* The global shape a parameter is stored with: its held shape, with wte's rows unpadded. */
int llm4d_gpt_ckpt_shape(const llm4d_param *p, int64_t shape[2]);

/* Add local elements [j0, j1) of entry p (data holds j1 - j0 floats, not copied: valid until the file is written)
 * to `file` (a name ending in .safetensors) as boxes of its global tensor; padding rows are left out. */
llm4d_code llm4d_gpt_ckpt_add_slice(llm4d_ckpt_saver *s, const char *file, const llm4d_param *p, int64_t j0,
                                    int64_t j1, const float *data, llm4d_err *err);
/* Read local elements [j0, j1) of entry p from the files named stem* (LLM4D_GPT_CKPT_MODEL, ...) into data;
 * padding rows read as zero. The checkpoint must hold the tensor with p's global shape (checked by the store). */
llm4d_code llm4d_gpt_ckpt_read_slice(const llm4d_ckpt *c, const char *stem, const llm4d_param *p, int64_t j0,
                                     int64_t j1, float *data, llm4d_err *err);

/* A rank's state as a checkpoint reads and writes it: n ranges [lo[k], hi[k]) of t's flat layout, placed as the top
 * comment says. Built from a storage engine's state (train/checkpoint.c) or, for one range, with
 * llm4d_ckpt_state_range; a new kind of state is a field here. Saving only reads the buffers. */
typedef struct {
    const llm4d_param_table *t;
    int n;
    const size_t *lo, *hi;
    float *params;            /* NULL: no weights */
    const size_t *params_off; /* NULL: placed like m and v */
    float *m, *v;             /* both NULL: no optimizer state */
    const size_t *state_off;  /* NULL: back to back in the order given */
} llm4d_ckpt_state;

/* One range: range[0] to range[1] of t (range must outlive the state), params, m, v holding its elements. */
static inline llm4d_ckpt_state llm4d_ckpt_state_range(const llm4d_param_table *t, const size_t range[2], float *params,
                                                      float *m, float *v) {
    return (llm4d_ckpt_state){.t = t, .n = 1, .lo = &range[0], .hi = &range[1], .params = params, .m = m, .v = v};
}

/* Where a save goes. */
typedef struct {
    const char *output_dir; /* output_dir/step_<step>/, then `latest` and keep_last pruning (store.h) */
    int64_t step;
    int keep_last;
    const char *tag;        /* the file-name suffix: "" for a single writer; in a collective save NULL means
                             * "_r<rank in comm, 3 digits or more>", and a given tag must differ between writers */
    int writes;             /* collective: 0 on a rank that holds copies of what others save (a data-parallel replica
                             * of a ZeRO shard) and writes nothing */
} llm4d_ckpt_dest;

/* Add st's ranges (params, and m and v unless both NULL) to an open saver, into the files model<tag>.safetensors,
 * optim_m<tag>.safetensors, optim_v<tag>.safetensors. Ranges must not overlap. The buffers are not copied: they must
 * stay valid until the saver is committed. */
llm4d_code llm4d_gpt_ckpt_add(llm4d_ckpt_saver *s, const llm4d_ckpt_state *st, const char *tag, llm4d_err *err);

/* Set meta["model"] (from model) and meta["format"] in a caller's meta object (replacing keys of those names). */
llm4d_code llm4d_gpt_ckpt_meta(cJSON *meta, const llm4d_model_config *model, int has_optim, llm4d_err *err);

/* Save a whole checkpoint from one writer (d->tag ignored: ""; d->writes ignored): st (m = v = NULL saves weights
 * only), meta.json = a copy of meta (may be NULL) plus "model" and "format", then `latest` and keep_last pruning
 * (store.h). Nothing existing is touched on failure. */
llm4d_code llm4d_gpt_ckpt_save(const llm4d_ckpt_dest *d, const llm4d_model_config *model, const llm4d_ckpt_state *st,
                               const cJSON *meta, llm4d_err *err);

/* Read st's ranges from a checkpoint already open (any of params, m, v may be NULL: not read). Every range is
 * checked before anything is written; wte's padding rows and alignment holes read as zero. *has_optim (may be NULL)
 * is set to 1 when the checkpoint holds optimizer state; when it holds none, m and v are zero-filled (a new run from
 * those weights) and *has_optim is 0. model may be NULL (no meta.json geometry check). */
llm4d_code llm4d_gpt_ckpt_read(const llm4d_ckpt *c, const llm4d_model_config *model, const llm4d_ckpt_state *st,
                               int *has_optim, llm4d_err *err);
/* The same opening path (an output_dir or a step_<N> directory, store.h). *meta_out (may be NULL) receives a copy of
 * meta.json (free with cJSON_Delete); *step_out (may be NULL) the checkpoint's step (-1 when its directory is not
 * named step_<N>). Every rank may call it at the same time: loading is read-only. */
llm4d_code llm4d_gpt_ckpt_load(const char *path, const llm4d_model_config *model, const llm4d_ckpt_state *st,
                               int *has_optim, cJSON **meta_out, int64_t *step_out, llm4d_err *err);

/* Collective over comm (store.h's collective save): every rank saves its own state st (m = v = NULL: weights only)
 * under d; rank 0 writes meta.json (a copy of meta, used on rank 0 only and may be NULL, plus "model" and
 * "format"), then `latest` and keep_last pruning. Every rank returns the same result; on failure nothing visible
 * changed (`latest` still names the previous checkpoint). */
llm4d_code llm4d_gpt_ckpt_save_collective(llm4d_comm *comm, const llm4d_ckpt_dest *d, const llm4d_model_config *model,
                                          const llm4d_ckpt_state *st, const cJSON *meta, llm4d_err *err);

/* llm4d_gpt_ckpt_save_collective in two halves, for a save whose files are written later or on another thread
 * (train/async_save.c): this one begins the collective saver (collective over comm) and adds this rank's ranges to
 * it, nothing written yet: the buffers must stay valid and unchanged until the files are written. *meta_out receives
 * rank 0's meta.json object (NULL on other ranks; the caller deletes it after the commit). Then
 * llm4d_ckpt_save_write_collective (any thread) and llm4d_ckpt_save_commit_collective(*out, *meta_out, keep_last)
 * on every rank. A failure to begin returns the same error on every rank (*out = NULL); one while adding is kept in
 * the saver, and the commit fails with it on every rank. */
llm4d_code llm4d_gpt_ckpt_save_prepare(llm4d_ckpt_saver **out, cJSON **meta_out, llm4d_comm *comm,
                                       const llm4d_ckpt_dest *d, const llm4d_model_config *model,
                                       const llm4d_ckpt_state *st, const cJSON *meta, llm4d_err *err);

/* Fill the model geometry (vocab_size, hidden_size, num_layers, num_attention_heads, ffn_hidden_size,
 * max_position_embeddings) and the recorded dropouts, initializer_range and eos_token_id of *m from meta.json's
 * "model"; padded_vocab_size is set to vocab_size rounded up to a multiple of `vocab_unit` (the caller's padding;
 * <= 0 means 128). Other fields of *m are left as they are. */
llm4d_code llm4d_gpt_ckpt_model_from_meta(const cJSON *meta, const char *what, llm4d_model_config *m, int vocab_unit,
                                          llm4d_err *err);
/* The same, opening the checkpoint at path (verified, store.h) to read its meta.json. */
llm4d_code llm4d_gpt_ckpt_read_model(const char *path, llm4d_model_config *m, int vocab_unit, llm4d_err *err);

/* A float as the shortest decimal that reads back as the same float (0.1f becomes 0.1 in JSON, not
 * 0.10000000149011612): for meta.json and exported config.json. */
double llm4d_json_float(float f);

/* Compare meta.json's "model" with *m: a different geometry is a user error naming the key and both values. */
llm4d_code llm4d_gpt_ckpt_check_model(const cJSON *meta, const char *what, const llm4d_model_config *m,
                                      llm4d_err *err);

#endif
