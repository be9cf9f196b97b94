/* version.h — which llm4d produced a run: `git describe` of the source tree it was built from (cmake/version.cmake
 * refreshes it at every build), recorded in run.json and trace files and shown by `llm4d report`. */
#ifndef LLM4D_TRAIN_VERSION_H
#define LLM4D_TRAIN_VERSION_H

/* "b4bf68d", "b4bf68d-dirty" (uncommitted changes), or "unknown (...)" outside a git checkout. */
const char *llm4d_version(void);
/* The commit's date, "2026-11-26" ("" when unknown). */
const char *llm4d_version_date(void);

#endif
