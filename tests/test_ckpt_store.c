/* test_ckpt_store.c — checks of the checkpoint directory layer (src/ckpt/store_*.c).
 *
 * Round trips with tensors split into slices and flat ranges and read back whole, as other slices, and converted;
 * the manifest checked against zlib's crc32 of each file; every way a checkpoint can be bad (flipped byte,
 * truncated or missing file, broken meta.json or latest, missing tensor, shape that does not fit, uncovered or
 * overlapping slices) refused as a user error naming the file or tensor; keep_last pruning; re-saving an existing
 * step; an unwritable output directory; stale temporaries removed. Last, the crash test: a child process saves
 * step 2 over a good step 1 with LLM4D_CKPT_KILL_AT set to each kill point in turn and dies by SIGKILL there; the
 * parent then checks that `latest` names a checkpoint that verifies and holds the data of the step it names
 * (step 1, or step 2 once `latest` was replaced), and that the next save succeeds and cleans up. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "tally.h"
#include "ckpt/store.h"


static char root[256];

/* ---- the test checkpoint ---- */

/* The store's boxes (store.h llm4d_ckpt_box): a slice of a tensor, and a whole tensor (or a flat range's tensor). */
#define BOX(dt, nd, shape, off, slice) (&(llm4d_ckpt_box){dt, nd, shape, off, slice})
#define WHOLE(dt, nd, shape) BOX(dt, nd, shape, NULL, NULL)

#define AR 6
#define AC 4
#define DR 5
#define DC 7

typedef struct {
    float a[AR * AC];     /* "A" [6,4]: two row slices in model-0 / model-1 */
    float am[AR * AC];    /* "A" in optim.safetensors (same name, other kind) */
    float b[5];           /* "B" [5]: whole, in model-0 */
    uint16_t c[3 * 4 * 5];/* "C" [3,4,5] BF16: column slices [:, 0:1, :] and [:, 1:4, :] */
    float cf[3 * 4 * 5];  /* C's values as F32 (exact in BF16) */
    float s;              /* "S" scalar */
    int64_t i[3];         /* "I" [3] I64 */
    float d[DR * DC];     /* "D" [5,7]: flat ranges [0,10) [10,23) [23,35) over three files */
    char blob[32];
} fixture;

static void fixture_fill(fixture *f, int step) {
    for (int k = 0; k < AR * AC; k++) {
        f->a[k] = (float)(step * 1000 + k);
        f->am[k] = (float)(-step * 1000 - k);
    }
    for (int k = 0; k < 5; k++) f->b[k] = (float)step + 0.5f * (float)k;
    for (int k = 0; k < 60; k++) f->cf[k] = (float)(k % 17) * 0.25f - (float)step;
    llm4d_st_convert(f->c, LLM4D_ST_BF16, f->cf, LLM4D_ST_F32, 60);
    f->s = 0.125f * (float)step;
    for (int k = 0; k < 3; k++) f->i[k] = (int64_t)step * 10000000000LL + k;
    for (int k = 0; k < DR * DC; k++) f->d[k] = (float)(step * 100 + k) * 0.5f;
    snprintf(f->blob, sizeof f->blob, "{\"step\": %d}", step);
}

static llm4d_code fixture_save(const fixture *f, const char *out, int step, int keep_last, llm4d_err *err) {
    llm4d_ckpt_saver *s;
    LLM4D_TRY(llm4d_ckpt_save_begin(&s, out, step, err));
    int64_t ga[] = {AR, AC}, half[] = {AR / 2, AC}, o0[] = {0, 0}, o1[] = {AR / 2, 0};
    int64_t gb[] = {5}, gc[] = {3, 4, 5}, c0s[] = {3, 1, 5}, c1s[] = {3, 3, 5}, c1o[] = {0, 1, 0}, gi[] = {3};
    int64_t gd[] = {DR, DC};
    uint16_t *c0 = malloc(3 * 1 * 5 * 2), *c1 = malloc(3 * 3 * 5 * 2);
    for (int x = 0; x < 3; x++)
        for (int y = 0; y < 4; y++)
            for (int z = 0; z < 5; z++) {
                uint16_t v = f->c[(x * 4 + y) * 5 + z];
                if (y == 0) c0[x * 5 + z] = v;
                else c1[(x * 3 + (y - 1)) * 5 + z] = v;
            }
    llm4d_code rc = LLM4D_OK;
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddNumberToObject(meta, "step", step);
    cJSON_AddStringToObject(meta, "model", "tiny");
    cJSON_AddStringToObject(meta, "files", "the store replaces this");
    if (!rc) rc = llm4d_ckpt_save_tensor(s, "model-0.safetensors", "A", BOX(LLM4D_ST_F32, 2, ga, o0, half), f->a, err);
    if (!rc)
        rc = llm4d_ckpt_save_tensor(s, "model-1.safetensors", "A", BOX(LLM4D_ST_F32, 2, ga, o1, half),
                                    f->a + AR / 2 * AC, err);
    if (!rc) rc = llm4d_ckpt_save_tensor(s, "model-0.safetensors", "B", WHOLE(LLM4D_ST_F32, 1, gb), f->b, err);
    if (!rc) rc = llm4d_ckpt_save_tensor(s, "model-0.safetensors", "C", BOX(LLM4D_ST_BF16, 3, gc, NULL, c0s), c0, err);
    if (!rc) rc = llm4d_ckpt_save_tensor(s, "model-1.safetensors", "C", BOX(LLM4D_ST_BF16, 3, gc, c1o, c1s), c1, err);
    if (!rc) rc = llm4d_ckpt_save_tensor(s, "model-1.safetensors", "S", WHOLE(LLM4D_ST_F32, 0, NULL), &f->s, err);
    if (!rc) rc = llm4d_ckpt_save_tensor(s, "model-1.safetensors", "I", WHOLE(LLM4D_ST_I64, 1, gi), f->i, err);
    if (!rc) rc = llm4d_ckpt_save_tensor(s, "optim.safetensors", "A", WHOLE(LLM4D_ST_F32, 2, ga), f->am, err);
    if (!rc) rc = llm4d_ckpt_save_range(s, "model-0.safetensors", "D", WHOLE(LLM4D_ST_F32, 2, gd), 0, 10, f->d, err);
    if (!rc)
        rc = llm4d_ckpt_save_range(s, "model-1.safetensors", "D", WHOLE(LLM4D_ST_F32, 2, gd), 10, 23, f->d + 10, err);
    if (!rc)
        rc = llm4d_ckpt_save_range(s, "model-2.safetensors", "D", WHOLE(LLM4D_ST_F32, 2, gd), 23, 35, f->d + 23, err);
    if (!rc) rc = llm4d_ckpt_save_blob(s, "config.json", f->blob, strlen(f->blob), err);
    if (!rc) rc = llm4d_ckpt_save_commit(s, meta, keep_last, err);
    else llm4d_ckpt_save_abort(s);
    cJSON_Delete(meta);
    free(c0);
    free(c1);
    return rc;
}

static char *read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = fread(b, 1, (size_t)n, fp);
    fclose(fp);
    b[got] = 0;
    if (len) *len = got;
    return b;
}

static int latest_is(const char *out, const char *want) {
    char p[512];
    snprintf(p, sizeof p, "%s/latest", out);
    char *t = read_file(p, NULL);
    int ok = t && strncmp(t, want, strlen(want)) == 0 && t[strlen(want)] == '\n' && t[strlen(want) + 1] == 0;
    free(t);
    return ok;
}

static int count_prefix(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    closedir(d);
    return n;
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

/* Everything the fixture of `step` holds, read back through c. Returns a description of the first difference
 * (empty when equal). */
static const char *verify_fixture(const llm4d_ckpt *c, int step, char *why, size_t n) {
    fixture f;
    fixture_fill(&f, step);
    llm4d_err err = {0};
    float a[AR * AC], b[5], cf[60], s = 0, d[DR * DC];
    int64_t i[3];
    int64_t ga[] = {AR, AC}, gb[] = {5}, gc[] = {3, 4, 5}, gi[] = {3}, gd[] = {DR, DC};
    why[0] = 0;
    err.msg[0] = 0;
    if (llm4d_ckpt_read(c, "model", "A", WHOLE(LLM4D_ST_F32, 2, ga), a, &err) ||
        memcmp(a, f.a, sizeof a))
        snprintf(why, n, "A: %s", err.msg[0] ? err.msg : "values differ");
    else if (llm4d_ckpt_read(c, "optim", "A", WHOLE(LLM4D_ST_F32, 2, ga), a, &err) || memcmp(a, f.am, sizeof a))
        snprintf(why, n, "optim A: %s", err.msg[0] ? err.msg : "values differ");
    else if (llm4d_ckpt_read(c, NULL, "B", WHOLE(LLM4D_ST_F32, 1, gb), b, &err) || memcmp(b, f.b, sizeof b))
        snprintf(why, n, "B: %s", err.msg[0] ? err.msg : "values differ");
    else if (llm4d_ckpt_read(c, NULL, "C", WHOLE(LLM4D_ST_F32, 3, gc), cf, &err) || memcmp(cf, f.cf, sizeof cf))
        snprintf(why, n, "C: %s", err.msg[0] ? err.msg : "values differ");
    else if (llm4d_ckpt_read(c, NULL, "S", WHOLE(LLM4D_ST_F32, 0, NULL), &s, &err) || s != f.s)
        snprintf(why, n, "S: %s", err.msg[0] ? err.msg : "values differ");
    else if (llm4d_ckpt_read(c, NULL, "I", WHOLE(LLM4D_ST_I64, 1, gi), i, &err) || memcmp(i, f.i, sizeof i))
        snprintf(why, n, "I: %s", err.msg[0] ? err.msg : "values differ");
    else if (llm4d_ckpt_read(c, NULL, "D", WHOLE(LLM4D_ST_F32, 2, gd), d, &err) || memcmp(d, f.d, sizeof d))
        snprintf(why, n, "D: %s", err.msg[0] ? err.msg : "values differ");
    else {
        size_t bl = 0;
        const char *blob = llm4d_ckpt_blob(c, "config.json", &bl);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(llm4d_ckpt_meta(c), "step");
        if (!blob || bl != strlen(f.blob) || memcmp(blob, f.blob, bl)) snprintf(why, n, "config.json blob");
        else if (!cJSON_IsNumber(st) || st->valueint != step) snprintf(why, n, "meta.json step");
        else if (llm4d_ckpt_step(c) != step) snprintf(why, n, "llm4d_ckpt_step %lld", (long long)llm4d_ckpt_step(c));
    }
    return why;
}

/* ---- tests ---- */

static void test_roundtrip(tally *t) {
    char out[512], why[1200], p[600];
    snprintf(out, sizeof out, "%s/rt/run", root); /* parents created by the saver */
    fixture f;
    fixture_fill(&f, 1);
    llm4d_err err = {0};
    llm4d_code rc = fixture_save(&f, out, 1, 0, &err);
    check(t, rc == LLM4D_OK, "save step 1 (slices, ranges, blob) into a new nested output_dir", rc ? err.msg : "");
    check(t, latest_is(out, "step_1"), "latest holds step_1", "");
    check(t, count_prefix(out, ".tmp") == 0, "no temporary left after a save", "");
    llm4d_ckpt *c = NULL;
    rc = llm4d_ckpt_open(&c, out, &err);
    check(t, rc == LLM4D_OK, "open through output_dir/latest", rc ? err.msg : "");
    if (rc) return;
    check(t, !verify_fixture(c, 1, why, sizeof why)[0], "every tensor, the blob and meta read back", why);

    /* The manifest against an independent crc32 of each file. */
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(llm4d_ckpt_meta(c), "files");
    int nfiles = cJSON_GetArraySize(files), good = cJSON_IsObject(files) && nfiles == 5;
    const cJSON *e;
    cJSON_ArrayForEach(e, files) {
        size_t len = 0;
        snprintf(p, sizeof p, "%s/step_1/%s", out, e->string);
        char *b = read_file(p, &len);
        uLong crc = b ? crc32(0L, (const Bytef *)b, (uInt)len) : 0;
        const cJSON *by = cJSON_GetObjectItemCaseSensitive(e, "bytes"), *cr = cJSON_GetObjectItemCaseSensitive(e, "crc32");
        if (!b || !cJSON_IsNumber(by) || !cJSON_IsNumber(cr) || (size_t)by->valuedouble != len ||
            (uLong)cr->valuedouble != crc)
            good = 0;
        free(b);
    }
    check(t, good, "meta.json files manifest: 5 files, bytes and crc32 equal zlib's over each file", "");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(llm4d_ckpt_meta(c), "model");
    check(t, cJSON_IsString(model) && strcmp(model->valuestring, "tiny") == 0, "caller's meta.json keys kept", "");

    /* Reads of boxes other than the ones written. */
    float buf[64];
    int64_t ga[] = {AR, AC};
    int ok = 1;
    const int64_t rows[][2] = {{0, 2}, {2, 3}, {3, 5}, {5, 6}};
    for (int k = 0; k < 4 && ok; k++) {
        int64_t off[] = {rows[k][0], 0}, shp[] = {rows[k][1] - rows[k][0], AC};
        ok = llm4d_ckpt_read(c, "model", "A", BOX(LLM4D_ST_F32, 2, ga, off, shp), buf, &err) == LLM4D_OK &&
             memcmp(buf, f.a + rows[k][0] * AC, (size_t)shp[0] * AC * sizeof(float)) == 0;
    }
    check(t, ok, "A written as 2 row slices, read as 4 other row slices", ok ? "" : err.msg);
    {
        int64_t off[] = {1, 1}, shp[] = {4, 2};
        ok = llm4d_ckpt_read(c, "model", "A", BOX(LLM4D_ST_F32, 2, ga, off, shp), buf, &err) == LLM4D_OK;
        for (int r = 0; ok && r < 4; r++)
            for (int q = 0; q < 2; q++) ok = ok && buf[r * 2 + q] == f.a[(1 + r) * AC + 1 + q];
        check(t, ok, "a 4x2 box across the slice boundary", ok ? "" : err.msg);
    }
    {
        int64_t gc[] = {3, 4, 5}, off[] = {1, 0, 2}, shp[] = {2, 3, 2};
        uint16_t cb[12];
        ok = llm4d_ckpt_read(c, NULL, "C", BOX(LLM4D_ST_BF16, 3, gc, off, shp), cb, &err) == LLM4D_OK;
        for (int x = 0; ok && x < 2; x++)
            for (int y = 0; y < 3; y++)
                for (int z = 0; z < 2; z++) ok = ok && cb[(x * 3 + y) * 2 + z] == f.c[((1 + x) * 4 + y) * 5 + 2 + z];
        check(t, ok, "3-d box across column slices, BF16 as stored", ok ? "" : err.msg);
    }
    {
        int64_t gd[] = {DR, DC};
        ok = llm4d_ckpt_read_range(c, NULL, "D", WHOLE(LLM4D_ST_F32, 2, gd), 4, 30, buf, &err) == LLM4D_OK &&
             memcmp(buf, f.d + 4, 26 * sizeof(float)) == 0;
        check(t, ok, "D written as 3 flat ranges, read as another flat range", ok ? "" : err.msg);
    }
    {
        double bd[5];
        int64_t gb[] = {5};
        ok = llm4d_ckpt_read(c, NULL, "B", WHOLE(LLM4D_ST_F64, 1, gb), bd, &err) == LLM4D_OK && bd[4] == 3.0;
        check(t, ok, "F32 read as F64", ok ? "" : err.msg);
    }
    llm4d_ckpt_info info;
    ok = llm4d_ckpt_find(c, "model", "A", &info) && info.nslices == 2 && info.ndim == 2 && info.shape[0] == AR &&
         llm4d_ckpt_find(c, NULL, "A", &info) && info.nslices == 3 && !llm4d_ckpt_find(c, NULL, "Z", NULL);
    check(t, ok, "find: slices counted per file prefix", "");
    const char *names[16];
    int nn = llm4d_ckpt_names(c, NULL, names, 16);
    ok = nn == 6 && strcmp(names[0], "A") == 0 && strcmp(names[5], "S") == 0 && llm4d_ckpt_names(c, "optim", NULL, 0) == 1;
    check(t, ok, "names: 6 distinct global names, 1 in optim", "");
    llm4d_ckpt_close(c);

    /* How the files look to any safetensors reader. */
    llm4d_st_file sf;
    snprintf(p, sizeof p, "%s/step_1/model-0.safetensors", out);
    rc = llm4d_st_open(&sf, p, &err);
    ok = rc == LLM4D_OK && llm4d_st_find(&sf, "B") && llm4d_st_find(&sf, "A@0,0") && !llm4d_st_find(&sf, "A") &&
         llm4d_st_meta(&sf, "llm4d.slices") && strstr(llm4d_st_meta(&sf, "llm4d.slices"), "\"A@0,0\"") &&
         llm4d_st_meta(&sf, "format") && strcmp(llm4d_st_meta(&sf, "format"), "pt") == 0;
    check(t, ok, "whole tensors under their global name, slices as name@offsets + llm4d.slices record, format pt",
          rc ? err.msg : "");
    if (!rc) llm4d_st_close(&sf);

    snprintf(p, sizeof p, "%s/step_1", out);
    rc = llm4d_ckpt_open(&c, p, &err);
    check(t, rc == LLM4D_OK && strcmp(llm4d_ckpt_dir(c), p) == 0, "open a step_<N> directory directly",
          rc ? err.msg : "");
    if (!rc) llm4d_ckpt_close(c);

    /* flush: a file written early, its buffer reused afterwards */
    llm4d_ckpt_saver *s;
    float buf2[4] = {1, 2, 3, 4};
    int64_t g4[] = {4};
    snprintf(p, sizeof p, "%s/flush", root);
    rc = llm4d_ckpt_save_begin(&s, p, 7, &err);
    if (!rc) rc = llm4d_ckpt_save_tensor(s, "a.safetensors", "X", WHOLE(LLM4D_ST_F32, 1, g4), buf2, &err);
    if (!rc) rc = llm4d_ckpt_save_flush(s, "a.safetensors", &err);
    buf2[0] = 99;
    if (!rc) rc = llm4d_ckpt_save_tensor(s, "b.safetensors", "Y", WHOLE(LLM4D_ST_F32, 1, g4), buf2, &err);
    if (!rc) rc = llm4d_ckpt_save_commit(s, NULL, 0, &err);
    float x[4], y[4];
    ok = rc == LLM4D_OK && llm4d_ckpt_open(&c, p, &err) == LLM4D_OK;
    if (ok) {
        ok = !llm4d_ckpt_read(c, NULL, "X", WHOLE(LLM4D_ST_F32, 1, g4), x, &err) &&
             !llm4d_ckpt_read(c, NULL, "Y", WHOLE(LLM4D_ST_F32, 1, g4), y, &err) && x[0] == 1 && y[0] == 99;
        llm4d_ckpt_close(c);
    }
    check(t, ok, "flush writes a file early so its buffer can be reused", ok ? "" : err.msg);
}

/* Save a fresh copy of step 1 into out and apply a damage function; the open must fail naming `needle`. */
static void expect_open_fails(tally *t, const char *label, const char *out, const char *needle1,
                              const char *needle2) {
    llm4d_ckpt *c = NULL;
    llm4d_err err = {0};
    llm4d_code rc = llm4d_ckpt_open(&c, out, &err);
    int ok = rc == LLM4D_EUSER && strstr(err.msg, needle1) && (!needle2 || strstr(err.msg, needle2));
    check(t, ok, label, rc ? err.msg : "(opened)");
    if (!rc) llm4d_ckpt_close(c);
}

static void fresh(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", root, name);
    fixture f;
    fixture_fill(&f, 1);
    llm4d_err err = {0};
    if (fixture_save(&f, out, 1, 0, &err) != LLM4D_OK) printf("setup failed: %s\n", err.msg);
}

static void test_damage(tally *t) {
    char out[512], p[700];
    fresh(out, sizeof out, "flip");
    snprintf(p, sizeof p, "%s/step_1/model-1.safetensors", out);
    struct stat st;
    stat(p, &st);
    int fd = open(p, O_RDWR);
    unsigned char ch;
    off_t where = st.st_size - 3; /* in the data, so only the checksum can notice */
    if (pread(fd, &ch, 1, where) != 1 || (ch ^= 0x10, pwrite(fd, &ch, 1, where)) != 1)
        check(t, 0, "flipping a data byte of the file", p);
    close(fd);
    expect_open_fails(t, "flipped data byte -> error naming the file", out, p, "corrupt");

    fresh(out, sizeof out, "fliphdr");
    snprintf(p, sizeof p, "%s/step_1/model-0.safetensors", out);
    fd = open(p, O_RDWR);
    if (pread(fd, &ch, 1, 20) != 1 || (ch ^= 0x01, pwrite(fd, &ch, 1, 20)) != 1)
        check(t, 0, "flipping a header byte of the file", p);
    close(fd);
    expect_open_fails(t, "flipped header byte -> error naming the file", out, p, "crc32");

    fresh(out, sizeof out, "trunc");
    snprintf(p, sizeof p, "%s/step_1/model-2.safetensors", out);
    stat(p, &st);
    if (truncate(p, st.st_size - 4) != 0)
        check(t, 0, "truncating the file", p);
    expect_open_fails(t, "truncated file -> error naming it", out, p, "bytes but meta.json says");

    fresh(out, sizeof out, "missing");
    snprintf(p, sizeof p, "%s/step_1/optim.safetensors", out);
    unlink(p);
    expect_open_fails(t, "missing file -> error naming it", out, p, "cannot be opened");

    fresh(out, sizeof out, "meta");
    snprintf(p, sizeof p, "%s/step_1/meta.json", out);
    FILE *fp = fopen(p, "w");
    fputs("{\"step\": 1, \"files\": {", fp);
    fclose(fp);
    expect_open_fails(t, "truncated meta.json -> error naming it", out, p, "not a valid JSON");
    fp = fopen(p, "w");
    fputs("{\"step\": 1}", fp);
    fclose(fp);
    expect_open_fails(t, "meta.json without manifest -> error naming it", out, p, "manifest");

    fresh(out, sizeof out, "latest");
    snprintf(p, sizeof p, "%s/latest", out);
    fp = fopen(p, "w");
    fputs("../../etc\n", fp);
    fclose(fp);
    expect_open_fails(t, "latest holding garbage -> error naming it", out, p, "not step_<N>");
    fp = fopen(p, "w");
    fputs("step_9\n", fp);
    fclose(fp);
    expect_open_fails(t, "latest naming a missing step -> error", out, "step_9", "missing");
    unlink(p);
    llm4d_ckpt *c = NULL;
    llm4d_err err = {0};
    llm4d_code rc = llm4d_ckpt_open(&c, out, &err);
    check(t, rc == LLM4D_OK && llm4d_ckpt_step(c) == 1, "no latest: the highest complete step_<N> is used",
          rc ? err.msg : "");
    if (!rc) llm4d_ckpt_close(c);
    snprintf(p, sizeof p, "%s/nothing_here", root);
    mkdir(p, 0755);
    expect_open_fails(t, "directory without checkpoints -> error naming it", p, p, "no checkpoint");
    snprintf(p, sizeof p, "%s/does_not_exist", root);
    expect_open_fails(t, "nonexistent path -> error naming it", p, p, "does not exist");

    /* Reading errors from a good checkpoint. */
    fresh(out, sizeof out, "reads");
    rc = llm4d_ckpt_open(&c, out, &err);
    if (rc) {
        check(t, 0, "open for read errors", err.msg);
        return;
    }
    float buf[64];
    int64_t ga[] = {AR, AC}, wrong[] = {AR, AC + 1};
    rc = llm4d_ckpt_read(c, "model", "transformer.h.0.attn.c_attn.weight", WHOLE(LLM4D_ST_F32, 2, ga), buf, &err);
    check(t, rc == LLM4D_EUSER && strstr(err.msg, "no tensor 'transformer.h.0.attn.c_attn.weight'"),
          "missing tensor -> error naming it", err.msg);
    rc = llm4d_ckpt_read(c, "model", "A", WHOLE(LLM4D_ST_F32, 2, wrong), buf, &err);
    check(t, rc == LLM4D_EUSER && strstr(err.msg, "'A' has shape [6, 4] but the model expects [6, 5]"),
          "shape that does not fit the model -> error", err.msg);
    int64_t off[] = {4, 0}, shp[] = {3, AC};
    rc = llm4d_ckpt_read(c, "model", "A", BOX(LLM4D_ST_F32, 2, ga, off, shp), buf, &err);
    check(t, rc == LLM4D_EUSER && strstr(err.msg, "requested [4, 7)"), "box outside the tensor -> error", err.msg);
    rc = llm4d_ckpt_read(c, NULL, "A", WHOLE(LLM4D_ST_F32, 2, ga), buf, &err);
    check(t, rc == LLM4D_EUSER && strstr(err.msg, "overlapping slices"),
          "same name in model and optim files without a prefix -> overlap error", err.msg);
    int64_t gi[] = {3};
    rc = llm4d_ckpt_read(c, NULL, "I", WHOLE(LLM4D_ST_F32, 1, gi), buf, &err);
    check(t, rc == LLM4D_EUSER && strstr(err.msg, "stored as I64"), "I64 read as F32 -> error", err.msg);
    llm4d_ckpt_close(c);

    /* An incomplete set of slices: rows 0..1 and 3..3 of a [4, 2] tensor. */
    llm4d_ckpt_saver *s;
    float e[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    int64_t ge[] = {4, 2}, o0[] = {0, 0}, s0[] = {2, 2}, o3[] = {3, 0}, s3[] = {1, 2};
    snprintf(p, sizeof p, "%s/holes", root);
    rc = llm4d_ckpt_save_begin(&s, p, 1, &err);
    if (!rc) rc = llm4d_ckpt_save_tensor(s, "m.safetensors", "E", BOX(LLM4D_ST_F32, 2, ge, o0, s0), e, &err);
    if (!rc) rc = llm4d_ckpt_save_tensor(s, "m.safetensors", "E", BOX(LLM4D_ST_F32, 2, ge, o3, s3), e + 6, &err);
    if (!rc) rc = llm4d_ckpt_save_commit(s, NULL, 0, &err);
    if (!rc) rc = llm4d_ckpt_open(&c, p, &err);
    if (rc) {
        check(t, 0, "save with holes", err.msg);
        return;
    }
    rc = llm4d_ckpt_read(c, NULL, "E", WHOLE(LLM4D_ST_F32, 2, ge), buf, &err);
    check(t, rc == LLM4D_EUSER && strstr(err.msg, "cover 6 of the 8 elements"), "uncovered region -> error", err.msg);
    int64_t ro[] = {1, 0}, rs[] = {1, 2};
    rc = llm4d_ckpt_read(c, NULL, "E", BOX(LLM4D_ST_F32, 2, ge, ro, rs), buf, &err);
    check(t, rc == LLM4D_OK && buf[0] == 2 && buf[1] == 3, "a covered part of the same tensor still reads",
          rc ? err.msg : "");
    llm4d_ckpt_close(c);
}

static void test_keep_last(tally *t) {
    char out[512], p[600];
    snprintf(out, sizeof out, "%s/keep", root);
    llm4d_err err = {0};
    fixture f;
    int ok = 1;
    for (int step = 1; step <= 5 && ok; step++) {
        fixture_fill(&f, step);
        ok = fixture_save(&f, out, step, 2, &err) == LLM4D_OK;
    }
    check(t, ok, "5 saves with keep_last 2", ok ? "" : err.msg);
    int present[6];
    for (int k = 1; k <= 5; k++) {
        snprintf(p, sizeof p, "%s/step_%d", out, k);
        present[k] = exists(p);
    }
    check(t, !present[1] && !present[2] && !present[3] && present[4] && present[5] && latest_is(out, "step_5"),
          "only step_4 and step_5 remain, latest is step_5", "");
    /* A run resumed from step 3 saves step 3 again: latest (step_3) is never pruned. */
    fixture_fill(&f, 33);
    ok = fixture_save(&f, out, 3, 2, &err) == LLM4D_OK;
    snprintf(p, sizeof p, "%s/step_3", out);
    int s3 = exists(p);
    snprintf(p, sizeof p, "%s/step_4", out);
    int s4 = exists(p);
    snprintf(p, sizeof p, "%s/step_5", out);
    int s5 = exists(p);
    check(t, ok && s3 && !s4 && s5 && latest_is(out, "step_3"), "pruning keeps the step latest names", err.msg);
    /* Re-saving an existing step replaces it atomically. */
    fixture_fill(&f, 55);
    ok = fixture_save(&f, out, 5, 0, &err) == LLM4D_OK;
    llm4d_ckpt *c = NULL;
    float a[AR * AC];
    int64_t ga[] = {AR, AC};
    ok = ok && llm4d_ckpt_open(&c, out, &err) == LLM4D_OK;
    if (ok) {
        ok = llm4d_ckpt_read(c, "model", "A", WHOLE(LLM4D_ST_F32, 2, ga), a, &err) == LLM4D_OK &&
             a[0] == 55000.0f && llm4d_ckpt_step(c) == 5;
        llm4d_ckpt_close(c);
    }
    check(t, ok && count_prefix(out, ".tmp") == 0, "re-saving step_5 replaces it (exchange), no temporaries left",
          ok ? "" : err.msg);
}

static void test_unwritable(tally *t) {
    char out[512], p[600];
    snprintf(p, sizeof p, "%s/plainfile", root);
    FILE *fp = fopen(p, "w");
    fputs("keep me\n", fp);
    fclose(fp);
    snprintf(out, sizeof out, "%s/plainfile/out", root);
    llm4d_ckpt_saver *s = NULL;
    llm4d_err err = {0};
    llm4d_code rc = llm4d_ckpt_save_begin(&s, out, 1, &err);
    char *back = read_file(p, NULL);
    check(t, rc == LLM4D_EUSER && s == NULL && strstr(err.msg, out) && back && strcmp(back, "keep me\n") == 0,
          "output_dir under a regular file -> error naming it, file untouched", err.msg);
    free(back);
    rc = llm4d_ckpt_save_begin(&s, "/proc/llm4d_ckpt_test/out", 1, &err);
    check(t, rc == LLM4D_EUSER && s == NULL && strstr(err.msg, "/proc/llm4d_ckpt_test/out"),
          "output_dir under /proc -> error naming it", err.msg);

    /* A save that fails before the rename leaves the previous checkpoint and latest untouched. */
    fresh(out, sizeof out, "failsave");
    snprintf(p, sizeof p, "%s/latest", out);
    char *before = read_file(p, NULL);
    rc = llm4d_ckpt_save_begin(&s, out, 2, &err);
    int64_t g[] = {2};
    float v[2] = {1, 2};
    if (!rc) rc = llm4d_ckpt_save_tensor(s, "w.safetensors", "W", WHOLE(LLM4D_ST_F32, 1, g), v, &err);
    llm4d_code rc2 = LLM4D_OK;
    if (!rc) {
        cJSON *notobj = cJSON_CreateArray();
        rc2 = llm4d_ckpt_save_commit(s, notobj, 1, &err);
        cJSON_Delete(notobj);
    }
    char *after = read_file(p, NULL);
    snprintf(p, sizeof p, "%s/step_2", out);
    char p1[600];
    snprintf(p1, sizeof p1, "%s/step_1/meta.json", out);
    check(t, rc == LLM4D_OK && rc2 == LLM4D_EINTERNAL && before && after && strcmp(before, after) == 0 &&
                 !exists(p) && exists(p1) && count_prefix(out, ".tmp") == 0,
          "a failed commit removes its temporary and touches nothing else", err.msg);
    free(before);
    free(after);

    /* Bad arguments are the caller's bugs, reported as internal errors, not crashes. */
    rc = llm4d_ckpt_save_begin(&s, out, 3, &err);
    int64_t off[] = {1}, shp[] = {2};
    llm4d_code a1 =
        rc ? rc : llm4d_ckpt_save_tensor(s, "w.safetensors", "W", BOX(LLM4D_ST_F32, 1, g, off, shp), v, &err);
    llm4d_code a2 = rc ? rc : llm4d_ckpt_save_tensor(s, "../w.safetensors", "W", WHOLE(LLM4D_ST_F32, 1, g), v, &err);
    llm4d_code a3 = rc ? rc : llm4d_ckpt_save_tensor(s, "w.safetensors", "W", WHOLE(LLM4D_ST_F32, 1, g), v, &err);
    llm4d_code a4 = rc ? rc : llm4d_ckpt_save_tensor(s, "w.safetensors", "W", WHOLE(LLM4D_ST_F32, 1, g), v, &err);
    llm4d_code a5 = rc ? rc : llm4d_ckpt_save_blob(s, "x.safetensors", v, 8, &err);
    if (!rc) llm4d_ckpt_save_abort(s);
    check(t, a1 == LLM4D_EINTERNAL && a2 == LLM4D_EINTERNAL && a3 == LLM4D_OK && a4 == LLM4D_EINTERNAL &&
                 a5 == LLM4D_EINTERNAL && count_prefix(out, ".tmp") == 0,
          "slice outside the shape, bad file name, duplicate tensor, blob named .safetensors refused; abort cleans", "");
}

static void test_stale(tally *t) {
    char out[512], p[700];
    fresh(out, sizeof out, "stale");
    snprintf(p, sizeof p, "%s/.tmp_step_9_999999", out);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/.tmp_step_9_999999/x.safetensors", out);
    FILE *fp = fopen(p, "w");
    fputs("partial", fp);
    fclose(fp);
    snprintf(p, sizeof p, "%s/.tmp_users_own", out);
    mkdir(p, 0755);
    fixture f;
    fixture_fill(&f, 2);
    llm4d_err err = {0};
    llm4d_code rc = fixture_save(&f, out, 2, 0, &err);
    check(t, rc == LLM4D_OK && count_prefix(out, ".tmp_step_") == 0 && latest_is(out, "step_2") && exists(p),
          "a stale .tmp_step_ directory is removed by the next save (other .tmp_ names left alone)",
          rc ? err.msg : "");
    rmdir(p);
}

/* Flat ranges cut at pseudo-random points (ZeRO-like partitions that ignore rows), over tensors of 1 to 4 dims,
 * read back whole and as other pseudo-random ranges. */
static void test_ranges(tally *t) {
    static const int64_t shapes[][4] = {{3, 4, 5, 0}, {7, 0, 0, 0}, {2, 1, 3, 2}, {4, 6, 0, 0}, {1, 1, 1, 9}};
    static const int ndims[] = {3, 1, 4, 2, 4};
    enum { NT = 5, NCASE = 6 };
    float *data[NT * NCASE];
    char names[NT * NCASE][16], out[512];
    uint64_t rng = 42;
    snprintf(out, sizeof out, "%s/ranges", root);
    llm4d_ckpt_saver *s;
    llm4d_err err = {0};
    llm4d_code rc = llm4d_ckpt_save_begin(&s, out, 1, &err);
    int boxes_ok = 1;
    for (int k = 0; k < NT * NCASE && rc == LLM4D_OK; k++) {
        int ti = k % NT;
        int64_t n = llm4d_st_numel(ndims[ti], shapes[ti]);
        data[k] = malloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++) data[k][i] = (float)(k * 1000 + i);
        snprintf(names[k], sizeof names[k], "R%d", k);
        int64_t cut[5] = {0, 0, 0, 0, n};
        for (int j = 1; j < 4; j++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            cut[j] = (int64_t)((rng >> 33) % (uint64_t)(n + 1));
        }
        for (int a = 1; a < 4; a++) /* sort the three cuts */
            for (int b = a; b > 1 && cut[b - 1] > cut[b]; b--) {
                int64_t x = cut[b];
                cut[b] = cut[b - 1];
                cut[b - 1] = x;
            }
        for (int j = 0; j < 4 && rc == LLM4D_OK; j++) {
            char file[32];
            snprintf(file, sizeof file, "r%d.safetensors", j);
            rc = llm4d_ckpt_save_range(s, file, names[k], WHOLE(LLM4D_ST_F32, ndims[ti], shapes[ti]), cut[j],
                                       cut[j + 1], data[k] + cut[j], &err);
        }
    }
    if (rc == LLM4D_OK) rc = llm4d_ckpt_save_commit(s, NULL, 0, &err);
    else llm4d_ckpt_save_abort(s);
    check(t, rc == LLM4D_OK, "save 30 tensors (1-4 dims) as 4 flat ranges each, cut anywhere", rc ? err.msg : "");
    llm4d_ckpt *c = NULL;
    if (rc == LLM4D_OK) rc = llm4d_ckpt_open(&c, out, &err);
    int whole_ok = rc == LLM4D_OK, range_ok = rc == LLM4D_OK;
    char detail[1100] = "";
    float buf[64];
    for (int k = 0; k < NT * NCASE && c; k++) {
        int ti = k % NT;
        int64_t n = llm4d_st_numel(ndims[ti], shapes[ti]);
        llm4d_ckpt_info info;
        /* each range is at most 2*(ndim-1)+1 boxes */
        if (!llm4d_ckpt_find(c, NULL, names[k], &info) || info.nslices > 4 * (2 * (ndims[ti] - 1) + 1)) boxes_ok = 0;
        if (llm4d_ckpt_read(c, NULL, names[k], WHOLE(LLM4D_ST_F32, ndims[ti], shapes[ti]), buf, &err) ||
            memcmp(buf, data[k], (size_t)n * sizeof(float))) {
            whole_ok = 0;
            snprintf(detail, sizeof detail, "%s: %s", names[k], err.msg);
        }
        for (int r = 0; r < 10; r++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int64_t b = (int64_t)((rng >> 33) % (uint64_t)(n + 1));
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int64_t e = b + (int64_t)((rng >> 33) % (uint64_t)(n - b + 1));
            if (llm4d_ckpt_read_range(c, NULL, names[k], WHOLE(LLM4D_ST_F32, ndims[ti], shapes[ti]), b, e, buf, &err) ||
                memcmp(buf, data[k] + b, (size_t)(e - b) * sizeof(float))) {
                range_ok = 0;
                snprintf(detail, sizeof detail, "%s [%lld, %lld): %s", names[k], (long long)b, (long long)e, err.msg);
            }
        }
    }
    check(t, whole_ok, "each read back whole", detail);
    check(t, range_ok, "300 other flat ranges read back", detail);
    check(t, boxes_ok, "a flat range is stored as at most 2*(ndim-1)+1 boxes", "");
    if (c) llm4d_ckpt_close(c);
    for (int k = 0; k < NT * NCASE; k++) free(data[k]);
}

static const char *kill_points[] = {"mid_file", "after_first_file", "before_dir_fsync", "before_rename",
                                    "after_rename", "latest_partial", "before_latest_rename", "before_prune"};

static void test_sigkill(tally *t) {
    for (size_t k = 0; k < sizeof kill_points / sizeof kill_points[0]; k++) {
        const char *point = kill_points[k];
        char out[512], label[200], why[1200];
        snprintf(out, sizeof out, "%s/kill_%s", root, point);
        fixture f;
        fixture_fill(&f, 1);
        llm4d_err err = {0};
        if (fixture_save(&f, out, 1, 0, &err) != LLM4D_OK) {
            check(t, 0, "setup step 1", err.msg);
            continue;
        }
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("LLM4D_CKPT_KILL_AT", point, 1);
            fixture f2;
            fixture_fill(&f2, 2);
            llm4d_err e2 = {0};
            fixture_save(&f2, out, 2, 1, &e2);
            _exit(0); /* reaching this means the kill point was never hit */
        }
        int status = 0;
        waitpid(pid, &status, 0);
        snprintf(label, sizeof label, "kill at %s: the child died by SIGKILL there", point);
        check(t, WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, label, "");
        int want = strcmp(point, "before_prune") == 0 ? 2 : 1;
        char want_name[16];
        snprintf(want_name, sizeof want_name, "step_%d", want);
        snprintf(label, sizeof label, "kill at %s: latest names %s", point, want_name);
        check(t, latest_is(out, want_name), label, "");
        llm4d_ckpt *c = NULL;
        llm4d_code rc = llm4d_ckpt_open(&c, out, &err);
        snprintf(label, sizeof label, "kill at %s: latest checkpoint verifies and holds step %d's data", point, want);
        if (rc == LLM4D_OK) {
            verify_fixture(c, want, why, sizeof why);
            llm4d_ckpt_close(c);
        } else {
            snprintf(why, sizeof why, "%s", err.msg);
        }
        check(t, rc == LLM4D_OK && !why[0], label, why);
        if (strcmp(point, "after_rename") == 0) {
            /* step_2 is complete on disk though latest does not name it yet: it must verify too */
            char p[600];
            snprintf(p, sizeof p, "%s/step_2", out);
            rc = llm4d_ckpt_open(&c, p, &err);
            if (rc == LLM4D_OK) {
                verify_fixture(c, 2, why, sizeof why);
                llm4d_ckpt_close(c);
            }
            check(t, rc == LLM4D_OK && !why[0], "kill at after_rename: the renamed step_2 verifies",
                  rc ? err.msg : why);
        }
        /* The next save (a resumed run saving step 2 again) succeeds and cleans up. */
        fixture_fill(&f, 2);
        rc = fixture_save(&f, out, 2, 1, &err);
        char p1[600];
        snprintf(p1, sizeof p1, "%s/step_1", out);
        snprintf(label, sizeof label, "kill at %s: next save succeeds, latest step_2, no temporaries, step_1 pruned",
                 point);
        check(t, rc == LLM4D_OK && latest_is(out, "step_2") && count_prefix(out, ".tmp") == 0 && !exists(p1), label,
              rc ? err.msg : "");
        rc = llm4d_ckpt_open(&c, out, &err);
        if (rc == LLM4D_OK) {
            verify_fixture(c, 2, why, sizeof why);
            llm4d_ckpt_close(c);
        }
        snprintf(label, sizeof label, "kill at %s: step_2 after the retry verifies", point);
        check(t, rc == LLM4D_OK && !why[0], label, rc ? err.msg : why);
    }
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/llm4d_test_ckpt_XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    tally t = {0, 0};
    test_roundtrip(&t);
    test_damage(&t);
    test_keep_last(&t);
    test_unwritable(&t);
    test_stale(&t);
    test_ranges(&t);
    test_sigkill(&t);
    if (t.fail == 0) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
        if (system(cmd) != 0) printf("note: could not remove %s\n", root);
    } else {
        printf("kept %s for inspection\n", root);
    }
    return tally_summary(&t);
}
