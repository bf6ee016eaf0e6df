/* poolkit's C ABI: one device allocator (with statistics) per device, for PyTorch's
 * CUDAPluggableAllocator, CuPy's set_allocator and any other host that loads a shared library.
 * Built as libpoolkit_plugin.so (CMake target poolkit_plugin); the Python package (python/) wraps
 * it. Every function is thread-safe. The allocator is one kind for the whole process: "caching"
 * (poolkit::caching_device_allocator, the default) or "expandable"
 * (poolkit::expandable_device_allocator: CUDA virtual memory whose granules are mapped only while
 * used). poolkit_set_allocator() chooses it; else the environment variable
 * POOLKIT_ALLOCATOR=caching|expandable, read when the first pool is made.
 * libpoolkit_plugin_simulated.so (target poolkit_plugin_simulated) is the same over simulated
 * memory, for tests on machines without a GPU: POOLKIT_SIMULATED_DEVICES devices (2) of
 * POOLKIT_SIMULATED_MEMORY bytes (80 GiB) whose addresses must never be touched.
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

/* Every peak figure of `device` becomes its current value (torch.cuda.reset_peak_memory_stats).
 * Returns 0, or -1 for a device that does not exist (poolkit_last_error says why). */
POOLKIT_C_API int poolkit_reset_peak_stats(int device);

/* memory_stats() of `device` as a JSON object, or memory_summary() as text, written to `buffer`
 * (NUL-terminated, truncated to `capacity`), with torch.cuda.memory_stats() keys. For the
 * expandable kind reserved_bytes.all.current/peak are the bytes mapped, num_device_alloc/free
 * the map and unmap calls, and there are no segment.* keys. Returns the length of the whole
 * text, so a call with capacity 0 sizes the buffer; -1 for a device that does not exist
 * (poolkit_last_error says why). These calls make no pool: a device with none yet (nothing
 * allocated on it) has stats {}, a summary of zeros and no segments. */
POOLKIT_C_API long poolkit_memory_stats_json(int device, char* buffer, size_t capacity);
POOLKIT_C_API long poolkit_memory_summary(int device, char* buffer, size_t capacity);

/* The chunks and blocks of `device`'s pool as JSON shaped like the "segments" of PyTorch's
 * torch.cuda.memory._snapshot() (poolkit/observe/snapshot.hpp), written and sized as above. For
 * the expandable kind each run of mapped granules is a segment (poolkit/observe/mapped_walk.hpp). */
POOLKIT_C_API long poolkit_snapshot_json(int device, char* buffer, size_t capacity);

/* Chooses the allocator of every pool: "caching" or "expandable". Returns 0; -1 (see
 * poolkit_last_error) for another name or once a pool exists (after the first allocation). */
POOLKIT_C_API int poolkit_set_allocator(const char* name);

/* Sets an option of the allocator's kind before the first pool is made, by its C++ name in
 * caching_options or expandable_options (poolkit/strategy/caching_pool.hpp, expandable.hpp):
 * numbers in decimal, flags as true/false; for the caching kind large_chunk is the growth step in
 * bytes (0: as needed, PyTorch's rule). Choose the kind first: poolkit_set_allocator() forgets the
 * options set before it. Returns 0; -1 (see poolkit_last_error) for an option the kind does not
 * have (the message lists those it has), a bad value, or once a pool exists. */
POOLKIT_C_API int poolkit_set_option(const char* name, const char* value);

/* "caching" or "expandable": the kind in use, or the one the first pool would have. NULL (see
 * poolkit_last_error) when POOLKIT_ALLOCATOR names neither. */
POOLKIT_C_API const char* poolkit_allocator_name(void);

/* The devices this plugin serves (0 without a GPU), and where its memory comes from: "cuda", or
 * "simulated" for libpoolkit_plugin_simulated.so. */
POOLKIT_C_API int poolkit_device_count(void);
POOLKIT_C_API const char* poolkit_backend(void);

/* The message of the last failure on this thread ("" if none). */
POOLKIT_C_API const char* poolkit_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
