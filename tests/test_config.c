/* test_config.c — the configuration layer: defaults, YAML (libyaml, _base_, _inherited_), flags, -o overrides,
 * presets, derivation and every user error, checked against the messages a user would read.
 *
 * YAML files are written into a fresh mkdtemp directory; each check prints one line; the last line is
 * "N passed, M failed" and the exit status is non-zero when anything failed. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "config/pyval.h"
#include "config/schema.h"
#include "check.h"

typedef struct {
    int next_path;
    char dir[256];       /* mkdtemp directory */
    char src[512];       /* source tree (configs/ lives there) */
    char path[8][768];   /* rotating buffers for file paths */
    llm4d_config cfg;
    llm4d_err err;
} T;

/* A check whose line is its name when it passes, and its name and what went wrong (fmt) when it fails. */
static void check_named(const char *name, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check_named(const char *name, int ok, const char *fmt, ...) {
    char detail[2048] = "";
    if (!ok) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(detail, sizeof detail, fmt, ap);
        va_end(ap);
    }
    if (ok) check(1, "%s", name);
    else check(0, "%s: %s", name, detail);
}

/* dir/name (subdirectories created) holding content; the path stays valid for the next 7 calls */
static const char *file(T *t, const char *name, const char *content) {
    char *p = t->path[t->next_path++ % 8];
    snprintf(p, 768, "%s/%s", t->dir, name);
    for (char *s = strchr(p + strlen(t->dir) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = 0;
        mkdir(p, 0700);
        *s = '/';
    }
    FILE *f = fopen(p, "w");
    if (!f) {
        perror(p);
        exit(1);
    }
    fputs(content, f);
    fclose(f);
    return p;
}

/* defaults, then the NULL-terminated arguments, then finalize for `world` processes (0: no finalize) */
static llm4d_code run(T *t, int world, ...) {
    char *argv[64];
    int argc = 0;
    va_list ap;
    va_start(ap, world);
    for (const char *a; (a = va_arg(ap, const char *)) && argc < 63;) argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    llm4d_config_defaults(&t->cfg);
    memset(&t->err, 0, sizeof t->err);
    llm4d_code rc = llm4d_config_parse_args(&t->cfg, argc, argv, &t->err);
    if (rc == LLM4D_OK && world > 0) rc = llm4d_config_finalize(&t->cfg, world, &t->err);
    return rc;
}

/* the run gave a user error whose message holds every (NULL-terminated) word */
static void expect_error(T *t, const char *name, llm4d_code rc, ...) {
    if (rc != LLM4D_EUSER) {
        check_named(name, 0, "expected a user error, got code %d (%s)", (int)rc, rc ? t->err.msg : "no error");
        return;
    }
    va_list ap;
    va_start(ap, rc);
    for (const char *w; (w = va_arg(ap, const char *));) {
        if (!strstr(t->err.msg, w)) {
            va_end(ap);
            check_named(name, 0, "message lacks \"%s\": %s", w, t->err.msg);
            return;
        }
    }
    va_end(ap);
    check_named(name, 1, "%s", "");
}

static void expect_ok(T *t, const char *name, llm4d_code rc, int ok, const char *what) {
    if (rc != LLM4D_OK) check_named(name, 0, "unexpected error: %s", t->err.msg);
    else check_named(name, ok, "%s", what);
}

static int has_noeffect(const llm4d_config *c, const char *key) {
    for (int i = 0; i < c->n_noeffect; i++)
        if (!strcmp(c->noeffect[i], key)) return 1;
    return 0;
}

static void test_defaults(T *t) {
    llm4d_config *c = &t->cfg;
    llm4d_config_defaults(c);
    check_named("defaults are PaddleFleetX's base values with llm4d's documented changes",
                !strcmp(c->device, "cpu") && c->seed == 1024 && c->micro_batch_size == 1 && c->local_batch_size == 0 &&
                    c->global_batch_size == 0 && c->max_steps == 500000 && c->eval_freq == 0 && c->eval_iters == 10 &&
                    !strcmp(c->data.split, "949,50,1") && c->logging_freq == 1 && c->save_steps == 0 &&
                    c->dist.bucket_size_bytes == 25 * 1048576LL && c->threads == 0 && c->keep_last == 0 &&
                    c->scale_loss == 32768.0f && !strcmp(c->output_dir, "./output") && c->optim.max_lr == 5.0e-5f &&
                    c->optim.min_lr == 1.0e-5f && c->optim.warmup_rate == 0.01f && c->optim.decay_steps == 360000 &&
                    c->optim.weight_decay == 0.01f && c->optim.beta1 == 0.9f && c->optim.beta2 == 0.999f &&
                    c->optim.epsilon == 1e-8f && c->optim.grad_clip == 1.0f && c->dist.sharding_stage == 1 &&
                    c->dist.dp_degree == 0 && c->dist.mp_degree == 1 && !c->use_amp &&
                    !strcmp(c->amp_dtype, "bfloat16") && !c->model.name_or_path[0] && c->n_explicit == 0 &&
                    c->n_noeffect == 0,
                "device %s seed %llu micro %lld", c->device, (unsigned long long)c->seed,
                (long long)c->micro_batch_size);
}

static void test_default_run(T *t) {
    llm4d_config *c = &t->cfg;
    llm4d_code rc = run(t, 1, NULL);
    expect_ok(t, "no arguments: gpt2-en preset, batch 1, dp 1", rc,
              !strcmp(c->model.name_or_path, "gpt2-en") && c->model.hidden_size == 768 && c->model.num_layers == 12 &&
                  c->model.num_attention_heads == 12 && c->model.vocab_size == 50257 &&
                  c->model.padded_vocab_size == 50304 && c->model.ffn_hidden_size == 3072 &&
                  c->model.max_position_embeddings == 1024 && c->model.eos_token_id == 50256 &&
                  c->global_batch_size == 1 && c->local_batch_size == 1 && c->accumulate_steps == 1 &&
                  c->dist.dp_degree == 1 && !c->dist.use_sharding && !strcmp(c->model.recompute_granularity, "full"),
              "derived values differ");
}

static void test_presets(T *t) {
    static const struct { const char *name; int h, l, heads, pos; } want[] = {
        {"gpt2-tiny", 64, 2, 4, 256},       {"gpt2-en", 768, 12, 12, 1024},    {"gpt2-medium-en", 1024, 24, 16, 1024},
        {"gpt3-125m", 768, 12, 12, 2048},   {"gpt3-350m", 1024, 24, 16, 2048}, {"gpt3-760m", 1536, 24, 16, 2048},
        {"gpt3-1.3b", 2048, 24, 16, 2048},  {"gpt3-2.7b", 2560, 32, 32, 2048}, {"gpt3-6.7b", 4096, 32, 32, 2048},
        {"gpt3-13b", 5120, 40, 40, 2048},   {"gpt3-175b", 12288, 96, 96, 2048}};
    int bad = 0;
    char which[64] = "";
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        llm4d_model_config m;
        memset(&m, 0, sizeof m);
        llm4d_err e = {0};
        if (llm4d_model_preset(&m, want[i].name, &e) || m.hidden_size != want[i].h || m.num_layers != want[i].l ||
            m.num_attention_heads != want[i].heads || m.max_position_embeddings != want[i].pos ||
            m.vocab_size != 50257 || m.ffn_hidden_size != 4 * want[i].h || m.hidden_dropout_prob != 0.1f ||
            m.attention_probs_dropout_prob != 0.1f || m.initializer_range != 0.02f || m.eos_token_id != 50256) {
            bad++;
            snprintf(which, sizeof which, "%s", want[i].name);
        }
    }
    check_named("all 11 presets have the documented geometry", bad == 0, "%d wrong, e.g. %s", bad, which);
    llm4d_model_config m;
    llm4d_code rc = llm4d_model_preset(&m, "gpt4", &t->err);
    expect_error(t, "unknown preset lists the presets", rc, "gpt4", "gpt2-tiny", "gpt3-175b", NULL);
    rc = run(t, 1, "--model_name_or_path", "gpt5-xl", NULL);
    expect_error(t, "unknown --model_name_or_path lists the presets", rc, "gpt5-xl", "gpt3-1.3b", NULL);
    rc = run(t, 1, "--model_name_or_path", t->dir, "-o", "Model.hidden_size=96", "-o", "Model.num_attention_heads=4",
             NULL);
    expect_ok(t, "a directory as model_name_or_path is a checkpoint: geometry left to YAML/defaults", rc,
              t->cfg.model.hidden_size == 96 && t->cfg.model.num_layers == 24 && t->cfg.model.vocab_size == 50304,
              "geometry changed");
}

static void test_yaml_values(T *t) {
    llm4d_config *c = &t->cfg;
    const char *y = file(t, "values.yaml",
                         "# values as PyYAML + ast.literal_eval read them\n"
                         "Optimizer:\n"
                         "  lr:\n"
                         "    max_lr: 1e-5        # a string to PyYAML, a float after literal_eval\n"
                         "    min_lr: '2e-6'      # quoted: still literal_eval'd\n"
                         "  epsilon: 1.0e-6\n"
                         "Model:\n"
                         "  model_name_or_path: gpt2-tiny\n"
                         "  use_recompute: yes   # YAML 1.1 boolean\n"
                         "  hidden_size: &w 128\n"
                         "  ffn_hidden_size: *w\n"
                         "Data:\n"
                         "  Train:\n"
                         "    dataset:\n"
                         "      split: '98,2,0'\n"
                         "      max_seq_len: 64\n"
                         "Global:\n"
                         "  global_batch_size:\n"
                         "  local_batch_size: 4\n"
                         "  micro_batch_size: 2\n"
                         "Profiler:\n");
    llm4d_code rc = run(t, 1, "-c", y, NULL);
    expect_ok(t, "YAML \"1e-5\" and '2e-6' become floats", rc,
              c->optim.max_lr == 1e-5f && c->optim.min_lr == 2e-6f && c->optim.epsilon == 1e-6f, "wrong values");
    expect_ok(t, "YAML yes, anchors, quoted tuple split, empty value and empty section", rc,
              c->model.use_recompute == 1 && c->model.ffn_hidden_size == 128 && !strcmp(c->data.split, "98,2,0") &&
                  c->local_batch_size == 4 && c->global_batch_size == 4 && c->accumulate_steps == 2,
              "wrong values");
    expect_ok(t, "explicit YAML hidden_size beats the preset, the rest comes from it", rc,
              c->model.hidden_size == 128 && c->model.num_layers == 2 && c->model.num_attention_heads == 4 &&
                  c->model.max_position_embeddings == 256 && c->model.vocab_size == 50257,
              "geometry wrong");
    check_named("explicit_keys records YAML keys",
                llm4d_config_is_explicit(c, "Model.hidden_size") &&
                    llm4d_config_is_explicit(c, "Optimizer.lr.max_lr") &&
                    !llm4d_config_is_explicit(c, "Model.num_layers") &&
                    !llm4d_config_is_explicit(c, "Global.global_batch_size"),
                "n_explicit %d", c->n_explicit);

    y = file(t, "geom.yaml", "Model:\n  hidden_size: 256\n  num_attention_heads: 8\n");
    rc = run(t, 1, "-c", y, "--max_seq_len", "128", NULL);
    expect_ok(t, "geometry keys without a preset: no gpt2-en, other keys from the defaults", rc,
              c->model.hidden_size == 256 && c->model.num_layers == 24 && c->model.vocab_size == 50304 &&
                  c->model.ffn_hidden_size == 1024 && !c->model.name_or_path[0],
              "hidden %d layers %d vocab %d preset '%s'");
    rc = run(t, 1, "--model_name_or_path", "gpt3-125m", "-o", "Model.num_layers=3", "--max_seq_len", "2048", NULL);
    expect_ok(t, "-o Model.num_layers beats the gpt3-125m preset", rc,
              c->model.num_layers == 3 && c->model.hidden_size == 768 && c->model.max_position_embeddings == 2048,
              "geometry wrong");
}

static void test_base(T *t) {
    llm4d_config *c = &t->cfg;
    file(t, "inh/root.yaml",
         "Engine:\n  max_steps: 1000\n  logging_freq: 7\n"
         "Model:\n  hidden_dropout_prob: 0.2\n");
    file(t, "inh/sub/base.yaml",
         "_base_: ../root.yaml\n"
         "Model:\n  model_name_or_path: gpt2-tiny\n  hidden_size: 128\n"
         "Optimizer:\n  lr:\n    max_lr: 1.0e-3\n    min_lr: 1.0e-4\n"
         "Data:\n  Train:\n    dataset:\n      split: [98, 2, 0]\n      max_seq_len: 64\n"
         "Distributed:\n  sharding:\n    sharding_degree: 2\n    sharding_stage: 2\n");
    const char *child = file(t, "inh/sub/child.yaml",
                             "_base_: ./base.yaml\n"
                             "Engine:\n  max_steps: 300\n"
                             "Optimizer:\n  lr:\n    max_lr: 3.0e-3\n"
                             "Data:\n  Train:\n    dataset:\n      split: [90, 10]\n"
                             "Distributed:\n  sharding:\n    _inherited_: False\n    sharding_degree: 4\n");
    llm4d_code rc = run(t, 4, "-c", child, NULL);
    expect_ok(t, "_base_ chain (relative to each file) deep-merges, child wins", rc,
              c->max_steps == 300 && c->logging_freq == 7 && c->model.hidden_dropout_prob == 0.2f &&
                  c->model.hidden_size == 128 && c->optim.max_lr == 3e-3f && c->optim.min_lr == 1e-4f &&
                  c->data.max_seq_len == 64,
              "merged values wrong");
    expect_ok(t, "_base_ lists are replaced, not merged", rc, !strcmp(c->data.split, "90,10"), c->data.split);
    expect_ok(t, "_inherited_: False replaces the base sub-dict", rc,
              c->dist.sharding_degree == 4 && c->dist.sharding_stage == 1 && c->dist.dp_degree == 1,
              "sharding not replaced");
    const char *a = file(t, "cyc/a.yaml", "_base_: b.yaml\nEngine:\n  max_steps: 3\n");
    file(t, "cyc/b.yaml", "_base_: ./a.yaml\n");
    rc = run(t, 1, "-c", a, NULL);
    expect_error(t, "_base_ cycle is detected", rc, "_base_ cycle", "a.yaml", "b.yaml", NULL);
    const char *m = file(t, "nobase.yaml", "_base_: missing.yaml\n");
    rc = run(t, 1, "-c", m, NULL);
    expect_error(t, "missing _base_ file names both files", rc, "missing.yaml", "nobase.yaml", NULL);
}

static void test_flags_and_overrides(T *t) {
    llm4d_config *c = &t->cfg;
    const char *y = file(t, "flags.yaml", "Engine:\n  max_steps: 50\n  logging_freq: 5\n"
                                          "Global:\n  device: gpu\n");
    llm4d_code rc = run(t, 0, "-c", y, "--max_steps", "60", "--logging_freq=9", "--use_amp", "True",
                        "--use_recompute=1", "--sharding_offload", "false", "--backend", "ref", "--bucket_size_mb",
                        "2", "--resume", "out/step_10", "--split", "969,30,1", "--max_lr", "1e-4", "--seed", "7",
                        "--threads", "2", "--keep_last", "3", "--eval_iters", "4", "--device=cpu", NULL);
    expect_ok(t, "flags (--flag value and --flag=value) override YAML", rc,
              c->max_steps == 60 && c->logging_freq == 9 && c->use_amp == 1 && c->model.use_recompute == 1 &&
                  c->dist.sharding_offload == 0 && c->backend_ref == 1 && c->dist.bucket_size_bytes == 2 * 1048576 &&
                  !strcmp(c->ckpt_dir, "out/step_10") && !strcmp(c->data.split, "969,30,1") &&
                  c->optim.max_lr == 1e-4f && c->seed == 7 && c->threads == 2 && c->keep_last == 3 &&
                  c->eval_iters == 4 && !strcmp(c->device, "cpu"),
              "flag values wrong");
    rc = run(t, 0, "--max_steps", "5", "-o", "Engine.max_steps=6", NULL);
    expect_ok(t, "-o beats a flag given before it", rc, c->max_steps == 6, "max_steps wrong");
    rc = run(t, 0, "-o", "Engine.max_steps=6", "--max_steps", "5", NULL);
    expect_ok(t, "-o beats a flag given after it", rc, c->max_steps == 6, "max_steps wrong");
    rc = run(t, 0, "-o", "Data.Train.dataset.split=[969,30,1]", "-o", "Global.device=gpu",
             "--override=Optimizer.lr.min_lr=1e-6", "-o", "Engine.mix_precision.use_pure_fp16=True", "-o",
             "Engine.save_load.output_dir=/tmp/x y", NULL);
    expect_ok(t, "-o values: list, bare word, float, legacy alias, string with space", rc,
              !strcmp(c->data.split, "969,30,1") && !strcmp(c->device, "gpu") && c->optim.min_lr == 1e-6f &&
                  c->use_amp == 1 && !strcmp(c->output_dir, "/tmp/x y") &&
                  llm4d_config_is_explicit(c, "Engine.mix_precision.enable"),
              "override values wrong");
    rc = run(t, 1, "--model_name_or_path", "gpt2-tiny", "--max_seq_len", "64", "-o", "Model.ffn_hidden_size=None",
             NULL);
    expect_ok(t, "-o key=None resets to unset", rc, c->model.ffn_hidden_size == 256, "ffn wrong");
    y = file(t, "noclip.yaml", "Optimizer:\n  grad_clip:\n");
    rc = run(t, 0, "-c", y, NULL);
    expect_ok(t, "an empty Optimizer.grad_clip means no clipping, as in PaddleFleetX", rc, c->optim.grad_clip == 0,
              "clip not 0");
    rc = run(t, 1, "--model_name_or_path", "gpt2-tiny", "--max_seq_len", "64", "--decay_steps", "0",
             "--max_steps", "123", NULL);
    expect_ok(t, "decay_steps 0 -> max_steps; ffn 0 -> 4h", rc,
              c->optim.decay_steps == 123 && c->model.ffn_hidden_size == 256, "derived wrong");
}

static void test_parallel(T *t) {
    llm4d_config *c = &t->cfg;
    llm4d_code rc = run(t, 8, "--model_name_or_path", "gpt2-en", "--mp_degree", "2", "--sharding_degree", "2",
                        "--micro_batch_size", "2", "--global_batch_size", "16", NULL);
    expect_ok(t, "dp derived from world 8 / (mp 2 x sharding 2); local and accumulation derived", rc,
              c->dist.dp_degree == 2 && c->local_batch_size == 4 && c->accumulate_steps == 2 &&
                  c->dist.use_sharding == 1 && c->model.padded_vocab_size == 50432,
              "derived wrong");
    rc = run(t, 8, "--mp_degree", "8", "--model_name_or_path", "gpt3-1.3b", NULL);
    expect_ok(t, "padded vocabulary for mp 8 is 51200", rc, c->model.padded_vocab_size == 51200 &&
              c->global_batch_size == 1, "padding wrong");
    rc = run(t, 4, "--dp_degree", "2", "--pp_degree", "2", "--model_name_or_path", "gpt2-tiny", "--max_seq_len",
             "64", "--local_batch_size", "8", "--micro_batch_size", "2", NULL);
    expect_ok(t, "local batch given: global = local x dp x sharding", rc,
              c->global_batch_size == 16 && c->accumulate_steps == 4, "batch wrong");
    const char *y = file(t, "seedblock.yaml", "Distributed:\n  sharding:\n    sharding_degree: 8\n"
                                              "    sharding_stage: 2\n    sharding_offload: False\n");
    rc = run(t, 8, "-c", y, NULL);
    expect_ok(t, "the seed's sharding block: 8 processes, stage 2", rc,
              c->dist.sharding_degree == 8 && c->dist.sharding_stage == 2 && c->dist.dp_degree == 1 &&
                  c->global_batch_size == 8,
              "sharding wrong");
    rc = run(t, 2, "--dp_degree", "2", "--mp_degree", "2", NULL);
    expect_error(t, "product of degrees != processes shows the arithmetic", rc,
                 "dp_degree 2 x mp_degree 2 x pp_degree 1 x sharding_degree 1 = 4, but 2 processes were started; "
                 "make the product equal the number of processes", NULL);
    rc = run(t, 4, "--mp_degree", "3", NULL);
    expect_error(t, "dp cannot be derived when mp x pp x sharding does not divide world", rc, "= 3", "4 processes",
                 NULL);
    rc = run(t, 1, "--mp_degree", "0", NULL);
    expect_error(t, "degree 0 is refused", rc, "mp_degree", ">= 1", NULL);
    /* whether the layers split over the stages is the pipeline's check (llm4d_pp_split; tests/test_pp.sh) */
    rc = run(t, 2, "--model_name_or_path", "gpt2-tiny", "--pp_degree", "2", "--pp_layers", "1,x", NULL);
    expect_error(t, "pp_layers must be block counts", rc, "pp_layers must be a list of non-negative whole numbers",
                 "got '1,x'", NULL);
    rc = run(t, 2, "--model_name_or_path", "gpt2-tiny", "--max_seq_len", "64", "--pp_degree", "2", "--pp_layers",
             "[1, 1]", NULL);
    expect_ok(t, "pp_layers as a list", rc, !strcmp(c->dist.pp_layers, "1,1"), "pp_layers wrong");
    rc = run(t, 8, "--model_name_or_path", "gpt2-tiny", "--max_seq_len", "64", "--mp_degree", "8", NULL);
    expect_error(t, "heads not divisible by mp_degree", rc, "num_attention_heads 4", "mp_degree 8", NULL);
    rc = run(t, 1, "-o", "Model.hidden_size=100", "-o", "Model.num_attention_heads=16", NULL);
    expect_error(t, "heads must divide hidden_size", rc, "num_attention_heads 16", "hidden_size 100", NULL);
    rc = run(t, 1, "--micro_batch_size", "3", "--global_batch_size", "8", NULL);
    expect_error(t, "global batch not a multiple of micro batch", rc, "global_batch_size 8",
                 "not a multiple of micro_batch_size 3", NULL);
    rc = run(t, 2, "--dp_degree", "2", "--global_batch_size", "8", "--local_batch_size", "8", NULL);
    expect_error(t, "global != local x dp x sharding", rc, "global_batch_size 8", "local_batch_size 8",
                 "dp_degree 2", "= 16", NULL);
    rc = run(t, 1, "--local_batch_size", "6", "--micro_batch_size", "4", NULL);
    expect_error(t, "local batch not a multiple of micro batch", rc, "local_batch_size 6", "micro_batch_size 4", NULL);
    rc = run(t, 1, "--sharding_stage", "4", NULL);
    expect_error(t, "sharding_stage 4 is refused", rc, "sharding_stage", "1, 2 or 3", "got 4", NULL);
    rc = run(t, 1, "--sharding_offload", "true", NULL);
    expect_error(t, "sharding_offload needs sharding_degree > 1", rc, "sharding_offload", "sharding_degree", NULL);
    rc = run(t, 2, "--sharding_degree", "2", "--use_sharding", "false", NULL);
    expect_error(t, "--use_sharding false with sharding_degree 2", rc, "use_sharding", "sharding_degree 2", NULL);
    rc = run(t, 1, "--device", "gpu", "--dp_degree", "1", NULL);
    expect_ok(t, "gpu is accepted here (the trainer decides)", rc, !strcmp(t->cfg.device, "gpu"), "device");
}

static void test_value_errors(T *t) {
    llm4d_code rc = run(t, 1, "--max_lr", "-1e-4", NULL);
    expect_error(t, "negative max_lr", rc, "max_lr", ">= 0", NULL);
    rc = run(t, 1, "--min_lr", "-1", "--max_lr", "1", NULL);
    expect_error(t, "negative min_lr", rc, "min_lr", ">= 0", NULL);
    rc = run(t, 1, "--max_lr", "1e-5", "--min_lr", "5e-5", NULL);
    expect_error(t, "min_lr above max_lr", rc, "min_lr", "max_lr", NULL);
    rc = run(t, 1, "--warmup_rate", "1.5", NULL);
    expect_error(t, "warmup_rate outside [0, 1]", rc, "warmup_rate", "[0, 1]", NULL);
    rc = run(t, 1, "-o", "Model.hidden_dropout_prob=1.0", NULL);
    expect_error(t, "dropout 1.0 is refused", rc, "hidden_dropout_prob", "[0, 1)", NULL);
    rc = run(t, 1, "--grad_clip", "-0.5", NULL);
    expect_error(t, "negative grad_clip", rc, "grad_clip", ">= 0", NULL);
    rc = run(t, 1, "--max_steps", "0", NULL);
    expect_error(t, "max_steps 0", rc, "max_steps", ">= 1", NULL);
    rc = run(t, 1, "--logging_freq", "0", NULL);
    expect_error(t, "logging_freq 0", rc, "logging_freq", ">= 1", NULL);
    rc = run(t, 1, "--model_name_or_path", "gpt2-tiny", "--max_seq_len", "512", NULL);
    expect_error(t, "max_seq_len above max_position_embeddings names both", rc, "max_seq_len 512",
                 "max_position_embeddings 256", NULL);
    rc = run(t, 1, "--device", "tpu", NULL);
    expect_error(t, "device other than cpu/gpu/guard", rc, "'tpu'", "the devices are cpu, guard and cuda (gpu)", NULL);
    rc = run(t, 1, "-o", "Engine.mix_precision.dtype=int8", NULL);
    expect_error(t, "AMP dtype other than bfloat16/float16/tfloat32", rc, "int8", "bfloat16, float16 or tfloat32", NULL);
    rc = run(t, 1, "--model_type", "MoE", NULL);
    expect_error(t, "model_type other than GPT", rc, "'MoE'", "GPT", NULL);
    rc = run(t, 1, "--model_type", "gpt2", NULL);
    expect_ok(t, "model_type gpt2 is an alias of GPT", rc, 1, "");
    rc = run(t, 1, "-o", "Model.recompute_granularity=half", NULL);
    expect_error(t, "unknown recompute_granularity", rc, "recompute_granularity", "core_attn", NULL);
    rc = run(t, 1, "-o", "Model.recompute_granularity=full_attn", NULL);
    expect_error(t, "full_attn refused, not run as full", rc, "full_attn", "not implemented", NULL);
    rc = run(t, 1, "--backend", "gpu", NULL);
    expect_error(t, "--backend other than cpu/ref", rc, "--backend", "cpu or ref", NULL);
    rc = run(t, 1, "--split", "a,b", NULL);
    expect_error(t, "malformed --split", rc, "--split", "949", NULL);
}

static void test_syntax_errors(T *t) {
    const char *y = file(t, "bad.yaml", "Model:\n  hidden_size: 1\n   oops: [1, 2\nEngine:\n  max_steps: 1\n");
    llm4d_code rc = run(t, 0, "-c", y, NULL);
    expect_error(t, "malformed YAML gives file:line:column and libyaml's problem", rc, "bad.yaml:3:",
                 "YAML syntax error", NULL);
    y = file(t, "list.yaml", "- a\n- b\n");
    rc = run(t, 0, "-c", y, NULL);
    expect_error(t, "top level that is not a mapping", rc, "list.yaml", "mapping", NULL);
    y = file(t, "typo.yaml", "Model:\n  hiden_size: 768\n");
    rc = run(t, 0, "-c", y, NULL);
    expect_error(t, "unknown key names file and nearest key", rc, "unknown key 'Model.hiden_size'", "typo.yaml",
                 "did you mean 'Model.hidden_size'?", NULL);
    y = file(t, "section.yaml", "Global:\n  max_steps: 10\n");
    rc = run(t, 0, "-c", y, NULL);
    expect_error(t, "key in the wrong section suggests the right one", rc, "Global.max_steps",
                 "did you mean 'Engine.max_steps'?", NULL);
    y = file(t, "sect2.yaml", "Modle:\n  hidden_size: 768\n");
    rc = run(t, 0, "-c", y, NULL);
    expect_error(t, "misspelt section suggests the section", rc, "'Modle'", "did you mean 'Model'?", NULL);
    y = file(t, "type.yaml", "Model:\n  hidden_size: abc\n");
    rc = run(t, 0, "-c", y, NULL);
    expect_error(t, "wrong type names key and expected type", rc, "Model.hidden_size", "an integer", "'abc'",
                 "type.yaml", NULL);
    y = file(t, "type2.yaml", "Model:\n  use_recompute: maybe\n");
    rc = run(t, 0, "-c", y, NULL);
    expect_error(t, "non-boolean for a boolean key", rc, "Model.use_recompute", "boolean", NULL);
    y = file(t, "type3.yaml", "Model: 5\n");
    rc = run(t, 0, "-c", y, NULL);
    expect_error(t, "a value where a section belongs", rc, "'Model'", "section", NULL);
    y = file(t, "type4.yaml", "Model:\n  hidden_size:\n    a: 1\n");
    rc = run(t, 0, "-c", y, NULL);
    expect_error(t, "a mapping where a value belongs", rc, "Model.hidden_size", "mapping", NULL);
    rc = run(t, 0, "-c", "/nonexistent/dir/cfg.yaml", NULL);
    expect_error(t, "missing -c file", rc, "cannot read config file", "/nonexistent/dir/cfg.yaml", NULL);
    rc = run(t, 0, "--max_l", "1e-4", NULL);
    expect_error(t, "unknown flag suggests the nearest", rc, "unknown flag '--max_l'", "did you mean '--max_lr'?",
                 NULL);
    rc = run(t, 0, "--hidden_size", "128", NULL);
    expect_error(t, "unknown flag without a near one points to --help", rc, "unknown flag '--hidden_size'", NULL);
    rc = run(t, 0, "--max_lr", NULL);
    expect_error(t, "flag at the end without a value", rc, "--max_lr", "needs a value", NULL);
    rc = run(t, 0, "--output_dir", "--max_lr", "1", NULL);
    expect_error(t, "flag followed by another flag has no value", rc, "--output_dir", "needs a value", NULL);
    rc = run(t, 0, "--use_amp", "-o", "Engine.max_steps=3", NULL);
    expect_error(t, "flag followed by -o has no value", rc, "--use_amp", "needs a value", NULL);
    rc = run(t, 0, "-c", NULL);
    expect_error(t, "-c without a file", rc, "-c", "needs a value", NULL);
    rc = run(t, 0, "--micro_batch_size", "two", NULL);
    expect_error(t, "wrong type for a flag", rc, "--micro_batch_size", "integer", "'two'", NULL);
    rc = run(t, 0, "-o", "Engine.max_steps", NULL);
    expect_error(t, "-o without '='", rc, "exactly one '='", NULL);
    rc = run(t, 0, "-o", "Engine.max_steps=1=2", NULL);
    expect_error(t, "-o with two '='", rc, "exactly one '='", NULL);
    rc = run(t, 0, "-o", "Engine.max_step=1", NULL);
    expect_error(t, "-o unknown key suggests", rc, "Engine.max_step", "did you mean 'Engine.max_steps'?", NULL);
    rc = run(t, 0, "-o", "Optimizer.lr=1", NULL);
    expect_error(t, "-o on a section", rc, "section", NULL);
    rc = run(t, 0, "train", NULL);
    expect_error(t, "positional argument", rc, "unexpected argument 'train'", NULL);
    rc = run(t, 0, "-c", "a.yaml", "-c", "b.yaml", NULL);
    expect_error(t, "two -c files", rc, "-c given twice", NULL);
}

static void test_noeffect_and_legacy(T *t) {
    llm4d_config *c = &t->cfg;
    const char *y = file(t, "noeff.yaml",
                         "Global:\n  flags:\n    FLAGS_cudnn_deterministic: True\n"
                         "Model:\n  fused_linear: True\n  fuse_attn_qkv: True\n  sequence_parallel: False\n"
                         "  type_vocab_size: 16\n"
                         "Data:\n  Train:\n    loader:\n      num_workers: 4\n    sampler:\n      shuffle: False\n"
                         "Optimizer:\n  name: FusedAdamW\n  tensor_fusion: True\n"
                         "Profiler:\n  enable: True\n  scheduler: [1, 5]\n"
                         "Engine:\n  mix_precision:\n    custom_black_list: [\"reduce_sum\", "
                         "\"c_softmax_with_cross_entropy\", \"elementwise_div\"]\n");
    llm4d_code rc = run(t, 0, "-c", y, "-o", "Distributed.hcg=Other", NULL);
    expect_ok(t, "no-effect keys set to other values are listed", rc,
              has_noeffect(c, "Model.fused_linear") && has_noeffect(c, "Data.Train.loader.num_workers") &&
                  has_noeffect(c, "Optimizer.tensor_fusion") && has_noeffect(c, "Profiler.enable") &&
                  has_noeffect(c, "Global.flags") && has_noeffect(c, "Distributed.hcg"),
              "noeffect list incomplete");
    expect_ok(t, "no-effect keys at their neutral values are not listed", rc,
              !has_noeffect(c, "Model.fuse_attn_qkv") && !has_noeffect(c, "Model.sequence_parallel") &&
                  !has_noeffect(c, "Optimizer.name") && !has_noeffect(c, "Profiler.scheduler") &&
                  !has_noeffect(c, "Data.Train.sampler.shuffle") && !has_noeffect(c, "Model.type_vocab_size") &&
                  !has_noeffect(c, "Engine.mix_precision.custom_black_list") && c->n_noeffect == 6,
              "extra entries");
    rc = run(t, 0, "-c", y, "-o", "Model.fused_linear=False", NULL);
    expect_ok(t, "-o back to the neutral value drops the entry", rc, !has_noeffect(c, "Model.fused_linear"), "");

    y = file(t, "legacy.yaml",
             "Global:\n  device: cpu\n  seed: 1024\n"
             "Engine:\n  max_steps: 500\n  accumulate_steps:\n  mix_precision:\n    use_pure_fp16: True\n"
             "    scale_loss: 32768.0\n  save_load:\n    save_steps: 1000\n    output_dir: ./output\n    ckpt_dir:\n"
             "Data:\n  batch_size:\n    global_batch_size:\n    local_batch_size: 8\n    micro_batch_size: 4\n"
             "  dataset:\n    input_dir: ./data\n    split: '949,50,1'\n    max_seq_len: 128\n"
             "Model:\n  vocab_size: 50304\n  hidden_size: 256\n  num_layers: 4\n  num_attention_heads: 4\n"
             "  ffn_hidden_size:\n  max_position_embeddings: 1024\n  type_vocab_size: 16\n  use_recompute: True\n"
             "  recompute_granularity:\n  fused_linear: True\n"
             "Distributed:\n  dp_degree:\n  mp_degree: 1\n  pp_degree: 1\n"
             "  sharding:\n    sharding_degree: 1\n    sharding_stage: 1\n    sharding_offload: False\n"
             "Fused:\n  tensor_fusion: False\n"
             "Optimizer:\n  weight_decay: 0.01\n  adam_beta1: 0.9\n  adam_beta2: 0.95\n  adam_epsilon: 1.0e-8\n"
             "  lr:\n    decay_steps: 360000\n    warmup_rate: 0.01\n    max_lr: 5.0e-5\n    min_lr: 1.0e-5\n"
             "  grad_clip: 0.5\n");
    rc = run(t, 1, "-c", y, NULL);
    expect_ok(t, "legacy 2022 schema (Data.batch_size, Data.dataset, adam_*, scalar grad_clip, use_pure_fp16)", rc,
              c->local_batch_size == 8 && c->micro_batch_size == 4 && c->accumulate_steps == 2 &&
                  c->data.max_seq_len == 128 && !strcmp(c->data.input_dir, "./data") && c->optim.beta2 == 0.95f &&
                  c->optim.grad_clip == 0.5f && c->use_amp == 1 && c->model.hidden_size == 256 &&
                  c->model.ffn_hidden_size == 1024 && llm4d_config_is_explicit(c, "Global.local_batch_size") &&
                  has_noeffect(c, "Model.fused_linear"),
              "legacy values wrong");
}

/* every file in configs/ loads and finalizes for its intended number of processes */
static void test_shipped_configs(T *t) {
    llm4d_config *c = &t->cfg;
    char p[1024];
    snprintf(p, sizeof p, "%s/configs/pretrain_gpt_base.yaml", t->src);
    llm4d_code rc = run(t, 0, "-c", p, NULL);
    llm4d_config *d = malloc(sizeof *d);
    llm4d_config_defaults(d);
    /* the base file spells out the built-in defaults: apart from the bookkeeping lists, nothing may differ */
    int same = rc == LLM4D_OK && c->n_noeffect == 0;
    if (same) {
        c->n_explicit = d->n_explicit;
        memcpy(c->explicit_keys, d->explicit_keys, sizeof c->explicit_keys);
        same = !memcmp(c, d, sizeof *c);
    }
    free(d);
    if (rc) check_named("configs/pretrain_gpt_base.yaml equals the built-in defaults", 0, "%s", t->err.msg);
    else check_named("configs/pretrain_gpt_base.yaml equals the built-in defaults", same, "n_noeffect %d (%s)",
                     c->n_noeffect, c->n_noeffect ? c->noeffect[0] : "field values differ");
    snprintf(p, sizeof p, "%s/configs/gpt2-tiny.yaml", t->src);
    rc = run(t, 1, "-c", p, NULL);
    expect_ok(t, "configs/gpt2-tiny.yaml", rc,
              c->model.hidden_size == 64 && c->model.num_layers == 2 && c->data.max_seq_len == 64 &&
                  c->micro_batch_size == 4 && c->global_batch_size == 8 && c->accumulate_steps == 2 && c->max_steps == 200 &&
                  c->optim.max_lr == 1e-3f && c->optim.min_lr == 1e-4f && c->optim.warmup_rate == 0.05f &&
                  c->optim.decay_steps == 200 && !strcmp(c->data.input_dir, "./data"),
              "values wrong");
    snprintf(p, sizeof p, "%s/configs/gpt2-en.yaml", t->src);
    rc = run(t, 1, "-c", p, NULL);
    expect_ok(t, "configs/gpt2-en.yaml", rc, c->model.hidden_size == 768 && c->model.num_layers == 12 &&
              c->data.max_seq_len == 1024, "values wrong");
    snprintf(p, sizeof p, "%s/configs/sharding8_stage2.yaml", t->src);
    rc = run(t, 8, "-c", p, NULL);
    expect_ok(t, "configs/sharding8_stage2.yaml on 8 processes", rc,
              c->dist.sharding_degree == 8 && c->dist.sharding_stage == 2 && !c->dist.sharding_offload &&
                  c->dist.dp_degree == 1 && c->dist.use_sharding,
              "values wrong");
}

static void test_help(void) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    llm4d_config_print_help(f);
    fclose(f);
    int n, missing = 0;
    const char *first = "";
    const llm4d_key *k = llm4d_keys(&n);
    for (int i = 0; i < n; i++) {
        if (!strstr(buf, k[i].key) || (k[i].flag && !strstr(buf, k[i].flag))) {
            if (!missing) first = k[i].key;
            missing++;
        }
    }
    check_named("--help lists every key and flag", missing == 0, "%d missing, e.g. %s", missing, first);
    check_named("--help explains precedence, presets and no-effect keys",
                strstr(buf, "without effect") && strstr(buf, "gpt3-175b") && strstr(buf, "-o beats a flag") &&
                    strstr(buf, "the preset is gpt2-en"),
                "help text incomplete");
    free(buf);
}

static void test_pyval(void) {
    static const struct { const char *text; const char *repr; } cases[] = {
        {"949,50,1", "[949, 50, 1]"}, {"[969, 30, 1]", "[969, 30, 1]"}, {"(1,)", "[1]"}, {"1e-5", "1e-05"},
        {"-3", "-3"}, {"1_000", "1000"}, {"0x10", "16"}, {"'a b'", "'a b'"}, {"\"x\" 'y'", "'xy'"},
        {"True", "True"}, {"None", "None"}, {"5.", "5.0"}, {"[1, [2, 'z']]", "[1, [2, 'z']]"}, {"abc", "'abc'"},
        {"1.2.3", "'1.2.3'"}, {"0123", "'0123'"}, {"1j", "'1j'"}, {"[1, 2", "'[1, 2'"}, {"true", "'true'"},
        {"{}", "{}"}};
    int bad = 0;
    char got[128] = "", which[64] = "";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        llm4d_pv v;
        char r[128];
        if (llm4d_pv_from_text(cases[i].text, &v)) {
            bad++;
            continue;
        }
        llm4d_pv_repr(&v, r, sizeof r);
        llm4d_pv_free(&v);
        if (strcmp(r, cases[i].repr)) {
            bad++;
            snprintf(which, sizeof which, "%s", cases[i].text);
            snprintf(got, sizeof got, "%s", r);
        }
    }
    check_named("Python literal_eval with string fallback", bad == 0, "%d wrong, e.g. %s -> %s", bad, which, got);
    static const struct { const char *text; int plain; const char *repr; } ycases[] = {
        {"", 1, "None"}, {"~", 1, "None"}, {"null", 1, "None"}, {"yes", 1, "True"}, {"Off", 1, "False"},
        {"1.0e-8", 1, "1e-08"}, {"yes", 0, "'yes'"}, {"", 0, "''"}, {"None", 0, "None"}};
    bad = 0;
    for (size_t i = 0; i < sizeof ycases / sizeof ycases[0]; i++) {
        llm4d_pv v;
        char r[128];
        if (llm4d_pv_from_yaml_scalar(ycases[i].text, ycases[i].plain, &v)) {
            bad++;
            continue;
        }
        llm4d_pv_repr(&v, r, sizeof r);
        llm4d_pv_free(&v);
        if (strcmp(r, ycases[i].repr)) {
            bad++;
            snprintf(which, sizeof which, "%s", ycases[i].text);
            snprintf(got, sizeof got, "%s", r);
        }
    }
    check_named("PyYAML plain-scalar resolution (null, YAML 1.1 booleans)", bad == 0, "%d wrong, e.g. '%s' -> %s",
                bad, which, got);
    check_named("Levenshtein distance", llm4d_levenshtein("kitten", "sitting") == 3 && llm4d_levenshtein("", "ab") == 2,
                "wrong distance");
}

/* The decoder's description (config/model_desc.c): the Llama presets are meta-llama's published shapes (their Hugging
 * Face config.json values, written here from those files, not from llm4d's table), the family's defaults, each part
 * alone in PaddleNLP / Hugging Face and Megatron spellings, and the errors. */
static void test_model_description(T *t) {
    static const struct { const char *name; int h, l, heads, kv, ffn, vocab, pos; float theta; } want[] = {
        {"llama2-7b", 4096, 32, 32, 32, 11008, 32000, 4096, 10000.0f},
        {"llama2-13b", 5120, 40, 40, 40, 13824, 32000, 4096, 10000.0f},
        {"llama2-70b", 8192, 80, 64, 8, 28672, 32000, 4096, 10000.0f},
        {"llama3-8b", 4096, 32, 32, 8, 14336, 128256, 8192, 500000.0f},
        {"llama3-70b", 8192, 80, 64, 8, 28672, 128256, 8192, 500000.0f},
        {"llama3-405b", 16384, 126, 128, 8, 53248, 128256, 8192, 500000.0f}};
    llm4d_config *c = &t->cfg;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        llm4d_code rc = run(t, 1, "--model_name_or_path", want[i].name, "--max_seq_len", "128", NULL);
        const llm4d_model_config *m = &c->model;
        char name[96];
        snprintf(name, sizeof name, "%s: the published shape, Llama's description", want[i].name);
        expect_ok(t, name, rc,
                  m->hidden_size == want[i].h && m->num_layers == want[i].l && m->num_attention_heads == want[i].heads &&
                      m->num_kv_heads == want[i].kv && m->ffn_hidden_size == want[i].ffn &&
                      m->vocab_size == want[i].vocab && m->max_position_embeddings == want[i].pos &&
                      m->rope_theta == want[i].theta && m->norm_epsilon == 1e-5f && m->llama && m->rmsnorm && m->rope &&
                      m->swiglu && m->no_bias && m->untied && m->hidden_dropout_prob == 0.0f,
                  "a field differs");
    }
    llm4d_code rc = run(t, 1, "--model_name_or_path", "gpt2-tiny", "--max_seq_len", "64", NULL);
    expect_ok(t, "gpt2-tiny: GPT-2's description", rc,
              !c->model.llama && !c->model.rmsnorm && !c->model.rope && !c->model.swiglu && !c->model.no_bias &&
                  !c->model.untied && c->model.num_kv_heads == 4,
              "a field differs");
    rc = run(t, 1, "--model_name_or_path", "gpt2-tiny", "--max_seq_len", "64", "-o", "Model.normalization=RMSNorm", "-o",
             "Model.rms_norm_eps=1e-6", "-o", "Model.position_embedding_type=rope", "-o", "Model.rotary_base=5e5", "-o",
             "Model.swiglu=True", "-o", "Model.num_query_groups=2", "-o", "Model.add_bias_linear=False", "-o",
             "Model.untie_embeddings_and_output_weights=True", NULL);
    expect_ok(t, "GPT family, each part in Megatron / PaddleNLP spellings", rc,
              !c->model.llama && c->model.rmsnorm && c->model.norm_epsilon == 1e-6f && c->model.rope &&
                  c->model.rope_theta == 5e5f && c->model.swiglu && c->model.num_kv_heads == 2 && c->model.no_bias &&
                  c->model.untied && c->model.ffn_hidden_size == 192,
              "a field differs");
    rc = run(t, 1, "--model_name_or_path", "llama-tiny", "--max_seq_len", "64", "-o", "Model.hidden_act=gelu", "-o",
             "Model.tie_word_embeddings=True", "-o", "Model.intermediate_size=100", "-o", "Model.add_bias_linear=True",
             "-o", "Model.num_key_value_heads=2", NULL);
    expect_ok(t, "Llama family with GELU, tied, biases, intermediate_size", rc,
              c->model.llama && !c->model.swiglu && !c->model.untied && !c->model.no_bias &&
                  c->model.ffn_hidden_size == 100 && c->model.num_kv_heads == 2,
              "a field differs");
    rc = run(t, 1, "--model_name_or_path", "llama-tiny", "--max_seq_len", "64", "-o", "Model.normalization=BatchNorm", NULL);
    expect_error(t, "unknown normalization", rc, "normalization", "BatchNorm", "RMSNorm", NULL);
    rc = run(t, 1, "--model_name_or_path", "llama-tiny", "--max_seq_len", "64", "-o", "Model.position_embedding_type=alibi", NULL);
    expect_error(t, "unknown position embedding", rc, "alibi", "rope", NULL);
    rc = run(t, 1, "--model_name_or_path", "llama-tiny", "--max_seq_len", "64", "-o", "Model.hidden_act=relu", NULL);
    expect_error(t, "unknown activation", rc, "relu", "swiglu", NULL);
    rc = run(t, 1, "--model_name_or_path", "llama-tiny", "--max_seq_len", "64", "-o", "Model.num_key_value_heads=3", NULL);
    expect_error(t, "key/value heads not dividing the heads", rc, "num_key_value_heads 3", "does not divide", NULL);
    rc = run(t, 4, "--model_name_or_path", "llama-tiny", "--max_seq_len", "64", "--mp_degree", "4", "-o",
             "Model.num_key_value_heads=2", NULL);
    expect_ok(t, "2 key/value heads over mp_degree 4: each head on 2 ranks", rc, c->model.num_kv_heads == 2, "");
    rc = run(t, 6, "--model_name_or_path", "llama-tiny", "--max_seq_len", "64", "--mp_degree", "6", "-o",
             "Model.hidden_size=96", "-o", "Model.num_attention_heads=12", "-o", "Model.num_key_value_heads=4", NULL);
    expect_error(t, "4 key/value heads over mp_degree 6: neither divides the other", rc, "num_key_value_heads 4",
                 "mp_degree 6", NULL);
    rc = run(t, 1, "--model_name_or_path", "gpt2-tiny", "--max_seq_len", "64", "-o", "Model.layer_norm_epsilon=1e-6", NULL);
    expect_error(t, "LayerNorm's epsilon is fixed", rc, "LayerNorm uses 1e-5", NULL);
    rc = run(t, 1, "--model_name_or_path", "llama-tiny", "--max_seq_len", "64", "-o", "Model.tie_word_embeddings=True", "-o",
             "Model.untie_embeddings_and_output_weights=True", NULL);
    expect_error(t, "tie and untie disagree", rc, "disagree", NULL);
    rc = run(t, 1, "--model_type", "Mistral", "--model_name_or_path", "llama-tiny", "--max_seq_len", "64", NULL);
    expect_error(t, "unknown family", rc, "Mistral", "LLaMA", NULL);
    rc = run(t, 1, "--model_name_or_path", "llama-tiny", "--max_seq_len", "64", "-o", "Model.hidden_size=96", "-o",
             "Model.num_attention_heads=32", NULL);
    expect_error(t, "rotary needs an even head size", rc, "head size", "odd", NULL);
}

int main(void) {
    T *t = calloc(1, sizeof *t);
    snprintf(t->dir, sizeof t->dir, "/tmp/llm4d_test_config_XXXXXX");
    if (!mkdtemp(t->dir)) {
        perror("mkdtemp");
        return 1;
    }
    const char *src = getenv("SRC_DIR");
    snprintf(t->src, sizeof t->src, "%s", src && src[0] ? src : ".");

    test_defaults(t);
    test_default_run(t);
    test_presets(t);
    test_model_description(t);
    test_yaml_values(t);
    test_base(t);
    test_flags_and_overrides(t);
    test_parallel(t);
    test_value_errors(t);
    test_syntax_errors(t);
    test_noeffect_and_legacy(t);
    test_shipped_configs(t);
    test_help();
    test_pyval();

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", t->dir);
    int rc = check_summary();
    free(t);
    return rc;
}
