/* cli.h — the verbs of the llm4d command. Each verb lives in its own file (verb_<name>.c) and returns the
 * process exit code: 0 success, 2 user error, 1 other. An error is one line on stderr naming the problem and the
 * fix, `llm4d <verb>: <message>` (`llm4d train: ...`, `llm4d prepare-data: ...`; no "error:", the exit code says
 * it); a rank of a job of several processes says `llm4d: rank R: <message>` (comm/runtime.h); and `llm4d: ...`
 * is left to what happens before a verb runs (an unknown verb). tests/test_cli_errors.sh holds every verb to it. */
#ifndef LLM4D_CLI_CLI_H
#define LLM4D_CLI_CLI_H

typedef struct {
    const char *name;
    const char *summary;             /* NULL: a hidden verb, not listed by --help */
    int (*run)(int argc, char **argv); /* argv[0] is the verb */
} llm4d_verb;

int llm4d_cmd_train(int argc, char **argv);
int llm4d_cmd_eval(int argc, char **argv);
int llm4d_cmd_launch(int argc, char **argv);
int llm4d_cmd_tokenize(int argc, char **argv);
int llm4d_cmd_detokenize(int argc, char **argv);
int llm4d_cmd_prepare_data(int argc, char **argv);
int llm4d_cmd_generate(int argc, char **argv);
int llm4d_cmd_convert(int argc, char **argv);
int llm4d_cmd_plan(int argc, char **argv);
int llm4d_cmd_report(int argc, char **argv);
/* hidden (no summary): started by `launch` under mpirun, and a collective job for the launcher's tests */
int llm4d_cmd_worker(int argc, char **argv);
int llm4d_cmd_commtest(int argc, char **argv);
int llm4d_cmd_probe(int argc, char **argv);   /* a host answering `launch --nnodes`' probe (launch_elastic.c) */
int llm4d_cmd_plancal(int argc, char **argv); /* a rank of `llm4d plan --calibrate`'s measuring jobs */

#endif
