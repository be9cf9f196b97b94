/* pyval.c — Python literal_eval and PyYAML scalar resolution for config values (see pyval.h).
 *
 * Only what Python's ast.literal_eval accepts and PaddleFleetX configs use is recognised: int (decimal with `_`,
 * 0x/0o/0b), float, one leading sign on a number, True/False/None, single- or double-quoted strings (adjacent ones
 * concatenated), lists, tuples (bare "1,2,3" at the top level too). Anything else (dicts, sets, complex numbers,
 * identifiers) is "not a literal" and the callers keep the text as a string, exactly as PaddleFleetX does. */
#include "config/pyval.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PV_MAX_DEPTH 16

typedef struct {
    const char *p;
    int oom;
} pv_parser;

void llm4d_pv_free(llm4d_pv *v) {
    if (!v) return;
    free(v->s);
    for (int i = 0; i < v->n; i++) llm4d_pv_free(&v->items[i]);
    free(v->items);
    memset(v, 0, sizeof *v);
}

static void skip_ws(pv_parser *ps) {
    while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r') ps->p++;
}

static int is_ident_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* Digits of `base` with single underscores between them (Python's digitpart); appends the digits to buf. */
static int scan_digits(pv_parser *ps, int base, char *buf, size_t *len, size_t cap) {
    const char *p = ps->p;
    int count = 0;
    for (;;) {
        char c = *p;
        int ok = base == 16 ? isxdigit((unsigned char)c) : (c >= '0' && c < '0' + (base < 10 ? base : 10));
        if (ok) {
            if (*len + 1 >= cap) return -1;
            buf[(*len)++] = c;
            count++;
            p++;
        } else if (c == '_' && count > 0) {
            char d = p[1];
            int ok2 = base == 16 ? isxdigit((unsigned char)d) : (d >= '0' && d < '0' + (base < 10 ? base : 10));
            if (!ok2) return -1;
            p++;
        } else {
            break;
        }
    }
    ps->p = p;
    return count;
}

/* A non-negative number token; returns 1 and fills out, 0 when the text here is not a Python number. */
static int parse_number(pv_parser *ps, llm4d_pv *out) {
    char buf[128];
    size_t len = 0;
    const char *p0 = ps->p;
    if (p0[0] == '0' && strchr("xXoObB", p0[1]) && p0[1]) {
        int base = (p0[1] == 'x' || p0[1] == 'X') ? 16 : (p0[1] == 'o' || p0[1] == 'O') ? 8 : 2;
        ps->p += 2;
        if (*ps->p == '_') ps->p++; /* 0x_ff is valid Python */
        if (scan_digits(ps, base, buf, &len, sizeof buf) <= 0) return 0;
        if (is_ident_char(*ps->p) || *ps->p == '.') return 0;
        buf[len] = 0;
        errno = 0;
        unsigned long long u = strtoull(buf, NULL, base);
        if (errno || u > (unsigned long long)9223372036854775807LL) return 0;
        out->kind = LLM4D_PV_INT;
        out->i = (long long)u;
        return 1;
    }
    int nint = scan_digits(ps, 10, buf, &len, sizeof buf);
    if (nint < 0) return 0;
    int is_float = 0, nfrac = 0;
    if (*ps->p == '.') {
        is_float = 1;
        if (len + 1 >= sizeof buf) return 0;
        buf[len++] = '.';
        ps->p++;
        nfrac = scan_digits(ps, 10, buf, &len, sizeof buf);
        if (nfrac < 0) return 0;
    }
    if (nint == 0 && nfrac == 0) return 0;
    if (*ps->p == 'e' || *ps->p == 'E') {
        const char *save = ps->p;
        size_t save_len = len;
        buf[len++] = 'e';
        ps->p++;
        if (*ps->p == '+' || *ps->p == '-') buf[len++] = *ps->p++;
        int nexp = scan_digits(ps, 10, buf, &len, sizeof buf);
        if (nexp <= 0) {
            ps->p = save;
            len = save_len;
            return 0;
        }
        is_float = 1;
    }
    if (is_ident_char(*ps->p) || *ps->p == '.') return 0; /* 1abc, 1j, 1.2.3 */
    buf[len] = 0;
    if (!is_float) {
        /* Python rejects leading zeros in a non-zero decimal integer ("0123") */
        if (buf[0] == '0') {
            for (size_t i = 0; i < len; i++)
                if (buf[i] != '0') return 0;
        }
        errno = 0;
        long long v = strtoll(buf, NULL, 10);
        if (errno) return 0;
        out->kind = LLM4D_PV_INT;
        out->i = v;
    } else {
        out->kind = LLM4D_PV_FLOAT;
        out->f = strtod(buf, NULL);
    }
    return 1;
}

/* Append one quoted string literal's content to (*s, *len); returns 1, 0 if malformed, -1 on OOM. */
static int parse_one_string(pv_parser *ps, char **s, size_t *len, size_t *cap) {
    char q = *ps->p++;
    for (;;) {
        char c = *ps->p;
        if (c == 0 || c == '\n') return 0;
        ps->p++;
        if (c == q) return 1;
        char add[2] = {c, 0};
        int nadd = 1;
        if (c == '\\') {
            char e = *ps->p;
            if (e == 0) return 0;
            ps->p++;
            switch (e) {
            case 'n': add[0] = '\n'; break;
            case 't': add[0] = '\t'; break;
            case 'r': add[0] = '\r'; break;
            case '0': add[0] = '\0'; break;
            case 'a': add[0] = '\a'; break;
            case 'b': add[0] = '\b'; break;
            case 'f': add[0] = '\f'; break;
            case 'v': add[0] = '\v'; break;
            case '\\': case '\'': case '"': add[0] = e; break;
            case '\n': nadd = 0; break;
            default: add[0] = '\\'; add[1] = e; nadd = 2; break; /* unknown escapes stay as written */
            }
        }
        if (*len + (size_t)nadd + 1 > *cap) {
            size_t ncap = *cap ? *cap * 2 : 32;
            char *ns = realloc(*s, ncap);
            if (!ns) return -1;
            *s = ns;
            *cap = ncap;
        }
        for (int k = 0; k < nadd; k++) (*s)[(*len)++] = add[k];
        (*s)[*len] = 0;
    }
}

static int parse_string(pv_parser *ps, llm4d_pv *out) {
    char *s = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        int r = parse_one_string(ps, &s, &len, &cap);
        if (r <= 0) {
            free(s);
            if (r < 0) ps->oom = 1;
            return 0;
        }
        const char *save = ps->p;
        skip_ws(ps);
        if (*ps->p != '\'' && *ps->p != '"') {
            ps->p = save;
            break;
        }
    }
    if (!s) {
        s = calloc(1, 1);
        if (!s) {
            ps->oom = 1;
            return 0;
        }
    }
    out->kind = LLM4D_PV_STR;
    out->s = s;
    return 1;
}

static int parse_item(pv_parser *ps, llm4d_pv *out, int depth);

static int push_item(pv_parser *ps, llm4d_pv *list, const llm4d_pv *item) {
    llm4d_pv *ni = realloc(list->items, (size_t)(list->n + 1) * sizeof *ni);
    if (!ni) {
        ps->oom = 1;
        return 0;
    }
    list->items = ni;
    list->items[list->n++] = *item;
    return 1;
}

/* Items separated by commas up to `close` (0: end of text, bare tuple); the first item is already parsed when
 * `first` is not NULL. */
static int parse_seq(pv_parser *ps, llm4d_pv *out, char close, int depth, const llm4d_pv *first) {
    out->kind = LLM4D_PV_LIST;
    if (first && !push_item(ps, out, first)) return 0;
    for (;;) {
        skip_ws(ps);
        if (*ps->p == close) {
            if (close) ps->p++;
            return 1;
        }
        if (first || out->n > 0) {
            if (*ps->p != ',') return 0;
            ps->p++;
            skip_ws(ps);
            if (*ps->p == close) { /* trailing comma */
                if (close) ps->p++;
                return 1;
            }
        }
        llm4d_pv item = {0};
        if (!parse_item(ps, &item, depth + 1)) {
            llm4d_pv_free(&item);
            return 0;
        }
        if (!push_item(ps, out, &item)) {
            llm4d_pv_free(&item);
            return 0;
        }
        first = out->items; /* any later item needs a comma before it */
    }
}

static int parse_item(pv_parser *ps, llm4d_pv *out, int depth) {
    if (depth > PV_MAX_DEPTH) return 0;
    skip_ws(ps);
    char c = *ps->p;
    if (c == '[') {
        ps->p++;
        return parse_seq(ps, out, ']', depth, NULL);
    }
    if (c == '(') {
        ps->p++;
        skip_ws(ps);
        if (*ps->p == ')') {
            ps->p++;
            out->kind = LLM4D_PV_LIST;
            return 1;
        }
        llm4d_pv first = {0};
        if (!parse_item(ps, &first, depth + 1)) {
            llm4d_pv_free(&first);
            return 0;
        }
        skip_ws(ps);
        if (*ps->p == ')') { /* parenthesised value, not a tuple */
            ps->p++;
            *out = first;
            return 1;
        }
        if (*ps->p != ',') {
            llm4d_pv_free(&first);
            return 0;
        }
        if (!parse_seq(ps, out, ')', depth, &first)) return 0; /* on failure `first` is owned by out or freed */
        return 1;
    }
    if (c == '{') { /* only the empty dict: "flags: {}" */
        ps->p++;
        skip_ws(ps);
        if (*ps->p != '}') return 0;
        ps->p++;
        out->kind = LLM4D_PV_MAP;
        return 1;
    }
    if (c == '\'' || c == '"') return parse_string(ps, out);
    if (c == '-' || c == '+') {
        ps->p++;
        skip_ws(ps);
        if (!parse_number(ps, out)) return 0;
        if (c == '-') {
            if (out->kind == LLM4D_PV_INT) out->i = -out->i;
            else out->f = -out->f;
        }
        return 1;
    }
    if (isdigit((unsigned char)c) || c == '.') return parse_number(ps, out);
    static const struct { const char *word; llm4d_pv_kind kind; int val; } words[] = {
        {"True", LLM4D_PV_BOOL, 1}, {"False", LLM4D_PV_BOOL, 0}, {"None", LLM4D_PV_NONE, 0}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t n = strlen(words[i].word);
        if (!strncmp(ps->p, words[i].word, n) && !is_ident_char(ps->p[n])) {
            ps->p += n;
            out->kind = words[i].kind;
            out->i = words[i].val;
            return 1;
        }
    }
    return 0;
}

int llm4d_pv_literal(const char *text, llm4d_pv *out) {
    memset(out, 0, sizeof *out);
    pv_parser ps = {text, 0};
    llm4d_pv first = {0};
    int ok = parse_item(&ps, &first, 0);
    if (ok) {
        skip_ws(&ps);
        if (*ps.p == ',') { /* a bare tuple: "949,50,1" */
            ok = parse_seq(&ps, out, 0, 0, &first);
            if (ok) {
                skip_ws(&ps);
                ok = *ps.p == 0;
            }
            if (!ok) llm4d_pv_free(out);
            return ps.oom ? -1 : ok;
        }
        ok = *ps.p == 0;
    }
    if (!ok) {
        llm4d_pv_free(&first);
        return ps.oom ? -1 : 0;
    }
    *out = first;
    return 1;
}

int llm4d_pv_from_text(const char *text, llm4d_pv *out) {
    int r = llm4d_pv_literal(text, out);
    if (r < 0) return -1;
    if (r == 0) {
        out->kind = LLM4D_PV_STR;
        out->s = strdup(text);
        if (!out->s) return -1;
    }
    return 0;
}

int llm4d_pv_from_yaml_scalar(const char *text, int plain, llm4d_pv *out) {
    memset(out, 0, sizeof *out);
    if (plain) {
        static const char *nulls[] = {"", "~", "null", "Null", "NULL"};
        static const char *trues[] = {"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"};
        static const char *falses[] = {"no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"};
        for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
            if (!strcmp(text, nulls[i])) return 0;
        for (size_t i = 0; i < sizeof trues / sizeof trues[0]; i++)
            if (!strcmp(text, trues[i])) {
                out->kind = LLM4D_PV_BOOL;
                out->i = 1;
                return 0;
            }
        for (size_t i = 0; i < sizeof falses / sizeof falses[0]; i++)
            if (!strcmp(text, falses[i])) {
                out->kind = LLM4D_PV_BOOL;
                return 0;
            }
    }
    return llm4d_pv_from_text(text, out);
}

static void repr_append(char *buf, size_t n, size_t *pos, const char *s) {
    size_t l = strlen(s);
    if (*pos + 1 >= n) return;
    if (*pos + l >= n) l = n - 1 - *pos;
    memcpy(buf + *pos, s, l);
    *pos += l;
    buf[*pos] = 0;
}

static void repr_rec(const llm4d_pv *v, char *buf, size_t n, size_t *pos) {
    char tmp[64];
    switch (v->kind) {
    case LLM4D_PV_NONE: repr_append(buf, n, pos, "None"); break;
    case LLM4D_PV_BOOL: repr_append(buf, n, pos, v->i ? "True" : "False"); break;
    case LLM4D_PV_INT:
        snprintf(tmp, sizeof tmp, "%lld", v->i);
        repr_append(buf, n, pos, tmp);
        break;
    case LLM4D_PV_FLOAT: {
        /* shortest text that reads back to the same double, like Python's repr */
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(tmp, sizeof tmp, "%.*g", prec, v->f);
            if (strtod(tmp, NULL) == v->f) break;
        }
        if (!strpbrk(tmp, ".eni")) strcat(tmp, ".0");
        repr_append(buf, n, pos, tmp);
        break;
    }
    case LLM4D_PV_STR:
        repr_append(buf, n, pos, "'");
        for (const char *s = v->s; s && *s; s++) {
            char c[3] = {*s, 0, 0};
            if (*s == '\'' || *s == '\\') c[0] = '\\', c[1] = *s;
            repr_append(buf, n, pos, c);
        }
        repr_append(buf, n, pos, "'");
        break;
    case LLM4D_PV_LIST:
        repr_append(buf, n, pos, "[");
        for (int i = 0; i < v->n; i++) {
            if (i) repr_append(buf, n, pos, ", ");
            repr_rec(&v->items[i], buf, n, pos);
        }
        repr_append(buf, n, pos, "]");
        break;
    case LLM4D_PV_MAP: repr_append(buf, n, pos, v->i ? "{...}" : "{}"); break;
    }
}

void llm4d_pv_repr(const llm4d_pv *v, char *buf, size_t n) {
    size_t pos = 0;
    if (n == 0) return;
    buf[0] = 0;
    repr_rec(v, buf, n, &pos);
}

int llm4d_pv_copy(llm4d_pv *dst, const llm4d_pv *src) {
    *dst = *src;
    dst->s = NULL;
    dst->items = NULL;
    dst->n = 0;
    if (src->s && !(dst->s = strdup(src->s))) return -1;
    if (src->n) {
        dst->items = calloc((size_t)src->n, sizeof *dst->items);
        if (!dst->items) {
            llm4d_pv_free(dst);
            return -1;
        }
        for (int i = 0; i < src->n; i++) {
            dst->n = i + 1;
            if (llm4d_pv_copy(&dst->items[i], &src->items[i])) {
                llm4d_pv_free(dst);
                return -1;
            }
        }
    }
    return 0;
}
