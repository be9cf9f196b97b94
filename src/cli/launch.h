/* launch.h — what `llm4d launch` (verb_launch.c) and the `__worker` it starts on every rank (launch_worker.c)
 * share: the run id, the exit records, the log directory's housekeeping and the job's shared-memory directory.
 *
 * The run id. Every `llm4d launch` names its job (`20261128-194229-4242-3fa2`: start time, launcher pid, 16
 * random bits) and hands it to every worker (`__worker --run_id ID`), which writes it on the first line of its
 * rank's log, into the rank's exit record and into the rank's environment as LLM4D_RUN_ID (rank 0 copies it into
 * output_dir/run.json, train/runinfo.c). `llm4d report` reads only the logs and records that carry the id of the
 * run it reports (report/logs.c), so a later job launched into the same log directory cannot be taken for it.
 *
 * The exit record. When a rank ends, its worker writes DIR/.workerexit.<rank> whole or not at all (a temporary
 * renamed): pid, whether a signal ended it and which (or its exit code), whether the worker had passed a
 * termination signal on to it (then it was stopped, not failing), the wall time, and the run id. The launcher
 * reads them to name the rank that ended the job; the report reads them for the run's state.
 *
 * The shared-memory directory. Open MPI's shared-memory transport (btl vader) backs each rank's segment with a
 * file in /dev/shm, which it removes at a clean end but leaves behind when the job is killed or aborted (2 x 4 MiB
 * per interrupted 2-rank job). The launcher points it at a directory of its own (`--mca
 * btl_vader_backing_directory /dev/shm/llm4d-mpi.<run id>`), each worker creates that directory on its host and,
 * when its rank has ended, removes its rank's files there (and llm4d's own segments of that rank, which comm_shm.c
 * unlinks once mapped: only a rank killed in between leaves one), and the launcher removes the directory after the
 * job; /dev/shm is then as it was before the job, however it ended. */
#ifndef LLM4D_CLI_LAUNCH_H
#define LLM4D_CLI_LAUNCH_H

#include <signal.h>
#include <stddef.h>
#include <stdio.h>

#include "core/error.h"

#define LLM4D_RUN_ID_MAX 64
#define LLM4D_EXIT_RECORD_PREFIX ".workerexit."
#define LLM4D_SHM_DIR_PREFIX "/dev/shm/llm4d-mpi."

/* `--key value` or `--key=value` at argv[*i]; advances *i past what it used; *bad = 1 when the value is missing. */
const char *llm4d_launch_opt(int argc, char **argv, int *i, const char *key, int *bad);
/* A whole decimal number in [lo, hi] into *out: 1, or 0 when s is not one. */
int llm4d_launch_int(const char *s, long lo, long hi, int *out);
/* The path of this executable: 0, or -1. */
int llm4d_launch_self_exe(char *buf, size_t cap);
/* Wall-clock seconds. */
double llm4d_launch_now(void);
/* 1 when id is a run id as llm4d_launch_make_run_id writes them (letters, digits, '-'; not empty). */
int llm4d_run_id_valid(const char *id);
/* A new run id into buf (at least LLM4D_RUN_ID_MAX bytes). */
void llm4d_launch_make_run_id(char *buf, size_t cap);
/* Blocks the termination signals (SIGINT, SIGTERM, SIGHUP, and SIGCHLD when chld) into *set, the mask before into
 * *old: the launcher and the worker take signals synchronously (sigtimedwait, signalfd), with no handler and no
 * global state. */
void llm4d_launch_block_signals(sigset_t *set, sigset_t *old, int chld);

typedef struct {
    int valid;
    int rank;
    long pid;
    int signaled;  /* 1: value is a signal number; 0: value is an exit code */
    int value;
    int forwarded; /* the worker had passed a termination signal on before the rank ended */
    double time;   /* wall clock when the worker saw the rank end */
    char run_id[LLM4D_RUN_ID_MAX]; /* "" in a record written before run ids existed */
} llm4d_exit_record;

void llm4d_exit_record_write(const char *log_dir, const llm4d_exit_record *e);
/* Rank's record in log_dir: 1 when there is a whole one (e->valid), else 0. */
int llm4d_exit_record_read(const char *log_dir, int rank, llm4d_exit_record *e);
/* Did this rank end the job (rather than being ended by it)? A non-zero exit code, or a signal nobody passed on. */
int llm4d_exit_record_is_cause(const llm4d_exit_record *e);
/* "rank 1 (pid 4242) was killed by signal 9 (Killed)" / "rank 1 (pid 4242) exited with code 2". */
void llm4d_exit_record_describe(char *buf, size_t cap, const llm4d_exit_record *e);

/* Before a job starts in log_dir: removes what earlier jobs left there that this one will not overwrite and that
 * could be taken for its own: every exit record (and its temporary), every progress board (progress.<rank>), and
 * the worker logs of ranks >= nproc. */
void llm4d_launch_clean_log_dir(const char *log_dir, int nproc);

/* dir/<name> for every entry of dir whose name starts with prefix and ends with suffix (either may be ""):
 * removed; returns how many were. */
int llm4d_launch_remove_matching(const char *dir, const char *prefix, const char *suffix);
/* The shared-memory directory: every file in it removed, then the directory (nothing when it does not exist). */
void llm4d_launch_remove_shm_dir(const char *dir);

/* ---- a train job's checkpoints (launch_resume.c) ---- */

/* What the launcher knows of the job it runs, from the train command's configuration. */
typedef struct {
    int train;              /* the command is `train` (else nothing below is known) */
    char output_dir[4096];
    long long max_steps, save_steps;
    int max_restarts;       /* Engine.save_load.max_restarts, unless launch's --max_restarts says otherwise */
    int mp_degree, pp_degree, sharding_degree; /* the layout at --nproc processes */
    long long global_batch_size;
} llm4d_launch_job;

/* The checkpoint `--resume output_dir` would load, into dir, and its step: 1, or 0 when there is none. */
int llm4d_launch_latest(const llm4d_launch_job *job, char *dir, size_t cap, long long *step);
/* The last training step output_dir/metrics.jsonl recorded, when it was written since `since`; 0 otherwise. */
long long llm4d_launch_step_reached(const char *dir, double since);
/* This launch again, as a shell command (with --resume DIR instead of any --resume the command had, when resume). */
void llm4d_launch_put_command(FILE *f, int argc, char **argv, int cmd, const char *resume);
/* The command cmdv[0..n) into out (room for n + 3), its --resume replaced by `--resume resume` when resume is not
 * NULL; returns the words written (out[k] = NULL). */
int llm4d_launch_command_with_resume(int n, char **cmdv, const char *resume, char **out);
/* One line on stderr: the latest checkpoint and the command that resumes from it (or starts again). */
void llm4d_launch_say_resume(const llm4d_launch_job *job, int argc, char **argv, int cmd);

/* ---- elasticity: `--nnodes MIN:MAX` (launch_elastic.c) ---- */

#define LLM4D_HOST_NAME_MAX 256

/* A host of the hostfile and what the last probe found. */
typedef struct {
    char name[LLM4D_HOST_NAME_MAX];
    int up;                             /* the last probe: 1 when the host answered */
    char why[192];                      /* the last probe: why a host did not answer */
} llm4d_launch_host;

/* The hosts a job may run on (the hostfile's, in its order). */
typedef struct {
    int n;                              /* hosts in the hostfile */
    llm4d_launch_host *host;            /* [n] */
    int min, max;                       /* --nnodes MIN:MAX */
    int per_node;                       /* processes on each host: --nproc / MAX */
} llm4d_launch_hosts;

/* "N" or "MIN:MAX" (1 <= MIN <= MAX) into *min, *max: 1, or 0 when s is neither. */
int llm4d_launch_nnodes(const char *s, int *min, int *max);
/* The hostfile's hosts into h, for --nnodes min:max and --nproc nproc (a multiple of max; at least max hosts). */
llm4d_code llm4d_launch_hosts_read(const char *path, int min, int max, int nproc, llm4d_launch_hosts *h,
                                   llm4d_err *err);
void llm4d_launch_hosts_free(llm4d_launch_hosts *h);
/* Asks every host at once whether it is there (mpirun -np 1 --host H exe __probe); sets h->up and h->why;
 * returns how many answered. */
int llm4d_launch_hosts_probe(llm4d_launch_hosts *h, const char *mpirun, const char *exe, const char *log_dir);
/* The first max hosts that answered, as indices into use (room for h->max); returns how many. */
int llm4d_launch_hosts_pick(const llm4d_launch_hosts *h, int *use);
/* A hostfile of the hosts use[0..n), per_node slots each, written whole at path: 0, or -1. */
int llm4d_launch_hosts_write(const llm4d_launch_hosts *h, const int *use, int n, const char *path);
/* "1 of 2 hosts (node-a; not answering: node-b: <why>)" into buf. */
void llm4d_launch_hosts_describe(const llm4d_launch_hosts *h, const int *use, int n, char *buf, size_t cap);

/* A train job's layout on `world` processes, as the flags appended to its command (launch_elastic.c says which
 * degrees change). */
typedef struct {
    int dp, sharding;
    char val[3][24];
    char *argv[8];
    int argc;
} llm4d_launch_layout_args;
/* 1 and *out (no words for a verb other than train), or 0 when world cannot hold the job's mp x pp. */
int llm4d_launch_layout(const llm4d_launch_job *job, int world, llm4d_launch_layout_args *out);

#endif
