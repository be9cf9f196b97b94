/* html.h — the page around the charts: one self-contained HTML file.
 *
 * Self-contained means the page can only show what is in it: the CSS is inline, the charts are inline SVG
 * (svg.h), there is no script and no web font, and a Content-Security-Policy forbids loading anything at all, so a
 * report mailed or archived reads the same offline, and a browser opening it makes no request. */
#ifndef LLM4D_REPORT_HTML_H
#define LLM4D_REPORT_HTML_H

#include <stdio.h>

/* The head (title, policy, style) and the opening of the body. */
void llm4d_html_begin(FILE *f, const char *title);
void llm4d_html_end(FILE *f);

/* A table row of a key and an escaped value (printf-style). */
void llm4d_html_row(FILE *f, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
