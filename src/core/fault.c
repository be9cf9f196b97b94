/* fault.c — parsing LLM4D_FAULT and counting operations (see fault.h). */
#include "core/fault.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int error;
    llm4d_fault_op dflt; /* the operation this error usually comes from */
} errors[] = {
    {"enospc", ENOSPC, LLM4D_FAULT_WRITE}, {"eio", EIO, LLM4D_FAULT_WRITE},       {"edquot", EDQUOT, LLM4D_FAULT_WRITE},
    {"eacces", EACCES, LLM4D_FAULT_CREATE}, {"erofs", EROFS, LLM4D_FAULT_CREATE},
};

static const char *const ops[] = {[LLM4D_FAULT_WRITE] = "write", [LLM4D_FAULT_FSYNC] = "fsync",
                                  [LLM4D_FAULT_CREATE] = "create", [LLM4D_FAULT_RENAME] = "rename"};

#define FORMS                                                                                                     \
    "<enospc|eio|eacces|erofs|edquot>[:<write|fsync|create|rename>]@N, collective@STEP, crash@STEP, cma@1, "   \
    "shmshare@1, bf16slow@1 or bf16fast@1"

llm4d_code llm4d_fault_from_env(llm4d_fault *f, int rank, llm4d_err *err) {
    memset(f, 0, sizeof *f);
    const char *v = getenv("LLM4D_FAULT");
    if (!v || !*v) return LLM4D_OK;
    const char *r = getenv("LLM4D_FAULT_RANK");
    if (r && *r && atoi(r) != rank) return LLM4D_OK;
    snprintf(f->spec, sizeof f->spec, "%s", v);
    const char *at = strchr(v, '@');
    char *end = NULL;
    long long n = at ? strtoll(at + 1, &end, 10) : 0;
    if (!at || end == at + 1 || *end || n < 1)
        return llm4d_fail(err, LLM4D_EUSER, "LLM4D_FAULT '%s' is not " FORMS " (N >= 1)", v);
    f->at = n;
    const size_t len = (size_t)(at - v);
    if (len == 10 && strncmp(v, "collective", 10) == 0) {
        f->op = LLM4D_FAULT_COLLECTIVE;
        f->error = EIO;
        return LLM4D_OK;
    }
    if (len == 5 && strncmp(v, "crash", 5) == 0) {
        f->op = LLM4D_FAULT_CRASH;
        return LLM4D_OK;
    }
    if (len == 3 && strncmp(v, "cma", 3) == 0) {
        f->op = LLM4D_FAULT_CMA;
        f->error = EPERM;
        return LLM4D_OK;
    }
    if (len == 8 && strncmp(v, "shmshare", 8) == 0) {
        f->op = LLM4D_FAULT_SHMSHARE;
        f->error = ENOSPC;
        return LLM4D_OK;
    }
    if (len == 8 && strncmp(v, "bf16slow", 8) == 0) {
        f->op = LLM4D_FAULT_BF16SLOW;
        return LLM4D_OK;
    }
    if (len == 8 && strncmp(v, "bf16fast", 8) == 0) {
        f->op = LLM4D_FAULT_BF16FAST;
        return LLM4D_OK;
    }
    const char *colon = memchr(v, ':', len);
    const size_t elen = colon ? (size_t)(colon - v) : len;
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        if (strlen(errors[i].name) != elen || strncmp(v, errors[i].name, elen) != 0) continue;
        f->error = errors[i].error;
        f->op = errors[i].dflt;
        if (!colon) return LLM4D_OK;
        const size_t olen = (size_t)(at - colon - 1);
        for (int o = LLM4D_FAULT_WRITE; o <= LLM4D_FAULT_RENAME; o++)
            if (strlen(ops[o]) == olen && strncmp(colon + 1, ops[o], olen) == 0) {
                f->op = (llm4d_fault_op)o;
                return LLM4D_OK;
            }
        break;
    }
    memset(f, 0, sizeof *f);
    return llm4d_fail(err, LLM4D_EUSER, "LLM4D_FAULT '%s' is not " FORMS, v);
}

int llm4d_fault_hit(llm4d_fault *f, llm4d_fault_op op) {
    if (!f || f->op != op || op == LLM4D_FAULT_COLLECTIVE || op == LLM4D_FAULT_CRASH) return 0;
    return ++f->count == f->at ? f->error : 0;
}
