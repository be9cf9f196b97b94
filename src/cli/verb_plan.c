/* verb_plan.c — `llm4d plan`: the layout to run a job with, chosen before the cluster is spent (plan/search.h), or
 * one layout's predicted time and memory (--evaluate), or this machine measured into a profile (--calibrate).
 *
 *   llm4d plan -c cfg.yaml | train's flags  --nodes N --ranks_per_node R [--threads_per_rank T]
 *              [--memory_per_node GiB] [--memory_per_rank GiB] [--top K] [--machine_profile FILE]
 *              [--explain [--explain_lines N]] [--json]
 *   llm4d plan --evaluate  <exactly the flags of an `llm4d train` command>  [--nodes N] [--json | --traffic]
 *   llm4d plan --calibrate [-c cfg.yaml | flags] [--ranks_per_node R] [--hostfile F] [--machine_profile FILE]
 *              [--calibrate_budget SECONDS] [--machine [--calibrate_grid HIDDENS:SEQUENCES]]
 *
 * A layout fits when its fullest host is within the memory per node and, where ranks have memory of their own (a
 * GPU's: --memory_per_rank, or the profile's memory_per_rank_bytes), its largest rank within that (predict.h
 * llm4d_prediction_over): the search's test, its early rejection's thresholds and --evaluate's "fits".
 *
 * Every answer names the precision it priced in its first lines (plan/report.h); --explain summarises the
 * rejections by reason before any layout's own line, and lists at most --explain_lines (50) layouts per reason.
 *
 * Every bad input (a flag, a profile that is missing or garbled, node counts that do not make the layout) is one
 * line naming the problem and the fix, exit 2. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/job.h"
#include "plan/beyond.h"
#include "plan/calibrate.h"
#include "plan/grid.h"
#include "plan/coverage.h"
#include "plan/evaluate.h"
#include "plan/explain.h"
#include "plan/report.h"
#include "plan/search.h"
#include "plan/simmemo.h"
#include "plan/memplan.h"
#include "model/gpt.h"

#define MiB (1024.0 * 1024.0)

static const char usage[] =
    "usage: llm4d plan [-c config.yaml] [train's flags] --nodes N --ranks_per_node R [--threads_per_rank T]\n"
    "                  [--memory_per_node GiB] [--memory_per_rank GiB] [--top K] [--machine_profile FILE]\n"
    "                  [--search_threads T] [--explain [--explain_lines N]] [--json]\n"
    "       llm4d plan --evaluate [the flags of an `llm4d train` command] [--nodes N] [--json | --traffic]\n"
    "       llm4d plan --calibrate [-c config.yaml | train's flags] [--ranks_per_node R]\n"
    "                  [--hostfile FILE --nodes N] [--machine_profile FILE] [--calibrate_budget SECONDS]\n"
    "                  [--machine [--calibrate_grid HIDDENS:SEQUENCES]]\n"
    "\n"
    "Without --evaluate: every layout of the model and global batch on nodes x ranks_per_node processes (the four\n"
    "degrees, ZeRO stage and offload, sequence parallelism, pipeline schedule, virtual stages and split, micro-batch,\n"
    "recompute), checked by train's own validation and by memory (every rank's peak from the trainer's memory plan:\n"
    "the fullest host's sum within --memory_per_node, default the profile's; where ranks have memory of their own,\n"
    "a GPU's, the largest rank within --memory_per_rank, default the profile's memory_per_rank_bytes, none on CPU\n"
    "hosts; every byte of a rank's plan counts against its device), timed from the machine profile, the fastest\n"
    "--top printed with their breakdowns. A layout bound to be slower\n"
    "than the fastest --top found so far (a bound on its time that needs no memory plan) is set aside before its\n"
    "memory is judged: the fastest --top are those of judging every layout, but the count that fit in memory is\n"
    "of the layouts judged (the answer says how many were set aside); with --explain every layout is judged and\n"
    "the counts are exact. --explain counts the rejected layouts by reason, then lists them, at most\n"
    "--explain_lines (default 50; 0: all) per reason. The answer says\n"
    "which precision it priced (fp32 unless --use_amp true). --evaluate predicts the one layout the flags\n"
    "describe (and whether it fits: which limit it is over); with --json it prints one object with step_s,\n"
    "peak_mib_per_rank, fits and over_limit (\"\", \"host\", \"rank\" or \"rank,host\"); with --traffic, instead, the\n"
    "collectives and pipeline messages the engines of each stage's first rank issue in a step, one a line (kind,\n"
    "group, payload bytes per call, calls per step, when issued). --calibrate measures this\n"
    "machine (the model's kernels at its shapes, collectives, memory) into the profile (default\n"
    "~/.cache/llm4d/machine.json); it takes minutes, and measures\n"
    "only what a quiet machine can measure: run it when nothing else is running. With --hostfile its jobs of up to\n"
    "nodes x ranks_per_node ranks are placed by the hostfile, so groups spanning hosts are measured too. It prints\n"
    "its progress every few seconds and writes the profile as it goes; after --calibrate_budget seconds (default\n"
    "600; 0: no bound) it measures no new model part and says how many it left (priced from the nearest measured).\n"
    "Run again into the same profile on the same machine, it continues: what the file holds is kept, not measured\n"
    "again (remove the file to measure afresh). A profile measured for another model or sequence length that\n"
    "cannot price this one is refused, naming the calibration to run. With --machine the kernels measured are not\n"
    "the model's but a grid's, once per machine and thread count: one-layer GPTs over hidden sizes and sequences\n"
    "(--calibrate_grid, default " LLM4D_GRID_DEFAULT ": gpt2-tiny, gpt2-en and gpt2-medium at sequences 64 to 1024)\n"
    "in fp32 and bf16; any model whose calls lie within the grid is then priced from it by interpolation. A layout's\n"
    "calls beyond the grid (a micro-batch above 1, tensor-parallel shards narrower than it measured, kinds it never\n"
    "ran) are priced by their work, and the answer says so once (\"priced beyond the calibration: ...\"; in --json,\n"
    "\"extrapolated\").\n"
    "\n"
    "The Plan.* keys (llm4d train --help lists them) may be given in the YAML file as well.\n";

static int fail(const char *what) {
    fprintf(stderr, "llm4d plan: %s\n", what);
    return 2;
}

typedef struct {
    int evaluate, calibrate, explain, json, quick, no_memo, machine, traffic;
    const char *grid;  /* --calibrate_grid (NULL: the default) */
    int explain_lines; /* rejected layouts listed per reason (0: all) */
    double budget_s;   /* --calibrate_budget: seconds of kernel measurement (0: no bound) */
    const char *hostfile;
} switches;

/* The verb's own switches out of argv into sw; the rest (train's options) into args. */
static int take_switches(int argc, char **argv, char **args, switches *sw, int *bad) {
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && !strcmp(argv[i], "--evaluate")) sw->evaluate = 1;
        else if (i > 0 && !strcmp(argv[i], "--calibrate")) sw->calibrate = 1;
        else if (i > 0 && !strcmp(argv[i], "--explain")) sw->explain = 1;
        else if (i > 0 && !strcmp(argv[i], "--machine")) sw->machine = 1;
        else if (i > 0 && !strcmp(argv[i], "--calibrate_grid")) {
            if (i + 1 >= argc) *bad = -1000000001;
            else sw->grid = argv[++i], sw->machine = 1;
        }
        else if (i > 0 && !strcmp(argv[i], "--json")) sw->json = 1;
        else if (i > 0 && !strcmp(argv[i], "--traffic")) sw->traffic = 1;
        else if (i > 0 && !strcmp(argv[i], "--quick")) sw->quick = 1; /* calibration: the tests' short one */
        /* no shortcut (every rank's memory plan counted afresh, every layout's collectives priced): the oracle
         * tests/test_plan_memo.sh compares the search against */
        else if (i > 0 && !strcmp(argv[i], "--no_memo")) sw->no_memo = 1;
        else if (i > 0 && !strcmp(argv[i], "--explain_lines")) {
            char *end = NULL;
            const long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;
            if (i + 1 >= argc || !end || *end || end == argv[i + 1] || v < 0 || v > 1000000000) *bad = -i;
            else sw->explain_lines = (int)v, i++;
        } else if (i > 0 && !strcmp(argv[i], "--calibrate_budget")) {
            char *end = NULL;
            const double v = i + 1 < argc ? strtod(argv[i + 1], &end) : -1;
            if (i + 1 >= argc || !end || *end || end == argv[i + 1] || !(v >= 0 && v <= 1e7)) *bad = -1000000000;
            else sw->budget_s = v, i++;
        } else if (i > 0 && !strcmp(argv[i], "--hostfile")) {
            if (i + 1 >= argc) *bad = i;
            else sw->hostfile = argv[++i];
        } else args[n++] = argv[i];
    }
    args[n] = NULL;
    return n;
}

static int threads_of(const llm4d_config *cfg, const llm4d_profile *prof, int R) {
    if (cfg->plan.threads_per_rank > 0) return cfg->plan.threads_per_rank;
    if (cfg->threads > 0) return cfg->threads;
    const char *omp = getenv("OMP_NUM_THREADS"); /* what a launched rank's OpenMP would use */
    if (omp && atoi(omp) > 0) return atoi(omp);
    const int t = prof->cores / (R > 0 ? R : 1);
    return t > 0 ? t : 1;
}

static void print_header(FILE *f, const llm4d_config *cfg, const llm4d_cluster *cl, const llm4d_profile *prof,
                         const char *path) {
    fprintf(f, "llm4d plan: %s (hidden %d, %d layers, %d heads), global batch %lld x %d tokens; %d node%s x %d ranks x "
            "%d thread%s, %.1f GiB per node", cfg->model.name_or_path[0] ? cfg->model.name_or_path : "model",
            cfg->model.hidden_size, cfg->model.num_layers, cfg->model.num_attention_heads,
            (long long)cfg->global_batch_size, cfg->data.max_seq_len, cl->nodes, cl->nodes == 1 ? "" : "s",
            cl->ranks_per_node, cl->threads, cl->threads == 1 ? "" : "s", cl->memory_per_node / (1024 * MiB));
    if (cl->memory_per_rank > 0) /* a GPU's own (none on CPU hosts: their line is as it was) */
        fprintf(f, " and %.1f GiB per rank (its device's)", cl->memory_per_rank / (1024 * MiB));
    fputc('\n', f);
    fprintf(f, "machine profile %s: %s%s%s, %d cores, measured %s at load %.2f\n", path, prof->name,
            prof->cpu[0] ? ", " : "", prof->cpu, prof->cores, prof->when[0] ? prof->when : "(not said)", prof->load);
    llm4d_report_precision_line(f, cfg);
}

/* The limits a prediction is over (llm4d_prediction_over), as --json's "over_limit" names them. */
static const char *over_name(int over) {
    return over == (LLM4D_OVER_RANK | LLM4D_OVER_HOST) ? "rank,host" : over == LLM4D_OVER_RANK ? "rank"
           : over == LLM4D_OVER_HOST ? "host" : "";
}

static int run_evaluate(const llm4d_predictor *pr0, llm4d_config *cfg, int R0, const switches *sw,
                        const llm4d_profile *prof, const char *path) {
    llm4d_predictor pr = *pr0;
    llm4d_err err = {0};
    const llm4d_dist_config *d = &cfg->dist;
    const int nodes = cfg->plan.nodes;
    int world = d->dp_degree * d->mp_degree * d->pp_degree * d->sharding_degree;
    if (d->dp_degree == 0) /* derived from the processes, as train derives it: given, or one data replica */
        world = R0 > 0 ? nodes * R0 : d->mp_degree * d->pp_degree * d->sharding_degree;
    if (R0 > 0 && nodes * R0 != world) {
        char m[256];
        snprintf(m, sizeof m, "the layout has %d processes but --nodes %d x --ranks_per_node %d = %d; make them agree",
                 world, nodes, R0, nodes * R0);
        return fail(m);
    }
    if (world % nodes) {
        char m[256];
        snprintf(m, sizeof m, "the layout's %d processes do not fill --nodes %d evenly; give a node count that divides "
                 "%d", world, nodes, world);
        return fail(m);
    }
    pr.cluster.ranks_per_node = world / nodes;
    pr.cluster.threads = threads_of(cfg, prof, pr.cluster.ranks_per_node);
    if (llm4d_config_finalize(cfg, world, &err) != LLM4D_OK) return fail(err.msg);
    if (sw->traffic) { /* the engines' collectives instead of the prediction */
        const llm4d_code rc = llm4d_plan_traffic(pr.prof, pr.be, &pr.cluster, cfg, stdout, &err);
        if (rc == LLM4D_OK) return 0;
        return rc == LLM4D_EUSER || rc == LLM4D_EIO ? fail(err.msg) : (fprintf(stderr, "llm4d plan: %s\n", err.msg), 1);
    }
    llm4d_prediction p = {0};
    const llm4d_code rc = llm4d_plan_evaluate(pr.prof, pr.be, &pr.cluster, cfg, &p, &err);
    if (rc != LLM4D_OK) {
        llm4d_prediction_free(&p);
        return rc == LLM4D_EUSER || rc == LLM4D_EIO ? fail(err.msg)
                                                     : (fprintf(stderr, "llm4d plan: %s\n", err.msg), 1);
    }
    const int over = llm4d_prediction_over(&p, &pr.cluster);
    if (sw->json) {
        cJSON *o = llm4d_report_json(&p, cfg);
        cJSON_AddNumberToObject(o, "memory_per_node_mib", pr.cluster.memory_per_node / MiB);
        cJSON_AddNumberToObject(o, "memory_per_rank_mib", pr.cluster.memory_per_rank / MiB); /* 0: none */
        cJSON_AddBoolToObject(o, "fits", !over);
        cJSON_AddStringToObject(o, "over_limit", over_name(over));
        /* the model's FLOPs per token as the trainer's MFU counts them (6 x GEMM weights + attention, from the
         * description's shapes: config/model_shape.h), and what they make of the predicted step per rank */
        const double fpt = llm4d_gpt_flops_per_token(&cfg->model, cfg->data.max_seq_len);
        cJSON_AddNumberToObject(o, "model_flops_per_token", fpt);
        cJSON_AddNumberToObject(o, "model_tflops_per_rank", p.step_s > 0 ? fpt * p.tokens_per_s / p.world / 1e12 : 0);
        llm4d_beyond_json(o, &p.beyond);
        char *s = cJSON_PrintUnformatted(o);
        printf("%s\n", s ? s : "{}");
        free(s);
        cJSON_Delete(o);
    } else {
        print_header(stdout, cfg, &pr.cluster, prof, path);
        char name[160];
        llm4d_layout_name(&p.layout, name, sizeof name);
        char why[600] = "";
        if (over) {
            char text[512];
            llm4d_prediction_over_text(&p, &pr.cluster, over, text, sizeof text);
            snprintf(why, sizeof why, " (does not fit: %s)", text);
        }
        printf("%s: %.4f s per step, %.0f tokens/s, peak %.1f MiB per rank (rank %d), %.1f MiB on the fullest host%s\n",
               name, p.step_s, p.tokens_per_s, p.peak_bytes / MiB, p.peak_rank, p.host_bytes / MiB, why);
        llm4d_beyond_line(stdout, &p.beyond, "    ");
        llm4d_report_text(stdout, &p, cfg, "    ");
        printf("    peak MiB per rank:");
        for (int r = 0; r < p.world && r < 64; r++) printf(" %.1f", p.rank_peak[r] / MiB);
        printf("%s\n", p.world > 64 ? " ..." : "");
    }
    llm4d_prediction_free(&p);
    return 0;
}

static int run_search(const llm4d_predictor *pr, llm4d_config *base, const switches *sw, const llm4d_profile *prof,
                      const char *path) {
    llm4d_err err = {0};
    long long global = base->global_batch_size;
    if (global <= 0)
        return fail("give the global batch to plan for with --global_batch_size (the layouts share it)");
    llm4d_search s;
    /* a layout over the hosts' memory before its collectives' temporaries is rejected there, unless each
     * rejection's exact need is asked for (--explain) or every shortcut is off (--no_memo) */
    llm4d_predictor fast = *pr;
    if (!sw->explain && !sw->no_memo)
        fast.reject_above = pr->cluster.memory_per_node, fast.reject_rank_above = pr->cluster.memory_per_rank;
    fast.step_only = !sw->no_memo; /* the top K are predicted again in full below */
    const llm4d_code rc = llm4d_search_run(&fast, base, global, sw->explain, &s, &err);
    if (rc != LLM4D_OK) return rc == LLM4D_EUSER ? fail(err.msg) : (fprintf(stderr, "llm4d plan: %s\n", err.msg), 1);
    llm4d_pp_plan pp;
    const int top = base->plan.top;
    int code = 0;
    llm4d_reasons why = {0};
    if (sw->explain && llm4d_reasons_group(&s, &why, &err) != LLM4D_OK) {
        llm4d_search_free(&s);
        return fail("out of memory");
    }
    /* the fastest K predicted in full before anything is printed: the answer says once, before listing them, what
     * of theirs a machine calibration did not measure (plan/beyond.h) */
    const int n_show = s.n_fit < top ? s.n_fit : top;
    llm4d_prediction *ps = calloc((size_t)n_show + 1, sizeof *ps);
    llm4d_config *cs = malloc(((size_t)n_show + 1) * sizeof *cs);
    if (!ps || !cs) {
        free(ps), free(cs);
        llm4d_reasons_free(&why);
        llm4d_search_free(&s);
        return fail("out of memory");
    }
    llm4d_beyond beyond = {0};
    int n_done = 0, n_cfg = 0; /* predicted; configurations finalized (cs[0]: the model and batch of the header) */
    for (int i = 0; i < n_show; i++) {
        llm4d_predictor one = *pr;
        one.per_rank = 1;
        const llm4d_code lc = llm4d_layout_config(base, &s.c[i].layout, global, &cs[i], &pp, &err);
        if (lc == LLM4D_OK) n_cfg = i + 1;
        if (lc != LLM4D_OK || llm4d_predict(&one, &cs[i], &pp, &ps[i], &err) != LLM4D_OK) {
            fprintf(stderr, "llm4d plan: %s\n", err.msg);
            code = 1;
            llm4d_pp_plan_free(&pp);
            llm4d_prediction_free(&ps[i]);
            break;
        }
        llm4d_pp_plan_free(&pp);
        llm4d_beyond_merge(&beyond, &ps[i].beyond, 0, 0);
        n_done++;
    }
    cJSON *root = sw->json ? cJSON_CreateObject() : NULL;
    if (root) cJSON_AddStringToObject(root, "precision", llm4d_report_precision(base));
    if (s.n_fit == 0) { /* a user error: one line on stderr (the rejected list, when asked, on stdout) */
        char rank[96] = "";
        if (pr->cluster.memory_per_rank > 0)
            snprintf(rank, sizeof rank, " and %.2f GiB per rank (--memory_per_rank)",
                     pr->cluster.memory_per_rank / (1024 * MiB));
        fprintf(stderr, "llm4d plan: none of %d layouts fits (%d pass the configuration's checks, none in %.2f GiB "
                "per host%s); give more memory per host (--memory_per_node) or more hosts, or see each layout's need "
                "with --explain\n", s.n, s.n_valid, pr->cluster.memory_per_node / (1024 * MiB), rank);
        code = 2;
        if (sw->explain && !root) llm4d_reasons_summary(stdout, &s, &why);
    } else if (!sw->json) {
        print_header(stdout, n_cfg > 0 ? &cs[0] : base, &pr->cluster, prof, path);
        printf("%d layouts considered in %.2f s: %d pass the configuration's checks, ", s.n, s.seconds, s.n_valid);
        if (s.n_bound == 0) printf("%d fit in memory\n", s.n_fit);
        else /* the fit count is of the layouts judged (search.h) */
            printf("%d fit in memory of the %d judged; %d more were bound to be slower than the fastest %d found "
                   "before their memory was judged\n", s.n_fit, s.n_valid - s.n_bound, s.n_bound, top);
        if (sw->explain) llm4d_reasons_summary(stdout, &s, &why);
        llm4d_beyond_line(stdout, &beyond, "");
        printf("the fastest %d:\n", n_show);
    }
    cJSON *arr = root ? cJSON_AddArrayToObject(root, "layouts") : NULL;
    for (int i = 0; i < n_done; i++) {
        const llm4d_prediction *p = &ps[i];
        if (arr) {
            cJSON_AddItemToArray(arr, llm4d_report_json(p, &cs[i]));
        } else {
            char name[160];
            llm4d_layout_name(&p->layout, name, sizeof name);
            printf("%2d. %-34s %9.4f s/step %10.0f tokens/s  peak %8.1f MiB/rank\n", i + 1, name, p->step_s,
                   p->tokens_per_s, p->peak_bytes / MiB);
            llm4d_report_text(stdout, p, &cs[i], "      ");
        }
    }
    for (int i = 0; i < n_done; i++) llm4d_prediction_free(&ps[i]);
    free(ps), free(cs);
    if (root) llm4d_beyond_json(root, &beyond);
    if (sw->explain && !root) llm4d_reasons_detail(stdout, &s, &why, sw->explain_lines);
    if (sw->explain && root) {
        cJSON_AddItemToObject(root, "rejected_by_reason", llm4d_reasons_json(&s, &why));
        cJSON *rej = cJSON_AddArrayToObject(root, "rejected");
        for (int i = s.n_fit; i < s.n; i++) {
            char name[160];
            llm4d_layout_name(&s.c[i].layout, name, sizeof name);
            const char *reason = s.c[i].reason ? s.c[i].reason : "?";
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "layout", name);
            cJSON_AddStringToObject(o, "reason", reason);
            cJSON_AddItemToArray(rej, o);
        }
    }
    if (root) {
        cJSON_AddNumberToObject(root, "considered", s.n);
        cJSON_AddNumberToObject(root, "valid", s.n_valid);
        cJSON_AddNumberToObject(root, "fit", s.n_fit);
        cJSON_AddNumberToObject(root, "judged", s.n_valid - s.n_bound); /* fit counts these */
        cJSON_AddNumberToObject(root, "bound_slower", s.n_bound);
        cJSON_AddNumberToObject(root, "seconds", s.seconds);
        char *txt = cJSON_PrintUnformatted(root);
        printf("%s\n", txt ? txt : "{}");
        free(txt);
        cJSON_Delete(root);
    }
    llm4d_reasons_free(&why);
    llm4d_search_free(&s);
    return code;
}

int llm4d_cmd_plan(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return fputs(usage, stdout), 0;
    char **args = calloc((size_t)argc + 1, sizeof *args);
    llm4d_config *cfg = calloc(1, sizeof *cfg);
    if (!args || !cfg) return free(args), free(cfg), fail("out of memory");
    switches sw = {.explain_lines = 50, .budget_s = 600};
    int bad = 0, code = 2;
    const int n = take_switches(argc, argv, args, &sw, &bad);
    llm4d_err err = {0};
    llm4d_profile prof;
    llm4d_profile_init(&prof);
    llm4d_backend *be = NULL;
    llm4d_stagecost_cache *cache = NULL;
    llm4d_memplan_memo *memo = NULL;
    llm4d_sim_memo *sim = NULL;
    char path[LLM4D_PATH_MAX];
    if (bad == -1000000000) {
        code = fail("--calibrate_budget needs the seconds after which a calibration measures no new model part (0: "
                    "no bound), as in --calibrate_budget 600");
        goto out;
    }
    if (bad == -1000000001) {
        code = fail("--calibrate_grid needs HIDDENS:SEQUENCES, as in --calibrate_grid " LLM4D_GRID_DEFAULT);
        goto out;
    }
    if (sw.traffic && (!sw.evaluate || sw.json)) {
        code = fail("--traffic goes with --evaluate and without --json: `llm4d plan --evaluate --traffic` and the flags "
                    "of a train command");
        goto out;
    }
    if (sw.machine && !sw.calibrate) {
        code = fail("--machine and --calibrate_grid go with --calibrate (a machine calibration), as in `llm4d plan "
                    "--calibrate --machine`");
        goto out;
    }
    if (sw.machine) {
        llm4d_grid g;
        char why[256];
        if (!llm4d_grid_parse(sw.grid, &g, why, sizeof why)) {
            code = fail(why);
            goto out;
        }
    }
    if (bad < 0) {
        code = fail("--explain_lines needs a count of rejected layouts to list per reason (0: all), as in "
                    "--explain_lines 50");
        goto out;
    }
    if (bad) {
        code = fail("--hostfile needs a file naming the hosts (one per line: `host slots=N`)");
        goto out;
    }
    llm4d_config_defaults(cfg);
    if (llm4d_config_parse_args(cfg, n - 1, args + 1, &err) != LLM4D_OK || llm4d_config_check_plan(cfg, &err) != LLM4D_OK) {
        code = fail(err.msg);
        goto out;
    }
    if (cfg->plan.machine_profile[0]) snprintf(path, sizeof path, "%s", cfg->plan.machine_profile);
    else llm4d_profile_default_path(path, sizeof path);
    if (sw.calibrate) {
        char self[LLM4D_PATH_MAX] = "llm4d";
        const ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
        if (k > 0) self[k] = 0;
        const llm4d_calibrate_opts o = {.profile_path = path, .hostfile = sw.hostfile, .self = self, .base = cfg,
                                        .global = cfg->global_batch_size, .max_ranks = cfg->plan.ranks_per_node * (sw.hostfile ? cfg->plan.nodes : 1),
                                        .quick = sw.quick, .budget_s = sw.budget_s, .machine = sw.machine,
                                        .grid = sw.grid};
        const llm4d_code rc = llm4d_calibrate(&o, &err);
        if (rc != LLM4D_OK) {
            code = rc == LLM4D_EUSER || rc == LLM4D_EIO ? fail(err.msg) : (fprintf(stderr, "llm4d plan: %s\n", err.msg), 1);
            goto out;
        }
        if (!sw.evaluate) {
            code = 0;
            goto out;
        }
    }
    if (llm4d_profile_load(&prof, path, &err) != LLM4D_OK || llm4d_profile_coverage(&prof, path, cfg, &err) != LLM4D_OK) {
        code = fail(err.msg);
        goto out;
    }
    const int R0 = cfg->plan.ranks_per_node;
    llm4d_cluster cl = {.nodes = cfg->plan.nodes, .ranks_per_node = R0 > 0 ? R0 : prof.cores};
    cl.threads = threads_of(cfg, &prof, cl.ranks_per_node);
    cl.memory_per_node = cfg->plan.memory_per_node_gib > 0 ? cfg->plan.memory_per_node_gib * 1024 * MiB
                                                           : prof.memory_bytes;
    cl.memory_per_rank = cfg->plan.memory_per_rank_gib > 0 ? cfg->plan.memory_per_rank_gib * 1024 * MiB
                                                           : prof.memory_per_rank_bytes;
    if (!(cl.memory_per_node > 0)) {
        code = fail("the machine profile does not say the memory per node; give --memory_per_node GiB");
        goto out;
    }
    /* the size functions of the memory plan: the cpu backend's (the only device llm4d builds today) */
    if (llm4d_backend_create(&be, &(llm4d_backend_opts){.device = "cpu", .ref = cfg->backend_ref, .nthreads = 1},
                             &err) != LLM4D_OK ||
        (cfg->use_amp && be->set_precision && be->set_precision(be, llm4d_memplan_precision(cfg), &err) != LLM4D_OK) ||
        llm4d_stagecost_cache_create(&cache, &err) != LLM4D_OK ||
        (!sw.no_memo && llm4d_memplan_memo_create(&memo, &err) != LLM4D_OK) ||
        (!sw.no_memo && llm4d_sim_memo_create(&sim, &err) != LLM4D_OK)) {
        code = fail(err.msg);
        goto out;
    }
    llm4d_stagecost_cache_by_count(cache, !sw.no_memo);
    const llm4d_predictor pr = {.prof = &prof, .be = be, .cluster = cl, .cache = cache, .memo = memo, .sim = sim,
                                .exhaustive = sw.no_memo};
    code = sw.evaluate ? run_evaluate(&pr, cfg, R0, &sw, &prof, path) : run_search(&pr, cfg, &sw, &prof, path);
out:
    llm4d_memplan_memo_destroy(memo);
    llm4d_sim_memo_destroy(sim);
    llm4d_stagecost_cache_destroy(cache);
    if (be) be->destroy(be);
    llm4d_profile_free(&prof);
    free(cfg);
    free(args);
    return code;
}

int llm4d_cmd_plancal(int argc, char **argv) { return llm4d_calibrate_worker(argc, argv); }
