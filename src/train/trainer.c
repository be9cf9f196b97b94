/* trainer.c — building a run from a validated config, and freeing it (see trainer.h). */
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "parallel/stack.h"

static const char *prec_name(llm4d_precision p) {
    return p == LLM4D_PREC_BF16 ? "bf16" : p == LLM4D_PREC_FP16 ? "fp16" : p == LLM4D_PREC_TF32 ? "tf32" : "fp32";
}

static llm4d_code mkdir_p(const char *path, llm4d_err *err) {
    if (llm4d_mkdir_p(path, 0777) == 0) return LLM4D_OK;
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode))
        return llm4d_fail(err, LLM4D_EUSER, "output_dir %s is not a directory; choose another --output_dir", path);
    return llm4d_fail(err, LLM4D_EUSER, "cannot create output directory %s: %s; choose a writable --output_dir",
                      path, strerror(errno));
}

static int is_dir(const char *path) {
    struct stat st;
    return path[0] && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Model states (params + grads + optimizer) held, against the ZeRO formulas for fp32 Adam over the parameters this
 * rank's part of the model holds (Psi), the communication buffers and the activations, side by side. */
static void print_memory_plan(const llm4d_trainer *tr) {
    const llm4d_config *c = tr->cfg;
    const double psi = (double)tr->model.table.total, N = c->dist.sharding_degree;
    const int stage = c->dist.sharding_degree > 1 ? c->dist.sharding_stage : 0;
    const double formula = stage == 0   ? 16 * psi
                           : stage == 1 ? 8 * psi + 8 * psi / N
                           : stage == 2 ? 4 * psi + 12 * psi / N
                                        : 16 * psi / N;
    const llm4d_mem *m = &tr->mem;
    const double held = (double)(m->bytes[LLM4D_MEM_PARAMS] + m->bytes[LLM4D_MEM_GRADS] + m->bytes[LLM4D_MEM_OPTIM]);
    llm4d_log_info(&tr->log,
                   "model states per rank: %.2f MiB held; ZeRO formula (%s, Psi = %.0f): %.2f MiB; "
                   "communication buffers: %.2f MiB; activations: %.2f MiB",
                   held / 1048576.0,
                   stage == 0   ? "no sharding 16 Psi"
                   : stage == 1 ? "stage 1: 8 Psi + 8 Psi / N"
                   : stage == 2 ? "stage 2: 4 Psi + 12 Psi / N"
                                : "stage 3: 16 Psi / N",
                   psi, formula / 1048576.0, m->bytes[LLM4D_MEM_COMM] / 1048576.0,
                   m->bytes[LLM4D_MEM_ACTIVATIONS] / 1048576.0);
}

static void print_startup(llm4d_trainer *tr) {
    const llm4d_config *c = tr->cfg;
    const llm4d_model_config *m = &c->model;
    const llm4d_log *log = &tr->log;
    llm4d_log_info(log, "llm4d train: device %s, backend %s, %d threads", c->device, tr->be->name, tr->be->nthreads);
    if (tr->be->describe_memory) {
        char d[256];
        tr->be->describe_memory(tr->be, d, sizeof d);
        llm4d_log_info(log, "%s", d);
    }
    llm4d_log_info(log, "model: %s, vocab %d (padded %d), hidden %d, layers %d, heads %d (key/value %d), ffn %d, "
                   "max_position %d; %s, %s, %s MLP, %s, %s LM head",
                   llm4d_model_family(m), m->vocab_size, m->padded_vocab_size, m->hidden_size, m->num_layers,
                   m->num_attention_heads, llm4d_model_kv_heads(m),
                   m->ffn_hidden_size, m->max_position_embeddings, m->rmsnorm ? "RMSNorm" : "LayerNorm",
                   m->rope ? "rotary positions" : "learned positions", m->swiglu ? "SwiGLU" : "GELU",
                   m->no_bias ? "no biases" : "biases", m->untied ? "untied" : "tied");
    llm4d_log_info(log, "parameters: %zu (%.2fM)", tr->model.table.total_real, tr->model.table.total_real / 1e6);
    llm4d_log_info(log, "FLOPs per token (6 x matmul params + 12 x layers x seq x hidden): %.4g", tr->flops_per_token);
    if (tr->peak_gflops > 0)
        llm4d_log_info(log, "matmul peak measured at start-up (%s operands, %d threads): %.1f GFLOP/s; metrics.jsonl's "
                       "mfu is model FLOPs per second over it", prec_name(tr->precision),
                       tr->be->nthreads, tr->peak_gflops);
    llm4d_log_info(log,
                   "batch: global %lld = micro %lld x accumulate %lld x data-parallel %d; max_seq_len %d; "
                   "%lld tokens per step",
                   (long long)c->global_batch_size, (long long)c->micro_batch_size, (long long)c->accumulate_steps,
                   c->dist.dp_degree * c->dist.sharding_degree, c->data.max_seq_len,
                   (long long)c->global_batch_size * c->data.max_seq_len);
    const llm4d_corpora *cs = &tr->corpora;
    if (cs->n == 1)
        llm4d_log_info(log, "data: %s: %lld tokens in %lld documents", cs->corpus[0].path,
                       (long long)cs->corpus[0].n_tokens, (long long)cs->corpus[0].n_docs);
    else {
        llm4d_log_info(log, "data: %d corpora blended (Megatron's blending), weights %s:", cs->n,
                       cs->weighted ? "as given, normalised" : "proportional to their tokens");
        for (int d = 0; d < cs->n; d++)
            llm4d_log_info(log, "    %s: %lld tokens in %lld documents, weight %.6f", cs->corpus[d].path,
                           (long long)cs->corpus[d].n_tokens, (long long)cs->corpus[d].n_docs, cs->weight[d]);
    }
    const char *split_name[2] = {"train", "validation"};
    const llm4d_loader *lds[2] = {tr->have_loader ? &tr->loader : NULL, tr->have_eval ? &tr->eval_loader : NULL};
    for (int k = 0; k < 2; k++) {
        if (!lds[k]) continue;
        const llm4d_blend *b = &lds[k]->blend;
        if (b->single >= 0) {
            const llm4d_gpt_index *ix = &b->index[b->single];
            llm4d_log_info(log,
                           "%s split %s%s%s: documents [%lld, %lld), %lld samples of %d tokens over %lld epoch(s)%s%s",
                           split_name[k], c->data.split, cs->n > 1 ? " of " : "",
                           cs->n > 1 ? cs->corpus[b->single].path : "", (long long)ix->doc_begin,
                           (long long)ix->doc_end, (long long)ix->n_samples, c->data.max_seq_len + 1,
                           (long long)ix->num_epochs, ix->from_cache ? ", index read from cache " : "",
                           ix->from_cache ? ix->cache_base : "");
            continue;
        }
        llm4d_log_info(log, "%s split %s: %lld samples of %d tokens blended from:", split_name[k], c->data.split,
                       (long long)b->size, c->data.max_seq_len + 1);
        for (int d = 0; d < b->n; d++) {
            const llm4d_gpt_index *ix = &b->index[d];
            if (!(b->weight[d] > 0)) {
                llm4d_log_info(log, "    %s: none (%s)", cs->corpus[d].path,
                               cs->weight[d] > 0 ? "its share of the split is empty" : "weight 0");
                continue;
            }
            llm4d_log_info(log,
                           "    %s: %lld samples (%.4f), documents [%lld, %lld), index of %lld samples over %lld "
                           "epoch(s)%s",
                           cs->corpus[d].path, (long long)b->drawn[d], (double)b->drawn[d] / (double)b->size,
                           (long long)ix->doc_begin, (long long)ix->doc_end, (long long)ix->n_samples,
                           (long long)ix->num_epochs, ix->from_cache ? ", from cache" : "");
        }
    }
    if (tr->have_eval) llm4d_log_info(log, "validation: %d batches per evaluation", c->eval_iters);
    if (c->use_amp)
        llm4d_log_info(log, "mixed precision (level %s): %s matmul operands; activations and their gradients %s, "
                       "residual stream %s; fp32 master weights, gradients, optimizer states, statistics and "
                       "loss%s", c->amp_level, prec_name(tr->precision), llm4d_ftype_name(tr->model.act),
                       llm4d_ftype_name(tr->model.res),
                       tr->precision == LLM4D_PREC_FP16 ? "; dynamic loss scaling from scale_loss" : "");
    llm4d_log_info(log, "recompute: %s; activations held: %.2f MiB",
                   !m->use_recompute ? "off"
                   : llm4d_recompute_blocks(m) ? "on (full: each block's forward again before its backward)"
                                               : "on (core_attn: only the attention core, which the flash-style "
                                                 "attention's backward recomputes in every mode)",
                   tr->model.act_bytes / 1048576.0);
    for (int i = 0; i < c->n_noeffect; i++)
        llm4d_log_info(log, "config key %s is accepted but has no effect in llm4d", c->noeffect[i]);
    for (int i = 0; i < tr->engines.n; i++) {
        llm4d_engine *e = tr->engines.e[i];
        if (!e->ops->describe) continue;
        char desc[768];
        e->ops->describe(e, desc, sizeof desc);
        llm4d_log_info(log, "%s", desc);
    }
    print_memory_plan(tr);
    llm4d_trainer_log_memory(tr, "memory held by this process, by category:");
}

void llm4d_trainer_log_memory(const llm4d_trainer *tr, const char *title) {
    const llm4d_log *log = &tr->log;
    llm4d_log_info(log, "%s", title);
    if (!log->enabled) return;
    llm4d_mem_print(&tr->mem, log->out, "    ");
    fflush(log->out);
}

/* Build the loaders: rank 0 first, writing the index cache next to the data, then every other rank reads it. */
static llm4d_code init_loaders(llm4d_trainer *tr, int eval_only, llm4d_err *err) {
    const llm4d_config *c = tr->cfg;
    const int T = c->data.max_seq_len;
    llm4d_loader_opts o = {.split = c->data.split, .T = T, .seed = (int64_t)c->seed,
                           .global_batch = c->global_batch_size, .local_batch = (int)c->local_batch_size,
                           .data_rank = tr->topo.data_rank, .data_world = tr->topo.data_world,
                           .eos_id = c->model.eos_token_id};
    const int want_eval = eval_only || (c->eval_freq > 0 && c->eval_iters > 0);
    for (int phase = 0; phase < 2; phase++) {
        const int mine = (phase == 0) == (tr->topo.rank == 0);
        llm4d_code rc = LLM4D_OK;
        if (mine) {
            o.write_cache = tr->topo.rank == 0;
            if (!eval_only) {
                o.kind = LLM4D_SPLIT_TRAIN;
                o.num_samples = llm4d_gpt_num_samples(LLM4D_SPLIT_TRAIN, c->global_batch_size, c->max_steps,
                                                      c->eval_freq, c->eval_iters);
                rc = llm4d_loader_init(&tr->loader, &tr->corpora, &o, &tr->mem, err);
                if (rc == LLM4D_OK) tr->have_loader = 1;
            }
            if (rc == LLM4D_OK && want_eval) {
                o.kind = LLM4D_SPLIT_VALID;
                o.num_samples = eval_only ? c->global_batch_size * c->eval_iters
                                          : llm4d_gpt_num_samples(LLM4D_SPLIT_VALID, c->global_batch_size,
                                                                  c->max_steps, c->eval_freq, c->eval_iters);
                rc = llm4d_loader_init(&tr->eval_loader, &tr->corpora, &o, &tr->mem, err);
                if (rc == LLM4D_OK) tr->have_eval = 1;
            }
        }
        LLM4D_TRY(llm4d_trainer_agree(tr, rc, err));
    }
    return LLM4D_OK;
}

/* This rank's part of the model: its pipeline stage's blocks (and the embedding or the head), its tensor-parallel
 * slice of them, laid out as its storage engine and its pipeline schedule want it (parallel/stack.h). */
static llm4d_code build_model(llm4d_trainer *tr, llm4d_err *err) {
    const llm4d_config *cfg = tr->cfg;
    if (!tr->ppplan.P) LLM4D_TRY(llm4d_pp_plan_make(&tr->ppplan, cfg, err));
    if (tr->is_writer && tr->ppplan.P > 1) llm4d_pp_plan_log(&tr->ppplan, llm4d_recompute_blocks(&cfg->model), &tr->log);
    LLM4D_TRY(llm4d_trainer_plan(tr, err));
    /* a large model's allocation and initial draw take seconds (gpt2-en: ~4 s on 2 cores): say so first */
    llm4d_log_info(&tr->log, "allocating the memory planned and drawing the initial weights (seed %llu)",
                   (unsigned long long)cfg->seed);
    llm4d_model_part part;
    llm4d_gpt_layout layout;
    LLM4D_TRY(llm4d_stack_layout(cfg, &tr->topo, &tr->ppplan, &part, &layout, err));
    const llm4d_tp tp = llm4d_tp_make(part.mp_size > 1 ? tr->groups->axis[LLM4D_AXIS_MODEL] : NULL,
                                      part.sequence_parallel);
    const llm4d_gpt_spec spec = {&cfg->model, &part, &tp, &layout};
    LLM4D_TRY(llm4d_gpt_create(&tr->model, &spec, tr->be, &tr->mem, cfg->seed, err));
    tr->have_model = 1;
    return LLM4D_OK;
}

/* The engine stack the configuration asks for, and the executor it runs a step with. */
static llm4d_code build_engines(llm4d_trainer *tr, llm4d_err *err) {
    tr->have_engines = 1;
    LLM4D_TRY(llm4d_stack_build(&tr->engines, &tr->model, tr->cfg, &tr->topo, tr->groups, &tr->ppplan, err));
    tr->exec = llm4d_engines_executor(&tr->engines);
    tr->mbs = calloc((size_t)tr->cfg->accumulate_steps, sizeof *tr->mbs);
    if (!tr->mbs) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    return LLM4D_OK;
}

/* A run resumed at step `from` redoes the steps its predecessor logged after the checkpoint (it stopped, crashed or
 * was restarted by the launcher): their lines, training's and evaluation's, and a last line cut short, are taken
 * out of metrics.jsonl (a temporary renamed over it) before the run appends its own, so that the file stays one
 * series with every step once. */
static llm4d_code metrics_cut(const char *path, int64_t from, llm4d_err *err) {
    FILE *in = fopen(path, "r");
    if (!in) return LLM4D_OK; /* nothing logged yet */
    char tmp[LLM4D_PATH_MAX + 48];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    if (!out) {
        fclose(in);
        return llm4d_fail(err, LLM4D_EUSER, "cannot write %s: %s; choose a writable --output_dir", tmp,
                          strerror(errno));
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long long step, dropped = 0;
    while ((n = getline(&line, &cap, in)) > 0) {
        const int whole = line[n - 1] == '\n';
        const int stepped = sscanf(line, "{\"step\": %lld", &step) == 1 ||
                            sscanf(line, "{\"eval_step\": %lld", &step) == 1;
        const int later = stepped && step >= from;
        if (!whole || later) {
            dropped++;
            continue;
        }
        fputs(line, out);
    }
    free(line);
    fclose(in);
    const int bad = fflush(out) != 0 || fsync(fileno(out)) != 0;
    if (fclose(out) != 0 || bad || (dropped ? rename(tmp, path) : unlink(tmp)) != 0)
        return llm4d_fail(err, LLM4D_EIO, "cannot rewrite %s: %s", path, strerror(errno));
    return LLM4D_OK;
}

llm4d_code llm4d_trainer_init(llm4d_trainer *tr, const llm4d_config *cfg, const llm4d_topology *topo,
                              llm4d_comm_groups *groups, const llm4d_trainer_opts *opts, llm4d_err *err) {
    memset(tr, 0, sizeof *tr);
    tr->cfg = cfg;
    tr->topo = *topo;
    tr->groups = groups;
    tr->world_size = topo->world_size;
    tr->is_writer = topo->rank == 0;
    tr->debug = opts->debug;
    if (!tr->is_writer) tr->debug.debug_dump = NULL;
    tr->start_step = 1;
    tr->last_saved = -1;
    tr->log = (llm4d_log){.out = stdout, .enabled = 1};
    if (opts->plan) tr->ppplan = *opts->plan, *opts->plan = (llm4d_pp_plan){0}; /* made once, by the job's setup */
    const llm4d_model_config *m = &cfg->model;
    const llm4d_backend_opts bo = {.device = cfg->device, .ref = cfg->backend_ref, .nthreads = cfg->threads,
                                   .host_rank = groups->host_rank};
    LLM4D_TRY(llm4d_backend_create(&tr->be, &bo, err));
    LLM4D_TRY(llm4d_comm_device_create(&tr->comm_dev, tr->be, &tr->mem, err));
    llm4d_comm_groups_attach(groups, tr->comm_dev); /* tensor buffers are this backend's device memory */
    {
        char line[512];
        LLM4D_TRY(llm4d_comm_nccl_setup(groups, tr->be, line, sizeof line, err)); /* GPUs: which groups take NCCL */
        if (line[0]) llm4d_log_info(&tr->log, "%s", line);
    }
    tr->loss_scale = 1.0;
    if (cfg->use_amp) {
        tr->precision = !strcmp(cfg->amp_dtype, "float16")    ? LLM4D_PREC_FP16
                        : !strcmp(cfg->amp_dtype, "tfloat32") ? LLM4D_PREC_TF32
                                                              : LLM4D_PREC_BF16;
        if (!tr->be->set_precision)
            return llm4d_fail(err, LLM4D_EUSER,
                              "use_amp: the %s backend computes in fp32 only; drop --use_amp or use --backend cpu",
                              tr->be->name);
        LLM4D_TRY(tr->be->set_precision(tr->be, tr->precision, err));
        if (tr->precision == LLM4D_PREC_FP16) tr->loss_scale = cfg->scale_loss > 0 ? cfg->scale_loss : 32768.0;
    }
    /* every rank measures its own share of the machine, at the same moment as the others, before anything is
     * allocated: the measurement's 12 MiB of matrices are returned before the model's memory is taken, so they are
     * not part of the peak the memory plan answers for */
    if (!opts->eval_only && tr->be->matmul_peak_gflops) tr->peak_gflops = tr->be->matmul_peak_gflops(tr->be);
    /* the planner's prediction, for the same reason before anything is allocated (one layout: milliseconds) */
    if (!opts->eval_only) LLM4D_TRY(llm4d_trainer_predict_start(tr, err));
    /* rank 0 writes metrics and checkpoints there */
    if (tr->is_writer) LLM4D_TRY(mkdir_p(cfg->output_dir, err));
    if (tr->debug.debug_dump) LLM4D_TRY(mkdir_p(tr->debug.debug_dump, err));

    LLM4D_TRY(llm4d_corpora_open(&tr->corpora, cfg->data.input_dir, err));
    tr->have_corpus = 1;
    for (int d = 0; d < tr->corpora.n; d++)
        if (tr->corpora.corpus[d].max_id >= m->vocab_size)
            return llm4d_fail(err, LLM4D_EUSER,
                              "%s holds token id %lld, but the model's vocab_size is %d; tokenize with the model's "
                              "vocabulary or raise Model.vocab_size",
                              tr->corpora.corpus[d].path, (long long)tr->corpora.corpus[d].max_id, m->vocab_size);

    LLM4D_TRY(init_loaders(tr, opts->eval_only, err)); /* before the model: its plan counts what they hold */
    LLM4D_TRY(build_model(tr, err));
    LLM4D_TRY(build_engines(tr, err));
    if (!opts->eval_only) LLM4D_TRY(llm4d_trainer_async_init(tr, err)); /* --async_save's snapshot */
    const int T = cfg->data.max_seq_len;
    LLM4D_TRY(llm4d_devbatch_init(&tr->batch, tr->be, &tr->mem, (int)cfg->local_batch_size, T, err));
    tr->lr = llm4d_lr_cosine_warmup(cfg->optim.max_lr, cfg->optim.min_lr, cfg->optim.warmup_rate,
                                    cfg->optim.decay_steps);
    tr->flops_per_token = llm4d_gpt_flops_per_token(m, T);

    /* a run continues from --resume (optimizer state required), or from model_name_or_path when it is a
     * checkpoint directory (continues with its optimizer state, or starts a new run from weights only) */
    if (cfg->ckpt_dir[0])
        LLM4D_TRY(llm4d_trainer_load(tr, cfg->ckpt_dir, !opts->eval_only, err));
    else if (is_dir(m->name_or_path))
        LLM4D_TRY(llm4d_trainer_load(tr, m->name_or_path, 0, err));

    if (tr->is_writer && !opts->eval_only) {
        char path[LLM4D_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/metrics.jsonl", cfg->output_dir);
        /* a resumed run appends: metrics.jsonl keeps the whole history, each step once */
        if (tr->start_step > 1) LLM4D_TRY(metrics_cut(path, tr->start_step, err));
        tr->metrics = fopen(path, tr->start_step > 1 ? "a" : "w");
        if (!tr->metrics)
            return llm4d_fail(err, LLM4D_EUSER, "cannot write %s: %s; choose a writable --output_dir", path,
                              strerror(errno));
    }
    if (tr->debug.debug_dump) LLM4D_TRY(llm4d_trainer_dump_init(tr, err));
    if (!opts->eval_only) LLM4D_TRY(llm4d_trainer_trace_open(tr, err));
    if (!opts->eval_only) LLM4D_TRY(llm4d_trainer_write_runinfo(tr, err));
    print_startup(tr);
    llm4d_trainer_predict_log(tr);
    if (opts->eval_only && tr->last_saved >= 0)
        llm4d_log_info(&tr->log, "evaluating the checkpoint of step %lld (%s)", (long long)tr->last_saved,
                       cfg->ckpt_dir);
    else if (tr->start_step > 1)
        llm4d_log_info(&tr->log, "resuming at global step %lld", (long long)tr->start_step);
    return LLM4D_OK;
}

void llm4d_trainer_free(llm4d_trainer *tr) {
    if (!tr->cfg) return;
    cJSON_Delete(tr->runinfo);
    llm4d_trainer_trace_close(tr);
    free(tr->pred.costs);
    if (tr->metrics) fclose(tr->metrics);
    llm4d_devbatch_free(&tr->batch);
    free(tr->mbs);
    llm4d_pp_plan_free(&tr->ppplan);
    llm4d_trainer_async_free(tr);
    if (tr->have_loader) llm4d_loader_free(&tr->loader);
    if (tr->have_eval) llm4d_loader_free(&tr->eval_loader);
    if (tr->have_engines) llm4d_engines_destroy(&tr->engines);
    if (tr->have_model) llm4d_gpt_destroy(&tr->model);
    if (tr->comm_dev) {
        llm4d_comm_groups_attach(tr->groups, NULL);
        llm4d_comm_device_destroy(tr->comm_dev);
    }
    if (tr->have_corpus) llm4d_corpora_close(&tr->corpora);
    if (tr->be) tr->be->destroy(tr->be);
    memset(tr, 0, sizeof *tr);
}
