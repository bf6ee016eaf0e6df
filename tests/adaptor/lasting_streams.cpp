// detail::lasting_streams: declared handles are found with their first id, others are not, the
// table refuses past its capacity, and readers meet a writer without a lock.
#include <poolkit/adaptor/detail/lasting_streams.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace {

using poolkit::detail::lasting_streams;

// A handle as the driver's: an object's address, never null.
const void* lasting_handle(std::uintptr_t n) { return reinterpret_cast<const void*>(0x7f0000000000 + 0x1000 * n); }

}  // namespace

TEST_CASE("lasting_streams: a declared stream is found with the id it was declared with") {
    const auto streams = std::make_unique<lasting_streams>();
    std::uint64_t id = 0;
    CHECK_FALSE(streams->find(lasting_handle(1), id));
    CHECK(streams->declare(lasting_handle(1), 41));
    CHECK(streams->declare(lasting_handle(2), 42));
    REQUIRE(streams->find(lasting_handle(1), id));
    CHECK(id == 41);
    REQUIRE(streams->find(lasting_handle(2), id));
    CHECK(id == 42);
    CHECK_FALSE(streams->find(lasting_handle(3), id));
    SUBCASE("declaring again keeps the first id") {
        CHECK(streams->declare(lasting_handle(1), 99));
        REQUIRE(streams->find(lasting_handle(1), id));
        CHECK(id == 41);
        CHECK(streams->size() == 2);
    }
}

TEST_CASE("lasting_streams: past its capacity a declaration is refused and nothing changes") {
    const auto streams = std::make_unique<lasting_streams>();
    for (std::uintptr_t n = 0; n < lasting_streams::capacity; ++n) REQUIRE(streams->declare(lasting_handle(n), n + 1));
    CHECK_FALSE(streams->declare(lasting_handle(lasting_streams::capacity), 7));
    CHECK(streams->declare(lasting_handle(5), 7));  // one declared already still is
    std::uint64_t id = 0;
    CHECK_FALSE(streams->find(lasting_handle(lasting_streams::capacity), id));
    for (std::uintptr_t n = 0; n < lasting_streams::capacity; ++n) {
        REQUIRE(streams->find(lasting_handle(n), id));
        CHECK(id == n + 1);
    }
    CHECK(streams->size() == lasting_streams::capacity);
}

TEST_CASE("lasting_streams: readers find every stream a writer declared, with its id, without a lock") {
    const auto streams = std::make_unique<lasting_streams>();
    constexpr std::uintptr_t declared = 300;
    std::atomic<std::uintptr_t> published{0};  // streams 0 .. published-1 are declared
    std::atomic<bool> wrong{false};
    std::vector<std::thread> readers;
    for (int r = 0; r < 3; ++r) {
        readers.emplace_back([&] {
            while (published.load(std::memory_order_acquire) < declared) {
                const std::uintptr_t seen = published.load(std::memory_order_acquire);
                for (std::uintptr_t n = 0; n < seen; ++n) {
                    std::uint64_t id = 0;
                    if (!streams->find(lasting_handle(n), id) || id != 1000 + n) wrong = true;
                }
            }
        });
    }
    for (std::uintptr_t n = 0; n < declared; ++n) {
        REQUIRE(streams->declare(lasting_handle(n), 1000 + n));
        published.store(n + 1, std::memory_order_release);
    }
    for (std::thread& reader : readers) reader.join();
    CHECK_FALSE(wrong.load());
}
