/* fs.c — `mkdir -p`, complete writes, directory fsync, and the fault-counted operations of a save (see fs.h). */
#include "core/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int llm4d_mkdir_p(const char *path, mode_t mode) {
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/') tmp[--n] = 0;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, mode) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(tmp, mode) != 0) {
        if (errno != EEXIST) return -1;
        struct stat st;
        if (stat(tmp, &st) != 0) return -1;
        if (!S_ISDIR(st.st_mode)) {
            errno = ENOTDIR;
            return -1;
        }
    }
    return 0;
}

int llm4d_write_all(int fd, const void *p, size_t n) {
    const char *b = p;
    while (n > 0) {
        const ssize_t k = write(fd, b, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) errno = EIO;
            return -1;
        }
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

int llm4d_fsync_dir(const char *dir) {
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    const int rc = fsync(fd);
    const int e = errno;
    close(fd);
    errno = e;
    return rc;
}

const char *llm4d_fs_fix(int e) {
    switch (e) {
    case ENOSPC:
    case EDQUOT: return "free some disk space or write elsewhere";
    case EACCES:
    case EPERM:
    case EROFS: return "make the directory writable again or write elsewhere";
    case EIO: return "the storage reported an I/O error: check it (dmesg) or write elsewhere";
    default: return "check that file system or write elsewhere";
    }
}

/* 0 to go on; -1 with errno set when f injects a failure into this operation. */
static int injected(llm4d_fault *f, llm4d_fault_op op) {
    const int e = llm4d_fault_hit(f, op);
    if (!e) return 0;
    errno = e;
    return -1;
}

int llm4d_fs_mkdir(llm4d_fault *f, const char *path, mode_t mode) {
    return injected(f, LLM4D_FAULT_CREATE) ? -1 : mkdir(path, mode);
}

int llm4d_fs_create(llm4d_fault *f, const char *path, mode_t mode) {
    return injected(f, LLM4D_FAULT_CREATE) ? -1 : open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
}

int llm4d_fs_write(llm4d_fault *f, int fd, const void *p, size_t n) {
    return injected(f, LLM4D_FAULT_WRITE) ? -1 : llm4d_write_all(fd, p, n);
}

int llm4d_fs_fsync(llm4d_fault *f, int fd) { return injected(f, LLM4D_FAULT_FSYNC) ? -1 : fsync(fd); }

int llm4d_fs_fsync_dir(llm4d_fault *f, const char *dir) {
    return injected(f, LLM4D_FAULT_FSYNC) ? -1 : llm4d_fsync_dir(dir);
}

int llm4d_fs_rename(llm4d_fault *f, const char *from, const char *to) {
    return injected(f, LLM4D_FAULT_RENAME) ? -1 : rename(from, to);
}
