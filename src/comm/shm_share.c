/* shm_share.c — a buffer moved into shared memory in place, its host peers' mapped beside it (see shm_share.h). */
#define _GNU_SOURCE /* mremap */
#include "comm/shm_share.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/fault.h"

#define PAGE ((size_t)4096)
#define NAME_N 48

/* A private copy of the region's contents moved over it: the buffer is the owner's own memory again. */
static void restore_private(char *base, size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    LLM4D_ASSERT(p != MAP_FAILED, "no memory to take a shared buffer of %zu bytes back: %s", bytes, strerror(errno));
    memcpy(p, base, bytes);
    LLM4D_ASSERT(mremap(p, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, base) != MAP_FAILED,
                 "mremap of a shared buffer back: %s", strerror(errno));
}

/* The own buffer into a new shared file, mapped over it; *why set when it cannot be (nothing changed then).
 * injected: the errno the reservation fails with (core/fault.h shmshare), or 0. */
static void share_own(char *base, size_t bytes, const char *name, int injected, char *why, size_t why_n) {
    const int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
        snprintf(why, why_n, "shm_open %s: %s", name, strerror(errno));
        return;
    }
    /* a full /dev/shm fails here, not with SIGBUS later */
    const int e = injected ? injected : posix_fallocate(fd, 0, (off_t)bytes);
    void *tmp = e ? MAP_FAILED : mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (e) {
        snprintf(why, why_n, "a %.0f MiB gradient buffer does not fit in /dev/shm (%s; %.0f MiB free there); enlarge "
                 "it (docker run --shm-size=...)", (double)bytes / 1048576.0, strerror(e), llm4d_shm_free_mib());
    } else if (tmp == MAP_FAILED) {
        snprintf(why, why_n, "mmap of %s: %s", name, strerror(errno));
    } else {
        memcpy(tmp, base, bytes);
        munmap(tmp, bytes);
        if (mmap(base, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
            snprintf(why, why_n, "mmap over the buffer: %s", strerror(errno)); /* MAP_FIXED failing leaves it */
    }
    close(fd);
    if (why[0]) shm_unlink(name);
}

static void unmap_peers(llm4d_shm_region *reg, int self) {
    for (int j = 0; j < reg->n; j++)
        if (j != self && reg->at[j]) munmap(reg->at[j], reg->bytes), reg->at[j] = NULL;
}

llm4d_code llm4d_shm_region_make(llm4d_comm *c, void *buf, size_t bytes, unsigned id, llm4d_shm_region **out,
                                 char *why, size_t why_n, llm4d_err *err) {
    *out = NULL;
    why[0] = 0;
    const int n = c->size, r = c->rank;
    llm4d_shm_region *reg = calloc(1, sizeof *reg);
    char *names = calloc((size_t)n, NAME_N);
    int64_t size[2] = {-(int64_t)bytes, (int64_t)bytes}; /* the smallest as the largest of the negated, the largest */
    llm4d_code rc = reg && names ? LLM4D_OK : llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    if (rc == LLM4D_OK) rc = c->ops->allreduce(c, size, 2, LLM4D_COMM_I64, LLM4D_COMM_MAX, err);
    if (rc != LLM4D_OK) goto out;
    const int64_t lo = -size[0], hi = size[1];
    if (n > LLM4D_SHM_MAX_RANKS) snprintf(why, why_n, "more than %d ranks on a host", LLM4D_SHM_MAX_RANKS);
    else if (lo != hi) snprintf(why, why_n, "the ranks' buffers differ in size (%lld and %lld bytes)", (long long)lo,
                                (long long)hi);
    else if (!bytes || (uintptr_t)buf % PAGE || bytes % PAGE)
        snprintf(why, why_n, "the buffer is not whole pages (%p, %zu bytes)", buf, bytes);
    char name[NAME_N] = "";
    snprintf(name, sizeof name, "/llm4d-%d-b%u", (int)getpid(), id);
    llm4d_fault f;
    llm4d_err ferr;
    const int injected =
        llm4d_fault_from_env(&f, c->world_rank, &ferr) == LLM4D_OK ? llm4d_fault_hit(&f, LLM4D_FAULT_SHMSHARE) : 0;
    if (!why[0]) share_own(buf, bytes, name, injected, why, why_n);
    const int shared = !why[0];
    int ok = 0;
    if ((rc = llm4d_shm_agree(c, why, &ok, err)) != LLM4D_OK) goto out;
    if (ok) rc = c->ops->allgather(c, name, names, NAME_N, LLM4D_COMM_BYTE, err);
    reg->base = buf, reg->bytes = bytes, reg->n = n, reg->self = r, reg->at[r] = buf;
    for (int j = 0; ok && rc == LLM4D_OK && j < n && !why[0]; j++) {
        if (j == r) continue;
        const int fd = shm_open(names + (size_t)j * NAME_N, O_RDWR, 0600);
        void *p = fd < 0 ? MAP_FAILED : mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) snprintf(why, why_n, "mapping rank %d's buffer %s: %s", j, names + (size_t)j * NAME_N,
                                      strerror(errno));
        else reg->at[j] = p;
        if (fd >= 0) close(fd);
    }
    if (ok && rc == LLM4D_OK) rc = c->ops->barrier(c, err); /* every rank has mapped every file (or failed) */
    if (shared) shm_unlink(name);
    if (ok && rc == LLM4D_OK) rc = llm4d_shm_agree(c, why, &ok, err);
    if (rc == LLM4D_OK && !ok && !why[0]) snprintf(why, why_n, "another rank of the group could not share its buffer");
    if (rc == LLM4D_OK && ok) {
        *out = reg;
        reg = NULL;
    } else if (reg) {
        unmap_peers(reg, r);
        if (shared) restore_private(buf, bytes);
    }
out:
    free(reg);
    free(names);
    return rc;
}

void llm4d_shm_region_give_back(llm4d_shm_region *reg) {
    if (reg->given_back) return;
    restore_private(reg->base, reg->bytes);
    reg->given_back = 1;
}

void llm4d_shm_region_free(llm4d_shm_region *reg) {
    if (!reg) return;
    llm4d_shm_region_give_back(reg);
    unmap_peers(reg, reg->self);
    free(reg);
}
