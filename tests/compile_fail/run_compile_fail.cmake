# Builds TARGET in BUILD_DIR and passes only if the build fails with a message that matches
# EXPECT and is at most MAX_BYTES long (only the compiler's diagnostics are counted).
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
# the diagnostics: lines from the compiler (file:line: ... or indented context), not make's
string(REGEX MATCHALL "[^\n]*(error|note|required from|In instantiation|In function)[^\n]*\n" diag "${all}")
string(LENGTH "${all}" bytes)
if(bytes GREATER MAX_BYTES)
  message(FATAL_ERROR "${TARGET}: the error output is ${bytes} bytes, more than ${MAX_BYTES}")
endif()
message(STATUS "${TARGET}: failed to compile as expected; ${bytes} bytes of output")
