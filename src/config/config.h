/* config.h — one validated configuration for a run.
 *
 * Sources, later ones winning: built-in defaults (PaddleFleetX's pretrain_gpt_base.yaml), the model preset named by
 * `model_name_or_path`, the YAML file given with `-c` (PaddleFleetX layout: sections Global, Engine, Model, Data,
 * Optimizer, Profiler, Distributed, `_base_` inheritance), the seeds' command-line flags (`--max_lr 1e-4`), and
 * `-o Section.key=value` overrides. Every key a PaddleFleetX GPT config defines is recognised; the ones llm4d
 * does not act on are accepted and listed at start-up as having no effect. Unknown keys and flags are errors
 * naming the nearest valid one. After parsing, llm4d_config_finalize derives the dependent values (batch sizes,
 * accumulation steps, decay steps, padded vocabulary) and validates everything once. */
#ifndef LLM4D_CONFIG_CONFIG_H
#define LLM4D_CONFIG_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "backend/tensor.h"
#include "core/error.h"

#define LLM4D_PATH_MAX 1024
#define LLM4D_NAME_MAX 64
#define LLM4D_MAX_NOEFFECT 128
#define LLM4D_LOSS_WINDOW_MAX 1000 /* the longest loss_spike_window */

typedef struct {
    /* Model geometry (a preset fills these; explicit keys override the preset). */
    char name_or_path[LLM4D_PATH_MAX]; /* preset name (gpt2-tiny, gpt2-en, gpt3-1.3b, ...) or checkpoint directory */
    char model_type[LLM4D_NAME_MAX];   /* Model.name / --model_type: "GPT" (aliases gpt, gpt2) */
    int vocab_size;                    /* real vocabulary (50257 for GPT-2 BPE) */
    int vocab_size_divisible_unit;     /* pad the vocabulary to a multiple of this (x mp_degree): 128 */
    int padded_vocab_size;             /* derived */
    int hidden_size;
    int num_layers;
    int num_attention_heads;
    int ffn_hidden_size;               /* 0 in the input means 4 * hidden_size */
    int max_position_embeddings;
    float hidden_dropout_prob;
    float attention_probs_dropout_prob;
    float initializer_range;
    int use_recompute;
    int sequence_parallel;             /* Model.sequence_parallel: Megatron sequence parallelism (mp_degree > 1) */
    int fp32_residual_connection;      /* Megatron's: under AMP O2 the residual stream and its gradient stay fp32 */
    int virtual_pp_degree;             /* Model.virtual_pp_degree: pipeline chunks per stage (interleaved 1F1B) */
    char recompute_granularity[LLM4D_NAME_MAX]; /* "full" or "core_attn" (llm4d_recompute_blocks) */
    int eos_token_id;                  /* 50256; input positions holding it are masked out of the loss */

    /* The decoder's description (issue 47; config/model_desc.c): GPT-2's by default, Llama's with Model.name LLaMA
     * or a llama preset. These are the inputs as given ("" and 0: the family's choice) ... */
    char normalization[LLM4D_NAME_MAX];          /* LayerNorm | RMSNorm (Megatron's --normalization) */
    char position_embedding_type[LLM4D_NAME_MAX]; /* learned_absolute | rope (Megatron's) */
    char hidden_act[LLM4D_NAME_MAX];             /* gelu | swiglu (silu: Llama's gated MLP, HF's spelling) */
    int swiglu_flag;                             /* Megatron's --swiglu */
    int add_bias_linear;                         /* biases on the linear layers (Megatron's; default: the family's) */
    int tie_word_embeddings;                     /* the LM head is the token embedding (HF's; default: family's) */
    int untie_embeddings;                        /* Megatron's --untie-embeddings-and-output-weights */
    float norm_epsilon;                          /* RMSNorm's epsilon (LayerNorm's is 1e-5) */
    float rope_theta;                            /* rotary frequencies' base */
    int from_checkpoint;                         /* the inputs above are a checkpoint's whole description (its
                                                  * meta.json, model_name_or_path DIR): no family default applies */
    /* ... and what llm4d_config_finalize resolved them to, the one reading every part of llm4d uses. Zero is GPT-2
     * in each (a model config made without finalize, by a test or a tool, is GPT-2's). */
    int llama;                         /* the family: Hugging Face Llama's tensor names (else GPT-2's) */
    int rmsnorm;                       /* RMSNorm (weight only), else LayerNorm (weight and bias) */
    int rope;                          /* rotary positions on Q and K; no learned position embedding */
    int swiglu;                        /* MLP silu(gate) * up: up and gate [F, C] each, down [C, F]; else GELU */
    int no_bias;                       /* no biases on the linear layers */
    int untied;                        /* the LM head has its own weight (lm_head); else it is the embedding */
    int num_kv_heads;                  /* key/value heads (grouped-query attention); 0 or num_attention_heads:
                                        * multi-head */
} llm4d_model_config;

typedef struct {
    char input_dir[LLM4D_PATH_MAX];  /* file or directory of token files */
    int max_seq_len;
    char split[LLM4D_NAME_MAX];      /* "949,50,1" */
} llm4d_data_config;

typedef struct {
    float weight_decay;
    float beta1, beta2, epsilon;
    float max_lr, min_lr;
    float warmup_rate;
    int64_t decay_steps;             /* 0 in the input means max_steps */
    float grad_clip;                 /* clip_norm; 0 disables clipping */
} llm4d_optim_config;

typedef struct {
    int dp_degree, mp_degree, pp_degree, sharding_degree;  /* dp_degree 0 in the input means world/(mp*pp*sharding) */
    int sharding_stage;
    int sharding_offload;
    char offload_dir[LLM4D_PATH_MAX]; /* sharding_offload's file: node-local; "" = $TMPDIR, else /var/tmp */
    int save_consolidated;           /* sharded runs: gather and write whole tensors (save_group_sharded_model) */
    int use_sharding;
    char pp_schedule[LLM4D_NAME_MAX];  /* 1F1B, interleaved, ZBH1 */
    char pp_layers[256];               /* blocks per virtual stage, "3,3,2,2"; "" = pp_split's */
    char pp_split[LLM4D_NAME_MAX];     /* balanced (by cost: parallel/pp_balance.h) or even, when pp_layers is "" */
    float comm_timeout;                /* s a communication may take after the first step; 0: no watchdog */
    float comm_timeout_first;          /* s for start-up, the first step, saves and loads */
    int pp_account_embedding_loss;     /* count the embedding and the loss as one block each in an even split */
    int64_t bucket_size_bytes;       /* gradient all-reduce bucket size */
    char dp_overlap[LLM4D_NAME_MAX];   /* on, off, alternate (data_parallel.h) */
    int dp_trace;                      /* data parallel: a line per step of bucket timings */
    int zero_prefetch, zero_overlap;   /* ZeRO: the stage-3 prefetch, the non-blocking reduce-scatters (sharding.h) */
    char grad_comm_dtype[LLM4D_NAME_MAX]; /* float32, or bfloat16: dp and ZeRO reduce gradients as bf16 payloads */
    char comm_path[LLM4D_NAME_MAX];    /* auto (shared memory on a host, hierarchical across hosts) or mpi (comm_shm.h) */
    char comm_progress[LLM4D_NAME_MAX]; /* hooks or thread: who moves the shared-memory path's operations */
    int64_t comm_chunk_kb;             /* the shared-memory path's chunk per rank in KiB (0: its default) */
} llm4d_dist_config;

/* The cluster `llm4d plan` lays a job out on, and the machine profile it and the trainer's start-up prediction
 * read (plan/). */
typedef struct {
    int nodes;                       /* hosts */
    int ranks_per_node;              /* processes per host; 0: the layout's world on one host (evaluate), or the
                                      * profile's cores (search) */
    int threads_per_rank;            /* 0: Global.threads, else OMP_NUM_THREADS, else cores / ranks_per_node */
    int search_threads;              /* the search's own threads on this machine; 0: its processors */
    float memory_per_node_gib;       /* 0: the profile's (this machine's) */
    float memory_per_rank_gib;       /* one rank's device memory; 0: the profile's (none: ranks share the host's) */
    int top;                         /* layouts printed */
    char machine_profile[LLM4D_PATH_MAX]; /* "": ~/.cache/llm4d/machine.json */
} llm4d_plan_config;

typedef struct {
    char device[LLM4D_NAME_MAX];     /* "cpu", "guard", "gpu" or "cuda" (the same: backend/cuda) */
    uint64_t seed;
    int64_t global_batch_size;       /* 0 in the input: derived from local x dp x sharding */
    int64_t local_batch_size;        /* per data-parallel rank; 0 in the input: derived */
    int64_t micro_batch_size;
    int64_t accumulate_steps;        /* derived: local / micro */
    int64_t max_steps;
    int logging_freq;
    int eval_freq;                   /* <= 0 disables evaluation */
    int eval_iters;
    float loss_spike_threshold;      /* skip an update whose loss exceeds this x the recent mean; 0: off */
    int loss_spike_window;           /* steps in that mean */
    int64_t save_steps;              /* <= 0 disables periodic saves */
    char output_dir[LLM4D_PATH_MAX];
    char ckpt_dir[LLM4D_PATH_MAX];   /* resume from here when set */
    int keep_last;                   /* checkpoints to keep; 0 keeps all */
    int async_save;                  /* saves written by a background thread from a snapshot */
    int max_restarts;                /* llm4d launch restarts a failed job from latest this many times */
    int use_amp;                     /* Engine.mix_precision.enable / --use_amp */
    char amp_dtype[LLM4D_NAME_MAX];  /* "bfloat16" or "float16" */
    char amp_level[LLM4D_NAME_MAX];  /* Engine.mix_precision.level: "O2" (16-bit activations) or "O1" (fp32) */
    float scale_loss;
    int threads;                     /* 0: all cores */
    int backend_ref;                 /* --backend ref: run the naive reference kernels (testing) */
    int forward_only;                /* not a key: set by `llm4d eval` before llm4d_trainer_init; the engine stack
                                      * (parallel/stack.h) then holds no gradients and no optimizer state, and the
                                      * memory plan, computed from the same functions, says so */
    char trace_dir[LLM4D_PATH_MAX];  /* Global.trace / --trace: per-rank Trace Event files go here; "": off */
    char trace_steps[LLM4D_NAME_MAX]; /* "5-6": the steps traced */
    int64_t trace_first, trace_last; /* derived from trace_steps */

    llm4d_model_config model;
    llm4d_data_config data;
    llm4d_optim_config optim;
    llm4d_dist_config dist;
    llm4d_plan_config plan;

    /* Keys that were set but have no effect in llm4d, to list at start-up ("Model.fused_linear", ...). */
    int n_noeffect;
    char noeffect[LLM4D_MAX_NOEFFECT][LLM4D_NAME_MAX * 2];

    /* Keys given explicitly (by YAML, flag or override) as "Section.key" strings, for "explicit beats preset". */
    int n_explicit;
    char explicit_keys[256][LLM4D_NAME_MAX * 2];
} llm4d_config;

/* Defaults of PaddleFleetX's pretrain_gpt_base.yaml, adapted where llm4d documents otherwise (README). */
void llm4d_config_defaults(llm4d_config *cfg);

/* Parse `train`'s arguments (everything after the verb): -c FILE, -o Key=Val (repeatable), the seeds' flags.
 * Does not derive or validate across keys; call llm4d_config_finalize next. */
llm4d_code llm4d_config_parse_args(llm4d_config *cfg, int argc, char **argv, llm4d_err *err);

/* Apply the model preset, derive dependent values for a world of `world_size` processes, validate everything.
 * Every failure is a user error with one line naming the problem and the fix. */
llm4d_code llm4d_config_finalize(llm4d_config *cfg, int world_size, llm4d_err *err);

/* The Plan.* keys alone (llm4d plan checks them before it finalizes any layout); part of llm4d_config_finalize. */
llm4d_code llm4d_config_check_plan(const llm4d_config *cfg, llm4d_err *err);
/* The types the model keeps its activations and its residual stream in (model/gpt.h): fp32 without AMP, with
 * tfloat32 and at level O1; at O2 the AMP dtype's 16 bits, the residual stream fp32 with fp32_residual_connection. */
void llm4d_config_act_types(const llm4d_config *cfg, llm4d_ftype *act, llm4d_ftype *res);

/* `llm4d train --help`: every option with its default. */
void llm4d_config_print_help(FILE *f);

/* Every key llm4d acts on with its value ({"values": {"Section.key": v, ...}, "explicit": [keys set explicitly],
 * "no_effect": [keys set without effect]}); the caller deletes it. NULL when out of memory. */
typedef struct cJSON cJSON;
cJSON *llm4d_config_json(const llm4d_config *cfg);

/* Whether a block's forward runs again before its backward: use_recompute at granularity "full". At "core_attn"
 * (Megatron's selective recompute, Korthikanti et al. 2022) nothing is run again at the block's level: what that
 * granularity recomputes, the attention's T x T scores, softmax and dropout, llm4d's flash-style attention never
 * stores in any mode (its backward rebuilds them from Q, K and each row's log-sum-exp), so the block keeps the
 * rest of its activations as without recompute. The one question every part asks (the model, the memory plan, the
 * pipeline balance, the planner). */
int llm4d_recompute_blocks(const llm4d_model_config *m);

/* ---- the model's description (config/model_desc.c) ---- */

/* Set a model preset's geometry and description into m; returns LLM4D_EUSER with the list of presets if unknown. */
llm4d_code llm4d_model_preset(llm4d_model_config *m, const char *name, llm4d_err *err);
/* The presets' names, comma-separated, into buf. */
void llm4d_model_preset_names(char *buf, size_t n);
/* Apply the preset named by Model.model_name_or_path to every Model field no source set explicitly (a checkpoint
 * directory or a YAML that describes the model: nothing). */
llm4d_code llm4d_model_apply_preset(llm4d_config *cfg, llm4d_err *err);
/* Resolve the description (the family's defaults, the spellings of PaddleNLP, Hugging Face and Megatron) into
 * rmsnorm, rope, swiglu, no_bias, untied, num_kv_heads, and check it against the layout (mp_degree). */
llm4d_code llm4d_model_describe(llm4d_config *cfg, llm4d_err *err);
/* The model's key/value heads: num_kv_heads, or one per attention head where it is 0 (multi-head attention). */
static inline int llm4d_model_kv_heads(const llm4d_model_config *m) {
    return m->num_kv_heads > 0 ? m->num_kv_heads : m->num_attention_heads;
}
/* The key/value heads each of mp tensor-parallel ranks holds: whole heads, or one head shared by mp / heads ranks
 * where there are fewer heads than ranks (model/params.c places them). */
static inline int llm4d_model_kv_heads_per_rank(const llm4d_model_config *m, int mp) {
    const int kv = llm4d_model_kv_heads(m);
    return mp > 1 ? (kv >= mp ? kv / mp : 1) : kv;
}
/* The parts of the first MLP linear layer's output: SwiGLU's gate and up projections (2), or GELU's one; its
 * width is this times ffn_hidden_size (per tensor-parallel rank: times its share of ffn_hidden_size). */
static inline int llm4d_model_fc_parts(const llm4d_model_config *m) { return m->swiglu ? 2 : 1; }
/* "GPT-2" or "Llama": the family as the logs name it. */
const char *llm4d_model_family(const llm4d_model_config *m);

#endif
