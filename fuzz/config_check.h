/* config_check.h — what fuzz_yaml.c and fuzz_flags.c do with a parsed configuration: finalize it for several world
 * sizes, as `llm4d train` does for its job (each from a fresh copy, since finalize derives values in place).
 * Property: parse and finalize either succeed or fail with a user error (one message); nothing else. */
#ifndef LLM4D_FUZZ_CONFIG_CHECK_H
#define LLM4D_FUZZ_CONFIG_CHECK_H

#include <string.h>

#include "config/config.h"
#include "util.h"

/* Parse argv into a fresh configuration and finalize it for worlds of 1, 2 and 8 processes. */
static void config_check(int argc, char **argv) {
    static llm4d_config cfg, copy; /* ~60 KB each: off the stack; reset for every input */
    llm4d_err err = {0};
    llm4d_config_defaults(&cfg);
    llm4d_code rc = llm4d_config_parse_args(&cfg, argc, argv, &err);
    if (rc != LLM4D_OK) {
        fz_refused("parse_args", rc, &err);
        return;
    }
    static const int worlds[] = {1, 2, 8};
    for (int i = 0; i < 3; i++) {
        copy = cfg;
        rc = llm4d_config_finalize(&copy, worlds[i], &err);
        if (rc != LLM4D_OK) fz_refused("finalize", rc, &err);
    }
}

#endif
