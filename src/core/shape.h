/* shape.h — a tensor shape as text ("[50304, 768]") for messages: the checkpoint readers, the writers and the
 * exporter name shapes the same way. */
#ifndef LLM4D_CORE_SHAPE_H
#define LLM4D_CORE_SHAPE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

static inline void llm4d_fmt_shape(char *buf, size_t n, int ndim, const int64_t *s) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)s[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

#endif
