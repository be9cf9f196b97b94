/* timer.h — monotonic wall-clock seconds, for step timing and the log line's costs. */
#ifndef LLM4D_CORE_TIMER_H
#define LLM4D_CORE_TIMER_H

#include <time.h>

static inline double llm4d_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
