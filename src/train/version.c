/* version.c — the build's version (see version.h); the header is generated into the build directory. */
#include "train/version.h"

#include "llm4d_version.h"

const char *llm4d_version(void) { return LLM4D_VERSION; }
const char *llm4d_version_date(void) { return LLM4D_VERSION_DATE; }
