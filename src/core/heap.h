/* heap.h — the process's malloc policy, fixed once at start-up (see heap.c for why and for the values). */
#ifndef LLM4D_CORE_HEAP_H
#define LLM4D_CORE_HEAP_H

/* Fix glibc's mmap and trim thresholds (no-op elsewhere, or when the user set either through the environment).
 * Returns 1 when the thresholds were set by this call. */
int llm4d_heap_fix(void);
/* The process's resident bytes once the heap's free pages are given back (malloc_trim): what it holds live, as a
 * base the memory plan adds to (-1 when /proc cannot be read). */
long long llm4d_heap_resident(void);

#endif
