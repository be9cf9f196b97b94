/* verb_generate.c — `llm4d generate`: continue a prompt with a trained model.
 *
 *   llm4d generate --ckpt output/ --prompt "The meaning of life is" --max_new_tokens 40 --temperature 0.8
 *   llm4d generate --ckpt output/step_1000 --prompt_ids "464 3616 286" --temperature 0
 *
 * The checkpoint (an output_dir or a step_<N> directory) gives the weights and, through meta.json, the model
 * geometry and description (GPT-2's or Llama's family, or any mix of their parts); its files are verified before
 * use. The prompt is encoded with the GPT-2 tokenizer (vocabulary files
 * from --vocab_dir, $LLM4D_VOCAB_DIR, ...: data/tokenizer.h), or given as ids. stdout gets the prompt followed by
 * its continuation, as Hugging Face's text-generation pipeline (return_full_text) and Megatron's text generation
 * give them, the continuation printed as it is generated (as text, or as ids with --print_ids or --prompt_ids);
 * --continuation_only leaves the prompt out, for scripts that want the new tokens alone. The prompt is printed
 * only once everything is loaded, so a refused input prints nothing on stdout. A line with the token counts and
 * tokens/s goes to stderr at the end. Generation stops after max_new_tokens, after the end-of-text token (unless
 * --ignore_eos), or when the model's positions are used up.
 *
 * --dump_logits FILE (testing: tests/test_convert.sh) writes the logits at every position of prompt + continuation
 * but the last, as raw float32 [positions, vocab_size]: row r is the distribution predicted for token r + 1. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/devname.h"
#include "backend/backend.h"
#include "backend/view.h"
#include "ckpt/gpt_ckpt.h"
#include "cli/cli.h"
#include "data/tokenizer.h"
#include "model/generate.h"

static const char *const usage_text =
    "usage: llm4d generate --ckpt DIR (--prompt TEXT | --prompt_ids \"ID ID ...\") [options]\n"
    "\n"
    "  --ckpt DIR            checkpoint: an output_dir (its latest step) or a step_<N> directory\n"
    "  --prompt TEXT         the text to continue (GPT-2 tokenizer, or --vocab_dir's tokenizer.json)\n"
    "  --prompt_ids IDS      the prompt as token ids, separated by spaces or commas (prints ids)\n"
    "  --max_new_tokens N    tokens to generate (default 50)\n"
    "  --temperature T       0 is greedy decoding (default 1.0)\n"
    "  --top_k K             sample among the K most probable tokens; 0: all (default 50)\n"
    "  --top_p P             sample among the most probable tokens holding probability P; 1: all (default 1.0)\n"
    "  --seed S              seed of the sampling; the same seed gives the same continuation (default 42)\n"
    "  --vocab_dir D         GPT-2 vocabulary (encoder.json, vocab.bpe); default $LLM4D_VOCAB_DIR, else\n"
    "                        $LLM4D_HOME/gpt2, else ~/.cache/llm4d/gpt2 (tools/fetch_gpt2_vocab.sh installs it);\n"
    "                        or a Hugging Face byte-level BPE tokenizer.json (the file, or its directory)\n"
    "  --ignore_eos          keep going after the end-of-text token\n"
    "  --print_ids           print token ids instead of text\n"
    "  --continuation_only   print the continuation alone (default: the prompt, then its continuation)\n"
    "  --threads N           CPU threads; 0: all cores (default 0)\n"
    "  --backend cpu|ref     kernels: oneDNN/OpenMP (default) or the naive reference ones\n"
    "  --device cpu|guard|cuda  where the tensors live: host memory (default), the guard backend's arena, which\n"
    "                        the host cannot touch (a test of the device boundary, backend.h), or a GPU (cuda, gpu)\n"
    "  --dump_logits FILE    (testing) write the logits of every position but the last, float32 [n, vocab_size]\n";

typedef struct {
    const char *ckpt, *prompt, *prompt_ids, *vocab_dir, *dump, *backend, *device;
    int max_new, top_k, threads, ignore_eos, print_ids, continuation_only;
    float temperature, top_p;
    uint64_t seed;
} gen_args;

static int usage_error(const char *what) {
    fprintf(stderr, "llm4d generate: %s; run `llm4d generate --help`\n", what);
    return 2;
}

static int report(const llm4d_err *err) {
    fprintf(stderr, "llm4d generate: %s\n", err->msg);
    return err->code == LLM4D_EUSER || err->code == LLM4D_EIO ? 2 : 1;
}

static int parse_num(const char *flag, const char *s, double lo, double hi, int integer, double *out) {
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s || *end || errno || !(x >= lo && x <= hi) || (integer && x != (double)(long long)x)) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s '%s' is not %s in [%g, %g]", flag, s, integer ? "an integer" : "a number", lo,
                 hi);
        usage_error(msg);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_args(int argc, char **argv, gen_args *a) {
    *a = (gen_args){.max_new = 50, .top_k = 50, .temperature = 1.0f, .top_p = 1.0f, .seed = 42, .backend = "cpu",
                    .device = "cpu"};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--ignore_eos")) { a->ignore_eos = 1; continue; }
        if (!strcmp(f, "--print_ids")) { a->print_ids = 1; continue; }
        if (!strcmp(f, "--continuation_only")) { a->continuation_only = 1; continue; }
        if (i + 1 >= argc) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s %s", strncmp(f, "--", 2) ? "unexpected argument" : f,
                     strncmp(f, "--", 2) ? f : "needs a value");
            return usage_error(msg);
        }
        const char *val = argv[++i];
        double x = 0;
        if (!strcmp(f, "--ckpt")) a->ckpt = val;
        else if (!strcmp(f, "--prompt")) a->prompt = val;
        else if (!strcmp(f, "--prompt_ids")) a->prompt_ids = val;
        else if (!strcmp(f, "--vocab_dir")) a->vocab_dir = val;
        else if (!strcmp(f, "--dump_logits")) a->dump = val;
        else if (!strcmp(f, "--backend")) a->backend = val;
        else if (!strcmp(f, "--device")) a->device = val;
        else if (!strcmp(f, "--max_new_tokens")) {
            if (parse_num(f, val, 0, 1e9, 1, &x)) return 2;
            a->max_new = (int)x;
        } else if (!strcmp(f, "--top_k")) {
            if (parse_num(f, val, 0, 1e9, 1, &x)) return 2;
            a->top_k = (int)x;
        } else if (!strcmp(f, "--threads")) {
            if (parse_num(f, val, 0, 4096, 1, &x)) return 2;
            a->threads = (int)x;
        } else if (!strcmp(f, "--temperature")) {
            if (parse_num(f, val, -1e30, 1e30, 0, &x)) return 2;
            a->temperature = (float)x;
        } else if (!strcmp(f, "--top_p")) {
            if (parse_num(f, val, -1e30, 1e30, 0, &x)) return 2;
            a->top_p = (float)x;
        } else if (!strcmp(f, "--seed")) {
            if (parse_num(f, val, 0, 9007199254740992.0, 1, &x)) return 2;
            a->seed = (uint64_t)x;
        } else {
            char msg[256];
            snprintf(msg, sizeof msg, "unknown option %s", f);
            return usage_error(msg);
        }
    }
    if (!a->ckpt) return usage_error("--ckpt DIR is required");
    if (!a->prompt == !a->prompt_ids) return usage_error("give exactly one of --prompt TEXT and --prompt_ids IDS");
    if (strcmp(a->backend, "cpu") && strcmp(a->backend, "ref")) return usage_error("--backend must be cpu or ref");
    if (!llm4d_device_name_known(a->device))
        return usage_error("--device must be one of " LLM4D_DEVICE_NAMES);
    if (a->prompt_ids) a->print_ids = 1;
    /* the sampler's own checks, before anything is loaded */
    llm4d_sampler smp;
    llm4d_err err = {0};
    const llm4d_sampling s = {.temperature = a->temperature, .top_k = a->top_k, .top_p = a->top_p, .seed = a->seed};
    if (llm4d_sampler_init(&smp, NULL, NULL, &s, 1, &err)) return usage_error(err.msg);
    llm4d_sampler_free(&smp);
    return 0;
}

static llm4d_code parse_ids(const char *s, llm4d_ids *ids, llm4d_err *err) {
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || v > 0x7fffffff || (*end && !strchr(" ,\t\n", *end)))
            return llm4d_fail(err, LLM4D_EUSER, "--prompt_ids: '%.20s' is not a token id; give non-negative integers "
                              "separated by spaces or commas", p);
        LLM4D_TRY(llm4d_ids_reserve(ids, 1, err));
        ids->v[ids->n++] = (int32_t)v;
        p = end;
    }
    return LLM4D_OK;
}

typedef struct {
    const llm4d_tokenizer *tok; /* NULL: print ids */
    int n;                      /* tokens printed */
    int echoed;                 /* ids of the prompt printed before them (the first new id needs a space) */
    FILE *dump;
    int V, Vp;
    const float *plog;          /* the prompt's logits, [n_prompt, Vp], filled before the first token */
    int n_prompt;
    llm4d_err err;
    int failed;
} printer;

static void dump_prompt(printer *p) {
    for (int r = 0; r < p->n_prompt; r++)
        if (fwrite(p->plog + (size_t)r * p->Vp, sizeof(float), (size_t)p->V, p->dump) != (size_t)p->V) p->failed = 1;
}

static void on_token(void *ctx, int32_t id, const float *logits) {
    printer *p = ctx;
    if (p->dump) {
        /* the first token is drawn from the prompt's last row, which the prompt's rows include */
        if (p->n == 0) dump_prompt(p);
        else if (fwrite(logits, sizeof(float), (size_t)p->V, p->dump) != (size_t)p->V) p->failed = 1;
    }
    if (p->tok) {
        /* byte-level BPE: the bytes of the ids one by one are the bytes of the whole text */
        char *text = NULL;
        size_t len = 0;
        if (llm4d_tokenizer_decode(p->tok, &id, 1, &text, &len, &p->err) == LLM4D_OK) fwrite(text, 1, len, stdout);
        free(text);
    } else {
        printf("%s%d", p->n || p->echoed ? " " : "", (int)id);
    }
    fflush(stdout);
    p->n++;
}

static int run(const gen_args *a) {
    llm4d_err err = {0};
    llm4d_backend *be = NULL;
    llm4d_tokenizer *tok = NULL;
    llm4d_ckpt *ck = NULL;
    llm4d_param_table table = {0};
    llm4d_mem mem = {0};
    float *params = NULL, *plog = NULL;
    llm4d_ids prompt = {0};
    int32_t *out = NULL;
    llm4d_gen gen = {0};
    llm4d_sampler smp = {0};
    FILE *dump = NULL;
    llm4d_model_config mc;
    memset(&mc, 0, sizeof mc);
    int rc = 0;

#define CHECK(expr)                                                                                              \
    do {                                                                                                         \
        if ((expr) != LLM4D_OK) {                                                                                \
            rc = report(&err);                                                                                   \
            goto done;                                                                                           \
        }                                                                                                        \
    } while (0)

    if (a->prompt || !a->print_ids) {
        char dir[4096];
        CHECK(llm4d_tokenizer_load(&tok, llm4d_tokenizer_default_dir(a->vocab_dir, dir, sizeof dir), &err));
    }
    if (a->prompt) {
        const size_t len = strlen(a->prompt);
        if (llm4d_utf8_valid(a->prompt, len) != len) {
            llm4d_fail(&err, LLM4D_EUSER, "--prompt is not valid UTF-8");
            rc = report(&err);
            goto done;
        }
        llm4d_tokenizer_worker *w = llm4d_tokenizer_worker_new(tok);
        if (!w) {
            llm4d_fail(&err, LLM4D_ENOMEM, "out of memory");
            rc = report(&err);
            goto done;
        }
        llm4d_code c = llm4d_tokenizer_encode(w, a->prompt, len, &prompt, &err);
        llm4d_tokenizer_worker_free(w);
        CHECK(c);
    } else {
        CHECK(parse_ids(a->prompt_ids, &prompt, &err));
    }
    if (prompt.n == 0) {
        llm4d_fail(&err, LLM4D_EUSER, "the prompt is empty; give some text or ids to continue");
        rc = report(&err);
        goto done;
    }

    CHECK(llm4d_ckpt_open(&ck, a->ckpt, &err));
    CHECK(llm4d_gpt_ckpt_model_from_meta(llm4d_ckpt_meta(ck), llm4d_ckpt_dir(ck), &mc, 128, &err));
    if (tok && llm4d_tokenizer_vocab_size(tok) > mc.vocab_size) {
        llm4d_fail(&err, LLM4D_EUSER, "the model's vocabulary has %d tokens, fewer than the tokenizer's %d; "
                   "give --prompt_ids for this model", mc.vocab_size, (int)llm4d_tokenizer_vocab_size(tok));
        rc = report(&err);
        goto done;
    }
    if ((int64_t)prompt.n > mc.max_position_embeddings) {
        llm4d_fail(&err, LLM4D_EUSER, "the prompt is %zu tokens long, more than the model's max_position_embeddings "
                   "%d; shorten the prompt", prompt.n, mc.max_position_embeddings);
        rc = report(&err);
        goto done;
    }
    for (size_t i = 0; i < prompt.n; i++) /* llm4d_gen_feed checks it too, but after the prompt is printed */
        if (prompt.v[i] < 0 || prompt.v[i] >= mc.vocab_size) {
            llm4d_fail(&err, LLM4D_EUSER, "token id %d is outside the model's vocabulary [0, %d); give ids the model "
                       "knows", (int)prompt.v[i], mc.vocab_size);
            rc = report(&err);
            goto done;
        }
    CHECK(llm4d_backend_create(&be, &(llm4d_backend_opts){.device = a->device, .ref = !strcmp(a->backend, "ref"),
                                                          .nthreads = a->threads}, &err));
    CHECK(llm4d_param_table_build(&table, &mc, NULL, &err));
    params = be->alloc(be, &mem, LLM4D_MEM_PARAMS, table.total * sizeof(float));
    if (!params) {
        llm4d_fail(&err, LLM4D_ENOMEM, "out of memory for the %zu parameters", table.total);
        rc = report(&err);
        goto done;
    }
    llm4d_view view;
    CHECK(llm4d_view_open(&view, be, &mem, params, table.total * sizeof(float), LLM4D_VIEW_WRITE, &err));
    const size_t whole[2] = {0, table.total};
    const llm4d_ckpt_state weights = llm4d_ckpt_state_range(&table, whole, view.host, NULL, NULL);
    llm4d_code read_rc = llm4d_gpt_ckpt_read(ck, &mc, &weights, NULL, &err);
    llm4d_view_close(&view, be, &mem);
    CHECK(read_rc);
    llm4d_ckpt_close(ck);
    ck = NULL;

    const int n_prompt = (int)prompt.n;
    const long long want = (long long)n_prompt + a->max_new;
    const int T_max = want < mc.max_position_embeddings ? (int)want : mc.max_position_embeddings;
    const llm4d_gen_weights weights_on_device = {&mc, &table, params};
    CHECK(llm4d_gen_create(&gen, &weights_on_device, be, &mem, T_max, 64, &err));
    const llm4d_sampling s = {.temperature = a->temperature, .top_k = a->top_k, .top_p = a->top_p, .seed = a->seed};
    CHECK(llm4d_sampler_init(&smp, be, &mem, &s, mc.vocab_size, &err));
    out = malloc(((size_t)a->max_new + 1) * sizeof *out);
    if (a->dump) {
        plog = malloc((size_t)n_prompt * mc.padded_vocab_size * sizeof(float));
        dump = fopen(a->dump, "wb");
        if (!dump) {
            llm4d_fail(&err, LLM4D_EUSER, "cannot write %s: %s", a->dump, strerror(errno));
            rc = report(&err);
            goto done;
        }
    }
    if (!out || (a->dump && !plog)) {
        llm4d_fail(&err, LLM4D_ENOMEM, "out of memory");
        rc = report(&err);
        goto done;
    }
    printer pr = {.tok = a->print_ids ? NULL : tok, .dump = dump, .V = mc.vocab_size, .Vp = mc.padded_vocab_size,
                  .plog = plog, .n_prompt = n_prompt};
    if (!a->continuation_only) { /* the prompt as the user gave it: its text, or its ids */
        if (pr.tok) fputs(a->prompt, stdout);
        for (int i = 0; !pr.tok && i < n_prompt; i++) printf(i ? " %d" : "%d", (int)prompt.v[i]);
        pr.echoed = !pr.tok && n_prompt > 0;
        fflush(stdout);
    }
    int n_out = 0;
    llm4d_gen_stats st;
    const llm4d_gen_request req = {.prompt = prompt.v, .n_prompt = n_prompt, .max_new = a->max_new,
                                   .eos_id = a->ignore_eos ? -1 : mc.eos_token_id, .prompt_logits = plog,
                                   .on_token = on_token, .ctx = &pr};
    CHECK(llm4d_generate(&gen, &smp, &req, out, &n_out, &st, &err));
    if (dump && n_out == 0) dump_prompt(&pr);
    printf("\n");
    fflush(stdout);
    if (pr.err.code) {
        rc = report(&pr.err);
        goto done;
    }
    if (dump && (pr.failed || fclose(dump) != 0)) {
        dump = NULL;
        llm4d_fail(&err, LLM4D_EIO, "writing %s failed: %s", a->dump, strerror(errno));
        rc = report(&err);
        goto done;
    }
    dump = NULL;
    fprintf(stderr, "llm4d generate: prompt %d tokens in %.3f s; generated %d tokens in %.3f s: %.1f tokens/s%s\n",
            st.prompt_tokens, st.prompt_seconds, st.new_tokens, st.new_seconds,
            st.new_seconds > 0 ? st.new_tokens / st.new_seconds : 0.0,
            st.stopped_at_eos ? " (stopped at the end-of-text token)"
            : st.stopped_at_limit ? " (stopped: the model's max_position_embeddings are used up)"
                                  : "");
#undef CHECK
done:
    if (dump) fclose(dump);
    free(plog);
    free(out);
    llm4d_sampler_free(&smp);
    llm4d_gen_destroy(&gen);
    if (params) be->free(be, &mem, LLM4D_MEM_PARAMS, params, table.total * sizeof(float));
    llm4d_param_table_free(&table);
    if (ck) llm4d_ckpt_close(ck);
    llm4d_ids_free(&prompt);
    if (tok) llm4d_tokenizer_free(tok);
    if (be) be->destroy(be);
    return rc;
}

int llm4d_cmd_generate(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_text, stdout);
            return 0;
        }
    gen_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    return run(&a);
}
