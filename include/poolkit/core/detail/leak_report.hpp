// What a strategy says when it is destroyed with blocks still live: in builds with
// POOLKIT_ENABLE_ASSERTS, one line on stderr with the count and the bytes; nothing otherwise.
// The strategy still returns every chunk to its upstream.
#pragma once

#include <poolkit/core/assert.hpp>

#include <cstddef>
#include <cstdio>

namespace poolkit::detail {

inline void report_leaks([[maybe_unused]] const char* strategy, [[maybe_unused]] std::size_t blocks,
                         [[maybe_unused]] std::size_t bytes) noexcept {
#if POOLKIT_ENABLE_ASSERTS
    if (blocks == 0) return;
    std::fprintf(stderr,
                 "poolkit: %s destroyed with %zu block%s (%zu bytes) still live; its chunks go back "
                 "upstream anyway\n",
                 strategy, blocks, blocks == 1 ? "" : "s", bytes);
    std::fflush(stderr);
#endif
}

}  // namespace poolkit::detail
