// What is special about simulated_resource: gaps, contiguity, capacity, ownership, reuse.
#include "../support/sizes.hpp"

#include <poolkit/upstream/simulated_resource.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace poolkit;

namespace {
using poolkit::test::address;
using poolkit::test::MiB;
}  // namespace

TEST_CASE("successive chunks are separated by a gap unless contiguous is asked for") {
    simulated_resource gapped{{.capacity = 64 * MiB}};
    void* a = gapped.allocate(MiB);
    void* b = gapped.allocate(MiB);
    CHECK(address(b) >= address(a) + MiB + gapped.options().granularity);
    gapped.deallocate(a, MiB);
    gapped.deallocate(b, MiB);

    simulated_resource contiguous{{.capacity = 64 * MiB, .contiguous = true}};
    void* c = contiguous.allocate(MiB);
    void* d = contiguous.allocate(MiB);
    CHECK(address(d) == address(c) + MiB);
    contiguous.deallocate(c, MiB);
    contiguous.deallocate(d, MiB);
    contiguous.check_invariants();
}

TEST_CASE("sizes round up to the granularity, capacity counts rounded live bytes") {
    simulated_resource resource{{.capacity = 4 * MiB, .granularity = 4096}};
    void* small = resource.allocate(1);
    CHECK(resource.live_bytes() == 4096);
    void* rest = resource.allocate(4 * MiB - 4096);
    CHECK(resource.live_bytes() == 4 * MiB);
    CHECK(resource.try_allocate(1) == nullptr);
    try {
        static_cast<void>(resource.allocate(1));
        FAIL("allocate past the capacity succeeded");
    } catch (const out_of_memory& error) {
        const std::string message = error.what();
        CHECK(message.find("simulated_resource") != std::string::npos);
        CHECK(error.figures().live_bytes == 4 * MiB);
        CHECK(error.figures().limit_bytes == 4 * MiB);
    }
    resource.deallocate(small, 1);
    void* again = resource.allocate(100);  // freed space is reused
    CHECK(again != nullptr);
    resource.deallocate(again, 100);
    resource.deallocate(rest, 4 * MiB - 4096);
    CHECK(resource.live_bytes() == 0);
    resource.check_invariants();
}

TEST_CASE("owns answers for live allocations only") {
    simulated_resource resource{{.capacity = 64 * MiB}};
    auto* block = static_cast<char*>(resource.allocate(1000));
    CHECK(resource.owns(block));
    CHECK(resource.owns(block + 999));
    CHECK_FALSE(resource.owns(block + 1024));  // past the rounded block, in the gap
    int on_stack = 0;
    CHECK_FALSE(resource.owns(&on_stack));
    resource.deallocate(block, 1000);
    CHECK_FALSE(resource.owns(block));
}

TEST_CASE("the default simulated range costs no memory and holds a 200 GiB peak") {
    simulated_resource resource;  // 256 GiB reserves 512 GiB of address space (TSan's layout allows it)
    std::vector<void*> blocks;
    for (int i = 0; i < 2; ++i) blocks.push_back(resource.allocate(std::size_t{100} << 30));
    CHECK(resource.live_bytes() == std::size_t{200} << 30);
    for (void* block : blocks) resource.deallocate(block, std::size_t{100} << 30);
    resource.check_invariants();
}

TEST_CASE("random allocate and free keep the invariants and return everything") {
    simulated_resource resource{{.capacity = 256 * MiB}};
    std::mt19937_64 random(7);
    struct live_block {
        void* pointer;
        std::size_t bytes;
    };
    std::vector<live_block> live;
    for (int step = 0; step < 5000; ++step) {
        if (live.empty() || random() % 100 < 55) {
            const std::size_t bytes = 1 + random() % (random() % 4 == 0 ? 8 * MiB : 20000);
            const std::size_t alignment = std::size_t{1} << (random() % 16);
            void* pointer = resource.try_allocate(bytes, alignment);
            if (pointer == nullptr) continue;
            CHECK(is_aligned(pointer, alignment));
            live.push_back({pointer, bytes});
        } else {
            const std::size_t index = random() % live.size();
            resource.deallocate(live[index].pointer, live[index].bytes);
            live[index] = live.back();
            live.pop_back();
        }
        if (step % 50 == 0) resource.check_invariants();
    }
    for (const auto& block : live) resource.deallocate(block.pointer, block.bytes);
    CHECK(resource.live_bytes() == 0);
    CHECK(resource.live_allocations() == 0);
    resource.check_invariants();
}

TEST_CASE("simulated_resource is safe to share between threads" * doctest::test_suite("concurrency")) {
    simulated_resource resource{{.capacity = 1024 * MiB}};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&resource, t] {
            std::mt19937_64 random(static_cast<unsigned>(t));
            std::vector<std::pair<void*, std::size_t>> live;
            for (int step = 0; step < 4000; ++step) {
                if (live.empty() || random() % 2 == 0) {
                    const std::size_t bytes = 1 + random() % 100000;
                    live.emplace_back(resource.allocate(bytes), bytes);
                } else {
                    resource.deallocate(live.back().first, live.back().second);
                    live.pop_back();
                }
            }
            for (auto [pointer, bytes] : live) resource.deallocate(pointer, bytes);
        });
    }
    for (auto& thread : threads) thread.join();
    CHECK(resource.live_bytes() == 0);
    resource.check_invariants();
}
