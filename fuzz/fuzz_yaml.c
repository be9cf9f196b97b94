/* fuzz_yaml.c — libFuzzer harness: a PaddleFleetX YAML config with `_base_` inheritance and -o overrides. Parts:
 * main.yaml, base1.yaml, base2.yaml (written beside it, so `_base_: ./base1.yaml` chains resolve), then the
 * overrides, one `Section.key=value` per line. The harness runs `train -c main.yaml -o LINE ...` through the
 * configuration parser and finalize (config_check.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_part parts[4];
    int n = fz_split(data, size, parts, 4);
    fz_fresh_dir();
    static const char *const names[] = {"cfg/main.yaml", "cfg/base1.yaml", "cfg/base2.yaml"};
    char main_path[1024], path[1024];
    for (int i = 0; i < n && i < 3; i++) fz_write(names[i], parts[i].p, parts[i].n, i ? path : main_path, sizeof path);
    char *argv[2 + 2 * 32];
    int argc = 0;
    argv[argc++] = "-c";
    argv[argc++] = main_path;
    char *over = n > 3 ? strndup((const char *)parts[3].p, parts[3].n) : NULL;
    for (char *line = over, *next; line && argc + 2 <= (int)(sizeof argv / sizeof argv[0]); line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        argv[argc++] = "-o";
        argv[argc++] = line;
        if (!next) break;
    }
    config_check(argc, argv);
    free(over);
    return 0;
}
