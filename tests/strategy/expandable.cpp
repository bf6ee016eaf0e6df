// expandable over simulated virtual memory: placement, the mapping policy, the cache and its
// trimming, exhaustion, and random traffic checked after every step.
#include "../support/death.hpp"
#include "../support/sizes.hpp"

#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/presets.hpp>
#include <poolkit/strategy/expandable.hpp>
#include <poolkit/upstream/simulated_vmm_resource.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

using namespace poolkit;

namespace {

using poolkit::test::KiB;
using poolkit::test::MiB;
constexpr std::size_t granule = 2 * MiB;

// Simulated virtual memory that checks the one rule of unmapping: nothing the pool handed out
// and took back may be unmapped before synchronize() has waited for the work that used it. The
// test calls begin() before each call into the pool; an unmap inside that call must follow a
// synchronize() inside it, unless it unmaps only what that call mapped (a map undone: nothing
// could use it yet). Under stream_ordered the lane's gate waits for the work instead (by events):
// there the test sets work_done, which must hold at each unmap.
class checked_memory : public simulated_vmm_resource {
public:
    using simulated_vmm_resource::simulated_vmm_resource;
    void begin() noexcept {
        synchronized_ = false;
        fresh_.clear();
    }
    void synchronize() noexcept {
        synchronized_ = true;
        ++synchronizations;
    }
    void map(void* at, std::size_t bytes) {
        simulated_vmm_resource::map(at, bytes);
        fresh_.emplace_back(static_cast<std::byte*>(at), bytes);
    }
    void map_whole(void* at, std::size_t bytes) {
        simulated_vmm_resource::map_whole(at, bytes);
        fresh_.emplace_back(static_cast<std::byte*>(at), bytes);
    }
    void alias(void* at, const void* from, std::size_t bytes) {
        simulated_vmm_resource::alias(at, from, bytes);
        fresh_.emplace_back(static_cast<std::byte*>(at), bytes);
        ++aliases;
    }
    void unmap(void* at, std::size_t bytes) noexcept {
        const auto* first = static_cast<std::byte*>(at);
        bool undone = true;  // every granule of it mapped since begin()
        for (const std::byte* g = first; g < first + bytes && undone; g += granularity()) {
            undone = std::any_of(fresh_.begin(), fresh_.end(),
                                 [&](const auto& range) { return g >= range.first && g < range.first + range.second; });
        }
        const bool waited = synchronized_ || (work_done && work_done());
        if (!waited && !undone) ++unsynchronized_unmaps;
        unmapped_ += bytes;
        simulated_vmm_resource::unmap(at, bytes);
    }
    [[nodiscard]] std::size_t unmapped_bytes() const noexcept { return unmapped_; }
    std::size_t synchronizations = 0;
    std::size_t unsynchronized_unmaps = 0;
    std::size_t aliases = 0;
    std::function<bool()> work_done;  // every stream's work completed (may be empty)

private:
    bool synchronized_ = false;
    std::size_t unmapped_ = 0;
    std::vector<std::pair<std::byte*, std::size_t>> fresh_;  // mapped since begin()
};

using pool_type = expandable<ref<checked_memory>>;

simulated_vmm_options memory_options(std::size_t physical = std::size_t{1} << 30) {
    return {.capacity = std::size_t{64} << 30, .granularity = granule, .physical_limit = physical};
}

// Every byte of every live block is on a mapped granule.
void check_mapped(const checked_memory& memory, const std::map<std::uintptr_t, std::size_t>& live) {
    for (const auto& [address, bytes] : live) {
        for (std::uintptr_t at = address; at < address + bytes; at = (at / granule + 1) * granule) {
            REQUIRE(memory.is_mapped(reinterpret_cast<const void*>(at)));
        }
        REQUIRE(memory.is_mapped(reinterpret_cast<const void*>(address + bytes - 1)));
    }
}

}  // namespace

static_assert(resource<pool_type> && has_try_allocate_cached<pool_type> && has_release<pool_type> && walkable<pool_type>);
static_assert(pool_lanes<lanes<expandable>, simulated_vmm_resource> && pool_lanes<lanes<expandable>, ref<checked_memory>>);

TEST_CASE("expandable maps a block's granules when it is placed and keeps them while it lives") {
    checked_memory memory{memory_options()};
    pool_type pool{memory, {.span_bytes = std::size_t{1} << 30}};
    void* block = pool.allocate(5 * MiB);
    CHECK(memory.is_mapped(block));
    CHECK(memory.is_mapped(static_cast<char*>(block) + 5 * MiB - 1));
    CHECK(pool.reserved_bytes() >= 6 * MiB);  // 5 MiB touch three granules
    CHECK(pool.reserved_bytes() == memory.mapped_bytes());
    CHECK(pool.map_calls() == 1);
    pool.deallocate(block, 5 * MiB);
    CHECK(pool.live_bytes() == 0);
    CHECK(pool.cached_bytes() == pool.reserved_bytes());  // kept mapped: the cache
    void* again = pool.allocate(5 * MiB);
    CHECK(again == block);
    CHECK(pool.map_calls() == 1);  // served from the cache, no map call
    pool.deallocate(again, 5 * MiB);
    memory.begin();
    pool.release();
    CHECK(memory.mapped_bytes() == 0);
    CHECK(memory.unsynchronized_unmaps == 0);
    pool.check_invariants();
}

TEST_CASE("by default one span holds all the physical memory: large blocks up to the limit never split across spans") {
    // Address space of 32 times the limit, as cuda_vmm_resource reserves: a span is at most a
    // 32nd of what is left, so the first is the whole limit.
    checked_memory memory{{.capacity = std::size_t{512} << 30, .granularity = granule, .physical_limit = std::size_t{16} << 30}};
    pool_type pool{memory};
    CHECK(pool.options().span_bytes == std::size_t{16} << 30);
    std::vector<void*> blocks;
    for (int i = 0; i < 15; ++i) blocks.push_back(pool.allocate(std::size_t{1} << 30));
    CHECK(pool.chunks() == 1);
    for (void* b : blocks) pool.deallocate(b, std::size_t{1} << 30);
    pool.check_invariants();
}

TEST_CASE("freed blocks coalesce across the span: no chunk boundary strands memory") {
    checked_memory memory{memory_options()};
    pool_type pool{memory, {.span_bytes = std::size_t{1} << 30, .cache_fraction = 0}};
    std::vector<void*> blocks;
    for (int i = 0; i < 8; ++i) blocks.push_back(pool.allocate(24 * MiB));
    for (void* b : blocks) pool.deallocate(b, 24 * MiB);
    pool.check_invariants();
    void* whole = pool.allocate(8 * 24 * MiB);  // the eight freed blocks, merged, hold it
    CHECK(whole == blocks.front());
    CHECK(pool.chunks() == 1);
    pool.deallocate(whole, 8 * 24 * MiB);
}

TEST_CASE("before new granules are mapped, the cache is trimmed to the peak of live memory") {
    checked_memory memory{memory_options()};
    // Without stitching, which would serve c from the cache instead (its tests are below).
    pool_type pool{memory, {.span_bytes = std::size_t{1} << 30, .cache_fraction = 0, .peak_slack = 0, .stitch = false}};
    void* a = pool.allocate(64 * MiB);
    void* b = pool.allocate(64 * MiB);
    pool.deallocate(a, 64 * MiB);  // 64 MiB cached in front of b
    const std::size_t peak = pool.peak_live_bytes();
    memory.begin();
    void* c = pool.allocate(100 * MiB);  // does not fit the cache: it is mapped after b
    CHECK(pool.reserved_bytes() <= std::max(peak, pool.live_bytes()) + 2 * granule);
    CHECK(memory.synchronizations == 1);  // the cache went only after waiting
    CHECK(memory.unsynchronized_unmaps == 0);
    CHECK(pool.cached_bytes() < 64 * MiB);
    pool.deallocate(b, 64 * MiB);
    pool.deallocate(c, 100 * MiB);
    pool.check_invariants();
}

TEST_CASE("trimming unmaps only the granules the budget needs, not a free block's whole cache") {
    checked_memory memory{memory_options()};
    pool_type pool{memory,
                   {.span_bytes = std::size_t{1} << 30, .cache_fraction = 0, .peak_slack = 0, .max_peak_slack = 0, .mapping_bytes = 0}};
    void* a = pool.allocate(64 * MiB);
    void* b = pool.allocate(64 * MiB);
    void* e = pool.allocate(40 * MiB);
    pool.deallocate(a, 64 * MiB);  // 32 granules cached in front of b
    pool.deallocate(e, 40 * MiB);  // 20 cached after it; the peak is 168 MiB
    CHECK(pool.map_calls() == 3);
    // 35 granules where e was: 15 to map, and as many to unmap for the peak.
    void* c = pool.allocate(70 * MiB);
    CHECK(c == e);
    CHECK(memory.unmapped_bytes() == 15 * granule);
    CHECK(pool.cached_bytes() == 17 * granule);
    CHECK(pool.reserved_bytes() == pool.peak_live_bytes());
    pool.check_invariants();
    void* d = pool.allocate(34 * MiB);  // what is left of a's cache holds it: nothing mapped
    CHECK(d == a);
    CHECK(pool.map_calls() == 4);
    pool.deallocate(b, 64 * MiB);
    pool.deallocate(c, 70 * MiB);
    pool.deallocate(d, 34 * MiB);
    pool.check_invariants();
}

TEST_CASE("a small request of half a granule or more that its spans would map for goes into a large span's mapped hole") {
    checked_memory memory{memory_options()};
    pool_type pool{memory, {}};
    void* large = pool.allocate(64 * MiB);
    pool.deallocate(large, 64 * MiB);  // 64 MiB mapped and free in a large span
    REQUIRE(pool.reserved_bytes() == 64 * MiB);
    void* half = pool.allocate(granule / 2);  // no small span yet: it would map a granule
    CHECK(pool.reserved_bytes() == 64 * MiB);
    CHECK(reinterpret_cast<std::uintptr_t>(half) >= reinterpret_cast<std::uintptr_t>(large));
    CHECK(reinterpret_cast<std::uintptr_t>(half) < reinterpret_cast<std::uintptr_t>(large) + 64 * MiB);
    void* less = pool.allocate(granule / 4);  // smaller: to a small span, which maps a granule it will share
    CHECK(pool.reserved_bytes() == 64 * MiB + granule);
    void* beside = pool.allocate(granule / 2);  // the small span has room mapped now: it goes there
    CHECK(pool.reserved_bytes() == 64 * MiB + granule);
    const auto [low, high] = std::minmax({reinterpret_cast<std::uintptr_t>(beside), reinterpret_cast<std::uintptr_t>(less)});
    CHECK(high - low < granule);
    pool.check_invariants();
    for (void* p : {half, beside}) pool.deallocate(p, granule / 2);
    pool.deallocate(less, granule / 4);
    pool.release();
    CHECK(memory.mapped_bytes() == 0);
}

TEST_CASE("small_in_old_holes: a smaller request its spans would map for goes into the large hole freed longest ago") {
    checked_memory memory{memory_options()};
    bool on = false;
    SUBCASE("off (the default): the small span maps a granule") {}
    SUBCASE("on") { on = true; }
    pool_type pool{memory, {.small_in_old_holes = on}};
    void* older = pool.allocate(64 * MiB);
    void* between = pool.allocate(16 * MiB);  // keeps the two holes apart
    void* newer = pool.allocate(64 * MiB);
    pool.deallocate(older, 64 * MiB);
    pool.deallocate(newer, 64 * MiB);
    const std::size_t reserved = pool.reserved_bytes();
    void* small = pool.allocate(granule / 4);
    const auto at = reinterpret_cast<std::uintptr_t>(small), hole = reinterpret_cast<std::uintptr_t>(older);
    if (on) {
        CHECK(pool.reserved_bytes() == reserved);
        CHECK((at >= hole && at < hole + 64 * MiB));
        void* large = pool.allocate(64 * MiB);  // the hole it took is short now: the newer one serves
        CHECK(large == newer);
        CHECK(pool.reserved_bytes() == reserved);
        pool.deallocate(large, 64 * MiB);
    } else {
        CHECK(pool.reserved_bytes() == reserved + granule);
        CHECK((at < hole || at >= hole + 64 * MiB));
    }
    pool.check_invariants();
    pool.deallocate(small, granule / 4);
    pool.deallocate(between, 16 * MiB);
    pool.check_invariants();
    pool.release();
    CHECK(memory.mapped_bytes() == 0);
}

TEST_CASE("with mapping_bytes, trimming unmaps the fewest whole allocations the budget needs") {
    checked_memory memory{memory_options()};
    pool_type pool{memory,
                   {.span_bytes = std::size_t{1} << 30, .cache_fraction = 0, .peak_slack = 0, .mapping_bytes = 8 * MiB, .stitch = false}};
    void* a = pool.allocate(64 * MiB);  // granules 0-31: eight allocations of 4
    void* b = pool.allocate(64 * MiB);
    void* e = pool.allocate(40 * MiB);
    pool.deallocate(a, 64 * MiB);
    pool.deallocate(e, 40 * MiB);
    memory.begin();
    void* c = pool.allocate(70 * MiB);  // where e was: 15 granules to map, 15 to unmap
    CHECK(c == e);
    // Four allocations from the high end of a's cache, not all eight: the rest would be mapped
    // again at the next request that a's space holds.
    CHECK(memory.unmapped_bytes() == 16 * granule);
    CHECK(memory.unsynchronized_unmaps == 0);
    pool.check_invariants();
    pool.deallocate(b, 64 * MiB);
    pool.deallocate(c, 70 * MiB);
    pool.check_invariants();
}

TEST_CASE("nothing is mapped ahead in a small span: its granules save no driver call mapped together") {
    checked_memory memory{memory_options()};
    pool_type pool{memory, {.span_bytes = std::size_t{1} << 30, .peak_slack = 0}};
    pool.deallocate(pool.allocate(64 * MiB), 64 * MiB);
    memory.begin();
    pool.release();  // nothing mapped, the peak 64 MiB: the policy's budget would map 31 granules ahead
    void* small = pool.allocate(4 * KiB);
    CHECK(pool.reserved_bytes() == granule);
    void* large = pool.allocate(4 * MiB);  // a large span still maps ahead for growth
    CHECK(pool.reserved_bytes() > granule + 4 * MiB);
    pool.deallocate(small, 4 * KiB);
    pool.deallocate(large, 4 * MiB);
    pool.check_invariants();
}

TEST_CASE("a large request goes where fewest granules need mapping, in any free block that fits") {
    checked_memory memory{memory_options()};
    pool_type pool{memory, {.span_bytes = std::size_t{1} << 30, .cache_fraction = 0, .max_cached_bytes = 40 * MiB}};
    // Ten 12 MiB blocks between live 2 MiB ones, then 40 MiB and a live guard.
    std::vector<void*> holes, live;
    for (int i = 0; i < 10; ++i) {
        holes.push_back(pool.allocate(12 * MiB));
        live.push_back(pool.allocate(2 * MiB));
    }
    void* large = pool.allocate(40 * MiB);
    live.push_back(pool.allocate(2 * MiB));
    // Freed oldest first, the holes' granules leave the cache (max_cached_bytes); the 40 MiB stay.
    for (void* hole : holes) pool.deallocate(hole, 12 * MiB);
    pool.deallocate(large, 40 * MiB);
    REQUIRE(pool.cached_bytes() == 40 * MiB);
    const std::size_t maps = pool.map_calls();
    // Best fit would take a 12 MiB hole and map it; the mapped 40 MiB block holds the request.
    void* placed = pool.allocate(10 * MiB);
    CHECK(pool.map_calls() == maps);
    CHECK(placed >= large);
    CHECK(static_cast<char*>(placed) + 10 * MiB <= static_cast<char*>(large) + 40 * MiB);
    pool.deallocate(placed, 10 * MiB);
    for (void* block : live) pool.deallocate(block, 2 * MiB);
    pool.check_invariants();
}

TEST_CASE("where a block's low end needs no mapping, a large request goes there, not to the end beside a live block") {
    checked_memory memory{memory_options()};
    expandable<ref<checked_memory>, keep_mapped> pool{memory, {.span_bytes = std::size_t{1} << 30, .small_size = 64 * KiB}};
    // A [0, 3) MiB, B [3, 4), C [4, 7.5), E [7.5, 9.5): B and C freed leave [3, 7.5) free and
    // mapped, its low end sharing granule 1 with A, its high end granule 3 with E.
    void* a = pool.allocate(3 * MiB);
    void* b = pool.allocate(1 * MiB);
    void* c = pool.allocate(3 * MiB + 512 * KiB);
    void* e = pool.allocate(2 * MiB);
    const auto base = reinterpret_cast<std::uintptr_t>(a);
    REQUIRE(reinterpret_cast<std::uintptr_t>(e) == base + 7 * MiB + 512 * KiB);
    pool.deallocate(b, 1 * MiB);
    pool.deallocate(c, 3 * MiB + 512 * KiB);
    const std::size_t maps = pool.map_calls();
    // Either end needs no mapping; the low end keeps [4.5, 7.5) in one piece.
    void* placed = pool.allocate(1 * MiB + 512 * KiB);
    CHECK(reinterpret_cast<std::uintptr_t>(placed) == base + 3 * MiB);
    CHECK(pool.map_calls() == maps);
    for (auto [p, bytes] : {std::pair{placed, 1 * MiB + 512 * KiB}, std::pair{a, 3 * MiB}, std::pair{e, 2 * MiB}})
        pool.deallocate(p, bytes);
    pool.check_invariants();
}

TEST_CASE("caches grown a step at a time (a new block, then the old one freed) stay packed, releasing no physical memory") {
    // Decoder generation: per layer a key and a value cache, each step replaced by one a token
    // longer; activations come and go between. Placing each block at the low end of the free
    // space that is mapped keeps the freed caches' room in one piece for the next, longer ones
    // (1.08 times the live peak here); placing beside the live neighbour whose granule it shares
    // took PyTorch's policy to 1.42. The longer caches need new stitches all along: at the most a
    // pool keeps, the free ones whose pieces were taken are given up (two waits in all here; 1.15
    // when stitching stopped there instead).
    checked_memory memory{memory_options(std::size_t{4} << 30)};
    expandable<ref<checked_memory>, keep_mapped> pool{memory, {.span_bytes = std::size_t{4} << 30}};
    std::mt19937_64 random(3);
    std::vector<std::pair<void*, std::size_t>> weights;
    for (int i = 0; i < 16; ++i) {
        const std::size_t bytes = (4 + random() % 8) * MiB;
        weights.emplace_back(pool.allocate(bytes), bytes);
    }
    for (int request = 0; request < 6; ++request) {
        const std::size_t batch = 1 + random() % 4, prompt = 32 + random() % 256, per_token = batch * 32 * KiB;
        std::vector<std::pair<void*, std::size_t>> caches;
        for (int i = 0; i < 16; ++i) caches.emplace_back(pool.allocate(prompt * per_token), prompt * per_token);
        for (std::size_t length = prompt + 1; length < prompt + 64; ++length) {
            for (auto& [p, bytes] : caches) {
                const std::size_t activation = batch * (64 + random() % 512) * KiB;
                void* scratch = pool.allocate(activation);
                void* grown = pool.allocate(length * per_token);
                pool.deallocate(p, bytes);
                pool.deallocate(scratch, activation);
                p = grown;
                bytes = length * per_token;
            }
        }
        for (auto& [p, bytes] : caches) pool.deallocate(p, bytes);
    }
    const double ratio = static_cast<double>(pool.peak_reserved_bytes()) / static_cast<double>(pool.peak_live_bytes());
    MESSAGE("peak mapped / peak live: " << ratio << ", waits: " << memory.synchronizations);
    CHECK(ratio < 1.15);
    CHECK(memory.released_allocations() == 0);
    for (auto& [p, bytes] : weights) pool.deallocate(p, bytes);
    pool.check_invariants();
}

namespace {

// Rounds of large blocks. With `varying`, each round draws new sizes, allocates 24 blocks, frees
// the blocks the round before kept, then all but a third of its own (those live on between the
// next round's blocks): blocks land elsewhere each round and granules move. Without, every round
// allocates and frees the first round's blocks. Returns the granules unmapped in the last half of
// the rounds.
template <class Pool>
std::size_t remapped_in_rounds(Pool& pool, checked_memory& memory, bool varying) {
    std::mt19937_64 random(7);
    std::vector<std::size_t> sizes;
    for (int i = 0; i < 24; ++i) sizes.push_back((2 + random() % 30) * MiB + 512 * (random() % 1000));
    std::vector<std::pair<void*, std::size_t>> kept;
    std::size_t unmapped_before = 0;
    for (int round = 0; round < 120; ++round) {
        if (round == 60) unmapped_before = memory.unmapped_bytes();
        if (varying) {
            for (auto& size : sizes) size = (2 + random() % 30) * MiB + 512 * (random() % 1000);
        }
        std::vector<std::pair<void*, std::size_t>> blocks;
        for (std::size_t size : sizes) blocks.emplace_back(pool.allocate(size), size);
        for (const auto& [pointer, size] : kept) pool.deallocate(pointer, size);
        kept.clear();
        for (std::size_t i = 0; i < blocks.size(); ++i) {
            if (varying && i % 3 == 1) {
                kept.push_back(blocks[i]);
            } else {
                pool.deallocate(blocks[i].first, blocks[i].second);
            }
        }
    }
    for (const auto& [pointer, size] : kept) pool.deallocate(pointer, size);
    pool.check_invariants();
    return (memory.unmapped_bytes() - unmapped_before) / granule;
}

}  // namespace

TEST_CASE("where following live memory remaps often, a max_peak_slack lets the slack rise until remaps stop") {
    checked_memory follow_memory{memory_options()};
    pool_type follow{follow_memory,
                     {.span_bytes = std::size_t{4} << 30, .cache_fraction = 0, .peak_slack = 0, .max_peak_slack = 0, .mapping_bytes = 0}};
    const std::size_t follow_remaps = remapped_in_rounds(follow, follow_memory, true);
    CHECK(follow.peak_slack() == 0);

    checked_memory adaptive_memory{memory_options()};
    pool_type adaptive{
        adaptive_memory,
        {.span_bytes = std::size_t{4} << 30, .cache_fraction = 0, .peak_slack = 0, .max_peak_slack = 0.2, .mapping_bytes = 0}};
    const std::size_t adaptive_remaps = remapped_in_rounds(adaptive, adaptive_memory, true);
    MESSAGE("granules unmapped for new mappings in the last 60 rounds: " << follow_remaps << " following live memory, " << adaptive_remaps
                                                                         << " with the slack risen to " << adaptive.peak_slack());
    CHECK(follow_remaps > 20);
    CHECK(adaptive_remaps * 2 < follow_remaps);
    CHECK(adaptive.peak_slack() > 0);
    CHECK(adaptive.peak_slack() <= 0.2);
    // The price is bounded by the slack reached: the same live memory, at most that much more mapped.
    MESSAGE("peak live " << follow.peak_live_bytes() / MiB << " MiB; peak mapped " << follow.peak_reserved_bytes() / MiB
                         << " MiB following live memory, " << adaptive.peak_reserved_bytes() / MiB << " MiB with the slack");
    CHECK(adaptive.peak_live_bytes() == follow.peak_live_bytes());
    CHECK(static_cast<double>(adaptive.peak_reserved_bytes()) <=
          static_cast<double>(follow.peak_reserved_bytes()) + static_cast<double>(adaptive.peak_live_bytes()) * adaptive.peak_slack() +
              granule);
}

TEST_CASE("a workload that repeats its shapes stops remapping and never raises the slack") {
    checked_memory memory{memory_options()};
    pool_type pool{memory, {.span_bytes = std::size_t{4} << 30, .cache_fraction = 0, .peak_slack = 0, .max_peak_slack = 0.2}};
    CHECK(remapped_in_rounds(pool, memory, false) == 0);
    CHECK(pool.peak_slack() == 0);
}

TEST_CASE("keep_mapped, PyTorch expandable_segments' policy: nothing is unmapped until release() or the physical limit") {
    checked_memory follow_memory{memory_options()};
    pool_type follow{follow_memory,
                     {.span_bytes = std::size_t{4} << 30, .cache_fraction = 0, .peak_slack = 0, .max_peak_slack = 0, .mapping_bytes = 0}};
    remapped_in_rounds(follow, follow_memory, true);

    checked_memory memory{memory_options()};
    expandable<ref<checked_memory>, keep_mapped> pool{memory, {.span_bytes = std::size_t{4} << 30, .cache_fraction = 0}};
    CHECK(remapped_in_rounds(pool, memory, true) == 0);
    CHECK(memory.unmapped_bytes() == 0);
    MESSAGE("peak mapped " << pool.peak_reserved_bytes() / MiB << " MiB keeping everything mapped, " << follow.peak_reserved_bytes() / MiB
                           << " MiB following live memory");
    CHECK(pool.peak_reserved_bytes() >= follow.peak_reserved_bytes());
    CHECK(pool.reserved_bytes() == pool.peak_reserved_bytes());  // the whole peak stays mapped
    CHECK(pool.cached_bytes() == pool.reserved_bytes());
    memory.begin();
    pool.release();
    CHECK(memory.mapped_bytes() == 0);
    CHECK(memory.unsynchronized_unmaps == 0);

    // At the physical limit the cache goes, policy or not: small blocks fill it, are freed, and a
    // large block then needs their granules.
    checked_memory full{memory_options(64 * MiB)};
    expandable<ref<checked_memory>, keep_mapped> tight{full, {.span_bytes = std::size_t{4} << 30}};
    std::vector<void*> small;
    for (int i = 0; i < 64; ++i) small.push_back(tight.allocate(MiB));
    CHECK(full.mapped_bytes() == 64 * MiB);
    for (void* block : small) tight.deallocate(block, MiB);
    CHECK(full.unmapped_bytes() == 0);
    full.begin();
    void* large = tight.allocate(32 * MiB);
    CHECK(full.unmapped_bytes() >= 32 * MiB);
    CHECK(full.unsynchronized_unmaps == 0);
    tight.deallocate(large, 32 * MiB);
    tight.check_invariants();
}

// The defaults (peak_slack infinite) are keep_mapped's policy: over the same random traffic, with
// releases and a physical limit that forces unmaps, the same blocks at the same addresses and the
// same driver calls.
TEST_CASE("expandable's defaults keep what is mapped, as keep_mapped does, call for call") {
    checked_memory default_memory{memory_options(std::size_t{2} << 30)};
    checked_memory keep_memory{memory_options(std::size_t{2} << 30)};
    pool_type defaults{default_memory, {.span_bytes = std::size_t{1} << 30}};
    expandable<ref<checked_memory>, keep_mapped> keep{keep_memory, {.span_bytes = std::size_t{1} << 30}};
    CHECK(std::isinf(defaults.peak_slack()));
    std::mt19937_64 random(7);
    std::vector<std::pair<void*, std::size_t>> live;
    for (int step = 0; step < 6000; ++step) {
        if (live.empty() || random() % 100 < 51) {
            const std::size_t bytes = random() % 3 == 0 ? MiB + random() % (96 * MiB) : 1 + random() % (512 * KiB);
            void* a = defaults.try_allocate(bytes);
            void* b = keep.try_allocate(bytes);
            REQUIRE((a == nullptr) == (b == nullptr));
            if (a != nullptr)
                REQUIRE(static_cast<std::byte*>(a) - default_memory.base() == static_cast<std::byte*>(b) - keep_memory.base());
            if (a != nullptr) live.emplace_back(a, bytes);
            if (b != nullptr) live.emplace_back(b, bytes);
        } else {
            const std::size_t victim = random() % (live.size() / 2) * 2;
            defaults.deallocate(live[victim].first, live[victim].second);
            keep.deallocate(live[victim + 1].first, live[victim + 1].second);
            live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim), live.begin() + static_cast<std::ptrdiff_t>(victim) + 2);
        }
        if (step % 1500 == 1499) {
            defaults.release();
            keep.release();
        }
    }
    CHECK(defaults.map_calls() == keep.map_calls());
    CHECK(defaults.unmap_calls() == keep.unmap_calls());
    CHECK(defaults.unmap_calls() > 0);  // the physical limit made some
    CHECK(defaults.peak_reserved_bytes() == keep.peak_reserved_bytes());
    for (std::size_t i = 0; i < live.size(); i += 2) {
        defaults.deallocate(live[i].first, live[i].second);
        keep.deallocate(live[i + 1].first, live[i + 1].second);
    }
    defaults.check_invariants();
    keep.check_invariants();
}

TEST_CASE("a mapping policy of one's own is asked before each mapping, told of each allocation and unmap, and caps the cache") {
    // Unmaps everything cached before any mapping, maps one granule ahead, caches 4 MiB at most.
    struct eager {
        explicit eager(const expandable_options&) noexcept {}
        std::size_t unmap_first(const mapping_state&) const noexcept { return std::numeric_limits<std::size_t>::max(); }
        std::size_t map_ahead(const mapping_state& state) const noexcept { return state.granularity; }
        void allocated() noexcept { ++allocations; }
        void unmapped(std::size_t bytes, const mapping_state&) noexcept { unmapped_bytes += bytes; }
        std::size_t most_cached_bytes() const noexcept { return 4 * MiB; }
        std::size_t allocations = 0;
        std::size_t unmapped_bytes = 0;
    };
    static_assert(mapping_policy<eager>);
    checked_memory memory{memory_options()};
    expandable<ref<checked_memory>, eager> pool{memory, {.span_bytes = std::size_t{1} << 30, .mapping_bytes = 0}};
    void* a = pool.allocate(8 * MiB);
    CHECK(pool.reserved_bytes() == 10 * MiB);  // the block and one granule ahead
    void* b = pool.allocate(2 * MiB);  // in the granule mapped ahead: no mapping
    CHECK(pool.reserved_bytes() == 10 * MiB);
    memory.begin();
    pool.deallocate(a, 8 * MiB);
    CHECK(pool.cached_bytes() == 4 * MiB);  // trimmed to the policy's cap
    CHECK(pool.policy().unmapped_bytes == 0);  // not for a mapping: the policy is not told
    memory.begin();
    void* c = pool.allocate(20 * MiB);  // needs mapping: the cache goes first
    CHECK(pool.policy().unmapped_bytes == 4 * MiB);
    CHECK(pool.policy().allocations == 3);
    CHECK(memory.unsynchronized_unmaps == 0);
    memory.begin();
    pool.deallocate(b, 2 * MiB);
    pool.deallocate(c, 20 * MiB);
    CHECK(pool.cached_bytes() <= 4 * MiB);
    CHECK(memory.unsynchronized_unmaps == 0);
    pool.check_invariants();
}

TEST_CASE("a growing workload maps ahead within the budget, so most growth needs no map call") {
    checked_memory memory{memory_options(std::size_t{8} << 30)};
    pool_type pool{memory, {.span_bytes = std::size_t{4} << 30, .cache_fraction = 0.05, .peak_slack = 0, .mapping_bytes = 0}};
    std::vector<void*> blocks;
    for (int i = 0; i < 400; ++i) blocks.push_back(pool.allocate(3 * MiB + 512 * i));
    CHECK(pool.map_calls() < 100);
    CHECK(static_cast<double>(pool.reserved_bytes()) <= static_cast<double>(pool.live_bytes()) * 1.05 + 2 * granule);
    for (std::size_t i = 0; i < blocks.size(); ++i) pool.deallocate(blocks[i], 3 * MiB + 512 * i);
    pool.check_invariants();
}

TEST_CASE("small blocks live in spans of their own: a few of them pin few granules") {
    checked_memory memory{memory_options()};
    pool_type pool{memory, {.span_bytes = std::size_t{1} << 30}};
    std::vector<void*> small, large;
    for (int i = 0; i < 64; ++i) {
        large.push_back(pool.allocate(8 * MiB));
        small.push_back(pool.allocate(4 * KiB));
    }
    for (void* b : large) pool.deallocate(b, 8 * MiB);
    memory.begin();
    pool.release();
    CHECK(pool.reserved_bytes() <= granule);  // 64 × 4 KiB share one granule
    for (void* b : small) pool.deallocate(b, 4 * KiB);
    pool.check_invariants();
}

TEST_CASE("try_allocate_cached serves only from mapped free space: it never maps or claims") {
    checked_memory memory{memory_options()};
    pool_type pool{memory, {.span_bytes = std::size_t{1} << 30}};
    CHECK(pool.try_allocate_cached(1 * MiB) == nullptr);
    CHECK(pool.chunks() == 0);
    void* block = pool.allocate(6 * MiB);
    pool.deallocate(block, 6 * MiB);
    const auto maps = pool.map_calls();
    void* cached = pool.try_allocate_cached(3 * MiB);
    CHECK(cached != nullptr);
    CHECK(pool.try_allocate_cached(64 * MiB) == nullptr);
    CHECK(pool.map_calls() == maps);
    pool.deallocate(cached, 3 * MiB);
}

TEST_CASE("physical exhaustion unmaps the cache, retries, then throws out_of_memory with figures") {
    checked_memory memory{memory_options(64 * MiB)};
    pool_type pool{memory, {.span_bytes = std::size_t{1} << 30, .cache_fraction = 10, .peak_slack = 0}};
    void* a = pool.allocate(40 * MiB);
    pool.deallocate(a, 40 * MiB);  // 40 MiB cached
    void* b = pool.allocate(10 * MiB, 64 * MiB);  // a cache_fraction of 10 keeps the 40 MiB cached meanwhile
    memory.begin();
    void* c = pool.allocate(50 * MiB, 128 * MiB);
    CHECK(memory.unsynchronized_unmaps == 0);
    CHECK(memory.mapped_bytes() <= 64 * MiB);
    try {
        static_cast<void>(pool.allocate(32 * MiB));
        FAIL("allocate past the physical limit succeeded");
    } catch (const out_of_memory& error) {
        CHECK(error.figures().live_bytes == 60 * MiB);
        CHECK(std::string(error.what()).find("expandable") != std::string::npos);
    }
    pool.check_invariants();
    pool.deallocate(b, 10 * MiB, 64 * MiB);
    pool.deallocate(c, 50 * MiB, 128 * MiB);
    void* d = pool.allocate(32 * MiB);  // room again
    pool.deallocate(d, 32 * MiB);
}

namespace {
// checked_memory whose map and map_whole fail (std::bad_alloc, as a driver refusal reaches the
// pool) at the fail_at-th call counted from arm().
class failing_memory : public checked_memory {
public:
    using checked_memory::checked_memory;
    void arm(std::size_t fail_at) noexcept {
        calls_ = 0;
        fail_at_ = fail_at;
    }
    void map(void* at, std::size_t bytes) {
        fail_here();
        checked_memory::map(at, bytes);
    }
    void map_whole(void* at, std::size_t bytes) {
        fail_here();
        checked_memory::map_whole(at, bytes);
    }

private:
    void fail_here() {
        if (++calls_ == fail_at_) throw std::bad_alloc();
    }
    std::size_t calls_ = 0;
    std::size_t fail_at_ = 0;
};
}  // namespace

TEST_CASE("a map that fails partway unmaps what that request mapped: the pool and the memory agree, nothing is lost") {
    failing_memory memory{memory_options()};
    SUBCASE("the second of two runs of granules") {
        expandable<ref<failing_memory>> pool{memory, {.mapping_bytes = 0}};
        // Five granule blocks; the second and fourth freed and unmapped, then the third freed: a
        // free block of three granules whose middle one is mapped, between two live blocks.
        std::vector<void*> blocks;
        for (int i = 0; i < 5; ++i) blocks.push_back(pool.allocate(granule));
        pool.deallocate(blocks[1], granule);
        pool.deallocate(blocks[3], granule);
        pool.release();
        pool.deallocate(blocks[2], granule);
        REQUIRE(pool.reserved_bytes() == 3 * granule);
        memory.arm(2);  // the first run maps, the second fails
        memory.begin();
        CHECK_THROWS_AS(static_cast<void>(pool.allocate(3 * granule)), out_of_memory);
        CHECK(memory.unsynchronized_unmaps == 0);
        CHECK(pool.reserved_bytes() == 3 * granule);
        CHECK(memory.mapped_bytes() == pool.reserved_bytes());
        pool.check_invariants();
        memory.arm(0);
        void* whole = pool.allocate(3 * granule);  // the same placement maps both runs now
        CHECK(whole == blocks[1]);
        CHECK(pool.reserved_bytes() == 5 * granule);
        pool.check_invariants();
        pool.deallocate(whole, 3 * granule);
        pool.deallocate(blocks[0], granule);
        pool.deallocate(blocks[4], granule);
    }
    SUBCASE("the third physical allocation of a block mapped in pieces, with a cache to give up") {
        // Without stitching: a stitch would take the cache, and its own failed map (which falls
        // back to this path) would use the armed failure up.
        expandable<ref<failing_memory>> pool{memory, {.mapping_bytes = 4 * granule, .stitch = false}};
        void* cached = pool.allocate(4 * granule);
        void* pinned = pool.allocate(granule);  // keeps the cache below apart from the new block
        pool.deallocate(cached, 4 * granule);
        REQUIRE(pool.cached_bytes() == 4 * granule);
        memory.arm(3);  // 40 MiB in pieces of up to 8: two map, the third fails; the retry maps them all
        memory.begin();
        void* large = pool.allocate(20 * granule);
        CHECK(memory.unsynchronized_unmaps == 0);
        CHECK(pool.cached_bytes() == 0);  // given up before the retry
        CHECK(memory.mapped_bytes() == pool.reserved_bytes());
        pool.check_invariants();
        memory.arm(1);  // and where the retry fails too, out_of_memory, with nothing left mapped for it
        memory.begin();
        const std::size_t before = pool.reserved_bytes();
        CHECK_THROWS_AS(static_cast<void>(pool.allocate(12 * granule)), out_of_memory);
        CHECK(pool.reserved_bytes() == before);
        CHECK(memory.mapped_bytes() == before);
        pool.check_invariants();
        pool.deallocate(large, 20 * granule);
        pool.deallocate(pinned, granule);
    }
}

TEST_CASE("mapping_bytes: a large block maps in few physical allocations, each unmapped once all of it is free") {
    checked_memory memory{memory_options()};
    pool_type pool{memory, {.span_bytes = std::size_t{1} << 30, .mapping_bytes = 8 * MiB}};
    void* large = pool.allocate(20 * MiB);  // granules 0-9 of its span: allocations of 4, 4 and 2
    CHECK(memory.map_calls() == 3);
    CHECK(pool.map_calls() == 3);
    CHECK(pool.reserved_bytes() == 20 * MiB);
    pool.deallocate(large, 20 * MiB);
    CHECK(pool.cached_bytes() == 20 * MiB);

    void* pinning = pool.allocate(3 * MiB);  // mapped already; it touches the first allocation
    CHECK(pinning == large);
    CHECK(memory.map_calls() == 3);
    CHECK(pool.cached_bytes() == 12 * MiB);  // the first allocation is pinned whole, free part and all
    pool.check_invariants();
    memory.begin();
    pool.release();
    CHECK(memory.mapped_bytes() == 8 * MiB);
    CHECK(memory.unsynchronized_unmaps == 0);
    pool.deallocate(pinning, 3 * MiB);
    CHECK(pool.cached_bytes() == 8 * MiB);
    pool.release();
    CHECK(memory.mapped_bytes() == 0);
    pool.check_invariants();

    CHECK_THROWS_AS(pool_type(memory, {.mapping_bytes = 3 * MiB}), std::invalid_argument);
    CHECK_THROWS_AS(pool_type(memory, {.mapping_bytes = 6 * MiB}), std::invalid_argument);
    CHECK_NOTHROW(pool_type(memory, {.mapping_bytes = MiB}));  // below a granule: one granule
}

TEST_CASE("stitching serves a large request from free allocations scattered through the pool, mapping nothing new") {
    checked_memory memory{memory_options()};
    pool_type pool{memory, {.mapping_bytes = 32 * MiB, .stitch = true}};
    std::vector<void*> blocks;
    for (int i = 0; i < 6; ++i) blocks.push_back(pool.allocate(32 * MiB));  // an allocation of 32 MiB each
    for (int i : {0, 2, 4}) pool.deallocate(blocks[i], 32 * MiB);
    REQUIRE(pool.reserved_bytes() == 192 * MiB);
    const std::size_t maps = memory.map_calls();

    void* stitched = pool.allocate(96 * MiB);  // no free block holds it: 96 MiB would be mapped
    CHECK(memory.mapped_bytes() == 192 * MiB);
    CHECK(pool.reserved_bytes() == 192 * MiB);
    CHECK(memory.aliases == 3);  // the three holes, apart
    CHECK(memory.map_calls() == maps + 3);
    CHECK(pool.map_calls() == memory.map_calls());
    CHECK(pool.stitched_blocks() == 1);
    CHECK(pool.live_bytes() == 192 * MiB);
    CHECK(pool.live_blocks() == 4);
    CHECK(pool.owns(stitched));
    CHECK(pool.owns(static_cast<std::byte*>(stitched) + 96 * MiB - 1));
    CHECK(memory.is_mapped(static_cast<std::byte*>(stitched) + 96 * MiB - 1));
    pool.check_invariants();
    memory.check_invariants();

    pool.deallocate(stitched, 96 * MiB);
    CHECK(pool.stitched_blocks() == 0);
    CHECK(pool.stitches() == 1);  // kept, with its aliases, for the next request of its size
    CHECK(pool.live_bytes() == 96 * MiB);
    CHECK(pool.cached_bytes() == 96 * MiB);
    pool.check_invariants();
    const std::size_t calls = memory.map_calls();
    void* again = pool.allocate(80 * MiB);  // its pieces all free again, and at most a quarter too large
    CHECK(again == stitched);
    CHECK(memory.map_calls() == calls);
    pool.deallocate(again, 80 * MiB);

    // With one hole taken by a block, the request takes the other two and maps only the 32 MiB
    // they lack, not 96.
    void* hole = pool.allocate(32 * MiB);
    CHECK(hole == blocks[0]);
    void* grown = pool.allocate(96 * MiB);
    CHECK(grown != stitched);
    CHECK(pool.stitches() == 2);
    CHECK(memory.mapped_bytes() == 224 * MiB);
    pool.check_invariants();
    memory.check_invariants();

    pool.deallocate(grown, 96 * MiB);
    pool.deallocate(hole, 32 * MiB);
    for (int i : {1, 3, 5}) pool.deallocate(blocks[i], 32 * MiB);
    memory.begin();
    pool.release();  // the stitches go first: no memory is unmapped under an alias
    CHECK(pool.stitches() == 0);
    CHECK(memory.mapped_bytes() == 0);
    CHECK(memory.unsynchronized_unmaps == 0);
    pool.check_invariants();
    memory.check_invariants();
}

TEST_CASE("at the most stitches a pool keeps, the free ones whose pieces were taken make room for new ones, after one wait") {
    // Each round stitches a 16 MiB request from two fresh 8 MiB holes, frees it and fills the
    // holes again, so that its stitch stays free but can serve nothing: a layout that shifts. The
    // first round's stitched block stays live.
    checked_memory memory{memory_options(std::size_t{4} << 30)};
    pool_type pool{memory, {.span_bytes = std::size_t{4} << 30, .mapping_bytes = 8 * MiB, .stitch = true, .min_stitch_bytes = 0}};
    const std::size_t most = expandable_options{}.max_stitches;
    std::vector<void*> blocks;
    for (std::size_t i = 0; i < 4 * (most + 2); ++i) blocks.push_back(pool.allocate(8 * MiB));
    std::vector<void*> fills;
    void* kept = nullptr;
    for (std::size_t round = 0; round < most + 2; ++round) {
        pool.deallocate(blocks[4 * round], 8 * MiB);
        pool.deallocate(blocks[4 * round + 2], 8 * MiB);
        const std::size_t reserved = pool.reserved_bytes(), unmaps = memory.unmap_calls(), waits = memory.synchronizations;
        memory.begin();
        void* stitched = pool.allocate(16 * MiB);
        CHECK(pool.stitched_blocks() == (round == 0 ? 1 : 2));
        CHECK(pool.reserved_bytes() == reserved);  // the holes, aliased: nothing mapped
        const bool at_most = round == most;
        // At the cap, the free ones go, two aliases each, after one wait; the live one stays.
        CHECK(pool.stitches() == (round < most ? round + 1 : round - most + 2));
        CHECK(memory.unmap_calls() == unmaps + (at_most ? 2 * (most - 1) : 0));
        CHECK(memory.synchronizations == waits + (at_most ? 1 : 0));
        CHECK(memory.unsynchronized_unmaps == 0);
        if (round == 0) {
            kept = stitched;
            continue;
        }
        pool.deallocate(stitched, 16 * MiB);
        fills.push_back(pool.allocate(8 * MiB));
        fills.push_back(pool.allocate(8 * MiB));
        CHECK(pool.reserved_bytes() == reserved);  // into the holes again
        pool.check_invariants();
        memory.check_invariants();
    }
    CHECK(memory.is_mapped(static_cast<std::byte*>(kept) + 16 * MiB - 1));
    pool.deallocate(kept, 16 * MiB);
    for (void* p : fills) pool.deallocate(p, 8 * MiB);
    for (std::size_t i = 0; i < blocks.size(); ++i) {
        if (i % 4 != 0 && i % 4 != 2) pool.deallocate(blocks[i], 8 * MiB);
    }
    pool.release();
    CHECK(pool.stitches() == 0);
    CHECK(memory.mapped_bytes() == 0);
}

TEST_CASE("at the most stitches a pool keeps, a free one whose pieces are all free stays for the next request of its size") {
    checked_memory memory{memory_options()};
    pool_type pool{memory, {.mapping_bytes = 8 * MiB, .stitch = true, .min_stitch_bytes = 0, .max_stitches = 2}};
    std::vector<void*> blocks;
    for (int i = 0; i < 12; ++i) blocks.push_back(pool.allocate(8 * MiB));  // an allocation of 8 MiB each
    for (int i : {8, 10}) pool.deallocate(blocks[i], 8 * MiB);
    void* usable = pool.allocate(16 * MiB);  // stitched from the two holes
    for (int i : {0, 2, 4}) pool.deallocate(blocks[i], 8 * MiB);
    pool.deallocate(usable, 16 * MiB);  // its pieces, freed last, are the newest in the cache
    void* taken = pool.allocate(24 * MiB);  // from the three older holes
    REQUIRE(pool.stitches() == 2);
    pool.deallocate(taken, 24 * MiB);
    std::vector<void*> fills;
    for (int i = 0; i < 3; ++i) fills.push_back(pool.allocate(8 * MiB));  // the lowest holes: the 24 MiB stitch's pieces
    CHECK(fills[0] == blocks[0]);

    // 32 MiB: the 16 MiB stitch's pieces and 16 MiB mapped for it. Room for it costs the stitch
    // whose pieces were taken (three aliases), not the one that could serve a request at once.
    const std::size_t unmaps = memory.unmap_calls();
    memory.begin();
    void* large = pool.allocate(32 * MiB);
    CHECK(pool.stitched_blocks() == 1);
    CHECK(pool.stitches() == 2);
    CHECK(memory.unmap_calls() == unmaps + 3);
    CHECK(memory.unsynchronized_unmaps == 0);
    pool.deallocate(large, 32 * MiB);
    const std::size_t maps = memory.map_calls();
    void* mapped_for_it = pool.allocate(16 * MiB);  // the memory mapped for the large one, free now
    void* again = pool.allocate(16 * MiB);
    CHECK(again == usable);  // kept, its pieces free again: no driver call
    CHECK(memory.map_calls() == maps);
    pool.check_invariants();
    memory.check_invariants();

    pool.deallocate(again, 16 * MiB);
    pool.deallocate(mapped_for_it, 16 * MiB);
    for (void* p : fills) pool.deallocate(p, 8 * MiB);
    for (int i : {1, 3, 5, 6, 7, 9, 11}) pool.deallocate(blocks[i], 8 * MiB);
    pool.release();
    CHECK(memory.mapped_bytes() == 0);
}

TEST_CASE("stitching leaves alone what it does not pay for: small requests, and growth where a placement maps little") {
    checked_memory memory{memory_options()};
    pool_type pool{memory, {.mapping_bytes = 8 * MiB, .stitch = true, .min_stitch_bytes = 0}};
    std::vector<void*> blocks;
    for (int i = 0; i < 60; ++i) blocks.push_back(pool.allocate(8 * MiB));  // an allocation of 8 MiB each
    for (int i : {0, 2}) pool.deallocate(blocks[i], 8 * MiB);
    void* first = pool.allocate(10 * MiB);  // fits no hole; the two holes cover it
    CHECK(pool.stitches() == 1);
    pool.deallocate(first, 10 * MiB);
    void* second = pool.allocate(12 * MiB);  // the free stitch, 16 MiB, is more than a quarter too large
    CHECK(second != first);
    CHECK(pool.stitches() == 2);
    pool.deallocate(second, 12 * MiB);
    // The holes taken again, then the last block freed: a 10 MiB request there maps one granule,
    // less than a quarter of it, and the only free whole allocation (the last) does not cover it.
    std::vector<void*> refills;
    for (int i = 0; i < 2; ++i) refills.push_back(pool.allocate(8 * MiB));
    pool.deallocate(blocks[59], 8 * MiB);
    std::size_t reserved = pool.reserved_bytes();
    void* near_end = pool.allocate(10 * MiB);
    CHECK(near_end == blocks[59]);
    CHECK(pool.stitched_blocks() == 0);
    CHECK(pool.reserved_bytes() == reserved + granule);
    for (void* p : refills) pool.deallocate(p, 8 * MiB);
    void* below = pool.allocate(6 * MiB);  // below one physical allocation: into a hole, never stitched
    CHECK(pool.stitched_blocks() == 0);
    CHECK(pool.reserved_bytes() == reserved + granule);
    pool.deallocate(below, 6 * MiB);
    pool.deallocate(near_end, 10 * MiB);
    pool.check_invariants();
    // Where free whole allocations cover such a request, they are stitched for it: nothing grows.
    reserved = pool.reserved_bytes();
    void* covered = pool.allocate(12 * MiB);  // the end's 10 MiB would map one granule more
    CHECK(pool.stitched_blocks() == 1);
    CHECK(pool.reserved_bytes() == reserved);
    pool.deallocate(covered, 12 * MiB);
    pool.check_invariants();
    for (int i = 0; i < 59; ++i) {
        if (i != 0 && i != 2) pool.deallocate(blocks[i], 8 * MiB);
    }
    pool.release();
    CHECK(memory.mapped_bytes() == 0);
}

TEST_CASE("requests below min_stitch_bytes never stitch, whatever holes would cover them") {
    checked_memory memory{memory_options()};
    REQUIRE(expandable_options{}.min_stitch_bytes == 32 * MiB);
    pool_type pool{memory, {.mapping_bytes = 8 * MiB, .stitch = true}};
    std::vector<void*> blocks;
    for (int i = 0; i < 16; ++i) blocks.push_back(pool.allocate(8 * MiB));  // an allocation of 8 MiB each
    for (int i : {0, 2, 4, 6, 8}) pool.deallocate(blocks[i], 8 * MiB);  // five holes, apart
    const std::size_t reserved = pool.reserved_bytes();
    void* below = pool.allocate(24 * MiB);  // three holes would cover it: mapped at the end instead
    CHECK(pool.stitched_blocks() == 0);
    CHECK(pool.reserved_bytes() == reserved + 24 * MiB);
    void* at_least = pool.allocate(32 * MiB);  // four holes cover it: stitched, nothing mapped
    CHECK(pool.stitched_blocks() == 1);
    CHECK(pool.reserved_bytes() == reserved + 24 * MiB);
    pool.check_invariants();
    pool.deallocate(at_least, 32 * MiB);
    pool.deallocate(below, 24 * MiB);
    for (int i : {1, 3, 5, 7, 9, 10, 11, 12, 13, 14, 15}) pool.deallocate(blocks[i], 8 * MiB);
    pool.release();
    CHECK(memory.mapped_bytes() == 0);
}

TEST_CASE("stitches where a placement maps little are bounded between mappings, the bound halving each time it is reached") {
    checked_memory memory{memory_options(std::size_t{4} << 30)};
    pool_type pool{memory, {.mapping_bytes = 16 * MiB, .stitch = true, .min_stitch_bytes = 0}};
    std::vector<std::pair<void*, std::size_t>> live;
    const auto take = [&](std::size_t bytes) {
        live.emplace_back(pool.allocate(bytes), bytes);
        return live.back().first;
    };
    std::vector<void*> holes;  // blocks of an allocation each, to be freed in turn
    const auto fresh_end = [&](std::size_t blocks) {
        holes.clear();
        for (std::size_t i = 0; i < blocks; ++i) holes.push_back(pool.allocate(16 * MiB));
        void* last = pool.allocate(16 * MiB);
        pool.deallocate(last, 16 * MiB);
        CHECK(take(2 * MiB) == last);  // 14 MiB mapped free after it, at the end
    };
    // An 18 MiB request fits no 16 MiB hole; at the end it maps 4 MiB, less than a quarter of it.
    // Two holes freed for it each time cover it: stitched, nothing mapped, until the bound.
    const auto stitch_until_mapped = [&] {
        std::size_t next = 0;
        for (int made = 0;; ++made) {
            REQUIRE(next + 2 < holes.size());
            pool.deallocate(holes[next], 16 * MiB);
            pool.deallocate(holes[next + 2], 16 * MiB);
            live.emplace_back(holes[next + 1], 16 * MiB);
            live.emplace_back(holes[next + 3], 16 * MiB);
            next += 4;
            const std::size_t reserved = pool.reserved_bytes();
            const std::size_t stitched = pool.stitched_blocks();
            take(18 * MiB);
            if (pool.reserved_bytes() != reserved) {
                CHECK(pool.stitched_blocks() == stitched);
                for (; next < holes.size(); ++next) live.emplace_back(holes[next], 16 * MiB);
                return made;
            }
            CHECK(pool.stitched_blocks() == stitched + 1);
        }
    };
    fresh_end(80);
    CHECK(stitch_until_mapped() == 16);
    fresh_end(48);
    CHECK(stitch_until_mapped() == 8);
    pool.check_invariants();
    for (const auto& [p, bytes] : live) pool.deallocate(p, bytes);
    pool.release();
    CHECK(memory.mapped_bytes() == 0);
}

namespace {
// checked_memory whose alias fails (the driver's refusal, a cuda_error) at the fail_at-th call.
class refusing_alias_memory : public checked_memory {
public:
    using checked_memory::checked_memory;
    void alias(void* at, const void* from, std::size_t bytes) {
        if (++calls_ == fail_at) throw cuda_error(1, "poolkit: test: cuMemMap refused");
        checked_memory::alias(at, from, bytes);
    }
    std::size_t fail_at = 0;

private:
    std::size_t calls_ = 0;
};

// Virtual memory that cannot alias: simulated_vmm_resource's interface without alias().
class plain_memory {
public:
    explicit plain_memory(simulated_vmm_resource& m) noexcept : m_(&m) {}
    [[nodiscard]] std::byte* base() const noexcept { return m_->base(); }
    [[nodiscard]] std::size_t capacity() const noexcept { return m_->capacity(); }
    [[nodiscard]] std::size_t granularity() const noexcept { return m_->granularity(); }
    void map(void* at, std::size_t bytes) { m_->map(at, bytes); }
    void map_whole(void* at, std::size_t bytes) { m_->map_whole(at, bytes); }
    void unmap(void* at, std::size_t bytes) noexcept { m_->unmap(at, bytes); }
    [[nodiscard]] bool is_mapped(const void* p) const { return m_->is_mapped(p); }
    [[nodiscard]] std::size_t mapped_bytes() const { return m_->mapped_bytes(); }
    [[nodiscard]] std::size_t peak_mapped_bytes() const { return m_->peak_mapped_bytes(); }
    [[nodiscard]] std::size_t map_calls() const { return m_->map_calls(); }
    [[nodiscard]] std::size_t unmap_calls() const { return m_->unmap_calls(); }
    [[nodiscard]] std::byte* claim(std::size_t bytes) { return m_->claim(bytes); }
    void unclaim(void* at, std::size_t bytes) noexcept { m_->unclaim(at, bytes); }
    void synchronize() noexcept {}

private:
    simulated_vmm_resource* m_;
};
static_assert(virtual_memory<plain_memory> && !aliasing_virtual_memory<plain_memory>);
}  // namespace

TEST_CASE("a stitch the driver refuses is undone, and the request maps as it would have") {
    refusing_alias_memory memory{memory_options()};
    memory.fail_at = 2;  // the second of three aliases
    expandable<ref<refusing_alias_memory>> pool{memory, {.mapping_bytes = 32 * MiB, .stitch = true}};
    std::vector<void*> blocks;
    for (int i = 0; i < 6; ++i) blocks.push_back(pool.allocate(32 * MiB));
    for (int i : {0, 2, 4}) pool.deallocate(blocks[i], 32 * MiB);
    memory.begin();
    void* large = pool.allocate(96 * MiB);
    CHECK(pool.stitches() == 0);
    CHECK(memory.aliases == 1);
    CHECK(memory.unmap_calls() == 1);  // the one alias made, unmapped
    CHECK(memory.mapped_bytes() == 288 * MiB);
    CHECK(pool.live_bytes() == 192 * MiB);
    pool.check_invariants();
    memory.check_invariants();
    pool.deallocate(large, 96 * MiB);
    for (int i : {1, 3, 5}) pool.deallocate(blocks[i], 32 * MiB);
    pool.release();
    CHECK(memory.mapped_bytes() == 0);
}

TEST_CASE("over memory that cannot alias the pool never stitches, and maps what a large request needs instead") {
    simulated_vmm_resource memory{memory_options()};
    expandable<plain_memory> pool{plain_memory{memory}, {}};  // stitch is on by default
    std::vector<void*> blocks;
    for (int i = 0; i < 6; ++i) blocks.push_back(pool.allocate(32 * MiB));
    for (int i : {0, 2, 4}) pool.deallocate(blocks[i], 32 * MiB);
    void* large = pool.allocate(96 * MiB);  // over aliasing memory, stitched from the three free allocations
    CHECK(pool.stitches() == 0);
    CHECK(memory.mapped_bytes() == 288 * MiB);
    pool.check_invariants();
    pool.deallocate(large, 96 * MiB);
    for (int i : {1, 3, 5}) pool.deallocate(blocks[i], 32 * MiB);
    pool.release();
    CHECK(memory.mapped_bytes() == 0);
}

#if POOLKIT_ENABLE_ASSERTS
TEST_CASE("a pool destroyed with a stitched block still live unmaps its aliases before the memory under them") {
    const auto outcome = test::run_in_child([] {
        simulated_vmm_resource memory{memory_options()};
        {
            expandable<ref<simulated_vmm_resource>> pool{memory, {.mapping_bytes = 32 * MiB, .stitch = true}};
            void* a = pool.allocate(32 * MiB);
            void* b = pool.allocate(32 * MiB);
            void* c = pool.allocate(32 * MiB);
            static_cast<void>(b);
            pool.deallocate(a, 32 * MiB);
            pool.deallocate(c, 32 * MiB);
            static_cast<void>(pool.allocate(64 * MiB));  // stitched, then leaked with b
        }
        memory.check_invariants();
        if (memory.mapped_bytes() != 0) std::abort();
    });
    CHECK(outcome.exited_cleanly());
    CHECK(outcome.said("expandable destroyed with 2 blocks"));
}
#endif

TEST_CASE("near the physical limit, mapping_bytes gives way to a physical allocation per granule") {
    checked_memory memory{memory_options()};  // 1 GiB: allocations of 4 MiB while 256 MiB or more is left
    pool_type pool{memory, {.span_bytes = std::size_t{1} << 30, .cache_fraction = 0, .peak_slack = 0, .mapping_bytes = 4 * MiB}};
    void* far = pool.allocate(600 * MiB);
    void* mid = pool.allocate(200 * MiB);  // 424 MiB left before it
    CHECK(memory.created_allocations() == 200);
    void* near = pool.allocate(20 * MiB);  // 224 MiB left: a granule each
    CHECK(memory.created_allocations() == 210);
    pool.deallocate(mid, 200 * MiB);
    pool.deallocate(near, 20 * MiB);
    memory.begin();
    pool.release();  // every granule that no live block holds goes back
    CHECK(memory.mapped_bytes() == 600 * MiB);
    pool.deallocate(far, 600 * MiB);
    pool.check_invariants();
}

TEST_CASE("max_cached_bytes bounds the cache at every free") {
    checked_memory memory{memory_options()};
    pool_type pool{memory, {.span_bytes = std::size_t{1} << 30, .max_cached_bytes = 8 * MiB}};
    std::vector<void*> blocks;
    for (int i = 0; i < 10; ++i) blocks.push_back(pool.allocate(10 * MiB));
    for (void* b : blocks) {
        memory.begin();
        pool.deallocate(b, 10 * MiB);
        CHECK(pool.cached_bytes() <= 8 * MiB);
    }
    CHECK(memory.unsynchronized_unmaps == 0);
    pool.check_invariants();
}

TEST_CASE("bad input: a bad alignment throws, a foreign or double free is caught in debug builds") {
    checked_memory memory{memory_options()};
    pool_type pool{memory, {.span_bytes = std::size_t{1} << 30}};
    CHECK_THROWS_AS(static_cast<void>(pool.allocate(100, 3)), std::invalid_argument);
    CHECK(pool.allocate(0) == nullptr);
    CHECK_THROWS_AS(static_cast<void>(pool.allocate(~std::size_t{0} - 10)), out_of_memory);
    CHECK_THROWS_AS((pool_type{memory, {.rounding = 4 * granule}}), std::invalid_argument);
#if POOLKIT_ENABLE_ASSERTS
    void* block = pool.allocate(1000);
    pool.deallocate(block, 1000);
    const auto twice = test::run_in_child([&] { pool.deallocate(block, 1000); });
    CHECK(twice.aborted());
    CHECK(twice.said("did not hand out"));
    int local = 0;
    const auto foreign = test::run_in_child([&] { pool.deallocate(&local, 4); });
    CHECK(foreign.aborted());
#endif
}

// Random traffic of small and large blocks, some aligned: after every step the structures hold,
// every live block is mapped, and mapped memory stays within the policy's bound.
TEST_CASE("random traffic keeps every live block mapped and mapped memory within the policy") {
    checked_memory memory{memory_options(std::size_t{4} << 30)};
    const double fraction = 0.02;
    std::size_t mapping = 0;
    double slack = 0;
    bool stitch = false;
    std::size_t min_stitch = 0;
    bool old_holes = false;
    const auto take_defaults = [&] {
        const expandable_options defaults;
        slack = defaults.peak_slack;
        mapping = defaults.mapping_bytes;
        stitch = defaults.stitch;
        min_stitch = defaults.min_stitch_bytes;
    };
    SUBCASE("following live memory, a physical allocation per granule") {}
    SUBCASE("following live memory, physical allocations of 8 MiB in large spans") { mapping = 8 * MiB; }
    SUBCASE("nothing unmapped for new mappings, 32 MiB allocations") {
        slack = std::numeric_limits<double>::infinity();
        mapping = 32 * MiB;
    }
    SUBCASE("the defaults: nothing unmapped for new mappings, 16 MiB allocations, stitching from 32 MiB") { take_defaults(); }
    SUBCASE("following live memory in 8 MiB allocations, stitching: trims give the free stitches up") {
        mapping = 8 * MiB;
        stitch = true;
    }
    SUBCASE("the defaults with small requests in old large holes (small_in_old_holes)") {
        take_defaults();
        old_holes = true;
    }
    pool_type pool{memory,
                   {.span_bytes = std::size_t{512} << 20,
                    .cache_fraction = fraction,
                    .peak_slack = slack,
                    .mapping_bytes = mapping,
                    .small_in_old_holes = old_holes,
                    .stitch = stitch,
                    .min_stitch_bytes = min_stitch}};
    std::mt19937_64 random(42);
    struct live_block {
        std::size_t bytes, alignment;
    };
    std::map<std::uintptr_t, std::size_t> live_bytes;
    std::map<std::uintptr_t, live_block> live;
    std::size_t mapped_over_bound = 0;
    for (int step = 0; step < 20000; ++step) {
        memory.begin();
        if (live.empty() || random() % 100 < 52) {
            const std::size_t bytes = random() % 4 == 0 ? 1 * MiB + random() % (48 * MiB) : 1 + random() % (512 * KiB);
            const std::size_t alignment = random() % 8 == 0 ? std::size_t{1} << (8 + random() % 16) : 256;
            const double peak_before = static_cast<double>(pool.peak_live_bytes());
            const std::size_t created_before = memory.created_allocations();
            void* pointer = nullptr;
            try {
                pointer = pool.allocate(bytes, alignment);
            } catch (const out_of_memory&) {
                continue;
            }
            const auto address = reinterpret_cast<std::uintptr_t>(pointer);
            REQUIRE(address % alignment == 0);
            live.emplace(address, live_block{bytes, alignment});
            live_bytes.emplace(address, bytes);
            // When this allocation mapped granules (a stitch's aliases map none), mapped memory is
            // within the policy's bound or all of it is pinned by live blocks (then there was no
            // cache left to unmap).
            if (memory.created_allocations() != created_before) {
                const double bound =
                    std::max(peak_before * (1 + pool.peak_slack()), static_cast<double>(pool.live_bytes()) * (1 + fraction));
                const double pinned = static_cast<double>(pool.reserved_bytes() - pool.cached_bytes());
                if (static_cast<double>(pool.reserved_bytes()) > std::max(bound, pinned) + granule) ++mapped_over_bound;
            }
        } else {
            auto victim = live.begin();
            std::advance(victim, static_cast<std::ptrdiff_t>(random() % live.size()));
            pool.deallocate(reinterpret_cast<void*>(victim->first), victim->second.bytes, victim->second.alignment);
            live_bytes.erase(victim->first);
            live.erase(victim);
        }
        if (step % 97 == 0) {
            pool.check_invariants();
            check_mapped(memory, live_bytes);
        }
        if (step % 2000 == 1999) pool.release();
    }
    CHECK(mapped_over_bound == 0);
    CHECK(memory.unsynchronized_unmaps == 0);
    if (stitch) CHECK(memory.aliases > 0);
    MESSAGE("map calls " << pool.map_calls() << ", unmap calls " << pool.unmap_calls() << ", peak mapped "
                         << pool.peak_reserved_bytes() / MiB << " MiB for peak live " << pool.peak_live_bytes() / MiB << " MiB");
    for (const auto& [address, block] : live) pool.deallocate(reinterpret_cast<void*>(address), block.bytes, block.alignment);
    pool.release();
    CHECK(memory.mapped_bytes() == 0);
    pool.check_invariants();
}

TEST_CASE("stream_ordered keeps count of what expandable lanes map while frees unmap") {
    checked_memory memory{memory_options()};
    host_events events;
    stream_ordered<ref<checked_memory>, lanes<expandable>, host_events> pool{
        ref<checked_memory>(memory), {.span_bytes = 256 * MiB, .cache_fraction = 0, .max_cached_bytes = 4 * MiB}, events};
    const stream_ref a = events.make_stream();
    std::vector<void*> blocks;
    for (int i = 0; i < 8; ++i) blocks.push_back(pool.allocate_async(8 * MiB, 256, a));
    const std::size_t mapped = pool.reserved_bytes();
    for (void* block : blocks) pool.deallocate_async(block, 8 * MiB, 256, a);
    CHECK(pool.reserved_bytes() < mapped);  // the frees unmapped past the cache bound
    pool.check_invariants();  // and stream_ordered's count followed them
    void* again = pool.allocate_async(8 * MiB, 256, a);
    pool.check_invariants();
    pool.deallocate_async(again, 8 * MiB, 256, a);
    pool.release();
    CHECK(memory.mapped_bytes() == 0);
}

TEST_CASE("streams of stream_ordered share one expandable pool, release unmaps all") {
    checked_memory memory{memory_options()};
    host_events events;
    stream_ordered<ref<checked_memory>, lanes<expandable>, host_events> pool{
        ref<checked_memory>(memory), {.span_bytes = 256 * MiB}, events};
    const stream_ref a = events.make_stream(), b = events.make_stream();
    memory.work_done = [&] { return events.completed(a) == events.issued(a) && events.completed(b) == events.issued(b); };
    void* on_a = pool.allocate_async(10 * MiB, 256, a);
    void* on_b = pool.allocate_async(10 * MiB, 256, b);
    CHECK(pool.streams() == 2);
    events.submit(a);  // work on `a` uses on_a
    pool.deallocate_async(on_a, 10 * MiB, 256, a);  // past the fronts' byte budget: covered at once
    CHECK(pool.waiting_blocks() == 1);
    void* taken = pool.allocate_async(10 * MiB, 256, b);  // a's block, with b waiting on a's event
    CHECK(taken == on_a);
    CHECK(events.wait_count() == 1);
    CHECK(events.synchronizations() == 0);
    events.submit(b);  // work on `b` uses both
    pool.deallocate_async(taken, 10 * MiB, 256, b);
    pool.deallocate_async(on_b, 10 * MiB, 256, b);
    memory.begin();
    pool.release();
    CHECK(memory.mapped_bytes() == 0);
    CHECK(memory.unsynchronized_unmaps == 0);
    pool.check_invariants();
}

TEST_CASE("under stream_ordered, stitches given up at the cap are unmapped only after the work that used them") {
    checked_memory memory{memory_options()};
    host_events events;
    stream_ordered<ref<checked_memory>, lanes<expandable>, host_events> pool{
        ref<checked_memory>(memory), {.mapping_bytes = 8 * MiB, .stitch = true, .min_stitch_bytes = 0, .max_stitches = 1}, events};
    const stream_ref a = events.make_stream();
    memory.work_done = [&] { return events.completed(a) == events.issued(a); };
    std::vector<void*> blocks;
    for (int i = 0; i < 12; ++i) blocks.push_back(pool.allocate_async(8 * MiB, 256, a));
    for (int i : {8, 10}) pool.deallocate_async(blocks[i], 8 * MiB, 256, a);
    void* stitched = pool.allocate_async(16 * MiB, 256, a);  // the one stitch a pool keeps here
    events.submit(a);  // work on `a` uses it
    pool.deallocate_async(stitched, 16 * MiB, 256, a);
    void* fill_low = pool.allocate_async(8 * MiB, 256, a);  // its pieces taken
    void* fill_high = pool.allocate_async(8 * MiB, 256, a);
    for (int i : {0, 2}) pool.deallocate_async(blocks[i], 8 * MiB, 256, a);
    REQUIRE(events.completed(a) < events.issued(a));
    memory.begin();
    void* next = pool.allocate_async(16 * MiB, 256, a);  // room made: the old stitch's aliases go
    CHECK(memory.unmap_calls() == 2);
    CHECK(memory.unsynchronized_unmaps == 0);  // the host waited for `a`'s work first
    pool.check_invariants();
    for (void* p : {next, fill_low, fill_high}) pool.deallocate_async(p, p == next ? 16 * MiB : 8 * MiB, 256, a);
    for (int i : {1, 3, 4, 5, 6, 7, 9, 11}) pool.deallocate_async(blocks[i], 8 * MiB, 256, a);
    pool.release();
    CHECK(memory.mapped_bytes() == 0);
}

TEST_CASE("expandable_options::validate refuses what the pool cannot use, naming the option") {
    const auto refused = [](expandable_options options) {
        try {
            options.validate(granule);
        } catch (const std::invalid_argument& error) {
            return std::string(error.what());
        }
        return std::string();
    };
    CHECK(refused({}).empty());
    CHECK(refused({.rounding = 3}).find("rounding") != std::string::npos);
    CHECK(refused({.rounding = 2 * granule}).find("rounding") != std::string::npos);
    CHECK(refused({.cache_fraction = std::numeric_limits<double>::infinity()}).find("cache_fraction") != std::string::npos);
    CHECK(refused({.peak_slack = std::numeric_limits<double>::quiet_NaN()}).find("peak_slack") != std::string::npos);
    CHECK(refused({.max_peak_slack = -1}).find("max_peak_slack") != std::string::npos);
    CHECK(refused({.mapping_bytes = 3 * MiB}).find("mapping_bytes") != std::string::npos);
    CHECK(refused({.max_stitches = 0}).find("max_stitches") != std::string::npos);
    CHECK(refused({.span_bytes = ~std::size_t{0}}).find("span_bytes") != std::string::npos);
    CHECK(refused({.min_stitch_bytes = ~std::size_t{0}}).find("min_stitch_bytes") != std::string::npos);
    // The constructor applies the same rules: inf no longer maps gigabytes for a little live memory.
    simulated_vmm_resource memory{{.capacity = 64 * MiB, .granularity = granule}};
    CHECK_THROWS_AS(expandable<ref<simulated_vmm_resource>>(ref<simulated_vmm_resource>{memory},
                                                            expandable_options{.cache_fraction = std::numeric_limits<double>::infinity()}),
                    std::invalid_argument);
}
