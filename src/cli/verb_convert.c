/* verb_convert.c — `llm4d convert`: llm4d checkpoints to and from Hugging Face GPT-2 and Llama directories.
 *
 *   llm4d convert --to hf --ckpt output/ --out hf/            export the weights as transformers' GPT-2 or Llama
 *   llm4d convert --from hf --hf_dir hf/ --out start/         import them (then --model_name_or_path start/)
 *   llm4d convert --from init --out DIR [train's model options] a freshly initialised model (testing, baselines)
 *
 * The HF side is what GPT2LMHeadModel / LlamaForCausalLM.save_pretrained write: config.json (cli/convert_config.c)
 * and model.safetensors, or model-0000k-of-0000n.safetensors shards with model.safetensors.index.json as real
 * releases ship. llm4d's checkpoints already hold each family's tensors under HF's names (model/params.c), so the
 * tensors move one for one: GPT-2's transformer.wte.weight, transformer.h.<l>.attn.c_attn.weight, ... in HF's
 * Conv1D layout (a linear weight [in, out], y = x W + b: the transpose of llm4d's [out, in]) with the LM head tied to
 * wte and not stored; Llama's model.embed_tokens.weight, model.layers.<l>.self_attn.q_proj.weight, k_proj (of the
 * key/value heads), v_proj, o_proj, mlp.gate_proj, up_proj, down_proj, input_layernorm, post_attention_layernorm,
 * model.norm.weight and an untied lm_head.weight, all in nn.Linear's [out, in] layout, which is llm4d's: nothing is
 * transposed, and rotary positions need no permutation (llm4d's rotate_half pairs are HF's). The embedding (and an
 * untied head) is unpadded in both formats, so the conversion is exact both ways (import(export(x)) == x bit for
 * bit). Exports are fp32 (torch_dtype float32); imports take F16/BF16/F64 weights too (converted to fp32).
 *
 * The export also writes the tokenizer (cli/convert_tok.c): GPT-2's vocabulary files, or the tokenizer.json
 * --vocab_dir names, copied once llm4d's tokenizer has loaded them; without them the line printed at the end says
 * why. Import also accepts GPT-2's names without the "transformer." prefix (as on the Hub), the buffers older files
 * carry (GPT-2's attention masks, Llama's rotary inv_freq: ignored), and a stored lm_head.weight of a tied model
 * equal to the embedding. What llm4d's model cannot compute exactly is refused with one line before anything is
 * written (convert_config.c lists it): a missing or unknown tensor, a shape config.json does not imply, GPT-2's
 * other activations or scalings or an untied GPT-2 head, Llama's rope_scaling (3.1's "llama3"), another head_dim,
 * attention_bias without mlp_bias. The imported checkpoint is weights only (step_0) with the model's description in
 * meta.json, so train continues from it on any layout (--model_name_or_path DIR).
 *
 * --from init draws the initial weights of the model described by train's options (-c, --model_name_or_path,
 * -o Model.key=value) with Global.seed; --init_noise S (testing) then adds S x normal noise to every parameter,
 * biases and LayerNorm included, so an exported model exercises every tensor. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/gpt_ckpt.h"
#include "ckpt/safetensors.h"
#include "cli/cli.h"
#include "cli/convert_hf.h"
#include "core/fs.h"
#include "core/shape.h"
#include "config/config.h"
#include "core/rng.h"
#include "data/tokenizer.h"

static const char *const usage_text =
    "usage: llm4d convert --to hf --ckpt DIR --out HF_DIR [--vocab_dir DIR|tokenizer.json]\n"
    "       llm4d convert --from hf --hf_dir HF_DIR --out DIR\n"
    "       llm4d convert --from init --out DIR [-c config.yaml] [--model_name_or_path PRESET] [-o Model.k=v ...]\n"
    "\n"
    "  --to hf        export checkpoint DIR (an output_dir or a step_<N> directory) as a Hugging Face GPT-2 or\n"
    "                 Llama directory: config.json and model.safetensors (fp32; transformers' GPT2LMHeadModel or\n"
    "                 LlamaForCausalLM loads it), and the tokenizer: GPT-2's vocab.json, merges.txt, or a\n"
    "                 tokenizer.json, with tokenizer_config.json\n"
    "  --vocab_dir D  the vocabulary for the tokenizer files: GPT-2's (encoder.json, vocab.bpe) or a Hugging Face\n"
    "                 tokenizer.json (the file, or a directory holding it); default $LLM4D_VOCAB_DIR, else\n"
    "                 $LLM4D_HOME/gpt2, else ~/.cache/llm4d/gpt2\n"
    "  --from hf      import a Hugging Face GPT-2 or Llama directory (config.json + model.safetensors, or shards\n"
    "                 with model.safetensors.index.json) as a weights-only llm4d checkpoint DIR/step_0, to\n"
    "                 continue training (--model_name_or_path DIR) or evaluate\n"
    "  --from init    write the initial weights of a model described by train's options as DIR/step_0\n"
    "                 (--init_noise S adds S x normal noise to every parameter; testing)\n";

/* In the verb's functions: on failure print the one line and jump to the clean-up. */
#define CHECK(expr)                                                                                              \
    do {                                                                                                         \
        if ((expr) != LLM4D_OK) {                                                                                \
            rc = report(&err);                                                                                   \
            goto done;                                                                                           \
        }                                                                                                        \
    } while (0)

static int report(const llm4d_err *err) {
    fprintf(stderr, "llm4d convert: %s\n", err->msg);
    return err->code == LLM4D_EUSER || err->code == LLM4D_EIO ? 2 : 1;
}

static int usage_error(const char *what) {
    fprintf(stderr, "llm4d convert: %s; run `llm4d convert --help`\n", what);
    return 2;
}

/* GPT-2's Conv1D stores a linear weight [in, out], the transpose of llm4d's [out, in]; Llama's nn.Linear stores
 * llm4d's own layout. */
static int transposed(const llm4d_model_config *m, llm4d_param_kind k) {
    return !m->llama &&
           (k == LLM4D_P_QKVW || k == LLM4D_P_ATTPROJW || k == LLM4D_P_FCW || k == LLM4D_P_FCPROJW);
}

/* dst[c, r] = src[r, c] for src [R, C] */
static void transpose(float *dst, const float *src, int64_t R, int64_t C) {
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) dst[c * R + r] = src[r * C + c];
}

/* The HF shape of a parameter: llm4d's stored shape, transposed where HF's layout is. */
static int hf_shape(const llm4d_model_config *m, const llm4d_param *p, int64_t s[2]) {
    const int nd = llm4d_gpt_ckpt_shape(p, s);
    if (transposed(m, p->kind)) {
        const int64_t t = s[0];
        s[0] = s[1];
        s[1] = t;
    }
    return nd;
}

static llm4d_code mkdir_p(const char *path, llm4d_err *err) {
    if (llm4d_mkdir_p(path, 0777) == 0) return LLM4D_OK;
    if (errno == ENAMETOOLONG) return llm4d_fail(err, LLM4D_EUSER, "path %.100s... is too long", path);
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode))
        return llm4d_fail(err, LLM4D_EUSER, "--out %s is not a directory; choose another --out", path);
    return llm4d_fail(err, LLM4D_EUSER, "cannot create %s: %s; choose a writable --out", path, strerror(errno));
}


/* ---- export ---- */

static int export_hf(const char *ckpt, const char *out, const char *vocab_flag) {
    llm4d_err err = {0};
    llm4d_hf_tok tf = {0};
    llm4d_ckpt *c = NULL;
    llm4d_param_table t = {0};
    llm4d_model_config mc;
    memset(&mc, 0, sizeof mc);
    float *params = NULL, *hf = NULL;
    llm4d_st_writer w;
    llm4d_st_writer_init(&w);
    cJSON *cfg = NULL;
    char *text = NULL;
    int rc = 0;
    CHECK(llm4d_ckpt_open(&c, ckpt, &err));
    CHECK(llm4d_gpt_ckpt_model_from_meta(llm4d_ckpt_meta(c), llm4d_ckpt_dir(c), &mc, 128, &err));
    char why[512];
    if (llm4d_hf_unexportable(&mc, why, sizeof why)) CHECK(llm4d_fail(&err, LLM4D_EUSER, "%s: %s", ckpt, why));
    CHECK(llm4d_hf_tok_read(vocab_flag, &mc, &tf, &err));
    CHECK(llm4d_param_table_build(&t, &mc, NULL, &err));
    params = malloc(t.total * sizeof(float));
    hf = malloc(t.total * sizeof(float));
    if (!params || !hf) CHECK(llm4d_fail(&err, LLM4D_ENOMEM, "out of memory for %zu parameters", t.total));
    const size_t whole[2] = {0, t.total};
    const llm4d_ckpt_state st = llm4d_ckpt_state_range(&t, whole, params, NULL, NULL);
    CHECK(llm4d_gpt_ckpt_read(c, &mc, &st, NULL, &err));
    CHECK(mkdir_p(out, &err));
    /* the HF tensors are packed in hf in table order; the embedding's (and an untied head's) padding rows are simply
     * not copied. The table's names are HF's (model/params.c). */
    size_t at = 0;
    for (int i = 0; i < t.n; i++) {
        const llm4d_param *p = &t.p[i];
        int64_t s[2], ls[2];
        const int nd = hf_shape(&mc, p, s);
        llm4d_gpt_ckpt_shape(p, ls);
        const size_t n = (size_t)ls[0] * (nd == 2 ? (size_t)ls[1] : 1);
        if (transposed(&mc, p->kind)) transpose(hf + at, params + p->offset, ls[0], ls[1]);
        else memcpy(hf + at, params + p->offset, n * sizeof(float));
        CHECK(llm4d_st_writer_add(&w, p->name, LLM4D_ST_F32, nd, s, hf + at, &err));
        at += n;
    }
    CHECK(llm4d_st_writer_meta(&w, "format", "pt", &err));
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    CHECK(llm4d_st_writer_write(&w, path, LLM4D_ST_WRITE_ATOMIC | LLM4D_ST_WRITE_FSYNC, NULL, NULL, &err));
    cfg = llm4d_hf_config_json(&mc, tf.bos);
    text = cfg ? cJSON_Print(cfg) : NULL;
    if (!text) CHECK(llm4d_fail(&err, LLM4D_ENOMEM, "out of memory"));
    snprintf(path, sizeof path, "%s/config.json", out);
    CHECK(llm4d_convert_write_file(path, text, strlen(text), &err));
    CHECK(llm4d_hf_tok_write(&tf, &mc, out, &err));
    const char *files = tf.json ? ", model.safetensors and the tokenizer's tokenizer.json, tokenizer_config.json"
                      : tf.vocab ? ", model.safetensors and the tokenizer's vocab.json, merges.txt, tokenizer_config.json"
                                 : " and model.safetensors";
    const int any = tf.json || tf.vocab;
    printf("llm4d convert: wrote %s/config.json%s (%s, %d layers, hidden %d, vocab %d, %zu parameters) from %s%s%s\n",
           out, files, llm4d_model_family(&mc), mc.num_layers, mc.hidden_size, mc.vocab_size, t.total_real,
           llm4d_ckpt_dir(c), any ? "" : "; no tokenizer files: ", any ? "" : tf.why);
done:
    free(text);
    cJSON_Delete(cfg);
    llm4d_hf_tok_free(&tf);
    llm4d_st_writer_free(&w);
    free(params);
    free(hf);
    llm4d_param_table_free(&t);
    if (c) llm4d_ckpt_close(c);
    return rc;
}

/* ---- import ---- */

static llm4d_code read_json_file(const char *path, cJSON **out, llm4d_err *err) {
    char *buf = NULL;
    size_t n = 0;
    LLM4D_TRY(llm4d_convert_read_file(path, &buf, &n, err));
    *out = cJSON_Parse(buf);
    free(buf);
    if (!cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return llm4d_fail(err, LLM4D_EUSER, "%s is not a JSON object; is it a Hugging Face config.json?", path);
    }
    return LLM4D_OK;
}

#define MAX_SHARDS 256

typedef struct {
    int n;
    llm4d_st_file f[MAX_SHARDS];
} shards;

static llm4d_code open_shards(const char *dir, shards *s, llm4d_err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (access(path, F_OK) == 0) {
        LLM4D_TRY(llm4d_st_open(&s->f[0], path, err));
        s->n = 1;
        return LLM4D_OK;
    }
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (access(path, F_OK) != 0) {
        snprintf(path, sizeof path, "%s/pytorch_model.bin", dir);
        if (access(path, F_OK) == 0)
            return llm4d_fail(err, LLM4D_EUSER, "%s holds pytorch_model.bin only; llm4d reads safetensors: save the "
                              "model with safe_serialization=True (model.safetensors) and convert again", dir);
        return llm4d_fail(err, LLM4D_EUSER, "%s has no model.safetensors (nor model.safetensors.index.json); pass "
                          "the directory of a Hugging Face GPT-2 or Llama model", dir);
    }
    cJSON *idx = NULL;
    LLM4D_TRY(read_json_file(path, &idx, err));
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map"), *e;
    llm4d_code rc = cJSON_IsObject(wm) ? LLM4D_OK
                                       : llm4d_fail(err, LLM4D_EUSER, "%s has no \"weight_map\" object", path);
    /* distinct file names, in order of first appearance */
    cJSON_ArrayForEach(e, wm) {
        if (rc) break;
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/')) {
            rc = llm4d_fail(err, LLM4D_EUSER, "%s: weight_map entry '%s' is not a plain file name", path, e->string);
            break;
        }
        int seen = 0;
        for (int k = 0; k < s->n && !seen; k++) {
            const char *base = strrchr(s->f[k].path, '/');
            seen = !strcmp(base ? base + 1 : s->f[k].path, e->valuestring);
        }
        if (seen) continue;
        if (s->n == MAX_SHARDS) {
            rc = llm4d_fail(err, LLM4D_EUSER, "%s names more than %d files", path, MAX_SHARDS);
            break;
        }
        char fp[4400];
        snprintf(fp, sizeof fp, "%s/%s", dir, e->valuestring);
        rc = llm4d_st_open(&s->f[s->n], fp, err);
        if (!rc) s->n++;
    }
    cJSON_Delete(idx);
    return rc;
}

static void close_shards(shards *s) {
    for (int k = 0; k < s->n; k++) llm4d_st_close(&s->f[k]);
    s->n = 0;
}

static const char *strip_prefix(const char *name) {
    return strncmp(name, "transformer.", 12) ? name : name + 12;
}

static int ends_with(const char *s, const char *tail) {
    const size_t n = strlen(s), k = strlen(tail);
    return n > k && !strcmp(s + n - k, tail);
}

/* Which table entry an HF tensor name is (-1: none); *ignore set for buffers, *is_head for a tied model's stored
 * head (an untied Llama's lm_head.weight is an entry of the table). */
static int hf_lookup(const llm4d_param_table *t, const char *name, int *ignore, int *is_head) {
    const char *s = strip_prefix(name);
    *ignore = *is_head = 0;
    for (int i = 0; i < t->n; i++)
        if (!strcmp(strip_prefix(t->p[i].name), s)) return i;
    if (!strcmp(name, "lm_head.weight")) {
        *is_head = 1;
        return -1;
    }
    /* GPT-2's attention-mask buffers; the rotary frequencies older Llama conversions stored (rope_theta gives them) */
    *ignore = (!strncmp(s, "h.", 2) && (ends_with(s, ".attn.bias") || ends_with(s, ".attn.masked_bias"))) ||
              (!strncmp(s, "model.layers.", 13) && ends_with(s, ".self_attn.rotary_emb.inv_freq"));
    return -1;
}

static int import_hf(const char *hf_dir, const char *out) {
    llm4d_err err = {0};
    cJSON *hcfg = NULL, *meta = NULL;
    llm4d_model_config mc;
    llm4d_param_table t = {0};
    shards *sh = calloc(1, sizeof *sh);
    float *params = NULL, *tmp = NULL;
    char *found = NULL;
    int tied = 1, rc = 0;
    char path[4200];
    if (!sh) return fprintf(stderr, "llm4d convert: out of memory\n"), 1;
    snprintf(path, sizeof path, "%s/config.json", hf_dir);
    if (access(path, F_OK) != 0)
        CHECK(llm4d_fail(&err, LLM4D_EUSER, "%s has no config.json; pass the directory of a Hugging Face GPT-2 or "
                         "Llama model (config.json and model.safetensors)", hf_dir));
    CHECK(read_json_file(path, &hcfg, &err));
    CHECK(llm4d_hf_config_read(hcfg, path, &mc, &tied, &err));
    CHECK(llm4d_param_table_build(&t, &mc, NULL, &err));
    CHECK(open_shards(hf_dir, sh, &err));
    params = calloc(t.total, sizeof(float));
    size_t biggest = 0;
    for (int i = 0; i < t.n; i++) biggest = t.p[i].numel > biggest ? t.p[i].numel : biggest;
    tmp = malloc(biggest * sizeof(float));
    found = calloc((size_t)t.n, 1);
    if (!params || !tmp || !found) CHECK(llm4d_fail(&err, LLM4D_ENOMEM, "out of memory for %zu parameters", t.total));
    const llm4d_st_tensor *head = NULL;
    const char *head_file = NULL;
    for (int k = 0; k < sh->n; k++) {
        const llm4d_st_file *f = &sh->f[k];
        for (int j = 0; j < f->n; j++) {
            const llm4d_st_tensor *x = &f->t[j];
            int ignore, is_head;
            const int i = hf_lookup(&t, x->name, &ignore, &is_head);
            if (ignore) continue;
            if (is_head) {
                head = x;
                head_file = f->path;
                continue;
            }
            if (i < 0)
                CHECK(llm4d_fail(&err, LLM4D_EUSER, "%s holds tensor '%s', which is not part of the %s model of "
                                 "%d layers its config.json describes; do the weights and config.json belong "
                                 "together?", f->path, x->name, llm4d_model_family(&mc), mc.num_layers));
            const llm4d_param *p = &t.p[i];
            if (found[i])
                CHECK(llm4d_fail(&err, LLM4D_EUSER, "%s: tensor '%s' appears twice in the model's files", f->path,
                                 x->name));
            int64_t s[2];
            const int nd = hf_shape(&mc, p, s);
            if (x->ndim != nd || x->shape[0] != s[0] || (nd == 2 && x->shape[1] != s[1])) {
                char a[96], b[96];
                llm4d_fmt_shape(a, sizeof a, x->ndim, x->shape);
                llm4d_fmt_shape(b, sizeof b, nd, s);
                CHECK(llm4d_fail(&err, LLM4D_EUSER, "%s: tensor '%s' has shape %s but config.json implies %s; the "
                                 "weights and config.json do not belong together", f->path, x->name, a, b));
            }
            const size_t n = (size_t)s[0] * (nd == 2 ? (size_t)s[1] : 1);
            if (!llm4d_st_convert(tmp, LLM4D_ST_F32, x->data, x->dtype, n))
                CHECK(llm4d_fail(&err, LLM4D_EUSER, "%s: tensor '%s' is stored as %s; llm4d imports float weights "
                                 "(F32, F16, BF16, F64)", f->path, x->name, llm4d_st_dtype_name(x->dtype)));
            if (transposed(&mc, p->kind)) transpose(params + p->offset, tmp, s[0], s[1]);
            else memcpy(params + p->offset, tmp, n * sizeof(float));
            found[i] = 1;
        }
    }
    for (int i = 0; i < t.n; i++) {
        const char *bare = strip_prefix(t.p[i].name);
        if (!found[i])
            CHECK(llm4d_fail(&err, LLM4D_EUSER, "%s has no tensor '%s'%s%s%s; the model files are incomplete", hf_dir,
                             t.p[i].name, bare != t.p[i].name ? " (nor '" : "", bare != t.p[i].name ? bare : "",
                             bare != t.p[i].name ? "')" : ""));
    }
    if (head) {
        /* a stored head of a tied model must be the embedding */
        const llm4d_param *wte = &t.p[0];
        const size_t n = (size_t)wte->rows_real * (size_t)wte->shape[1];
        int same = head->ndim == 2 && head->shape[0] == wte->rows_real && head->shape[1] == wte->shape[1] &&
                   llm4d_st_convert(tmp, LLM4D_ST_F32, head->data, head->dtype, n) &&
                   memcmp(tmp, params + wte->offset, n * sizeof(float)) == 0;
        if (!same && mc.llama)
            CHECK(llm4d_fail(&err, LLM4D_EUSER, "%s: lm_head.weight differs from %s but config.json ties them "
                             "(tie_word_embeddings true); the weights and config.json do not belong together",
                             head_file, wte->name));
        if (!same)
            CHECK(llm4d_fail(&err, LLM4D_EUSER, "%s: lm_head.weight differs from transformer.wte.weight; llm4d's LM "
                             "head is tied to the token embedding, so an untied head cannot be imported", head_file));
    } else if (!tied && !mc.llama) {
        CHECK(llm4d_fail(&err, LLM4D_EUSER, "%s: tie_word_embeddings is false but no lm_head.weight is stored",
                         path));
    }
    meta = cJSON_CreateObject();
    cJSON *src = cJSON_AddObjectToObject(meta, "converted_from");
    cJSON_AddStringToObject(src, "format", mc.llama ? "huggingface-llama" : "huggingface-gpt2");
    char *abs = realpath(hf_dir, NULL);
    cJSON_AddStringToObject(src, "path", abs ? abs : hf_dir);
    free(abs);
    const size_t whole[2] = {0, t.total};
    const llm4d_ckpt_state st = llm4d_ckpt_state_range(&t, whole, params, NULL, NULL);
    CHECK(llm4d_gpt_ckpt_save(&(llm4d_ckpt_dest){.output_dir = out, .tag = ""}, &mc, &st, meta, &err));
    printf("llm4d convert: wrote %s/step_0 (weights only: %s, %d layers, hidden %d, vocab %d, %zu parameters) "
           "from %s\n", out, llm4d_model_family(&mc), mc.num_layers, mc.hidden_size, mc.vocab_size, t.total_real,
           hf_dir);
done:
    cJSON_Delete(hcfg);
    cJSON_Delete(meta);
    close_shards(sh);
    free(sh);
    free(params);
    free(tmp);
    free(found);
    llm4d_param_table_free(&t);
    return rc;
}

/* ---- init ---- */

static int init_ckpt(const char *out, double noise, int argc, char **argv) {
    llm4d_err err = {0};
    llm4d_config *cfg = calloc(1, sizeof *cfg);
    llm4d_param_table t = {0};
    llm4d_backend *be = NULL; /* the reference backend: its device memory is this host memory */
    float *params = NULL;
    int rc = 0;
    if (!cfg) return fprintf(stderr, "llm4d convert: out of memory\n"), 1;
    llm4d_config_defaults(cfg);
    cfg->data.max_seq_len = 1; /* no data is read: do not let the default sequence length exceed a small model */
    CHECK(llm4d_config_parse_args(cfg, argc, argv, &err));
    CHECK(llm4d_config_finalize(cfg, 1, &err));
    CHECK(llm4d_param_table_build(&t, &cfg->model, NULL, &err));
    params = calloc(t.total, sizeof(float));
    if (!params) CHECK(llm4d_fail(&err, LLM4D_ENOMEM, "out of memory for %zu parameters", t.total));
    CHECK(llm4d_backend_ref_create(&be, &err));
    llm4d_param_init(&t, be, params, cfg->seed);
    if (noise != 0) {
        for (int i = 0; i < t.n; i++) {
            const llm4d_param *p = &t.p[i];
            const size_t real = (size_t)p->rows_real * (p->ndim == 2 ? (size_t)p->shape[1] : 1);
            const uint64_t stream = llm4d_rng_stream(LLM4D_RNG_INIT, 1, 1, (uint32_t)i);
            for (size_t j = 0; j < real; j++)
                params[p->offset + j] += (float)noise * llm4d_rng_normal(cfg->seed, stream, j);
        }
    }
    cJSON *meta = cJSON_CreateObject();
    cJSON *src = cJSON_AddObjectToObject(meta, "converted_from");
    cJSON_AddStringToObject(src, "format", "init");
    cJSON_AddNumberToObject(src, "seed", (double)cfg->seed);
    cJSON_AddNumberToObject(src, "init_noise", noise);
    const size_t whole[2] = {0, t.total};
    const llm4d_ckpt_state st = llm4d_ckpt_state_range(&t, whole, params, NULL, NULL);
    llm4d_code c = llm4d_gpt_ckpt_save(&(llm4d_ckpt_dest){.output_dir = out, .tag = ""}, &cfg->model, &st, meta, &err);
    cJSON_Delete(meta);
    CHECK(c);
    printf("llm4d convert: wrote %s/step_0 (initial weights, seed %llu: %d layers, hidden %d, vocab %d, %zu "
           "parameters)\n", out, (unsigned long long)cfg->seed, cfg->model.num_layers, cfg->model.hidden_size,
           cfg->model.vocab_size, t.total_real);
done:
    if (be) be->destroy(be);
    free(params);
    llm4d_param_table_free(&t);
    free(cfg);
    return rc;
}

int llm4d_cmd_convert(int argc, char **argv) {
    const char *to = NULL, *from = NULL, *ckpt = NULL, *hf_dir = NULL, *out = NULL, *vocab_dir = NULL;
    double noise = 0;
    char *rest[argc + 1];
    int nrest = 0;
    rest[nrest++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            fputs(usage_text, stdout);
            return 0;
        }
        const char **slot = !strcmp(f, "--to") ? &to : !strcmp(f, "--from") ? &from : !strcmp(f, "--ckpt") ? &ckpt
                          : !strcmp(f, "--hf_dir") ? &hf_dir : !strcmp(f, "--out") ? &out
                          : !strcmp(f, "--vocab_dir") || !strcmp(f, "--vocab-dir") ? &vocab_dir : NULL;
        if (slot || !strcmp(f, "--init_noise")) {
            if (i + 1 >= argc) {
                char msg[128];
                snprintf(msg, sizeof msg, "%s needs a value", f);
                return usage_error(msg);
            }
            if (slot) {
                *slot = argv[++i];
            } else {
                char *end;
                noise = strtod(argv[++i], &end);
                if (*end || !isfinite(noise) || noise < 0) return usage_error("--init_noise must be a number >= 0");
            }
            continue;
        }
        rest[nrest++] = argv[i];
    }
    rest[nrest] = NULL;
    if (!out) return usage_error("--out is required");
    if (!to == !from) return usage_error("give one of --to hf and --from hf|init");
    if (vocab_dir && !to) return usage_error("--vocab_dir goes with --to hf (the tokenizer files of an export)");
    if (from && !strcmp(from, "init")) return init_ckpt(out, noise, nrest - 1, rest + 1);
    if (nrest > 1) {
        char msg[256];
        snprintf(msg, sizeof msg, "unexpected argument '%s'", rest[1]);
        return usage_error(msg);
    }
    if (to) {
        if (strcmp(to, "hf")) return usage_error("--to must be hf");
        if (!ckpt) return usage_error("--to hf needs --ckpt DIR");
        return export_hf(ckpt, out, vocab_dir);
    }
    if (strcmp(from, "hf")) return usage_error("--from must be hf or init");
    if (!hf_dir) return usage_error("--from hf needs --hf_dir DIR");
    return import_hf(hf_dir, out);
}
