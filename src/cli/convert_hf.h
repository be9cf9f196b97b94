/* convert_hf.h — the Hugging Face side of `llm4d convert` besides the tensors: config.json (cli/convert_config.c), a
 * model's description as transformers' GPT2LMHeadModel or LlamaForCausalLM config and back; and the tokenizer
 * files of an export (cli/convert_tok.c).
 *
 * A separate file from verb_convert.c (which moves the tensors) because each family's config.json has its own keys,
 * defaults and the things llm4d's model cannot compute exactly, which the import must refuse before anything is
 * written. The tensors need no per-family code beyond GPT-2's Conv1D transpose: llm4d's checkpoints already carry
 * Hugging Face's names (model/params.c). */
#ifndef LLM4D_CLI_CONVERT_HF_H
#define LLM4D_CLI_CONVERT_HF_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "config/config.h"
#include "core/error.h"

/* 0 when m is a model transformers computes as GPT2LMHeadModel (the GPT-2 family with all of GPT-2's parts) or as
 * LlamaForCausalLM (the Llama family with RMSNorm, rotary positions and SwiGLU; biases and tying either way); else 1
 * with the reason in why. */
int llm4d_hf_unexportable(const llm4d_model_config *m, char *why, size_t n);

/* The config.json of m (m->llama: LlamaForCausalLM's, else GPT2LMHeadModel's); bos_token_id < 0: the family's
 * guess (GPT-2's is its eos, a Llama's is not written). NULL when out of memory. */
cJSON *llm4d_hf_config_json(const llm4d_model_config *m, int bos_token_id);

/* m (geometry, description, dropouts, eos, padding) from a parsed config.json at path: model_type "llama" reads a
 * Llama, "gpt2" or none a GPT-2; *tied says whether the LM head is the embedding (a tied model may still store an
 * lm_head.weight, which must then equal it). What llm4d cannot compute exactly is a user error naming the key. */
llm4d_code llm4d_hf_config_read(const cJSON *j, const char *path, llm4d_model_config *m, int *tied, llm4d_err *err);

/* The tokenizer files of an export (cli/convert_tok.c), read before anything is written. Either GPT-2's (vocab,
 * merges: encoder.json and vocab.bpe as they are, merges ended by a newline) or a tokenizer.json (json), or none
 * (all NULL) for the reason in why. */
typedef struct {
    char *vocab, *merges, *json;
    size_t vocab_n, merges_n, json_n;
    int bos;                     /* config.json's bos_token_id; -1: unknown */
    char bos_tok[64], eos_tok[64]; /* a tokenizer.json's strings of the bos and the model's eos ("": unknown) */
    char why[1100];              /* an llm4d_err message fits */
} llm4d_hf_tok;

/* The vocabulary --vocab_dir (vocab_flag, NULL: the default directory) names, for model m: with vocab_flag, one that
 * is missing or does not fit m is a user error; without, it is left out (why says so). */
llm4d_code llm4d_hf_tok_read(const char *vocab_flag, const llm4d_model_config *m, llm4d_hf_tok *tf, llm4d_err *err);
/* Write tf's files (vocab.json + merges.txt, or tokenizer.json) and tokenizer_config.json into the directory out;
 * nothing when tf holds none. */
llm4d_code llm4d_hf_tok_write(const llm4d_hf_tok *tf, const llm4d_model_config *m, const char *out, llm4d_err *err);
void llm4d_hf_tok_free(llm4d_hf_tok *tf);

/* A whole file, NUL-terminated (*len without the NUL); and a small file written atomically (temporary, fsync,
 * rename). */
llm4d_code llm4d_convert_read_file(const char *path, char **out, size_t *len, llm4d_err *err);
llm4d_code llm4d_convert_write_file(const char *path, const char *data, size_t len, llm4d_err *err);

#endif
