// The expandable preset on a real GPU: kernels write and check every byte of live blocks while
// other blocks are freed, their granules unmapped and mapped again around them; reuse across
// streams never hands out or unmaps memory before its stream's work is done; physical exhaustion
// unmaps the cache, retries, and then throws out_of_memory with figures; stitched blocks hold
// their data and leave their neighbours' alone.
#include "support.hpp"
#include "late_kernels.cuh"

#include <poolkit/presets.hpp>

#include <cstdint>
#include <random>
#include <vector>

namespace {

using namespace poolkit;
using namespace poolkit::test;

// Options set member by member: nvcc builds treat a designated initializer that leaves a member
// out as an error. Following live memory exactly, so that the tests unmap and remap often.
expandable_options pool_options(std::size_t span, double cache_fraction, std::size_t max_cached = ~std::size_t{0}) {
    expandable_options options = expandable_options::exact_follow();
    options.span_bytes = span;
    options.cache_fraction = cache_fraction;
    options.max_cached_bytes = max_cached;
    return options;
}

}  // namespace

TEST_CASE("expandable preset: every byte of live blocks holds while others are unmapped and remapped around them") {
    // A small cache fraction and a cache bound, so that granules are unmapped and mapped often.
    expandable_options options = pool_options(std::size_t{4} << 30, 0, 16 * MiB);
    std::size_t large_words = 12 * MiB;  // a third of the blocks up to 48 MiB
    bool must_stitch = false;  // stitching is on by default, but only this traffic is sure to stitch
    SUBCASE("a physical allocation per granule") {}
    SUBCASE("physical allocations of 8 MiB, unmapped only whole") { options.mapping_bytes = 8 * MiB; }
    SUBCASE("following live memory: a rising slack and the default physical allocations (peak_slack 0)") {
        options.max_peak_slack = expandable_options{}.max_peak_slack;
        options.mapping_bytes = expandable_options{}.mapping_bytes;
    }
    SUBCASE("the defaults: nothing unmapped for new mappings, the cache bound unmaps at frees") {
        const expandable_options defaults;
        options.peak_slack = defaults.peak_slack;
        options.max_peak_slack = defaults.max_peak_slack;
        options.mapping_bytes = defaults.mapping_bytes;
    }
    SUBCASE("the defaults with small_in_old_holes: small blocks in large spans' old holes, beside large ones") {
        const expandable_options defaults;
        options.peak_slack = defaults.peak_slack;
        options.max_peak_slack = defaults.max_peak_slack;
        options.mapping_bytes = defaults.mapping_bytes;
        options.small_in_old_holes = true;
    }
    SUBCASE("the defaults, stitching: large blocks of free allocations aliased together, no cache bound") {
        const expandable_options defaults;
        options.peak_slack = defaults.peak_slack;
        options.max_peak_slack = defaults.max_peak_slack;
        options.mapping_bytes = defaults.mapping_bytes;
        options.max_cached_bytes = defaults.max_cached_bytes;
        options.stitch = true;
        // Up to 64 MiB, four physical allocations: this traffic then stitches (at 48 MiB it need not;
        // the simulated model, which makes the same choices, shows which).
        large_words = 16 * MiB;
        must_stitch = true;
    }
    expandable_device_resource pool{std::in_place, options, cuda_vmm_options{}};
    streams lanes(1);
    cudaStream_t stream = lanes.handles[0];
    counter bad;
    struct live {
        std::uint32_t* data;
        std::size_t count;
        std::uint32_t value;
    };
    std::vector<live> blocks;
    std::mt19937_64 random(3);
    for (int step = 0; step < 600; ++step) {
        if (blocks.empty() || random() % 100 < 55) {
            const std::size_t count = 64 + random() % (random() % 3 == 0 ? large_words : 256 * 1024);
            auto* data = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, stream_ref{stream}));
            const auto value = static_cast<std::uint32_t>(step * 7919 + 1);
            slow_fill<<<grid, block, 0, stream>>>(data, count, value, 0);
            blocks.push_back({data, count, value});
        } else {
            const std::size_t index = random() % blocks.size();
            const live b = blocks[index];
            blocks[index] = blocks.back();
            blocks.pop_back();
            count_other<<<grid, block, 0, stream>>>(b.data, b.count, b.value, 0, bad.device);
            pool.deallocate_async(b.data, b.count * 4, 256, stream_ref{stream});
        }
        // Every live block, checked again now that others came and went.
        if (step % 50 == 49) {
            for (const live& b : blocks) count_other<<<grid, block, 0, stream>>>(b.data, b.count, b.value, 0, bad.device);
        }
    }
    REQUIRE(cudaGetLastError() == cudaSuccess);
    for (const live& b : blocks) {
        count_other<<<grid, block, 0, stream>>>(b.data, b.count, b.value, 0, bad.device);
        pool.deallocate_async(b.data, b.count * 4, 256, stream_ref{stream});
    }
    CHECK(bad.read() == 0);
    const auto& memory = pool.upstream_resource();
    MESSAGE("map calls " << memory.map_calls() << ", unmap calls " << memory.unmap_calls() << ", peak mapped "
                         << memory.peak_mapped_bytes() / MiB << " MiB");
    MESSAGE("alias calls " << memory.alias_calls());
    if (must_stitch) {
        CHECK(memory.alias_calls() > 0);  // large blocks were stitched
    } else {
        CHECK(memory.unmap_calls() > 10);  // the test did unmap and remap around live blocks
    }
    pool.check_invariants();
    pool.release();
    CHECK(memory.mapped_bytes() == 0);
}

TEST_CASE("expandable preset, stitching: a block of free allocations aliased together holds its data, and so do its neighbours") {
    expandable_options options;
    options.stitch = true;
    expandable_device_resource pool{std::in_place, options, cuda_vmm_options{}};
    const auto& memory = pool.upstream_resource();
    streams lanes(1);
    cudaStream_t stream = lanes.handles[0];
    counter bad;
    constexpr std::size_t piece = std::size_t{8} << 20;  // 32 MiB of 4-byte words: whole physical allocations
    const auto take = [&](std::size_t count) {
        return static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, stream_ref{stream}));
    };
    const auto give = [&](std::uint32_t* data, std::size_t count) { pool.deallocate_async(data, count * 4, 256, stream_ref{stream}); };
    const auto fill = [&](std::uint32_t* data, std::size_t count, std::uint32_t value) {
        slow_fill<<<grid, block, 0, stream>>>(data, count, value, 0);
    };
    const auto check = [&](const std::uint32_t* data, std::size_t count, std::uint32_t value) {
        count_other<<<grid, block, 0, stream>>>(data, count, value, 0, bad.device);
    };
    std::vector<std::uint32_t*> blocks;
    for (std::uint32_t i = 0; i < 6; ++i) {
        blocks.push_back(take(piece));
        fill(blocks.back(), piece, 100 + i);
    }
    for (int i : {0, 2, 4}) give(blocks[i], piece);
    const std::size_t mapped = memory.mapped_bytes();
    std::uint32_t* stitched = take(3 * piece);  // no free block holds it; the three holes do
    CHECK(memory.alias_calls() == 3);
    CHECK(memory.mapped_bytes() == mapped);
    fill(stitched, 3 * piece, 7);  // written through the alias: the holes' memory
    check(stitched, 3 * piece, 7);
    for (std::uint32_t i : {1u, 3u, 5u}) check(blocks[i], piece, 100 + i);
    give(stitched, 3 * piece);

    std::uint32_t* again = take(3 * piece);  // taken again, with no driver call
    CHECK(again == stitched);
    CHECK(memory.alias_calls() == 3);
    fill(again, 3 * piece, 9);
    check(again, 3 * piece, 9);
    give(again, 3 * piece);

    // The holes' memory in blocks of their own again, while the free stitch still aliases it.
    for (std::uint32_t i : {0u, 2u, 4u}) {
        blocks[i] = take(piece);
        fill(blocks[i], piece, 200 + i);
    }
    for (std::uint32_t i = 0; i < 6; ++i) check(blocks[i], piece, i % 2 == 0 ? 200 + i : 100 + i);
    pool.release();  // gives the free stitch up (after the stream's work), not the live blocks
    for (std::uint32_t i = 0; i < 6; ++i) check(blocks[i], piece, i % 2 == 0 ? 200 + i : 100 + i);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    CHECK(bad.read() == 0);
    for (std::uint32_t* data : blocks) give(data, piece);
    pool.check_invariants();
    pool.release();
    CHECK(memory.mapped_bytes() == 0);
    CHECK(memory.aliased_bytes() == 0);
}

TEST_CASE("expandable preset: a block freed on one stream is reused or unmapped only after that stream's work") {
    expandable_device_resource pool{std::in_place, pool_options(std::size_t{4} << 30, 0), cuda_vmm_options{}};
    streams lanes(2);
    cudaStream_t a = lanes.handles[0], b = lanes.handles[1];
    counter bad;
    constexpr std::size_t count = std::size_t{8} << 20;  // 32 MiB
    int reused = 0;
    for (int round = 0; round < 12; ++round) {
        void* scratch = pool.allocate_async(256, 256, stream_ref{a});
        auto* first = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, stream_ref{a}));
        slow_fill<<<grid, block, 0, a>>>(first, count, 2 * round + 1, slow);  // a's writes land late
        count_other<<<grid, block, 0, a>>>(first, count, 2 * round + 1, 0, bad.device);
        pool.deallocate_async(first, count * 4, 256, stream_ref{a});
        if (round % 3 == 2) pool.release();  // unmap a's freed block while a still runs: must wait
        // b asks for a's block; a's next call records the event b waits on (see stream_ordered.cu).
        auto* asked = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, stream_ref{b}));
        pool.deallocate_async(scratch, 256, 256, stream_ref{a});
        auto* second = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, stream_ref{b}));
        reused += second == first || asked == first;
        for (auto* mine : {asked, second}) {
            slow_fill<<<grid, block, 0, b>>>(mine, count, 2 * round + 2, 0);
            count_other<<<grid, block, 0, b>>>(mine, count, 2 * round + 2, 2 * slow, bad.device);
        }
        pool.deallocate_async(second, count * 4, 256, stream_ref{b});
        pool.deallocate_async(asked, count * 4, 256, stream_ref{b});
    }
    REQUIRE(cudaGetLastError() == cudaSuccess);
    CHECK(bad.read() == 0);
    CHECK(reused > 0);
    MESSAGE("cross-stream reuses: " << reused << " of 12");
    pool.release();
}

TEST_CASE("expandable preset: sixty-four streams share one pool in the default reservation") {
    // Each stream's large block comes from the one pool's spans; no stream claims spans of its own.
    expandable_device_resource pool;
    constexpr int stream_count = 64;
    streams lanes(stream_count);
    counter bad;
    constexpr std::size_t count = std::size_t{4} << 20;  // 16 MiB, a large block
    std::vector<std::uint32_t*> blocks;
    for (int i = 0; i < stream_count; ++i) {
        auto* data = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, stream_ref{lanes.handles[i]}));
        slow_fill<<<grid, block, 0, lanes.handles[i]>>>(data, count, i + 1, 0);
        blocks.push_back(data);
    }
    for (int i = 0; i < stream_count; ++i) {
        count_other<<<grid, block, 0, lanes.handles[i]>>>(blocks[i], count, i + 1, 0, bad.device);
        pool.deallocate_async(blocks[i], count * 4, 256, stream_ref{lanes.handles[i]});
    }
    REQUIRE(cudaGetLastError() == cudaSuccess);
    CHECK(bad.read() == 0);
    CHECK(pool.streams() == stream_count);
    MESSAGE("reserved " << (pool.upstream_resource().capacity() >> 30) << " GiB of address space for " << stream_count << " streams");
    pool.release();
}

TEST_CASE("expandable preset: physical exhaustion unmaps the cache, retries, then throws out_of_memory with figures") {
    const std::size_t limit = 256 * MiB;
    cuda_vmm_options memory;
    memory.reserve_bytes = std::size_t{64} << 30;
    memory.physical_limit = limit;
    expandable_device_resource pool{std::in_place, pool_options(std::size_t{2} << 30, 10), memory};
    streams lanes(1);
    const stream_ref stream{lanes.handles[0]};
    void* cached = pool.allocate_async(160 * MiB, 256, stream);
    pool.deallocate_async(cached, 160 * MiB, 256, stream);  // 160 MiB kept mapped
    void* spare = pool.allocate_async(20 * MiB, 256, stream);
    void* big = pool.allocate_async(200 * MiB, 64 * MiB, stream);  // fits only once the cache is unmapped
    CHECK(pool.upstream_resource().mapped_bytes() <= limit);
    try {
        static_cast<void>(pool.allocate_async(128 * MiB, 256, stream));
        FAIL("allocate past the physical limit succeeded");
    } catch (const out_of_memory& error) {
        CHECK(error.figures().requested_bytes == 128 * MiB);
        CHECK(error.figures().live_bytes >= 220 * MiB);
        MESSAGE(error.what());
    }
    REQUIRE(cudaGetLastError() == cudaSuccess);
    pool.deallocate_async(big, 200 * MiB, 64 * MiB, stream);
    pool.deallocate_async(spare, 20 * MiB, 256, stream);
    pool.release();
    CHECK(pool.upstream_resource().mapped_bytes() == 0);
}
