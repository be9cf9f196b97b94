/* fs.c — `mkdir -p`, complete writes, directory fsync (see fs.h). */
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
