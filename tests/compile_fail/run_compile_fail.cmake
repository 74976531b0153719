# Builds TARGET in BUILD_DIR and passes only if the build fails with a message that matches
# EXPECT and is at most MAX_BYTES long (only the compiler's diagnostics for TARGET's source are
# counted, see below).
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${TARGET}
  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}${err}")
if(result EQUAL 0)
  message(FATAL_ERROR "${TARGET} compiled, but it must not")
endif()
if(NOT all MATCHES "${EXPECT}")
  message(FATAL_ERROR "${TARGET} failed to compile, but without the expected message\n"
                      "expected: ${EXPECT}\n--- output ---\n${all}")
endif()
# the diagnostics: what the compiler printed for TARGET's source — the output after the build
# tool's line naming TARGET's object (a rebuild of loom before it is not counted), without the
# build tool's own lines ("gmake[2]: *** ...", "FAILED: ...", the command), paths relative to
# SOURCE_DIR
set(diag "${all}")
string(FIND "${all}" "${TARGET}.dir/" at)
if(at GREATER -1)
  string(SUBSTRING "${all}" ${at} -1 diag)
  string(FIND "${diag}" "\n" eol)
  if(eol GREATER -1)
    math(EXPR eol "${eol} + 1")
    string(SUBSTRING "${diag}" ${eol} -1 diag)
  endif()
endif()
string(REGEX REPLACE "(^|\n)(g?make|ninja)(\\[[0-9]+\\])?: [^\n]*" "\\1" diag "${diag}")
string(REGEX REPLACE "(^|\n)FAILED: [^\n]*" "\\1" diag "${diag}")
# the build tool's echo of the compile command is not a diagnostic
string(REGEX REPLACE "(^|\n)[^\n]* -o [^\n]* -c [^\n]*" "\\1" diag "${diag}")
# paths as the project names them, so that the size does not depend on where it is checked out
if(SOURCE_DIR)
  string(REPLACE "${SOURCE_DIR}/" "" diag "${diag}")
endif()
string(REGEX REPLACE "\n\n+" "\n" diag "${diag}")
string(LENGTH "${diag}" bytes)
if(bytes GREATER MAX_BYTES)
  message(FATAL_ERROR "${TARGET}: the error output is ${bytes} bytes, more than ${MAX_BYTES}\n--- output ---\n${diag}")
endif()
message(STATUS "${TARGET}: failed to compile as expected; ${bytes} bytes of output")
