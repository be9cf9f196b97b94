/* beyond.c — what of a layout a machine calibration did not measure (see beyond.h). */
#include "plan/beyond.h"

#include <string.h>

#include "plan/coverage.h"

/* What size i of a call of op measures, for the line (the shapes are backend/methods.h's keys). */
/* A kernel's name in the line: the refusals' names (coverage.h), and the kernels they leave unnamed. */
static const char *op_name(int op) {
    switch (op) {
    case LLM4D_RC_XENT_RESCALE: return "cross-entropy rescale";
    case LLM4D_RC_ADAMW: return "adamw";
    case LLM4D_RC_SUMSQ: return "sum of squares";
    case LLM4D_RC_DOT: return "dot";
    case LLM4D_RC_ADD: return "add";
    case LLM4D_RC_SCALE: return "scale";
    case LLM4D_RC_ZERO: return "zero";
    case LLM4D_RC_COPY: return "copy";
    case LLM4D_RC_CONVERT: return "convert";
    default: return llm4d_rc_op_name(op);
    }
}

static int what_of(int op, int i) {
    switch (op) {
    case LLM4D_RC_LINEAR_FWD:
    case LLM4D_RC_LINEAR_BWD: /* {N, C, OC} */
        return i == 0 ? LLM4D_BEYOND_ROWS : LLM4D_BEYOND_COLUMNS;
    case LLM4D_RC_ATTN_FWD:
    case LLM4D_RC_ATTN_BWD: /* {B, T, NH, HS, NKV} */
        return i >= 2 && i != 3 ? LLM4D_BEYOND_HEADS : LLM4D_BEYOND_SIZES;
    case LLM4D_RC_ROPE_FWD:
    case LLM4D_RC_ROPE_BWD: /* {N, NH, HS, ld} */
        return i == 0 ? LLM4D_BEYOND_ROWS : i == 1 ? LLM4D_BEYOND_HEADS : LLM4D_BEYOND_SIZES;
    case LLM4D_RC_BIAS_FWD: case LLM4D_RC_BIAS_BWD: case LLM4D_RC_LN_FWD: case LLM4D_RC_LN_BWD:
    case LLM4D_RC_RMSNORM_FWD: case LLM4D_RC_RMSNORM_BWD: case LLM4D_RC_DROP_FWD: case LLM4D_RC_DROP_BWD:
    case LLM4D_RC_DROPADD_FWD: case LLM4D_RC_DROPADD_BWD: case LLM4D_RC_SWIGLU_FWD: case LLM4D_RC_SWIGLU_BWD:
    case LLM4D_RC_XENT_FWD: case LLM4D_RC_XENT_BWD: case LLM4D_RC_POS_FWD: case LLM4D_RC_POS_BWD: /* {N, C, ...} */
        return i == 0 ? LLM4D_BEYOND_ROWS : i == 1 ? LLM4D_BEYOND_COLUMNS : LLM4D_BEYOND_SIZES;
    default:
        return LLM4D_BEYOND_SIZES;
    }
}

void llm4d_beyond_call(const llm4d_profile *p, const llm4d_rc_call *c, int prec, llm4d_beyond *b) {
    if (!p->machine || c->op >= LLM4D_RC_NKERNELS) return;
    int64_t lo[LLM4D_RC_DIMS], hi[LLM4D_RC_DIMS];
    const int n = llm4d_grid_span(p, c, prec, lo, hi);
    if (!n) { /* a kind never measured: price.c takes the nearest call of the method, or the fallback rates */
        b->unmeasured |= 1ull << c->op;
        b->n_calls++;
        return;
    }
    int out = 0;
    for (int i = 0; i < n; i++) {
        if (c->d[i] > hi[i]) b->above = 1, out = 1;
        if (c->d[i] >= lo[i]) continue;
        /* smaller than any of its kind measured: a layout's shards (tensor-parallel, ZeRO-3's embedding blocks)
         * are what make a model's calls smaller than the one-process calls coverage.c accepted */
        const int w = what_of(c->op, i);
        if (!b->below[w] || c->d[i] < b->below[w]) {
            b->below[w] = c->d[i], b->from[w] = lo[i];
            if (w == LLM4D_BEYOND_SIZES) b->below_op = c->op;
        }
        out = 1;
    }
    b->n_calls += out;
}

static void add_mb(llm4d_beyond *b, int mb) {
    int i = 0;
    while (i < b->n_mb && b->mb[i] < mb) i++;
    if (i < b->n_mb && b->mb[i] == mb) return;
    if (b->n_mb == LLM4D_BEYOND_MB) { /* the largest dropped, said as "..." */
        b->more_mb = 1;
        if (i == b->n_mb) return;
        b->n_mb--;
    }
    memmove(b->mb + i + 1, b->mb + i, (size_t)(b->n_mb - i) * sizeof *b->mb);
    b->mb[i] = mb, b->n_mb++;
}

void llm4d_beyond_merge(llm4d_beyond *into, const llm4d_beyond *b, int mb, int mp) {
    into->n_calls += b->n_calls;
    into->above |= b->above;
    for (int w = 0; w < LLM4D_BEYOND_N; w++)
        if (b->below[w] && (!into->below[w] || b->below[w] < into->below[w])) {
            into->below[w] = b->below[w], into->from[w] = b->from[w];
            if (w == LLM4D_BEYOND_SIZES) into->below_op = b->below_op;
        }
    into->unmeasured |= b->unmeasured;
    for (int i = 0; i < b->n_mb; i++) add_mb(into, b->mb[i]);
    into->more_mb |= b->more_mb;
    if (mb > 0 && b->above) add_mb(into, mb);
    int below = 0;
    for (int w = 0; w < LLM4D_BEYOND_N; w++) below |= b->below[w] != 0;
    if (mb > 0 && below) into->split_by |= mp > 1 ? 1 : 2;
    into->split_by |= b->split_by;
}

int llm4d_beyond_item(const llm4d_beyond *b, int i, char *buf, size_t n) {
    static const char *const what[LLM4D_BEYOND_N] = {"columns", "heads", "rows", ""};
    const char *tp = b->split_by == 1 ? "tensor-parallel " : "";
    int k = 0;
    if (b->above && k++ == i) {
        if (!b->n_mb) return snprintf(buf, n, "sizes above the grid's largest"), 1;
        size_t used = (size_t)snprintf(buf, n, "micro-batch ");
        for (int j = 0; j < b->n_mb && used < n; j++)
            used += (size_t)snprintf(buf + used, n - used, "%s%d", j ? ", " : "", b->mb[j]);
        if (used < n) snprintf(buf + used, n - used, "%s (measured 1)", b->more_mb ? ", ..." : "");
        return 1;
    }
    for (int w = 0; w < LLM4D_BEYOND_N; w++) {
        if (!b->below[w] || k++ != i) continue;
        if (w == LLM4D_BEYOND_SIZES)
            snprintf(buf, n, "%sshards of size %lld in the %s (measured from %lld)", tp, (long long)b->below[w],
                     op_name(b->below_op), (long long)b->from[w]);
        else
            snprintf(buf, n, "%sshards of %lld %s (measured from %lld)", tp, (long long)b->below[w], what[w],
                     (long long)b->from[w]);
        return 1;
    }
    if (b->unmeasured && k == i) { /* the kinds by name, a few */
        size_t used = (size_t)snprintf(buf, n, "calls of kinds it did not measure (");
        int named = 0;
        for (int op = 0; op < LLM4D_RC_NKERNELS && used < n; op++) {
            if (!(b->unmeasured >> op & 1)) continue;
            if (named++ == 4) {
                used += (size_t)snprintf(buf + used, n - used, ", ...");
                break;
            }
            used += (size_t)snprintf(buf + used, n - used, "%s%s", named > 1 ? ", " : "", op_name(op));
        }
        if (used < n) snprintf(buf + used, n - used, ")");
        return 1;
    }
    return 0;
}

void llm4d_beyond_line(FILE *f, const llm4d_beyond *b, const char *indent) {
    char item[256];
    if (!llm4d_beyond_item(b, 0, item, sizeof item)) return;
    fprintf(f, "%spriced beyond the calibration: %s", indent, item);
    for (int i = 1; llm4d_beyond_item(b, i, item, sizeof item); i++) fprintf(f, ", %s", item);
    fprintf(f, ": extrapolated by work\n");
}

void llm4d_beyond_json(cJSON *o, const llm4d_beyond *b) {
    char item[256];
    if (!llm4d_beyond_item(b, 0, item, sizeof item)) return;
    cJSON *a = cJSON_AddArrayToObject(o, "extrapolated");
    for (int i = 0; llm4d_beyond_item(b, i, item, sizeof item); i++) cJSON_AddItemToArray(a, cJSON_CreateString(item));
}
