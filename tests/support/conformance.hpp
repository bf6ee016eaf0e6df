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
// Instantiate the suite with TEST_CASE_TEMPLATE_INVOKE(conformance, fixtures...) in any translation
// unit. The subcases (conformance_suite) see the fixture through a subject: they are compiled once,
// whatever the fixtures.
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

// What the suite needs of a fixture and its resource, behind virtual calls: the suite's body is
// compiled once per binary, and each fixture instantiates only subject_of<F>'s few forwarding
// functions (a matrix row instantiates the suite for 29 stacks). What a resource lacks (try_allocate,
// check_invariants, release, the stream-ordered calls) is reported by the has_* functions.
class subject {
public:
    virtual ~subject() = default;
    virtual void* allocate(std::size_t bytes, std::size_t alignment) = 0;
    virtual void deallocate(void* pointer, std::size_t bytes, std::size_t alignment) = 0;
    [[nodiscard]] virtual bool has_try_allocate() const = 0;
    virtual void* try_allocate(std::size_t bytes, std::size_t alignment) = 0;
    virtual void check_invariants() = 0;  // nothing where the resource has none
    [[nodiscard]] virtual bool has_release() const = 0;
    virtual void release() = 0;
    [[nodiscard]] virtual bool is_stream_resource() const = 0;
    virtual void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) = 0;
    virtual void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) = 0;
    // The equality subcase: r == r and !(r != r); for a stateless fixture, a second one equals it
    // and frees what it allocated.
    virtual void check_equality() = 0;
    // The fixture's.
    [[nodiscard]] virtual bool can_exhaust() const = 0;
    virtual void exhaust_setup() = 0;
    virtual instrumented<>* upstream() = 0;
    virtual void fill(void* pointer, std::size_t bytes, unsigned char value) = 0;
    virtual bool holds(const void* pointer, std::size_t bytes, unsigned char value) = 0;
};

template <class F>
class subject_of final : public subject {
public:
    explicit subject_of(F& fixture) : fixture_(fixture), r_(fixture.resource()) {}

    void* allocate(std::size_t bytes, std::size_t alignment) override { return r_.allocate(bytes, alignment); }
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment) override { r_.deallocate(pointer, bytes, alignment); }
    [[nodiscard]] bool has_try_allocate() const override { return poolkit::has_try_allocate<R>; }
    void* try_allocate(std::size_t bytes, std::size_t alignment) override {
        if constexpr (poolkit::has_try_allocate<R>) return r_.try_allocate(bytes, alignment);
        FAIL("try_allocate of a resource without it");
        return nullptr;
    }
    void check_invariants() override {
        if constexpr (poolkit::has_check_invariants<R>) r_.check_invariants();
    }
    [[nodiscard]] bool has_release() const override { return poolkit::has_release<R>; }
    void release() override {
        if constexpr (poolkit::has_release<R>) r_.release();
    }
    [[nodiscard]] bool is_stream_resource() const override { return stream_resource<R>; }
    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) override {
        if constexpr (stream_resource<R>) return r_.allocate_async(bytes, alignment, stream);
        FAIL("allocate_async of a resource without it");
        return nullptr;
    }
    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) override {
        if constexpr (stream_resource<R>) {
            r_.deallocate_async(pointer, bytes, alignment, stream);
        } else {
            FAIL("deallocate_async of a resource without it");
        }
    }
    void check_equality() override {
        CHECK(r_ == r_);
        CHECK_FALSE(r_ != r_);
        if constexpr (F::stateless) {
            F other;
            CHECK(other.resource() == r_);
            void* pointer = r_.allocate(512, default_alignment);
            other.resource().deallocate(pointer, 512, default_alignment);
        }
    }
    [[nodiscard]] bool can_exhaust() const override { return exhaustible; }
    void exhaust_setup() override {
        if constexpr (exhaustible) fixture_.exhaust_setup();
    }
    instrumented<>* upstream() override { return fixture_.upstream(); }
    void fill(void* pointer, std::size_t bytes, unsigned char value) override { fixture_.fill(pointer, bytes, value); }
    bool holds(const void* pointer, std::size_t bytes, unsigned char value) override { return fixture_.holds(pointer, bytes, value); }

private:
    using R = std::remove_reference_t<decltype(std::declval<F&>().resource())>;
    static_assert(resource<R>);
    static constexpr bool exhaustible = requires(F& f) { f.exhaust_setup(); };
    F& fixture_;
    R& r_;
};

// The suite's subcases over one subject.
inline void conformance_suite(subject& r) {
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
                r.fill(pointer, bytes, 0x5a);
                CHECK(r.holds(pointer, bytes, 0x5a));
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
                r.fill(pointer, bytes, static_cast<unsigned char>(live.size()));
                live.push_back(block);
            } else {
                const std::size_t index = random() % live.size();
                const allocation block = live[index];
                REQUIRE(r.holds(block.pointer, block.bytes, static_cast<unsigned char>(index)));
                r.deallocate(block.pointer, block.bytes, block.alignment);
                live[index] = live.back();
                live.pop_back();
                if (index < live.size()) r.fill(live[index].pointer, live[index].bytes, static_cast<unsigned char>(index));
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
        if (r.has_try_allocate()) {
            for (std::size_t bytes : near_max_sizes) CHECK(r.try_allocate(bytes, default_alignment) == nullptr);
        }
    }

    SUBCASE("exhaustion throws out_of_memory, a std::bad_alloc, and the resource still works") {
        if (r.can_exhaust()) {
            r.exhaust_setup();
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
        if (auto* upstream = r.upstream()) {
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
            if (r.has_release()) {
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
        if (auto* upstream = r.upstream()) {
            if (r.has_release()) {
                r.release();
                CHECK(upstream->live_bytes() == 0);
            }
        }
    }

    SUBCASE("equality: reflexive; stateless resources are all equal and free each other's memory") { r.check_equality(); }

    SUBCASE("stream-ordered calls on the default stream round-trip") {
        if (r.is_stream_resource()) {
            void* pointer = r.allocate_async(1000, 512, default_stream);
            REQUIRE(pointer != nullptr);
            CHECK(is_aligned(pointer, 512));
            r.deallocate_async(pointer, 1000, 512, default_stream);
            CHECK(r.allocate_async(0, 512, default_stream) == nullptr);
        }
    }

    // Every subcase above frees what it took: the upstream must see each block come back whole.
    if (auto* upstream = r.upstream()) {
        if (r.has_release()) r.release();
        CHECK(upstream->errors() == std::vector<std::string>{});
    }
}

}  // namespace poolkit::test

// NOLINTBEGIN: doctest macros
TEST_CASE_TEMPLATE_DEFINE("conformance", F, conformance) {
    F fixture;
    poolkit::test::subject_of<F> subject(fixture);
    INFO("resource under test: ", F::name);
    poolkit::test::conformance_suite(subject);
}
// NOLINTEND
