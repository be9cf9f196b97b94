/* prepare.c — raw text to a tokenized corpus (see prepare.h): read, split into documents, tokenize in parallel,
 * write npz or bin/idx.
 *
 * The input is read in chunks of whole documents (about 8 MB of text). For each chunk the documents are handed
 * to OpenMP threads (dynamic schedule, since documents range from one line to whole books); each thread parses
 * JSON, checks UTF-8, strips and tokenizes into its own id buffer and records where each document's ids went.
 * The main thread then appends the documents in input order, so the output does not depend on the number of
 * threads, and reports the first bad document of the chunk by its line. Reading and writing are serial: they run
 * at hundreds of MB/s against tokenization's ~10 MB/s per core, so overlapping them would gain little.
 *
 * Nothing is written under the final names until the end: npz is written in one go by llm4d_npz_write (temp name
 * + rename), Megatron's pair streams into temporaries that llm4d_megatron_writer_finish renames. */
#define _GNU_SOURCE
#include "data/prepare.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <zlib.h>

#include "data/megatron.h"
#include "data/npz.h"
#include "data/tokenizer.h"

#define CHUNK_BYTES (8u << 20)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* the list of input files */

typedef struct {
    char **paths;
    int64_t *sizes; /* bytes on disk, for progress */
    int n, cap;
    int64_t total;
} file_list;

static llm4d_code list_add(file_list *l, const char *path, int64_t size, llm4d_err *err) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        char **p = realloc(l->paths, (size_t)cap * sizeof *p);
        if (p) l->paths = p;
        int64_t *s = realloc(l->sizes, (size_t)cap * sizeof *s);
        if (s) l->sizes = s;
        if (!p || !s) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory listing inputs");
        l->cap = cap;
    }
    if (!(l->paths[l->n] = strdup(path))) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory listing inputs");
    l->sizes[l->n++] = size;
    l->total += size;
    return LLM4D_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static llm4d_code list_inputs(file_list *l, const char *const *inputs, int n, llm4d_err *err) {
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(inputs[i], &st) != 0)
            return llm4d_fail(err, LLM4D_EUSER, "cannot read input %s: %s", inputs[i], strerror(errno));
        if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) /* /dev/zero would be one endless line */
            return llm4d_fail(err, LLM4D_EUSER, "input %s is a device; give files, directories or a pipe", inputs[i]);
        if (!S_ISDIR(st.st_mode)) {
            LLM4D_TRY(list_add(l, inputs[i], st.st_size, err));
            continue;
        }
        DIR *d = opendir(inputs[i]);
        if (!d) return llm4d_fail(err, LLM4D_EUSER, "cannot list input directory %s: %s", inputs[i], strerror(errno));
        int first = l->n;
        struct dirent *e;
        llm4d_code rc = LLM4D_OK;
        while (rc == LLM4D_OK && (e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", inputs[i], e->d_name);
            if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) rc = list_add(l, p, st.st_size, err);
        }
        closedir(d);
        LLM4D_TRY(rc);
        if (l->n == first) return llm4d_fail(err, LLM4D_EUSER, "input directory %s holds no files", inputs[i]);
        qsort(l->paths + first, (size_t)(l->n - first), sizeof *l->paths, cmp_str);
        /* sizes only feed the progress total, so their order within the directory does not matter */
    }
    return LLM4D_OK;
}

static void list_free(file_list *l) {
    for (int i = 0; i < l->n; i++) free(l->paths[i]);
    free(l->paths);
    free(l->sizes);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* reading documents */

typedef struct {
    const char *p;
    size_t n;
    long line;      /* 1-based line of the document's first line */
    int status;     /* DOC_OK, DOC_EMPTY, DOC_SKIP (blank JSON line), DOC_ERROR */
    int thread;
    size_t off;     /* its ids: thread's buffer [off, off + n_ids) */
    size_t n_ids;
} doc;

enum { DOC_OK = 0, DOC_EMPTY, DOC_SKIP, DOC_ERROR };

typedef struct {
    gzFile gz;
    const char *path;
    int jsonl, blank_split;
    char *buf;
    size_t cap, len, pos; /* buf[pos, len) is unread */
    int eof;
    size_t chunk;         /* target bytes of text per chunk */
    long line;            /* line number of buf[pos] */
    int64_t bytes_read;   /* all inputs so far, decompressed: the size the summary reports */
    doc *docs;
    size_t n_docs, docs_cap;
} reader;

static llm4d_code reader_fill(reader *r, size_t want, llm4d_err *err) {
    if (r->pos > 0) { /* the previous chunk is processed: drop it */
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
    }
    while (!r->eof && r->len < want) {
        if (r->cap < want + 1) {
            size_t cap = r->cap ? r->cap : 1 << 20;
            while (cap < want + 1) cap *= 2;
            char *b = realloc(r->buf, cap);
            if (!b) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory reading %s", r->path);
            r->buf = b;
            r->cap = cap;
        }
        size_t room = r->cap - 1 - r->len;
        int got = gzread(r->gz, r->buf + r->len, room > (1u << 30) ? 1u << 30 : (unsigned)room);
        if (got < 0) {
            int zerr;
            const char *msg = gzerror(r->gz, &zerr);
            return llm4d_fail(err, LLM4D_EUSER, "%s: cannot read: %s (a corrupt or truncated .gz?)", r->path,
                              zerr == Z_ERRNO ? strerror(errno) : msg);
        }
        if (got == 0) r->eof = 1;
        r->len += (size_t)got;
        r->bytes_read += got;
    }
    return LLM4D_OK;
}

static llm4d_code add_doc(reader *r, const char *p, size_t n, long line, llm4d_err *err) {
    if (r->n_docs == r->docs_cap) {
        size_t cap = r->docs_cap ? 2 * r->docs_cap : 4096;
        doc *d = realloc(r->docs, cap * sizeof *d);
        if (!d) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory for the document list");
        r->docs = d;
        r->docs_cap = cap;
    }
    r->docs[r->n_docs++] = (doc){.p = p, .n = n, .line = line};
    return LLM4D_OK;
}

static int blank_line(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r') return 0;
    return 1;
}

/* Cut the next chunk of whole documents out of the buffer (reading more as needed); n_docs == 0 at the end. */
static llm4d_code reader_next_chunk(reader *r, llm4d_err *err) {
    r->n_docs = 0;
    size_t want = r->chunk;
    for (;;) {
        LLM4D_TRY(reader_fill(r, want, err));
        const char *b = r->buf;
        size_t i = 0, open_at = SIZE_MAX, consumed = 0;
        long line = r->line, open_line = 0, consumed_line = r->line;
        while (i < r->len) {
            const char *nl = memchr(b + i, '\n', r->len - i);
            if (!nl && !r->eof) break; /* an incomplete last line waits for more input */
            size_t e = nl ? (size_t)(nl - b) : r->len, next = nl ? e + 1 : r->len;
            if (!r->blank_split) {
                LLM4D_TRY(add_doc(r, b + i, e - i, line, err));
                consumed = next;
                consumed_line = line + 1;
            } else if (blank_line(b + i, e - i)) {
                if (open_at != SIZE_MAX) LLM4D_TRY(add_doc(r, b + open_at, i - open_at, open_line, err));
                open_at = SIZE_MAX;
                consumed = next;
                consumed_line = line + 1;
            } else if (open_at == SIZE_MAX) {
                open_at = i;
                open_line = line;
            }
            i = next;
            line++;
            if (consumed >= r->chunk && open_at == SIZE_MAX) break;
        }
        if (r->blank_split && r->eof && i >= r->len && open_at != SIZE_MAX) {
            size_t e = r->len;
            while (e > open_at && b[e - 1] == '\n') e--;
            LLM4D_TRY(add_doc(r, b + open_at, e - open_at, open_line, err));
            consumed = r->len;
            consumed_line = line;
        }
        if (r->n_docs > 0 || (r->eof && consumed >= r->len)) {
            r->pos = consumed;
            r->line = consumed_line;
            return LLM4D_OK;
        }
        if (r->eof) { /* only blank lines remained */
            r->pos = r->len;
            return LLM4D_OK;
        }
        want = r->len * 2 + 1; /* one document longer than the buffer: read more of it */
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* one document, on a worker thread */

typedef struct {
    llm4d_tokenizer_worker *w;
    llm4d_ids ids;
    size_t err_doc; /* index of the first failed document this thread saw, SIZE_MAX if none */
    llm4d_err err;
} thread_state;

static llm4d_code process_doc(const llm4d_prep_opts *o, const char *path, int jsonl, int32_t eos, doc *d,
                              thread_state *ts, llm4d_err *err) {
    const char *text = d->p;
    size_t n = d->n;
    cJSON *root = NULL;
    llm4d_code rc = LLM4D_OK;
    size_t ok = llm4d_utf8_valid(text, n);
    if (ok != n)
        return llm4d_fail(err, LLM4D_EUSER, "%s line %ld: invalid UTF-8 at byte %zu of the line; convert the file to "
                          "UTF-8", path, d->line, ok + 1);
    if (jsonl) {
        if (blank_line(text, n)) {
            d->status = DOC_SKIP;
            return LLM4D_OK;
        }
        const char *end = NULL;
        root = cJSON_ParseWithLengthOpts(text, n, &end, 0);
        if (root && end) /* cJSON stops after the value; only whitespace may follow it on the line */
            for (const char *q = end; q < text + n; q++)
                if (*q != ' ' && *q != '\t' && *q != '\r') {
                    cJSON_Delete(root);
                    root = NULL;
                    end = q;
                    break;
                }
        if (!root) {
            size_t at = end && end >= text && end <= text + n ? (size_t)(end - text) + 1 : 1;
            return llm4d_fail(err, LLM4D_EUSER, "%s line %ld: invalid JSON (near byte %zu of the line)", path,
                              d->line, at);
        }
        cJSON *v = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, o->json_key) : NULL;
        if (!cJSON_IsObject(root))
            rc = llm4d_fail(err, LLM4D_EUSER, "%s line %ld: the JSON value is not an object; each line must be an "
                            "object such as {\"%s\": \"...\"}", path, d->line, o->json_key);
        else if (!v)
            rc = llm4d_fail(err, LLM4D_EUSER, "%s line %ld: no key \"%s\"%s%s%s; name the text's key with --json-key",
                            path, d->line, o->json_key, root->child ? " (the first key is \"" : "",
                            root->child ? root->child->string : "", root->child ? "\")" : "");
        else if (!cJSON_IsString(v))
            rc = llm4d_fail(err, LLM4D_EUSER, "%s line %ld: the value of \"%s\" is not a string", path, d->line,
                            o->json_key);
        if (rc != LLM4D_OK) {
            cJSON_Delete(root);
            return rc;
        }
        text = v->valuestring;
        n = strlen(text);
        /* \u escapes can spell what the raw line could not (an unpaired surrogate); cJSON refuses those, but
         * check the decoded text too rather than trust that */
        if ((ok = llm4d_utf8_valid(text, n)) != n)
            rc = llm4d_fail(err, LLM4D_EUSER, "%s line %ld: the text is not valid UTF-8 after JSON unescaping", path,
                            d->line);
    }
    size_t b = 0, e = n;
    if (rc == LLM4D_OK) llm4d_py_strip(text, n, &b, &e);
    if (rc == LLM4D_OK && b == e) d->status = DOC_EMPTY;
    else if (rc == LLM4D_OK) {
        d->off = ts->ids.n;
        rc = llm4d_tokenizer_encode(ts->w, text + b, e - b, &ts->ids, err);
        if (rc == LLM4D_OK && o->append_eos) {
            rc = llm4d_ids_reserve(&ts->ids, 1, err);
            if (rc == LLM4D_OK) ts->ids.v[ts->ids.n++] = eos;
        }
        d->n_ids = ts->ids.n - d->off;
        if (rc == LLM4D_OK && d->n_ids > INT32_MAX)
            rc = llm4d_fail(err, LLM4D_EUSER, "%s line %ld: a document of %zu tokens is longer than int32 lens allow",
                            path, d->line, d->n_ids);
    }
    cJSON_Delete(root);
    return rc;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* output */

typedef struct {
    llm4d_prep_format format;
    llm4d_dtype dtype;
    llm4d_megatron_writer mw;
    void *ids; /* npz: all ids so far (dtype) */
    size_t n_ids, ids_cap;
    int32_t *lens;
    size_t n_lens, lens_cap;
} sink;

static llm4d_code sink_add(sink *s, const int32_t *ids, size_t n, llm4d_err *err) {
    if (s->format == LLM4D_PREP_MMAP) return llm4d_megatron_writer_add(&s->mw, ids, (int64_t)n, err);
    size_t isz = llm4d_dtype_size(s->dtype);
    if (s->n_ids + n > s->ids_cap) {
        size_t cap = s->ids_cap ? s->ids_cap : 1 << 20;
        while (cap < s->n_ids + n) cap *= 2;
        void *p = realloc(s->ids, cap * isz);
        if (!p) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory holding %zu tokens (use --format mmap, which "
                                  "streams to disk)", cap);
        s->ids = p;
        s->ids_cap = cap;
    }
    if (s->n_lens == s->lens_cap) {
        size_t cap = s->lens_cap ? 2 * s->lens_cap : 4096;
        int32_t *p = realloc(s->lens, cap * sizeof *p);
        if (!p) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory for %zu document lengths", cap);
        s->lens = p;
        s->lens_cap = cap;
    }
    if (s->dtype == LLM4D_DT_U16) {
        uint16_t *u = (uint16_t *)s->ids + s->n_ids;
        for (size_t i = 0; i < n; i++) u[i] = (uint16_t)ids[i];
    } else {
        memcpy((int32_t *)s->ids + s->n_ids, ids, n * sizeof *ids);
    }
    s->n_ids += n;
    s->lens[s->n_lens++] = (int32_t)n;
    return LLM4D_OK;
}

static void sink_free(sink *s) {
    llm4d_megatron_writer_abort(&s->mw);
    free(s->ids);
    free(s->lens);
}

/* mkdir -p of the directory part of prefix */
static llm4d_code make_parent_dirs(const char *prefix, llm4d_err *err) {
    char p[4096];
    snprintf(p, sizeof p, "%s", prefix);
    char *slash = strrchr(p, '/');
    if (!slash || slash == p) return LLM4D_OK;
    *slash = 0;
    for (char *q = p + 1; *q; q++) {
        if (*q != '/') continue;
        *q = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            return llm4d_fail(err, LLM4D_EUSER, "cannot create directory %s: %s", p, strerror(errno));
        *q = '/';
    }
    if (mkdir(p, 0777) != 0 && errno != EEXIST)
        return llm4d_fail(err, LLM4D_EUSER, "cannot create directory %s: %s", p, strerror(errno));
    return LLM4D_OK;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* progress */

typedef struct {
    FILE *out;
    double t0, last;
    int64_t total_bytes; /* on disk, all inputs */
    int drawn;
} progress;

static void fmt_count(char *b, size_t n, double v) {
    if (v >= 1e9) snprintf(b, n, "%.2fG", v / 1e9);
    else if (v >= 1e6) snprintf(b, n, "%.2fM", v / 1e6);
    else if (v >= 1e4) snprintf(b, n, "%.1fk", v / 1e3);
    else snprintf(b, n, "%.0f", v);
}

static void progress_draw(progress *pg, int64_t done_disk, const llm4d_prep_stats *st, int force) {
    if (!pg->out) return;
    double t = now_s();
    if (!force && t - pg->last < 0.25) return;
    pg->last = t;
    double el = t - pg->t0, frac = pg->total_bytes > 0 ? (double)done_disk / (double)pg->total_bytes : 1;
    if (frac > 1) frac = 1;
    char docs[32], tps[32], eta[32] = "--:--";
    fmt_count(docs, sizeof docs, (double)st->n_docs);
    fmt_count(tps, sizeof tps, el > 0 ? (double)st->n_tokens / el : 0);
    if (frac > 0.001 && el > 0.5) {
        long s = (long)(el / frac - el + 0.5);
        snprintf(eta, sizeof eta, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    }
    int width = 24, fill = (int)(frac * width);
    char bar[32];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = 0;
    fprintf(pg->out, "\r\033[K[%s] %5.1f%% | %s docs | %.1f MB/s | %s tok/s | ETA %s", bar, 100 * frac, docs,
            el > 0 ? (double)st->bytes_in / 1e6 / el : 0.0, tps, eta);
    fflush(pg->out);
    pg->drawn = 1;
}

static void progress_clear(progress *pg) {
    if (pg->out && pg->drawn) {
        fputs("\r\033[K", pg->out);
        fflush(pg->out);
    }
}

/* ---------------------------------------------------------------------------------------------------------- */

llm4d_code llm4d_prepare(const llm4d_prep_opts *o, llm4d_prep_stats *st, llm4d_err *err) {
    memset(st, 0, sizeof *st);
    double t0 = now_s();
    file_list files = {0};
    llm4d_tokenizer *tok = NULL;
    thread_state *ts = NULL;
    sink out = {.format = o->format};
    reader r = {.chunk = o->chunk_bytes ? o->chunk_bytes : CHUNK_BYTES};
    int nw = o->workers > 0 ? o->workers : omp_get_num_procs();
    st->workers = nw;
    llm4d_code rc = list_inputs(&files, o->inputs, o->n_inputs, err);
    if (rc == LLM4D_OK && files.n == 0) rc = llm4d_fail(err, LLM4D_EUSER, "no input given; pass --input FILE");
    if (rc == LLM4D_OK) rc = llm4d_tokenizer_load(&tok, o->vocab_dir, err);
    if (rc == LLM4D_OK && o->append_eos && llm4d_tokenizer_eos(tok) < 0)
        rc = llm4d_fail(err, LLM4D_EUSER, "--append-eos: the tokenizer %s has no end-of-text token (<|end_of_text|>, "
                        "<|endoftext|>, </s> or <eos>)", o->vocab_dir);
    if (rc == LLM4D_OK && !(ts = calloc((size_t)nw, sizeof *ts)))
        rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory for %d workers", nw);
    for (int i = 0; rc == LLM4D_OK && i < nw; i++)
        if (!(ts[i].w = llm4d_tokenizer_worker_new(tok)))
            rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory for tokenizer worker %d", i);
    if (rc == LLM4D_OK) {
        out.dtype = llm4d_tokenizer_vocab_size(tok) < 65500 ? LLM4D_DT_U16 : LLM4D_DT_I32;
        rc = make_parent_dirs(o->output_prefix, err);
    }
    if (rc == LLM4D_OK && o->format == LLM4D_PREP_MMAP)
        rc = llm4d_megatron_writer_open(&out.mw, o->output_prefix, out.dtype, err);
    int32_t eos = tok ? llm4d_tokenizer_eos(tok) : 0;
    progress pg = {.out = o->progress, .t0 = t0, .total_bytes = files.total};
    int64_t disk_done = 0;

    for (int f = 0; rc == LLM4D_OK && f < files.n; f++) {
        const char *path = files.paths[f];
        int jsonl = o->input_kind == LLM4D_PREP_JSONL ||
                    (o->input_kind == LLM4D_PREP_AUTO &&
                     (ends_with(path, ".jsonl") || ends_with(path, ".json") || ends_with(path, ".jsonl.gz") ||
                      ends_with(path, ".json.gz")));
        r.gz = gzopen(path, "rb"); /* reads plain files as they are */
        if (!r.gz) {
            rc = llm4d_fail(err, LLM4D_EUSER, "cannot open input %s: %s", path, strerror(errno));
            break;
        }
        gzbuffer(r.gz, 1 << 20);
        r.path = path;
        r.jsonl = jsonl;
        r.blank_split = !jsonl && o->split_on_blank_lines;
        r.len = r.pos = 0;
        r.eof = 0;
        r.line = 1;
        for (;;) {
            rc = reader_next_chunk(&r, err);
            if (rc != LLM4D_OK || r.n_docs == 0) break;
            for (int t = 0; t < nw; t++) {
                ts[t].ids.n = 0;
                ts[t].err_doc = SIZE_MAX;
            }
            doc *docs = r.docs;
            int64_t nd = (int64_t)r.n_docs;
#pragma omp parallel num_threads(nw)
            {
                thread_state *me = &ts[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 4)
                for (int64_t i = 0; i < nd; i++) {
                    if (me->err_doc != SIZE_MAX) continue; /* this thread already failed; the chunk is lost anyway */
                    docs[i].thread = omp_get_thread_num();
                    llm4d_err e;
                    if (process_doc(o, path, jsonl, eos, &docs[i], me, &e) != LLM4D_OK) {
                        docs[i].status = DOC_ERROR;
                        me->err_doc = (size_t)i;
                        me->err = e;
                    }
                }
            }
            size_t first_bad = SIZE_MAX;
            int bad_t = -1;
            for (int t = 0; t < nw; t++)
                if (ts[t].err_doc < first_bad) first_bad = ts[t].err_doc, bad_t = t;
            for (size_t i = 0; i < r.n_docs && i < first_bad && rc == LLM4D_OK; i++) {
                doc *d = &docs[i];
                if (d->status == DOC_EMPTY) st->n_empty++;
                if (d->status != DOC_OK) continue;
                rc = sink_add(&out, ts[d->thread].ids.v + d->off, d->n_ids, err);
                st->n_docs++;
                st->n_tokens += (int64_t)d->n_ids;
            }
            st->bytes_in = r.bytes_read; /* every byte read, blank lines and separators included */
            if (rc == LLM4D_OK && bad_t >= 0) {
                *err = ts[bad_t].err;
                rc = err->code;
            }
            progress_draw(&pg, disk_done + gzoffset(r.gz), st, 0);
            if (rc != LLM4D_OK) break;
        }
        gzclose(r.gz);
        r.gz = NULL;
        disk_done += files.sizes[f];
    }
    st->bytes_in = r.bytes_read;
    progress_draw(&pg, disk_done, st, 1);
    progress_clear(&pg);

    if (rc == LLM4D_OK && st->n_docs == 0)
        rc = llm4d_fail(err, LLM4D_EUSER, "the input holds no documents (%lld empty after stripping whitespace); "
                        "nothing to write", (long long)st->n_empty);
    if (rc == LLM4D_OK && o->format == LLM4D_PREP_MMAP) {
        rc = llm4d_megatron_writer_finish(&out.mw, err);
        snprintf(st->outputs[0], sizeof st->outputs[0], "%s.bin", o->output_prefix);
        snprintf(st->outputs[1], sizeof st->outputs[1], "%s.idx", o->output_prefix);
    } else if (rc == LLM4D_OK) {
        char path[1100];
        snprintf(path, sizeof path, "%s_ids.npz", o->output_prefix);
        llm4d_array a[2] = {{.name = "ids", .dtype = out.dtype, .ndim = 1, .shape = {(int64_t)out.n_ids},
                             .data = out.ids, .nbytes = out.n_ids * llm4d_dtype_size(out.dtype)},
                            {.name = "lens", .dtype = LLM4D_DT_I32, .ndim = 1, .shape = {(int64_t)out.n_lens},
                             .data = out.lens, .nbytes = out.n_lens * sizeof(int32_t)}};
        rc = llm4d_npz_write(path, a, 2, 0, err);
        snprintf(st->outputs[0], sizeof st->outputs[0], "%s", path);
    }
    if (rc != LLM4D_OK) st->outputs[0][0] = st->outputs[1][0] = 0;
    sink_free(&out); /* after a failure this removes the Megatron temporaries */
    if (r.gz) gzclose(r.gz);
    free(r.buf);
    free(r.docs);
    for (int i = 0; ts && i < nw; i++) {
        llm4d_tokenizer_worker_free(ts[i].w);
        llm4d_ids_free(&ts[i].ids);
    }
    free(ts);
    llm4d_tokenizer_free(tok);
    list_free(&files);
    st->seconds = now_s() - t0;
    return rc;
}
