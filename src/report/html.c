/* html.c — the page's head, style and escaped text (see html.h). */
#include "report/html.h"

#include <stdarg.h>

#include "report/svg.h"

static const char style[] =
    "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;margin:0 auto;"
    "max-width:1220px;padding:12px 20px 40px;color:#222;background:#fff}"
    "h1{font-size:22px;margin:8px 0}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #ddd;"
    "padding-bottom:3px}h3{font-size:14px;margin:14px 0 6px}"
    "p,li,td,th{font-size:13px;line-height:1.45}"
    "nav a{margin-right:12px;font-size:13px;color:#1f5fa8}"
    ".state{padding:8px 12px;border-radius:4px;font-size:14px;margin:8px 0;word-wrap:break-word}"
    ".finished{background:#e6f4ea;border:1px solid #8bc79c}.running{background:#fff6dd;border:1px solid #e6c35c}"
    ".failed{background:#fde8e8;border:1px solid #e08585}.stopped{background:#eef1f6;border:1px solid #9aa8c0}"
    ".charts{display:flex;flex-wrap:wrap;gap:10px 18px}"
    "svg.chart{background:#fff;overflow:visible}"
    "svg text{font-family:inherit}"
    ".title{font-size:13px;font-weight:600;fill:#222}.tick{font-size:10px;fill:#555}"
    ".axis{font-size:11px;fill:#333}.legend{font-size:11px;fill:#333}"
    ".grid{stroke:#ececec;stroke-width:1}.frame{fill:none;stroke:#aaa;stroke-width:1}"
    ".line{fill:none;stroke-width:1.6;stroke-linejoin:round}.dashed{stroke-dasharray:5 3}"
    ".area{stroke:none;opacity:.92}.mark{stroke:#d62728;stroke-width:2}"
    ".vline{stroke:#d62728;stroke-width:1.5;stroke-dasharray:4 3}.vlabel{font-size:11px;fill:#d62728}"
    ".box{stroke:#fff;stroke-width:.5}.boxlabel{font-size:9px;fill:#fff;pointer-events:none}"
    "table{border-collapse:collapse;margin:4px 0 10px}td,th{border:1px solid #e2e2e2;padding:3px 8px;"
    "text-align:left;vertical-align:top}th{background:#f5f5f5}td.num{text-align:right;font-variant-numeric:"
    "tabular-nums}tr.set td:first-child{font-weight:600}"
    ".note{color:#555;font-size:12px}code,.mono{font-family:'DejaVu Sans Mono',Menlo,Consolas,monospace;"
    "font-size:12px}"
    "details summary{cursor:pointer;font-size:13px;margin:6px 0}"
    ".cols{display:flex;flex-wrap:wrap;gap:0 28px}";

void llm4d_html_begin(FILE *f, const char *title) {
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
               "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n"
               "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>");
    llm4d_svg_escape(f, title);
    fprintf(f, "</title>\n<style>%s</style>\n</head>\n<body>\n", style);
}

void llm4d_html_end(FILE *f) { fprintf(f, "</body>\n</html>\n"); }

static void vtext(FILE *f, const char *fmt, va_list ap) {
    char buf[4096];
    vsnprintf(buf, sizeof buf, fmt, ap);
    llm4d_svg_escape(f, buf);
}

void llm4d_html_row(FILE *f, const char *key, const char *fmt, ...) {
    fprintf(f, "<tr><td>");
    llm4d_svg_escape(f, key);
    fprintf(f, "</td><td>");
    va_list ap;
    va_start(ap, fmt);
    vtext(f, fmt, ap);
    va_end(ap);
    fprintf(f, "</td></tr>\n");
}
