/* log.c — PaddleNLP-style timestamped log lines (see log.h). */
#include "core/log.h"

#include <stdarg.h>
#include <sys/time.h>
#include <time.h>

static void log_line(const llm4d_log *log, const char *level, const char *fmt, va_list ap) {
    if (!log || !log->enabled || !log->out) return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    fprintf(log->out, "[%s,%03d] [%8s] - ", when, (int)(tv.tv_usec / 1000), level);
    vfprintf(log->out, fmt, ap);
    fputc('\n', log->out);
    fflush(log->out);
}

void llm4d_log_info(const llm4d_log *log, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_line(log, "INFO", fmt, ap);
    va_end(ap);
}

void llm4d_log_warn(const llm4d_log *log, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_line(log, "WARNING", fmt, ap);
    va_end(ap);
}
