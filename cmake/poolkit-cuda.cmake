# poolkit_use_cuda(<target>): gives an INTERFACE target of poolkit's headers what CUDA support the
# configuring project has. Used by poolkit's own build and by the installed package, so that CUDA
# support is decided when the consumer configures, not when poolkit was installed.
#   POOLKIT_CUDA  AUTO (default: the toolkit if found), ON (required) or OFF.
# Sets POOLKIT_HAS_CUDA (ON/OFF) in the caller's scope. With CUDA the target links CUDA::cudart and
# CCCL's libcudacxx and defines POOLKIT_HAS_CUDA=1; otherwise it defines POOLKIT_HAS_CUDA=0.
macro(poolkit_use_cuda target)
  if(NOT DEFINED POOLKIT_CUDA OR POOLKIT_CUDA STREQUAL "")
    set(POOLKIT_CUDA AUTO)
  endif()
  set(POOLKIT_HAS_CUDA OFF)
  if(POOLKIT_CUDA STREQUAL "ON")
    find_package(CUDAToolkit 12.0 REQUIRED)
  elseif(NOT POOLKIT_CUDA STREQUAL "OFF")
    find_package(CUDAToolkit 12.0 QUIET)
  endif()
  if(CUDAToolkit_FOUND AND NOT POOLKIT_CUDA STREQUAL "OFF")
    # cuda::mr and cuda::stream_ref come from libcudacxx (CCCL), which the toolkit ships with a
    # CMake package (CUDA 13 keeps its headers apart, under include/cccl).
    find_package(libcudacxx CONFIG REQUIRED HINTS ${CUDAToolkit_LIBRARY_DIR}/cmake)
    set(POOLKIT_HAS_CUDA ON)
    target_link_libraries(${target} INTERFACE CUDA::cudart libcudacxx::libcudacxx)
    target_compile_definitions(${target} INTERFACE POOLKIT_HAS_CUDA=1)
    # C++20 for CUDA sources (nvcc defaults to C++17) unless the consumer chose a CUDA_STANDARD:
    # CMake before 3.25.2 has no C++20 dialect for nvcc, so CMAKE_CUDA_STANDARD 20 fails there.
    target_compile_options(${target} INTERFACE
      "$<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<NOT:$<BOOL:$<TARGET_PROPERTY:CUDA_STANDARD>>>>:-std=c++20>")
  else()
    target_compile_definitions(${target} INTERFACE POOLKIT_HAS_CUDA=0)
  endif()
endmacro()
