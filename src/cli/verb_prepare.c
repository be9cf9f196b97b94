/* verb_prepare.c — `llm4d prepare-data`: raw text or JSON lines to a tokenized corpus (Paddle npz or Megatron
 * bin/idx). Flags follow PaddleNLP's preprocess_data.py (`--input`, `--json_key`, `--output_prefix`,
 * `--append_eos`, `--workers`); dashes and underscores are both accepted. The work is in data/prepare.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "data/prepare.h"
#include "data/tokenizer.h"

static void help(void) {
    printf("usage: llm4d prepare-data --input FILE [--input FILE ...] --output-prefix P [options]\n"
           "Tokenizes documents with GPT-2's BPE (or a Hugging Face tokenizer.json's byte-level BPE) and writes\n"
           "P_ids.npz (Paddle: arrays ids uint16, or int32 for vocabularies of 65500 tokens and more, and lens\n"
           "int32) or P.bin + P.idx (Megatron MMIDIDX, the same id types).\n\n"
           "  --input PATH             JSON lines (.jsonl/.json) or text, plain or .gz; a directory means its\n"
           "                           files in sorted order; repeat for several inputs\n"
           "  --json-key KEY           key of the text in each JSON line (default text)\n"
           "  --input-format F         jsonl or text (default: by extension; .jsonl/.json are JSON lines)\n"
           "  --split-on-blank-lines   text input: documents are separated by blank lines (default: one per line)\n"
           "  --output-prefix P        output path prefix (directories are created)\n"
           "  --format npz|mmap        npz (default) or mmap (Megatron .bin/.idx, streamed to disk)\n"
           "  --append-eos             end every document with the end-of-text token, as GPT pretraining expects:\n"
           "                           <|endoftext|> (50256) for GPT-2; a tokenizer.json's <|end_of_text|>,\n"
           "                           <|endoftext|>, </s> or <eos>, the first it has\n"
           "  --workers N              tokenizing threads (default: all cores)\n"
           "  --vocab_dir DIR|FILE     encoder.json + vocab.bpe (default $LLM4D_VOCAB_DIR or ~/.cache/llm4d/gpt2), or\n"
           "                           a Hugging Face tokenizer.json: the file, or a directory holding it (and\n"
           "                           no encoder.json); byte-level BPE only (GPT-2's, Llama 3's)\n"
           "  --no-progress            no progress bar even on a terminal\n"
           "Documents are stripped of surrounding whitespace; empty ones are dropped.\n");
}

/* A size in decimal units (kB = 1000 bytes, as MB/s rates are quoted) with three significant figures or so: a
 * small input reads "46 bytes", not "0.0 MB". */
static const char *fmt_size(char *buf, size_t n, double bytes) {
    if (bytes < 1000) snprintf(buf, n, "%.0f byte%s", bytes, bytes == 1 ? "" : "s");
    else if (bytes < 1e6) snprintf(buf, n, "%.1f kB", bytes / 1e3);
    else if (bytes < 1e9) snprintf(buf, n, "%.1f MB", bytes / 1e6);
    else snprintf(buf, n, "%.2f GB", bytes / 1e9);
    return buf;
}

/* "--json_key" -> "json-key" for comparison */
static void norm(const char *a, char *out, size_t n) {
    size_t i = 0;
    while (*a == '-') a++;
    for (; *a && i + 1 < n; a++) out[i++] = *a == '_' ? '-' : *a;
    out[i] = 0;
}

int llm4d_cmd_prepare_data(int argc, char **argv) {
    llm4d_prep_opts o = {.json_key = "text", .format = LLM4D_PREP_NPZ};
    const char **inputs = calloc((size_t)argc, sizeof *inputs);
    const char *vocab_flag = NULL;
    int no_progress = 0, n_in = 0;
    if (!inputs) return 1;
    for (int i = 1; i < argc; i++) {
        char name[64];
        if (strncmp(argv[i], "--", 2)) {
            fprintf(stderr, "llm4d prepare-data: unexpected argument '%s'; run `llm4d prepare-data --help`\n", argv[i]);
            free(inputs);
            return 2;
        }
        norm(argv[i], name, sizeof name);
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (!strcmp(name, "help") || !strcmp(name, "h")) {
            help();
            free(inputs);
            return 0;
        } else if (!strcmp(name, "append-eos") || !strcmp(name, "append-eod")) {
            o.append_eos = 1;
            takes = 0;
        } else if (!strcmp(name, "split-on-blank-lines")) {
            o.split_on_blank_lines = 1;
            takes = 0;
        } else if (!strcmp(name, "no-progress")) {
            no_progress = 1;
            takes = 0;
        } else if (!val) {
            fprintf(stderr, "llm4d prepare-data: %s needs a value; run `llm4d prepare-data --help`\n", argv[i]);
            free(inputs);
            return 2;
        } else if (!strcmp(name, "input")) {
            inputs[n_in++] = val;
        } else if (!strcmp(name, "json-key")) {
            o.json_key = val;
        } else if (!strcmp(name, "output-prefix")) {
            o.output_prefix = val;
        } else if (!strcmp(name, "vocab-dir")) {
            vocab_flag = val;
        } else if (!strcmp(name, "format") || !strcmp(name, "data-impl")) {
            if (!strcmp(val, "npz")) o.format = LLM4D_PREP_NPZ;
            else if (!strcmp(val, "mmap")) o.format = LLM4D_PREP_MMAP;
            else {
                fprintf(stderr, "llm4d prepare-data: --format must be npz or mmap, not '%s'\n", val);
                free(inputs);
                return 2;
            }
        } else if (!strcmp(name, "input-format")) {
            if (!strcmp(val, "jsonl") || !strcmp(val, "json")) o.input_kind = LLM4D_PREP_JSONL;
            else if (!strcmp(val, "text") || !strcmp(val, "txt")) o.input_kind = LLM4D_PREP_TEXT;
            else {
                fprintf(stderr, "llm4d prepare-data: --input-format must be jsonl or text, not '%s'\n", val);
                free(inputs);
                return 2;
            }
        } else if (!strcmp(name, "chunk-bytes")) { /* undocumented: tests cross chunk boundaries with tiny chunks */
            o.chunk_bytes = (size_t)strtoull(val, NULL, 10);
        } else if (!strcmp(name, "workers")) {
            char *end;
            long w = strtol(val, &end, 10);
            if (*end || w < 1 || w > 4096) {
                fprintf(stderr, "llm4d prepare-data: --workers must be a positive integer, not '%s'\n", val);
                free(inputs);
                return 2;
            }
            o.workers = (int)w;
        } else {
            fprintf(stderr, "llm4d prepare-data: unknown option %s; run `llm4d prepare-data --help`\n", argv[i]);
            free(inputs);
            return 2;
        }
        i += takes;
    }
    if (n_in == 0 || !o.output_prefix) {
        fprintf(stderr, "llm4d prepare-data: %s is required; run `llm4d prepare-data --help`\n",
                n_in == 0 ? "--input" : "--output-prefix");
        free(inputs);
        return 2;
    }
    char dir[4096];
    o.vocab_dir = llm4d_tokenizer_default_dir(vocab_flag, dir, sizeof dir);
    o.inputs = inputs;
    o.n_inputs = n_in;
    o.progress = !no_progress && isatty(STDERR_FILENO) ? stderr : NULL;
    llm4d_prep_stats st;
    llm4d_err err = {0};
    llm4d_code rc = llm4d_prepare(&o, &st, &err);
    free(inputs);
    if (rc != LLM4D_OK) {
        fprintf(stderr, "llm4d prepare-data: %s\n", err.msg);
        return rc == LLM4D_EUSER || rc == LLM4D_EIO ? 2 : 1;
    }
    double s = st.seconds > 0 ? st.seconds : 1e-9;
    char size[32], rate[32];
    printf("llm4d prepare-data: %lld documents (%lld empty dropped), %lld tokens from %s of text in %.2f s "
           "(%s/s, %.0f tokens/s, %d workers) -> %s%s%s\n",
           (long long)st.n_docs, (long long)st.n_empty, (long long)st.n_tokens,
           fmt_size(size, sizeof size, (double)st.bytes_in), st.seconds, fmt_size(rate, sizeof rate, st.bytes_in / s),
           (double)st.n_tokens / s, st.workers, st.outputs[0], st.outputs[1][0] ? " + " : "", st.outputs[1]);
    return 0;
}
