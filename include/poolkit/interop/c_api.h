/* poolkit's C ABI: one device allocator (with statistics) per device, for PyTorch's
 * CUDAPluggableAllocator, CuPy's set_allocator and any other host that loads a shared library.
 * Built as libpoolkit_plugin.so (CMake target poolkit_plugin); the Python package (python/) wraps
 * it. Every function is thread-safe. The allocator is one kind for the whole process: "caching"
 * (poolkit::caching_device_resource, the default) or "expandable"
 * (poolkit::expandable_device_resource: CUDA virtual memory whose granules are mapped only while
 * used). poolkit_set_allocator() chooses it; else the environment variable
 * POOLKIT_ALLOCATOR=caching|expandable, read when the first pool is made.
 * libpoolkit_plugin_simulated.so (target poolkit_plugin_simulated) is the same over simulated
 * memory, for tests on machines without a GPU: POOLKIT_SIMULATED_DEVICES devices (2; from 0 to
 * 1024) of POOLKIT_SIMULATED_MEMORY bytes (80 GiB; from 2 MiB to 4 TiB) whose addresses must
 * never be touched. Another value of either is an error of every call that needs the devices.
 *
 * Errors: no function lets an exception out. A failure shows in the result (NULL, -1) and in
 * poolkit_last_error(), which every function but poolkit_last_error() and poolkit_backend() sets:
 * to why it failed, or to "" when it succeeded. So a function that returns nothing
 * (poolkit_free, poolkit_record_stream, poolkit_empty_cache) failed when poolkit_last_error() is
 * not "" right after it.
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

/* What C++ callers may rely on: nothing is thrown. */
#ifdef __cplusplus
#  define POOLKIT_C_NOEXCEPT noexcept
#else
#  define POOLKIT_C_NOEXCEPT
#endif

typedef struct CUstream_st* poolkit_stream; /* a cudaStream_t */

/* PyTorch's CUDAPluggableAllocator signatures. alloc returns NULL when the device is out of
 * memory or for another failure (poolkit_last_error says which; poolkit.torch's hooks raise
 * PyTorch's OutOfMemoryError from it, where PyTorch's own Python CUDAPluggableAllocator does not
 * check for NULL), and NULL with no failure for a size of 0 or less; the block is usable by work on
 * `stream`. free takes back a block alloc returned, with the size it was allocated with; a NULL
 * pointer is nothing to free. Any other free fails and changes nothing (the statistics, the
 * pool, the block, which stays live): a pointer that is no live block of `device` (never
 * allocated there, freed already, or inside a block) or another size; poolkit_last_error names
 * the pointer and says why. */
POOLKIT_C_API void* poolkit_alloc(ssize_t size, int device, poolkit_stream stream) POOLKIT_C_NOEXCEPT;
POOLKIT_C_API void poolkit_free(void* pointer, ssize_t size, int device, poolkit_stream stream) POOLKIT_C_NOEXCEPT;

/* The block is also used by work on `stream` (PyTorch's record_stream). NULL (an empty tensor's)
 * does nothing; a pointer that is no live block of `device` fails as in poolkit_free. */
POOLKIT_C_API void poolkit_record_stream(void* pointer, int device, poolkit_stream stream) POOLKIT_C_NOEXCEPT;

/* CUDA graphs (docs/stream_ordering.md): the capture `stream` is in allocates from the graph pool
 * named `pool`, which captures given the same name share (PyTorch's graph_pool_handle()); call it
 * before the capture's first allocation. Each capture has a pool of its own otherwise. Returns 0;
 * -1 (see poolkit_last_error) for a stream not in capture or a device that does not exist.
 * poolkit_release_graph_pool waits for the device, then the pool's memory serves eager work again
 * (a pool whose graphs are all destroyed releases itself; a name with no pool does nothing).
 * Returns 0; -1 as above, or where a capture may still run on the pool. */
POOLKIT_C_API int poolkit_capture_into(int device, poolkit_stream stream, unsigned long long pool) POOLKIT_C_NOEXCEPT;
POOLKIT_C_API int poolkit_release_graph_pool(int device, unsigned long long pool) POOLKIT_C_NOEXCEPT;

/* How every pool, now and when made, learns that a stream is in capture (poolkit/core/captures.hpp):
 * "every_call" (the default: each call on a created stream asks the driver, cuStreamIsCapturing,
 * so any capture works) or "announced" (a call asks only while a capture is announced, so that
 * calls outside captures make no driver call for it; every capture through the plugin must then be
 * announced, from before it begins until after it ends, by poolkit_announce_capture(1) and (0)).
 * Returns 0; -1 (see poolkit_last_error) for another mode. poolkit_capture_checks() names the mode
 * set (NULL, see poolkit_last_error, where the plugin cannot start, as for a device count that
 * cannot be read). */
POOLKIT_C_API int poolkit_set_capture_checks(const char* mode) POOLKIT_C_NOEXCEPT;
POOLKIT_C_API const char* poolkit_capture_checks(void) POOLKIT_C_NOEXCEPT;
POOLKIT_C_API void poolkit_announce_capture(int begins) POOLKIT_C_NOEXCEPT;

/* Declares that `stream` is never destroyed while the process runs (PyTorch's default and pooled
 * streams are not), so that the pools tell it apart from other streams without asking the driver
 * at each call on it (poolkit::cuda_events::declare_lasting). A stream declared so and destroyed
 * anyway would lend its identity to the next stream created at its handle. Returns 0 where it is
 * declared now or was, or needs no declaring (NULL, the special handles, a simulated device's);
 * -1 (see poolkit_last_error), declaring nothing, for a stream in capture, one whose id the driver
 * cannot say, or past 2048 declared streams: calls on it then ask the driver, as before. */
POOLKIT_C_API int poolkit_lasting_stream(poolkit_stream stream) POOLKIT_C_NOEXCEPT;

/* Caps the bytes `device`'s pool may reserve (cudaMalloc'ed, or mapped for the expandable kind) at
 * `fraction` of the device's memory, now or when the pool is made
 * (torch.cuda.set_per_process_memory_fraction). A request past the cap first returns what the pool
 * caches, then fails as out of memory; a cap below what is reserved only stops growth. Returns 0;
 * -1 (see poolkit_last_error) for a fraction outside [0, 1] or a device that does not exist. */
POOLKIT_C_API int poolkit_set_memory_fraction(int device, double fraction) POOLKIT_C_NOEXCEPT;

/* Returns every cached, wholly free chunk of every device to cudaFree, or unmaps every cached
 * granule for the expandable kind (torch.cuda.empty_cache). */
POOLKIT_C_API void poolkit_empty_cache(void) POOLKIT_C_NOEXCEPT;

/* Every peak figure of `device` becomes its current value (torch.cuda.reset_peak_memory_stats).
 * Returns 0, or -1 for a device that does not exist (poolkit_last_error says why). */
POOLKIT_C_API int poolkit_reset_peak_stats(int device) POOLKIT_C_NOEXCEPT;
/* Every total of `device` (the *.allocated and *.freed figures, num_ooms, num_alloc_retries,
 * num_device_alloc/free) restarts at 0 (torch.cuda.reset_accumulated_memory_stats). Returns 0, or
 * -1 for a device that does not exist (poolkit_last_error says why). */
POOLKIT_C_API int poolkit_reset_accumulated_stats(int device) POOLKIT_C_NOEXCEPT;

/* memory_stats() of `device` as a JSON object, or memory_summary() as text, written to `buffer`
 * (NUL-terminated, truncated to `capacity`), with torch.cuda.memory_stats() keys. For the
 * expandable kind reserved_bytes.all.current/peak are the bytes mapped, num_device_alloc/free
 * the map and unmap calls, and there are no segment.* keys. Returns the length of the whole
 * text, so a call with capacity 0 sizes the buffer; -1 for a device that does not exist
 * (poolkit_last_error says why). These calls make no pool: a device with none yet (nothing
 * allocated on it) has stats {}, a summary of zeros and no segments. */
POOLKIT_C_API long poolkit_memory_stats_json(int device, char* buffer, size_t capacity) POOLKIT_C_NOEXCEPT;
POOLKIT_C_API long poolkit_memory_summary(int device, char* buffer, size_t capacity) POOLKIT_C_NOEXCEPT;

/* History (poolkit/adaptor/history.hpp): every pool, now and when made, records what it does into
 * a ring of the newest `max_entries` events (0 stops and drops it). Each alloc, free_requested and
 * oom event asks label(user, action) for a number to carry (0: none), on the allocating or freeing
 * thread with no lock of poolkit's held; release(user, label) hands each nonzero label back once its
 * event leaves the ring, with a pool's lock held (it must not call poolkit). Actions: 0 alloc,
 * 1 free_requested, 2 free_completed, 3 segment_alloc, 4 segment_free, 5 segment_map,
 * 6 segment_unmap, 7 oom. Returns 0; -1 (see poolkit_last_error) without host memory. */
typedef struct poolkit_history_callbacks {
    unsigned long long (*label)(void* user, int action);
    void (*release)(void* user, unsigned long long label);
    void* user;
} poolkit_history_callbacks;
POOLKIT_C_API int poolkit_record_history(size_t max_entries, poolkit_history_callbacks labels) POOLKIT_C_NOEXCEPT;

/* `device`'s history, oldest first, as the JSON list of one device's "device_traces" in PyTorch's
 * snapshot ([{"action": "alloc", "addr": ..., "size": ..., "stream": ..., "time_us": ...,
 * "label": ...}, ...]), written and sized as below; [] for a device with no pool yet. */
POOLKIT_C_API long poolkit_history_json(int device, char* buffer, size_t capacity) POOLKIT_C_NOEXCEPT;

/* The chunks and blocks of `device`'s pool as JSON shaped like the "segments" of PyTorch's
 * torch.cuda.memory._snapshot() (poolkit/observe/snapshot.hpp), written and sized as above. For
 * the expandable kind each run of mapped granules is a segment (poolkit/observe/mapped_walk.hpp). */
POOLKIT_C_API long poolkit_snapshot_json(int device, char* buffer, size_t capacity) POOLKIT_C_NOEXCEPT;

/* Chooses the allocator of every pool: "caching" or "expandable". Returns 0; -1 (see
 * poolkit_last_error) for another name or once a pool exists (after the first allocation). */
POOLKIT_C_API int poolkit_set_allocator(const char* name) POOLKIT_C_NOEXCEPT;

/* Sets an option of the allocator's kind before the first pool is made, by its C++ name in
 * caching_options or expandable_options (poolkit/strategy/caching_pool.hpp, expandable.hpp):
 * numbers in decimal, flags as true/false; for the caching kind large_chunk is the growth step in
 * bytes (0: as needed, PyTorch's rule). Choose the kind first: poolkit_set_allocator() forgets the
 * options set before it. The value is checked now, with the options set before it, by the rules
 * the pool would apply when made (caching_options::validate(); for expandable: rounding a power
 * of two of at most 2 MiB, mapping_bytes 0 or a power of two, cache_fraction, peak_slack and
 * max_peak_slack finite and at least 0, span_bytes, small_span_bytes, small_size and
 * mapping_bytes at most 2^48); so set small_chunk before raising small_size above it. Returns 0;
 * -1 (see poolkit_last_error, which names the option and the rule) for an option the kind does
 * not have (the message lists those it has), a bad value, one the rules refuse (the options are
 * then as before the call), or once a pool exists. */
POOLKIT_C_API int poolkit_set_option(const char* name, const char* value) POOLKIT_C_NOEXCEPT;

/* "caching" or "expandable": the kind in use, or the one the first pool would have. NULL (see
 * poolkit_last_error) when POOLKIT_ALLOCATOR names neither. */
POOLKIT_C_API const char* poolkit_allocator_name(void) POOLKIT_C_NOEXCEPT;

/* The devices this plugin serves (0 without a GPU), or -1 (see poolkit_last_error) when
 * POOLKIT_SIMULATED_DEVICES is not a count from 0 to 1024; and where its memory comes from:
 * "cuda", or "simulated" for libpoolkit_plugin_simulated.so. */
POOLKIT_C_API int poolkit_device_count(void) POOLKIT_C_NOEXCEPT;
POOLKIT_C_API const char* poolkit_backend(void) POOLKIT_C_NOEXCEPT;

/* Why the last call on this thread failed; "" when it succeeded. */
POOLKIT_C_API const char* poolkit_last_error(void) POOLKIT_C_NOEXCEPT;

#ifdef __cplusplus
}
#endif

#endif
