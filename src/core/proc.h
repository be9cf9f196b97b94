/* proc.h — numbers the kernel publishes as text: a "Key: N kB" line of a /proc file, and a cgroup v2 file holding
 * one number. The host's memory (the CPU backends' mem_info) and a process's resident size (the memory plan) are
 * read with these. */
#ifndef LLM4D_CORE_PROC_H
#define LLM4D_CORE_PROC_H

/* The value of key's "Key: N kB" line of path, in bytes; -1 when absent. */
long long llm4d_proc_kb(const char *path, const char *key);
/* /sys/fs/cgroup/<name> as a number; -1 when absent or "max". */
long long llm4d_cgroup_value(const char *name);

#endif
