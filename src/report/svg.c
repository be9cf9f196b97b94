/* svg.c — lines, stacked areas and bars as inline SVG (see svg.h). */
#include "report/svg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_POINTS 1200 /* more than a chart's width in pixels: longer series are bucket-averaged */
#define ML 64           /* margins of the plot area: left (y labels), right, bottom (x labels); the top one holds the
                         * title and the legend's rows */
#define MR 16
#define MB 40

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                                      "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#393b79", "#637939"};

const char *llm4d_svg_color(int i) { return palette[i % (int)(sizeof palette / sizeof palette[0])]; }

void llm4d_svg_escape(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\n' || *s == '\t') fputc(*s, f);
        }
    }
}

void llm4d_svg_num(double v, char *buf, int n) {
    const double a = fabs(v);
    if (v == 0) snprintf(buf, (size_t)n, "0");
    else if (a >= 1e6 || a < 1e-3) snprintf(buf, (size_t)n, "%.2g", v);
    else snprintf(buf, (size_t)n, "%.4g", v);
}

/* A round tick spacing giving about `target` ticks over range. */
static double tick_step(double range, int target) {
    const double raw = range / target, mag = pow(10, floor(log10(raw))), r = raw / mag;
    return (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
}

typedef struct {
    double x0, x1, y0, y1; /* data bounds */
    int w, h;
    int mt;                /* top margin */
} frame;

static double px(const frame *fr, double x) { return ML + (x - fr->x0) / (fr->x1 - fr->x0) * (fr->w - ML - MR); }
static double py(const frame *fr, double y) {
    return fr->h - MB - (y - fr->y0) / (fr->y1 - fr->y0) * (fr->h - fr->mt - MB);
}

/* Widen degenerate bounds, round the y bounds out to ticks. */
static void settle(frame *fr, int zero) {
    if (!isfinite(fr->x0)) fr->x0 = 0, fr->x1 = 1;
    if (!isfinite(fr->y0)) fr->y0 = 0, fr->y1 = 1;
    if (zero && fr->y0 > 0) fr->y0 = 0;
    if (fr->x1 <= fr->x0) fr->x0 -= 0.5, fr->x1 += 0.5;
    if (fr->y1 <= fr->y0) {
        const double d = fabs(fr->y0) > 0 ? fabs(fr->y0) * 0.05 : 0.5;
        fr->y0 -= d, fr->y1 += d;
        if (zero && fr->y0 < 0) fr->y0 = 0;
    }
    const double st = tick_step(fr->y1 - fr->y0, 5);
    fr->y0 = floor(fr->y0 / st + 1e-9) * st;
    fr->y1 = ceil(fr->y1 / st - 1e-9) * st;
}

static void open_svg(FILE *f, const llm4d_svg_chart *c, const frame *fr) {
    fprintf(f, "<svg id=\"");
    llm4d_svg_escape(f, c->id);
    fprintf(f, "\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "role=\"img\" aria-label=\"", fr->w, fr->h, fr->w, fr->h);
    llm4d_svg_escape(f, c->title);
    fprintf(f, "\"><text class=\"title\" x=\"%d\" y=\"16\">", ML);
    llm4d_svg_escape(f, c->title);
    fprintf(f, "</text>\n");
}

/* Axes, grid, tick labels and axis names. */
static void axes(FILE *f, const llm4d_svg_chart *c, const frame *fr) {
    char b[32];
    const double ys = tick_step(fr->y1 - fr->y0, 5);
    for (double y = fr->y0; y <= fr->y1 + ys * 1e-6; y += ys) {
        llm4d_svg_num(c->percent ? y * 100 : (fabs(y) < ys * 1e-6 ? 0 : y), b, sizeof b);
        fprintf(f, "<line class=\"grid\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/><text class=\"tick\" x=\"%d\" "
                "y=\"%.1f\" text-anchor=\"end\">%s%s</text>\n", ML, fr->w - MR, py(fr, y), py(fr, y), ML - 4,
                py(fr, y) + 4, b, c->percent ? "%" : "");
    }
    const double xs = tick_step(fr->x1 - fr->x0, 6);
    for (double x = ceil(fr->x0 / xs - 1e-9) * xs; x <= fr->x1 + xs * 1e-6; x += xs) {
        llm4d_svg_num(x, b, sizeof b);
        fprintf(f, "<line class=\"grid\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/><text class=\"tick\" x=\"%.1f\" "
                "y=\"%d\" text-anchor=\"middle\">%s</text>\n", px(fr, x), px(fr, x), fr->mt, fr->h - MB, px(fr, x),
                fr->h - MB + 14, b);
    }
    fprintf(f, "<rect class=\"frame\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/>\n", ML, fr->mt, fr->w - ML - MR,
            fr->h - fr->mt - MB);
    fprintf(f, "<text class=\"axis\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">", (ML + fr->w - MR) / 2, fr->h - 6);
    llm4d_svg_escape(f, c->xlabel);
    fprintf(f, "</text><text class=\"axis\" transform=\"translate(12 %d) rotate(-90)\" text-anchor=\"middle\">",
            (fr->mt + fr->h - MB) / 2);
    llm4d_svg_escape(f, c->ylabel);
    fprintf(f, "</text>\n");
}

/* The legend's rows under the title (text widths estimated): its entries wrap at the chart's width. */
static int legend_rows(const frame *fr, const char *const *names, int k) {
    double x = ML;
    int rows = k > 0;
    for (int i = 0; i < k; i++) {
        const double wtext = names[i] ? 6.6 * (double)strlen(names[i]) + 28 : 0;
        if (x + wtext > fr->w - MR && x > ML) x = ML, rows++;
        x += wtext;
    }
    return rows;
}

/* The legend under the title: the first `squares` entries are areas or bars (a square), the rest lines. */
static void legend(FILE *f, const frame *fr, const char *const *names, const char *const *colors, int k, int squares) {
    double x = ML, y = 32;
    for (int i = 0; i < k; i++) {
        if (!names[i]) continue;
        const double wtext = 6.6 * (double)strlen(names[i]) + 28;
        if (x + wtext > fr->w - MR && x > ML) x = ML, y += 13;
        if (i < squares)
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"8\" fill=\"%s\"/>", x, y - 7, colors[i]);
        else fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2.5\"/>", x,
                     x + 12, y - 3, y - 3, colors[i]);
        fprintf(f, "<text class=\"legend\" x=\"%.1f\" y=\"%.1f\">", x + 16, y);
        llm4d_svg_escape(f, names[i]);
        fprintf(f, "</text>\n");
        x += wtext;
    }
}

/* Marks, the vertical line, and the end of the element. */
static void close_svg(FILE *f, const llm4d_svg_chart *c, const frame *fr) {
    for (int i = 0; i < c->nmarks; i++) {
        if (!isfinite(c->marks[i]) || c->marks[i] < fr->x0 || c->marks[i] > fr->x1) continue;
        char b[32];
        llm4d_svg_num(c->marks[i], b, sizeof b);
        fprintf(f, "<line class=\"mark\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"><title>%s at %s</title></line>\n",
                px(fr, c->marks[i]), px(fr, c->marks[i]), fr->h - MB - 10, fr->h - MB, c->marks_name ? c->marks_name : "",
                b);
    }
    if (isfinite(c->vline) && c->vline >= fr->x0 && c->vline <= fr->x1) {
        fprintf(f, "<line class=\"vline\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/><text class=\"vlabel\" x=\"%.1f\" "
                "y=\"%d\" text-anchor=\"end\">", px(fr, c->vline), px(fr, c->vline), fr->mt, fr->h - MB,
                px(fr, c->vline) - 3, fr->mt + 12);
        llm4d_svg_escape(f, c->vline_name);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
}

/* Points [i0, i1) of a series averaged into one (finite values only; y NaN when none). */
static void bucket(const llm4d_svg_series *s, int i0, int i1, double *x, double *y) {
    double sx = 0, sy = 0;
    int n = 0;
    for (int i = i0; i < i1; i++)
        if (isfinite(s->y[i])) sx += s->x[i], sy += s->y[i], n++;
    *x = n ? sx / n : s->x[(i0 + i1) / 2];
    *y = n ? sy / n : NAN;
}

/* The series thinned to at most MAX_POINTS (bucket means); the caller frees *x (x and y in one block). */
static int thin(const llm4d_svg_series *s, double **x, double **y) {
    const int n = s->n > MAX_POINTS ? MAX_POINTS : s->n;
    *x = malloc(2 * (size_t)(n > 0 ? n : 1) * sizeof **x);
    if (!*x) return 0;
    *y = *x + n;
    for (int b = 0; b < n; b++) {
        const int i0 = (int)((long long)b * s->n / n), i1 = (int)((long long)(b + 1) * s->n / n);
        bucket(s, i0, i1 > i0 ? i1 : i0 + 1, &(*x)[b], &(*y)[b]);
    }
    return n;
}

static void bounds(frame *fr, const double *x, const double *y, int n) {
    for (int i = 0; i < n; i++) {
        if (isfinite(x[i])) fr->x0 = fmin(fr->x0, x[i]), fr->x1 = fmax(fr->x1, x[i]);
        if (isfinite(y[i]) && isfinite(x[i])) fr->y0 = fmin(fr->y0, y[i]), fr->y1 = fmax(fr->y1, y[i]);
    }
}

static void path(FILE *f, const frame *fr, const double *x, const double *y, int n) {
    int pen = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(y[i]) || !isfinite(x[i])) {
            pen = 0;
            continue;
        }
        fprintf(f, "%c%.1f %.1f ", pen ? 'L' : 'M', px(fr, x[i]), py(fr, y[i]));
        pen = 1;
    }
}

/* A frame whose top margin holds the title and the legend of `names`; the plot keeps its height. */
static frame new_frame(const llm4d_svg_chart *c, const char *const *names, int k) {
    frame fr = {INFINITY, -INFINITY, INFINITY, -INFINITY, c->w > 0 ? c->w : 560, c->h > 0 ? c->h : 260, 0};
    const int rows = legend_rows(&fr, names, k);
    fr.mt = 26 + 13 * (rows > 0 ? rows : 1);
    fr.h += fr.mt - 39;
    return fr;
}

void llm4d_svg_lines(FILE *f, const llm4d_svg_chart *c, const llm4d_svg_series *s, int n) {
    const char **names = calloc((size_t)(n > 0 ? n : 1), sizeof *names), **colors = calloc((size_t)(n > 0 ? n : 1),
                                                                                        sizeof *colors);
    for (int i = 0; names && colors && i < n; i++) names[i] = s[i].name, colors[i] = s[i].color;
    frame fr = new_frame(c, names, names ? n : 0);
    double **xs = calloc((size_t)(n > 0 ? n : 1), sizeof *xs), **ys = calloc((size_t)(n > 0 ? n : 1), sizeof *ys);
    int *m = calloc((size_t)(n > 0 ? n : 1), sizeof *m);
    for (int i = 0; xs && ys && m && i < n; i++) {
        m[i] = thin(&s[i], &xs[i], &ys[i]);
        bounds(&fr, xs[i], ys[i], m[i]);
    }
    settle(&fr, c->zero);
    open_svg(f, c, &fr);
    axes(f, c, &fr);
    for (int i = 0; xs && ys && m && i < n; i++) {
        if (s[i].style == LLM4D_SVG_DOTS) {
            for (int j = 0; j < m[i]; j++) {
                if (!isfinite(ys[i][j])) continue;
                char bx[32], by[32];
                llm4d_svg_num(xs[i][j], bx, sizeof bx);
                llm4d_svg_num(ys[i][j], by, sizeof by);
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>", px(&fr, xs[i][j]),
                        py(&fr, ys[i][j]), s[i].color);
                llm4d_svg_escape(f, s[i].name);
                fprintf(f, ": %s at %s</title></circle>\n", by, bx);
            }
            continue;
        }
        fprintf(f, "<path class=\"line%s\" stroke=\"%s\" d=\"", s[i].style == LLM4D_SVG_DASHED ? " dashed" : "",
                s[i].color);
        path(f, &fr, xs[i], ys[i], m[i]);
        fprintf(f, "\"/>\n");
    }
    if (names && colors) legend(f, &fr, names, colors, n, 0);
    close_svg(f, c, &fr);
    for (int i = 0; xs && i < n; i++) free(xs[i]);
    free(xs), free(ys), free(m), free(names), free(colors);
}

void llm4d_svg_stack(FILE *f, const llm4d_svg_chart *c, const double *x, int n, const double *const *y,
                     const llm4d_svg_kinds *kinds, const llm4d_svg_series *over, int nover) {
    const char *const *names = kinds->names, *const *colors = kinds->colors;
    const int k = kinds->k;
    const char *ln[24], *lc[24]; /* the areas' legend, then the overlaid lines' */
    int nl = 0;
    for (int j = 0; j < k && nl < 24; j++) ln[nl] = names[j], lc[nl++] = colors[j];
    for (int i = 0; i < nover && nl < 24; i++) ln[nl] = over[i].name, lc[nl++] = over[i].color;
    frame fr = new_frame(c, ln, nl);
    const int m = n > MAX_POINTS ? MAX_POINTS : n;
    double *bx = calloc((size_t)(m > 0 ? m : 1) * (size_t)(k + 2), sizeof *bx); /* x, then k + 1 cumulative rows */
    if (!bx) return;
    double *cum = bx + m;
    for (int b = 0; b < m; b++) { /* bucket means of each component, cumulated bottom up */
        const int i0 = (int)((long long)b * n / m), i1 = (int)((long long)(b + 1) * n / m);
        double sx = 0;
        for (int i = i0; i < i1; i++) sx += x[i];
        bx[b] = sx / (i1 - i0);
        cum[b] = 0;
        for (int j = 0; j < k; j++) {
            double sy = 0;
            for (int i = i0; i < i1; i++) sy += isfinite(y[j][i]) && y[j][i] > 0 ? y[j][i] : 0;
            cum[(size_t)(j + 1) * m + b] = cum[(size_t)j * m + b] + sy / (i1 - i0);
        }
    }
    bounds(&fr, bx, cum + (size_t)k * m, m);
    fr.y0 = 0;
    for (int i = 0; i < nover; i++) bounds(&fr, over[i].x, over[i].y, over[i].n);
    settle(&fr, 1);
    open_svg(f, c, &fr);
    axes(f, c, &fr);
    for (int j = 0; j < k && m > 0; j++) {
        fprintf(f, "<path class=\"area\" fill=\"%s\" d=\"", colors[j]);
        path(f, &fr, bx, cum + (size_t)(j + 1) * m, m); /* the top edge left to right, the bottom edge back */
        for (int b = m - 1; b >= 0; b--) fprintf(f, "L%.1f %.1f ", px(&fr, bx[b]), py(&fr, cum[(size_t)j * m + b]));
        fprintf(f, "Z\"><title>");
        llm4d_svg_escape(f, names[j]);
        fprintf(f, "</title></path>\n");
    }
    for (int i = 0; i < nover; i++) {
        fprintf(f, "<path class=\"line dashed\" stroke=\"%s\" d=\"", over[i].color);
        path(f, &fr, over[i].x, over[i].y, over[i].n);
        fprintf(f, "\"/>\n");
    }
    legend(f, &fr, ln, lc, nl, k);
    close_svg(f, c, &fr);
    free(bx);
}

void llm4d_svg_bars(FILE *f, const char *id, const char *title, const char *unit, const llm4d_svg_bar *rows,
                    int nrows, const llm4d_svg_kinds *kinds) {
    const char *const *names = kinds->names, *const *colors = kinds->colors;
    const int k = kinds->k;
    const int w = 760, lw = 170, rw = 130, bh = 16, gap = 8;
    frame fr = {0, 1, 0, 1, w - lw + ML, 0, 0};
    const int top = 30 + 13 * legend_rows(&fr, names, k);
    const int h = top + nrows * (bh + gap) + 10;
    double max = 0;
    for (int r = 0; r < nrows; r++) {
        double s = 0;
        for (int j = 0; j < k; j++) s += isfinite(rows[r].v[j]) && rows[r].v[j] > 0 ? rows[r].v[j] : 0;
        max = fmax(max, s);
    }
    if (!(max > 0)) max = 1;
    fprintf(f, "<svg id=\"");
    llm4d_svg_escape(f, id);
    fprintf(f, "\" class=\"chart bars\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 "
            "%d %d\" role=\"img\" aria-label=\"", w, h, w, h);
    llm4d_svg_escape(f, title);
    fprintf(f, "\"><text class=\"title\" x=\"%d\" y=\"16\">", lw);
    llm4d_svg_escape(f, title);
    fprintf(f, "</text>\n");
    fprintf(f, "<g transform=\"translate(%d 0)\">", lw - ML);
    legend(f, &fr, names, colors, k, k);
    fprintf(f, "</g>\n");
    for (int r = 0; r < nrows; r++) {
        const int y = top + r * (bh + gap);
        fprintf(f, "<text class=\"tick\" x=\"%d\" y=\"%d\" text-anchor=\"end\">", lw - 6, y + bh - 4);
        llm4d_svg_escape(f, rows[r].label);
        fprintf(f, "</text>");
        double x = lw, sum = 0;
        for (int j = 0; j < k; j++) {
            const double v = rows[r].v[j];
            if (!isfinite(v) || v <= 0) continue;
            const double wd = v / max * (w - lw - rw);
            char b[32];
            llm4d_svg_num(v, b, sizeof b);
            fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"><title>", x, y, wd, bh,
                    colors[j]);
            llm4d_svg_escape(f, names[j]);
            fprintf(f, ": %s %s</title></rect>", b, unit);
            x += wd;
            sum += v;
        }
        char b[48];
        llm4d_svg_num(sum, b, sizeof b);
        fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%d\">", x + 5, y + bh - 4);
        if (rows[r].note) llm4d_svg_escape(f, rows[r].note);
        else fprintf(f, "%s %s", b, unit);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
}
