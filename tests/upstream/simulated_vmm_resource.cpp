// What is special about simulated_vmm_resource: the virtual_memory face (granules, counters,
// exhaustion, bad input), the resource face over it, and random sequences against a model.
#include <poolkit/upstream/simulated_vmm_resource.hpp>

#include "../support/death.hpp"
#include "../support/sizes.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace poolkit;

namespace {
using poolkit::test::MiB;
constexpr std::size_t granule = 2 * MiB;

using poolkit::test::address;

// The message of the std::invalid_argument that `call` throws, or "" when it throws none.
template <class Call>
std::string invalid_argument_from(Call&& call) {
    try {
        call();
    } catch (const std::invalid_argument& error) {
        return error.what();
    }
    return "";
}
}  // namespace

static_assert(aliasing_virtual_memory<simulated_vmm_resource>);

TEST_CASE("simulated_vmm_resource: the reservation, its granularity and its defaults") {
    simulated_vmm_resource defaults;
    CHECK(defaults.granularity() == 2 * MiB);
    CHECK(defaults.capacity() == std::size_t{256} << 30);
    CHECK(defaults.physical_limit() == defaults.capacity());
    CHECK(address(defaults.base()) % defaults.granularity() == 0);
    CHECK(defaults.mapped_bytes() == 0);
    CHECK(defaults.map_calls() == 0);
    CHECK_FALSE(defaults.is_mapped(defaults.base()));

    simulated_vmm_resource rounded{{.capacity = 5 * MiB, .granularity = granule, .physical_limit = 3 * MiB}};
    CHECK(rounded.capacity() == 6 * MiB);  // up to whole granules
    CHECK(rounded.physical_limit() == 2 * MiB);  // down to whole granules

    CHECK_THROWS_AS(simulated_vmm_resource({.capacity = MiB, .granularity = 3 * MiB}), std::invalid_argument);
    CHECK_THROWS_AS(simulated_vmm_resource({.capacity = 0}), std::invalid_argument);
    CHECK_THROWS_AS(simulated_vmm_resource({.capacity = ~std::size_t{0} - MiB}), std::invalid_argument);
}

TEST_CASE("simulated_vmm_resource: a run mapped whole unmaps whole, alone or with its neighbours") {
    simulated_vmm_resource vm{{.capacity = 64 * MiB}};
    std::byte* run = vm.base() + 2 * granule;
    vm.map_whole(run, 3 * granule);
    vm.map(run + 3 * granule, 2 * granule);  // two allocations of a granule each
    vm.map_whole(run + 5 * granule, 2 * granule);
    CHECK(vm.map_calls() == 3);
    CHECK(vm.created_allocations() == 4);  // 1 + 2 + 1: what the driver charges for
    CHECK(vm.mapped_bytes() == 7 * granule);
    vm.check_invariants();

    vm.unmap(run + 3 * granule, granule);  // a granule mapped alone still unmaps alone
    CHECK(vm.released_allocations() == 1);
    vm.unmap(run, 3 * granule);  // a whole mapping, exactly
    CHECK(vm.released_allocations() == 2);
    vm.unmap(run + 4 * granule, 3 * granule);  // a granule and the whole mapping beside it, in one call
    CHECK(vm.unmap_calls() == 3);
    CHECK(vm.released_allocations() == 4);
    CHECK(vm.mapped_bytes() == 0);
    vm.check_invariants();

    vm.map_whole(run, granule);  // one granule made whole is an ordinary granule
    vm.unmap(run, granule);
    vm.map_whole(run, 4 * granule);  // the granules of an unmapped whole mapping map again any way
    vm.unmap(run, 4 * granule);
    vm.map(run, 4 * granule);
    vm.unmap(run + granule, granule);
    CHECK(vm.mapped_bytes() == 3 * granule);
    vm.check_invariants();
}

TEST_CASE("simulated_vmm_resource: an alias maps memory already mapped a second time, adding none") {
    simulated_vmm_resource vm{{.capacity = 64 * MiB}};
    std::byte* source = vm.base() + 2 * granule;
    vm.map_whole(source, 3 * granule);
    vm.map(source + 3 * granule, granule);  // a granule of its own: an allocation too
    std::byte* alias = vm.base() + 16 * granule;
    vm.alias(alias, source, 4 * granule);
    CHECK(vm.mapped_bytes() == 4 * granule);  // no physical memory added
    CHECK(vm.peak_mapped_bytes() == 4 * granule);
    CHECK(vm.map_calls() == 3);
    CHECK(vm.created_allocations() == 2);
    CHECK(vm.is_mapped(alias));
    CHECK(vm.is_mapped(alias + 4 * granule - 1));
    CHECK_FALSE(vm.is_mapped(alias + 4 * granule));
    vm.check_invariants();

    // Part of the memory aliased again, elsewhere: whole allocations, any subset of them.
    vm.alias(vm.base() + 24 * granule, source + 3 * granule, granule);
    vm.check_invariants();
    CHECK(invalid_argument_from([&] { vm.map(alias + granule, granule); }).find("already mapped") != std::string::npos);

    vm.unmap(alias, 4 * granule);  // the alias goes; the memory stays
    CHECK(vm.mapped_bytes() == 4 * granule);
    CHECK(vm.released_allocations() == 0);
    CHECK(vm.unmap_calls() == 1);
    CHECK_FALSE(vm.is_mapped(alias));
    vm.unmap(source, 3 * granule);  // no alias left of it
    vm.unmap(vm.base() + 24 * granule, granule);
    vm.unmap(source + 3 * granule, granule);
    CHECK(vm.mapped_bytes() == 0);
    CHECK(vm.released_allocations() == 2);
    vm.check_invariants();
}

TEST_CASE("simulated_vmm_resource: alias refuses ranges it may not alias, changing nothing") {
    simulated_vmm_resource vm{{.capacity = 64 * MiB}};
    std::byte* source = vm.base() + 2 * granule;
    vm.map_whole(source, 3 * granule);
    std::byte* free_space = vm.base() + 16 * granule;
    const auto refused = [&](auto call, const char* why) {
        const std::string message = invalid_argument_from(call);
        INFO(message);
        CHECK(message.find(why) != std::string::npos);
    };
    refused([&] { vm.alias(free_space, source, 2 * granule); }, "cuts a physical allocation");
    refused([&] { vm.alias(free_space, source + granule, 2 * granule); }, "cuts a physical allocation");
    refused([&] { vm.alias(free_space, source, 4 * granule); }, "not mapped");
    refused([&] { vm.alias(source, source, 3 * granule); }, "already mapped");
    refused([&] { vm.alias(free_space + 4096, source, 3 * granule); }, "multiples of the granularity");
    refused([&] { vm.alias(free_space, reinterpret_cast<const void*>(address(source) - vm.capacity()), 3 * granule); },
            "not inside the reservation");
    vm.alias(free_space, source, 3 * granule);
    refused([&] { vm.alias(vm.base() + 24 * granule, free_space, 3 * granule); }, "an alias itself");
    CHECK(vm.map_calls() == 2);
    CHECK(vm.mapped_bytes() == 3 * granule);
    vm.check_invariants();

#if POOLKIT_ENABLE_ASSERTS
    SUBCASE("unmap of memory an alias still maps") {
        const auto outcome = test::run_in_child([] {
            simulated_vmm_resource child{{.capacity = 64 * MiB}};
            child.map(child.base(), 2 * granule);
            child.alias(child.base() + 8 * granule, child.base() + granule, granule);
            child.unmap(child.base() + granule, granule);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("an alias still maps"));
    }
    SUBCASE("unmap of part of an alias") {
        const auto outcome = test::run_in_child([] {
            simulated_vmm_resource child{{.capacity = 64 * MiB}};
            child.map(child.base(), 2 * granule);
            child.alias(child.base() + 8 * granule, child.base(), 2 * granule);
            child.unmap(child.base() + 8 * granule, granule);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("not the whole alias alone"));
    }
#endif
}

TEST_CASE("simulated_vmm_resource: one map call per run, and any granule of a run unmaps alone") {
    simulated_vmm_resource vm{{.capacity = 64 * MiB}};
    std::byte* run = vm.base() + 4 * granule;
    vm.map(run, 3 * granule);
    CHECK(vm.map_calls() == 1);
    CHECK(vm.mapped_bytes() == 3 * granule);
    CHECK_FALSE(vm.is_mapped(run - 1));
    CHECK(vm.is_mapped(run));
    CHECK(vm.is_mapped(run + 3 * granule - 1));
    CHECK_FALSE(vm.is_mapped(run + 3 * granule));

    vm.unmap(run + granule, granule);  // the middle granule of the run
    CHECK(vm.unmap_calls() == 1);
    CHECK(vm.mapped_bytes() == 2 * granule);
    CHECK(vm.is_mapped(run));
    CHECK_FALSE(vm.is_mapped(run + granule));
    CHECK(vm.is_mapped(run + 2 * granule));
    vm.check_invariants();

    vm.map(run + granule, granule);  // filling the gap joins the runs again
    vm.unmap(run, 3 * granule);  // one call may unmap granules that several map calls mapped
    CHECK(vm.map_calls() == 2);
    CHECK(vm.unmap_calls() == 2);
    CHECK(vm.mapped_bytes() == 0);
    CHECK(vm.peak_mapped_bytes() == 3 * granule);

    vm.map(vm.base(), 0);  // nothing at all
    vm.unmap(vm.base(), 0);
    CHECK(vm.map_calls() == 2);
    CHECK(vm.unmap_calls() == 2);

    vm.map(vm.base(), vm.capacity());  // the whole range, at both ends
    CHECK(vm.is_mapped(vm.base()));
    CHECK(vm.is_mapped(vm.base() + vm.capacity() - 1));
    CHECK_FALSE(vm.is_mapped(vm.base() + vm.capacity()));
    vm.unmap(vm.base() + vm.capacity() - granule, granule);
    vm.unmap(vm.base(), granule);
    CHECK(vm.mapped_bytes() == vm.capacity() - 2 * granule);
    CHECK(vm.peak_mapped_bytes() == vm.capacity());
    vm.check_invariants();
}

TEST_CASE("simulated_vmm_resource: physical exhaustion throws out_of_memory with its figures and changes nothing") {
    simulated_vmm_resource vm{{.capacity = 64 * MiB, .physical_limit = 8 * MiB}};
    vm.map(vm.base(), 3 * granule);
    try {
        vm.map(vm.base() + 8 * granule, 2 * granule);
        FAIL("map past the physical limit succeeded");
    } catch (const out_of_memory& error) {
        CHECK(error.figures().requested_bytes == 2 * granule);
        CHECK(error.figures().reserved_bytes == 3 * granule);  // mapped
        CHECK(error.figures().limit_bytes == 8 * MiB);
        const std::string message = error.what();
        CHECK(message.find("simulated_vmm_resource") != std::string::npos);
        CHECK(message.find("limit 8.00 MiB") != std::string::npos);
    }
    CHECK(vm.mapped_bytes() == 3 * granule);
    CHECK(vm.map_calls() == 1);
    CHECK_FALSE(vm.is_mapped(vm.base() + 8 * granule));
    vm.map(vm.base() + 8 * granule, granule);  // what fits still maps
    CHECK(vm.mapped_bytes() == 8 * MiB);

    CHECK_THROWS_AS(static_cast<void>(vm.allocate(1)), out_of_memory);
    CHECK(vm.try_allocate(1) == nullptr);
    vm.unmap(vm.base(), granule);
    void* block = vm.allocate(1);
    CHECK(vm.owns(block));
    vm.deallocate(block, 1);
    vm.check_invariants();
}

TEST_CASE("simulated_vmm_resource: the physical limit can be lowered below what is mapped, and raised again") {
    simulated_vmm_resource vm{{.capacity = 64 * MiB}};
    vm.map(vm.base(), 4 * granule);
    vm.set_physical_limit(3 * granule + 1);  // down to whole granules, below what is mapped
    CHECK(vm.physical_limit() == 3 * granule);
    vm.check_invariants();  // mapped past the limit only by what was mapped before
    CHECK_THROWS_AS(vm.map(vm.base() + 8 * granule, granule), out_of_memory);
    CHECK(vm.try_allocate(1) == nullptr);
    vm.unmap(vm.base(), 2 * granule);  // now 2 of 3 granules: one more fits
    vm.map(vm.base() + 8 * granule, granule);
    CHECK_THROWS_AS(vm.map(vm.base() + 9 * granule, granule), out_of_memory);
    vm.check_invariants();
    vm.set_physical_limit(0);  // the capacity again
    CHECK(vm.physical_limit() == vm.capacity());
    vm.map(vm.base() + 9 * granule, 4 * granule);
    vm.set_physical_limit(vm.capacity() * 2);  // at most the capacity
    CHECK(vm.physical_limit() == vm.capacity());
    CHECK(vm.mapped_bytes() == 7 * granule);
    vm.check_invariants();
}

TEST_CASE("simulated_vmm_resource: allocate throws out_of_memory when no hole of the range fits") {
    simulated_vmm_resource vm{{.capacity = 8 * MiB}};  // four granules, physical limit the same
    vm.map(vm.base() + granule, granule);
    vm.map(vm.base() + 3 * granule, granule);
    try {
        static_cast<void>(vm.allocate(2 * granule));  // 4 MiB of memory left, but no two adjacent granules
        FAIL("allocate without a hole succeeded");
    } catch (const out_of_memory& error) {
        CHECK(std::string(error.what()).find("reserved range") != std::string::npos);
        CHECK(error.figures().limit_bytes == vm.capacity());
        CHECK(error.figures().reserved_bytes == 2 * granule);
    }
    CHECK(vm.map_calls() == 2);
    CHECK(vm.live_allocations() == 0);
    void* fits = vm.allocate(granule);
    CHECK(address(fits) == address(vm.base()));  // the smallest hole, then the lowest address
    vm.deallocate(fits, granule);
    vm.check_invariants();
}

TEST_CASE("simulated_vmm_resource: map and unmap reject ranges they may not touch") {
    simulated_vmm_resource vm{{.capacity = 16 * MiB}};
    std::byte* base = vm.base();
    CHECK(invalid_argument_from([&] { vm.map(base + 4096, granule); }).find("multiples of the granularity") != std::string::npos);
    CHECK(invalid_argument_from([&] { vm.map(base, granule + 1); }).find("multiples of the granularity") != std::string::npos);
    CHECK(invalid_argument_from([&] { vm.map(base - granule, granule); }).find("not inside the reservation") != std::string::npos);
    CHECK(invalid_argument_from([&] { vm.map(base + 7 * granule, 2 * granule); }).find("not inside") != std::string::npos);
    CHECK(invalid_argument_from([&] { vm.map(base + granule, ~std::size_t{0} - granule + 1); }).find("not inside") != std::string::npos);
    vm.map(base + 2 * granule, granule);
    CHECK(invalid_argument_from([&] { vm.map(base + granule, 2 * granule); }).find("already mapped") != std::string::npos);
    CHECK(vm.map_calls() == 1);
    CHECK(vm.mapped_bytes() == granule);
    vm.check_invariants();

#if POOLKIT_ENABLE_ASSERTS
    SUBCASE("unmap of granules that are not mapped") {
        const auto outcome = test::run_in_child([] {
            simulated_vmm_resource child{{.capacity = 16 * MiB}};
            child.map(child.base(), granule);
            child.unmap(child.base(), 2 * granule);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("not wholly mapped"));
    }
    SUBCASE("unmap of a misaligned range") {
        const auto outcome = test::run_in_child([] {
            simulated_vmm_resource child{{.capacity = 16 * MiB}};
            child.map(child.base(), granule);
            child.unmap(child.base(), 4096);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("whole granules inside the reservation"));
    }
    SUBCASE("unmap of a block that allocate handed out") {
        const auto outcome = test::run_in_child([] {
            simulated_vmm_resource child{{.capacity = 16 * MiB}};
            void* block = child.allocate(3 * MiB);
            child.unmap(static_cast<std::byte*>(block) + granule, granule);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("live block from allocate"));
    }
    SUBCASE("unmap of part of a mapping made whole") {
        const auto outcome = test::run_in_child([] {
            simulated_vmm_resource child{{.capacity = 16 * MiB}};
            child.map_whole(child.base(), 3 * granule);
            child.unmap(child.base() + granule, 2 * granule);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("part of a mapping made whole"));
    }
    SUBCASE("deallocate of a pointer it did not hand out") {
        const auto outcome = test::run_in_child([] {
            simulated_vmm_resource child{{.capacity = 16 * MiB}};
            child.map(child.base(), granule);
            child.deallocate(child.base(), granule);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("did not hand out"));
    }
#endif
}

TEST_CASE("simulated_vmm_resource: allocate maps whole granules, honours large alignments, deallocate unmaps") {
    simulated_vmm_resource vm{{.capacity = 256 * MiB}};
    void* small = vm.allocate(100);
    CHECK(vm.mapped_bytes() == granule);
    CHECK(vm.map_calls() == 1);
    CHECK(vm.is_mapped(small));
    CHECK(vm.owns(static_cast<std::byte*>(small) + granule - 1));
    CHECK_FALSE(vm.owns(static_cast<std::byte*>(small) + granule));

    void* large = vm.allocate(5 * MiB, 32 * MiB);  // three granules on a 32 MiB boundary
    CHECK(is_aligned(large, 32 * MiB));
    CHECK(vm.mapped_bytes() == 4 * granule);
    CHECK(vm.map_calls() == 2);
    CHECK(vm.live_allocations() == 2);
    vm.check_invariants();

    vm.deallocate(large, 5 * MiB, 32 * MiB);
    CHECK(vm.unmap_calls() == 1);
    CHECK_FALSE(vm.is_mapped(large));
    vm.deallocate(small, 100);
    CHECK(vm.mapped_bytes() == 0);
    CHECK(vm.peak_mapped_bytes() == 4 * granule);
    CHECK(vm.live_allocations() == 0);

    // Blocks and raw mappings share the range without ever sharing a granule.
    vm.map(vm.base(), 2 * granule);
    void* beside = vm.allocate(granule);
    CHECK(address(beside) >= address(vm.base()) + 2 * granule);
    vm.deallocate(beside, granule);
    vm.unmap(vm.base(), 2 * granule);
    vm.check_invariants();
}

TEST_CASE("simulated_vmm_resource: random map, unmap, allocate and deallocate agree with a model") {
    constexpr std::size_t granules = 64;
    constexpr std::size_t small = 64 * 1024;  // small granules, so that runs and holes abound
    simulated_vmm_resource vm{{.capacity = granules * small, .granularity = small, .physical_limit = 40 * small}};
    enum class state { unmapped, mapped, block };
    std::vector<state> model(granules, state::unmapped);
    struct live_block {
        void* pointer;
        std::size_t bytes;
        std::size_t alignment;
    };
    std::vector<live_block> blocks;
    std::size_t maps = 0;
    std::size_t unmaps = 0;
    std::size_t peak = 0;
    const auto count = [&](state s) { return static_cast<std::size_t>(std::count(model.begin(), model.end(), s)); };
    const auto mapped = [&] { return (granules - count(state::unmapped)) * small; };
    std::mt19937_64 random(2024);
    for (int step = 0; step < 20000; ++step) {
        const std::size_t first = random() % granules;
        const std::size_t length = 1 + random() % std::min<std::size_t>(8, granules - first);
        std::byte* at = vm.base() + first * small;
        const bool all_unmapped =
            std::all_of(model.begin() + first, model.begin() + first + length, [](state s) { return s == state::unmapped; });
        const bool all_mapped =
            std::all_of(model.begin() + first, model.begin() + first + length, [](state s) { return s == state::mapped; });
        switch (random() % 4) {
            case 0:  // map: succeeds exactly when the run is free and fits under the limit
                if (!all_unmapped) {
                    CHECK_THROWS_AS(vm.map(at, length * small), std::invalid_argument);
                } else if (mapped() + length * small > vm.physical_limit()) {
                    CHECK_THROWS_AS(vm.map(at, length * small), out_of_memory);
                } else {
                    vm.map(at, length * small);
                    std::fill(model.begin() + first, model.begin() + first + length, state::mapped);
                    ++maps;
                }
                break;
            case 1:  // unmap, only where it is allowed
                if (all_mapped) {
                    vm.unmap(at, length * small);
                    std::fill(model.begin() + first, model.begin() + first + length, state::unmapped);
                    ++unmaps;
                }
                break;
            case 2: {  // allocate
                const std::size_t bytes = 1 + random() % (4 * small);
                const std::size_t alignment = std::size_t{1} << (random() % 19);
                void* pointer = vm.try_allocate(bytes, alignment);
                if (pointer == nullptr) break;
                REQUIRE(is_aligned(pointer, alignment));
                const std::size_t start = (address(pointer) - address(vm.base())) / small;
                const std::size_t span = (bytes + small - 1) / small;
                for (std::size_t g = start; g < start + span; ++g) REQUIRE(model[g] == state::unmapped);
                std::fill(model.begin() + start, model.begin() + start + span, state::block);
                blocks.push_back({pointer, bytes, alignment});
                ++maps;
                break;
            }
            default:  // deallocate
                if (blocks.empty()) break;
                const std::size_t index = random() % blocks.size();
                const live_block block = blocks[index];
                vm.deallocate(block.pointer, block.bytes, block.alignment);
                const std::size_t start = (address(block.pointer) - address(vm.base())) / small;
                std::fill(model.begin() + start, model.begin() + start + (block.bytes + small - 1) / small, state::unmapped);
                blocks[index] = blocks.back();
                blocks.pop_back();
                ++unmaps;
        }
        peak = std::max(peak, mapped());
        REQUIRE(vm.mapped_bytes() == mapped());
        REQUIRE(vm.peak_mapped_bytes() == peak);
        REQUIRE(vm.map_calls() == maps);
        REQUIRE(vm.unmap_calls() == unmaps);
        REQUIRE(vm.live_allocations() == blocks.size());
        if (step % 64 == 0) {
            for (std::size_t g = 0; g < granules; ++g) {
                REQUIRE(vm.is_mapped(vm.base() + g * small + small / 2) == (model[g] != state::unmapped));
                REQUIRE(vm.owns(vm.base() + g * small) == (model[g] == state::block));
            }
            vm.check_invariants();
        }
    }
    for (const auto& block : blocks) vm.deallocate(block.pointer, block.bytes, block.alignment);
    for (std::size_t g = 0; g < granules; ++g) {
        if (model[g] == state::mapped) vm.unmap(vm.base() + g * small, small);
    }
    CHECK(vm.mapped_bytes() == 0);
    vm.check_invariants();
}

TEST_CASE("simulated_vmm_resource: the default range maps 200 GiB at no cost") {
    simulated_vmm_resource vm;
    vm.map(vm.base(), std::size_t{200} << 30);
    CHECK(vm.mapped_bytes() == std::size_t{200} << 30);
    CHECK(vm.map_calls() == 1);
    vm.unmap(vm.base(), std::size_t{200} << 30);
    vm.check_invariants();
}

TEST_CASE("simulated_vmm_resource is safe to share between threads" * doctest::test_suite("concurrency")) {
    simulated_vmm_resource vm{{.capacity = 1024 * MiB, .granularity = 64 * 1024}};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&vm, t] {
            std::mt19937_64 random(static_cast<unsigned>(t));
            std::vector<std::pair<void*, std::size_t>> live;
            for (int step = 0; step < 3000; ++step) {
                if (live.empty() || random() % 2 == 0) {
                    const std::size_t bytes = 1 + random() % 300000;
                    live.emplace_back(vm.allocate(bytes), bytes);
                } else {
                    vm.deallocate(live.back().first, live.back().second);
                    live.pop_back();
                }
            }
            for (auto [pointer, bytes] : live) vm.deallocate(pointer, bytes);
        });
    }
    for (auto& thread : threads) thread.join();
    CHECK(vm.mapped_bytes() == 0);
    CHECK(vm.map_calls() == vm.unmap_calls());
    vm.check_invariants();
}
