/* devname.h — the device names a run may give (`--device`, Global.device), stated once for the three places that
 * read one: the configuration's check (config/config.c, below the backends: the fuzzers build it alone), the
 * backend's choice of a table (backend/backend.c) and the generate verb's early check. */
#ifndef LLM4D_CORE_DEVNAME_H
#define LLM4D_CORE_DEVNAME_H

#include <string.h>

/* The names, as a message lists them. */
#define LLM4D_DEVICE_NAMES "cpu, guard and cuda (gpu)"

/* 1 when d names a device llm4d knows (whether this build has it is the backend's question). */
static inline int llm4d_device_name_known(const char *d) {
    return !strcmp(d, "cpu") || !strcmp(d, "guard") || !strcmp(d, "cuda") || !strcmp(d, "gpu");
}

#endif
