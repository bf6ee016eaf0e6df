# Installs the headers and exports poolkit::poolkit so that find_package(poolkit CONFIG) works.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(POOLKIT_CONFIG_DIR ${CMAKE_INSTALL_DATADIR}/cmake/poolkit)  # header-only: arch-independent

install(DIRECTORY include/poolkit DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS poolkit EXPORT poolkit-targets)
install(EXPORT poolkit-targets NAMESPACE poolkit:: DESTINATION ${POOLKIT_CONFIG_DIR})

configure_package_config_file(cmake/poolkit-config.cmake.in
  ${PROJECT_BINARY_DIR}/poolkit-config.cmake INSTALL_DESTINATION ${POOLKIT_CONFIG_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/poolkit-config-version.cmake
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES ${PROJECT_BINARY_DIR}/poolkit-config.cmake ${PROJECT_BINARY_DIR}/poolkit-config-version.cmake
  DESTINATION ${POOLKIT_CONFIG_DIR})
