// Build configuration seen by every header.
//
// POOLKIT_HAS_CUDA: 1 when the CUDA runtime and CCCL are available. The CMake target defines it
// (option POOLKIT_CUDA); otherwise it is 1 under nvcc and 0 elsewhere. It changes the types of
// poolkit::stream_ref and of the property tags, so every translation unit of a program must see
// the same value.
#pragma once

#ifndef POOLKIT_HAS_CUDA
#  if defined(__CUDACC__)
#    define POOLKIT_HAS_CUDA 1
#  else
#    define POOLKIT_HAS_CUDA 0
#  endif
#endif

#if POOLKIT_HAS_CUDA && !defined(LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE)
// CCCL 3.0 keeps cuda::mr behind this switch; poolkit's concepts are CCCL's.
#  define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#endif
