// Chunks taken from the upstream, as every chunked strategy takes, files and finds them: best_fit,
// buddy, monotonic and the slabs of size_classes and fixed_size.
//
//     chunk_index<Chunk, Tag>                      a strategy's chunks in address order: an
//                                                  intrusive set of records with `address` and
//                                                  `bytes` members, hooked by set_hook<Tag>
//     find_chunk(index, address)                   the chunk that contains `address`, or nullptr.
//                                                  O(log chunks)
//     fits_under(bytes, reserved, maximum)         whether a chunk of `bytes` keeps the reserved
//                                                  total within `maximum`, without overflow
//     allocate_chunk(upstream, bytes, alignment)   the upstream's memory, or nullptr when it throws
//                                                  std::bad_alloc or returns nullptr
//     grow_chunk(preferred, exact, take, release)  the growth sequence below
//
// The growth sequence, when nothing a strategy holds fits a request: a chunk of the preferred size;
// else a chunk of exactly what the request needs, when that differs; else every wholly free chunk
// goes back (release) and the exact size is tried once more. Then the strategy throws
// out_of_memory. An absent size (std::nullopt: it cannot fit under the maximum, or overflows) is
// skipped.
#pragma once

#include <poolkit/strategy/detail/intrusive.hpp>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <new>
#include <optional>

namespace poolkit::detail {

// Orders chunk records by address, and compares them with plain addresses for lookups.
struct by_chunk_address {
    template <class Chunk>
    bool operator()(const Chunk& a, const Chunk& b) const noexcept {
        return a.address < b.address;
    }
    template <class Chunk>
    bool operator()(const Chunk& a, std::uintptr_t b) const noexcept {
        return a.address < b;
    }
    template <class Chunk>
    bool operator()(std::uintptr_t a, const Chunk& b) const noexcept {
        return a < b.address;
    }
};

template <class Chunk, class Tag>
using chunk_index = intrusive::set<Chunk, Tag, by_chunk_address>;

// The chunk of `index` whose [address, address + bytes) holds `address`, or nullptr.
template <class Index>
[[nodiscard]] auto find_chunk(const Index& index, std::uintptr_t address) noexcept -> const typename Index::value_type* {
    auto after = index.upper_bound(address, by_chunk_address{});
    if (after == index.begin()) return nullptr;
    const auto& chunk = *std::prev(after);
    return address - chunk.address < chunk.bytes ? &chunk : nullptr;
}

[[nodiscard]] constexpr bool fits_under(std::size_t bytes, std::size_t reserved, std::size_t maximum) noexcept {
    return reserved <= maximum && bytes <= maximum - reserved;
}

// Memory for a chunk; nullptr where the upstream refuses. Other exceptions pass through.
template <class Upstream>
[[nodiscard]] void* allocate_chunk(Upstream& upstream, std::size_t bytes, std::size_t alignment) {
    try {
        return upstream.allocate(bytes, alignment);
    } catch (const std::bad_alloc&) {
        return nullptr;
    }
}

// The growth sequence. `take(bytes)` takes a chunk of `bytes` and files it, returning what the
// strategy needs of it (a block, a chunk record, true), or a null / false value when the upstream
// refuses or the maximum forbids; `release()` returns every wholly free chunk. Returns what the
// successful `take` returned, else a value-initialized result.
template <class Take, class Release>
[[nodiscard]] auto grow_chunk(std::optional<std::size_t> preferred, std::optional<std::size_t> exact, Take&& take, Release&& release)
    -> decltype(take(std::size_t{})) {
    if (preferred) {
        if (auto fresh = take(*preferred)) return fresh;
    }
    if (exact && exact != preferred) {
        if (auto fresh = take(*exact)) return fresh;
    }
    release();
    if (exact) return take(*exact);
    return {};
}

}  // namespace poolkit::detail
