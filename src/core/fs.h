/* fs.h — small file-system helpers shared by the layers that create directories and write files durably
 * (checkpoints, output and log directories, exports, the launcher's pipes). */
#ifndef LLM4D_CORE_FS_H
#define LLM4D_CORE_FS_H

#include <sys/types.h>

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

#endif
