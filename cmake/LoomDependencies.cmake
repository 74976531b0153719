# Third-party dependencies, all Debian packages (scripts/setup installs them).
# Third-party headers are included as system headers so that their warnings stay theirs.
find_package(TBB REQUIRED)
find_package(Boost 1.74 REQUIRED)
find_package(nlohmann_json 3 REQUIRED)  # safetensors headers (header-only, private to loom)
set_target_properties(TBB::tbb Boost::headers PROPERTIES SYSTEM TRUE)

# OpenBLAS, its pthread build, which loom limits to one thread per call (ops/blas.cpp) so that
# only TBB runs things in parallel. Not the serial build: Debian's serial OpenBLAS is not safe
# to call from several threads at once (it returned wrong results under concurrent calls).
find_path(LOOM_CBLAS_INCLUDE_DIR cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas
  NO_DEFAULT_PATH)
find_library(LOOM_OPENBLAS_LIBRARY NAMES openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-pthread
  NO_DEFAULT_PATH)
if(NOT LOOM_CBLAS_INCLUDE_DIR OR NOT LOOM_OPENBLAS_LIBRARY)
  message(FATAL_ERROR "loom needs OpenBLAS's pthread build (Debian: libopenblas-pthread-dev); run scripts/setup")
endif()
if(NOT TARGET loom_blas)
  add_library(loom_blas INTERFACE)
  target_include_directories(loom_blas SYSTEM INTERFACE ${LOOM_CBLAS_INCLUDE_DIR})
  target_link_libraries(loom_blas INTERFACE ${LOOM_OPENBLAS_LIBRARY})
endif()
