#include <poolkit/core/alignment.hpp>

#include <doctest/doctest.h>

#include <limits>
#include <stdexcept>

using namespace poolkit;

namespace {
constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
}

TEST_CASE("is_power_of_two and validate_alignment") {
    CHECK_FALSE(is_power_of_two(0));
    CHECK(is_power_of_two(1));
    CHECK(is_power_of_two(std::size_t{1} << 63));
    CHECK_FALSE(is_power_of_two(max));
    CHECK_FALSE(is_power_of_two(24));
    CHECK_NOTHROW(validate_alignment(256));
    CHECK_THROWS_WITH_AS(validate_alignment(24), "poolkit: alignment 24 is not a power of two", std::invalid_argument);
    CHECK_THROWS_AS(validate_alignment(0), std::invalid_argument);
}

TEST_CASE("checked rounding reports overflow instead of wrapping") {
    CHECK(checked_align_up(0, 256) == 0);
    CHECK(checked_align_up(1, 256) == 256);
    CHECK(checked_align_up(256, 256) == 256);
    CHECK(checked_align_up(max - 255, 256) == max - 255);
    CHECK_FALSE(checked_align_up(max - 254, 256).has_value());
    CHECK_FALSE(checked_align_up(max, 2).has_value());
    CHECK(checked_align_up(max, 1) == max);

    CHECK(checked_round_up(1000, 512) == 1024);
    CHECK(checked_round_up(1000, 3) == 1002);
    CHECK(checked_round_up(999, 3) == 999);
    CHECK_FALSE(checked_round_up(max, 512).has_value());

    CHECK(checked_add(max - 1, 1) == max);
    CHECK_FALSE(checked_add(max, 1).has_value());
    CHECK(checked_mul(max / 16, 16) == max / 16 * 16);
    CHECK(checked_mul(max, 0) == 0);
    CHECK_FALSE(checked_mul(max / 16 + 1, 16).has_value());

    static_assert(align_up(1, 4096) == 4096);
    static_assert(align_down(4097, 4096) == 4096);
    alignas(64) char buffer[128];
    CHECK(is_aligned(buffer, 64));
    CHECK_FALSE(is_aligned(buffer + 1, 2));
}
