/* verb_report.c — `llm4d report RUN_DIR [-o report.html] [--compare RUN_DIR2 ...] [--log_dir DIR] [--trace DIR]
 * [--merge_trace FILE]`: one self-contained HTML page about a training run (report/report.h), readable offline,
 * for a run that finished, is still going or failed. It reads only files, so it runs anywhere the directories
 * are visible, while the run goes on. Bad input is one line on stderr naming the problem and the fix, exit 2. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "comm/runtime.h"
#include "report/report.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: llm4d report RUN_DIR [-o report.html] [--compare RUN_DIR2 ...] [--log_dir DIR] [--trace DIR]\n"
            "                    [--merge_trace FILE]\n"
            "\n"
            "Writes one HTML page (inline SVG and CSS, nothing fetched: it reads offline) about the training run\n"
            "whose output_dir is RUN_DIR: its state (finished, in progress, or failed with the last good step and the\n"
            "error line), loss against steps and tokens, learning rate, gradient norm, loss scale and skipped steps,\n"
            "tokens/s and MFU, the step's time by kind of work, the schedule of a traced step, the memory plan against\n"
            "the measured peak per rank, the layout, the configuration, the machine and the version.\n"
            "\n"
            "  -o, --out FILE       the page (default RUN_DIR/report.html)\n"
            "  --compare DIR ...    overlay these runs' curves (up to %d), with their loss differences\n"
            "  --log_dir DIR        the run's worker logs (default: the launcher's log directory run.json names)\n"
            "  --trace DIR          the run's trace files (default: its --trace directory)\n"
            "  --merge_trace FILE   also write every rank's trace into FILE, for chrome://tracing or Perfetto\n",
            LLM4D_RP_MAX_RUNS - 1);
}

static int fail(const char *msg) {
    fprintf(stderr, "llm4d report: %s\n", msg);
    return 2;
}

int llm4d_cmd_report(int argc, char **argv) {
    llm4d_report_opts o = {0};
    int in_compare = 0;
    char msg[512];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        const char **value = !strcmp(a, "-o") || !strcmp(a, "--out") ? &o.out
                             : !strcmp(a, "--log_dir")               ? &o.log_dir
                             : !strcmp(a, "--trace")                 ? &o.trace_dir
                             : !strcmp(a, "--merge_trace")           ? &o.merge_trace
                                                                     : NULL;
        if (value || !strcmp(a, "--compare")) {
            if (i + 1 >= argc || argv[i + 1][0] == '-') {
                snprintf(msg, sizeof msg, "%s needs a value; run `llm4d report --help`", a);
                return fail(msg);
            }
            in_compare = !value;
            if (value) {
                *value = argv[++i];
                continue;
            }
            a = argv[++i];
        } else if (a[0] == '-') {
            snprintf(msg, sizeof msg, "unknown option '%.100s'; run `llm4d report --help` for the options", a);
            return fail(msg);
        }
        if (in_compare || (o.run_dir && o.n_compare)) {
            if (o.n_compare == LLM4D_RP_MAX_RUNS - 1) {
                snprintf(msg, sizeof msg, "--compare takes at most %d runs", LLM4D_RP_MAX_RUNS - 1);
                return fail(msg);
            }
            o.compare[o.n_compare++] = a;
        } else if (!o.run_dir) {
            o.run_dir = a;
        } else {
            snprintf(msg, sizeof msg, "one run directory, then --compare DIR for others ('%.100s' is a second one)", a);
            return fail(msg);
        }
    }
    if (!o.run_dir)
        return fail("give the run's output_dir: llm4d report RUN_DIR [-o report.html] (--help for the options)");
    llm4d_err err = {0};
    char written[PATH_MAX + 32];
    if (llm4d_report_write(&o, written, sizeof written, &err) != LLM4D_OK) {
        fprintf(stderr, "llm4d report: %s\n", err.msg);
        return llm4d_exit_code(err.code);
    }
    printf("llm4d report: wrote %s%s%s\n", written, o.merge_trace ? " and the merged trace " : "",
           o.merge_trace ? o.merge_trace : "");
    return 0;
}
