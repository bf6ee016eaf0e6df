# Installs poolkit into a scratch prefix, then builds and runs a consumer project twice: once
# through find_package(poolkit CONFIG REQUIRED), once through add_subdirectory.
# Run by ctest as `cmake -P`; the variables come from tests/CMakeLists.txt.
foreach(variable POOLKIT_SOURCE_DIR POOLKIT_BINARY_DIR WORK_DIR CMAKE_CXX_COMPILER)
  if(NOT DEFINED ${variable})
    message(FATAL_ERROR "check.cmake needs -D${variable}=...")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT status EQUAL 0)
    string(REPLACE ";" " " command "${ARGN}")
    message(FATAL_ERROR "failed (${status}): ${command}\n${output}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${POOLKIT_BINARY_DIR} --prefix ${prefix})

foreach(mode find_package add_subdirectory)
  set(build ${WORK_DIR}/${mode})
  run(${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/consumer -B ${build} -G Ninja
      -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
      -DCMAKE_PREFIX_PATH=${prefix}
      -DPOOLKIT_CONSUME=${mode}
      -DPOOLKIT_SOURCE_DIR=${POOLKIT_SOURCE_DIR}
      -DPOOLKIT_CUDA=${POOLKIT_CUDA})
  run(${CMAKE_COMMAND} --build ${build})
  run(${build}/consumer)
  message(STATUS "consumer through ${mode}: built and ran")
endforeach()
