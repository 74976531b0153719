# Third-party dependencies, all Debian packages (scripts/setup installs them).
# Third-party headers are included as system headers so that their warnings stay theirs.
find_package(TBB REQUIRED)
find_package(Boost 1.74 REQUIRED)
find_package(nlohmann_json 3 REQUIRED)  # safetensors headers (header-only, private to loom)
set_target_properties(TBB::tbb Boost::headers PROPERTIES SYSTEM TRUE)

# OpenBLAS's pthread build, which loom limits to one thread per call (ops/blas.cpp) so that only
# TBB runs things in parallel; LoomOpenBLAS finds it and refuses any other build.
include(LoomOpenBLAS)
if(LOOM_OPENBLAS_ERROR)
  message(FATAL_ERROR "${LOOM_OPENBLAS_ERROR}")
elseif(NOT LOOM_CBLAS_INCLUDE_DIR)
  message(FATAL_ERROR "loom found OpenBLAS (${LOOM_OPENBLAS_LIBRARY}) but not its cblas.h: "
    "set LOOM_CBLAS_INCLUDE_DIR to its folder")
endif()
if(NOT TARGET loom_blas)
  add_library(loom_blas INTERFACE)
  target_include_directories(loom_blas SYSTEM INTERFACE ${LOOM_CBLAS_INCLUDE_DIR})
  target_link_libraries(loom_blas INTERFACE ${LOOM_OPENBLAS_LIBRARY})
endif()
