// try_allocate() for a block whose allocate() throws: the same call, nullptr instead of any
// exception (out_of_memory, bad_alloc for its bookkeeping). A bad alignment is refused first,
// where allocate() would assert.
#pragma once

#include <poolkit/core/alignment.hpp>

#include <cstddef>

namespace poolkit::detail {

template <class R>
[[nodiscard]] void* allocate_or_null(R& r, std::size_t bytes, std::size_t alignment) noexcept {
    if (!is_power_of_two(alignment)) return nullptr;
    try {
        return r.allocate(bytes, alignment);
    } catch (...) {
        return nullptr;
    }
}

}  // namespace poolkit::detail
