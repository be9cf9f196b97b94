/* host_check.c — which ranks share a host, and what the host gives them: single copy, /dev/shm (see
 * host_check.h). */
#define _GNU_SOURCE /* process_vm_readv */
#include "comm/host_check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/fault.h"

static uint32_t fnv1a(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

llm4d_code llm4d_host_split(llm4d_comm *c, llm4d_comm **local, int *same, llm4d_err *err) {
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    *local = NULL;
    LLM4D_TRY(c->ops->split(c, (int)(fnv1a(host) & 0x7fffffff), c->rank, "host", local, err));
    char *names = calloc((size_t)(*local)->size, sizeof host);
    if (!names) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    llm4d_code rc = (*local)->ops->allgather(*local, host, names, sizeof host, LLM4D_COMM_BYTE, err);
    *same = 1;
    for (int j = 0; rc == LLM4D_OK && j < (*local)->size; j++)
        if (strncmp(names + (size_t)j * sizeof host, host, sizeof host)) *same = 0;
    free(names);
    return rc;
}

/* What a host's first rank found, gathered by world rank 0. */
typedef struct {
    char host[64];
    int32_t leader;       /* 1: a host's first rank filled this */
    int32_t ranks;        /* the host's ranks */
    int32_t cma_errno;    /* process_vm_readv between its first two ranks: 0 worked (or one rank) */
    int32_t ptrace_scope; /* kernel.yama.ptrace_scope, -1 without Yama */
    int64_t shm_free, shm_total; /* bytes of /dev/shm, -1 without it */
} host_rec;

static int read_ptrace_scope(void) {
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    int v = -1;
    if (f) {
        if (fscanf(f, "%d", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

/* The host's second rank shows a buffer; the first reads it through the kernel, as Open MPI's single copy does. */
static llm4d_code probe_cma(llm4d_comm *local, int world_rank, int *cma_errno, llm4d_err *err) {
    *cma_errno = 0;
    if (local->size < 2 || local->rank > 1) return LLM4D_OK;
    char pattern[64];
    for (int i = 0; i < 64; i++) pattern[i] = (char)(i * 7 + 3);
    int64_t where[2] = {(int64_t)getpid(), (int64_t)(intptr_t)pattern};
    if (local->rank == 1) {
        LLM4D_TRY(local->ops->send(local, where, 2, LLM4D_COMM_I64, 0, 0, err));
        int32_t done = 0; /* keep the pattern alive until it has been read */
        return local->ops->recv(local, &done, 4, LLM4D_COMM_BYTE, 0, 1, err);
    }
    LLM4D_TRY(local->ops->recv(local, where, 2, LLM4D_COMM_I64, 1, 0, err));
    char got[64] = {0};
    const struct iovec mine = {got, sizeof got}, theirs = {(void *)(intptr_t)where[1], sizeof got};
    llm4d_fault f;
    llm4d_err ferr = {0};
    if (llm4d_fault_from_env(&f, world_rank, &ferr) == LLM4D_OK && f.op == LLM4D_FAULT_CMA) *cma_errno = f.error;
    else if (process_vm_readv((pid_t)where[0], &mine, 1, &theirs, 1, 0) != (ssize_t)sizeof got) *cma_errno = errno;
    else if (memcmp(got, pattern, sizeof got)) *cma_errno = EFAULT;
    int32_t done = 1;
    return local->ops->send(local, &done, 4, LLM4D_COMM_BYTE, 1, 1, err);
}

/* "a, b and 2 more" from the hosts flagged in keep[] */
static void host_list(const host_rec *r, const int *keep, int n, char *buf, size_t bn) {
    size_t k = 0;
    int shown = 0, total = 0;
    for (int i = 0; i < n; i++) total += keep[i];
    buf[0] = 0;
    for (int i = 0; i < n && k < bn; i++) {
        if (!keep[i]) continue;
        if (shown == 3) {
            snprintf(buf + k, bn - k, " and %d more", total - shown);
            return;
        }
        k += (size_t)snprintf(buf + k, bn - k, "%s%s", shown ? ", " : "", r[i].host);
        shown++;
    }
}

llm4d_code llm4d_host_check(llm4d_comm *world, const llm4d_log *log, int *problems, llm4d_err *err) {
    *problems = 0;
    llm4d_comm *local = NULL;
    int same = 1;
    LLM4D_TRY(llm4d_host_split(world, &local, &same, err));
    host_rec mine = {0};
    int cma = 0;
    llm4d_code rc = probe_cma(local, world->rank, &cma, err);
    if (rc == LLM4D_OK && local->rank == 0) {
        gethostname(mine.host, sizeof mine.host - 1);
        mine.leader = 1;
        mine.ranks = local->size;
        mine.cma_errno = cma;
        mine.ptrace_scope = read_ptrace_scope();
        struct statvfs sv;
        mine.shm_free = mine.shm_total = -1;
        if (statvfs("/dev/shm", &sv) == 0) {
            mine.shm_free = (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
            mine.shm_total = (int64_t)sv.f_blocks * (int64_t)sv.f_frsize;
        }
    }
    llm4d_comm_destroy(local);
    host_rec *all = rc == LLM4D_OK ? calloc((size_t)world->size, sizeof *all) : NULL;
    int *flag = all ? calloc((size_t)world->size, sizeof *flag) : NULL;
    if (rc == LLM4D_OK && !flag) rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    if (rc == LLM4D_OK) rc = world->ops->allgather(world, &mine, all, sizeof mine, LLM4D_COMM_BYTE, err);
    for (int pass = 0; rc == LLM4D_OK && pass < 2; pass++) {
        int first = -1, n = 0;
        for (int i = 0; i < world->size; i++) {
            flag[i] = all[i].leader && (pass == 0 ? all[i].cma_errno != 0
                                                  : all[i].shm_free >= 0 && all[i].shm_free < LLM4D_SHM_LOW_BYTES);
            if (flag[i] && first < 0) first = i;
            n += flag[i];
        }
        if (!n) continue;
        (*problems)++;
        if (world->rank != 0) continue;
        char hosts[256];
        host_list(all, flag, world->size, hosts, sizeof hosts);
        const host_rec *h = &all[first];
        if (pass == 0) {
            char yama[96] = "no Yama ptrace_scope: a container without CAP_SYS_PTRACE?";
            if (h->ptrace_scope >= 0) snprintf(yama, sizeof yama, "kernel.yama.ptrace_scope = %d", h->ptrace_scope);
            llm4d_log_info(log, "WARNING: single copy is off between the ranks of %s (process_vm_readv: %s; %s): Open "
                           "MPI's transfers between them take two copies through its shared segments (issue 27 "
                           "measured data parallel 27 %% slower), or fail with 'Read -1, expected ..., errno = 1'; "
                           "llm4d's shared-memory collectives (comm_path auto) do not need it, the pipeline's "
                           "transfers do. Remedy: docker run --cap-add SYS_PTRACE, or sysctl -w "
                           "kernel.yama.ptrace_scope=0 (if Open MPI fails: export "
                           "OMPI_MCA_btl_vader_single_copy_mechanism=none)",
                           hosts, strerror(h->cma_errno), yama);
        } else {
            llm4d_log_info(log, "WARNING: /dev/shm on %s has %.0f MiB free of %.0f MiB: the shared-memory segments "
                           "of Open MPI and of llm4d's collectives live there, and a segment that does not fit makes "
                           "its group fall back to MPI (slower) or Open MPI fail. Remedy: docker run --shm-size=1g, "
                           "or mount -o remount,size=1G /dev/shm",
                           hosts, (double)h->shm_free / 1048576.0, (double)h->shm_total / 1048576.0);
        }
    }
    free(all);
    free(flag);
    (void)same;
    return rc;
}
