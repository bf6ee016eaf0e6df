# A new user's view of the package, run by ctest as `cmake -P` (variables from tests/CMakeLists.txt),
# one STEP per ctest entry so that they run side by side:
#  install: a plain configure of the sources and `cmake --install`, with no build step and no
#     flags: the headers and the package, nothing else needed (the prefix the find_package
#     consumers use: a ctest fixture);
#  consumer: a consumer project (MODE find_package over that install, add_subdirectory, or
#     FetchContent from a local path) with CUDA=OFF, AUTO or ON (where the toolkit is: decided when
#     the consumer configures), and through find_package a .cu file too where nvcc is: what the
#     install exports to nvcc (add_subdirectory and FetchContent give the build tree's target,
#     which tests/cuda compiles under nvcc already);
#  replay: the built tree installed: poolkit-replay, where it was built, runs from another folder
#     and finds the bundled traces and their peers' figures beside itself.
foreach(variable STEP POOLKIT_SOURCE_DIR POOLKIT_BINARY_DIR WORK_DIR CMAKE_CXX_COMPILER REPLAY_BUILT)
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
  set(run_output "${output}" PARENT_SCOPE)
endfunction()

function(expect_in text wanted what)
  string(FIND "${text}" "${wanted}" found)
  if(found EQUAL -1)
    message(FATAL_ERROR "${what}: no '${wanted}' in:\n${text}")
  endif()
endfunction()

set(prefix ${WORK_DIR}/prefix)

# Configure + install, no build: plain, and as README.md says (with no tests, tools, benchmarks,
# examples or plugin, so that their packages need not be there), which installs nothing else.
function(install_with_no_build)
  set(fresh ${WORK_DIR}/fresh)
  set(headers_only ${WORK_DIR}/headers-only)
  file(REMOVE_RECURSE ${fresh} ${prefix} ${headers_only} ${headers_only}-build)
  run(${CMAKE_COMMAND} -S ${POOLKIT_SOURCE_DIR} -B ${fresh} -G Ninja -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER})
  run(${CMAKE_COMMAND} --install ${fresh} --prefix ${prefix})
  run(${CMAKE_COMMAND} -S ${POOLKIT_SOURCE_DIR} -B ${headers_only}-build -G Ninja -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
      -DPOOLKIT_BUILD_TESTS=OFF -DPOOLKIT_BUILD_BENCHMARKS=OFF -DPOOLKIT_BUILD_TOOLS=OFF -DPOOLKIT_BUILD_EXAMPLES=OFF
      -DPOOLKIT_BUILD_PLUGIN=OFF)
  run(${CMAKE_COMMAND} --install ${headers_only}-build --prefix ${headers_only})
  foreach(root ${prefix} ${headers_only})
    foreach(installed include/poolkit/poolkit.hpp share/cmake/poolkit/poolkit-config.cmake share/doc/poolkit/LICENSE)
      if(NOT EXISTS ${root}/${installed})
        message(FATAL_ERROR "cmake --install with no build did not install ${installed} in ${root}")
      endif()
    endforeach()
  endforeach()
  file(GLOB top RELATIVE ${headers_only} ${headers_only}/*)
  list(SORT top)
  if(NOT top STREQUAL "include;share")
    message(FATAL_ERROR "README.md's install with no build left more than include/ and share/: ${top}")
  endif()
  message(STATUS "configure + install with no build: headers and package installed")
endfunction()

# Consumers. CUDA: the toolkit where this build found it; nvcc where it is on the machine.
find_program(nvcc nvcc HINTS /usr/local/cuda/bin)
function(consume mode cuda)
  set(build ${WORK_DIR}/${mode}-cuda-${cuda})
  file(REMOVE_RECURSE ${build})
  set(with_cu OFF)
  if(mode STREQUAL "find_package" AND NOT cuda STREQUAL "OFF" AND nvcc)
    set(with_cu ON)
  endif()
  run(${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/consumer -B ${build} -G Ninja
      -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
      -DCMAKE_PREFIX_PATH=${prefix}
      -DPOOLKIT_CONSUME=${mode}
      -DPOOLKIT_SOURCE_DIR=${POOLKIT_SOURCE_DIR}
      -DPOOLKIT_CUDA=${cuda}
      -DCONSUMER_CUDA_SOURCE=${with_cu}
      "-DCMAKE_CUDA_COMPILER=${nvcc}")
  run(${CMAKE_COMMAND} --build ${build})
  run(${build}/consumer)
  string(STRIP "${run_output}" cxx_output)
  if(cuda STREQUAL "OFF")
    expect_in("${cxx_output}" "(CUDA 0)" "${mode} with POOLKIT_CUDA=OFF")
  endif()
  if(with_cu)
    run(${build}/consumer_cuda)
    expect_in("${run_output}" "C++20 under nvcc" "${mode}: the .cu consumer")
  endif()
  message(STATUS "consumer through ${mode}, POOLKIT_CUDA=${cuda}: built and ran: ${cxx_output}")
endfunction()

# The installed replay, run from another folder.
function(installed_replay)
  if(NOT REPLAY_BUILT)
    message(STATUS "skipped: poolkit-replay is not built")
    return()
  endif()
  set(full ${WORK_DIR}/full)
  file(REMOVE_RECURSE ${full} ${WORK_DIR}/elsewhere)
  run(${CMAKE_COMMAND} --install ${POOLKIT_BINARY_DIR} --prefix ${full})
  file(MAKE_DIRECTORY ${WORK_DIR}/elsewhere)
  execute_process(COMMAND ${full}/bin/poolkit-replay --composition=caching --no-progress
    WORKING_DIRECTORY ${WORK_DIR}/elsewhere RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "the installed poolkit-replay failed (${status}):\n${output}")
  endif()
  foreach(wanted "bert_infer_varlen    caching" "resnet50_train       caching" "quoted, not measured in this run"
                 "PyTorch expandable_segments")
    expect_in("${output}" "${wanted}" "the installed poolkit-replay")
  endforeach()
  execute_process(COMMAND ${full}/bin/poolkit-replay --help OUTPUT_VARIABLE help)
  expect_in("${help}" "${full}/share/poolkit/traces" "the installed poolkit-replay's bundled traces")
  message(STATUS "the installed poolkit-replay ran from another folder over ${full}/share/poolkit/traces")
endfunction()

if(STEP STREQUAL "install")
  install_with_no_build()
elseif(STEP STREQUAL "consumer")
  if(NOT DEFINED MODE OR NOT DEFINED CUDA)
    message(FATAL_ERROR "check.cmake: STEP=consumer needs -DMODE=find_package|add_subdirectory|fetchcontent and -DCUDA=OFF|AUTO|ON")
  endif()
  consume(${MODE} ${CUDA})
elseif(STEP STREQUAL "replay")
  installed_replay()
else()
  message(FATAL_ERROR "check.cmake: STEP must be install, consumer or replay")
endif()
