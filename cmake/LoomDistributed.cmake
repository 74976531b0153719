# loom::distributed (distributed/, include/loom/distributed/): data-parallel training over MPI.
# Built when MPI is found (Debian: libopenmpi-dev, installed by scripts/setup); the core library
# does not need it. LOOM_HAVE_DISTRIBUTED tells the rest of the build whether it exists.
option(LOOM_DISTRIBUTED "Build loom::distributed when MPI is found" ON)
set(LOOM_HAVE_DISTRIBUTED OFF)
if(LOOM_DISTRIBUTED)
  set(MPI_CXX_SKIP_MPICXX TRUE)  # MPI's C API only (no deprecated C++ bindings)
  find_package(MPI COMPONENTS CXX QUIET)
endif()
if(LOOM_DISTRIBUTED AND MPI_CXX_FOUND)
  set(LOOM_HAVE_DISTRIBUTED ON)
  set_target_properties(MPI::MPI_CXX PROPERTIES SYSTEM TRUE)  # MPI's headers as system headers
  file(GLOB LOOM_DISTRIBUTED_SOURCES CONFIGURE_DEPENDS RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} distributed/*.cpp)
  list(SORT LOOM_DISTRIBUTED_SOURCES)
  add_library(loom_distributed STATIC ${LOOM_DISTRIBUTED_SOURCES})
  add_library(loom::distributed ALIAS loom_distributed)
  target_link_libraries(loom_distributed PUBLIC loom MPI::MPI_CXX)
  loom_target_flags(loom_distributed)
  set_target_properties(loom_distributed PROPERTIES POSITION_INDEPENDENT_CODE ON)
  message(STATUS "loom: MPI found (${MPIEXEC_EXECUTABLE}): building loom::distributed")
elseif(LOOM_DISTRIBUTED)
  message(STATUS "loom: MPI not found: loom::distributed and its tests are left out (install libopenmpi-dev)")
endif()
