/* convert_tok.c — the tokenizer files of a `llm4d convert --to hf` export (convert_hf.h), and the small-file reading
 * and atomic writing the verb shares.
 *
 * Two kinds of vocabulary, as llm4d's tokenizer reads them (data/tokenizer.h): GPT-2's encoder.json and vocab.bpe
 * (the very files OpenAI published and HF renamed), exported as vocab.json and merges.txt with a
 * tokenizer_config.json for GPT2Tokenizer; or a Hugging Face tokenizer.json (Llama 3's, or any byte-level BPE one:
 * --vocab_dir names the file or a directory holding it), copied as it is with a tokenizer_config.json for
 * PreTrainedTokenizerFast, which is what AutoTokenizer.from_pretrained(dir) loads it through. Either way the files
 * are copied only after llm4d's own tokenizer has loaded them, so what is exported is a vocabulary llm4d tokenizes
 * with, and they must fit the model: GPT-2's exactly its 50257 tokens, a tokenizer.json no more ids than the
 * model's vocabulary (models often keep unused rows). Without --vocab_dir a vocabulary that is not found or does not
 * fit is left out and the export says why; with it, that is a user error before anything is written.
 *
 * A tokenizer.json's added tokens also give config.json's bos_token_id (the first of <|begin_of_text|>, <s>, <bos>)
 * and tokenizer_config.json's bos/eos strings (the eos one is the model's eos_token_id). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/convert_hf.h"
#include "data/tokenizer.h"

llm4d_code llm4d_convert_write_file(const char *path, const char *data, size_t len, llm4d_err *err) {
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

llm4d_code llm4d_convert_read_file(const char *path, char **out, size_t *len, llm4d_err *err) {
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

void llm4d_hf_tok_free(llm4d_hf_tok *tf) {
    free(tf->vocab);
    free(tf->merges);
    free(tf->json);
}

/* The tokenizer.json the tokenizer loaded from dir (a file, or a directory with tokenizer.json and no
 * encoder.json, as data/tokenizer.h reads it) into path; 0 when dir holds GPT-2's files. */
static int json_path(const char *dir, char *path, size_t n) {
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISREG(st.st_mode)) return snprintf(path, n, "%s", dir), 1;
    snprintf(path, n, "%s/encoder.json", dir);
    if (access(path, F_OK) == 0) return 0;
    snprintf(path, n, "%s/tokenizer.json", dir);
    return 1;
}

/* bos_token_id and the bos/eos strings from a tokenizer.json's added tokens. */
static void json_specials(llm4d_hf_tok *tf, int eos) {
    cJSON *j = cJSON_Parse(tf->json);
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(j, "added_tokens"), *a;
    static const char *const bos_names[] = {"<|begin_of_text|>", "<s>", "<bos>"};
    int rank = 3;
    cJSON_ArrayForEach(a, added) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(a, "content"), *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        if (!cJSON_IsString(c) || !cJSON_IsNumber(id) || strlen(c->valuestring) >= sizeof tf->bos_tok) continue;
        if (id->valueint == eos) snprintf(tf->eos_tok, sizeof tf->eos_tok, "%s", c->valuestring);
        for (int k = 0; k < rank; k++)
            if (!strcmp(c->valuestring, bos_names[k])) {
                rank = k;
                tf->bos = id->valueint;
                snprintf(tf->bos_tok, sizeof tf->bos_tok, "%s", c->valuestring);
            }
    }
    cJSON_Delete(j);
}

llm4d_code llm4d_hf_tok_read(const char *vocab_flag, const llm4d_model_config *m, llm4d_hf_tok *tf,
                             llm4d_err *err) {
    char dir[4096], path[4200];
    tf->bos = -1;
    llm4d_tokenizer_default_dir(vocab_flag, dir, sizeof dir);
    llm4d_tokenizer *tok = NULL;
    llm4d_err e = {0};
    if (llm4d_tokenizer_load(&tok, dir, &e) != LLM4D_OK) {
        if (vocab_flag || e.code == LLM4D_ENOMEM) return *err = e, e.code;
        snprintf(tf->why, sizeof tf->why, "%s", e.msg);
        return LLM4D_OK;
    }
    const int tok_vocab = llm4d_tokenizer_vocab_size(tok);
    llm4d_tokenizer_free(tok);
    if (json_path(dir, path, sizeof path)) {
        if (tok_vocab > m->vocab_size)
            return llm4d_fail(err, LLM4D_EUSER, "the model's vocabulary has %d tokens but %s has ids up to %d; give "
                              "the model's own tokenizer.json, or drop --vocab_dir to export the weights alone",
                              m->vocab_size, path, tok_vocab - 1);
        LLM4D_TRY(llm4d_convert_read_file(path, &tf->json, &tf->json_n, err));
        json_specials(tf, m->eos_token_id);
        return LLM4D_OK;
    }
    if (tok_vocab != m->vocab_size) {
        if (vocab_flag)
            return llm4d_fail(err, LLM4D_EUSER, "the model's vocabulary has %d tokens but GPT-2's in %s has %d; drop "
                              "--vocab_dir to export the weights without tokenizer files", m->vocab_size, dir, tok_vocab);
        snprintf(tf->why, sizeof tf->why, "the model's vocabulary of %d tokens is not GPT-2's %d (--vocab_dir may "
                 "name the model's tokenizer.json)", m->vocab_size, tok_vocab);
        return LLM4D_OK;
    }
    tf->bos = 50256; /* GPT-2's one special token is both */
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    LLM4D_TRY(llm4d_convert_read_file(path, &tf->vocab, &tf->vocab_n, err));
    snprintf(path, sizeof path, "%s/vocab.bpe", dir);
    LLM4D_TRY(llm4d_convert_read_file(path, &tf->merges, &tf->merges_n, err));
    if (tf->merges_n && tf->merges[tf->merges_n - 1] != '\n') {
        /* HF's GPT2Tokenizer reads the merges as text.split("\n")[1:-1]: without the final newline it would drop
         * the last merge (llm4d's tokenizer, like encoder.py, takes the file either way) */
        char *mg = realloc(tf->merges, tf->merges_n + 2);
        if (!mg) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
        mg[tf->merges_n++] = '\n';
        mg[tf->merges_n] = 0;
        tf->merges = mg;
    }
    return LLM4D_OK;
}

/* What from_pretrained reads besides the vocabulary: the class, the context length (HF warns past it) and the
 * special tokens; GPT-2's are all <|endoftext|>, as the Hub's gpt2 has them. */
static cJSON *tokenizer_config(const llm4d_hf_tok *tf, const llm4d_model_config *m) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddStringToObject(j, "tokenizer_class", tf->json ? "PreTrainedTokenizerFast" : "GPT2Tokenizer");
    cJSON_AddNumberToObject(j, "model_max_length", m->max_position_embeddings);
    if (tf->json) {
        if (tf->bos_tok[0]) cJSON_AddStringToObject(j, "bos_token", tf->bos_tok);
        if (tf->eos_tok[0]) cJSON_AddStringToObject(j, "eos_token", tf->eos_tok);
        cJSON_AddBoolToObject(j, "clean_up_tokenization_spaces", 0);
        return j;
    }
    cJSON_AddStringToObject(j, "bos_token", "<|endoftext|>");
    cJSON_AddStringToObject(j, "eos_token", "<|endoftext|>");
    cJSON_AddStringToObject(j, "unk_token", "<|endoftext|>");
    cJSON_AddBoolToObject(j, "add_prefix_space", 0);
    return j;
}

llm4d_code llm4d_hf_tok_write(const llm4d_hf_tok *tf, const llm4d_model_config *m, const char *out, llm4d_err *err) {
    char path[4200];
    if (tf->json) {
        snprintf(path, sizeof path, "%s/tokenizer.json", out);
        LLM4D_TRY(llm4d_convert_write_file(path, tf->json, tf->json_n, err));
    } else if (tf->vocab) {
        snprintf(path, sizeof path, "%s/vocab.json", out);
        LLM4D_TRY(llm4d_convert_write_file(path, tf->vocab, tf->vocab_n, err));
        snprintf(path, sizeof path, "%s/merges.txt", out);
        LLM4D_TRY(llm4d_convert_write_file(path, tf->merges, tf->merges_n, err));
    } else {
        return LLM4D_OK;
    }
    cJSON *c = tokenizer_config(tf, m);
    char *text = c ? cJSON_Print(c) : NULL;
    cJSON_Delete(c);
    if (!text) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    snprintf(path, sizeof path, "%s/tokenizer_config.json", out);
    const llm4d_code rc = llm4d_convert_write_file(path, text, strlen(text), err);
    free(text);
    return rc;
}
