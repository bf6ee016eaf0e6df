// CUDA graphs over simulated streams: stream_ordered serves a stream in capture from a graph pool,
// makes no call a capture forbids (host_events throws on each, as CUDA would break the capture),
// and never hands a graph's memory to work outside the captures into its pool until released.
#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/per_thread.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/adaptor/synchronized.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/observe/fragmentation.hpp>
#include <poolkit/observe/memory_summary.hpp>
#include <poolkit/observe/snapshot.hpp>
#include <poolkit/presets.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_vmm_resource.hpp>

#include "../support/sizes.hpp"
#include "../support/spans.hpp"

#include <doctest/doctest.h>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <random>
#include <thread>
#include <utility>
#include <vector>

using namespace poolkit;
using poolkit::test::overlaps;
using poolkit::test::span;
using poolkit::test::span_of;

namespace {

using poolkit::test::GiB;
using poolkit::test::KiB;
using poolkit::test::MiB;

// An upstream whose calls are what a capture sees of cudaMalloc and cudaFree: a potentially unsafe
// call, and one that synchronizes the device. It holds at most `limit` bytes at once.
class capture_checked_upstream {
public:
    capture_checked_upstream(new_delete_resource& memory, host_events events) : memory_(&memory), events_(std::move(events)) {}
    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        events_.unsafe_call("cudaMalloc");
        if (bytes > limit - held_) throw out_of_memory("capture_checked_upstream", memory_figures::request(bytes, alignment));
        ++allocations_;
        void* pointer = memory_->allocate(bytes, alignment);
        held_ += bytes;
        return pointer;
    }
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        try {
            events_.synchronizing_call("cudaFree");
        } catch (const capture_error&) {  // counted by events.capture_errors()
        }
        held_ -= bytes;
        memory_->deallocate(pointer, bytes, alignment);
    }
    [[nodiscard]] std::size_t allocations() const noexcept { return allocations_; }
    [[nodiscard]] std::size_t held() const noexcept { return held_; }
    std::size_t limit = SIZE_MAX;
    friend bool operator==(const capture_checked_upstream& a, const capture_checked_upstream& b) noexcept { return &a == &b; }

private:
    new_delete_resource* memory_;
    host_events events_;
    std::size_t allocations_ = 0;
    std::size_t held_ = 0;
};

// Virtual memory whose calls are what a capture sees of CUDA's: mapping (cuMemCreate, cuMemMap,
// cuMemSetAccess) and unmapping are potentially unsafe calls, and the wait before an unmap
// (cudaDeviceSynchronize) and a block's deallocate synchronize the device.
class capture_checked_vmm : public simulated_vmm_resource {
public:
    explicit capture_checked_vmm(host_events events)
        : simulated_vmm_resource(simulated_vmm_options{.capacity = 16 * GiB, .granularity = 2 * MiB}), events_(std::move(events)) {}
    void map(void* at, std::size_t bytes) {
        events_.unsafe_call("cuMemMap");
        simulated_vmm_resource::map(at, bytes);
    }
    void map_whole(void* at, std::size_t bytes) {
        events_.unsafe_call("cuMemMap");
        simulated_vmm_resource::map_whole(at, bytes);
    }
    void unmap(void* at, std::size_t bytes) noexcept {
        checked([&] { events_.unsafe_call("cuMemUnmap"); });
        simulated_vmm_resource::unmap(at, bytes);
    }
    void synchronize() noexcept {
        checked([&] { events_.synchronizing_call("cudaDeviceSynchronize"); });
    }
    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        events_.unsafe_call("cuMemCreate");
        return simulated_vmm_resource::allocate(bytes, alignment);
    }
    void* try_allocate(std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        bool allowed = false;
        checked([&] {
            events_.unsafe_call("cuMemCreate");
            allowed = true;
        });
        return allowed ? simulated_vmm_resource::try_allocate(bytes, alignment) : nullptr;
    }
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        checked([&] { events_.synchronizing_call("cudaDeviceSynchronize"); });
        simulated_vmm_resource::deallocate(pointer, bytes, alignment);
    }
    friend bool operator==(const capture_checked_vmm& a, const capture_checked_vmm& b) noexcept { return &a == &b; }

private:
    template <class F>
    static void checked(F&& call) noexcept {
        try {
            call();
        } catch (const capture_error&) {  // counted by events.capture_errors()
        }
    }
    host_events events_;
};

using checked_pool = stream_ordered<ref<capture_checked_upstream>, lanes<best_fit>, host_events>;
using checked_caching = caching_resource<ref<capture_checked_upstream>, host_events>;
using checked_expandable = expandable_resource<ref<capture_checked_vmm>, host_events>;

struct graph_fixture {
    new_delete_resource memory;
    host_events events;
    capture_checked_upstream upstream{memory, events};
    capture_checked_vmm vmm{events};
    stream_ref eager = events.make_stream(), capturing = events.make_stream();
};

// A pool of type Pool over the fixture's upstream (its virtual memory for the expandable preset).
template <class Pool>
std::unique_ptr<Pool> make_checked(graph_fixture& f) {
    if constexpr (std::same_as<Pool, checked_expandable>) {
        return std::make_unique<Pool>(ref(f.vmm), expandable_options{}, f.events);
    } else {
        return std::make_unique<Pool>(ref(f.upstream), typename Pool::pool_options{}, f.events);
    }
}

template <class Pool>
void release_graph_pool(Pool& pool, std::uint64_t id) {
    pool.release_graph_pool(id);
}
template <class Pool>
void release_graph_pool(synchronized<Pool>& pool, std::uint64_t id) {
    pool.locked([&](Pool& p) { p.release_graph_pool(id); });
}

}  // namespace

TEST_CASE_TEMPLATE("a capture is served from a graph pool with no forbidden call, in every capture mode", Pool, checked_pool,
                   checked_caching, checked_expandable) {
    graph_fixture f;
    const auto made = make_checked<Pool>(f);
    Pool& pool = *made;
    // A warm shared pool, with blocks freed on the eager stream.
    std::vector<void*> warm;
    for (int i = 0; i < 8; ++i) warm.push_back(pool.allocate_async(256 * KiB, 256, f.eager));
    for (void* p : warm) pool.deallocate_async(p, 256 * KiB, 256, f.eager);
    f.events.submit(f.eager);
    for (const capture_mode mode : {capture_mode::global, capture_mode::local, capture_mode::relaxed}) {
        CAPTURE(static_cast<int>(mode));
        const std::uint64_t id = f.events.begin_capture(f.capturing, mode);
        CHECK(pool.graph_pool_of(f.capturing) == id);
        std::vector<span> graph;
        void* a = pool.allocate_async(1 * MiB, 256, f.capturing);
        f.events.submit(f.capturing);  // a kernel that uses it
        pool.deallocate_async(a, 1 * MiB, 256, f.capturing);
        void* again = pool.allocate_async(1 * MiB, 256, f.capturing);
        CHECK(again == a);  // reused in stream order, which is the graph's order
        void* larger = pool.allocate_async(8 * MiB, 256, f.capturing);  // growth, in relaxed mode
        f.events.submit(f.capturing);
        graph.push_back(span_of(again, 1 * MiB));
        graph.push_back(span_of(larger, 8 * MiB));
        pool.deallocate_async(larger, 8 * MiB, 256, f.capturing);
        pool.deallocate_async(again, 1 * MiB, 256, f.capturing);
        const auto captured = f.events.end_capture(f.capturing);
        REQUIRE(captured.valid);
        CHECK(f.events.capture_errors() == 0);
        CHECK(pool.graph_pools() == 1);
        for (void* w : warm) CHECK_FALSE(overlaps(w, 256 * KiB, graph));  // the graph's memory is not the shared pool's
        // Launches interleaved with eager work: no eager block is ever a graph's.
        std::mt19937_64 random(7);
        std::vector<std::pair<void*, std::size_t>> live;
        for (int launch = 0; launch < 1000; ++launch) {
            f.events.launch(captured, f.capturing);
            const std::size_t bytes = (1 + random() % 64) * 64 * KiB;
            void* p = pool.allocate_async(bytes, 256, f.eager);
            CHECK_FALSE(overlaps(p, bytes, graph));
            live.emplace_back(p, bytes);
            if (live.size() > 16) {
                pool.deallocate_async(live.front().first, live.front().second, 256, f.eager);
                live.erase(live.begin());
            }
            if (launch % 100 == 0) f.events.complete_all();
        }
        for (auto [p, bytes] : live) pool.deallocate_async(p, bytes, 256, f.eager);
        pool.release_graph_pool(id);
        CHECK(pool.graph_pools() == 0);
        pool.check_invariants();
    }
    CHECK(f.events.capture_errors() == 0);
}

TEST_CASE_TEMPLATE("exhaustion in a capture: out_of_memory with figures, the capture still valid, nothing leaked", Pool, checked_pool,
                   checked_caching) {
    graph_fixture f;
    f.upstream.limit = 64 * MiB;
    {
        const auto made = make_checked<Pool>(f);
        Pool& pool = *made;
        void* eager = pool.allocate_async(16 * MiB, 256, f.eager);
        const std::uint64_t id = f.events.begin_capture(f.capturing, capture_mode::global);
        void* a = pool.allocate_async(8 * MiB, 256, f.capturing);
        try {
            static_cast<void>(pool.allocate_async(128 * MiB, 256, f.capturing));
            FAIL("no out_of_memory");
        } catch (const out_of_memory& error) {
            CHECK(error.requested_bytes() >= 128 * MiB);
            CHECK(std::string(error.what()).find("out of memory") != std::string::npos);
        }
        void* b = pool.allocate_async(8 * MiB, 256, f.capturing);  // the capture goes on
        pool.deallocate_async(b, 8 * MiB, 256, f.capturing);
        pool.deallocate_async(a, 8 * MiB, 256, f.capturing);
        CHECK(f.events.end_capture(f.capturing).valid);
        CHECK(f.events.capture_errors() == 0);
        pool.deallocate_async(eager, 16 * MiB, 256, f.eager);
        f.events.complete_all();
        pool.release_graph_pool(id);
        pool.release();
        pool.check_invariants();
        CHECK(f.upstream.held() == 0);  // the graph pool's memory and the shared pool's went back
    }
    CHECK(f.upstream.held() == 0);
}

TEST_CASE("a capture over two streams: a block freed on the other stream is reused behind an edge of the graph") {
    graph_fixture f;
    checked_pool pool{ref(f.upstream), {}, f.events};
    const stream_ref side = f.events.make_stream();
    f.events.begin_capture(f.capturing, capture_mode::global);
    f.events.wait(side, f.events.record(f.capturing));  // fork: side joins the capture
    void* a = pool.allocate_async(1 * MiB, 256, f.capturing);
    f.events.wait(side, f.events.record(f.capturing));
    f.events.submit(side);  // side uses a
    pool.deallocate_async(a, 1 * MiB, 256, side);  // freed on the other stream, in the capture
    const std::size_t waits = f.events.wait_count();
    void* b = pool.allocate_async(1 * MiB, 256, f.capturing);
    CHECK(b == a);  // after capturing waited on side's event: an edge, not a wait on the timeline
    CHECK(f.events.wait_count() == waits);
    void* c = pool.allocate_async(1 * MiB, 256, side);
    CHECK(c != a);  // side's own pool: never the block capturing uses
    pool.deallocate_async(c, 1 * MiB, 256, side);
    pool.deallocate_async(b, 1 * MiB, 256, f.capturing);
    f.events.wait(f.capturing, f.events.record(side));  // join
    const auto captured = f.events.end_capture(f.capturing);
    CHECK(captured.valid);
    CHECK(f.events.capture_errors() == 0);
    pool.release_graph_pool(captured.id);
    pool.check_invariants();
}

TEST_CASE("a block of the shared pool freed in a capture stays the graph's until its pool is released") {
    graph_fixture f;
    checked_pool pool{ref(f.upstream), {}, f.events};
    void* input = pool.allocate_async(2 * MiB, 256, f.eager);
    f.events.complete_all();
    const std::uint64_t id = f.events.begin_capture(f.capturing);
    f.events.submit(f.capturing);  // the graph reads `input`
    pool.deallocate_async(input, 2 * MiB, 256, f.capturing);
    CHECK(f.events.end_capture(f.capturing).valid);
    CHECK(pool.live_blocks() == 0);
    std::vector<void*> eager;
    for (int i = 0; i < 4; ++i) {
        eager.push_back(pool.allocate_async(2 * MiB, 256, f.eager));
        CHECK(eager.back() != input);
    }
    for (void* p : eager) pool.deallocate_async(p, 2 * MiB, 256, f.eager);
    pool.release_graph_pool(id);
    f.events.complete_all();
    bool reused = false;
    eager.clear();
    for (int i = 0; i < 6; ++i) {
        eager.push_back(pool.allocate_async(2 * MiB, 256, f.eager));
        reused = reused || eager.back() == input;
    }
    CHECK(reused);  // back in the shared pool
    for (void* p : eager) pool.deallocate_async(p, 2 * MiB, 256, f.eager);
    pool.check_invariants();
    CHECK(f.events.capture_errors() == 0);
}

TEST_CASE("graphs share a pool: a later capture into it reuses what an earlier one freed, eager frees included") {
    graph_fixture f;
    checked_pool pool{ref(f.upstream), {}, f.events};
    CHECK_THROWS_AS(pool.capture_into(f.capturing, 42), std::logic_error);  // not in capture
    const std::uint64_t first = f.events.begin_capture(f.capturing);
    pool.capture_into(f.capturing, 42);
    CHECK(pool.graph_pool_of(f.capturing) == 42);
    void* output = pool.allocate_async(4 * MiB, 256, f.capturing);  // outlives the capture
    CHECK(f.events.end_capture(f.capturing).valid);
    CHECK(first != 0);
    // Freed eagerly once read: it goes back to pool 42, never to eager work.
    pool.deallocate_async(output, 4 * MiB, 256, f.eager);
    CHECK(pool.graph_blocks() == 0);
    void* eager = pool.allocate_async(4 * MiB, 256, f.eager);
    CHECK(eager != output);
    pool.deallocate_async(eager, 4 * MiB, 256, f.eager);
    const std::size_t upstream_calls = f.upstream.allocations();
    f.events.begin_capture(f.capturing);
    pool.capture_into(f.capturing, 42);
    void* again = pool.allocate_async(4 * MiB, 256, f.capturing);
    CHECK(again == output);
    CHECK(f.upstream.allocations() == upstream_calls);  // no growth
    pool.deallocate_async(again, 4 * MiB, 256, f.capturing);
    CHECK(f.events.end_capture(f.capturing).valid);
    CHECK(pool.graph_pools() == 1);
    pool.release_graph_pool(42);
    CHECK(pool.graph_pools() == 0);
    pool.check_invariants();
    CHECK(f.events.capture_errors() == 0);
}

TEST_CASE("a graph block freed in a capture into another pool is not reused before its own pool's release") {
    graph_fixture f;
    checked_pool pool{ref(f.upstream), {}, f.events};
    const std::uint64_t first = f.events.begin_capture(f.capturing);
    void* output = pool.allocate_async(1 * MiB, 256, f.capturing);
    CHECK(f.events.end_capture(f.capturing).valid);
    const stream_ref other = f.events.make_stream();
    const std::uint64_t second = f.events.begin_capture(other);  // a graph of its own pool reads it last
    f.events.submit(other);
    pool.deallocate_async(output, 1 * MiB, 256, other);
    CHECK(f.events.end_capture(other).valid);
    f.events.begin_capture(f.capturing);
    pool.capture_into(f.capturing, first);
    void* next = pool.allocate_async(1 * MiB, 256, f.capturing);
    CHECK(next != output);  // the second graph may run beside this one
    pool.deallocate_async(next, 1 * MiB, 256, f.capturing);
    CHECK(f.events.end_capture(f.capturing).valid);
    pool.release_graph_pool(second);
    pool.release_graph_pool(first);
    CHECK(pool.graph_pools() == 0);
    CHECK(pool.graph_blocks() == 0);
    pool.check_invariants();
    CHECK(f.events.capture_errors() == 0);
}

namespace {

// A capture on this thread while another thread works eagerly through the same pool.
template <class Pool>
void eager_beside_capture(graph_fixture& f, Pool& pool) {
    const stream_ref second = f.events.make_stream();
    const std::uint64_t id = f.events.begin_capture(f.capturing, capture_mode::global);
    void* captured = pool.allocate_async(1 * MiB, 256, f.capturing);  // the pool now knows of the capture
    std::thread eager([&] {
        // Frees mostly on the other stream, work that lags, growth: event records, queries, waits
        // and cudaMalloc, each of which the capture forbids this thread unless it is relaxed.
        std::mt19937_64 random(3);
        std::vector<std::pair<void*, std::size_t>> live;
        for (int i = 0; i < 2000; ++i) {
            const stream_ref on = i % 2 == 0 ? f.eager : second;
            if (live.size() < 32 || random() % 2 == 0) {
                const std::size_t bytes = (1 + random() % 512) * 4 * KiB;
                live.emplace_back(pool.allocate_async(bytes, 256, on), bytes);
            } else {
                const std::size_t index = random() % live.size();
                pool.deallocate_async(live[index].first, live[index].second, 256, on);
                live[index] = live.back();
                live.pop_back();
            }
            f.events.submit(on);
            if (i % 50 == 0) f.events.complete(i % 100 == 0 ? f.eager : second);
        }
        for (auto [p, bytes] : live) pool.deallocate_async(p, bytes, 256, f.eager);
    });
    eager.join();
    pool.deallocate_async(captured, 1 * MiB, 256, f.capturing);
    CHECK(f.events.end_capture(f.capturing).valid);
    CHECK(f.events.capture_errors() == 0);
    // A call on the stream that captured shows the capture ended: what was held goes back.
    void* after = pool.allocate_async(4 * KiB, 256, f.capturing);
    pool.deallocate_async(after, 4 * KiB, 256, f.capturing);
    f.events.complete_all();
    release_graph_pool(pool, id);
    pool.release();
    pool.check_invariants();
    CHECK(f.events.capture_errors() == 0);
}

}  // namespace

TEST_CASE_TEMPLATE("eager work on another thread during a global-mode capture the pool serves breaks nothing", Pool, checked_pool,
                   checked_caching, checked_expandable) {
    graph_fixture f;
    eager_beside_capture(f, *make_checked<Pool>(f));
}

// PyTorch's pattern: a capture's first calls free blocks made before it on other streams
// (zero_grad), before the pool has seen the capture. Those eager frees, small and large, their
// streams idle or busy, and eager requests the pool can serve, make no call the capture forbids.
TEST_CASE_TEMPLATE("eager calls at a global-mode capture's start, before the pool saw it, break nothing", Pool, checked_pool,
                   checked_caching, checked_expandable) {
    graph_fixture f;
    const auto made = make_checked<Pool>(f);
    Pool& pool = *made;
    const stream_ref side = f.events.make_stream();
    for (const bool busy : {false, true}) {
        CAPTURE(busy);
        std::vector<std::pair<void*, std::size_t>> before;
        for (int i = 0; i < 24; ++i) {
            const std::size_t bytes = (i % 3 == 0 ? 4 * MiB : 96 * KiB) + static_cast<std::size_t>(i) * KiB;
            before.emplace_back(pool.allocate_async(bytes, 256, i % 2 == 0 ? side : f.eager), bytes);
        }
        f.events.submit(side);
        f.events.submit(f.eager);
        if (!busy) f.events.complete_all();
        const std::uint64_t id = f.events.begin_capture(f.capturing, capture_mode::global);
        for (std::size_t i = 0; i < before.size(); ++i) {
            pool.deallocate_async(before[i].first, before[i].second, 256, i % 2 == 0 ? side : f.eager);
            if (i % 4 == 3) pool.deallocate_async(pool.allocate_async(64 * KiB, 256, f.eager), 64 * KiB, 256, f.eager);
        }
        void* captured = pool.allocate_async(1 * MiB, 256, f.capturing);
        f.events.submit(f.capturing);
        pool.deallocate_async(captured, 1 * MiB, 256, f.capturing);
        CHECK(f.events.end_capture(f.capturing).valid);
        CHECK(f.events.capture_errors() == 0);
        pool.deallocate_async(pool.allocate_async(4 * KiB, 256, f.capturing), 4 * KiB, 256, f.capturing);  // sees the capture ended
        f.events.complete_all();
        release_graph_pool(pool, id);
        pool.check_invariants();
    }
    CHECK(f.events.capture_errors() == 0);
}

TEST_CASE("the synchronized caching preset: a capture on one thread, eager work on another") {
    graph_fixture f;
    synchronized<checked_caching> pool{std::in_place, ref(f.upstream), caching_options{}, f.events};
    eager_beside_capture(f, pool);
}

TEST_CASE("expandable: while a capture may run, granules that only a wait for the whole device would free stay mapped") {
    graph_fixture f;
    const auto made = make_checked<checked_expandable>(f);
    checked_expandable& pool = *made;
    const std::uint64_t id = f.events.begin_capture(f.capturing, capture_mode::global);
    void* captured = pool.allocate_async(1 * MiB, 256, f.capturing);
    void* eager = pool.allocate_async(64 * MiB, 256, f.eager);  // the eager stream is the pool's home
    f.events.submit(f.eager);
    pool.deallocate_async(eager, 64 * MiB, 256, f.eager);  // into the pool, its work not done
    const std::size_t mapped = f.vmm.mapped_bytes();
    pool.release();  // a plain call: no event covers the home's free, and the device may not be waited for
    CHECK(f.vmm.mapped_bytes() == mapped);
    CHECK(f.events.capture_errors() == 0);
    pool.deallocate_async(captured, 1 * MiB, 256, f.capturing);
    REQUIRE(f.events.end_capture(f.capturing).valid);
    pool.deallocate_async(pool.allocate_async(4 * KiB, 256, f.capturing), 4 * KiB, 256, f.capturing);  // sees the capture ended
    pool.release_graph_pool(id);
    pool.release();
    CHECK(f.vmm.mapped_bytes() < mapped);
    pool.check_invariants();
    CHECK(f.events.capture_errors() == 0);
}

TEST_CASE("a block recorded as used by a capturing stream stays the graph's when freed during the capture") {
    graph_fixture f;
    checked_pool pool{ref(f.upstream), {}, f.events};
    void* input = pool.allocate_async(1 * MiB, 256, f.eager);
    const std::uint64_t id = f.events.begin_capture(f.capturing);
    void* scratch = pool.allocate_async(4 * KiB, 256, f.capturing);  // the pool learns of the capture
    pool.record_use(input, f.capturing);  // the graph reads it (PyTorch's record_stream)
    f.events.submit(f.capturing);
    pool.deallocate_async(input, 1 * MiB, 256, f.eager);  // no captured event may wait among the eager ones
    void* eager = pool.allocate_async(1 * MiB, 256, f.eager);
    CHECK(eager != input);
    CHECK_THROWS_AS(pool.forget_stream(f.capturing), std::logic_error);
    pool.deallocate_async(scratch, 4 * KiB, 256, f.capturing);
    CHECK(f.events.end_capture(f.capturing).valid);
    pool.deallocate_async(eager, 1 * MiB, 256, f.eager);
    pool.release_graph_pool(id);
    pool.check_invariants();
    CHECK(f.events.capture_errors() == 0);
}

TEST_CASE("per_thread: a capturing stream bypasses the thread caches, and graph blocks never enter them") {
    graph_fixture f;
    per_thread<synchronized<checked_caching>, host_events> pool{std::in_place,   per_thread_options{}, f.events,
                                                                ref(f.upstream), caching_options{},    f.events};
    // Warm caches: small blocks freed on the eager stream and on the stream about to capture.
    for (stream_ref s : {f.eager, f.capturing}) {
        void* p = pool.allocate_async(4 * KiB, 256, s);
        pool.deallocate_async(p, 4 * KiB, 256, s);
    }
    f.events.submit(f.eager), f.events.submit(f.capturing);
    const std::size_t cached = pool.cached_bytes();
    REQUIRE(cached > 0);

    const std::uint64_t id = f.events.begin_capture(f.capturing, capture_mode::global);
    std::vector<span> graph;
    void* a = pool.allocate_async(4 * KiB, 256, f.capturing);  // not the cached block of its stream
    graph.push_back(span_of(a, 4 * KiB));
    CHECK(pool.cached_bytes() == cached);
    pool.deallocate_async(a, 4 * KiB, 256, f.capturing);  // back to the graph pool, not a cache
    CHECK(pool.cached_bytes() == cached);
    void* b = pool.allocate_async(4 * KiB, 256, f.capturing);
    void* large = pool.allocate_async(8 * MiB, 256, f.capturing);  // past max_size: straight through
    graph.push_back(span_of(b, 4 * KiB));
    graph.push_back(span_of(large, 8 * MiB));
    void* during = pool.allocate_async(4 * KiB, 256, f.eager);  // an eager hit meanwhile
    CHECK_FALSE(overlaps(during, 4 * KiB, graph));
    pool.deallocate_async(during, 4 * KiB, 256, f.eager);
    pool.deallocate_async(large, 8 * MiB, 256, f.capturing);
    f.events.submit(f.capturing);
    const auto captured = f.events.end_capture(f.capturing);
    REQUIRE(captured.valid);
    CHECK(f.events.capture_errors() == 0);

    // b outlives the capture: its free on an eager stream goes back to the graph pool too.
    pool.deallocate_async(b, 4 * KiB, 256, f.eager);
    CHECK(pool.upstream_resource().locked([](auto& p) { return p.graph_blocks(); }) == 0);
    for (int launch = 0; launch < 50; ++launch) {
        f.events.launch(captured, f.capturing);
        for (stream_ref s : {f.eager, f.capturing}) {
            void* e = pool.allocate_async(4 * KiB, 256, s);
            CHECK_FALSE(overlaps(e, 4 * KiB, graph));
            pool.deallocate_async(e, 4 * KiB, 256, s);
        }
    }
    f.events.complete_all();
    release_graph_pool(pool.upstream_resource(), id);
    pool.check_invariants();
    CHECK(pool.live_bytes() == 0);
    CHECK(f.events.capture_errors() == 0);
}

TEST_CASE("per_thread: while a capture may run, sets of streams that may be gone are set aside, not given back after a device wait") {
    graph_fixture f;
    per_thread<synchronized<checked_caching>, host_events> pool{
        std::in_place, per_thread_options{.streams_per_thread = 2}, f.events, ref(f.upstream), caching_options{}, f.events};
    const stream_ref others[] = {f.events.make_stream(), f.events.make_stream(), f.events.make_stream()};
    const std::uint64_t id = f.events.begin_capture(f.capturing, capture_mode::global);
    void* graph_block = pool.allocate_async(4 * KiB, 256, f.capturing);  // the upstream now knows of the capture
    pool.deallocate_async(graph_block, 4 * KiB, 256, f.capturing);
    // On another thread, more streams than the thread keeps sets for: each new one evicts a set
    // whose stream may be gone, which would wait for the whole device.
    std::thread eager([&] {
        for (int round = 0; round < 3; ++round) {
            for (stream_ref s : others) {
                void* p = pool.allocate_async(64 * KiB, 256, s);
                f.events.submit(s);
                pool.deallocate_async(p, 64 * KiB, 256, s);
            }
        }
        pool.release_caches();  // release() too, meanwhile
    });
    eager.join();
    CHECK(f.events.capture_errors() == 0);
    CHECK(pool.cached_bytes() > 0);  // set aside (the eager thread's cache was given back)
    REQUIRE(f.events.end_capture(f.capturing).valid);
    const std::size_t waits = f.events.synchronizations();
    // A call that reaches the upstream on the stream that captured shows the capture ended; the next
    // miss gives back what was set aside, after one wait for the device.
    pool.deallocate_async(pool.allocate_async(8 * MiB, 256, f.capturing), 8 * MiB, 256, f.capturing);
    pool.deallocate_async(pool.allocate_async(16 * KiB, 256, f.eager), 16 * KiB, 256, f.eager);
    CHECK(f.events.synchronizations() == waits + 1);
    CHECK(pool.cached_bytes() == 16 * KiB);
    release_graph_pool(pool.upstream_resource(), id);
    pool.check_invariants();
    CHECK(f.events.capture_errors() == 0);
}

TEST_CASE("capture checks: every call, only while a capture is announced, never") {
    graph_fixture f;
    SUBCASE("stream_ordered, announced: an announced capture works, an unannounced one breaks") {
        checked_caching pool{ref(f.upstream), {}, f.events};
        pool.capture_checks(capture_check::announced);
        CHECK(pool.capture_checks() == capture_check::announced);
        {
            const announced_capture announce;
            CHECK(captures_announced());
            const std::uint64_t id = f.events.begin_capture(f.capturing, capture_mode::global);
            pool.deallocate_async(pool.allocate_async(4 * KiB, 256, f.capturing), 4 * KiB, 256, f.capturing);
            REQUIRE(f.events.end_capture(f.capturing).valid);
            pool.release_graph_pool(id);
        }
        CHECK_FALSE(captures_announced());
        f.events.begin_capture(f.capturing, capture_mode::relaxed);
        CHECK(pool.graph_pool_of(f.capturing) != 0);  // asked of the user: always answered
        CHECK_THROWS_AS(static_cast<void>(pool.allocate_async(4 * KiB, 256, f.capturing)), capture_error);  // its identity was asked
        CHECK_FALSE(f.events.end_capture(f.capturing).valid);
        CHECK(f.events.capture_errors() == 1);
    }
    SUBCASE("per_thread, never: even an announced capture breaks") {
        per_thread<synchronized<checked_caching>, host_events> pool{
            std::in_place, per_thread_options{.captures = capture_check::never}, f.events, ref(f.upstream), caching_options{}, f.events};
        const announced_capture announce;
        f.events.begin_capture(f.capturing, capture_mode::relaxed);
        CHECK_THROWS_AS(static_cast<void>(pool.allocate_async(4 * KiB, 256, f.capturing)), capture_error);
        CHECK_FALSE(f.events.end_capture(f.capturing).valid);
    }
    SUBCASE("per_thread, announced: an announced capture goes to the graph pool") {
        per_thread<synchronized<checked_caching>, host_events> pool{
            std::in_place, per_thread_options{.captures = capture_check::announced}, f.events, ref(f.upstream), caching_options{},
            f.events};
        const announced_capture announce;
        f.events.begin_capture(f.capturing, capture_mode::global);
        void* p = pool.allocate_async(4 * KiB, 256, f.capturing);
        CHECK(pool.upstream_resource().locked([](auto& u) { return u.graph_blocks(); }) == 1);
        pool.deallocate_async(p, 4 * KiB, 256, f.capturing);
        CHECK(f.events.end_capture(f.capturing).valid);
        CHECK(f.events.capture_errors() == 0);
    }
}

TEST_CASE("graph pools in the walk: snapshot segments carry their pool, fragmentation and the summary count them") {
    graph_fixture f;
    checked_caching pool{ref(f.upstream), {}, f.events};
    void* eager = pool.allocate_async(64 * KiB, 256, f.eager);
    const std::uint64_t id = f.events.begin_capture(f.capturing, capture_mode::relaxed);
    void* kept = pool.allocate_async(1 * MiB, 256, f.capturing);  // outlives the capture (an output)
    void* scratch = pool.allocate_async(256 * KiB, 256, f.capturing);
    pool.deallocate_async(scratch, 256 * KiB, 256, f.capturing);
    pool.deallocate_async(eager, 64 * KiB, 256, f.capturing);  // kept for the graph, which reads it
    f.events.submit(f.capturing);
    REQUIRE(f.events.end_capture(f.capturing).valid);

    const auto address = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
    bool adopted_pending = false, kept_live = false, scratch_free = false;
    std::size_t chunk_bytes = 0, block_bytes = 0;
    std::uintptr_t last_chunk = 0;
    pool.for_each_block([&](const chunk_view& chunk, const block_view& block) {
        if (chunk.address != last_chunk) chunk_bytes += chunk.bytes, last_chunk = chunk.address;
        block_bytes += block.bytes;
        if (block.address == address(eager)) adopted_pending = block.pending_free && !block.live && chunk.pool == 0;
        if (block.address == address(kept)) kept_live = block.live && chunk.pool == id;
        if (block.address == address(scratch)) scratch_free = !block.live && chunk.pool == id;
    });
    CHECK(adopted_pending);
    CHECK(kept_live);
    CHECK(scratch_free);
    CHECK(block_bytes == chunk_bytes);  // the blocks of every chunk tile it, graph pools' too

    const fragmentation_figures figures = fragmentation(pool);
    CHECK(figures.private_pools == 1);
    CHECK(figures.private_live_bytes >= 1 * MiB);
    CHECK(figures.private_reserved_bytes >= figures.private_live_bytes + 256 * KiB);
    CHECK(snapshot(pool).find("\"segment_pool_id\": [0, " + std::to_string(id) + "]") != std::string::npos);
    const std::string summary = memory_summary(std::map<std::string, std::int64_t>{}, figures);
    CHECK(summary.find("| Graph pools: 1 ") != std::string::npos);
    for (std::size_t at = 0, next = 0; (next = summary.find('\n', at)) != std::string::npos; at = next + 1) {
        CHECK(next - at == 77);  // every row as wide as the rules
    }

    pool.deallocate_async(kept, 1 * MiB, 256, f.eager);
    f.events.complete_all();
    pool.release_graph_pool(id);
    CHECK(fragmentation(pool).private_pools == 0);
    CHECK(snapshot(pool).find("segment_pool_id") == std::string::npos);
    pool.check_invariants();
    CHECK(f.events.capture_errors() == 0);
}

TEST_CASE("a graph pool releases itself once its graphs are destroyed and their launches are done") {
    graph_fixture f;
    checked_caching pool{ref(f.upstream), {}, f.events};
    const auto eager_call = [&] { pool.deallocate_async(pool.allocate_async(4 * KiB, 256, f.eager), 4 * KiB, 256, f.eager); };

    SUBCASE("one graph; an output it allocated outlives it") {
        f.events.begin_capture(f.capturing, capture_mode::global);
        void* scratch = pool.allocate_async(1 * MiB, 256, f.capturing);
        f.events.submit(f.capturing);
        pool.deallocate_async(scratch, 1 * MiB, 256, f.capturing);
        void* output = pool.allocate_async(64 * KiB, 256, f.capturing);
        const auto graph = f.events.end_capture(f.capturing);
        REQUIRE(graph.valid);
        f.events.launch(graph, f.capturing);
        f.events.destroy_graph(graph);
        eager_call();
        CHECK(pool.graph_pools() == 1);  // its launch may still run
        f.events.complete(f.capturing);
        eager_call();  // released now, but for the output
        CHECK(pool.graph_blocks() == 1);
        pool.deallocate_async(output, 64 * KiB, 256, f.eager);
        CHECK(pool.graph_pools() == 0);
    }
    SUBCASE("two graphs sharing a pool: released after both") {
        constexpr std::uint64_t shared = 1000;
        std::vector<host_events::captured_graph> graphs;
        for (int i = 0; i < 2; ++i) {
            f.events.begin_capture(f.capturing, capture_mode::global);
            pool.capture_into(f.capturing, shared);
            pool.deallocate_async(pool.allocate_async(1 * MiB, 256, f.capturing), 1 * MiB, 256, f.capturing);
            graphs.push_back(f.events.end_capture(f.capturing));
        }
        f.events.destroy_graph(graphs[0]);
        eager_call();
        CHECK(pool.graph_pools() == 1);
        f.events.destroy_graph(graphs[1]);
        eager_call();
        CHECK(pool.graph_pools() == 0);
    }
    SUBCASE("not while another capture the pool serves may run") {
        f.events.begin_capture(f.capturing, capture_mode::relaxed);
        pool.deallocate_async(pool.allocate_async(1 * MiB, 256, f.capturing), 1 * MiB, 256, f.capturing);
        const auto first = f.events.end_capture(f.capturing);
        const stream_ref second = f.events.make_stream();
        f.events.begin_capture(second, capture_mode::relaxed);
        void* in_second = pool.allocate_async(1 * MiB, 256, second);
        f.events.destroy_graph(first);
        eager_call();  // the second capture may run: no memory goes upstream now
        CHECK(pool.graph_pools() == 2);
        pool.deallocate_async(in_second, 1 * MiB, 256, second);
        const auto second_graph = f.events.end_capture(second);
        pool.deallocate_async(pool.allocate_async(4 * KiB, 256, second), 4 * KiB, 256, second);  // finds it ended
        eager_call();
        CHECK(pool.graph_pools() == 1);
        f.events.destroy_graph(second_graph);
        pool.release();  // empty_cache releases gone graphs' pools too
        CHECK(pool.graph_pools() == 0);
    }
    SUBCASE("an invalidated capture's pool goes at the next call") {
        f.events.begin_capture(f.capturing, capture_mode::global);
        pool.deallocate_async(pool.allocate_async(1 * MiB, 256, f.capturing), 1 * MiB, 256, f.capturing);
        CHECK_THROWS_AS(f.events.synchronize_all(), capture_error);
        CHECK_FALSE(f.events.end_capture(f.capturing).valid);
        eager_call();
        CHECK(pool.graph_pools() == 0);
        CHECK(f.events.capture_errors() == 1);
    }
    pool.check_invariants();
}
