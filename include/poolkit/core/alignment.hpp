// Alignment and size arithmetic that cannot overflow.
//
// Every rounding helper here reports overflow instead of wrapping: a request near SIZE_MAX must
// end in poolkit::out_of_memory, never in a small block.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

namespace poolkit {

// The alignment of a request that names none: what cudaMalloc guarantees.
inline constexpr std::size_t default_alignment = 256;

[[nodiscard]] constexpr bool is_power_of_two(std::size_t value) noexcept { return std::has_single_bit(value); }

// Throws std::invalid_argument unless `alignment` is a power of two. Alignment is never changed
// silently: a caller that passes 24 learns about it.
inline void validate_alignment(std::size_t alignment) {
    if (!is_power_of_two(alignment)) {
        throw std::invalid_argument("poolkit: alignment " + std::to_string(alignment) + " is not a power of two");
    }
}

// `value` rounded up to a multiple of `alignment` (a power of two), or nothing on overflow.
[[nodiscard]] constexpr std::optional<std::size_t> checked_align_up(std::size_t value, std::size_t alignment) noexcept {
    const std::size_t mask = alignment - 1;
    if (value > std::numeric_limits<std::size_t>::max() - mask) return std::nullopt;
    return (value + mask) & ~mask;
}

// `value` rounded up to a multiple of `granularity` (any positive number), or nothing on overflow.
[[nodiscard]] constexpr std::optional<std::size_t> checked_round_up(std::size_t value, std::size_t granularity) noexcept {
    const std::size_t remainder = value % granularity;
    if (remainder == 0) return value;
    const std::size_t step = granularity - remainder;
    if (value > std::numeric_limits<std::size_t>::max() - step) return std::nullopt;
    return value + step;
}

// a + b, or nothing on overflow.
[[nodiscard]] constexpr std::optional<std::size_t> checked_add(std::size_t a, std::size_t b) noexcept {
    if (a > std::numeric_limits<std::size_t>::max() - b) return std::nullopt;
    return a + b;
}

// a * b, or nothing on overflow.
[[nodiscard]] constexpr std::optional<std::size_t> checked_mul(std::size_t a, std::size_t b) noexcept {
    if (b != 0 && a > std::numeric_limits<std::size_t>::max() / b) return std::nullopt;
    return a * b;
}

// Rounding for values known not to overflow (addresses inside a range already handed out).
[[nodiscard]] constexpr std::uintptr_t align_up(std::uintptr_t value, std::size_t alignment) noexcept {
    return (value + (alignment - 1)) & ~static_cast<std::uintptr_t>(alignment - 1);
}

[[nodiscard]] constexpr std::uintptr_t align_down(std::uintptr_t value, std::size_t alignment) noexcept {
    return value & ~static_cast<std::uintptr_t>(alignment - 1);
}

[[nodiscard]] inline bool is_aligned(const void* pointer, std::size_t alignment) noexcept {
    return (reinterpret_cast<std::uintptr_t>(pointer) & (alignment - 1)) == 0;
}

}  // namespace poolkit
