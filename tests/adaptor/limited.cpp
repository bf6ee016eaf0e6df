// limited<>: the cap, the error that names it, and the count under concurrent use.
#include "../support/death.hpp"
#include "../support/instrumented.hpp"

#include <poolkit/adaptor/limited.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace {
using namespace poolkit;
using test::instrumented;
}  // namespace

static_assert(has_try_allocate<limited<new_delete_resource>>);
static_assert(stream_resource<limited<ref<simulated_resource>>>);

TEST_CASE("limited: requests past the cap throw out_of_memory naming the cap, without reaching the upstream") {
    instrumented<> upstream;
    limited<ref<instrumented<>>> capped{upstream, {.limit_bytes = 10000}};
    void* a = capped.allocate(6000);
    CHECK(capped.live_bytes() == 6000);
    try {
        static_cast<void>(capped.allocate(5000));
        FAIL("no throw");
    } catch (const out_of_memory& error) {
        const std::string message = error.what();
        CHECK(message.find("limited") != std::string::npos);
        CHECK(message.find("limit 9.77 KiB (10000 bytes)") != std::string::npos);
        CHECK(message.find("live 5.86 KiB (6000 bytes)") != std::string::npos);
        CHECK(error.figures().limit_bytes == 10000);
    }
    CHECK(upstream.allocations() == 1);
    void* b = capped.allocate(4000);  // exactly up to the cap
    capped.deallocate(a, 6000);
    capped.deallocate(b, 4000);
    CHECK(capped.live_bytes() == 0);
    capped.set_limit(100);
    CHECK(capped.limit() == 100);
    CHECK_THROWS_AS(static_cast<void>(capped.allocate(101)), out_of_memory);
    CHECK(upstream.errors().empty());
}

TEST_CASE("limited: upstream failures give the bytes back") {
    instrumented<> upstream;
    upstream.limit(1000);
    limited<ref<instrumented<>>> capped{upstream, {.limit_bytes = 1 << 20}};
    CHECK_THROWS_AS(static_cast<void>(capped.allocate(5000)), out_of_memory);
    CHECK(capped.live_bytes() == 0);
    limited<new_delete_resource> host{new_delete_resource{}, {.limit_bytes = 100}};
    CHECK(host.try_allocate(200) == nullptr);
    void* p = host.try_allocate(100);
    CHECK(p != nullptr);
    host.deallocate(p, 100);
    CHECK(host.live_bytes() == 0);
}

TEST_CASE("limited: the cap holds under concurrent use" * doctest::test_suite("concurrency")) {
    limited<new_delete_resource> capped{new_delete_resource{}, {.limit_bytes = 64 * 1000}};
    std::atomic<std::size_t> most{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < 4; ++t) {
        workers.emplace_back([&] {
            for (int i = 0; i < 4000; ++i) {
                void* p = capped.try_allocate(1000);
                if (p == nullptr) continue;
                std::size_t seen = capped.live_bytes();
                std::size_t known = most.load();
                while (seen > known && !most.compare_exchange_weak(known, seen)) {
                }
                capped.deallocate(p, 1000);
            }
        });
    }
    for (auto& worker : workers) worker.join();
    CHECK(most.load() <= 64 * 1000);
    CHECK(capped.live_bytes() == 0);
}

#if POOLKIT_ENABLE_ASSERTS
TEST_CASE("limited: a bad deallocation is caught before it reaches the upstream") {
    SUBCASE("freed twice while another block is live") {
        const auto outcome = test::run_in_child([] {
            limited<new_delete_resource> capped{new_delete_resource{}, {.limit_bytes = 10000}};
            void* a = capped.allocate(100);
            void* b = capped.allocate(100);
            capped.deallocate(a, 100);
            capped.deallocate(a, 100);
            capped.deallocate(b, 100);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("limited: deallocate of a pointer not live through it"));
    }
    SUBCASE("never allocated here") {
        const auto outcome = test::run_in_child([] {
            limited<new_delete_resource> capped;
            int outside = 0;
            capped.deallocate(&outside, sizeof outside);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("limited: deallocate of a pointer not live through it"));
    }
    SUBCASE("another size") {
        const auto outcome = test::run_in_child([] {
            limited<new_delete_resource> capped;
            void* a = capped.allocate(100);
            capped.deallocate(a, 1000);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("limited: deallocate with a size other than the one allocated"));
    }
}
#else
TEST_CASE("limited: without assertions a bad deallocation never wraps the count") {
    SUBCASE("an upstream without owns(): the count stops at zero") {
        instrumented<> upstream;
        limited<ref<instrumented<>>> capped{upstream, {.limit_bytes = 10000}};
        void* a = capped.allocate(100);
        capped.deallocate(a, 100);
        capped.deallocate(a, 100);  // freed twice (the upstream sees it and reports it)
        CHECK(capped.live_bytes() == 0);
        void* b = capped.allocate(10000);  // the whole cap is still there
        CHECK(capped.live_bytes() == 10000);
        capped.deallocate(b, 10000);
        CHECK(capped.live_bytes() == 0);
    }
    SUBCASE("an upstream with owns(): only what it took back is subtracted") {
        simulated_resource addresses;
        limited<ref<simulated_resource>> capped{addresses, {.limit_bytes = 10000}};
        void* a = capped.allocate(100);
        void* b = capped.allocate(200);
        capped.deallocate(a, 100);
        capped.deallocate(a, 100);  // freed twice: the upstream does not own it, nothing subtracted
        int outside = 0;
        capped.deallocate(&outside, 5000);
        CHECK(capped.live_bytes() == 200);
        CHECK(capped.owns(b));
        capped.deallocate(b, 200);
        CHECK(capped.live_bytes() == 0);
        CHECK(addresses.live_bytes() == 0);
    }
}
#endif
