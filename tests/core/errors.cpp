#include <poolkit/core/assert.hpp>
#include <poolkit/core/errors.hpp>

#include <doctest/doctest.h>

#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>

using namespace poolkit;

TEST_CASE("out_of_memory is a std::bad_alloc whose message gives the figures it knows") {
    static_assert(std::is_base_of_v<std::bad_alloc, out_of_memory>);
    constexpr std::size_t GiB = std::size_t{1} << 30;
    memory_figures figures = memory_figures::request(3u << 20, 256);
    figures.live_bytes = 5 * GiB;
    figures.reserved_bytes = 6 * GiB;
    figures.cached_bytes = 1 * GiB;
    const out_of_memory error("best_fit", figures);
    const std::string message = error.what();
    CHECK(message ==
          "poolkit: best_fit is out of memory: asked for 3.00 MiB (3145728 bytes) aligned to 256; "
          "live 5.00 GiB (5368709120 bytes); reserved 6.00 GiB (6442450944 bytes); cached 1.00 GiB (1073741824 bytes)");
    CHECK(error.requested_bytes() == (3u << 20));
    CHECK(error.figures().reserved_bytes == 6 * GiB);

    const out_of_memory small("x", memory_figures::request(100, 0));
    CHECK(std::string(small.what()) == "poolkit: x is out of memory: asked for 100 B");
    try {
        throw out_of_memory("x", memory_figures::request(1, 1));
    } catch (const std::bad_alloc& caught) {
        CHECK(std::string(caught.what()).find("out of memory") != std::string::npos);
    }
}

TEST_CASE("cuda_error keeps the runtime's code") {
    const cuda_error error(2, "poolkit: cudaMalloc failed");
    CHECK(error.code() == 2);
    CHECK(std::string(error.what()) == "poolkit: cudaMalloc failed");
    static_assert(std::is_base_of_v<std::runtime_error, cuda_error>);
}

namespace {
void checked(int value) { POOLKIT_ASSERT(value > 0, "value must be positive"); }
void verified(int value) { POOLKIT_VERIFY(value > 0, "value must be positive"); }
struct assertion_seen : std::exception {};
[[noreturn]] void throwing_handler(const assertion_failure&) { throw assertion_seen{}; }
}  // namespace

TEST_CASE("POOLKIT_VERIFY is active in every build") {
    const assertion_handler previous = set_assertion_handler(&throwing_handler);
    CHECK_NOTHROW(verified(1));
    CHECK_THROWS_AS(verified(0), assertion_seen);
    set_assertion_handler(previous);
}

TEST_CASE("POOLKIT_ASSERT calls the installed handler") {
#if POOLKIT_ENABLE_ASSERTS
    const assertion_handler previous = set_assertion_handler(&throwing_handler);
    CHECK_NOTHROW(checked(1));
    CHECK_THROWS_AS(checked(0), assertion_seen);
    const bool restored_ours = set_assertion_handler(previous) == &throwing_handler;
    CHECK(restored_ours);
#else
    CHECK_NOTHROW(checked(0));  // compiled out under NDEBUG
#endif
}

TEST_CASE("memory_figures::held derives the cached bytes") {
    const memory_figures figures = memory_figures::held(100, 256, 3000, 5000);
    CHECK(figures.requested_bytes == 100);
    CHECK(figures.live_bytes == 3000);
    CHECK(figures.reserved_bytes == 5000);
    CHECK(figures.cached_bytes == 2000);
    CHECK(memory_figures::held(1, 1, 10, 4).cached_bytes == 0);  // never wraps
}
