/* fuzz_flags.c — libFuzzer harness: `llm4d train`'s command line (the seeds' flags, --flag=value, -o overrides),
 * one argument per line of the input, through the configuration parser and finalize (config_check.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_fresh_dir();
    char *text = strndup((const char *)data, size);
    if (!text) return 0;
    char *argv[64];
    int argc = 0;
    for (char *line = text, *next; line && argc < 64; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        argv[argc++] = line;
        if (!next) break;
    }
    config_check(argc, argv);
    free(text);
    return 0;
}
