/* store_range.c — a flat C-order element range of a checkpoint tensor, saved and read as the boxes that make it
 * up (a ZeRO partition boundary need not fall on a row; see store.h). */
#include "ckpt/store_impl.h"

/* ---- flat ranges ---- */

/* A flat C-order range [b, e) of a tensor is a union of at most 2*(ndim-1)+1 boxes: a partial leading piece, whole
 * rows (or planes), a partial trailing piece, recursively. Each box is also a contiguous piece of the range, so the
 * data of box k starts at its flat start minus the range's begin. */
typedef llm4d_code (*box_fn)(void *ctx, const int64_t *off, const int64_t *shp, int64_t flat_start, llm4d_err *err);

typedef struct {
    int ndim;
    const int64_t *gshape;
    int64_t off[LLM4D_ST_MAX_DIMS], shp[LLM4D_ST_MAX_DIMS];
    box_fn fn;
    void *ctx;
} decomp;

static llm4d_code decompose(decomp *x, int d, int64_t b, int64_t e, int64_t base, llm4d_err *err) {
    if (b >= e) return LLM4D_OK;
    int64_t inner = 1;
    for (int k = d + 1; k < x->ndim; k++) inner *= x->gshape[k];
    int64_t i0 = b / inner, i1 = e / inner;
    if (i0 == i1) {
        x->off[d] = i0;
        x->shp[d] = 1;
        return decompose(x, d + 1, b - i0 * inner, e - i0 * inner, base + i0 * inner, err);
    }
    if (b % inner) {
        x->off[d] = i0;
        x->shp[d] = 1;
        LLM4D_TRY(decompose(x, d + 1, b % inner, inner, base + i0 * inner, err));
        i0++;
    }
    if (i1 > i0) {
        x->off[d] = i0;
        x->shp[d] = i1 - i0;
        for (int k = d + 1; k < x->ndim; k++) {
            x->off[k] = 0;
            x->shp[k] = x->gshape[k];
        }
        LLM4D_TRY(x->fn(x->ctx, x->off, x->shp, base + i0 * inner, err));
    }
    if (e % inner) {
        x->off[d] = i1;
        x->shp[d] = 1;
        LLM4D_TRY(decompose(x, d + 1, 0, e % inner, base + i1 * inner, err));
    }
    return LLM4D_OK;
}

static llm4d_code for_each_box(int ndim, const int64_t *gshape, int64_t b, int64_t e, box_fn fn, void *ctx,
                               llm4d_err *err) {
    decomp x = {.ndim = ndim, .gshape = gshape, .fn = fn, .ctx = ctx};
    if (ndim == 0) return b < e ? fn(ctx, x.off, x.shp, 0, err) : LLM4D_OK;
    return decompose(&x, 0, b, e, 0, err);
}

typedef struct {
    llm4d_ckpt_saver *s;
    const llm4d_ckpt *c;
    const char *file, *name;
    llm4d_st_dtype dt;
    int ndim;
    const int64_t *gshape;
    int64_t begin;
    const uint8_t *src;
    uint8_t *dst;
} range_ctx;

static llm4d_code save_box(void *ctx, const int64_t *off, const int64_t *shp, int64_t flat_start, llm4d_err *err) {
    range_ctx *r = ctx;
    const llm4d_ckpt_box box = {r->dt, r->ndim, r->gshape, off, shp};
    return llm4d_ckpt_save_tensor(r->s, r->file, r->name, &box,
                                  r->src + (size_t)(flat_start - r->begin) * llm4d_st_dtype_size(r->dt), err);
}

static llm4d_code read_box(void *ctx, const int64_t *off, const int64_t *shp, int64_t flat_start, llm4d_err *err) {
    range_ctx *r = ctx;
    const llm4d_ckpt_box box = {r->dt, r->ndim, r->gshape, off, shp};
    return llm4d_ckpt_read(r->c, r->file, r->name, &box,
                           r->dst + (size_t)(flat_start - r->begin) * llm4d_st_dtype_size(r->dt), err);
}

llm4d_code llm4d_ckpt_save_range(llm4d_ckpt_saver *s, const char *file, const char *name, const llm4d_ckpt_box *tensor,
                                 int64_t begin, int64_t end, const void *data, llm4d_err *err) {
    const llm4d_st_dtype dt = tensor->dtype;
    const int ndim = tensor->ndim;
    const int64_t *global_shape = tensor->shape;
    int skip = llm4d_ck_skip_add(s, err);
    if (skip >= 0) return (llm4d_code)skip;
    if (ndim < 0 || ndim > LLM4D_ST_MAX_DIMS || begin < 0 || end < begin ||
        end > llm4d_st_numel(ndim, global_shape))
        return llm4d_ck_keep_failure(s, llm4d_fail(err, LLM4D_EINTERNAL, "checkpoint tensor '%s': flat range [%lld, %lld) is "
                                          "outside its %lld elements", name, (long long)begin, (long long)end,
                                          (long long)(ndim >= 0 && ndim <= LLM4D_ST_MAX_DIMS
                                                          ? llm4d_st_numel(ndim, global_shape)
                                                          : 0)),
                            err);
    range_ctx r = {.s = s, .file = file, .name = name, .dt = dt, .ndim = ndim, .gshape = global_shape,
                   .begin = begin, .src = data};
    return llm4d_ck_keep_failure(s, for_each_box(ndim, global_shape, begin, end, save_box, &r, err), err);
}

llm4d_code llm4d_ckpt_read_range(const llm4d_ckpt *c, const char *file_prefix, const char *name,
                                 const llm4d_ckpt_box *tensor, int64_t begin, int64_t end, void *out, llm4d_err *err) {
    const llm4d_st_dtype dt = tensor->dtype;
    const int ndim = tensor->ndim;
    const int64_t *global_shape = tensor->shape;
    if (ndim < 0 || ndim > LLM4D_ST_MAX_DIMS || begin < 0 || end < begin ||
        end > llm4d_st_numel(ndim, global_shape))
        return llm4d_fail(err, LLM4D_EINTERNAL, "reading tensor '%s': flat range [%lld, %lld) is outside its shape",
                          name, (long long)begin, (long long)end);
    range_ctx r = {.c = c, .file = file_prefix, .name = name, .dt = dt, .ndim = ndim, .gshape = global_shape,
                   .begin = begin, .dst = out};
    return for_each_box(ndim, global_shape, begin, end, read_box, &r, err);
}

