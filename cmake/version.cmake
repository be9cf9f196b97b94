# version.cmake — writes OUT, a header defining LLM4D_VERSION from `git describe` of the source tree SRC (with
# "-dirty" for uncommitted changes), run by the llm4d_version target at every build. The file is rewritten only when
# the text changes, so the one source that includes it (src/train/version.c) recompiles only then. A tree that is
# not a git checkout says so.
execute_process(COMMAND git -C "${SRC}" describe --always --dirty --tags
                OUTPUT_VARIABLE v OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR v STREQUAL "")
  set(v "unknown (not built from a git checkout)")
endif()
execute_process(COMMAND git -C "${SRC}" log -1 --format=%cs
                OUTPUT_VARIABLE d OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  set(d "")
endif()
set(text "#define LLM4D_VERSION \"${v}\"\n#define LLM4D_VERSION_DATE \"${d}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
