// The for_each_block walk of every strategy: a snapshot of a known state checked block by block,
// and fragmentation figures that agree with the strategy's own counters.
#include "../support/instrumented.hpp"
#include "../support/sizes.hpp"

#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/counted.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/core/walk.hpp>
#include <poolkit/observe/fragmentation.hpp>
#include <poolkit/observe/mapped_walk.hpp>
#include <poolkit/observe/memory_summary.hpp>
#include <poolkit/observe/snapshot.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/buddy.hpp>
#include <poolkit/strategy/caching_pool.hpp>
#include <poolkit/strategy/expandable.hpp>
#include <poolkit/strategy/fallback.hpp>
#include <poolkit/strategy/fixed_size.hpp>
#include <poolkit/strategy/monotonic.hpp>
#include <poolkit/strategy/segregator.hpp>
#include <poolkit/strategy/size_classes.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_resource.hpp>
#include <poolkit/upstream/simulated_vmm_resource.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

using namespace poolkit;
using test::instrumented;
using upstream_ref = ref<instrumented<>>;

using poolkit::test::KiB;
using poolkit::test::MiB;

using poolkit::test::address;

struct visit {
    chunk_view chunk;
    block_view block;
};

// The walk of `r` as a list, after checking what walk.hpp promises of any walk: chunks in
// ascending address order and apart, each chunk's blocks together, in address order, tiling it.
template <class R>
std::vector<visit> walk(const R& r) {
    std::vector<visit> visits;
    r.for_each_block([&](const chunk_view& chunk, const block_view& block) { visits.push_back({chunk, block}); });
    std::uintptr_t previous_end = 0;
    for (std::size_t i = 0; i < visits.size();) {
        const chunk_view chunk = visits[i].chunk;
        CHECK(chunk.address >= previous_end);
        std::uintptr_t expected = chunk.address;
        for (; i < visits.size() && visits[i].chunk.address == chunk.address; ++i) {
            CHECK(visits[i].chunk.bytes == chunk.bytes);
            CHECK(visits[i].block.address == expected);
            CHECK(visits[i].block.bytes > 0);
            CHECK(!(visits[i].block.live && visits[i].block.pending_free));
            expected += visits[i].block.bytes;
        }
        CHECK(expected == chunk.address + chunk.bytes);
        previous_end = chunk.address + chunk.bytes;
    }
    return visits;
}

// The block of `visits` that starts at `at`; fails the test when there is none.
const block_view& block_at(const std::vector<visit>& visits, std::uintptr_t at) {
    for (const visit& v : visits) {
        if (v.block.address == at) return v.block;
    }
    FAIL("no block at ", at);
    static const block_view none;
    return none;
}

void check_block(const block_view& b, std::size_t bytes, std::size_t requested, bool live, bool pending = false,
                 std::uintptr_t stream = 0) {
    CHECK(b.bytes == bytes);
    CHECK(b.requested_bytes == requested);
    CHECK(b.live == live);
    CHECK(b.pending_free == pending);
    CHECK(b.stream == stream);
}

}  // namespace

static_assert(walkable<best_fit<new_delete_resource>> && walkable<buddy<new_delete_resource>> &&
              walkable<size_classes<new_delete_resource>> && walkable<fixed_size<new_delete_resource>> &&
              walkable<monotonic<new_delete_resource>> && walkable<caching_pool<new_delete_resource>>);
static_assert(walkable<segregator<256, fixed_size<new_delete_resource>, best_fit<new_delete_resource>>>);
static_assert(!walkable<segregator<256, fixed_size<new_delete_resource>, new_delete_resource>>);
static_assert(walkable<fallback<best_fit<new_delete_resource>, monotonic<new_delete_resource>>>);
static_assert(!walkable<fallback<best_fit<new_delete_resource>, new_delete_resource>>);
static_assert(walkable<stream_ordered<new_delete_resource, lanes<best_fit>, host_events>>);
static_assert(walkable<stream_ordered<new_delete_resource, lanes<caching_pool>, host_events>>);

TEST_CASE("walk: best_fit shows its blocks with the bytes asked for") {
    instrumented<> upstream;
    best_fit<upstream_ref> pool{upstream, {.initial_size = 1 * MiB}};
    void* a = pool.allocate(1000);  // 1024
    void* b = pool.allocate(3000);  // 3072
    void* c = pool.allocate(500);  // 512
    pool.deallocate(b, 3000);
    const auto visits = walk(pool);
    REQUIRE(visits.size() == 4);
    CHECK(visits[0].chunk.address == address(a));
    CHECK(visits[0].chunk.bytes == 1 * MiB);
    CHECK(visits[0].chunk.stream == 0);
    CHECK(visits[0].block.address == address(a));
    check_block(visits[0].block, 1024, 1000, true);
    check_block(visits[1].block, 3072, 0, false);
    CHECK(visits[2].block.address == address(c));
    check_block(visits[2].block, 512, 500, true);
    check_block(visits[3].block, 1 * MiB - 4608, 0, false);

    const fragmentation_figures f = fragmentation(pool);
    CHECK(f.chunks == pool.chunks());
    CHECK(f.reserved_bytes == pool.reserved_bytes());
    CHECK(f.live_bytes == pool.live_bytes());
    CHECK(f.live_blocks == pool.live_blocks());
    CHECK(f.free_bytes == pool.cached_bytes());
    CHECK(f.free_blocks == pool.free_blocks());
    CHECK(f.largest_free_block == 1 * MiB - 4608);

    const std::string a_at = std::to_string(address(a));
    CHECK(snapshot(pool).find("{\"segments\": [{\"address\": " + a_at +
                              ", \"total_size\": 1048576, \"allocated_size\": 1536, "
                              "\"active_size\": 1536, \"requested_size\": 1500, \"stream\": 0, \"segment_type\": \"large\", "
                              "\"blocks\": [{\"address\": " +
                              a_at +
                              ", \"size\": 1024, \"requested_size\": 1000, "
                              "\"state\": \"active_allocated\", \"stream\": 0}, {\"address\": " +
                              std::to_string(address(a) + 1024) +
                              ", \"size\": 3072, \"requested_size\": 0, "
                              "\"state\": \"inactive\", \"stream\": 0}, ") == 0);
    pool.deallocate(a, 1000);
    pool.deallocate(c, 500);
    CHECK(walk(pool).size() == 1);
    CHECK(fragmentation(pool).largest_free_over_free() == 1.0);
}

TEST_CASE("walk: buddy shows the halves it split, and their merge") {
    instrumented<> upstream;
    buddy<upstream_ref> pool{upstream, {.chunk_size = 64 * KiB}};
    void* a = pool.allocate(1000);  // 1 KiB, split down from 64 KiB
    void* b = pool.allocate(3000);  // 4 KiB, the free half at 4 KiB
    const std::uintptr_t base = address(a);
    CHECK(address(b) == base + 4 * KiB);
    auto visits = walk(pool);
    REQUIRE(visits.size() == 7);
    CHECK(visits[0].chunk.address == base);
    CHECK(visits[0].chunk.bytes == 64 * KiB);
    check_block(visits[0].block, 1 * KiB, 1000, true);
    check_block(visits[1].block, 1 * KiB, 0, false);
    check_block(visits[2].block, 2 * KiB, 0, false);
    check_block(visits[3].block, 4 * KiB, 3000, true);
    check_block(visits[4].block, 8 * KiB, 0, false);
    check_block(visits[5].block, 16 * KiB, 0, false);
    check_block(visits[6].block, 32 * KiB, 0, false);
    fragmentation_figures f = fragmentation(pool);
    CHECK(f.reserved_bytes == pool.reserved_bytes());
    CHECK(f.live_bytes == pool.live_bytes());
    CHECK(f.free_bytes == pool.reserved_bytes() - pool.live_bytes());
    CHECK(f.live_blocks == 2);
    CHECK(f.largest_free_block == 32 * KiB);

    pool.deallocate(a, 1000);  // merges with its buddies up to the live 4 KiB block
    visits = walk(pool);
    REQUIRE(visits.size() == 5);
    check_block(visits[0].block, 4 * KiB, 0, false);
    check_block(visits[1].block, 4 * KiB, 3000, true);
    f = fragmentation(pool);
    CHECK(f.live_bytes == pool.live_bytes());
    CHECK(f.free_blocks == 4);
    pool.deallocate(b, 3000);
    CHECK(walk(pool).size() == 1);
}

TEST_CASE("walk: size_classes shows its slabs block by block, and a walkable Large's chunks") {
    instrumented<> upstream;
    size_classes_options options;
    options.sizes = {256, 1024};
    options.slab_size = 4 * KiB;
    using large_pool = best_fit<upstream_ref>;
    size_classes<upstream_ref, large_pool> pool{upstream, large_pool{upstream, {.initial_size = 64 * KiB}}, options};
    void* x = pool.allocate(200);  // 256-class slab, block 0
    void* y = pool.allocate(1000);  // 1024-class slab, block 0
    void* z = pool.allocate(100);  // 256-class slab, block 1
    void* w = pool.allocate(5000);  // Large
    pool.deallocate(x, 200);
    const auto visits = walk(pool);
    REQUIRE(visits.size() == 16 + 4 + 2);
    check_block(block_at(visits, address(x)), 256, 0, false);  // slabs keep no request sizes
    check_block(block_at(visits, address(z)), 256, 0, true);
    check_block(block_at(visits, address(y)), 1024, 0, true);
    check_block(block_at(visits, address(y) + 1024), 1024, 0, false);
    check_block(block_at(visits, address(w)), 5120, 5000, true);
    check_block(block_at(visits, address(w) + 5120), 64 * KiB - 5120, 0, false);

    const fragmentation_figures f = fragmentation(pool);
    const auto& large = pool.large_resource();
    CHECK(f.chunks == pool.chunks() + large.chunks());
    CHECK(f.reserved_bytes == pool.reserved_bytes() + large.reserved_bytes());
    CHECK(f.live_bytes == pool.live_bytes() + large.live_bytes());
    CHECK(f.live_blocks == 3);
    CHECK(f.free_bytes == f.reserved_bytes - f.live_bytes);
    CHECK(f.largest_free_block == 64 * KiB - 5120);
    pool.deallocate(y, 1000);
    pool.deallocate(z, 100);
    pool.deallocate(w, 5000);

    // Large requests that go to the upstream itself are not seen.
    size_classes<upstream_ref> plain{upstream, options};
    void* big = plain.allocate(4000);
    CHECK(walk(plain).empty());
    plain.deallocate(big, 4000);
}

TEST_CASE("walk: fixed_size shows every block of every slab, what it passes on is not seen") {
    instrumented<> upstream;
    fixed_size<upstream_ref> pool{upstream, {.block_size = 256, .slab_size = 1024}};
    void* a = pool.allocate(256);
    void* b = pool.allocate(100);
    void* c = pool.allocate(256);
    void* passed = pool.allocate(1000);  // larger than a block: the upstream's
    pool.deallocate(b, 100);
    const auto visits = walk(pool);
    REQUIRE(visits.size() == 4);
    CHECK(visits[0].chunk.address == address(a));
    CHECK(visits[0].chunk.bytes == 1024);
    check_block(visits[0].block, 256, 0, true);
    check_block(visits[1].block, 256, 0, false);
    CHECK(visits[2].block.address == address(c));
    check_block(visits[2].block, 256, 0, true);
    check_block(visits[3].block, 256, 0, false);
    const fragmentation_figures f = fragmentation(pool);
    CHECK(f.chunks == pool.chunks());
    CHECK(f.reserved_bytes == pool.reserved_bytes());
    CHECK(f.live_bytes == pool.live_bytes());
    CHECK(f.free_bytes == 512);
    pool.deallocate(a, 256);
    pool.deallocate(c, 256);
    pool.deallocate(passed, 1000);
}

TEST_CASE("walk: monotonic shows what each chunk handed out, and the untouched rest") {
    instrumented<> upstream;
    monotonic<upstream_ref> arena{upstream, {.initial_size = 64 * KiB}};
    void* a = arena.allocate(1000);
    void* b = arena.allocate(3000, 256);  // at a + 1024
    CHECK(address(b) == address(a) + 1024);
    arena.deallocate(a, 1000);  // not the most recent: its bytes stay handed out
    auto visits = walk(arena);
    REQUIRE(visits.size() == 2);
    CHECK(visits[0].chunk.address == address(a));
    CHECK(visits[0].chunk.bytes == 64 * KiB);
    check_block(visits[0].block, 4024, 3000, true);
    check_block(visits[1].block, 64 * KiB - 4024, 0, false);
    const fragmentation_figures f = fragmentation(arena);
    CHECK(f.reserved_bytes == arena.reserved_bytes());
    CHECK(f.live_bytes == 4024);
    std::size_t requested = 0;
    for (const visit& v : visits) requested += v.block.requested_bytes;
    CHECK(requested == arena.live_bytes());

    arena.deallocate(b, 3000);  // the chunk starts over
    visits = walk(arena);
    REQUIRE(visits.size() == 1);
    check_block(visits[0].block, 64 * KiB, 0, false);
}

TEST_CASE("walk: caching_pool shows its small, large and oversize pools in address order") {
    simulated_resource addresses{{.capacity = std::size_t{1} << 30}};
    caching_options options;
    options.max_split_size = 8 * MiB;
    caching_pool<ref<simulated_resource>> pool{addresses, options};
    void* small = pool.allocate(1000);  // small pool: 2 MiB chunk, 1024-byte block
    void* large = pool.allocate(3 * MiB + 1);  // large pool: 256 MiB chunk
    void* oversize = pool.allocate(10 * MiB);  // oversize pool: a chunk of its own
    void* large2 = pool.allocate(2 * MiB);
    pool.deallocate(large2, 2 * MiB);
    const auto visits = walk(pool);
    check_block(block_at(visits, address(small)), 1024, 1000, true);
    check_block(block_at(visits, address(large)), 3 * MiB + 512, 3 * MiB + 1, true);
    check_block(block_at(visits, address(oversize)), 10 * MiB, 10 * MiB, true);
    const fragmentation_figures f = fragmentation(pool);
    CHECK(f.chunks == 3);
    CHECK(f.reserved_bytes == pool.reserved_bytes());
    CHECK(f.live_bytes == pool.live_bytes());
    CHECK(f.free_bytes == pool.cached_bytes());
    CHECK(f.live_blocks == 3);
    CHECK(f.largest_free_block == 256 * MiB - (3 * MiB + 512));

    // With power2_divisions the pool is asked for the rounded size, and the walk shows that.
    caching_options divided;
    divided.power2_divisions = 4;
    caching_pool<ref<simulated_resource>> rounded{addresses, divided};
    void* p = rounded.allocate(9000);  // 8192..16384 in four steps: 10240 (not 9216, as 512 B rounding gives)
    check_block(block_at(walk(rounded), address(p)), 10240, 10240, true);
    rounded.deallocate(p, 9000);
    pool.deallocate(small, 1000);
    pool.deallocate(large, 3 * MiB + 1);
    pool.deallocate(oversize, 10 * MiB);
}

TEST_CASE("walk: stream_ordered shows its one pool, and frees not ready for every stream as pending") {
    instrumented<> memory;
    host_events events;
    const stream_ref s1 = events.make_stream();
    const stream_ref s2 = events.make_stream();
    // Chunks of just the request: one chunk of one block each.
    const best_fit_options exact{.initial_size = 0, .growth = growth_policy::as_needed(256)};
    stream_ordered<upstream_ref, lanes<best_fit>, host_events> pool{upstream_ref{memory}, exact, events};
    void* p1 = pool.allocate_async(1000, default_alignment, s1);
    void* p2 = pool.allocate_async(2000, default_alignment, s2);
    void* p3 = pool.allocate(3000);
    events.submit(s2);
    pool.deallocate_async(p1, 1000, default_alignment, s2);  // freed on s2: in s2's front, pending
    REQUIRE(pool.front_blocks_held() == 1);
    const auto visits = walk(pool);
    REQUIRE(visits.size() == 3);
    check_block(block_at(visits, address(p1)), 1024, 1000, false, true, stream_id(s2));
    check_block(block_at(visits, address(p2)), 2048, 2000, true, false, 0);
    check_block(block_at(visits, address(p3)), 3072, 3000, true, false, 0);
    for (const visit& v : visits) CHECK(v.chunk.stream == 0);  // the pool serves every stream
    const std::string json = snapshot(pool);
    CHECK(json.find("\"size\": 1024, \"requested_size\": 1000, \"state\": \"active_pending_free\", \"stream\": " +
                    std::to_string(stream_id(s2))) != std::string::npos);

    const fragmentation_figures f = fragmentation(pool);
    CHECK(f.chunks == 3);
    CHECK(f.reserved_bytes == pool.reserved_bytes());
    CHECK(f.live_bytes == pool.pool().live_bytes() - 1024);  // the pending block counts as free
    CHECK(f.live_blocks == pool.live_blocks());
    CHECK(f.free_bytes == 1024);
    CHECK(f.free_bytes == f.reserved_bytes - f.live_bytes);

    events.complete_all();
    pool.deallocate_async(p2, 2000, default_alignment, s2);
    pool.deallocate(p3, 3000);
    pool.release();
    CHECK(walk(pool).empty());
}

TEST_CASE("walk: segregator and fallback walk both parts, chunks in address order") {
    instrumented<> upstream;
    segregator<256, fixed_size<upstream_ref>, best_fit<upstream_ref>> split{
        fixed_size<upstream_ref>{upstream, {.block_size = 256, .slab_size = 1024}},
        best_fit<upstream_ref>{upstream, {.initial_size = 64 * KiB}}};
    void* small = split.allocate(100);
    void* large = split.allocate(5000);
    auto visits = walk(split);
    CHECK(visits.size() == 4 + 2);
    check_block(block_at(visits, address(small)), 256, 0, true);
    check_block(block_at(visits, address(large)), 5120, 5000, true);
    fragmentation_figures f = fragmentation(split);
    CHECK(f.chunks == 2);
    CHECK(f.reserved_bytes == split.small_resource().reserved_bytes() + split.large_resource().reserved_bytes());
    CHECK(f.live_bytes == split.small_resource().live_bytes() + split.large_resource().live_bytes());
    split.deallocate(small, 100);
    split.deallocate(large, 5000);

    fallback<best_fit<upstream_ref>, monotonic<upstream_ref>> either{
        best_fit<upstream_ref>{upstream, {.initial_size = 4 * KiB, .maximum_size = 4 * KiB}},
        monotonic<upstream_ref>{upstream, {.initial_size = 16 * KiB}}};
    void* first = either.allocate(3000);  // Primary
    void* second = either.allocate(3000);  // Primary is full: Secondary
    visits = walk(either);
    CHECK(visits.size() == 2 + 2);
    check_block(block_at(visits, address(first)), 3072, 3000, true);
    check_block(block_at(visits, address(second)), 3000, 3000, true);
    f = fragmentation(either);
    CHECK(f.reserved_bytes == either.primary_resource().reserved_bytes() + either.secondary_resource().reserved_bytes());
    either.deallocate(first, 3000);
    either.deallocate(second, 3000);
}

TEST_CASE("walk: memory_summary adds the fragmentation line for a strategy under counted<>") {
    instrumented<> upstream;
    best_fit<upstream_ref> pool{upstream, {.initial_size = 1 * MiB}};
    counted<ref<best_fit<upstream_ref>>> observed{pool};
    void* a = observed.allocate(1000);
    void* b = observed.allocate(1000);
    observed.deallocate(a, 1000);
    const std::string table = memory_summary(observed);
    CHECK(table.find("Free blocks: 2") != std::string::npos);
    CHECK(table.find("Reserved / live: 1024.000") != std::string::npos);
    observed.deallocate(b, 1000);
}

TEST_CASE("walk: mapped_walk cuts expandable's spans to their mapped granules") {
    constexpr std::size_t granule = 2 * MiB;
    simulated_vmm_resource memory(
        simulated_vmm_options{.capacity = std::size_t{16} << 30, .granularity = granule, .physical_limit = std::size_t{4} << 30});
    expandable<ref<simulated_vmm_resource>> pool(ref<simulated_vmm_resource>(memory),
                                                 expandable_options{.cache_fraction = 0, .mapping_bytes = 0});
    void* a = pool.allocate(3 * MiB);
    void* b = pool.allocate(10 * MiB + 512);
    void* c = pool.allocate(5 * MiB);
    pool.deallocate(b, 10 * MiB + 512);
    pool.release();  // unmaps the granules wholly inside b; those it shares with a and c stay

    const auto visits = walk(mapped_walk(pool, memory));
    CHECK(walk(pool).size() == 4);  // a, b (free), c and the free rest of the span
    std::size_t shown = 0, chunks = 0;
    std::uintptr_t last_chunk = 0;
    for (const visit& v : visits) {
        if (v.chunk.address != last_chunk) {
            shown += v.chunk.bytes;
            ++chunks;
        }
        last_chunk = v.chunk.address;
        CHECK(v.chunk.address % granule == 0);
        CHECK(v.chunk.bytes % granule == 0);
        if (!v.block.live) {
            for (std::uintptr_t at = v.block.address; at < v.block.address + v.block.bytes; at += 4096) {
                CHECK(memory.is_mapped(reinterpret_cast<const void*>(at)));
            }
        }
    }
    CHECK(shown == memory.mapped_bytes());
    CHECK(chunks == 2);  // b's unmapped granules split the span's mapped memory in two
    CHECK(block_at(visits, address(a)).live);
    CHECK(block_at(visits, address(c)).live);
    const auto figures = fragmentation(mapped_walk(pool, memory));
    CHECK(figures.reserved_bytes == memory.mapped_bytes());
    CHECK(figures.live_bytes == 3 * MiB + 5 * MiB);

    pool.deallocate(a, 3 * MiB);
    pool.deallocate(c, 5 * MiB);
    pool.release();
    CHECK(walk(mapped_walk(pool, memory)).empty());
}
