/* util.c — scratch files and input splitting for the libFuzzer harnesses (see util.h). */
#define _GNU_SOURCE
#include "util.h"

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"

#ifndef LLM4D_SRC_DIR
#define LLM4D_SRC_DIR "."
#endif

/* The one piece of process-wide state (util.h says why): the scratch directory's path, "" until created. */
static char scratch[512];

void fz_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz property failed: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

void fz_refused(const char *what, llm4d_code rc, const llm4d_err *err) {
    if (rc != LLM4D_EUSER) fz_fail("%s returned %d (not a user error): %s", what, (int)rc, err->msg);
    if (!err->msg[0] || strchr(err->msg, '\n')) fz_fail("%s: the message is not one line: '%s'", what, err->msg);
    const char *v = getenv("FZ_VERBOSE");
    if (v && *v == '1') fprintf(stderr, "%s refused: %s\n", what, err->msg);
}

int fz_split(const uint8_t *data, size_t size, fz_part *parts, int max) {
    const size_t sl = strlen(FZ_SEP);
    int n = 0;
    size_t start = 0;
    for (size_t i = 0; n < max - 1 && i + sl <= size;) {
        if (memcmp(data + i, FZ_SEP, sl) == 0) {
            parts[n++] = (fz_part){data + start, i - start};
            i += sl;
            start = i;
        } else {
            i++;
        }
    }
    parts[n++] = (fz_part){data + start, size - start};
    return n;
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    return ftw->level == 0 ? 0 : remove(path); /* the directory itself stays */
}

static void cleanup(void) {
    if (!scratch[0]) return;
    nftw(scratch, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    rmdir(scratch);
}

const char *fz_fresh_dir(void) {
    if (!scratch[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(scratch, sizeof scratch, "%s/llm4d-fuzz-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(scratch)) fz_fail("cannot create a scratch directory %s: %s", scratch, strerror(errno));
        atexit(cleanup);
    } else {
        /* a parser may have left a read-only file or directory: make everything removable first */
        nftw(scratch, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    }
    return scratch;
}

void fz_write(const char *rel, const void *p, size_t n, char *path, size_t cap) {
    if (!scratch[0]) fz_fail("fz_write before fz_fresh_dir");
    if (snprintf(path, cap, "%s/%s", scratch, rel) >= (int)cap) fz_fail("scratch path too long");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    *slash = 0;
    if (llm4d_mkdir_p(dir, 0755) != 0) fz_fail("mkdir %s: %s", dir, strerror(errno));
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) fz_fail("writing %s: %s", path, strerror(errno));
}

unsigned fz_touch(const void *p, size_t n) {
    const volatile unsigned char *b = p;
    unsigned h = 0;
    for (size_t i = 0; i < n; i++) h = h * 31 + b[i];
    return h;
}

const char *fz_src_path(const char *rel, char *buf, size_t cap) {
    const char *s = getenv("LLM4D_SRC_DIR");
    snprintf(buf, cap, "%s/%s", s && *s ? s : LLM4D_SRC_DIR, rel);
    return buf;
}

void fz_walk_corpus(const llm4d_corpus *c) {
    if (c->n_docs < 0 || c->doc_start[0] != 0 || c->doc_start[c->n_docs] != c->n_tokens)
        fz_fail("document index does not cover the tokens");
    int32_t buf[4096];
    int64_t limit = c->n_tokens < (1 << 20) ? c->n_tokens : (1 << 20);
    for (int64_t s = 0; s < limit; s += 4096) {
        int64_t n = limit - s < 4096 ? limit - s : 4096;
        llm4d_corpus_read(c, s, n, buf);
        for (int64_t i = 0; i < n; i++)
            if (buf[i] < 0 || buf[i] > c->max_id)
                fz_fail("token %lld = %d outside [0, max_id]", (long long)(s + i), buf[i]);
    }
}
