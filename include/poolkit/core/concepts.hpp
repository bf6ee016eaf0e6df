// The concepts every poolkit block is written against. docs/concepts.md has them as tables.
//
// They are CCCL 3.0's cuda::mr spellings, so with CUDA a poolkit resource is a cuda::mr::resource
// and a poolkit stream_resource is a cuda::mr::async_resource. Under CCCL 3.1 and later, which
// renamed them (synchronous_resource with allocate_sync; resource with allocate(stream, ...)),
// each block adds those members as well, forwarding to these (core/cuda_mr_spelling.hpp): poolkit
// models the cuda::mr concepts of whichever CCCL CCCL_VERSION names.
#pragma once

#include <poolkit/core/properties.hpp>
#include <poolkit/core/stream_ref.hpp>

#include <concepts>
#include <cstddef>

namespace poolkit {

// allocate(bytes, alignment) -> void*, deallocate(p, bytes, alignment), and ==: equal resources
// can free each other's memory.
template <class R>
concept resource = std::equality_comparable<R> && requires(R& r, void* p, std::size_t bytes, std::size_t alignment) {
    { r.allocate(bytes, alignment) } -> std::same_as<void*>;
    { r.deallocate(p, bytes, alignment) } -> std::same_as<void>;
};

// A resource whose allocate and deallocate may also be ordered on a stream: memory from
// allocate_async may be used by work on `stream` issued after the call; memory passed to
// deallocate_async may be reused once the work on `stream` issued before the call is done.
template <class R>
concept stream_resource = resource<R> && requires(R& r, void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) {
    { r.allocate_async(bytes, alignment, stream) } -> std::same_as<void*>;
    { r.deallocate_async(p, bytes, alignment, stream) } -> std::same_as<void>;
};

template <class R, class... Properties>
concept resource_with = resource<R> && (has_property<R, Properties> && ...);

template <class R, class... Properties>
concept stream_resource_with = stream_resource<R> && (has_property<R, Properties> && ...);

// Optional capabilities. A block offers them only where they work.

// try_allocate: noexcept, nullptr on failure.
template <class R>
concept has_try_allocate = requires(R& r, std::size_t bytes, std::size_t alignment) {
    { r.try_allocate(bytes, alignment) } noexcept -> std::same_as<void*>;
};

// try_allocate_cached: noexcept; serves only from memory already held, never grows (nullptr else).
template <class R>
concept has_try_allocate_cached = requires(R& r, std::size_t bytes, std::size_t alignment) {
    { r.try_allocate_cached(bytes, alignment) } noexcept -> std::same_as<void*>;
};

// release(): return cached memory to the upstream.
template <class R>
concept has_release = requires(R& r) { r.release(); };

// owns(p): p lies in a block this resource handed out and has not taken back (monotonic, with no
// per-block records, answers for the part of its chunks it handed out).
template <class R>
concept has_owns = requires(const R& r, const void* p) {
    { r.owns(p) } -> std::convertible_to<bool>;
};

// check_invariants(): walks every internal structure and asserts its invariants.
template <class R>
concept has_check_invariants = requires(const R& r) { r.check_invariants(); };

// record_use(p, stream): the block at p is also used by work on `stream` (PyTorch's
// record_stream); its reuse waits for that work.
template <class R>
concept has_record_use = requires(R& r, void* p, stream_ref stream) { r.record_use(p, stream); };

// pending_free(p): the block at p was freed and is not reusable by every stream yet (it waits on
// stream work, record_use's among it).
template <class R>
concept has_pending_free = requires(const R& r, const void* p) {
    { r.pending_free(p) } -> std::convertible_to<bool>;
};

// block_size(bytes, alignment): the size of the block a request is served with (0: unknown).
template <class R>
concept has_block_size = requires(const R& r, std::size_t bytes, std::size_t alignment) {
    { r.block_size(bytes, alignment) } noexcept -> std::convertible_to<std::size_t>;
};

// upstream_resource(): the resource this one takes its memory from.
template <class R>
concept has_upstream = requires(const R& r) { r.upstream_resource(); };

}  // namespace poolkit
