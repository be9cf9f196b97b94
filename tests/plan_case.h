/* plan_case.h — what the planner's whole-search tests (test_plan_bound, test_plan_membound) set up for one case: the
 * configuration from `llm4d plan`'s flags, a machine profile, a one-thread CPU backend in the case's precision and a
 * trace cache counting by kernel, and CASE_ARGS, the flags written inline. Failures are checks (check.h). */
#ifndef LLM4D_TESTS_PLAN_CASE_H
#define LLM4D_TESTS_PLAN_CASE_H

#include <stdlib.h>

#include "check.h"
#include "plan/memplan.h"
#include "plan/profile.h"
#include "plan/stagecost.h"

typedef struct {
    llm4d_config *base, *cfg; /* the flags' configuration; a scratch one for each layout */
    llm4d_profile prof;
    llm4d_backend *be;
    llm4d_stagecost_cache *cache;
} plan_case;

/* argv/argc: the case's flags. 0 when something could not be set up (a failed check says what). */
static inline int plan_case_open(plan_case *c, const char *name, const char *prof_path, char **argv, int argc) {
    llm4d_err err = {0};
    c->base = calloc(1, sizeof *c->base), c->cfg = calloc(1, sizeof *c->cfg);
    llm4d_profile_init(&c->prof);
    c->be = NULL, c->cache = NULL;
    if (!c->base || !c->cfg) {
        check(0, "%s: set up: out of memory", name);
        return 0;
    }
    llm4d_config_defaults(c->base);
    if (llm4d_config_parse_args(c->base, argc, argv, &err) != LLM4D_OK ||
        llm4d_profile_load(&c->prof, prof_path, &err) ||
        llm4d_backend_create(&c->be, &(llm4d_backend_opts){.device = "cpu", .ref = c->base->backend_ref,
                                                           .nthreads = 1}, &err) != LLM4D_OK ||
        (c->base->use_amp && c->be->set_precision(c->be, llm4d_memplan_precision(c->base), &err) != LLM4D_OK) ||
        llm4d_stagecost_cache_create(&c->cache, &err) != LLM4D_OK) {
        check(0, "%s: set up: %s", name, err.msg);
        return 0;
    }
    llm4d_stagecost_cache_by_count(c->cache, 1);
    return 1;
}

static inline void plan_case_close(plan_case *c) {
    llm4d_stagecost_cache_destroy(c->cache);
    if (c->be) c->be->destroy(c->be);
    llm4d_profile_free(&c->prof);
    free(c->base), free(c->cfg);
}

/* CASE_ARGS("--flag", "value", ...): the flags as argv and argc */
#define CASE_ARGV(...) ((char *[]){__VA_ARGS__})
#define CASE_ARGC(...) ((int)(sizeof((char *[]){__VA_ARGS__}) / sizeof(char *)))
#define CASE_ARGS(...) CASE_ARGV(__VA_ARGS__), CASE_ARGC(__VA_ARGS__)

#endif
