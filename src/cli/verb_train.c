/* verb_train.c — `llm4d train`: parse and validate the configuration, build the trainer, run it. User errors are
 * printed here, once, as one line, and give exit code 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "config/config.h"
#include "train/trainer.h"

static int report(const llm4d_err *err) {
    fprintf(stderr, "llm4d train: error: %s\n", err->msg);
    return err->code == LLM4D_EUSER || err->code == LLM4D_EIO ? 2 : 1;
}

int llm4d_cmd_train(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            llm4d_config_print_help(stdout);
            return 0;
        }
    /* --debug_dump DIR is a test facility (tests/test_torch_parity.sh), taken out before config parsing. */
    const char *debug_dump = NULL;
    char *args[argc + 1];
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--debug_dump") && i + 1 < argc) {
            debug_dump = argv[++i];
            continue;
        }
        args[n++] = argv[i];
    }
    args[n] = NULL;
    llm4d_config *cfg = calloc(1, sizeof *cfg);
    llm4d_err err = {0};
    if (!cfg) return fprintf(stderr, "llm4d train: out of memory\n"), 1;
    llm4d_config_defaults(cfg);
    int rc = 0;
    if (llm4d_config_parse_args(cfg, n - 1, args + 1, &err) != LLM4D_OK ||
        llm4d_config_finalize(cfg, 1, &err) != LLM4D_OK) {
        rc = report(&err);
    } else {
        llm4d_trainer tr;
        if (llm4d_trainer_init(&tr, cfg, debug_dump, &err) != LLM4D_OK || llm4d_trainer_run(&tr, &err) != LLM4D_OK)
            rc = report(&err);
        llm4d_trainer_free(&tr);
    }
    free(cfg);
    return rc;
}
