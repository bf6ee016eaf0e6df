# Installs the headers and a package for find_package(poolkit CONFIG), with no build step: the
# package makes poolkit::poolkit itself (poolkit-config.cmake.in) and decides CUDA support when the
# consumer configures. The tools and the plugin install their own files (COMPONENT tools, plugin),
# where they were built.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(POOLKIT_CONFIG_DIR ${CMAKE_INSTALL_DATADIR}/cmake/poolkit)  # header-only: arch-independent

install(DIRECTORY include/poolkit DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT Development)
install(FILES LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/poolkit COMPONENT Development)

configure_package_config_file(cmake/poolkit-config.cmake.in ${PROJECT_BINARY_DIR}/poolkit-config.cmake
  INSTALL_DESTINATION ${POOLKIT_CONFIG_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/poolkit-config-version.cmake
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES ${PROJECT_BINARY_DIR}/poolkit-config.cmake ${PROJECT_BINARY_DIR}/poolkit-config-version.cmake
              cmake/poolkit-cuda.cmake
  DESTINATION ${POOLKIT_CONFIG_DIR} COMPONENT Development)

# install(TARGETS <target> ... OPTIONAL) for a program or library of poolkit's own: installed where
# it was built; a plain configure + install (headers only) says it was skipped.
function(poolkit_install_built target component)
  install(TARGETS ${target} ${ARGN} COMPONENT ${component} OPTIONAL)
  install(CODE "if(NOT EXISTS \"$<TARGET_FILE:${target}>\")
  message(STATUS \"poolkit: ${target} was not built; not installed (cmake --build first)\")
endif()" COMPONENT ${component})
endfunction()
