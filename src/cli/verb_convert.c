/* verb_convert.c — `llm4d convert`: llm4d checkpoints to and from Hugging Face GPT-2 directories.
 *
 *   llm4d convert --to hf --ckpt output/ --out gpt2-hf/       export the weights as transformers' GPT-2
 *   llm4d convert --from hf --hf_dir gpt2-hf/ --out start/     import GPT-2 weights (then model_name_or_path start/)
 *   llm4d convert --from init --out DIR [train's model options] a freshly initialised model (testing, baselines)
 *
 * The HF side is what GPT2LMHeadModel.save_pretrained writes: config.json (GPT2Config) and model.safetensors with
 * the names transformer.wte.weight, transformer.h.<l>.attn.c_attn.weight, ... and HF's Conv1D layout: a linear
 * weight is [in, out] (y = x W + b), the transpose of llm4d's [out, in]; the LM head is tied to wte and not stored.
 * The export also writes what GPT2Tokenizer / GPT2TokenizerFast.from_pretrained(dir) load, so the directory is a
 * whole model: vocab.json and merges.txt are the GPT-2 vocabulary llm4d's tokenizer reads (encoder.json and
 * vocab.bpe, data/tokenizer.h: the very files OpenAI published and HF renamed), copied once llm4d's tokenizer has
 * loaded them, and tokenizer_config.json gives the context length and <|endoftext|> as HF's GPT-2 has them. A model
 * whose vocabulary is not GPT-2's (another vocab_size), or a machine without the vocabulary files, gets the weights
 * alone and the line printed at the end says so (with --vocab_dir given, the files must be there and fit).
 * The embedding is unpadded in both formats, so the conversion is exact both ways (import(export(x)) == x bit for
 * bit). Import also accepts the names without the "transformer." prefix (as on the Hub), F16/BF16/F64 weights
 * (converted to fp32), the attention-mask buffers older files carry (ignored), a stored lm_head.weight equal to wte,
 * and sharded files with model.safetensors.index.json. What llm4d's model cannot represent is refused: another
 * activation than the tanh GELU, a LayerNorm epsilon other than 1e-5, attention scaled otherwise than by
 * 1/sqrt(head size), an untied LM head.
 *
 * --from init draws the initial weights of the model described by train's options (-c, --model_name_or_path,
 * -o Model.key=value) with Global.seed; --init_noise S (testing) then adds S x normal noise to every parameter,
 * biases and LayerNorm included, so an exported model exercises every tensor. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/gpt_ckpt.h"
#include "ckpt/safetensors.h"
#include "cli/cli.h"
#include "core/fs.h"
#include "core/shape.h"
#include "config/config.h"
#include "core/rng.h"
#include "data/tokenizer.h"

static const char *const usage_text =
    "usage: llm4d convert --to hf --ckpt DIR --out HF_DIR [--vocab_dir DIR]\n"
    "       llm4d convert --from hf --hf_dir HF_DIR --out DIR\n"
    "       llm4d convert --from init --out DIR [-c config.yaml] [--model_name_or_path PRESET] [-o Model.k=v ...]\n"
    "\n"
    "  --to hf        export checkpoint DIR (an output_dir or a step_<N> directory) as a Hugging Face GPT-2\n"
    "                 directory: config.json and model.safetensors (transformers' GPT2LMHeadModel loads it),\n"
    "                 and GPT-2's tokenizer: vocab.json, merges.txt, tokenizer_config.json (GPT2Tokenizer)\n"
    "  --vocab_dir D  GPT-2's vocabulary (encoder.json, vocab.bpe) for the tokenizer files; default\n"
    "                 $LLM4D_VOCAB_DIR, else $LLM4D_HOME/gpt2, else ~/.cache/llm4d/gpt2\n"
    "  --from hf      import a Hugging Face GPT-2 directory (config.json + model.safetensors) as a weights-only\n"
    "                 llm4d checkpoint DIR/step_0, to fine-tune (--model_name_or_path DIR) or evaluate\n"
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

static int is_linear_weight(llm4d_param_kind k) {
    return k == LLM4D_P_QKVW || k == LLM4D_P_ATTPROJW || k == LLM4D_P_FCW || k == LLM4D_P_FCPROJW;
}

/* dst[c, r] = src[r, c] for src [R, C] */
static void transpose(float *dst, const float *src, int64_t R, int64_t C) {
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) dst[c * R + r] = src[r * C + c];
}

/* The HF shape of a parameter: llm4d's stored shape, linear weights transposed. */
static int hf_shape(const llm4d_param *p, int64_t s[2]) {
    const int nd = llm4d_gpt_ckpt_shape(p, s);
    if (is_linear_weight(p->kind)) {
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

/* Write a small file atomically: temporary, fsync, rename. */
static llm4d_code write_file_atomic(const char *path, const char *data, size_t len, llm4d_err *err) {
    char tmp[4400];
    if (snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid()) >= (int)sizeof tmp)
        return llm4d_fail(err, LLM4D_EUSER, "path %.100s... is too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return llm4d_fail(err, LLM4D_EUSER, "cannot write %s: %s; choose a writable --out", tmp, strerror(errno));
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, data + done, len - done);
        if (w <= 0) break;
        done += (size_t)w;
    }
    const int ok = done == len && fsync(fd) == 0;
    close(fd);
    if (!ok || rename(tmp, path) != 0) {
        const int e = errno;
        unlink(tmp);
        return llm4d_fail(err, LLM4D_EIO, "writing %s failed: %s", path, strerror(e));
    }
    return LLM4D_OK;
}

/* The whole of a file, NUL-terminated (*len without the NUL). */
static llm4d_code read_file(const char *path, char **out, size_t *len, llm4d_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return llm4d_fail(err, LLM4D_EUSER, "cannot read %s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    const int bad = ferror(f);
    fclose(f);
    if (!buf) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory reading %s", path);
    if (bad) {
        free(buf);
        return llm4d_fail(err, LLM4D_EIO, "reading %s failed", path);
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return LLM4D_OK;
}

/* ---- export ---- */

static cJSON *hf_config(const llm4d_model_config *m) {
    cJSON *j = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(j, "model_type", "gpt2");
    cJSON_AddStringToObject(j, "activation_function", "gelu_new");
    cJSON_AddNumberToObject(j, "vocab_size", m->vocab_size);
    cJSON_AddNumberToObject(j, "n_positions", m->max_position_embeddings);
    cJSON_AddNumberToObject(j, "n_ctx", m->max_position_embeddings);
    cJSON_AddNumberToObject(j, "n_embd", m->hidden_size);
    cJSON_AddNumberToObject(j, "n_layer", m->num_layers);
    cJSON_AddNumberToObject(j, "n_head", m->num_attention_heads);
    cJSON_AddNumberToObject(j, "n_inner", m->ffn_hidden_size);
    cJSON_AddNumberToObject(j, "resid_pdrop", llm4d_json_float(m->hidden_dropout_prob));
    cJSON_AddNumberToObject(j, "embd_pdrop", llm4d_json_float(m->hidden_dropout_prob));
    cJSON_AddNumberToObject(j, "attn_pdrop", llm4d_json_float(m->attention_probs_dropout_prob));
    cJSON_AddNumberToObject(j, "layer_norm_epsilon", 1e-5);
    cJSON_AddNumberToObject(j, "initializer_range", llm4d_json_float(m->initializer_range));
    cJSON_AddNumberToObject(j, "bos_token_id", m->eos_token_id);
    cJSON_AddNumberToObject(j, "eos_token_id", m->eos_token_id);
    cJSON_AddBoolToObject(j, "scale_attn_weights", 1);
    cJSON_AddBoolToObject(j, "scale_attn_by_inverse_layer_idx", 0);
    cJSON_AddBoolToObject(j, "reorder_and_upcast_attn", 0);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", 1);
    cJSON_AddBoolToObject(j, "use_cache", 1);
    cJSON_AddStringToObject(j, "summary_type", "cls_index");
    cJSON_AddBoolToObject(j, "summary_use_proj", 1);
    cJSON_AddNullToObject(j, "summary_activation");
    cJSON_AddBoolToObject(j, "summary_proj_to_labels", 1);
    cJSON_AddNumberToObject(j, "summary_first_dropout", 0.1);
    cJSON_AddStringToObject(j, "torch_dtype", "float32");
    cJSON_AddStringToObject(j, "llm4d_note", "exported by llm4d convert --to hf");
    return j;
}

/* GPT-2's tokenizer files for an export, read before anything is written. vocab == NULL: none, for the reason in
 * why (the model's vocabulary is another, or the files are not found and --vocab_dir was not given). */
typedef struct {
    char *vocab, *merges; /* encoder.json and vocab.bpe, as they are (merges ended by a newline) */
    size_t vocab_n, merges_n;
    char why[1100]; /* an llm4d_err message fits */
} tok_files;

static void tok_files_free(tok_files *tf) {
    free(tf->vocab);
    free(tf->merges);
}

static llm4d_code tok_files_read(const char *vocab_flag, int model_vocab, tok_files *tf, llm4d_err *err) {
    char dir[4096], path[4200];
    llm4d_tokenizer_default_dir(vocab_flag, dir, sizeof dir);
    /* the tokenizer's own load checks the files: what is copied is a vocabulary llm4d tokenizes with */
    llm4d_tokenizer *tok = NULL;
    llm4d_err e = {0};
    if (llm4d_tokenizer_load(&tok, dir, &e) != LLM4D_OK) {
        if (vocab_flag || e.code == LLM4D_ENOMEM) return *err = e, e.code;
        snprintf(tf->why, sizeof tf->why, "%s", e.msg);
        return LLM4D_OK;
    }
    const int tok_vocab = llm4d_tokenizer_vocab_size(tok);
    llm4d_tokenizer_free(tok);
    if (tok_vocab != model_vocab) {
        if (vocab_flag)
            return llm4d_fail(err, LLM4D_EUSER, "the model's vocabulary has %d tokens but GPT-2's in %s has %d; drop "
                              "--vocab_dir to export the weights without tokenizer files", model_vocab, dir, tok_vocab);
        snprintf(tf->why, sizeof tf->why, "the model's vocabulary of %d tokens is not GPT-2's %d", model_vocab,
                 tok_vocab);
        return LLM4D_OK;
    }
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    LLM4D_TRY(read_file(path, &tf->vocab, &tf->vocab_n, err));
    snprintf(path, sizeof path, "%s/vocab.bpe", dir);
    LLM4D_TRY(read_file(path, &tf->merges, &tf->merges_n, err));
    if (tf->merges_n && tf->merges[tf->merges_n - 1] != '\n') {
        /* HF's GPT2Tokenizer reads the merges as text.split("\n")[1:-1]: without the final newline it would drop
         * the last merge (llm4d's tokenizer, like encoder.py, takes the file either way) */
        char *m = realloc(tf->merges, tf->merges_n + 2);
        if (!m) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
        m[tf->merges_n++] = '\n';
        m[tf->merges_n] = 0;
        tf->merges = m;
    }
    return LLM4D_OK;
}

/* What from_pretrained reads besides the two files: the context length (HF warns past it) and GPT-2's special
 * tokens, all <|endoftext|>, as the Hub's gpt2 has them. */
static cJSON *hf_tokenizer_config(const llm4d_model_config *m) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "tokenizer_class", "GPT2Tokenizer");
    cJSON_AddNumberToObject(j, "model_max_length", m->max_position_embeddings);
    cJSON_AddStringToObject(j, "bos_token", "<|endoftext|>");
    cJSON_AddStringToObject(j, "eos_token", "<|endoftext|>");
    cJSON_AddStringToObject(j, "unk_token", "<|endoftext|>");
    cJSON_AddBoolToObject(j, "add_prefix_space", 0);
    return j;
}

static int export_hf(const char *ckpt, const char *out, const char *vocab_flag) {
    llm4d_err err = {0};
    tok_files tf = {0};
    llm4d_ckpt *c = NULL;
    llm4d_param_table t = {0};
    llm4d_model_config mc;
    memset(&mc, 0, sizeof mc);
    float *params = NULL, *hf = NULL;
    llm4d_st_writer w;
    llm4d_st_writer_init(&w);
    cJSON *cfg = NULL, *tcfg = NULL;
    char *text = NULL, *ttext = NULL;
    int rc = 0;
    CHECK(llm4d_ckpt_open(&c, ckpt, &err));
    CHECK(llm4d_gpt_ckpt_model_from_meta(llm4d_ckpt_meta(c), llm4d_ckpt_dir(c), &mc, 128, &err));
    if (mc.llama || mc.rmsnorm || mc.rope || mc.swiglu || mc.no_bias || mc.untied ||
        (mc.num_kv_heads && mc.num_kv_heads != mc.num_attention_heads))
        CHECK(llm4d_fail(&err, LLM4D_EUSER, "%s: the export writes Hugging Face GPT-2 models only so far; this "
                         "checkpoint's model is %s-shaped (its tensors are already under Hugging Face Llama's names "
                         "in the checkpoint's safetensors files)", ckpt, llm4d_model_family(&mc)));
    CHECK(tok_files_read(vocab_flag, mc.vocab_size, &tf, &err));
    CHECK(llm4d_param_table_build(&t, &mc, NULL, &err));
    params = malloc(t.total * sizeof(float));
    hf = malloc(t.total * sizeof(float));
    if (!params || !hf) CHECK(llm4d_fail(&err, LLM4D_ENOMEM, "out of memory for %zu parameters", t.total));
    const size_t whole[2] = {0, t.total};
    const llm4d_ckpt_state st = llm4d_ckpt_state_range(&t, whole, params, NULL, NULL);
    CHECK(llm4d_gpt_ckpt_read(c, &mc, &st, NULL, &err));
    CHECK(mkdir_p(out, &err));
    /* the HF tensors are packed in hf in table order; wte's padding rows are simply not copied */
    size_t at = 0;
    for (int i = 0; i < t.n; i++) {
        const llm4d_param *p = &t.p[i];
        int64_t s[2], ls[2];
        const int nd = hf_shape(p, s);
        llm4d_gpt_ckpt_shape(p, ls);
        const size_t n = (size_t)ls[0] * (nd == 2 ? (size_t)ls[1] : 1);
        if (is_linear_weight(p->kind)) transpose(hf + at, params + p->offset, ls[0], ls[1]);
        else memcpy(hf + at, params + p->offset, n * sizeof(float));
        CHECK(llm4d_st_writer_add(&w, p->name, LLM4D_ST_F32, nd, s, hf + at, &err));
        at += n;
    }
    CHECK(llm4d_st_writer_meta(&w, "format", "pt", &err));
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    CHECK(llm4d_st_writer_write(&w, path, LLM4D_ST_WRITE_ATOMIC | LLM4D_ST_WRITE_FSYNC, NULL, NULL, &err));
    cfg = hf_config(&mc);
    text = cJSON_Print(cfg);
    if (!text) CHECK(llm4d_fail(&err, LLM4D_ENOMEM, "out of memory"));
    snprintf(path, sizeof path, "%s/config.json", out);
    CHECK(write_file_atomic(path, text, strlen(text), &err));
    if (tf.vocab) {
        snprintf(path, sizeof path, "%s/vocab.json", out);
        CHECK(write_file_atomic(path, tf.vocab, tf.vocab_n, &err));
        snprintf(path, sizeof path, "%s/merges.txt", out);
        CHECK(write_file_atomic(path, tf.merges, tf.merges_n, &err));
        tcfg = hf_tokenizer_config(&mc);
        ttext = cJSON_Print(tcfg);
        if (!ttext) CHECK(llm4d_fail(&err, LLM4D_ENOMEM, "out of memory"));
        snprintf(path, sizeof path, "%s/tokenizer_config.json", out);
        CHECK(write_file_atomic(path, ttext, strlen(ttext), &err));
    }
    printf("llm4d convert: wrote %s/config.json%s (GPT-2, %d layers, hidden %d, vocab %d, %zu parameters) from "
           "%s%s%s\n", out, tf.vocab ? ", model.safetensors and the tokenizer's vocab.json, merges.txt, "
           "tokenizer_config.json" : " and model.safetensors", mc.num_layers, mc.hidden_size, mc.vocab_size,
           t.total_real, llm4d_ckpt_dir(c), tf.vocab ? "" : "; no tokenizer files: ", tf.vocab ? "" : tf.why);
done:
    free(text);
    free(ttext);
    cJSON_Delete(cfg);
    cJSON_Delete(tcfg);
    tok_files_free(&tf);
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
    LLM4D_TRY(read_file(path, &buf, &n, err));
    *out = cJSON_Parse(buf);
    free(buf);
    if (!cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return llm4d_fail(err, LLM4D_EUSER, "%s is not a JSON object; is it a Hugging Face config.json?", path);
    }
    return LLM4D_OK;
}

static llm4d_code cfg_int(const cJSON *j, const char *path, const char *key, int required, int *out, llm4d_err *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x || cJSON_IsNull(x)) {
        if (required) return llm4d_fail(err, LLM4D_EUSER, "%s has no \"%s\"; is it a GPT-2 config.json?", path, key);
        return LLM4D_OK;
    }
    /* the range first: converting a double outside int's range is undefined */
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 1 && x->valuedouble <= INT_MAX) ||
        x->valuedouble != (double)(int)x->valuedouble)
        return llm4d_fail(err, LLM4D_EUSER, "%s: \"%s\" must be a positive integer", path, key);
    *out = (int)x->valuedouble;
    return LLM4D_OK;
}

static llm4d_code hf_model_config(const cJSON *j, const char *path, llm4d_model_config *m, int *tied,
                                  llm4d_err *err) {
    memset(m, 0, sizeof *m);
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (cJSON_IsString(x) && strcmp(x->valuestring, "gpt2"))
        return llm4d_fail(err, LLM4D_EUSER, "%s: model_type is '%s'; llm4d imports GPT-2 models (model_type gpt2)",
                          path, x->valuestring);
    LLM4D_TRY(cfg_int(j, path, "vocab_size", 1, &m->vocab_size, err));
    LLM4D_TRY(cfg_int(j, path, "n_embd", 1, &m->hidden_size, err));
    LLM4D_TRY(cfg_int(j, path, "n_layer", 1, &m->num_layers, err));
    LLM4D_TRY(cfg_int(j, path, "n_head", 1, &m->num_attention_heads, err));
    LLM4D_TRY(cfg_int(j, path, "n_positions", 1, &m->max_position_embeddings, err));
    m->ffn_hidden_size = 4 * m->hidden_size;
    LLM4D_TRY(cfg_int(j, path, "n_inner", 0, &m->ffn_hidden_size, err));
    if (m->hidden_size % m->num_attention_heads)
        return llm4d_fail(err, LLM4D_EUSER, "%s: n_head %d does not divide n_embd %d", path, m->num_attention_heads,
                          m->hidden_size);
    x = cJSON_GetObjectItemCaseSensitive(j, "activation_function");
    if (x && !(cJSON_IsString(x) && (!strcmp(x->valuestring, "gelu_new") ||
                                     !strcmp(x->valuestring, "gelu_pytorch_tanh"))))
        return llm4d_fail(err, LLM4D_EUSER, "%s: activation_function is %s; llm4d's GPT uses the tanh GELU "
                          "(gelu_new), so this model cannot be imported exactly", path,
                          cJSON_IsString(x) ? x->valuestring : "not a string");
    x = cJSON_GetObjectItemCaseSensitive(j, "layer_norm_epsilon");
    if (x && !(cJSON_IsNumber(x) && fabs(x->valuedouble - 1e-5) <= 1e-12))
        return llm4d_fail(err, LLM4D_EUSER, "%s: layer_norm_epsilon is %g; llm4d's LayerNorm uses 1e-5, so this "
                          "model cannot be imported exactly", path, cJSON_IsNumber(x) ? x->valuedouble : NAN);
    x = cJSON_GetObjectItemCaseSensitive(j, "scale_attn_weights");
    if (cJSON_IsFalse(x))
        return llm4d_fail(err, LLM4D_EUSER, "%s: scale_attn_weights is false; llm4d scales attention by "
                          "1/sqrt(head size), so this model cannot be imported exactly", path);
    x = cJSON_GetObjectItemCaseSensitive(j, "scale_attn_by_inverse_layer_idx");
    if (cJSON_IsTrue(x))
        return llm4d_fail(err, LLM4D_EUSER, "%s: scale_attn_by_inverse_layer_idx is true; llm4d does not scale "
                          "attention by layer, so this model cannot be imported exactly", path);
    x = cJSON_GetObjectItemCaseSensitive(j, "tie_word_embeddings");
    *tied = !cJSON_IsFalse(x);
    m->hidden_dropout_prob = 0.1f;
    m->attention_probs_dropout_prob = 0.1f;
    m->initializer_range = 0.02f;
    m->eos_token_id = 50256;
    if (cJSON_IsNumber(x = cJSON_GetObjectItemCaseSensitive(j, "resid_pdrop")))
        m->hidden_dropout_prob = (float)x->valuedouble;
    if (cJSON_IsNumber(x = cJSON_GetObjectItemCaseSensitive(j, "attn_pdrop")))
        m->attention_probs_dropout_prob = (float)x->valuedouble;
    if (cJSON_IsNumber(x = cJSON_GetObjectItemCaseSensitive(j, "initializer_range")))
        m->initializer_range = (float)x->valuedouble;
    if (cJSON_IsNumber(x = cJSON_GetObjectItemCaseSensitive(j, "eos_token_id"))) m->eos_token_id = x->valueint;
    m->vocab_size_divisible_unit = 128;
    m->padded_vocab_size = (m->vocab_size + 127) / 128 * 128;
    snprintf(m->model_type, sizeof m->model_type, "GPT");
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
                          "the directory of a Hugging Face GPT-2 model", dir);
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

/* Which table entry an HF tensor name is (-1: none); *ignore set for the buffers and the tied head. */
static int hf_lookup(const llm4d_param_table *t, const char *name, int *ignore, int *is_head) {
    const char *s = strip_prefix(name);
    *ignore = *is_head = 0;
    if (!strcmp(name, "lm_head.weight")) {
        *is_head = 1;
        return -1;
    }
    const size_t n = strlen(s);
    if (!strncmp(s, "h.", 2) && ((n > 10 && !strcmp(s + n - 10, ".attn.bias")) ||
                                 (n > 17 && !strcmp(s + n - 17, ".attn.masked_bias")))) {
        *ignore = 1;
        return -1;
    }
    for (int i = 0; i < t->n; i++)
        if (!strcmp(strip_prefix(t->p[i].name), s)) return i;
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
        CHECK(llm4d_fail(&err, LLM4D_EUSER, "%s has no config.json; pass the directory of a Hugging Face GPT-2 model "
                         "(config.json and model.safetensors)", hf_dir));
    CHECK(read_json_file(path, &hcfg, &err));
    CHECK(hf_model_config(hcfg, path, &mc, &tied, &err));
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
                CHECK(llm4d_fail(&err, LLM4D_EUSER, "%s holds tensor '%s', which is not part of a GPT-2 model of "
                                 "%d layers; is it a GPT-2 checkpoint matching its config.json?", f->path, x->name,
                                 mc.num_layers));
            const llm4d_param *p = &t.p[i];
            if (found[i])
                CHECK(llm4d_fail(&err, LLM4D_EUSER, "%s: tensor '%s' appears twice in the model's files", f->path,
                                 x->name));
            int64_t s[2];
            const int nd = hf_shape(p, s);
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
            if (is_linear_weight(p->kind)) transpose(params + p->offset, tmp, s[0], s[1]);
            else memcpy(params + p->offset, tmp, n * sizeof(float));
            found[i] = 1;
        }
    }
    for (int i = 0; i < t.n; i++)
        if (!found[i])
            CHECK(llm4d_fail(&err, LLM4D_EUSER, "%s has no tensor '%s' (nor '%s'); the model files are incomplete",
                             hf_dir, t.p[i].name, strip_prefix(t.p[i].name)));
    if (head) {
        /* a stored head must be the embedding: llm4d's LM head is tied to wte */
        const llm4d_param *wte = &t.p[0];
        const size_t n = (size_t)wte->rows_real * (size_t)wte->shape[1];
        int same = head->ndim == 2 && head->shape[0] == wte->rows_real && head->shape[1] == wte->shape[1] &&
                   llm4d_st_convert(tmp, LLM4D_ST_F32, head->data, head->dtype, n) &&
                   memcmp(tmp, params + wte->offset, n * sizeof(float)) == 0;
        if (!same)
            CHECK(llm4d_fail(&err, LLM4D_EUSER, "%s: lm_head.weight differs from transformer.wte.weight; llm4d's LM "
                             "head is tied to the token embedding, so an untied head cannot be imported", head_file));
    } else if (!tied) {
        CHECK(llm4d_fail(&err, LLM4D_EUSER, "%s: tie_word_embeddings is false but no lm_head.weight is stored",
                         path));
    }
    meta = cJSON_CreateObject();
    cJSON *src = cJSON_AddObjectToObject(meta, "converted_from");
    cJSON_AddStringToObject(src, "format", "huggingface-gpt2");
    char *abs = realpath(hf_dir, NULL);
    cJSON_AddStringToObject(src, "path", abs ? abs : hf_dir);
    free(abs);
    const size_t whole[2] = {0, t.total};
    const llm4d_ckpt_state st = llm4d_ckpt_state_range(&t, whole, params, NULL, NULL);
    CHECK(llm4d_gpt_ckpt_save(&(llm4d_ckpt_dest){.output_dir = out, .tag = ""}, &mc, &st, meta, &err));
    printf("llm4d convert: wrote %s/step_0 (weights only: GPT-2, %d layers, hidden %d, vocab %d, %zu parameters) "
           "from %s\n", out, mc.num_layers, mc.hidden_size, mc.vocab_size, t.total_real, hf_dir);
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
