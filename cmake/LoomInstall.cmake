# cmake --install exports loom::loom (and loom::distributed, when it was built) for find_package(loom).
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
if(LOOM_HAVE_DISTRIBUTED)
  install(DIRECTORY include/loom DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
else()
  install(DIRECTORY include/loom DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} PATTERN distributed EXCLUDE)
endif()
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
