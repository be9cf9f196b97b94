/* proc.c — reading the kernel's numbers (see proc.h). */
#include "core/proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

long long llm4d_proc_start_ticks(int pid) {
    char path[64], buf[1024];
    if (pid > 0) snprintf(path, sizeof path, "/proc/%d/stat", pid);
    else snprintf(path, sizeof path, "/proc/self/stat");
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* the command name (field 2) is in parentheses and may hold spaces or ')': the fields after the last ')' are
     * 3, 4, ...; the start time is the 20th of them */
    const char *p = strrchr(buf, ')');
    if (!p) return -1;
    for (int field = 3; field <= 22; field++) { /* p: the space before field `field` */
        p = strchr(p + 1, ' ');
        if (!p) return -1;
    }
    return atoll(p + 1);
}

int llm4d_proc_pid_ns(char *buf, size_t n) {
    if (n == 0) return -1;
    const ssize_t k = readlink("/proc/self/ns/pid", buf, n - 1);
    if (k <= 0) return -1;
    buf[k] = 0;
    return 0;
}
