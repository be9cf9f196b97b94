/* store_impl.h — what the checkpoint store's files share (store_save.c, store_load.c, store_range.c): limits,
 * the slice record's key, name checks, and the two saver calls a flat-range save goes through. Private to
 * src/ckpt/store_*.c; the interface is store.h. */
#ifndef LLM4D_CKPT_STORE_IMPL_H
#define LLM4D_CKPT_STORE_IMPL_H

#include "ckpt/store.h"

#include <ctype.h>
#include <stdint.h>
#include <string.h>

#define SLICES_KEY "llm4d.slices"
#define PATH_MAX_CK 1024 /* longest output_dir / checkpoint path accepted */
#define PBUF 4096       /* buffers for paths composed from those (never truncated) */

/* A plain file name: letters, digits, '.', '_', '-'; not starting with '.'. */
static inline int plain_name(const char *s) {
    if (!s[0] || s[0] == '.' || strlen(s) >= LLM4D_CKPT_FILE_MAX) return 0;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-') return 0;
    return 1;
}

static inline int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* "step_<digits>" -> N, else -1. */
static inline int64_t step_of(const char *name) {
    if (strncmp(name, "step_", 5) != 0 || !name[5]) return -1;
    int64_t n = 0;
    for (const char *p = name + 5; *p; p++) {
        if (!isdigit((unsigned char)*p) || n > (INT64_MAX - 9) / 10) return -1;
        n = n * 10 + (*p - '0');
    }
    return n;
}

/* store_save.c: -1 when the tensor is to be added, else the code to return (a failed save adds nothing more) */
int llm4d_ck_skip_add(const llm4d_ckpt_saver *s, llm4d_err *err);
/* store_save.c: remember the first failure of this rank (for the collective commit) and return rc */
llm4d_code llm4d_ck_keep_failure(llm4d_ckpt_saver *s, llm4d_code rc, const llm4d_err *err);

#endif
