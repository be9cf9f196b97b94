/* proc.h — numbers the kernel publishes as text: a "Key: N kB" line of a /proc file, a cgroup v2 file holding one
 * number, and what identifies a process. The host's memory (the CPU backends' mem_info) and a process's resident
 * size (the memory plan) are read with these, and whether the process that wrote a run's run.json still runs
 * (`llm4d report`: a pid alone may have been reused, a pid with its start time not). */
#ifndef LLM4D_CORE_PROC_H
#define LLM4D_CORE_PROC_H

#include <stddef.h>

/* The value of key's "Key: N kB" line of path, in bytes; -1 when absent. */
long long llm4d_proc_kb(const char *path, const char *key);
/* /sys/fs/cgroup/<name> as a number; -1 when absent or "max". */
long long llm4d_cgroup_value(const char *name);
/* When process pid (0: this one) started, in clock ticks after boot (/proc/PID/stat's 22nd field); -1 when there is
 * no such process. */
long long llm4d_proc_start_ticks(int pid);
/* This process's PID namespace as the kernel names it ("pid:[4026531836]"), into buf; 0 on success, -1 if unknown:
 * a pid means the same process only to readers in the same namespace. */
int llm4d_proc_pid_ns(char *buf, size_t n);

#endif
