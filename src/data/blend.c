/* blend.c — input_dir's list of corpora and Megatron's blending of their sample indices (see blend.h).
 *
 * The blend is built eagerly as two arrays of N entries (corpus, item), as Megatron does: the loader then reads
 * any item in O(1) from any thread, and N is the run's sample count, so the arrays cost 10 bytes per sample, less
 * than each corpus's own shuffle and sample indices. The weights are normalised with the same sequential sum and
 * division as Megatron's get_datasets_weights_and_num_samples, and the error w*max(i,1) - drawn is evaluated
 * with the product rounded to double before the subtraction (no fused multiply-add), so that every choice equals
 * the one Python or Megatron's C++ makes with the same weights. */
#define _GNU_SOURCE
#include "data/blend.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------------------------------------------------- */
/* the list in input_dir */

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A corpus path as llm4d_corpus_open takes it: an existing file or directory, or a prefix of one. */
static int names_corpus(const char *p) {
    static const char *const suffixes[] = {"", ".idx", "_idx.npz", "_ids.npz"};
    char buf[2100];
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++)
        if ((size_t)snprintf(buf, sizeof buf, "%s%s", p, suffixes[i]) < sizeof buf && exists(buf)) return 1;
    return 0;
}

/* The whole token is a number (strtod's syntax: 0.3, 1e-2, 5). */
static int parse_number(const char *tok, double *v) {
    char *end;
    errno = 0;
    *v = strtod(tok, &end);
    return end != tok && *end == 0;
}

typedef struct {
    llm4d_corpora *cs;
    double *raw;  /* [cap] unnormalised weights */
    int cap;
} growing;

static llm4d_code reserve(growing *g, int more, const char *what, llm4d_err *err) {
    llm4d_corpora *cs = g->cs;
    if (cs->n + more > LLM4D_BLEND_MAX_CORPORA)
        return llm4d_fail(err, LLM4D_EUSER, "%s: more than %d corpora to blend; merge some of them first", what,
                          LLM4D_BLEND_MAX_CORPORA);
    if (cs->n + more <= g->cap) return LLM4D_OK;
    int cap = g->cap ? g->cap : 4;
    while (cap < cs->n + more) cap *= 2;
    llm4d_corpus *c = realloc(cs->corpus, (size_t)cap * sizeof *c);
    if (c) cs->corpus = c;
    double *r = realloc(g->raw, (size_t)cap * sizeof *r);
    if (r) g->raw = r;
    if (!c || !r) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory listing the corpora of %s", what);
    g->cap = cap;
    return LLM4D_OK;
}

/* One entry of the list: a file or prefix (one corpus) or a directory (each of its corpora). weight < 0: none
 * given, each corpus weighs its tokens; else the entry's weight, shared by its corpora by their tokens. */
static llm4d_code add_entry(growing *g, const char *path, double weight, llm4d_err *err) {
    llm4d_corpora *cs = g->cs;
    char **paths = NULL;
    int n = 1;
    if (is_dir(path)) LLM4D_TRY(llm4d_corpus_list(path, &paths, &n, err));
    llm4d_code rc = reserve(g, n, path, err);
    const int first = cs->n;
    for (int k = 0; k < n && rc == LLM4D_OK; k++) {
        rc = llm4d_corpus_open(&cs->corpus[cs->n], paths ? paths[k] : path, err);
        if (rc == LLM4D_OK) cs->n++;
    }
    if (paths) llm4d_corpus_list_free(paths, n);
    if (rc != LLM4D_OK) return rc;
    double tokens = 0;
    for (int d = first; d < cs->n; d++) tokens += (double)cs->corpus[d].n_tokens;
    for (int d = first; d < cs->n; d++)
        g->raw[d] = weight < 0 ? (double)cs->corpus[d].n_tokens : weight * ((double)cs->corpus[d].n_tokens / tokens);
    return LLM4D_OK;
}

static const char *const list_help = "give paths (\"a_ids.npz b.bin\", spaces or commas) or a weight before every "
                                     "path (\"0.3 a_ids.npz 0.7 b.bin\")";

/* Split spec into tokens in place (separators: white space and commas). */
static int tokenize(char *spec, char **tok, int cap) {
    int n = 0;
    for (char *p = spec; *p;) {
        while (*p && (strchr(" \t\r\n\f\v,", *p))) *p++ = 0;
        if (!*p) break;
        if (n == cap) return cap + 1;
        tok[n++] = p;
        while (*p && !strchr(" \t\r\n\f\v,", *p)) p++;
    }
    return n;
}

static llm4d_code open_list(growing *g, const char *input_dir, llm4d_err *err) {
    /* a path that exists as written is one entry, whatever characters it holds */
    if (names_corpus(input_dir)) return add_entry(g, input_dir, -1, err);
    const size_t len = strlen(input_dir);
    char *buf = malloc(len + 1);
    char **tok = malloc((len / 2 + 2) * sizeof *tok);
    llm4d_code rc = LLM4D_OK;
    if (!buf || !tok) rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory parsing input_dir");
    int n = 0;
    if (rc == LLM4D_OK) {
        memcpy(buf, input_dir, len + 1);
        n = tokenize(buf, tok, (int)(len / 2 + 2));
        if (n == 0)
            rc = llm4d_fail(err, LLM4D_EUSER, "input_dir '%s' names no corpus; %s", input_dir, list_help);
    }
    double w;
    const int weighted = rc == LLM4D_OK && parse_number(tok[0], &w);
    g->cs->weighted = weighted;
    if (rc == LLM4D_OK && weighted) {
        double sum = 0;
        for (int i = 0; i < n && rc == LLM4D_OK; i += 2) {
            if (!parse_number(tok[i], &w))
                rc = llm4d_fail(err, LLM4D_EUSER, "input_dir '%s': '%s' stands where a weight should be; %s",
                                input_dir, tok[i], list_help);
            else if (i + 1 >= n)
                rc = llm4d_fail(err, LLM4D_EUSER, "input_dir '%s': the weight %s has no path after it; %s", input_dir,
                                tok[i], list_help);
            else if (!isfinite(w))
                rc = llm4d_fail(err, LLM4D_EUSER, "input_dir '%s': weight %s of %s is not a finite number", input_dir,
                                tok[i], tok[i + 1]);
            else if (w < 0)
                rc = llm4d_fail(err, LLM4D_EUSER, "input_dir '%s': weight %s of %s is negative; weights must be >= 0",
                                input_dir, tok[i], tok[i + 1]);
            else if (parse_number(tok[i + 1], &(double){0}) && !names_corpus(tok[i + 1]))
                rc = llm4d_fail(err, LLM4D_EUSER, "input_dir '%s': '%s' stands where a path should be; %s", input_dir,
                                tok[i + 1], list_help);
            else
                sum += w;
        }
        if (rc == LLM4D_OK && !(sum > 0))
            rc = llm4d_fail(err, LLM4D_EUSER, "input_dir '%s': the weights sum to 0; give a corpus a positive weight",
                            input_dir);
        for (int i = 0; i < n && rc == LLM4D_OK; i += 2) {
            parse_number(tok[i], &w);
            rc = add_entry(g, tok[i + 1], w, err);
        }
    } else if (rc == LLM4D_OK) {
        for (int i = 0; i < n && rc == LLM4D_OK; i++)
            if (parse_number(tok[i], &w) && !names_corpus(tok[i]))
                rc = llm4d_fail(err, LLM4D_EUSER,
                                "input_dir '%s': '%s' looks like a weight, but the list does not start with one; %s",
                                input_dir, tok[i], list_help);
        for (int i = 0; i < n && rc == LLM4D_OK; i++) rc = add_entry(g, tok[i], -1, err);
    }
    free(buf);
    free(tok);
    return rc;
}

llm4d_code llm4d_corpora_open(llm4d_corpora *cs, const char *input_dir, llm4d_err *err) {
    memset(cs, 0, sizeof *cs);
    growing g = {.cs = cs};
    llm4d_code rc = open_list(&g, input_dir, err);
    if (rc == LLM4D_OK) {
        /* Megatron's normalisation: a sequential sum, then each weight divided by it */
        double sum = 0;
        for (int d = 0; d < cs->n; d++) sum += g.raw[d];
        for (int d = 0; d < cs->n; d++) g.raw[d] /= sum;
        cs->weight = g.raw;
        g.raw = NULL;
    }
    free(g.raw);
    if (rc != LLM4D_OK) llm4d_corpora_close(cs);
    return rc;
}

void llm4d_corpora_close(llm4d_corpora *cs) {
    for (int d = 0; d < cs->n; d++) llm4d_corpus_close(&cs->corpus[d]);
    free(cs->corpus);
    free(cs->weight);
    memset(cs, 0, sizeof *cs);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* the blend */

void llm4d_blend_indices(const double *weights, int n, int64_t size, uint16_t *dataset, int64_t *sample,
                         int64_t *counts) {
    LLM4D_ASSERT(n >= 1 && n <= LLM4D_BLEND_MAX_CORPORA && counts, "blend of %d corpora", n);
    for (int d = 0; d < n; d++) counts[d] = 0;
    for (int64_t i = 0; i < size; i++) {
        const double x = i > 1 ? (double)i : 1.0;
        int best = 0;
        double best_err = 0;
        for (int d = 0; d < n; d++) {
            volatile double product = weights[d] * x; /* rounded before the subtraction, as in C++ and Python */
            const double e = product - (double)counts[d];
            if (d == 0 || e > best_err) {
                best_err = e;
                best = d;
            }
        }
        if (dataset) dataset[i] = (uint16_t)best;
        if (sample) sample[i] = counts[best];
        counts[best]++;
    }
}

/* Can corpus c give this split any sample? (documents in its share, and at least 2 tokens) */
static llm4d_code split_usable(const llm4d_corpus *c, const llm4d_gpt_index_opts *o, int *usable, llm4d_err *err) {
    int64_t bounds[4];
    LLM4D_TRY(llm4d_gpt_split_bounds(o->split ? o->split : "949,50,1", c->n_docs, bounds, err));
    const int64_t b = bounds[o->kind], e = bounds[o->kind + 1];
    *usable = e > b && c->doc_start[e] - c->doc_start[b] >= 2;
    return LLM4D_OK;
}

static llm4d_code build_index(llm4d_blend *b, int d, int64_t num_samples, const llm4d_gpt_index_opts *o,
                              llm4d_err *err) {
    llm4d_gpt_index_opts io = *o;
    io.num_samples = num_samples;
    io.cache_prefix = NULL;
    llm4d_code rc = llm4d_gpt_index_build(&b->index[d], &b->cs->corpus[d], &io, err);
    if (rc != LLM4D_OK && b->n > 1) llm4d_wrap(err, "%s", b->cs->corpus[d].path);
    return rc;
}

llm4d_code llm4d_blend_build(llm4d_blend *b, const llm4d_corpora *cs, const llm4d_gpt_index_opts *o,
                             llm4d_err *err) {
    memset(b, 0, sizeof *b);
    const int n = cs->n;
    LLM4D_ASSERT(n >= 1, "blend of %d corpora", n);
    b->cs = cs;
    b->n = n;
    b->single = -1;
    b->size = o->num_samples;
    b->weight = calloc((size_t)n, sizeof *b->weight);
    b->index = calloc((size_t)n, sizeof *b->index);
    b->drawn = calloc((size_t)n, sizeof *b->drawn);
    if (!b->weight || !b->index || !b->drawn) {
        llm4d_blend_free(b);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory for a blend of %d corpora", n);
    }
    llm4d_code rc = LLM4D_OK;
    /* this split's corpora: a corpus with nothing in the split is left out when others remain */
    double sum = 0;
    int used = 0, dropped = 0, first_positive = -1;
    for (int d = 0; d < n && rc == LLM4D_OK; d++) {
        int usable = 1;
        if (cs->weight[d] > 0 && first_positive < 0) first_positive = d;
        if (cs->weight[d] > 0 && n > 1) rc = split_usable(&cs->corpus[d], o, &usable, err);
        b->weight[d] = cs->weight[d] > 0 && usable ? cs->weight[d] : 0;
        dropped += cs->weight[d] > 0 && !usable;
        used += b->weight[d] > 0;
        sum += b->weight[d];
    }
    if (rc == LLM4D_OK && used == 0) {
        /* no corpus has this split: building the first reports why (no documents, too few tokens) */
        rc = build_index(b, first_positive, o->num_samples, o, err);
        LLM4D_ASSERT(rc != LLM4D_OK, "corpus %d built an index of an unusable split", first_positive);
    }
    if (rc == LLM4D_OK && dropped)
        for (int d = 0; d < n; d++) b->weight[d] /= sum;
    if (rc == LLM4D_OK && used == 1) {
        for (int d = 0; d < n; d++)
            if (b->weight[d] > 0) b->single = d;
        b->weight[b->single] = 1.0;
        b->drawn[b->single] = o->num_samples;
        rc = build_index(b, b->single, o->num_samples, o, err);
    } else if (rc == LLM4D_OK) {
        const size_t sz = (size_t)(b->size > 0 ? b->size : 1);
        b->dataset = malloc(sz * sizeof *b->dataset);
        b->sample = malloc(sz * sizeof *b->sample);
        if (!b->dataset || !b->sample)
            rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory for the blend of %lld samples", (long long)b->size);
        /* only the corpora with a positive weight take part: in Megatron's loop a weight-0 dataset that ties
         * (error 0) would still be drawn once */
        int *map = malloc((size_t)used * sizeof *map);
        double *w = malloc((size_t)used * sizeof *w);
        int64_t *drawn = malloc((size_t)used * sizeof *drawn);
        if (rc == LLM4D_OK && (!map || !w || !drawn))
            rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory for a blend of %d corpora", n);
        if (rc == LLM4D_OK) {
            int k = 0;
            for (int d = 0; d < n; d++)
                if (b->weight[d] > 0) {
                    map[k] = d;
                    w[k++] = b->weight[d];
                }
            llm4d_blend_indices(w, used, b->size, b->dataset, b->sample, drawn);
            for (int64_t i = 0; i < b->size; i++) b->dataset[i] = (uint16_t)map[b->dataset[i]];
            for (k = 0; k < used; k++) b->drawn[map[k]] = drawn[k];
        }
        free(map);
        free(w);
        free(drawn);
        for (int d = 0; d < n && rc == LLM4D_OK; d++) {
            if (!(b->weight[d] > 0)) continue;
            /* Megatron's margin (get_datasets_weights_and_num_samples) so each index covers its draws */
            int64_t want = (int64_t)ceil((double)b->size * b->weight[d] * 1.005);
            rc = build_index(b, d, want > b->drawn[d] ? want : b->drawn[d], o, err);
        }
    }
    if (rc != LLM4D_OK) llm4d_blend_free(b);
    return rc;
}

void llm4d_blend_free(llm4d_blend *b) {
    if (b->index)
        for (int d = 0; d < b->n; d++)
            if (b->index[d].corpus) llm4d_gpt_index_free(&b->index[d]);
    free(b->index);
    free(b->weight);
    free(b->drawn);
    free(b->dataset);
    free(b->sample);
    memset(b, 0, sizeof *b);
}

void llm4d_blend_locate(const llm4d_blend *b, int64_t i, int *corpus, int64_t *item) {
    LLM4D_ASSERT(i >= 0, "blend item %lld", (long long)i);
    if (b->single >= 0) {
        *corpus = b->single;
        *item = i;
        return;
    }
    LLM4D_ASSERT(b->size > 0, "item %lld of an empty blend", (long long)i);
    const int64_t j = i % b->size;
    *corpus = b->dataset[j];
    *item = b->sample[j];
}

int64_t llm4d_blend_pass_len(const llm4d_blend *b) {
    return b->single >= 0 ? b->index[b->single].n_samples : b->size;
}

void llm4d_blend_sample(const llm4d_blend *b, int64_t i, int32_t eos, int32_t *tokens, int32_t *labels,
                        float *loss_mask, int32_t *window) {
    int d;
    int64_t k;
    llm4d_blend_locate(b, i, &d, &k);
    llm4d_gpt_index_sample(&b->index[d], k, eos, tokens, labels, loss_mask, window);
}
