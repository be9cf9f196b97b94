/* fs.h — small file-system helpers shared by the layers that create directories (checkpoints, output and log
 * directories, exports). */
#ifndef LLM4D_CORE_FS_H
#define LLM4D_CORE_FS_H

#include <sys/types.h>

/* `mkdir -p`: create path and its missing parents with mode (umask applies). Returns 0 when path is a directory
 * afterwards; -1 with errno set otherwise (ENOTDIR when path, or a parent, exists and is not a directory;
 * ENAMETOOLONG for a path longer than PATH_MAX). */
int llm4d_mkdir_p(const char *path, mode_t mode);

#endif
