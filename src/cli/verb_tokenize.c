/* verb_tokenize.c — `llm4d tokenize` and `llm4d detokenize`: the GPT-2 tokenizer from the command line.
 *
 *   llm4d tokenize "Hello, world"              -> 15496 11 995
 *   llm4d tokenize --file doc.txt              -> the ids of the whole file
 *   llm4d tokenize --jsonl docs.jsonl          -> one line of ids per JSON line (value of --json-key, default text)
 *   llm4d detokenize 15496 11 995              -> Hello, world
 *   llm4d detokenize --lines ids.txt           -> one JSON string per line of ids (so any bytes survive the trip)
 *
 * The line-per-document forms exist so that scripts (the tests, a user checking a corpus) can tokenize many
 * documents in one process. Text is encoded as is (no strip, no EOS); prepare-data is the verb that builds
 * training files. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "data/tokenizer.h"

static int fail_line(const char *verb, const llm4d_err *err) {
    fprintf(stderr, "llm4d %s: %s\n", verb, err->msg);
    return err->code == LLM4D_EUSER || err->code == LLM4D_EIO ? 2 : 1;
}

static int usage_error(const char *verb, const char *what) {
    fprintf(stderr, "llm4d %s: %s; run `llm4d %s --help`\n", verb, what, verb);
    return 2;
}

/* Read a whole file (or stdin for "-"); NUL-terminated. */
static int slurp(const char *path, char **data, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return -1;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        if (n == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (f != stdin) fclose(f);
    if (!buf) return -1;
    buf[n] = 0;
    *data = buf;
    *len = n;
    return 0;
}

static void print_ids(const llm4d_ids *ids) {
    for (size_t i = 0; i < ids->n; i++) printf(i ? " %d" : "%d", ids->v[i]);
    putchar('\n');
}

/* Encode text; a text that is not UTF-8 is a user error naming where. */
static llm4d_code encode_checked(llm4d_tokenizer_worker *w, const char *what, const char *s, size_t n,
                                 llm4d_ids *ids, llm4d_err *err) {
    size_t ok = llm4d_utf8_valid(s, n);
    if (ok != n)
        return llm4d_fail(err, LLM4D_EUSER, "%s: invalid UTF-8 at byte %zu; convert it to UTF-8 first", what, ok);
    return llm4d_tokenizer_encode(w, s, n, ids, err);
}

int llm4d_cmd_tokenize(int argc, char **argv) {
    const char *vocab_flag = NULL, *file = NULL, *jsonl = NULL, *key = "text";
    char *text_args = NULL;
    size_t text_len = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: llm4d tokenize [--vocab_dir DIR|FILE] (TEXT... | --file PATH | --jsonl PATH\n"
                   "                      [--json-key KEY])\n"
                   "Prints the GPT-2 token ids of TEXT (several arguments are joined by spaces), of a whole file\n"
                   "(- is stdin), or of each JSON line's KEY value (one line of ids per document).\n"
                   "The vocabulary comes from --vocab_dir, $LLM4D_VOCAB_DIR, or ~/.cache/llm4d/gpt2\n"
                   "(tools/fetch_gpt2_vocab.sh installs it). --vocab_dir may also name a Hugging Face\n"
                   "tokenizer.json of a byte-level BPE (GPT-2's, Llama 3's), or a directory holding one and no\n"
                   "encoder.json; its added tokens found in the text (e.g. <|end_of_text|>) become their ids.\n");
            free(text_args);
            return 0;
        }
        int has_val = i + 1 < argc;
        if (!strcmp(a, "--vocab_dir") || !strcmp(a, "--vocab-dir")) {
            if (!has_val) return usage_error("tokenize", "--vocab_dir needs a directory");
            vocab_flag = argv[++i];
        } else if (!strcmp(a, "--file")) {
            if (!has_val) return usage_error("tokenize", "--file needs a path");
            file = argv[++i];
        } else if (!strcmp(a, "--jsonl")) {
            if (!has_val) return usage_error("tokenize", "--jsonl needs a path");
            jsonl = argv[++i];
        } else if (!strcmp(a, "--json-key") || !strcmp(a, "--json_key")) {
            if (!has_val) return usage_error("tokenize", "--json-key needs a key");
            key = argv[++i];
        } else if (a[0] == '-' && a[1] == '-' && !(a[2] == 0)) {
            free(text_args);
            fprintf(stderr, "llm4d tokenize: unknown option %s; run `llm4d tokenize --help`\n", a);
            return 2;
        } else {
            if (!strcmp(a, "--")) {
                if (++i >= argc) break;
                a = argv[i];
            }
            size_t l = strlen(a);
            char *nt = realloc(text_args, text_len + l + 2);
            if (!nt) {
                free(text_args);
                fprintf(stderr, "llm4d tokenize: out of memory\n");
                return 1;
            }
            text_args = nt;
            if (text_len) text_args[text_len++] = ' ';
            memcpy(text_args + text_len, a, l + 1);
            text_len += l;
        }
    }
    if ((text_args != NULL) + (file != NULL) + (jsonl != NULL) != 1) {
        free(text_args);
        return usage_error("tokenize", "give exactly one of TEXT, --file PATH or --jsonl PATH");
    }
    char dir[4096];
    llm4d_tokenizer_default_dir(vocab_flag, dir, sizeof dir);
    llm4d_err err = {0};
    llm4d_tokenizer *tok = NULL;
    llm4d_tokenizer_worker *w = NULL;
    llm4d_ids ids = {0};
    char *data = NULL;
    size_t len = 0;
    llm4d_code rc = llm4d_tokenizer_load(&tok, dir, &err);
    if (rc == LLM4D_OK && !(w = llm4d_tokenizer_worker_new(tok)))
        rc = llm4d_fail(&err, LLM4D_ENOMEM, "out of memory creating a tokenizer worker");
    if (rc == LLM4D_OK && text_args) {
        rc = encode_checked(w, "the text", text_args, text_len, &ids, &err);
        if (rc == LLM4D_OK) print_ids(&ids);
    } else if (rc == LLM4D_OK && file) {
        if (slurp(file, &data, &len))
            rc = llm4d_fail(&err, LLM4D_EUSER, "cannot read %s (%s)", file, strerror(errno));
        else if ((rc = encode_checked(w, file, data, len, &ids, &err)) == LLM4D_OK)
            print_ids(&ids);
    } else if (rc == LLM4D_OK && jsonl) {
        if (slurp(jsonl, &data, &len))
            rc = llm4d_fail(&err, LLM4D_EUSER, "cannot read %s (%s)", jsonl, strerror(errno));
        long line = 0;
        for (char *p = data; rc == LLM4D_OK && p && p < data + len;) {
            char *nl = memchr(p, '\n', (size_t)(data + len - p));
            char *e = nl ? nl : data + len;
            line++;
            cJSON *obj = cJSON_ParseWithLength(p, (size_t)(e - p));
            cJSON *v = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
            if (!obj)
                rc = llm4d_fail(&err, LLM4D_EUSER, "%s line %ld is not valid JSON", jsonl, line);
            else if (!cJSON_IsString(v))
                rc = llm4d_fail(&err, LLM4D_EUSER, "%s line %ld has no string value for key '%s' (see --json-key)",
                                jsonl, line, key);
            else {
                char what[4200];
                snprintf(what, sizeof what, "%s line %ld", jsonl, line);
                ids.n = 0;
                rc = encode_checked(w, what, v->valuestring, strlen(v->valuestring), &ids, &err);
                if (rc == LLM4D_OK) print_ids(&ids);
            }
            cJSON_Delete(obj);
            p = e + 1;
        }
    }
    free(data);
    free(text_args);
    llm4d_ids_free(&ids);
    llm4d_tokenizer_worker_free(w);
    llm4d_tokenizer_free(tok);
    if (rc != LLM4D_OK) return fail_line("tokenize", &err);
    return fflush(stdout) ? 1 : 0;
}

/* Parse whitespace-separated ids from s; a token that is not an integer is a user error, said of `what` (NULL: the
 * command line's ids, which the verb's prefix already names). */
static llm4d_code parse_ids(const char *s, const char *what, llm4d_ids *ids, llm4d_err *err) {
    ids->n = 0;
    while (*s) {
        while (*s == ' ' || *s == '\t' || *s == ',' || *s == '\r' || *s == '\n') s++;
        if (!*s) break;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < INT32_MIN || v > INT32_MAX ||
            (*end && *end != ' ' && *end != '\t' && *end != ',' && *end != '\r' && *end != '\n'))
            return llm4d_fail(err, LLM4D_EUSER, "%s%s'%.20s' is not a token id", what ? what : "", what ? ": " : "",
                              s);
        LLM4D_TRY(llm4d_ids_reserve(ids, 1, err));
        ids->v[ids->n++] = (int32_t)v;
        s = end;
    }
    return LLM4D_OK;
}

int llm4d_cmd_detokenize(int argc, char **argv) {
    const char *vocab_flag = NULL, *lines = NULL;
    llm4d_ids ids = {0};
    llm4d_err err = {0};
    llm4d_code rc = LLM4D_OK;
    for (int i = 1; i < argc && rc == LLM4D_OK; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: llm4d detokenize [--vocab_dir DIR|FILE] (ID... | --lines PATH)\n"
                   "Prints the text of GPT-2 token ids; with --lines, each line of ids becomes one JSON string.\n"
                   "--vocab_dir as for tokenize (a tokenizer.json too).\n");
            llm4d_ids_free(&ids);
            return 0;
        }
        if (!strcmp(a, "--vocab_dir") || !strcmp(a, "--vocab-dir")) {
            if (i + 1 >= argc) return usage_error("detokenize", "--vocab_dir needs a directory");
            vocab_flag = argv[++i];
        } else if (!strcmp(a, "--lines")) {
            if (i + 1 >= argc) return usage_error("detokenize", "--lines needs a path");
            lines = argv[++i];
        } else if (a[0] == '-' && a[1] == '-') {
            llm4d_ids_free(&ids);
            fprintf(stderr, "llm4d detokenize: unknown option %s; run `llm4d detokenize --help`\n", a);
            return 2;
        } else {
            llm4d_ids one = {0};
            rc = parse_ids(a, NULL, &one, &err);
            if (rc == LLM4D_OK) rc = llm4d_ids_reserve(&ids, one.n, &err);
            if (rc == LLM4D_OK) {
                memcpy(ids.v + ids.n, one.v, one.n * sizeof(int32_t));
                ids.n += one.n;
            }
            llm4d_ids_free(&one);
        }
    }
    if (rc == LLM4D_OK && (ids.n > 0) == (lines != NULL)) {
        llm4d_ids_free(&ids);
        return usage_error("detokenize", "give token ids or --lines PATH (one of them)");
    }
    char dir[4096];
    llm4d_tokenizer_default_dir(vocab_flag, dir, sizeof dir);
    llm4d_tokenizer *tok = NULL;
    char *data = NULL, *text = NULL;
    size_t len = 0, tl;
    if (rc == LLM4D_OK) rc = llm4d_tokenizer_load(&tok, dir, &err);
    if (rc == LLM4D_OK && !lines) {
        rc = llm4d_tokenizer_decode(tok, ids.v, ids.n, &text, &tl, &err);
        if (rc == LLM4D_OK) {
            fwrite(text, 1, tl, stdout);
            putchar('\n');
        }
        free(text);
    } else if (rc == LLM4D_OK) {
        if (slurp(lines, &data, &len))
            rc = llm4d_fail(&err, LLM4D_EUSER, "cannot read %s (%s)", lines, strerror(errno));
        long line = 0;
        for (char *p = data; rc == LLM4D_OK && p < data + len;) {
            char *nl = memchr(p, '\n', (size_t)(data + len - p));
            if (nl) *nl = 0;
            line++;
            char what[4200];
            snprintf(what, sizeof what, "%s line %ld", lines, line);
            rc = parse_ids(p, what, &ids, &err);
            if (rc == LLM4D_OK) rc = llm4d_tokenizer_decode(tok, ids.v, ids.n, &text, &tl, &err);
            if (rc == LLM4D_OK) {
                /* JSON keeps every byte sequence printable; bytes that are not UTF-8 are escaped one by one */
                size_t ok = llm4d_utf8_valid(text, tl);
                if (ok == tl) {
                    cJSON *s = cJSON_CreateString(text);
                    char *js = s ? cJSON_PrintUnformatted(s) : NULL;
                    if (js) puts(js);
                    else rc = llm4d_fail(&err, LLM4D_ENOMEM, "out of memory printing %s", what);
                    free(js);
                    cJSON_Delete(s);
                } else {
                    rc = llm4d_fail(&err, LLM4D_EUSER, "%s decodes to bytes that are not UTF-8 (byte %zu)", what, ok);
                }
                free(text);
            }
            if (!nl) break;
            p = nl + 1;
        }
    }
    free(data);
    llm4d_ids_free(&ids);
    llm4d_tokenizer_free(tok);
    if (rc != LLM4D_OK) return fail_line("detokenize", &err);
    return fflush(stdout) ? 1 : 0;
}
