/* png_stats.c — what a PNG screenshot shows, in numbers, for tests/test_report.sh (which builds it with
 * `cc png_stats.c -lz`; not a test itself): its size, how many distinct colours it has, the share of pixels that
 * are not white, and how many pixels are within a small distance of each colour given as #rrggbb. A blank or
 * half-rendered page has few colours and few non-white pixels; a page of charts has many of both, and the colours
 * of its series. Reads 8-bit RGB or RGBA, not interlaced (what Chromium writes); anything else is an error.
 *   png_stats FILE [#rrggbb ...]  ->  "width W height H colours C nonwhite_permille P [#rrggbb N ...]" */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static uint32_t be32(const unsigned char *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | p[2] << 8 | p[3]; }

static int paeth(int a, int b, int c) {
    const int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: png_stats FILE [#rrggbb ...]\n"), 2;
    FILE *f = fopen(argv[1], "rb");
    if (!f) return fprintf(stderr, "png_stats: cannot read %s\n", argv[1]), 2;
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *d = malloc((size_t)size), *z = malloc((size_t)size);
    if (!d || !z || fread(d, 1, (size_t)size, f) != (size_t)size || size < 8 || memcmp(d, "\x89PNG\r\n\x1a\n", 8))
        return fprintf(stderr, "png_stats: %s is not a PNG file\n", argv[1]), 2;
    fclose(f);
    uint32_t w = 0, h = 0;
    int ch = 0;
    size_t zn = 0;
    for (long pos = 8; pos + 12 <= size;) { /* chunks: the header, then the compressed data in IDATs */
        const uint32_t n = be32(d + pos);
        if (pos + 12 + (long)n > size) break;
        if (!memcmp(d + pos + 4, "IHDR", 4)) {
            w = be32(d + pos + 8), h = be32(d + pos + 12);
            const int depth = d[pos + 16], type = d[pos + 17], interlace = d[pos + 20];
            if (depth != 8 || (type != 2 && type != 6) || interlace)
                return fprintf(stderr, "png_stats: %s: depth %d, colour type %d, interlace %d not read here\n", argv[1],
                               depth, type, interlace), 2;
            ch = type == 2 ? 3 : 4;
        } else if (!memcmp(d + pos + 4, "IDAT", 4)) {
            memcpy(z + zn, d + pos + 8, n);
            zn += n;
        }
        pos += 12 + (long)n;
    }
    const size_t stride = (size_t)w * ch, rawn = (stride + 1) * h;
    unsigned char *raw = malloc(rawn ? rawn : 1);
    uLongf got = (uLongf)rawn;
    if (!ch || !raw || uncompress(raw, &got, z, (uLong)zn) != Z_OK || got != rawn)
        return fprintf(stderr, "png_stats: %s: bad or truncated image data\n", argv[1]), 2;
    unsigned char *bits = calloc(1 << 21, 1); /* one bit per 24-bit colour */
    const int nc = argc - 2;
    long *near = calloc((size_t)(nc > 0 ? nc : 1), sizeof *near), colours = 0, nonwhite = 0;
    int (*want)[3] = calloc((size_t)(nc > 0 ? nc : 1), sizeof *want);
    for (int i = 0; i < nc; i++) {
        unsigned v = 0;
        if (sscanf(argv[2 + i], "#%6x", &v) != 1)
            return fprintf(stderr, "png_stats: colour %s is not #rrggbb\n", argv[2 + i]), 2;
        want[i][0] = (int)(v >> 16), want[i][1] = (int)(v >> 8 & 255), want[i][2] = (int)(v & 255);
    }
    unsigned char *prev = calloc(stride, 1);
    for (uint32_t y = 0; y < h; y++) {
        unsigned char *line = raw + y * (stride + 1) + 1;
        const int filter = line[-1];
        for (size_t i = 0; i < stride; i++) { /* undo the row's filter (PNG specification, section 9) */
            const int a = i >= (size_t)ch ? line[i - ch] : 0, b = prev[i], c = i >= (size_t)ch ? prev[i - ch] : 0;
            const int p = filter == 1   ? a
                          : filter == 2 ? b
                          : filter == 3 ? (a + b) / 2
                          : filter == 4 ? paeth(a, b, c)
                                        : 0;
            line[i] = (unsigned char)(line[i] + p);
        }
        for (uint32_t x = 0; x < w; x++) {
            const unsigned char *px = line + (size_t)x * ch;
            const uint32_t rgb = (uint32_t)px[0] << 16 | (uint32_t)px[1] << 8 | px[2];
            if (!(bits[rgb >> 3] & (1 << (rgb & 7)))) bits[rgb >> 3] |= (unsigned char)(1 << (rgb & 7)), colours++;
            nonwhite += px[0] < 245 || px[1] < 245 || px[2] < 245;
            for (int i = 0; i < nc; i++)
                near[i] += abs(px[0] - want[i][0]) + abs(px[1] - want[i][1]) + abs(px[2] - want[i][2]) <= 24;
        }
        memcpy(prev, line, stride);
    }
    printf("width %u height %u colours %ld nonwhite_permille %ld", w, h, colours,
           w && h ? nonwhite * 1000 / ((long)w * h) : 0);
    for (int i = 0; i < nc; i++) printf(" %s %ld", argv[2 + i], near[i]);
    printf("\n");
    return 0;
}
