/* fuzz_safetensors.c — libFuzzer harness: a safetensors image, validated in memory (llm4d_st_parse) and from a file
 * (llm4d_st_open). Properties: a user error, or tensors whose data lies inside the data section and covers it
 * exactly; every float tensor converts to F32; the writer, given what the reader returned, writes a file that
 * reads back with the same tensors, bytes and metadata (writer and reader agree on the format). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/safetensors.h"
#include "util.h"

static void check_file(const llm4d_st_file *f, const uint8_t *base, size_t size) {
    size_t covered = 0;
    for (int i = 0; i < f->n; i++) {
        const llm4d_st_tensor *t = &f->t[i];
        const uint8_t *d = t->data;
        if (d < f->data || d + t->nbytes > f->data + f->data_len || f->data + f->data_len > base + size)
            fz_fail("tensor '%s' outside the data section", t->name);
        if ((uint64_t)llm4d_st_numel(t->ndim, t->shape) * llm4d_st_dtype_size(t->dtype) != t->nbytes)
            fz_fail("tensor '%s': shape and byte count disagree", t->name);
        covered += t->nbytes;
        if (llm4d_st_find(f, t->name) == NULL) fz_fail("tensor '%s' not found by name", t->name);
        if (llm4d_st_dtype_is_float(t->dtype)) {
            size_t n = t->nbytes / llm4d_st_dtype_size(t->dtype);
            if (n > (1u << 16)) n = 1u << 16;
            float *out = malloc(n ? n * sizeof *out : 1);
            if (!out || !llm4d_st_convert(out, LLM4D_ST_F32, t->data, t->dtype, n)) fz_fail("convert failed");
            free(out);
        }
    }
    if (covered != f->data_len) fz_fail("tensors cover %zu of %zu data bytes", covered, f->data_len);
    for (int i = 0; i < f->n_meta; i++)
        if (llm4d_st_meta(f, f->meta_key[i]) != f->meta_val[i]) fz_fail("metadata '%s' lookup", f->meta_key[i]);
}

/* Write what was read, read it back, compare. */
static void round_trip(const llm4d_st_file *f) {
    llm4d_st_writer w;
    llm4d_st_writer_init(&w);
    llm4d_err err = {0};
    for (int i = 0; i < f->n; i++)
        if (llm4d_st_writer_add(&w, f->t[i].name, f->t[i].dtype, f->t[i].ndim, f->t[i].shape, f->t[i].data,
                                &err) != LLM4D_OK)
            fz_fail("writer_add: %s", err.msg);
    for (int i = 0; i < f->n_meta; i++)
        if (llm4d_st_writer_meta(&w, f->meta_key[i], f->meta_val[i], &err) != LLM4D_OK) fz_fail("writer_meta");
    char path[1024];
    fz_write("rt.safetensors", "", 0, path, sizeof path);
    uint64_t bytes = 0;
    llm4d_code rc = llm4d_st_writer_write(&w, path, 0, NULL, &bytes, &err);
    llm4d_st_writer_free(&w);
    if (rc == LLM4D_EUSER) return; /* a header over the size limit after re-encoding: refused, not written */
    if (rc != LLM4D_OK) fz_fail("writer: %s", err.msg);
    llm4d_st_file g;
    if (llm4d_st_open(&g, path, &err) != LLM4D_OK) fz_fail("re-reading what the writer wrote: %s", err.msg);
    if (g.n != f->n || g.n_meta != f->n_meta) fz_fail("round trip: %d tensors / %d metadata became %d / %d", f->n,
                                                      f->n_meta, g.n, g.n_meta);
    for (int i = 0; i < f->n; i++) {
        const llm4d_st_tensor *a = &f->t[i], *b = llm4d_st_find(&g, a->name);
        if (!b || b->dtype != a->dtype || b->ndim != a->ndim ||
            memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]) != 0 || b->nbytes != a->nbytes ||
            memcmp(a->data, b->data, a->nbytes) != 0)
            fz_fail("round trip changed tensor '%s'", a->name);
    }
    for (int i = 0; i < f->n_meta; i++) {
        const char *v = llm4d_st_meta(&g, f->meta_key[i]);
        if (!v || strcmp(v, f->meta_val[i]) != 0) fz_fail("round trip changed metadata '%s'", f->meta_key[i]);
    }
    llm4d_st_close(&g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    llm4d_st_file f;
    llm4d_err err = {0};
    fz_fresh_dir();
    llm4d_code rc = llm4d_st_parse(&f, data, size, "fuzz.safetensors", &err);
    if (rc == LLM4D_OK) {
        check_file(&f, data, size);
        round_trip(&f);
        llm4d_st_close(&f);
    } else {
        fz_refused("st_parse", rc, &err);
    }
    char path[1024];
    fz_write("in.safetensors", data, size, path, sizeof path);
    llm4d_code rc2 = llm4d_st_open(&f, path, &err);
    if ((rc2 == LLM4D_OK) != (rc == LLM4D_OK)) fz_fail("st_parse and st_open disagree");
    if (rc2 == LLM4D_OK) llm4d_st_close(&f);
    return 0;
}
