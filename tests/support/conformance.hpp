// The generic conformance suite: the contract of docs/concepts.md, checked for any resource.
//
// A fixture F is default-constructible and provides
//   static constexpr const char* name;
//   auto& resource();                 // the resource under test
//   test::instrumented<>* upstream(); // the instrumented upstream it draws on, or nullptr
//   static constexpr bool touchable;  // blocks may be written and read through fill / holds
//   void fill(void* p, size_t bytes, unsigned char value);
//   bool holds(const void* p, size_t bytes, unsigned char value);
//   static constexpr bool stateless;  // two separately made instances are equal
// and, where the resource can be exhausted cheaply, `void exhaust_setup()` that makes the next
// moderate request fail (for example a small capacity).
//
// Include this header in one translation unit per test binary and instantiate the suite there with
// TEST_CASE_TEMPLATE_INVOKE(conformance, fixtures...).
#pragma once

#include "host_faults.hpp"
#include "instrumented.hpp"

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/errors.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace poolkit::test {

// Fixture parts for host memory.
struct host_touch {
    static constexpr bool touchable = true;
    static void fill(void* pointer, std::size_t bytes, unsigned char value) { std::memset(pointer, value, bytes); }
    static bool holds(const void* pointer, std::size_t bytes, unsigned char value) {
        const auto* first = static_cast<const unsigned char*>(pointer);
        return std::all_of(first, first + bytes, [value](unsigned char byte) { return byte == value; });
    }
};
struct no_touch {
    static constexpr bool touchable = false;
    static void fill(void*, std::size_t, unsigned char) {}
    static bool holds(const void*, std::size_t, unsigned char) { return true; }
};

struct allocation {
    void* pointer;
    std::size_t bytes;
    std::size_t alignment;
};

inline bool overlap(const allocation& a, const allocation& b) {
    const auto a_begin = reinterpret_cast<std::uintptr_t>(a.pointer);
    const auto b_begin = reinterpret_cast<std::uintptr_t>(b.pointer);
    return a_begin < b_begin + b.bytes && b_begin < a_begin + a.bytes;
}

// Random allocate/free traffic over `r` for `steps` steps (allocate `allocate_percent` % of them,
// up to `large` bytes now and then), with before() and after() around each allocate call (where
// a test injects faults). Each block must be aligned and disjoint from the live ones; a
// std::bad_alloc is counted as refused. At the end every block is freed; invariants are checked
// every 16 steps and then. Returns the requests refused.
template <class R, class Before, class After>
std::size_t random_traffic_refused(R& r, std::uint64_t seed, int steps, unsigned allocate_percent, std::size_t large, Before before,
                                   After after) {
    std::mt19937_64 random(seed);
    std::vector<allocation> live;
    std::size_t refused = 0;
    for (int step = 0; step < steps; ++step) {
        if (live.empty() || random() % 100 < allocate_percent) {
            const std::size_t bytes = 1 + random() % (random() % 8 == 0 ? large : 8192);
            const std::size_t alignment = std::size_t{1} << (random() % 10);
            void* pointer = nullptr;
            before(random);
            try {
                pointer = r.allocate(bytes, alignment);
            } catch (const std::bad_alloc&) {
                ++refused;
            }
            after();
            if (pointer != nullptr) {
                REQUIRE(is_aligned(pointer, alignment));
                for (const auto& other : live) REQUIRE_FALSE(overlap(other, {pointer, bytes, alignment}));
                live.push_back({pointer, bytes, alignment});
            }
        } else {
            const std::size_t index = random() % live.size();
            r.deallocate(live[index].pointer, live[index].bytes, live[index].alignment);
            live[index] = live.back();
            live.pop_back();
        }
        if constexpr (has_check_invariants<R>) {
            if (step % 16 == 0) r.check_invariants();
        }
    }
    for (const auto& block : live) r.deallocate(block.pointer, block.bytes, block.alignment);
    if constexpr (has_check_invariants<R>) r.check_invariants();
    return refused;
}

inline constexpr std::size_t near_max_sizes[] = {
    std::numeric_limits<std::size_t>::max(),
    std::numeric_limits<std::size_t>::max() - 1,
    std::numeric_limits<std::size_t>::max() - 255,
    std::numeric_limits<std::size_t>::max() / 2 + 1,
};

}  // namespace poolkit::test

// NOLINTBEGIN: doctest macros
TEST_CASE_TEMPLATE_DEFINE("conformance", F, conformance) {
    using namespace poolkit;
    using namespace poolkit::test;
    F fixture;
    auto& r = fixture.resource();
    static_assert(resource<std::remove_reference_t<decltype(r)>>);
    INFO("resource under test: ", F::name);

    SUBCASE("size 0 gives nullptr and deallocate(nullptr, 0) does nothing") {
        CHECK(r.allocate(0, default_alignment) == nullptr);
        CHECK(r.allocate(0, 1) == nullptr);
        r.deallocate(nullptr, 0, default_alignment);
    }

    SUBCASE("an alignment that is not a power of two throws std::invalid_argument") {
        for (std::size_t alignment : {std::size_t{0}, std::size_t{3}, std::size_t{24}, std::size_t{257}, std::size_t{4097},
                                      std::numeric_limits<std::size_t>::max()}) {
            CAPTURE(alignment);
            CHECK_THROWS_AS(static_cast<void>(r.allocate(64, alignment)), std::invalid_argument);
        }
    }

    SUBCASE("every power-of-two alignment up to 4 KiB is honoured") {
        for (std::size_t alignment = 1; alignment <= 4096; alignment *= 2) {
            for (std::size_t bytes :
                 {std::size_t{1}, std::size_t{7}, std::size_t{256}, std::size_t{1000}, std::size_t{4096}, std::size_t{65539}}) {
                CAPTURE(alignment);
                CAPTURE(bytes);
                void* pointer = r.allocate(bytes, alignment);
                REQUIRE(pointer != nullptr);
                CHECK(is_aligned(pointer, alignment));
                fixture.fill(pointer, bytes, 0x5a);
                CHECK(fixture.holds(pointer, bytes, 0x5a));
                r.deallocate(pointer, bytes, alignment);
            }
        }
    }

    SUBCASE("live blocks never overlap and keep their contents") {
        std::mt19937_64 random(42);
        std::vector<allocation> live;
        for (int step = 0; step < 400; ++step) {
            if (live.empty() || random() % 100 < 60) {
                const std::size_t bytes = 1 + random() % (random() % 8 == 0 ? 300000 : 3000);
                const std::size_t alignment = std::size_t{1} << (random() % 13);
                void* pointer = r.allocate(bytes, alignment);
                REQUIRE(pointer != nullptr);
                REQUIRE(is_aligned(pointer, alignment));
                const allocation block{pointer, bytes, alignment};
                for (const auto& other : live) REQUIRE_FALSE(overlap(block, other));
                fixture.fill(pointer, bytes, static_cast<unsigned char>(live.size()));
                live.push_back(block);
            } else {
                const std::size_t index = random() % live.size();
                const allocation block = live[index];
                REQUIRE(fixture.holds(block.pointer, block.bytes, static_cast<unsigned char>(index)));
                r.deallocate(block.pointer, block.bytes, block.alignment);
                live[index] = live.back();
                live.pop_back();
                if (index < live.size()) fixture.fill(live[index].pointer, live[index].bytes, static_cast<unsigned char>(index));
            }
        }
        std::shuffle(live.begin(), live.end(), random);
        for (const auto& block : live) r.deallocate(block.pointer, block.bytes, block.alignment);
    }

    SUBCASE("a request near SIZE_MAX throws out_of_memory that names the size") {
        for (std::size_t bytes : near_max_sizes) {
            for (std::size_t alignment : {std::size_t{1}, default_alignment, std::size_t{4096}}) {
                CAPTURE(bytes);
                CAPTURE(alignment);
                try {
                    static_cast<void>(r.allocate(bytes, alignment));
                    FAIL("allocate did not throw");
                } catch (const out_of_memory& error) {
                    CHECK(error.requested_bytes() == bytes);
                    CHECK(std::string(error.what()).find(std::to_string(bytes)) != std::string::npos);
                }
            }
        }
        if constexpr (has_try_allocate<std::remove_reference_t<decltype(r)>>) {
            for (std::size_t bytes : near_max_sizes) CHECK(r.try_allocate(bytes, default_alignment) == nullptr);
        }
    }

    SUBCASE("exhaustion throws out_of_memory, a std::bad_alloc, and the resource still works") {
        if constexpr (requires { fixture.exhaust_setup(); }) {
            fixture.exhaust_setup();
            std::vector<allocation> live;
            bool exhausted = false;
            for (int i = 0; i < 100000 && !exhausted; ++i) {
                try {
                    live.push_back({r.allocate(4096, default_alignment), 4096, default_alignment});
                } catch (const out_of_memory& error) {
                    exhausted = true;
                    const std::string message = error.what();
                    CHECK(message.find("out of memory") != std::string::npos);
                    CHECK(message.find("4096") != std::string::npos);
                    const std::bad_alloc& as_bad_alloc = error;
                    static_cast<void>(as_bad_alloc);
                }
            }
            CHECK(exhausted);
            REQUIRE_FALSE(live.empty());
            r.deallocate(live.back().pointer, live.back().bytes, live.back().alignment);
            live.pop_back();
            void* again = r.allocate(4096, default_alignment);
            CHECK(again != nullptr);
            r.deallocate(again, 4096, default_alignment);
            for (const auto& block : live) r.deallocate(block.pointer, block.bytes, block.alignment);
        }
    }

    SUBCASE("an upstream failing every n-th call: each request is served or refused, nothing is lost") {
        if (auto* upstream = fixture.upstream()) {
            std::size_t refused = 0;
            for (std::size_t every : {2, 3, 7}) {
                upstream->fail_every(every);
                refused += random_traffic_refused(
                    r, 11 + every, 600, 55, 2 << 20, [](auto&) {}, [] {});
                upstream->fail_every(0);
                void* after = r.allocate(4096, default_alignment);  // the resource still works
                CHECK(after != nullptr);
                r.deallocate(after, 4096, default_alignment);
            }
            // A pool that never needs its upstream again (one large chunk) sees no failure at all.
            MESSAGE("upstream failures injected: ", upstream->injected_failures(), "; requests refused: ", refused);
            if constexpr (has_release<std::remove_reference_t<decltype(r)>>) {
                r.release();
                CHECK(upstream->live_bytes() == 0);  // every block it took came back
            }
        }
    }

    SUBCASE("the host out of memory inside allocate: std::bad_alloc, and nothing lost or broken") {
        const std::size_t refused = random_traffic_refused(
            r, 5, 400, 60, 1 << 20, [](auto& random) { fail_host_allocation_after(static_cast<long>(random() % 3)); },
            [] { stop_failing_host_allocations(); });
        MESSAGE("allocate calls refused for want of host memory: ", refused);
        if (auto* upstream = fixture.upstream()) {
            if constexpr (has_release<std::remove_reference_t<decltype(r)>>) {
                r.release();
                CHECK(upstream->live_bytes() == 0);
            }
        }
    }

    SUBCASE("equality: reflexive; stateless resources are all equal and free each other's memory") {
        CHECK(r == r);
        CHECK_FALSE(r != r);
        if constexpr (F::stateless) {
            F other;
            CHECK(other.resource() == r);
            void* pointer = r.allocate(512, default_alignment);
            other.resource().deallocate(pointer, 512, default_alignment);
        }
    }

    SUBCASE("stream-ordered calls on the default stream round-trip") {
        if constexpr (stream_resource<std::remove_reference_t<decltype(r)>>) {
            void* pointer = r.allocate_async(1000, 512, default_stream);
            REQUIRE(pointer != nullptr);
            CHECK(is_aligned(pointer, 512));
            r.deallocate_async(pointer, 1000, 512, default_stream);
            CHECK(r.allocate_async(0, 512, default_stream) == nullptr);
        }
    }

    // Every subcase above frees what it took: the upstream must see each block come back whole.
    if (auto* upstream = fixture.upstream()) {
        if constexpr (has_release<std::remove_reference_t<decltype(r)>>) r.release();
        CHECK(upstream->errors() == std::vector<std::string>{});
    }
}
// NOLINTEND
