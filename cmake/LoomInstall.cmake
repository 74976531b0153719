# cmake --install exports loom::loom (and loom::distributed and loom::onnx, when they were built)
# for find_package(loom).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS loom EXPORT loomTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(LOOM_HAVE_DISTRIBUTED)  # loom::distributed, with MPI found again by loomConfig.cmake
  set_target_properties(loom_distributed PROPERTIES EXPORT_NAME distributed)
  install(TARGETS loom_distributed EXPORT loomTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  set(LOOM_PACKAGE_HAS_DISTRIBUTED ON)
else()  # its headers are left out too: a header without its library is a link error later
  set(LOOM_PACKAGE_HAS_DISTRIBUTED OFF)
endif()
if(LOOM_HAVE_ONNX)  # loom::onnx, with Protobuf and ONNX found again by loomConfig.cmake
  set_target_properties(loom_onnx PROPERTIES EXPORT_NAME onnx)
  install(TARGETS loom_onnx EXPORT loomTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  set(LOOM_PACKAGE_HAS_ONNX ON)
else()
  set(LOOM_PACKAGE_HAS_ONNX OFF)
endif()
set(loom_header_excludes)  # the headers of a library not built
if(NOT LOOM_HAVE_DISTRIBUTED)
  list(APPEND loom_header_excludes PATTERN distributed EXCLUDE)
endif()
if(NOT LOOM_HAVE_ONNX)
  list(APPEND loom_header_excludes PATTERN onnx EXCLUDE)
endif()
install(DIRECTORY include/loom DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} ${loom_header_excludes})
install(EXPORT loomTargets NAMESPACE loom:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/loom)
configure_package_config_file(cmake/loomConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/loomConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/loom)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/loomConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${CMAKE_CURRENT_BINARY_DIR}/loomConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/loomConfigVersion.cmake
  cmake/LoomOpenBLAS.cmake  # loomConfig.cmake finds OpenBLAS with it
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/loom)
