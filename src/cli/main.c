/* main.c — `llm4d VERB [options]`: dispatches to the verb's file; `llm4d --help` lists the verbs. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "core/heap.h"

static const llm4d_verb verbs[] = {
    {"train", "train a GPT model (-c config.yaml, the seeds' flags, -o Section.key=value)", llm4d_cmd_train},
    {"eval", "validation loss and perplexity of a checkpoint (--ckpt DIR, train's options)", llm4d_cmd_eval},
    {"launch", "run N processes through mpirun (--nproc N [--hostfile F [--nnodes MIN:MAX]] [--log_dir DIR] "
               "[--max_restarts N] -- VERB ...)",
     llm4d_cmd_launch},
    {"prepare-data", "tokenize text or JSON lines into Paddle npz or Megatron bin/idx files",
     llm4d_cmd_prepare_data},
    {"tokenize", "print the GPT-2 token ids of a text", llm4d_cmd_tokenize},
    {"detokenize", "print the text of GPT-2 token ids", llm4d_cmd_detokenize},
    {"generate", "continue a prompt with a checkpoint (KV cache; temperature, top-k, top-p)", llm4d_cmd_generate},
    {"convert", "export a checkpoint as a Hugging Face GPT-2 directory, or import one", llm4d_cmd_convert},
    {"plan", "the fastest layout of a job on a cluster, its time and memory predicted; --evaluate one layout; "
             "--calibrate this machine", llm4d_cmd_plan},
    {"report", "one HTML page about a run: curves, schedule, memory, layout (RUN_DIR [-o FILE] [--compare DIR])",
     llm4d_cmd_report},
    {"__worker", NULL, llm4d_cmd_worker},
    {"__plancal", NULL, llm4d_cmd_plancal},
    {"__commtest", NULL, llm4d_cmd_commtest},
    {"__probe", NULL, llm4d_cmd_probe},
};
static const int n_verbs = (int)(sizeof verbs / sizeof verbs[0]);

static void usage(FILE *f) {
    fprintf(f, "usage: llm4d VERB [options]    (llm4d VERB --help for a verb's options)\n\nverbs:\n");
    for (int i = 0; i < n_verbs; i++)
        if (verbs[i].summary) fprintf(f, "  %-14s %s\n", verbs[i].name, verbs[i].summary);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return argc < 2 ? 2 : 0;
    }
    llm4d_heap_fix(); /* before anything is allocated: every verb's resident size as the memory plan counts it */
    for (int i = 0; i < n_verbs; i++)
        if (!strcmp(argv[1], verbs[i].name)) return verbs[i].run(argc - 1, argv + 1);
    fprintf(stderr, "llm4d: unknown verb '%s'; run `llm4d --help` for the list of verbs\n", argv[1]);
    return 2;
}
