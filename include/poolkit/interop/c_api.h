/* poolkit's C ABI: the caching device allocator (with statistics), one per device, for PyTorch's
 * CUDAPluggableAllocator, CuPy's set_allocator and any other host that loads a shared library.
 * Built as libpoolkit_plugin.so (CMake target poolkit_plugin). Every function is thread-safe.
 *
 *   torch.cuda.memory.change_current_allocator(
 *       torch.cuda.memory.CUDAPluggableAllocator("libpoolkit_plugin.so", "poolkit_alloc", "poolkit_free"))
 */
#ifndef POOLKIT_INTEROP_C_API_H
#define POOLKIT_INTEROP_C_API_H

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#  define POOLKIT_C_API __attribute__((visibility("default")))
#else
#  define POOLKIT_C_API
#endif

typedef struct CUstream_st* poolkit_stream; /* a cudaStream_t */

/* PyTorch's CUDAPluggableAllocator signatures. alloc returns NULL when the device is out of
 * memory (PyTorch then raises its OutOfMemoryError); the block is usable by work on `stream`. */
POOLKIT_C_API void* poolkit_alloc(ssize_t size, int device, poolkit_stream stream);
POOLKIT_C_API void poolkit_free(void* pointer, ssize_t size, int device, poolkit_stream stream);

/* The block is also used by work on `stream` (PyTorch's record_stream). */
POOLKIT_C_API void poolkit_record_stream(void* pointer, int device, poolkit_stream stream);

/* Returns every cached, wholly free chunk of every device to cudaFree (torch.cuda.empty_cache). */
POOLKIT_C_API void poolkit_empty_cache(void);

/* memory_stats() of `device` as a JSON object, or memory_summary() as text, written to `buffer`
 * (NUL-terminated, truncated to `capacity`). Returns the length of the whole text, so a call
 * with capacity 0 sizes the buffer; -1 for a device that does not exist. */
POOLKIT_C_API long poolkit_memory_stats_json(int device, char* buffer, size_t capacity);
POOLKIT_C_API long poolkit_memory_summary(int device, char* buffer, size_t capacity);

/* The message of the last failure on this thread ("" if none). */
POOLKIT_C_API const char* poolkit_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
