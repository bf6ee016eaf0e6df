// virtual_memory: a reserved range of addresses whose granules are backed by physical memory on
// request — the interface a placement strategy over CUDA virtual memory (strategy/expandable.hpp)
// is written against. Its models: cuda_vmm_resource on a GPU, simulated_vmm_resource on a CPU,
// which share their bookkeeping (upstream/detail/granule_map.hpp and locked_granules.hpp).
//
// The range [base(), base() + capacity()) is reserved once and never moves. map(at, bytes) backs
// the granules of [at, at + bytes) with physical memory; unmap(at, bytes) gives it back. `at` and
// `bytes` are multiples of granularity(). One map call maps one run of contiguous granules however
// long, one physical allocation per granule; any granule it mapped may later be unmapped alone, or
// with any other mapped granules that are contiguous with it, in one unmap call. map_whole(at,
// bytes) backs the run with one physical allocation instead: the driver charges per allocation
// (tens of microseconds to create, map, grant, unmap and release one, whatever its size:
// docs/costs.md), so a long run costs as little as one granule, but it can only be unmapped whole
// — an unmap call covers each such mapping entirely or not at all. Counting: map_calls() and unmap_calls() count
// calls that changed something (one per call, not per granule); mapped_bytes() is the bytes backed
// now, peak_mapped_bytes() the most ever backed at once.
//
// Complexity of the models' bookkeeping: O(log n) in the number of unmapped holes. Thread safety:
// each model states its own. Alignment: base() and every mapping start on a granule. Stream
// semantics: none; map and unmap are immediate, and unmap requires that no work still uses the
// range. Exhaustion: map throws out_of_memory with the bytes asked (requested_bytes), the bytes
// mapped (reserved_bytes) and the physical limit (limit_bytes), having changed nothing.
// Precondition violations: map throws std::invalid_argument (misaligned, outside the range, or some
// granule already mapped); unmap (noexcept) checks with POOLKIT_ASSERT (misaligned, outside the
// range, some granule not mapped, part of a mapping made by map_whole, or the range overlaps a
// block handed out by allocate) and, when assertions are off, does nothing.
#pragma once

#include <concepts>
#include <cstddef>

namespace poolkit {

// | expression | returns | throws | meaning |
// | v.base(), v.capacity() | std::byte*, size_t | never | the reserved range |
// | v.granularity() | size_t | never | a power of two; every map and unmap is in whole granules |
// | v.map(at, bytes) | void | out_of_memory, std::invalid_argument, cuda_error | back [at, at+bytes) |
// | v.map_whole(at, bytes) | void | as map | back [at, at+bytes) with one physical allocation, unmapped only whole |
// | v.unmap(at, bytes) | void | never | give [at, at+bytes) back; no work may still use it |
// | v.is_mapped(p) | bool | | the granule holding p is backed |
// | v.mapped_bytes(), v.peak_mapped_bytes() | size_t | | backed now, most backed at once |
// | v.map_calls(), v.unmap_calls() | size_t | | calls that mapped or unmapped something |
// | v.claim(bytes) | std::byte* | out_of_memory | a span of whole granules, unmapped, that allocate never uses: for a strategy that maps inside it |
// | v.unclaim(at, bytes) | void | never | give a claimed span (or whole granules of one) back, nothing mapped in it |
// | v.synchronize() | void | cuda_error | waits until no work can use memory unmapped after it (all of the device's work) |
// Optional: v.created_allocations(), v.released_allocations() -> size_t, the physical allocations
// made (one per granule of a map, one per map_whole) and given back (each one's unmap), the
// driver's unit of cost (poolkit-replay reports them). Optional: v.may_unmap() -> bool, false
// while nothing may be unmapped now (a stream_ordered lane's upstream while a CUDA capture may
// run): a strategy then keeps its granules mapped for later.
//
// aliasing_virtual_memory adds v.alias(at, from, bytes): [at, at + bytes), unmapped, maps the
// physical memory already mapped at [from, from + bytes) — whole physical allocations (the driver
// maps no part of one), not an alias — so that one memory has two addresses (what lets a pool
// serve a large request from free pieces of memory that are not contiguous: GMLake's stitching).
// It adds no physical memory (mapped_bytes() does not move) and counts one map call; unmap(at,
// bytes) takes the alias back, whole and alone, and until then the allocations under `from` may
// not be unmapped (asserted, like any unmap that breaks a rule). Bad ranges throw
// std::invalid_argument, as map's do.
template <class V>
concept virtual_memory = requires(V& v, const V& cv, void* at, const void* pointer, std::size_t bytes) {
    { cv.base() } noexcept -> std::same_as<std::byte*>;
    { cv.capacity() } noexcept -> std::same_as<std::size_t>;
    { cv.granularity() } noexcept -> std::same_as<std::size_t>;
    { v.map(at, bytes) } -> std::same_as<void>;
    { v.map_whole(at, bytes) } -> std::same_as<void>;
    { v.unmap(at, bytes) } noexcept -> std::same_as<void>;
    { cv.is_mapped(pointer) } -> std::same_as<bool>;
    { cv.mapped_bytes() } -> std::same_as<std::size_t>;
    { cv.peak_mapped_bytes() } -> std::same_as<std::size_t>;
    { cv.map_calls() } -> std::same_as<std::size_t>;
    { cv.unmap_calls() } -> std::same_as<std::size_t>;
    { v.claim(bytes) } -> std::same_as<std::byte*>;
    { v.unclaim(at, bytes) } noexcept -> std::same_as<void>;
    v.synchronize();
};

template <class V>
concept aliasing_virtual_memory = virtual_memory<V> && requires(V& v, void* at, const void* from, std::size_t bytes) {
    { v.alias(at, from, bytes) } -> std::same_as<void>;
};

}  // namespace poolkit
