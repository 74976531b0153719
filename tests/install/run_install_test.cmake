# cmake -DSRC=<consumer source> -DBIN=<scratch dir> -DLOOM_BUILD=<loom build tree>
#       [-DGENERATOR=<generator>] [-DCXX=<compiler>] [-DCONSUMER_LINK_FLAGS=<flags>]
#       [-DDISTRIBUTED=ON] [-DONNX=ON]
#       -P run_install_test.cmake
# Installs loom from LOOM_BUILD into BIN/prefix, builds the consumer in SRC against it with
# find_package(loom), and runs it; with DISTRIBUTED=ON also a program that links
# loom::distributed from the package, and with ONNX=ON one that exports a graph with loom::onnx.
# Fails on the first step that fails.
cmake_minimum_required(VERSION 3.20)
foreach(var SRC BIN LOOM_BUILD)
  if(NOT ${var})
    message(FATAL_ERROR "run_install_test: pass -D${var}=...")
  endif()
endforeach()

set(prefix ${BIN}/prefix)
set(consumer_build ${BIN}/consumer-build)
file(REMOVE_RECURSE ${prefix} ${consumer_build})  # start clean: no stale install can pass

function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "run_install_test: ${what} failed (${rc})")
  endif()
endfunction()

step("cmake --install" ${CMAKE_COMMAND} --install ${LOOM_BUILD} --prefix ${prefix})
set(configure_args -S ${SRC} -B ${consumer_build} -DCMAKE_BUILD_TYPE=Release
  -DCMAKE_PREFIX_PATH=${prefix}
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)  # only the prefix, never loom's build tree
if(GENERATOR)
  list(APPEND configure_args -G ${GENERATOR})
endif()
if(CXX)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER=${CXX})
endif()
if(DISTRIBUTED)
  list(APPEND configure_args -DEXPECT_DISTRIBUTED=ON)
endif()
if(ONNX)
  list(APPEND configure_args -DEXPECT_ONNX=ON)
endif()
if(CONSUMER_LINK_FLAGS)
  list(APPEND configure_args -DCMAKE_EXE_LINKER_FLAGS=${CONSUMER_LINK_FLAGS})
endif()
step("configuring the consumer" ${CMAKE_COMMAND} ${configure_args})

# The consumer must have found the loom just installed, not another one on the system.
file(STRINGS ${consumer_build}/CMakeCache.txt loom_dir REGEX "^loom_DIR:")
string(REGEX REPLACE "^loom_DIR:[A-Z]+=" "" loom_dir "${loom_dir}")
file(REAL_PATH "${loom_dir}" loom_dir)
file(REAL_PATH "${prefix}" real_prefix)
string(FIND "${loom_dir}" "${real_prefix}/" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "run_install_test: found loom in ${loom_dir}, not under ${prefix}")
endif()

step("building the consumer" ${CMAKE_COMMAND} --build ${consumer_build})
step("running the consumer" ${consumer_build}/loom_consumer)
if(DISTRIBUTED)
  step("running the loom::distributed consumer" ${consumer_build}/loom_distributed_consumer)
endif()
if(ONNX)
  step("running the loom::onnx consumer" ${consumer_build}/loom_onnx_consumer ${BIN}/consumer.onnx)
endif()
