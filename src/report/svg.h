/* svg.h — the charts of a report, written as inline SVG straight into the page.
 *
 * The report must open offline, anywhere, years later: no script, no library fetched, no font. So charts are drawn
 * here, as SVG elements with their numbers in them (axes with round ticks, a legend, native hover titles on
 * points), styled by the page's CSS classes. Three kinds are enough for a training run: lines over a common x
 * (curves, overlaid runs), stacked areas (a step's time by kind of work), and horizontal stacked bars (memory per
 * rank, shares of a step). A series longer than a chart has pixels for is averaged over buckets of consecutive
 * points first (a 500k-step run stays a few hundred kB); NaN is a gap in a line. Every chart is an <svg> with an
 * id, which is what the tests look for. */
#ifndef LLM4D_REPORT_SVG_H
#define LLM4D_REPORT_SVG_H

#include <stdio.h>

typedef enum { LLM4D_SVG_LINE = 0, LLM4D_SVG_DASHED, LLM4D_SVG_DOTS } llm4d_svg_style;

typedef struct {
    const char *name;     /* in the legend */
    const char *color;    /* a CSS colour */
    const double *x, *y;  /* n points, x ascending; y NaN: no value */
    int n;
    llm4d_svg_style style;
} llm4d_svg_series;

typedef struct {
    const char *id;       /* the <svg>'s id */
    const char *title, *xlabel, *ylabel;
    int w, h;             /* pixels; 0: 560 x 260 */
    int percent;          /* y values are fractions, labelled in % */
    int zero;             /* the y axis starts at 0 (quantities, not losses) */
    const double *marks;  /* x positions marked by red ticks at the bottom (skipped steps) */
    int nmarks;
    const char *marks_name;
    double vline;         /* a vertical line at this x (the last good step of a failed run); NaN: none */
    const char *vline_name;
} llm4d_svg_chart;

/* Lines (or dots) of n series over a shared x axis. */
void llm4d_svg_lines(FILE *f, const llm4d_svg_chart *c, const llm4d_svg_series *s, int n);

/* The k kinds a stacked chart is cut into (areas, or a bar's segments), bottom (left) first: their names in the
 * legend and their CSS colours. */
typedef struct {
    const char *const *names;
    const char *const *colors;
    int k;
} llm4d_svg_kinds;

/* The kinds' areas stacked over x (y[j][i] >= 0 for kind j, NaN as 0), then `over` drawn on top as lines. */
void llm4d_svg_stack(FILE *f, const llm4d_svg_chart *c, const double *x, int n, const double *const *y,
                     const llm4d_svg_kinds *kinds, const llm4d_svg_series *over, int nover);

/* One bar of a segment per kind. */
typedef struct {
    const char *label;    /* left of the bar */
    const double *v;      /* k values (NaN or <= 0: no segment) */
    const char *note;     /* right of the bar (a total); NULL: the sum with unit */
} llm4d_svg_bar;

/* Horizontal stacked bars on a common scale, one per row, with a legend of the kinds. */
void llm4d_svg_bars(FILE *f, const char *id, const char *title, const char *unit, const llm4d_svg_bar *rows,
                    int nrows, const llm4d_svg_kinds *kinds);

/* Text for an XML/HTML element or attribute: & < > " ' escaped, control characters dropped. */
void llm4d_svg_escape(FILE *f, const char *s);

/* A readable tick label or value: 0.001, 6e-05, 1.2e+06, 37.5 (4 significant digits at most). */
void llm4d_svg_num(double v, char *buf, int n);

/* The palette, by index (wraps around). */
const char *llm4d_svg_color(int i);

#endif
