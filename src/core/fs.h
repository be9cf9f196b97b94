/* fs.h — small file-system helpers shared by the layers that create directories and write files durably
 * (checkpoints, output and log directories, exports, the launcher's pipes).
 *
 * The llm4d_fs_* functions are the operations of a durable save (create, write, fsync, rename), each counted by an
 * optional fault-injection value (core/fault.h; NULL: none): when the count reaches the injected operation it fails
 * as the system call would, errno set and nothing done, so the caller's real error path runs. */
#ifndef LLM4D_CORE_FS_H
#define LLM4D_CORE_FS_H

#include <sys/types.h>

#include "core/fault.h"

/* `mkdir -p`: create path and its missing parents with mode (umask applies). Returns 0 when path is a directory
 * afterwards; -1 with errno set otherwise (ENOTDIR when path, or a parent, exists and is not a directory;
 * ENAMETOOLONG for a path longer than PATH_MAX). */
int llm4d_mkdir_p(const char *path, mode_t mode);

/* Write all n bytes of p to fd, retrying short writes and EINTR (at most 1 GiB per write(2): Linux caps a call
 * near 2 GiB). Returns 0, or -1 with errno set (EIO when write makes no progress). */
int llm4d_write_all(int fd, const void *p, size_t n);

/* fsync the directory dir, so that entries created or renamed in it survive a crash. Returns 0, or -1 with
 * errno set. */
int llm4d_fsync_dir(const char *dir);

/* What the user can do about a failed write, by its errno ("free some disk space or write elsewhere", ...): the
 * fix part of a one-line message. */
const char *llm4d_fs_fix(int e);

/* mkdir(path, mode) (a create operation). */
int llm4d_fs_mkdir(llm4d_fault *f, const char *path, mode_t mode);
/* open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode) (a create operation); the descriptor or -1. */
int llm4d_fs_create(llm4d_fault *f, const char *path, mode_t mode);
/* llm4d_write_all (a write operation). */
int llm4d_fs_write(llm4d_fault *f, int fd, const void *p, size_t n);
/* fsync(fd) and llm4d_fsync_dir(dir) (fsync operations). */
int llm4d_fs_fsync(llm4d_fault *f, int fd);
int llm4d_fs_fsync_dir(llm4d_fault *f, const char *dir);
/* rename(from, to) (a rename operation). */
int llm4d_fs_rename(llm4d_fault *f, const char *from, const char *to);

#endif
