// Address ranges a test holds aside, and whether a block overlaps one: for checking that memory of
// one kind (a CUDA graph's, say) is never handed out as another's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace poolkit::test {

struct span {
    std::uintptr_t begin, end;
};

[[nodiscard]] inline span span_of(const void* pointer, std::size_t bytes) noexcept {
    const auto at = reinterpret_cast<std::uintptr_t>(pointer);
    return {at, at + bytes};
}

[[nodiscard]] inline bool overlaps(const void* pointer, std::size_t bytes, const std::vector<span>& spans) noexcept {
    const span block = span_of(pointer, bytes);
    for (const span& s : spans) {
        if (block.begin < s.end && s.begin < block.end) return true;
    }
    return false;
}

}  // namespace poolkit::test
