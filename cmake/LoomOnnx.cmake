# loom::onnx (onnx/, include/loom/onnx/): writes loom graphs as ONNX models. Built when ONNX's
# protobuf classes and checker are found (Debian: libonnx-dev and libprotobuf-dev, installed by
# scripts/setup); the core library does not need them: an op's mapping is written against
# core/onnx_mapping.hpp alone. LOOM_HAVE_ONNX tells the rest of the build whether it exists.
option(LOOM_ONNX "Build loom::onnx when ONNX (libonnx-dev) is found" ON)
set(LOOM_HAVE_ONNX OFF)
if(LOOM_ONNX)
  find_package(Protobuf QUIET)
  if(Protobuf_FOUND AND NOT TARGET onnx_proto)
    find_package(ONNX QUIET)
  endif()
endif()
if(LOOM_ONNX AND TARGET onnx_proto AND TARGET onnx)
  set(LOOM_HAVE_ONNX ON)
  file(GLOB LOOM_ONNX_SOURCES CONFIGURE_DEPENDS RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} onnx/*.cpp)
  list(SORT LOOM_ONNX_SOURCES)
  add_library(loom_onnx STATIC ${LOOM_ONNX_SOURCES})
  add_library(loom::onnx ALIAS loom_onnx)
  target_link_libraries(loom_onnx PUBLIC loom PRIVATE onnx onnx_proto)
  target_include_directories(loom_onnx PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})  # core/atomic_file.hpp
  target_compile_definitions(loom_onnx PRIVATE LOOM_VERSION_STRING="${PROJECT_VERSION}")
  loom_target_flags(loom_onnx)
  set_target_properties(loom_onnx PROPERTIES POSITION_INDEPENDENT_CODE ON)
  message(STATUS "loom: ONNX found: building loom::onnx")
elseif(LOOM_ONNX)
  message(STATUS "loom: ONNX not found: loom::onnx and its tests are left out (install libonnx-dev libprotobuf-dev)")
endif()
