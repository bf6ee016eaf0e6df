// When the host is out of memory for a block's own records: every block taken from an upstream
// goes back, the failure propagates as std::bad_alloc, and the block stays consistent.
//
// Host allocations fail on demand through the test binary's operator new (support/host_faults.hpp).
#include "../support/host_faults.hpp"
#include "../support/sizes.hpp"

#include <poolkit/adaptor/limited.hpp>
#include <poolkit/adaptor/tracked.hpp>
#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/fixed_size.hpp>
#include <poolkit/strategy/monotonic.hpp>
#include <poolkit/strategy/size_classes.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdlib>
#include <new>
#include <vector>

namespace {

using namespace poolkit;

// The next host allocation of this thread throws std::bad_alloc (once).
void fail_next_host_allocation() { test::fail_host_allocation_after(0); }
using test::stop_failing_host_allocations;

// An upstream that counts its live blocks and takes nothing from operator new.
class counting_upstream {
public:
    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        if (bytes == 0) return nullptr;
        void* pointer = std::aligned_alloc(alignment, align_up(bytes, alignment));
        if (pointer == nullptr) throw std::bad_alloc();
        ++live_blocks_;
        return pointer;
    }
    void deallocate(void* pointer, std::size_t, std::size_t = default_alignment) noexcept {
        if (pointer == nullptr) return;
        --live_blocks_;
        std::free(pointer);
    }
    [[nodiscard]] long live_blocks() const noexcept { return live_blocks_; }
    friend bool operator==(const counting_upstream& a, const counting_upstream& b) noexcept { return &a == &b; }

private:
    long live_blocks_ = 0;
};

using poolkit::test::MiB;

// Calls `allocate` with the next host allocation failing; whether it threw std::bad_alloc.
template <class Allocate>
bool throws_bad_alloc_when_the_host_is_out(Allocate&& allocate) {
    bool threw = false;
    fail_next_host_allocation();
    try {
        static_cast<void>(allocate());
    } catch (const std::bad_alloc&) {
        threw = true;
    }
    stop_failing_host_allocations();
    return threw;
}

}  // namespace

TEST_CASE("tracked: a block whose record cannot be made goes back to the upstream") {
    counting_upstream upstream;
    SUBCASE("the record itself") {
        // Records take no host memory of their own until the table grows: the block whose record
        // needs it to grow is the one that goes back.
        tracked<ref<counting_upstream>> tracker{upstream};
        std::vector<void*> kept;
        kept.reserve(1000);  // no host allocation of the test's own while the host is out
        bool threw = false;
        while (!threw && kept.size() < 1000) {
            threw = throws_bad_alloc_when_the_host_is_out([&] {
                kept.push_back(tracker.allocate(1000));
                return kept.back();
            });
        }
        REQUIRE(threw);
        CHECK_FALSE(kept.empty());
        CHECK(upstream.live_blocks() == kept.size());
        CHECK(tracker.live_blocks() == kept.size());
        CHECK(tracker.live_bytes() == 1000 * kept.size());
        void* pointer = tracker.allocate(1000);
        CHECK(upstream.live_blocks() == kept.size() + 1);
        tracker.deallocate(pointer, 1000);
        for (void* p : kept) tracker.deallocate(p, 1000);
    }
    SUBCASE("its backtrace") {
        tracked<ref<counting_upstream>> tracker{upstream, {.capture_backtraces = true}};
        CHECK(throws_bad_alloc_when_the_host_is_out([&] { return tracker.allocate(1000); }));
        CHECK(upstream.live_blocks() == 0);
        CHECK(tracker.live_blocks() == 0);
    }
    tracked<ref<counting_upstream>> tracker{upstream};
    tracker.check_invariants();
    CHECK(upstream.live_blocks() == 0);
}

TEST_CASE("monotonic: a block whose record cannot be made is not handed out, and nothing changes") {
    counting_upstream upstream;
    monotonic<ref<counting_upstream>> arena{upstream};
    void* first = arena.allocate(100);  // the chunk and room for one record
    CHECK(throws_bad_alloc_when_the_host_is_out([&] { return arena.allocate(100); }));
    arena.check_invariants();
    CHECK(arena.live_bytes() == 100);
    void* second = arena.allocate(100);
    CHECK(second == static_cast<char*>(first) + 256);
    arena.deallocate(second, 100);
    arena.deallocate(first, 100);
    arena.check_invariants();
    CHECK(arena.live_bytes() == 0);
    arena.release();
    CHECK(upstream.live_blocks() == 0);
}

#if POOLKIT_ENABLE_ASSERTS
// Only builds with assertions keep a record per block passed on to the upstream or made through
// limited<>; without assertions there is nothing to fail.
TEST_CASE("size_classes: a large block whose record cannot be made goes back to the upstream") {
    counting_upstream upstream;
    size_classes<ref<counting_upstream>> pool{upstream};
    CHECK(throws_bad_alloc_when_the_host_is_out([&] { return pool.allocate(2 * MiB); }));
    CHECK(upstream.live_blocks() == 0);
    void* pointer = pool.allocate(2 * MiB);
    CHECK(upstream.live_blocks() == 1);
    pool.deallocate(pointer, 2 * MiB);
    CHECK(upstream.live_blocks() == 0);
}

TEST_CASE("fixed_size: a block passed on whose record cannot be made goes back to the upstream") {
    counting_upstream upstream;
    fixed_size<ref<counting_upstream>> pool{upstream};
    CHECK(throws_bad_alloc_when_the_host_is_out([&] { return pool.allocate(1000); }));
    CHECK(upstream.live_blocks() == 0);
    void* pointer = pool.allocate(1000);
    CHECK(upstream.live_blocks() == 1);
    pool.deallocate(pointer, 1000);
    CHECK(upstream.live_blocks() == 0);
}

TEST_CASE("limited: a block whose record cannot be made goes back, and so do its bytes") {
    counting_upstream upstream;
    limited<ref<counting_upstream>> capped{upstream, {.limit_bytes = 4000}};
    CHECK(throws_bad_alloc_when_the_host_is_out([&] { return capped.allocate(4000); }));
    CHECK(upstream.live_blocks() == 0);
    CHECK(capped.live_bytes() == 0);
    void* pointer = capped.allocate(4000);
    CHECK(capped.live_bytes() == 4000);
    capped.deallocate(pointer, 4000);
    CHECK(capped.live_bytes() == 0);
    CHECK(upstream.live_blocks() == 0);
}
#endif
