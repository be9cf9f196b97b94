/* log.h — the trainer's log lines, in the format of PaddleNLP's logger so existing log parsers keep working:
 * `[2022-07-27 08:53:11,036] [    INFO] - message`. The sink is passed explicitly (no global logger). */
#ifndef LLM4D_CORE_LOG_H
#define LLM4D_CORE_LOG_H

#include <stdio.h>

typedef struct {
    FILE *out;   /* usually stdout */
    int enabled; /* 0 silences this rank (for example non-zero ranks when echoing only rank 0) */
} llm4d_log;

void llm4d_log_info(const llm4d_log *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void llm4d_log_warn(const llm4d_log *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
