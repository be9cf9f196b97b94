/* grid.c — the machine calibration's grid of shapes (see grid.h). */
#include "plan/grid.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/coverage.h"

/* A comma-separated increasing list of positive integers into v (at most LLM4D_GRID_MAX); its length, 0 if bad. */
static int list(const char *s, const char *end, int *v) {
    int n = 0;
    while (s < end) {
        char *e = NULL;
        const long x = strtol(s, &e, 10);
        if (e == s || x <= 0 || x > 1 << 20 || n == LLM4D_GRID_MAX || (n && x <= v[n - 1])) return 0;
        v[n++] = (int)x;
        s = e;
        if (s < end && *s != ',') return 0;
        if (s < end) s++;
    }
    return n;
}

int llm4d_grid_parse(const char *spec, llm4d_grid *g, char *why, size_t n) {
    memset(g, 0, sizeof *g);
    if (!spec) spec = LLM4D_GRID_DEFAULT;
    const char *colon = strchr(spec, ':');
    if (colon) g->n_hidden = list(spec, colon, g->hidden), g->n_seq = list(colon + 1, colon + strlen(colon), g->seq);
    int ok = colon && g->n_hidden > 0 && g->n_seq > 0;
    for (int i = 0; ok && i < g->n_hidden; i++) ok = g->hidden[i] % 16 == 0;
    if (!ok)
        snprintf(why, n, "--calibrate_grid needs HIDDENS:SEQUENCES, two increasing comma-separated lists (hidden sizes "
                 "multiples of 16, at most %d each), as in --calibrate_grid %s", LLM4D_GRID_MAX, LLM4D_GRID_DEFAULT);
    return ok;
}

int llm4d_grid_heads(int hidden) { return hidden < 256 ? hidden / 16 : hidden / 64; }

void llm4d_grid_describe(const llm4d_grid *g, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "hidden ");
    for (int i = 0; i < g->n_hidden && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%d", i ? "," : "", g->hidden[i]);
    if (k < n) k += (size_t)snprintf(buf + k, n - k, "; sequence ");
    for (int i = 0; i < g->n_seq && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%d", i ? "," : "", g->seq[i]);
}

llm4d_code llm4d_grid_config(int hidden, int seq, int amp, llm4d_config *out, llm4d_pp_plan *pp, llm4d_err *err) {
    llm4d_config *base = calloc(1, sizeof *base);
    if (!base) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    llm4d_config_defaults(base);
    char h[48], nh[48], pos[64], s[16];
    snprintf(h, sizeof h, "Model.hidden_size=%d", hidden);
    snprintf(nh, sizeof nh, "Model.num_attention_heads=%d", llm4d_grid_heads(hidden));
    snprintf(pos, sizeof pos, "Model.max_position_embeddings=%d", seq > 1024 ? seq : 1024);
    snprintf(s, sizeof s, "%d", seq);
    /* gpt2-en's vocabulary, dropouts and MLP ratio: what every GPT-2 preset shares */
    char *argv[] = {"--model_name_or_path", "gpt2-en", "-o", h, "-o", nh, "-o", "Model.num_layers=1", "-o", pos,
                    "--max_seq_len", s, "--global_batch_size", "1", "--use_amp", amp ? "true" : "false"};
    llm4d_code rc = llm4d_config_parse_args(base, (int)(sizeof argv / sizeof argv[0]), argv, err);
    if (rc == LLM4D_OK) rc = llm4d_plan_single(base, 1, out, pp, err);
    free(base);
    return rc;
}
