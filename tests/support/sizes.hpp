// Byte counts, and a pointer's address, as the tests use them. A test file says
// `using poolkit::test::KiB;` where it needs one: files compiled as one unit (POOLKIT_TEST_UNITY)
// may each say it, where each defining its own would clash.
#pragma once

#include <cstddef>
#include <cstdint>

namespace poolkit::test {

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr std::size_t GiB = std::size_t{1} << 30;

inline std::uintptr_t address(const void* pointer) { return reinterpret_cast<std::uintptr_t>(pointer); }

}  // namespace poolkit::test
