/* poolkit's C ABI: one device allocator (with statistics) per device, for PyTorch's
 * CUDAPluggableAllocator, CuPy's set_allocator and any other host that loads a shared library.
 * Built as libpoolkit_plugin.so (CMake target poolkit_plugin). Every function is thread-safe.
 * The allocator is one kind for the whole process: "caching" (poolkit::caching_device_allocator,
 * the default) or "expandable" (poolkit::expandable_device_allocator: CUDA virtual memory whose
 * granules are mapped only while used). poolkit_set_allocator() chooses it; else the environment
 * variable POOLKIT_ALLOCATOR=caching|expandable, read when the first pool is made.
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

/* Returns every cached, wholly free chunk of every device to cudaFree, or unmaps every cached
 * granule for the expandable kind (torch.cuda.empty_cache). */
POOLKIT_C_API void poolkit_empty_cache(void);

/* memory_stats() of `device` as a JSON object, or memory_summary() as text, written to `buffer`
 * (NUL-terminated, truncated to `capacity`), with torch.cuda.memory_stats() keys. For the
 * expandable kind reserved_bytes.all.current/peak are the bytes mapped, num_device_alloc/free
 * the map and unmap calls, and there are no segment.* keys. Returns the length of the whole
 * text, so a call with capacity 0 sizes the buffer; -1 for a device that does not exist or whose
 * pool could not be made (poolkit_last_error says why). */
POOLKIT_C_API long poolkit_memory_stats_json(int device, char* buffer, size_t capacity);
POOLKIT_C_API long poolkit_memory_summary(int device, char* buffer, size_t capacity);

/* Chooses the allocator of every pool: "caching" or "expandable". Returns 0; -1 (see
 * poolkit_last_error) for another name or once a pool exists (after the first alloc, stats or
 * summary call). */
POOLKIT_C_API int poolkit_set_allocator(const char* name);

/* "caching" or "expandable": the kind in use, or the one the first pool would have. NULL (see
 * poolkit_last_error) when POOLKIT_ALLOCATOR names neither. */
POOLKIT_C_API const char* poolkit_allocator_name(void);

/* The message of the last failure on this thread ("" if none). */
POOLKIT_C_API const char* poolkit_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
