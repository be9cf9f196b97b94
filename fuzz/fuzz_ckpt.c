/* fuzz_ckpt.c — libFuzzer harness: a checkpoint directory as --resume, --model_name_or_path, eval, generate and
 * convert open it. Parts: output/step_3/meta.json, output/latest, then the files meta.json's manifest ("files")
 * lists, in its order (named file2, file3, ... when meta.json has no usable manifest). When the first byte of the
 * input is odd, the harness first rewrites each manifest entry's "bytes" and "crc32" to the true values of the
 * part written under that name, so mutations get past the checksums to the slice records, shapes and the model
 * geometry; when it is even the manifest is taken as it is (the checksum path). The checkpoint is opened through
 * `latest`, its meta.json read as the model geometry and, for a model small enough, loaded into a GPT parameter
 * table as a resume does (llm4d_gpt_ckpt_read); every tensor is also read whole and as a flat range.
 * Property: a user error, or reads that stay inside the mapped files (ASan) with consistent shapes. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "ckpt/gpt_ckpt.h"
#include "ckpt/store.h"
#include "util.h"

/* A file name the harness may create in the step directory (a manifest key could be "../x" or "a/b"). */
static int plain(const char *s) {
    if (!s || !s[0] || s[0] == '.' || strlen(s) > 100) return 0;
    for (; *s; s++)
        if (*s == '/') return 0;
    return 1;
}

/* Write meta.json (fixed up when asked) and the data parts under the manifest's names. */
static void write_dir(const fz_part *parts, int n, int fix) {
    char path[1024], rel[160];
    char *text = strndup((const char *)parts[0].p, parts[0].n);
    cJSON *meta = text ? cJSON_Parse(text) : NULL;
    free(text);
    cJSON *man = cJSON_GetObjectItemCaseSensitive(meta, "files");
    const cJSON *e = cJSON_IsObject(man) ? man->child : NULL;
    for (int i = 2; i < n; i++) {
        while (e && !plain(e->string)) e = e->next;
        if (e) snprintf(rel, sizeof rel, "out/step_3/%s", e->string);
        else snprintf(rel, sizeof rel, "out/step_3/file%d", i);
        fz_write(rel, parts[i].p, parts[i].n, path, sizeof path);
        if (e && fix && cJSON_IsObject(e)) {
            cJSON *x = (cJSON *)e;
            cJSON_DeleteItemFromObjectCaseSensitive(x, "bytes");
            cJSON_DeleteItemFromObjectCaseSensitive(x, "crc32");
            cJSON_AddNumberToObject(x, "bytes", (double)parts[i].n);
            cJSON_AddNumberToObject(x, "crc32", (double)crc32_z(crc32_z(0, Z_NULL, 0), parts[i].p, parts[i].n));
        }
        if (e) e = e->next;
    }
    char *fixed = fix && meta ? cJSON_PrintUnformatted(meta) : NULL;
    if (fixed) fz_write("out/step_3/meta.json", fixed, strlen(fixed), path, sizeof path);
    else fz_write("out/step_3/meta.json", parts[0].p, parts[0].n, path, sizeof path);
    free(fixed);
    cJSON_Delete(meta);
    if (n > 1) fz_write("out/latest", parts[1].p, parts[1].n, path, sizeof path);
}

static void read_all(const llm4d_ckpt *c) {
    const char *names[64];
    int n = llm4d_ckpt_names(c, NULL, names, 64);
    if (n > 64) n = 64;
    for (int i = 0; i < n; i++) {
        llm4d_ckpt_info info;
        if (!llm4d_ckpt_find(c, NULL, names[i], &info)) fz_fail("listed tensor '%s' not found", names[i]);
        int64_t numel = llm4d_st_numel(info.ndim, info.shape);
        if (numel < 0 || numel > (1 << 20)) continue;
        llm4d_st_dtype dt = llm4d_st_dtype_is_float(info.dtype) ? LLM4D_ST_F32 : info.dtype;
        void *buf = malloc(numel ? (size_t)numel * llm4d_st_dtype_size(dt) : 1);
        llm4d_err err = {0};
        /* whole, and the second half as a flat range, from the files of each kind (gpt_ckpt.h's stems) */
        static const char *const stems[] = {LLM4D_GPT_CKPT_MODEL, LLM4D_GPT_CKPT_OPTIM_M, LLM4D_GPT_CKPT_OPTIM_V};
        for (int k = 0; k < 3; k++) {
            if (!llm4d_ckpt_find(c, stems[k], names[i], NULL)) continue;
            const llm4d_ckpt_box whole = {dt, info.ndim, info.shape, NULL, NULL};
            llm4d_code rc = llm4d_ckpt_read(c, stems[k], names[i], &whole, buf, &err);
            if (rc != LLM4D_OK) fz_refused("ckpt_read", rc, &err);
            rc = llm4d_ckpt_read_range(c, stems[k], names[i], &whole, numel / 2, numel, buf, &err);
            if (rc != LLM4D_OK) fz_refused("ckpt_read_range", rc, &err);
        }
        free(buf);
    }
    /* every file of the manifest, as blobs (what convert does with config.json) */
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(llm4d_ckpt_meta(c), "files")) {
        size_t len;
        const void *blob = llm4d_ckpt_blob(c, e->string, &len);
        if (!blob) fz_fail("manifest file '%s' has no blob", e->string);
        if (fz_touch(blob, len) == 0x5eed) abort();
    }
}

/* What --resume / --model_name_or_path do (cli/job.c): the geometry from meta.json, the configuration validated
 * with it, then, for a model small enough, the parameter table built and the tensors loaded into it. */
static void load_model(const llm4d_ckpt *c) {
    static llm4d_config cfg; /* 100 KB: not on the stack; reset below for every input */
    llm4d_err err = {0};
    llm4d_config_defaults(&cfg);
    snprintf(cfg.model.name_or_path, sizeof cfg.model.name_or_path, "%s", llm4d_ckpt_dir(c));
    if (llm4d_gpt_ckpt_model_from_meta(llm4d_ckpt_meta(c), llm4d_ckpt_dir(c), &cfg.model,
                                       cfg.model.vocab_size_divisible_unit, &err) != LLM4D_OK)
        return;
    cfg.data.max_seq_len = cfg.model.max_position_embeddings > 0 ? cfg.model.max_position_embeddings : 1;
    if (llm4d_config_finalize(&cfg, 1, &err) != LLM4D_OK) return;
    const llm4d_model_config *m = &cfg.model;
    const double h = m->hidden_size, f = m->ffn_hidden_size > 0 ? m->ffn_hidden_size : 4.0 * h;
    const double p = (double)m->padded_vocab_size * h + (double)m->max_position_embeddings * h +
                     (double)m->num_layers * (4.0 * h * h + 2.0 * h * f + 9.0 * h + f);
    if (p > 2e6) return;
    llm4d_param_table t;
    if (llm4d_param_table_build(&t, m, NULL, &err) != LLM4D_OK) return;
    float *buf = calloc(3 * t.total + 1, sizeof *buf);
    int has_optim = 0;
    const size_t whole[2] = {0, t.total};
    const llm4d_ckpt_state st = llm4d_ckpt_state_range(&t, whole, buf, buf + t.total, buf + 2 * t.total);
    if (buf) (void)llm4d_gpt_ckpt_read(c, m, &st, &has_optim, &err);
    free(buf);
    llm4d_param_table_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_part parts[FZ_MAX_PARTS];
    int n = fz_split(data, size, parts, FZ_MAX_PARTS);
    const char *dir = fz_fresh_dir();
    write_dir(parts, n, size > 0 && (data[0] & 1));
    char out[1024];
    snprintf(out, sizeof out, "%s/out", dir);
    llm4d_ckpt *c;
    llm4d_err err = {0};
    llm4d_code rc = llm4d_ckpt_open(&c, out, &err);
    if (rc == LLM4D_OK) {
        read_all(c);
        load_model(c);
        llm4d_ckpt_close(c);
    } else {
        fz_refused("ckpt_open", rc, &err);
    }
    return 0;
}
