# Finds OpenBLAS's pthread build and makes sure that it is that build. Sets the cache variables
# LOOM_OPENBLAS_LIBRARY (the library file) and LOOM_CBLAS_INCLUDE_DIR (the folder of its
# cblas.h), or LOOM_OPENBLAS_ERROR (what went wrong) when it cannot. Used by loom's build and by
# the installed loomConfig.cmake: libloom.a calls BLAS, so loom's users link OpenBLAS too.
# To choose another OpenBLAS, set LOOM_OPENBLAS_LIBRARY and LOOM_CBLAS_INCLUDE_DIR.
#
# Why the pthread build: loom calls BLAS from many TBB tasks at once, each call on one OpenBLAS
# thread (ops/blas.cpp). Debian's serial build is not safe to call that way: it returned wrong
# results under concurrent calls (docs/design-notes.md).

# Where: pkg-config's `openblas` first (on Debian, the build update-alternatives selects), then
# the usual places. The pthread build's own folder (Debian: lib/<arch>/openblas-pthread) or name
# (Fedora: libopenblasp) comes before a plain libopenblas in the same place.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_search_module(LOOM_PC_OPENBLAS QUIET openblas)
endif()
find_library(LOOM_OPENBLAS_LIBRARY NAMES openblasp openblas NAMES_PER_DIR
  HINTS ${LOOM_PC_OPENBLAS_LIBRARY_DIRS} PATH_SUFFIXES openblas-pthread
  DOC "OpenBLAS, its pthread build (loom checks which build it is)")
find_path(LOOM_CBLAS_INCLUDE_DIR cblas.h
  HINTS ${LOOM_PC_OPENBLAS_INCLUDE_DIRS} PATH_SUFFIXES openblas-pthread openblas
  DOC "The folder of OpenBLAS's cblas.h")

# Which build it is, asked of the library itself: openblas_get_parallel() (in every OpenBLAS
# since 0.2) answers 0 for the serial build, 1 for the pthread build, 2 for the OpenMP build.
# A file's name or folder says where the library was installed, not how it was built, and on
# Debian the name libopenblas.so.0 is resolved at run time; so a small program is linked exactly
# as loom's users are (by path, with its rpath) and run. Checked once per library path.
unset(LOOM_OPENBLAS_ERROR)
if(NOT LOOM_OPENBLAS_LIBRARY)
  string(CONCAT LOOM_OPENBLAS_ERROR "loom needs OpenBLAS's pthread build (Debian: "
    "libopenblas-pthread-dev, which scripts/setup installs) and found no OpenBLAS. "
    "Set LOOM_OPENBLAS_LIBRARY to its library file.")
elseif(NOT LOOM_OPENBLAS_CHECKED STREQUAL LOOM_OPENBLAS_LIBRARY)
  set(loom_check_dir ${CMAKE_BINARY_DIR}/CMakeFiles/loom_openblas_check)
  file(WRITE ${loom_check_dir}/openblas_build.cpp [[
#include <cstdio>
extern "C" int openblas_get_parallel();
extern "C" char* openblas_get_config();
int main() {
  std::printf("%s", openblas_get_config());
  return openblas_get_parallel();
}
]])
  try_run(LOOM_OPENBLAS_PARALLEL loom_check_compiled ${loom_check_dir}/build
    ${loom_check_dir}/openblas_build.cpp
    LINK_LIBRARIES ${LOOM_OPENBLAS_LIBRARY}
    COMPILE_OUTPUT_VARIABLE loom_check_compile_output
    RUN_OUTPUT_VARIABLE loom_openblas_config)
  if(NOT loom_check_compiled)
    string(CONCAT LOOM_OPENBLAS_ERROR "${LOOM_OPENBLAS_LIBRARY} is not OpenBLAS: a program "
      "calling openblas_get_parallel() does not link with it:\n${loom_check_compile_output}")
  elseif(NOT LOOM_OPENBLAS_PARALLEL STREQUAL "1")
    if(LOOM_OPENBLAS_PARALLEL STREQUAL "0")
      set(loom_build "the serial build")
    elseif(LOOM_OPENBLAS_PARALLEL STREQUAL "2")
      set(loom_build "the OpenMP build")
    else()
      set(loom_build "not the pthread build (openblas_get_parallel: ${LOOM_OPENBLAS_PARALLEL})")
    endif()
    string(CONCAT LOOM_OPENBLAS_ERROR "${LOOM_OPENBLAS_LIBRARY} is ${loom_build} of OpenBLAS "
      "(${loom_openblas_config}). loom calls BLAS from several threads at once and needs the "
      "pthread build (Debian: libopenblas-pthread-dev): set LOOM_OPENBLAS_LIBRARY to it.")
  else()
    set(LOOM_OPENBLAS_CHECKED ${LOOM_OPENBLAS_LIBRARY} CACHE INTERNAL "The OpenBLAS checked to be the pthread build")
    message(STATUS "OpenBLAS, pthread build: ${LOOM_OPENBLAS_LIBRARY} (${loom_openblas_config})")
  endif()
endif()
