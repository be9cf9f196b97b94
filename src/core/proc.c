/* proc.c — reading the kernel's numbers (see proc.h). */
#include "core/proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long long llm4d_proc_kb(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    long long v = -1;
    const size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') {
            v = atoll(line + n + 1) * 1024;
            break;
        }
    fclose(f);
    return v;
}

long long llm4d_cgroup_value(const char *name) {
    char path[128];
    snprintf(path, sizeof path, "/sys/fs/cgroup/%s", name);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char buf[64] = "";
    const int ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    return ok && buf[0] >= '0' && buf[0] <= '9' ? atoll(buf) : -1;
}
