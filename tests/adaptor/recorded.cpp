// history and recorded<>: off until started, a ring that keeps the newest events and hands every
// label back once, the events each layer records (blocks, segments, mappings, refusals), a
// free_completed that waits for record_use's streams, and the JSON PyTorch's viewers read.
#include "../support/instrumented.hpp"
#include "../support/sizes.hpp"

#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/limited.hpp>
#include <poolkit/adaptor/recorded.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/adaptor/history.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/expandable.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_vmm_resource.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using namespace poolkit;
using test::instrumented;

using poolkit::test::KiB;
using poolkit::test::MiB;

// Labels 1, 2, 3... for the actions asked, counting what comes back.
struct labeller {
    std::uint64_t next = 0;
    std::vector<history_action> asked;
    std::map<std::uint64_t, int> released;

    history_context context() {
        return {[](void* self, history_action action) noexcept {
                    auto& me = *static_cast<labeller*>(self);
                    me.asked.push_back(action);
                    return ++me.next;
                },
                [](void* self, std::uint64_t label) noexcept { ++static_cast<labeller*>(self)->released[label]; }, this};
    }
};

std::vector<history_action> actions_of(const history& h) {
    std::vector<history_action> out;
    for (const history_event& e : h.events()) out.push_back(e.action);
    return out;
}

}  // namespace

TEST_CASE("history: nothing is recorded until start(), stop() drops everything") {
    history h;
    recorded<new_delete_resource> users{new_delete_resource{}, h};
    void* before = users.allocate(64);
    users.deallocate(before, 64);
    CHECK(h.events().empty());
    CHECK_FALSE(h.recording());
    h.start(16);
    void* p = users.allocate(100);
    users.deallocate(p, 100);
    using enum history_action;
    CHECK(actions_of(h) == std::vector{alloc, free_requested, free_completed});
    const auto events = h.events();
    CHECK(events[0].address == reinterpret_cast<std::uintptr_t>(p));
    CHECK(events[0].bytes == 100);
    CHECK(events[0].time_us > 0);
    CHECK(events[0].time_us <= events[2].time_us);
    h.stop();
    CHECK(h.events().empty());
    void* after = users.allocate(64);
    users.deallocate(after, 64);
    CHECK(h.events().empty());
}

TEST_CASE("recorded: an lvalue is referred to, an rvalue owned, without a history it records into default_history()") {
    new_delete_resource upstream;
    recorded referring{upstream};
    static_assert(std::is_same_v<decltype(referring), recorded<ref<new_delete_resource>>>);
    recorded owning{new_delete_resource{}};
    static_assert(std::is_same_v<decltype(owning), recorded<new_delete_resource>>);
    history& shared = default_history();
    CHECK(&referring.recorded_into() == &shared);
    CHECK(&owning.recorded_into() == &shared);
    const bool was_recording = shared.recording();  // the composition matrix's row may have started it
    shared.start(8);
    referring.deallocate(referring.allocate(8), 8);
    CHECK(shared.events().size() == 3);
    if (was_recording) {
        shared.start(64);
    } else {
        shared.stop();
    }
}

TEST_CASE("history: the ring keeps the newest max_entries events and releases each label once") {
    history h;
    labeller labels;
    h.start(4, labels.context());
    recorded<new_delete_resource> users{new_delete_resource{}, h};
    for (int i = 0; i < 5; ++i) users.deallocate(users.allocate(32), 32);  // 15 events, 10 labelled
    CHECK(h.events().size() == 4);
    CHECK(h.dropped() == 11);
    CHECK(h.max_entries() == 4);
    using enum history_action;
    CHECK(labels.asked ==
          std::vector{alloc, free_requested, alloc, free_requested, alloc, free_requested, alloc, free_requested, alloc, free_requested});
    // The newest four: ..., free_completed, alloc (9), free_requested (10), free_completed.
    CHECK(actions_of(h) == std::vector{free_completed, alloc, free_requested, free_completed});
    CHECK(h.events()[1].label == 9);
    CHECK(h.events()[2].label == 10);
    CHECK(labels.released.size() == 8);  // labels 1..8 left with their events
    h.stop();
    CHECK(labels.released.size() == 10);
    for (const auto& [label, times] : labels.released) CHECK(times == 1);
}

TEST_CASE("recorded: a strategy's segments, its users' blocks, and a refusal") {
    history h;
    h.start(64);
    instrumented<> memory;
    limited<ref<instrumented<>>> capped{ref<instrumented<>>(memory), limited_options{.limit_bytes = 4 * MiB}};
    recorded segments{capped, h, recording_layer::segments};
    best_fit<ref<decltype(segments)>> pool{segments, best_fit_options{.initial_size = 0, .growth = growth_policy::as_needed(MiB)}};
    recorded users{pool, h};
    CHECK(users.layer() == recording_layer::blocks);

    void* a = users.allocate(1000);
    using enum history_action;
    CHECK(actions_of(h) == std::vector{segment_alloc, alloc});
    CHECK(h.events()[0].bytes >= 1000);
    CHECK(h.events()[1].bytes == 1000);
    CHECK_THROWS_AS((void)users.allocate(64 * MiB), std::bad_alloc);
    const history_event refused = h.events().back();
    CHECK(refused.action == oom);
    CHECK(refused.bytes == 64 * MiB);
    CHECK(refused.address == 0);
    CHECK(refused.device_free <= 4 * MiB);  // the limit's room, where the refusal says it
    users.deallocate(a, 1000);
    pool.release();
    const auto events = h.events();
    CHECK(events.back().action == segment_free);
    CHECK(events.back().address == events[0].address);
    CHECK(memory.live_bytes() == 0);
}

TEST_CASE("recorded: a block given to record_use completes its free once the other stream's work is done") {
    history h;
    host_events events;
    const stream_ref a = events.make_stream();
    const stream_ref b = events.make_stream();
    instrumented<> memory;
    stream_ordered<ref<instrumented<>>, lanes<best_fit>, host_events> pool{ref<instrumented<>>(memory), best_fit_options{}, events};
    recorded users{pool, h};
    h.start(64);

    void* block = users.allocate_async(64 * KiB, 256, a);
    users.record_use(block, b);
    (void)events.submit(b);  // b reads the block
    users.deallocate_async(block, 64 * KiB, 256, a);
    using enum history_action;
    CHECK(actions_of(h) == std::vector{alloc, free_requested});
    CHECK(users.pending_free(block));
    users.settle();
    CHECK(actions_of(h).size() == 2);  // b's work is not done
    events.complete(b);
    events.complete(a);
    users.release();  // every pending free goes into the pool, and free chunks upstream
    CHECK_FALSE(users.pending_free(block));
    void* again = users.allocate_async(64 * KiB, 256, a);  // settles first
    CHECK(actions_of(h) == std::vector{alloc, free_requested, free_completed, alloc});
    CHECK(h.events()[2].address == reinterpret_cast<std::uintptr_t>(block));
    users.deallocate_async(again, 64 * KiB, 256, a);
    CHECK(actions_of(h).back() == free_completed);  // no record_use: at once
    pool.release();
}

TEST_CASE("recorded_memory: expandable's mappings are segment_map and segment_unmap events") {
    history h;
    h.start(64);
    simulated_vmm_resource vm{simulated_vmm_options{.capacity = 64 * MiB, .granularity = 2 * MiB}};
    {
        expandable<recorded_memory<simulated_vmm_resource>> pool{recorded_memory(vm, h)};
        void* p = pool.allocate(3 * MiB);
        using enum history_action;
        auto actions = actions_of(h);
        REQUIRE_FALSE(actions.empty());
        CHECK(std::all_of(actions.begin(), actions.end(), [](history_action x) { return x == segment_map; }));
        std::size_t mapped = 0;
        for (const history_event& e : h.events()) mapped += e.bytes;
        CHECK(mapped == vm.mapped_bytes());
        pool.deallocate(p, 3 * MiB);
        pool.release();
        CHECK(vm.mapped_bytes() == 0);
        std::size_t unmapped = 0;
        for (const history_event& e : h.events()) unmapped += e.action == segment_unmap ? e.bytes : 0;
        CHECK(unmapped == mapped);
    }
}

TEST_CASE("history_json: PyTorch's trace entries") {
    const history_event events[] = {
        {history_action::alloc, 4096, 100, 7, 1'700'000'000'000'000, 3, 0},
        {history_action::oom, 0, 1 << 20, 0, 1'700'000'000'000'001, 0, 512},
    };
    CHECK(history_json(events) ==
          "[{\"action\": \"alloc\", \"addr\": 4096, \"size\": 100, \"stream\": 7, \"time_us\": 1700000000000000, \"label\": 3}, "
          "{\"action\": \"oom\", \"addr\": 0, \"size\": 1048576, \"stream\": 0, \"time_us\": 1700000000000001, \"device_free\": 512}]");
    CHECK(history_json({}) == "[]");
    CHECK(std::string(name_of(history_action::segment_unmap)) == "segment_unmap");
}
