/* schema.c — every config key llm4d recognises, and how a value is stored into llm4d_config (see schema.h).
 *
 * The rows follow PaddleFleetX's GPT pretraining configs (ppfleetx/configs/nlp/gpt/pretrain_gpt_*.yaml and the
 * code defaults of ppfleetx/utils/config.py), then the 2022 legacy spellings (Data.batch_size.*, Data.dataset.*,
 * Optimizer.adam_*, Fused.*, Engine.mix_precision.use_pure_fp16), then llm4d's own additions (ext = 1). Defaults
 * are PaddleFleetX's except where llm4d runs on a CPU by default (device cpu, AMP off, bf16) or keeps a quick
 * start cheap (eval off, no periodic saves); `llm4d train --help` prints this table. */
#include "config/schema.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FLD(m) offsetof(llm4d_config, m), sizeof(((llm4d_config *)0)->m)
#define KEY(key, type, m, def, none, flag, help) {key, type, FLD(m), def, none, flag, NULL, 0, 0, help}
#define EXT(key, type, m, def, none, flag, help) {key, type, FLD(m), def, none, flag, NULL, 0, 1, help}
#define NOEFF(key, pdef, neutral, help) {key, LLM4D_KT_NOEFFECT, 0, 0, pdef, NULL, NULL, neutral, 0, 0, help}
#define OPAQUE(key, pdef, neutral, help) {key, LLM4D_KT_NOEFFECT, 0, 0, pdef, NULL, NULL, neutral, 1, 0, help}
#define ALIAS(key, canon) {key, LLM4D_KT_ALIAS, 0, 0, NULL, NULL, NULL, canon, 0, 0, "legacy spelling of " canon}
#define SPELLING(key, canon, who) {key, LLM4D_KT_ALIAS, 0, 0, NULL, NULL, NULL, canon, 0, 0, who " spelling of " canon}

/* sampler and loader keys of one Data split (all without effect: llm4d's sampler is built in) */
#define DATA_LOADER(S)                                                                                           \
    NOEFF("Data." S ".sampler.name", "GPTBatchSampler", "GPTBatchSampler|DistributedBatchSampler",               \
          "batch sampler class; llm4d's sampler follows GPTBatchSampler"),                                       \
    NOEFF("Data." S ".sampler.shuffle", "False", "False", "llm4d does not shuffle batches (order is the index)"), \
    NOEFF("Data." S ".sampler.drop_last", "True", "True", "the last partial batch is always dropped"),           \
    NOEFF("Data." S ".loader.num_workers", "1", "1|0", "data loader processes; llm4d reads in-process"),          \
    NOEFF("Data." S ".loader.return_list", "False", "False", "Paddle DataLoader option"),                        \
    NOEFF("Data." S ".loader.collate_fn", "gpt_collate_fn", "gpt_collate_fn", "batch collation function"),       \
    NOEFF("Data." S ".collate_fn", "gpt_collate_fn", "gpt_collate_fn", "auto-parallel layout's collate_fn"),     \
    NOEFF("Data." S ".sample_split", "None", NULL, "auto-parallel layout's input split")

/* Eval/Test datasets: llm4d evaluates on the validation part of Data.Train's input and split */
#define DATA_EVAL(S)                                                                                             \
    NOEFF("Data." S ".dataset.name", "GPTDataset", "GPTDataset", "dataset class"),                               \
    NOEFF("Data." S ".dataset.input_dir", "./data/", "./data/|./data|data",                                      \
          "llm4d evaluates on the split of Data.Train.dataset.input_dir"),                                       \
    NOEFF("Data." S ".dataset.split", "[949, 50, 1]", "[949, 50, 1]|[969, 30, 1]",                               \
          "llm4d uses Data.Train.dataset.split"),                                                                \
    NOEFF("Data." S ".dataset.max_seq_len", "1024", "1024", "llm4d uses Data.Train.dataset.max_seq_len"),       \
    DATA_LOADER(S)

static const llm4d_key keys[] = {
    /* Global */
    KEY("Global.device", LLM4D_KT_STR, device, "cpu", NULL, "--device",
        "cpu, gpu (or cuda: the CUDA backend, in builds that have it) or guard (the cpu kernels on memory the host "
        "cannot touch: a test of the device boundary; PaddleFleetX's default is gpu)"),
    KEY("Global.seed", LLM4D_KT_U64, seed, "1024", NULL, "--seed", "seed of weights, dropout and data order"),
    KEY("Global.global_batch_size", LLM4D_KT_I64, global_batch_size, "0", NULL, "--global_batch_size",
        "samples per optimizer step over all ranks; 0/empty: local_batch_size x dp_degree x sharding_degree"),
    KEY("Global.local_batch_size", LLM4D_KT_I64, local_batch_size, "0", NULL, "--local_batch_size",
        "samples per step per data-parallel rank; 0/empty: global / (dp x sharding), or micro_batch_size"),
    KEY("Global.micro_batch_size", LLM4D_KT_I64, micro_batch_size, "1", NULL, "--micro_batch_size",
        "samples per forward/backward; accumulate_steps = local_batch_size / micro_batch_size"),
    OPAQUE("Global.flags", "{}", "{}", "Paddle runtime flags (paddle.set_flags)"),
    EXT("Global.threads", LLM4D_KT_INT, threads, "0", NULL, "--threads", "OpenMP threads per process; 0: all cores"),
    EXT("Global.backend", LLM4D_KT_BACKEND, backend_ref, "cpu", NULL, "--backend",
        "cpu (oneDNN + OpenMP kernels) or ref (naive reference kernels, for testing)"),
    EXT("Global.trace", LLM4D_KT_STR, trace_dir, "", NULL, "--trace",
        "write each rank's timeline of the trace_steps (Chrome Trace Event JSON, trace.rank<R>.json) to this "
        "directory; empty: off"),
    EXT("Global.trace_steps", LLM4D_KT_STR, trace_steps, "2-3", NULL, "--trace_steps",
        "the steps --trace records: FIRST-LAST, one step N, or N- (to the end)"),

    /* Engine */
    KEY("Engine.max_steps", LLM4D_KT_I64, max_steps, "500000", NULL, "--max_steps", "optimizer steps to run"),
    NOEFF("Engine.num_train_epochs", "1", "1", "llm4d stops at max_steps"),
    NOEFF("Engine.accumulate_steps", "None", "*", "always derived: local_batch_size / micro_batch_size"),
    KEY("Engine.logging_freq", LLM4D_KT_INT, logging_freq, "1", NULL, "--logging_freq", "log every N steps"),
    KEY("Engine.eval_freq", LLM4D_KT_INT, eval_freq, "0", NULL, "--eval_freq",
        "evaluate every N steps; 0 or negative: never (PaddleFleetX's default is 500)"),
    KEY("Engine.eval_iters", LLM4D_KT_INT, eval_iters, "10", NULL, "--eval_iters", "batches per evaluation"),
    EXT("Engine.loss_spike_threshold", LLM4D_KT_FLOAT, loss_spike_threshold, "0", "0", "--loss_spike_threshold",
        "skip the update of a step whose loss exceeds this many times the mean loss of the previous "
        "loss_spike_window steps (logged); 0: off"),
    EXT("Engine.loss_spike_window", LLM4D_KT_INT, loss_spike_window, "20", NULL, "--loss_spike_window",
        "steps in the loss spike guard's recent mean (the guard starts once it has them)"),
    NOEFF("Engine.test_iters", "None", NULL, "llm4d has no test pass after training"),
    NOEFF("Engine.run_mode", "step", "step", "llm4d counts steps, not epochs"),
    KEY("Engine.mix_precision.enable", LLM4D_KT_BOOL, use_amp, "False", NULL, "--use_amp",
        "mixed precision with fp32 master weights (PaddleFleetX's default is True)"),
    ALIAS("Engine.mix_precision.use_pure_fp16", "Engine.mix_precision.enable"),
    KEY("Engine.mix_precision.dtype", LLM4D_KT_STR, amp_dtype, "bfloat16", NULL, "--amp_dtype",
        "bfloat16, float16, or tfloat32 (GPU only: fp32 operands on tensor cores) (PaddleFleetX's default is "
        "float16)"),
    KEY("Engine.mix_precision.level", LLM4D_KT_STR, amp_level, "O2", NULL, "--fp16_opt_level",
        "O2: activations and their gradients in the AMP dtype's 16 bits (PaddleFleetX's O2, Megatron's --bf16); "
        "O1: activations in fp32, 16-bit GEMM operands; master weights, gradients, moments and reductions fp32 "
        "in both"),
    KEY("Engine.mix_precision.scale_loss", LLM4D_KT_FLOAT, scale_loss, "32768.0", NULL, "--scale_loss",
        "initial loss scale for float16"),
    NOEFF("Engine.mix_precision.custom_black_list", "['reduce_sum', 'c_softmax_with_cross_entropy', "
          "'elementwise_div']", "['reduce_sum', 'c_softmax_with_cross_entropy', 'elementwise_div']",
          "Paddle AMP op lists; llm4d keeps softmax, loss and reductions in fp32 anyway"),
    NOEFF("Engine.mix_precision.custom_white_list", "['lookup_table', 'lookup_table_v2']",
          "['lookup_table', 'lookup_table_v2']", "Paddle AMP op list"),
    NOEFF("Engine.mix_precision.use_main_grad", "False", "False", "Paddle fp32 main-grad wrappers"),
    NOEFF("Engine.mix_precision.use_fp16_guard", "False", "False", "Paddle static-graph AMP option"),
    KEY("Engine.save_load.save_steps", LLM4D_KT_I64, save_steps, "0", "0", "--save_steps",
        "save a checkpoint every N steps; 0/empty: only at the end (PaddleFleetX's default is 1000); -1: never "
        "(benchmarks)"),
    NOEFF("Engine.save_load.save_epoch", "1", "1", "llm4d saves by steps"),
    KEY("Engine.save_load.output_dir", LLM4D_KT_STR, output_dir, "./output", NULL, "--output_dir",
        "checkpoints, logs and metrics.jsonl go here"),
    KEY("Engine.save_load.ckpt_dir", LLM4D_KT_STR, ckpt_dir, "", NULL, "--resume",
        "resume from this checkpoint directory; empty: start fresh"),
    EXT("Engine.save_load.keep_last", LLM4D_KT_INT, keep_last, "0", NULL, "--keep_last",
        "keep only the newest N checkpoints; 0: keep all"),
    EXT("Engine.save_load.async_save", LLM4D_KT_BOOL, async_save, "False", NULL, "--async_save",
        "write checkpoints in the background from a host snapshot while training goes on"),
    EXT("Engine.save_load.max_restarts", LLM4D_KT_INT, max_restarts, "0", NULL, "--max_restarts",
        "read by llm4d launch: when a rank dies or hangs, restart the job from latest up to N times "
        "(torchrun's --max-restarts, paddle.distributed.launch's --max_restart); user errors are never restarted"),

    /* Model */
    NOEFF("Model.module", "GPTModule", "GPTModule", "PaddleFleetX module class"),
    KEY("Model.name", LLM4D_KT_STR, model.model_type, "GPT", NULL, "--model_type",
        "model family: GPT (gpt, gpt2) or LLaMA (llama, LlamaForCausalLM); a preset sets it"),
    EXT("Model.model_name_or_path", LLM4D_KT_STR, model.name_or_path, "", NULL, "--model_name_or_path",
        "preset (gpt2-tiny, gpt2-en, gpt2-medium-en, gpt3-125m ... gpt3-175b, llama-tiny, llama2-7b/13b/70b, "
        "llama3-8b/70b/405b) or checkpoint directory"),
    KEY("Model.vocab_size", LLM4D_KT_INT, model.vocab_size, "50304", NULL, NULL,
        "vocabulary size (presets: 50257, the GPT-2 BPE)"),
    KEY("Model.vocab_size_divisible_unit", LLM4D_KT_INT, model.vocab_size_divisible_unit, "128", NULL, NULL,
        "embedding rows are padded to a multiple of this x mp_degree"),
    KEY("Model.hidden_size", LLM4D_KT_INT, model.hidden_size, "1024", NULL, NULL, "model width"),
    KEY("Model.num_layers", LLM4D_KT_INT, model.num_layers, "24", NULL, NULL, "transformer blocks"),
    KEY("Model.num_attention_heads", LLM4D_KT_INT, model.num_attention_heads, "16", NULL, NULL,
        "attention heads (divides hidden_size)"),
    KEY("Model.ffn_hidden_size", LLM4D_KT_INT, model.ffn_hidden_size, "0", NULL, NULL,
        "MLP width; 0/empty: 4 x hidden_size"),
    KEY("Model.hidden_dropout_prob", LLM4D_KT_FLOAT, model.hidden_dropout_prob, "0.1", NULL, NULL,
        "dropout after embeddings, attention output and MLP"),
    KEY("Model.attention_probs_dropout_prob", LLM4D_KT_FLOAT, model.attention_probs_dropout_prob, "0.1", NULL,
        NULL, "dropout on attention probabilities"),
    KEY("Model.max_position_embeddings", LLM4D_KT_INT, model.max_position_embeddings, "1024", NULL, NULL,
        "learned positions; max_seq_len may not exceed it"),
    NOEFF("Model.type_vocab_size", "16", "16", "unused by GPT in PaddleFleetX too"),
    /* the decoder's description (config/model_desc.c): "" and 0 take the family's choice */
    EXT("Model.normalization", LLM4D_KT_STR, model.normalization, "", NULL, "--normalization",
        "LayerNorm or RMSNorm (Megatron's spelling); '': the family's (GPT LayerNorm, LLaMA RMSNorm)"),
    EXT("Model.norm_epsilon", LLM4D_KT_FLOAT, model.norm_epsilon, "1e-05", NULL, NULL,
        "RMSNorm's epsilon (LayerNorm's is 1e-5); Megatron's spelling"),
    SPELLING("Model.rms_norm_eps", "Model.norm_epsilon", "PaddleNLP / Hugging Face Llama's"),
    SPELLING("Model.layer_norm_epsilon", "Model.norm_epsilon", "Hugging Face GPT-2's"),
    EXT("Model.position_embedding_type", LLM4D_KT_STR, model.position_embedding_type, "", NULL,
        "--position_embedding_type",
        "learned_absolute or rope (rotary, on Q and K); '': the family's (GPT learned, LLaMA rope)"),
    EXT("Model.rope_theta", LLM4D_KT_FLOAT, model.rope_theta, "10000", NULL, NULL,
        "the rotary frequencies' base (Llama 2: 10000, Llama 3: 500000)"),
    SPELLING("Model.rotary_base", "Model.rope_theta", "Megatron's"),
    EXT("Model.hidden_act", LLM4D_KT_STR, model.hidden_act, "", NULL, "--hidden_act",
        "gelu, or swiglu (silu: Llama's gated MLP, PaddleNLP's spelling); '': the family's"),
    EXT("Model.swiglu", LLM4D_KT_BOOL, model.swiglu_flag, "False", NULL, NULL,
        "the SwiGLU MLP (Megatron's spelling of hidden_act swiglu)"),
    EXT("Model.num_key_value_heads", LLM4D_KT_INT, model.num_kv_heads, "0", NULL, "--num_key_value_heads",
        "key/value heads of grouped-query attention (1: multi-query); 0/empty: one per attention head"),
    SPELLING("Model.num_query_groups", "Model.num_key_value_heads", "Megatron's"),
    SPELLING("Model.intermediate_size", "Model.ffn_hidden_size", "PaddleNLP / Hugging Face Llama's"),
    EXT("Model.add_bias_linear", LLM4D_KT_BOOL, model.add_bias_linear, "True", NULL, NULL,
        "biases on the linear layers (Megatron's spelling); unset: the family's (GPT on, LLaMA off)"),
    EXT("Model.tie_word_embeddings", LLM4D_KT_BOOL, model.tie_word_embeddings, "True", NULL, NULL,
        "the LM head is the token embedding (Hugging Face's spelling); unset: the family's (GPT tied, LLaMA not)"),
    EXT("Model.untie_embeddings_and_output_weights", LLM4D_KT_BOOL, model.untie_embeddings, "False", NULL, NULL,
        "Megatron's spelling of tie_word_embeddings False"),
    KEY("Model.initializer_range", LLM4D_KT_FLOAT, model.initializer_range, "0.02", NULL, NULL,
        "std of the normal init (output projections: / sqrt(2 x num_layers))"),
    KEY("Model.use_recompute", LLM4D_KT_BOOL, model.use_recompute, "False", NULL, "--use_recompute",
        "recompute activations in backward to save memory"),
    KEY("Model.recompute_granularity", LLM4D_KT_STR, model.recompute_granularity, "full", NULL, NULL,
        "full (each block's forward again) | core_attn (the attention core only: Megatron's selective)"),
    NOEFF("Model.no_recompute_layers", "None", "[]", "per-layer recompute exceptions"),
    KEY("Model.virtual_pp_degree", LLM4D_KT_INT, model.virtual_pp_degree, "1", NULL, "--virtual_pp_degree",
        "pipeline chunks per stage: > 1 runs the interleaved 1F1B schedule (bubble / virtual_pp_degree)"),
    NOEFF("Model.fused_linear", "False", "False", "fused GEMM+bias epilogue (CUDA)"),
    NOEFF("Model.fuse_attn_qkv", "True", "True", "llm4d always computes Q, K, V with one fused matmul"),
    NOEFF("Model.scale_qk_by_layer_num", "True", "True", "fp16 overflow guard; same result in exact arithmetic"),
    KEY("Model.sequence_parallel", LLM4D_KT_BOOL, model.sequence_parallel, "False", NULL, "--sequence_parallel",
        "Megatron sequence parallelism: LayerNorm and dropout regions split over the tensor-parallel ranks"),
    EXT("Model.fp32_residual_connection", LLM4D_KT_BOOL, model.fp32_residual_connection, "False", NULL,
        "--fp32_residual_connection",
        "Megatron's: with use_amp at level O2, the residual stream and its gradient stay fp32 (the other "
        "activations 16-bit)"),
    NOEFF("Model.use_flash_attn", "False", "False", "FlashAttention (CUDA)"),
    NOEFF("Model.fused_softmax_with_triangular", "True", "True", "fused causal softmax kernel (CUDA)"),

    /* Data */
    NOEFF("Data.Train.dataset.name", "GPTDataset", "GPTDataset", "dataset class; llm4d implements GPTDataset"),
    KEY("Data.Train.dataset.input_dir", LLM4D_KT_STR, data.input_dir, "./data/", NULL, "--input_dir",
        "corpus: P_ids.npz, P_ids.npy+P_idx.npz, Megatron P.bin/P.idx or prefix P, or a directory; several "
        "are blended: \"a b\", \"a,b\" (by tokens) or \"0.3 a 0.7 b\" (Megatron weights)"),
    KEY("Data.Train.dataset.split", LLM4D_KT_SPLIT, data.split, "949,50,1", NULL, "--split",
        "train,validation,test proportions of the documents"),
    KEY("Data.Train.dataset.max_seq_len", LLM4D_KT_INT, data.max_seq_len, "1024", NULL, "--max_seq_len",
        "tokens per sample"),
    DATA_LOADER("Train"),
    DATA_EVAL("Eval"),
    DATA_EVAL("Test"),
    ALIAS("Data.batch_size.global_batch_size", "Global.global_batch_size"),
    ALIAS("Data.batch_size.local_batch_size", "Global.local_batch_size"),
    ALIAS("Data.batch_size.micro_batch_size", "Global.micro_batch_size"),
    ALIAS("Data.dataset.input_dir", "Data.Train.dataset.input_dir"),
    ALIAS("Data.dataset.split", "Data.Train.dataset.split"),
    ALIAS("Data.dataset.max_seq_len", "Data.Train.dataset.max_seq_len"),

    /* Optimizer */
    NOEFF("Optimizer.name", "FusedAdamW", "FusedAdamW|AdamW", "llm4d always uses AdamW (decoupled weight decay)"),
    KEY("Optimizer.weight_decay", LLM4D_KT_FLOAT, optim.weight_decay, "0.01", NULL, "--weight_decay",
        "AdamW decay of linear weights and embeddings (not biases or LayerNorm)"),
    KEY("Optimizer.beta1", LLM4D_KT_FLOAT, optim.beta1, "0.9", NULL, NULL, "Adam beta1"),
    KEY("Optimizer.beta2", LLM4D_KT_FLOAT, optim.beta2, "0.999", NULL, NULL, "Adam beta2"),
    KEY("Optimizer.epsilon", LLM4D_KT_FLOAT, optim.epsilon, "1.0e-8", NULL, NULL, "Adam epsilon"),
    ALIAS("Optimizer.adam_beta1", "Optimizer.beta1"),
    ALIAS("Optimizer.adam_beta2", "Optimizer.beta2"),
    ALIAS("Optimizer.adam_epsilon", "Optimizer.epsilon"),
    NOEFF("Optimizer.lr.name", "CosineAnnealingWithWarmupDecay", "CosineAnnealingWithWarmupDecay",
          "llm4d's schedule is always linear warmup then cosine decay"),
    KEY("Optimizer.lr.decay_steps", LLM4D_KT_I64, optim.decay_steps, "360000", "0", "--decay_steps",
        "steps of the cosine decay; 0/empty: max_steps"),
    KEY("Optimizer.lr.warmup_rate", LLM4D_KT_FLOAT, optim.warmup_rate, "0.01", NULL, "--warmup_rate",
        "warmup steps = warmup_rate x decay_steps"),
    KEY("Optimizer.lr.max_lr", LLM4D_KT_FLOAT, optim.max_lr, "5.0e-5", NULL, "--max_lr", "peak learning rate"),
    KEY("Optimizer.lr.min_lr", LLM4D_KT_FLOAT, optim.min_lr, "1.0e-5", NULL, "--min_lr",
        "learning rate after decay_steps"),
    NOEFF("Optimizer.lr.use_increments", "True", "True", "PaddleFleetX counts the schedule in samples"),
    NOEFF("Optimizer.lr.run_mode", "step", "step", "schedule stepped per optimizer step"),
    NOEFF("Optimizer.grad_clip.name", "ClipGradByGlobalNorm", "ClipGradByGlobalNorm",
          "llm4d always clips by the global norm"),
    KEY("Optimizer.grad_clip.clip_norm", LLM4D_KT_FLOAT, optim.grad_clip, "1.0", "0", "--grad_clip",
        "global gradient-norm clip; 0, or an empty grad_clip: no clipping"),
    ALIAS("Optimizer.grad_clip", "Optimizer.grad_clip.clip_norm"),
    NOEFF("Optimizer.tensor_fusion", "False", "False", "fuse parameters for the optimizer (llm4d's are one buffer)"),
    NOEFF("Fused.tensor_fusion", "False", "False", "legacy place of Optimizer.tensor_fusion"),
    NOEFF("Fused.fused_linear", "False", "False", "legacy place of Model.fused_linear"),

    /* Profiler (llm4d prints its own timings) */
    NOEFF("Profiler.enable", "False", "False", "Paddle profiler"),
    NOEFF("Profiler.scheduler", "[1, 5]", "[1, 5]", "profiled step range"),
    NOEFF("Profiler.profiler_log", "profiler_log", "profiler_log", "profiler output directory"),
    NOEFF("Profiler.detailed", "False", "False", "detailed profile"),
    NOEFF("Profiler.record_shapes", "False", "False", "profiler option"),
    NOEFF("Profiler.profile_memory", "False", "False", "profiler option"),
    OPAQUE("Profiler.summary", "None", NULL, "profiler summary options"),

    /* Distributed */
    KEY("Distributed.dp_degree", LLM4D_KT_INT, dist.dp_degree, "0", NULL, "--dp_degree",
        "data-parallel degree; 0/empty: processes / (mp x pp x sharding)"),
    KEY("Distributed.mp_degree", LLM4D_KT_INT, dist.mp_degree, "1", NULL, "--mp_degree", "tensor-parallel degree"),
    KEY("Distributed.pp_degree", LLM4D_KT_INT, dist.pp_degree, "1", NULL, "--pp_degree", "pipeline stages"),
    NOEFF("Distributed.pp_recompute_interval", "1", "1", "pipeline recompute interval"),
    EXT("Distributed.pp_schedule", LLM4D_KT_STR, dist.pp_schedule, "1F1B", NULL, "--pp_schedule",
        "pipeline schedule: 1F1B, interleaved (with virtual_pp_degree > 1) or ZBH1 (zero bubble, Qi et al. 2023)"),
    EXT("Distributed.pp_layers", LLM4D_KT_COUNTS, dist.pp_layers, "", NULL, "--pp_layers",
        "blocks of each pipeline (virtual) stage, e.g. [3, 3, 3, 1]; empty: pp_split's"),
    EXT("Distributed.pp_split", LLM4D_KT_STR, dist.pp_split, "balanced", NULL, "--pp_split",
        "without pp_layers: balanced (the stages' FLOPs and bytes balanced, the LM head and loss counted with the "
        "last stage, the embedding with the first; start-up prints each stage's predicted cost) or even (the same "
        "number of blocks on every stage)"),
    EXT("Distributed.pp_account_embedding_loss", LLM4D_KT_BOOL, dist.pp_account_embedding_loss, "False", NULL,
        "--pp_account_embedding_loss", "an even pipeline split counts the embedding and the loss as one block each "
        "(Megatron's --account-for-embedding/loss-in-pipeline-split)"),
    NOEFF("Distributed.hcg", "HybridCommunicateGroup", "HybridCommunicateGroup", "communicator group class"),
    KEY("Distributed.sharding.sharding_degree", LLM4D_KT_INT, dist.sharding_degree, "1", NULL,
        "--sharding_degree", "ZeRO sharding degree"),
    KEY("Distributed.sharding.sharding_stage", LLM4D_KT_INT, dist.sharding_stage, "1", "2", "--sharding_stage",
        "1: optimizer states, 2: + gradients, 3: + parameters (empty: 2, as PaddleFleetX's code)"),
    KEY("Distributed.sharding.sharding_offload", LLM4D_KT_BOOL, dist.sharding_offload, "False", NULL,
        "--sharding_offload", "keep the sharded optimizer states (and stage-3 parameter shards) in a file on a "
        "node-local disk, streamed through a small window during the update"),
    EXT("Distributed.comm_timeout", LLM4D_KT_FLOAT, dist.comm_timeout, "600", "0", "--comm_timeout",
        "seconds one communication may wait after the first step before the watchdog ends the job, naming the "
        "operation, the group, the step and the ranks that did not arrive; 0: wait forever"),
    EXT("Distributed.comm_timeout_first", LLM4D_KT_FLOAT, dist.comm_timeout_first, "1800", "0",
        "--comm_timeout_first", "the same for start-up, the first step, checkpoint saves and loads"),
    EXT("Distributed.sharding.offload_dir", LLM4D_KT_STR, dist.offload_dir, "", NULL, "--offload_dir",
        "where sharding_offload keeps its file (node-local; empty: $TMPDIR, else /var/tmp)"),
    NOEFF("Distributed.sharding.reduce_overlap", "False", "False", "overlap of gradient reduce (llm4d: buckets)"),
    NOEFF("Distributed.sharding.broadcast_overlap", "False", "False", "overlap of parameter broadcast"),
    NOEFF("Distributed.sharding.comm_overlap", "False", "False", "communication overlap"),
    NOEFF("Distributed.fuse_sequence_parallel_allreduce", "False", "False", "sequence-parallel all-reduce fusion"),
    NOEFF("Distributed.use_main_grad", "False", "False", "fp32 main gradients"),
    ALIAS("Distributed.seed", "Global.seed"),
    EXT("Distributed.sharding.save_consolidated", LLM4D_KT_BOOL, dist.save_consolidated, "False", NULL,
        "--save_consolidated", "sharded runs write the group's tensors gathered on its first rank (Paddle's "
        "save_group_sharded_model) instead of each rank's own slices"),
    EXT("Distributed.use_sharding", LLM4D_KT_BOOL, dist.use_sharding, "False", NULL, "--use_sharding",
        "enable sharding (default: true exactly when sharding_degree > 1)"),
    EXT("Distributed.bucket_size_mb", LLM4D_KT_MB, dist.bucket_size_bytes, "25", NULL, "--bucket_size_mb",
        "gradient all-reduce bucket size in MB"),
    EXT("Distributed.dp_overlap", LLM4D_KT_STR, dist.dp_overlap, "on", NULL, "--dp_overlap",
        "data parallel: on (bucket all-reduces start during backward), off (all blocking after backward: the "
        "yardstick of what overlap hides) or alternate (odd steps on, even steps off; bench/bench_dp.sh)"),
    EXT("Distributed.dp_trace", LLM4D_KT_BOOL, dist.dp_trace, "False", NULL, "--dp_trace",
        "data parallel: print one line per step with each bucket's size and start and end times (bench)"),
    EXT("Distributed.sharding.prefetch", LLM4D_KT_BOOL, dist.zero_prefetch, "True", NULL, "--zero_prefetch",
        "ZeRO-3: gather the next group while one computes (off: every gather blocking, for measurement)"),
    EXT("Distributed.sharding.overlap", LLM4D_KT_BOOL, dist.zero_overlap, "True", NULL, "--zero_overlap",
        "ZeRO: gradient reduce-scatters non-blocking during backward (off: blocking, for measurement)"),
    EXT("Distributed.grad_comm_dtype", LLM4D_KT_STR, dist.grad_comm_dtype, "float32", NULL, "--grad_comm_dtype",
        "the payload of the data-parallel all-reduce and the ZeRO reduce-scatters of gradients: float32, or "
        "bfloat16 (half the bytes; each rank's gradient rounded to bf16, summed in fp32, rounded again: Paddle's "
        "fp16_allreduce, DeepSpeed's communication_data_type; README states its effect on the loss)"),
    EXT("Distributed.comm_path", LLM4D_KT_STR, dist.comm_path, "auto", NULL, "--comm_path",
        "auto: the sums, reduce-scatters and all-gathers of the ranks of one host go through a shared-memory segment, "
        "hierarchically (shared memory, then MPI between hosts) for a group spanning hosts; mpi: Open MPI's "
        "collectives everywhere. Start-up prints each group's path"),
    EXT("Distributed.comm_progress", LLM4D_KT_STR, dist.comm_progress, "hooks", NULL, "--comm_progress",
        "who moves the shared-memory collectives while the rank computes: hooks (the rank itself, between layers and "
        "while it waits) or thread (a thread per rank; pays where a core is free for it)"),
    EXT("Distributed.comm_chunk_kb", LLM4D_KT_I64, dist.comm_chunk_kb, "0", NULL, "--comm_chunk_kb",
        "the shared-memory path's chunk per rank in KiB (each rank's segment holds two); 0: 1024"),

    /* Plan: the cluster `llm4d plan` lays the job out on (llm4d's addition) */
    EXT("Plan.nodes", LLM4D_KT_INT, plan.nodes, "1", NULL, "--nodes", "llm4d plan: hosts of the cluster"),
    EXT("Plan.ranks_per_node", LLM4D_KT_INT, plan.ranks_per_node, "0", NULL, "--ranks_per_node",
        "llm4d plan: processes per host; 0: the cores the machine profile counts (--evaluate: the layout's "
        "processes on one host)"),
    EXT("Plan.threads_per_rank", LLM4D_KT_INT, plan.threads_per_rank, "0", NULL, "--threads_per_rank",
        "llm4d plan: threads of each process; 0: Global.threads, else OMP_NUM_THREADS, else the host's cores over "
        "its processes"),
    EXT("Plan.search_threads", LLM4D_KT_INT, plan.search_threads, "0", NULL, "--search_threads",
        "llm4d plan: threads the search runs on, on this machine; 0: its processors (the answer is the same)"),
    EXT("Plan.memory_per_node", LLM4D_KT_FLOAT, plan.memory_per_node_gib, "0", NULL, "--memory_per_node",
        "llm4d plan: GiB of memory per host; 0: the machine profile's"),
    EXT("Plan.memory_per_rank", LLM4D_KT_FLOAT, plan.memory_per_rank_gib, "0", NULL, "--memory_per_rank",
        "llm4d plan: GiB of one rank's own device memory (a GPU's), checked beside the host's; 0: the machine "
        "profile's (none: ranks share the host's memory, as on CPU hosts)"),
    EXT("Plan.top", LLM4D_KT_INT, plan.top, "5", NULL, "--top", "llm4d plan: how many layouts to print"),
    EXT("Plan.machine_profile", LLM4D_KT_STR, plan.machine_profile, "", NULL, "--machine_profile",
        "the machine profile `llm4d plan --calibrate` writes and the planner and the trainer's start-up "
        "prediction read; empty: ~/.cache/llm4d/machine.json"),

    /* Sections of other PaddleFleetX GPT configs */
    NOEFF("FusedPasses.enable", "False", "False", "auto-parallel fused passes"),
    NOEFF("FusedPasses.fused_passes_list", "[]", "[]", "auto-parallel fused passes"),
    NOEFF("Inference.model_dir", "./output", NULL, "inference export (not training)"),
    NOEFF("Inference.mp_degree", "1", NULL, "inference export (not training)"),
};

static const int n_keys = (int)(sizeof keys / sizeof keys[0]);

const llm4d_key *llm4d_keys(int *n) {
    *n = n_keys;
    return keys;
}

const llm4d_key *llm4d_key_find(const char *path) {
    for (int i = 0; i < n_keys; i++)
        if (!strcmp(keys[i].key, path)) return &keys[i];
    return NULL;
}

const llm4d_key *llm4d_key_by_flag(const char *flag) {
    for (int i = 0; i < n_keys; i++)
        if (keys[i].flag && !strcmp(keys[i].flag, flag)) return &keys[i];
    return NULL;
}

int llm4d_key_is_section(const char *path) {
    size_t n = strlen(path);
    for (int i = 0; i < n_keys; i++)
        if (!strncmp(keys[i].key, path, n) && keys[i].key[n] == '.') return 1;
    return 0;
}

const llm4d_key *llm4d_key_canonical(const llm4d_key *k) {
    if (k->type != LLM4D_KT_ALIAS) return k;
    const llm4d_key *c = llm4d_key_find(k->extra);
    LLM4D_ASSERT(c && c->type != LLM4D_KT_ALIAS, "alias %s names %s", k->key, k->extra);
    return c;
}

/* ---- explicit / no-effect lists ---- */

static void list_add(char (*list)[LLM4D_NAME_MAX * 2], int *n, int cap, const char *key) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(list[i], key)) return;
    LLM4D_ASSERT(*n < cap, "config key list full (%d) adding %s", cap, key);
    snprintf(list[*n], LLM4D_NAME_MAX * 2, "%s", key);
    (*n)++;
}

static void list_remove(char (*list)[LLM4D_NAME_MAX * 2], int *n, const char *key) {
    for (int i = 0; i < *n; i++) {
        if (strcmp(list[i], key)) continue;
        memmove(list[i], list[i + 1], (size_t)(*n - i - 1) * sizeof list[0]);
        (*n)--;
        return;
    }
}

int llm4d_config_is_explicit(const llm4d_config *cfg, const char *key) {
    for (int i = 0; i < cfg->n_explicit; i++)
        if (!strcmp(cfg->explicit_keys[i], key)) return 1;
    return 0;
}

/* ---- typed stores ---- */

static int as_integer(const llm4d_pv *v, long long *out) {
    if (v->kind == LLM4D_PV_INT) {
        *out = v->i;
        return 1;
    }
    if (v->kind == LLM4D_PV_FLOAT && isfinite(v->f) && v->f == floor(v->f) && fabs(v->f) < 9.0e18) {
        *out = (long long)v->f;
        return 1;
    }
    return 0;
}

static int as_bool(const llm4d_pv *v, int *out) {
    if (v->kind == LLM4D_PV_BOOL || (v->kind == LLM4D_PV_INT && (v->i == 0 || v->i == 1))) {
        *out = (int)v->i;
        return 1;
    }
    if (v->kind == LLM4D_PV_STR) {
        static const char *t[] = {"true", "True", "TRUE", "1", "yes", "on"};
        static const char *f[] = {"false", "False", "FALSE", "0", "no", "off"};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            if (!strcmp(v->s, t[i])) return *out = 1, 1;
            if (!strcmp(v->s, f[i])) return *out = 0, 1;
        }
    }
    return 0;
}

static const char *type_desc(llm4d_key_type t) {
    switch (t) {
    case LLM4D_KT_INT: case LLM4D_KT_I64: return "an integer";
    case LLM4D_KT_U64: return "a non-negative integer";
    case LLM4D_KT_FLOAT: return "a number";
    case LLM4D_KT_BOOL: return "a boolean (true/false/True/False/1/0)";
    case LLM4D_KT_STR: return "a string";
    case LLM4D_KT_SPLIT: return "1 to 3 non-negative numbers such as [949, 50, 1] or '949,50,1'";
    case LLM4D_KT_COUNTS: return "a list of non-negative whole numbers such as [3, 3, 2] or '3,3,2'";
    case LLM4D_KT_MB: return "a positive number of megabytes";
    case LLM4D_KT_BACKEND: return "cpu or ref";
    default: return "a value";
    }
}

static int is_neutral(const llm4d_key *k, const llm4d_pv *v) {
    if (!k->extra) return 0;
    if (!strcmp(k->extra, "*")) return 1; /* ignored by PaddleFleetX too: not worth a start-up line */
    char got[512], want[512], one[256];
    llm4d_pv_repr(v, got, sizeof got);
    for (const char *p = k->extra; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        snprintf(one, sizeof one, "%.*s", (int)len, p);
        llm4d_pv nv;
        if (llm4d_pv_from_text(one, &nv) == 0) {
            llm4d_pv_repr(&nv, want, sizeof want);
            llm4d_pv_free(&nv);
            if (!strcmp(got, want)) return 1;
        }
        p += len + (bar ? 1 : 0);
    }
    return 0;
}

static llm4d_code type_error(const llm4d_key *k, const llm4d_pv *v, const char *subject, const char *where,
                             llm4d_err *err) {
    char got[256];
    llm4d_pv_repr(v, got, sizeof got);
    return llm4d_fail(err, LLM4D_EUSER, "%s must be %s, got %s%s", subject, type_desc(k->type), got, where);
}

static llm4d_code store(llm4d_config *cfg, const llm4d_key *k, const llm4d_pv *v, const char *raw,
                        const char *subject, const char *where, llm4d_err *err) {
    void *field = (char *)cfg + k->off;
    long long i;
    int b;
    switch (k->type) {
    case LLM4D_KT_INT:
        if (!as_integer(v, &i)) return type_error(k, v, subject, where, err);
        if (i < INT32_MIN || i > INT32_MAX)
            return llm4d_fail(err, LLM4D_EUSER, "%s is out of range: %lld%s", subject, i, where);
        LLM4D_ASSERT(k->size == sizeof(int), "%s", k->key);
        *(int *)field = (int)i;
        return LLM4D_OK;
    case LLM4D_KT_I64:
        if (!as_integer(v, &i)) return type_error(k, v, subject, where, err);
        LLM4D_ASSERT(k->size == sizeof(int64_t), "%s", k->key);
        *(int64_t *)field = i;
        return LLM4D_OK;
    case LLM4D_KT_U64:
        if (!as_integer(v, &i) || i < 0) return type_error(k, v, subject, where, err);
        LLM4D_ASSERT(k->size == sizeof(uint64_t), "%s", k->key);
        *(uint64_t *)field = (uint64_t)i;
        return LLM4D_OK;
    case LLM4D_KT_FLOAT:
        if (v->kind != LLM4D_PV_INT && v->kind != LLM4D_PV_FLOAT) return type_error(k, v, subject, where, err);
        LLM4D_ASSERT(k->size == sizeof(float), "%s", k->key);
        *(float *)field = v->kind == LLM4D_PV_INT ? (float)v->i : (float)v->f;
        return LLM4D_OK;
    case LLM4D_KT_BOOL:
        if (!as_bool(v, &b)) return type_error(k, v, subject, where, err);
        LLM4D_ASSERT(k->size == sizeof(int), "%s", k->key);
        *(int *)field = b;
        return LLM4D_OK;
    case LLM4D_KT_STR: {
        char buf[64];
        const char *s;
        if (v->kind == LLM4D_PV_STR) {
            s = v->s;
        } else if (v->kind == LLM4D_PV_INT || v->kind == LLM4D_PV_FLOAT || v->kind == LLM4D_PV_BOOL) {
            if (raw) {
                s = raw;
            } else {
                llm4d_pv_repr(v, buf, sizeof buf);
                s = buf;
            }
        } else {
            return type_error(k, v, subject, where, err);
        }
        if (strlen(s) >= k->size)
            return llm4d_fail(err, LLM4D_EUSER, "%s is too long (%zu characters, at most %zu)%s", subject,
                              strlen(s), k->size - 1, where);
        memcpy(field, s, strlen(s) + 1);
        return LLM4D_OK;
    }
    case LLM4D_KT_SPLIT: {
        const llm4d_pv *items = v;
        int n = 1;
        if (v->kind == LLM4D_PV_LIST) {
            items = v->items;
            n = v->n;
        }
        if (n < 1 || n > 3) return type_error(k, v, subject, where, err);
        char out[LLM4D_NAME_MAX] = "";
        size_t pos = 0;
        for (int j = 0; j < n; j++) {
            const llm4d_pv *it = &items[j];
            if (it->kind == LLM4D_PV_INT && it->i >= 0)
                pos += (size_t)snprintf(out + pos, sizeof out - pos, "%s%lld", j ? "," : "", it->i);
            else if (it->kind == LLM4D_PV_FLOAT && it->f >= 0 && isfinite(it->f))
                pos += (size_t)snprintf(out + pos, sizeof out - pos, "%s%g", j ? "," : "", it->f);
            else
                return type_error(k, v, subject, where, err);
            if (pos >= sizeof out) return type_error(k, v, subject, where, err);
        }
        LLM4D_ASSERT(k->size >= sizeof out, "%s", k->key);
        memcpy(field, out, pos + 1);
        return LLM4D_OK;
    }
    case LLM4D_KT_COUNTS: {
        const int unset = v->kind == LLM4D_PV_NONE || (v->kind == LLM4D_PV_STR && !v->s[0]);
        const int n = unset ? 0 : v->kind == LLM4D_PV_LIST ? v->n : 1;
        char out[256] = "";
        size_t pos = 0;
        for (int j = 0; j < n; j++) {
            const llm4d_pv *it = v->kind == LLM4D_PV_LIST ? &v->items[j] : v;
            if (it->kind != LLM4D_PV_INT || it->i < 0 || it->i > INT32_MAX) return type_error(k, v, subject, where, err);
            pos += (size_t)snprintf(out + pos, sizeof out - pos, "%s%lld", j ? "," : "", it->i);
            if (pos >= sizeof out) return type_error(k, v, subject, where, err);
        }
        LLM4D_ASSERT(k->size >= sizeof out, "%s", k->key);
        memcpy(field, out, pos + 1);
        return LLM4D_OK;
    }
    case LLM4D_KT_MB: {
        double mb = v->kind == LLM4D_PV_INT ? (double)v->i : v->kind == LLM4D_PV_FLOAT ? v->f : -1.0;
        if (!(mb > 0) || mb > 1.0e6) return type_error(k, v, subject, where, err);
        LLM4D_ASSERT(k->size == sizeof(int64_t), "%s", k->key);
        *(int64_t *)field = (int64_t)llround(mb * 1048576.0);
        return LLM4D_OK;
    }
    case LLM4D_KT_BACKEND:
        if (v->kind != LLM4D_PV_STR || (strcmp(v->s, "cpu") && strcmp(v->s, "ref")))
            return type_error(k, v, subject, where, err);
        *(int *)field = !strcmp(v->s, "ref");
        return LLM4D_OK;
    default:
        LLM4D_ASSERT(0, "store() on key %s of type %d", k->key, (int)k->type);
    }
    return LLM4D_EINTERNAL;
}

llm4d_code llm4d_key_set(llm4d_config *cfg, const llm4d_key *k, const llm4d_pv *v, const char *raw,
                         const char *subject, const char *where, int mark, llm4d_err *err) {
    k = llm4d_key_canonical(k);
    if (k->type == LLM4D_KT_NOEFFECT) {
        if (v->kind == LLM4D_PV_MAP && !k->opaque)
            return llm4d_fail(err, LLM4D_EUSER, "%s must be a single value, not a mapping%s", subject, where);
        if (v->kind == LLM4D_PV_NONE || is_neutral(k, v)) list_remove(cfg->noeffect, &cfg->n_noeffect, k->key);
        else list_add(cfg->noeffect, &cfg->n_noeffect, LLM4D_MAX_NOEFFECT, k->key);
        return LLM4D_OK;
    }
    if (v->kind == LLM4D_PV_MAP)
        return llm4d_fail(err, LLM4D_EUSER, "%s must be %s, not a mapping%s", subject, type_desc(k->type), where);
    int cap = (int)(sizeof cfg->explicit_keys / sizeof cfg->explicit_keys[0]);
    if (v->kind == LLM4D_PV_NONE) {
        const char *text = k->none_val ? k->none_val : k->def;
        llm4d_pv dv;
        if (llm4d_pv_from_text(text, &dv)) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory setting %s", k->key);
        llm4d_code rc = store(cfg, k, &dv, text, subject, where, err);
        llm4d_pv_free(&dv);
        LLM4D_ASSERT(rc == LLM4D_OK, "built-in value '%s' of %s does not parse: %s", text, k->key, err->msg);
        list_remove(cfg->explicit_keys, &cfg->n_explicit, k->key);
        return LLM4D_OK;
    }
    LLM4D_TRY(store(cfg, k, v, raw, subject, where, err));
    if (mark) list_add(cfg->explicit_keys, &cfg->n_explicit, cap, k->key);
    return LLM4D_OK;
}

/* ---- suggestions ---- */

int llm4d_levenshtein(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 255 || lb > 255) return (int)(la > lb ? la : lb);
    int prev[256], cur[256];
    for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, (lb + 1) * sizeof(int));
    }
    return prev[lb];
}

static const char *leaf(const char *path) {
    const char *dot = strrchr(path, '.');
    return dot ? dot + 1 : path;
}

static void consider(const char *path, const char *cand, size_t cand_len, char *best, int *best_score,
                     int *best_full) {
    char c[LLM4D_NAME_MAX * 2];
    if (cand_len >= sizeof c) return;
    memcpy(c, cand, cand_len);
    c[cand_len] = 0;
    int full = llm4d_levenshtein(path, c);
    /* a matching last component counts one edit less than a full match, so "Foo.bar" does not suggest
     * "Optimizer.lr" but "Global.max_steps" does suggest "Engine.max_steps" */
    int lf = llm4d_levenshtein(leaf(path), leaf(c)) + 1;
    int score = full < lf ? full : lf;
    if (score < *best_score || (score == *best_score && full < *best_full)) {
        *best_score = score;
        *best_full = full;
        memcpy(best, c, cand_len + 1);
    }
}

int llm4d_key_suggest(const char *path, char *buf, size_t n) {
    char best[LLM4D_NAME_MAX * 2] = "";
    int best_score = 1 << 30, best_full = 1 << 30;
    for (int i = 0; i < n_keys; i++) {
        const char *k = keys[i].key;
        consider(path, k, strlen(k), best, &best_score, &best_full);
        for (const char *d = strchr(k, '.'); d; d = strchr(d + 1, '.')) /* its sections too */
            consider(path, k, (size_t)(d - k), best, &best_score, &best_full);
    }
    int limit = (int)strlen(leaf(path)) / 3;
    if (limit < 2) limit = 2;
    if (best_score > limit) return 0;
    snprintf(buf, n, "%s", best);
    return 1;
}

const char *llm4d_flag_suggest(const char *flag) {
    static const char *const extra[] = {"-c", "--config", "-o", "--override"};
    const char *best = NULL;
    int best_d = 1 << 30;
    for (int i = 0; i < n_keys; i++) {
        if (!keys[i].flag) continue;
        int d = llm4d_levenshtein(flag, keys[i].flag);
        if (d < best_d) best_d = d, best = keys[i].flag;
    }
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        int d = llm4d_levenshtein(flag, extra[i]);
        if (d < best_d) best_d = d, best = extra[i];
    }
    int limit = (int)strlen(flag) / 3;
    if (limit < 2) limit = 2;
    return best_d <= limit ? best : NULL;
}
