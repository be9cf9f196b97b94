/* launch_resume.c — what `llm4d launch` knows of a train job's checkpoints (see launch.h): the checkpoint a resume
 * would load, the step a run reached, the command that continues it, and the one line that says all three when a
 * job stops. The launcher's restarts (verb_launch.c) resume from the same checkpoint with the same command. */
#define _GNU_SOURCE
#include "cli/launch.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/store.h"
#include "core/error.h"

/* The name the user ran llm4d by (`build/llm4d`), for a command to copy; the executable's path otherwise. */
static void program_name(char *buf, size_t cap) {
    FILE *f = fopen("/proc/self/cmdline", "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    if (!buf[0] && llm4d_launch_self_exe(buf, cap) != 0) snprintf(buf, cap, "llm4d");
}

/* One shell word: as it is when it needs no quoting, else in single quotes. */
static void put_word(FILE *f, const char *w) {
    int plain = w[0] != 0;
    for (const char *p = w; *p && plain; p++) plain = isalnum((unsigned char)*p) || strchr("_./=:,+@%-", *p);
    if (plain) {
        fputs(w, f);
        return;
    }
    fputc('\'', f);
    for (const char *p = w; *p; p++) *p == '\'' ? fputs("'\\''", f) : fputc(*p, f);
    fputc('\'', f);
}

/* Is argv[i] a --resume the command had (*skip: how many words it takes)? */
static int is_resume(int argc, char **argv, int i, int *skip) {
    if (!strcmp(argv[i], "--resume")) return *skip = i + 1 < argc ? 2 : 1, 1;
    if (!strncmp(argv[i], "--resume=", 9)) return *skip = 1, 1;
    return 0;
}

void llm4d_launch_put_command(FILE *f, int argc, char **argv, int cmd, const char *resume) {
    char prog[4096];
    program_name(prog, sizeof prog);
    put_word(f, prog);
    for (int i = 0; i < argc; i++) { /* argv[0] is the verb, `launch` */
        int skip;
        if (i >= cmd && resume && is_resume(argc, argv, i, &skip)) {
            i += skip - 1;
            continue;
        }
        fputc(' ', f);
        put_word(f, argv[i]);
    }
    if (resume) {
        fputs(" --resume ", f);
        put_word(f, resume);
    }
}

int llm4d_launch_command_with_resume(int n, char **cmdv, const char *resume, char **out) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        int skip;
        if (resume && is_resume(n, cmdv, i, &skip)) {
            i += skip - 1;
            continue;
        }
        out[k++] = cmdv[i];
    }
    if (resume) out[k++] = "--resume", out[k++] = (char *)resume;
    out[k] = NULL;
    return k;
}

long long llm4d_launch_step_reached(const char *dir, double since) {
    char path[4096 + 32];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    struct stat st;
    if (stat(path, &st) != 0 || (double)st.st_mtime + 1 < since) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[512];
    long long step = 0, s;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "{\"step\": %lld,", &s) == 1) step = s;
    fclose(f);
    return step;
}

int llm4d_launch_latest(const llm4d_launch_job *job, char *dir, size_t cap, long long *step) {
    llm4d_err err;
    *step = 0;
    if (!job->train || !job->output_dir[0] || llm4d_ckpt_resolve(job->output_dir, dir, cap, &err) != LLM4D_OK)
        return 0;
    const char *base = strrchr(dir, '/');
    base = base ? base + 1 : dir;
    if (sscanf(base, "step_%lld", step) != 1) *step = 0;
    return 1;
}

void llm4d_launch_say_resume(const llm4d_launch_job *job, int argc, char **argv, int cmd) {
    if (!job->train || !job->output_dir[0]) return;
    char ckpt[4096 + 64];
    long long step;
    if (llm4d_launch_latest(job, ckpt, sizeof ckpt, &step)) { /* what --resume would load */
        fprintf(stderr, "llm4d launch: the latest checkpoint is %s; to resume from it: ", ckpt);
        llm4d_launch_put_command(stderr, argc, argv, cmd, job->output_dir);
    } else {
        char why[64] = "save_steps is off";
        if (job->save_steps > 0) snprintf(why, sizeof why, "one is saved every %lld steps", job->save_steps);
        fprintf(stderr, "llm4d launch: %s holds no checkpoint yet (%s); to start again: ", job->output_dir, why);
        llm4d_launch_put_command(stderr, argc, argv, cmd, NULL);
    }
    fputc('\n', stderr);
}
