// Fuzzes stream_ordered<best_fit> over simulated streams (host_events): fuzzer-chosen allocations
// on up to eight streams, frees on the same or another stream, record_use, work completing,
// streams destroyed and made, forget_stream, release, plain allocate/deallocate, and stream
// captures (CUDA graphs) in the three modes, ended and their graph pools released (or their
// graphs destroyed, after which the pools release themselves). Every block
// must be aligned and disjoint from every live block, check_invariants() holds after each step, no
// destroyed stream is ever touched (host_events throws std::logic_error), no call breaks a capture
// (host_events throws capture_error), and at the end every byte is back upstream.
// Fuzzers build with NDEBUG; their checks must stay on.
#define POOLKIT_ENABLE_ASSERTS 1

#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <optional>

namespace {

struct live_block {
    std::size_t bytes;
    std::size_t alignment;
    std::optional<std::size_t> stream;  // the stream slot it was allocated on; none: plain
    std::uint8_t users = 0;  // stream slots named in record_use, one bit each
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using pool_type =
        poolkit::stream_ordered<poolkit::ref<poolkit::simulated_resource>, poolkit::lanes<poolkit::best_fit>, poolkit::host_events>;
    poolkit::simulated_resource memory{{.capacity = std::size_t{32} << 20}};
    {
        poolkit::host_events events;
        pool_type pool{poolkit::ref(memory), {.initial_size = std::size_t{256} << 10}, events};
        std::array<std::optional<poolkit::stream_ref>, 8> streams;  // empty: never made, or destroyed
        streams[0] = poolkit::stream_ref{};
        std::map<std::uintptr_t, live_block> live;
        std::optional<std::size_t> capturing;  // the stream slot in capture
        std::uint64_t capture_pool = 0;
        const auto stream_at = [&](std::size_t slot) -> poolkit::stream_ref {
            if (!streams[slot]) streams[slot] = events.make_stream();
            return *streams[slot];
        };
        const auto live_stream = [&](std::size_t from) {  // a stream slot that is alive, made if need be
            for (std::size_t k = 0; k < streams.size(); ++k) {
                const std::size_t slot = (from + k) % streams.size();
                if (streams[slot]) return slot;
            }
            return std::size_t{0};
        };
        for (std::size_t i = 0; i + 4 <= size; i += 4) {
            const std::uint8_t op = data[i];
            const std::size_t slot = data[i + 1] % streams.size();
            const std::size_t amount = std::size_t{data[i + 2]} << 4 | (data[i + 3] & 15);
            const std::size_t alignment = std::size_t{1} << (data[i + 3] >> 4);
            switch (op % 12) {
                case 0:
                case 1:
                case 2: {  // allocate on a stream, then work uses it there
                    const std::size_t bytes = 1 + (op & 16 ? amount << 8 : amount);
                    const poolkit::stream_ref s = stream_at(slot);
                    void* pointer = nullptr;
                    try {
                        pointer = pool.allocate_async(bytes, alignment, s);
                    } catch (const poolkit::out_of_memory&) {
                        break;
                    }
                    const auto address = reinterpret_cast<std::uintptr_t>(pointer);
                    if (pointer == nullptr || address % alignment != 0) std::abort();
                    const auto next = live.lower_bound(address);
                    if (next != live.end() && next->first < address + bytes) std::abort();
                    if (next != live.begin() && std::prev(next)->first + std::prev(next)->second.bytes > address) std::abort();
                    live.emplace(address, live_block{bytes, alignment, slot});
                    events.submit(s);
                    break;
                }
                case 3:
                case 4: {  // free on its own stream, or on another one after work used it there
                    if (live.empty()) break;
                    auto victim = live.begin();
                    std::advance(victim, static_cast<std::ptrdiff_t>(amount % live.size()));
                    const live_block block = victim->second;
                    const std::size_t on = op % 10 == 3 && block.stream && streams[*block.stream] ? *block.stream : live_stream(slot);
                    events.submit(*streams[on]);
                    pool.deallocate_async(reinterpret_cast<void*>(victim->first), block.bytes, block.alignment, *streams[on]);
                    live.erase(victim);
                    break;
                }
                case 5:  // work completes on a stream, or everywhere
                    if (op & 32) {
                        events.complete_all();
                    } else if (streams[slot]) {
                        events.complete(*streams[slot]);
                    }
                    break;
                case 6: {  // another stream uses a live block
                    if (live.empty()) break;
                    auto used = live.begin();
                    std::advance(used, static_cast<std::ptrdiff_t>(amount % live.size()));
                    const poolkit::stream_ref s = stream_at(slot);
                    pool.record_use(reinterpret_cast<void*>(used->first), s);
                    used->second.users |= static_cast<std::uint8_t>(1u << slot);
                    events.submit(s);
                    break;
                }
                case 7:  // a stream ends (its work is issued; it is never touched again)
                    if (slot != 0 && streams[slot] && capturing != slot) {
                        // Forgetting is optional for a stream's lane, required where it is named in record_use.
                        bool named = false;
                        for (auto& [address, block] : live) {
                            named = named || (block.users >> slot & 1u) != 0;
                            block.users &= static_cast<std::uint8_t>(~(1u << slot));
                        }
                        if (named || (op & 32)) pool.forget_stream(*streams[slot]);
                        events.destroy_stream(*streams[slot]);
                        streams[slot].reset();
                    }
                    break;
                case 8:
                    pool.release();
                    break;
                case 10:  // a capture begins; its first request tells the pool
                    if (!capturing && slot != 0) {
                        const poolkit::stream_ref s = stream_at(slot);
                        static constexpr poolkit::capture_mode modes[] = {poolkit::capture_mode::global, poolkit::capture_mode::local,
                                                                          poolkit::capture_mode::relaxed};
                        events.begin_capture(s, modes[(op >> 4) % 3]);
                        capturing = slot;
                        capture_pool = pool.graph_pool_of(s);
                        try {
                            void* first = pool.allocate_async(1 + amount, alignment, s);
                            pool.deallocate_async(first, 1 + amount, alignment, s);
                        } catch (const poolkit::out_of_memory&) {  // the pool knows of the capture all the same
                        }
                    }
                    break;
                case 11:  // the capture ends; its graph pool may be released, or its graph destroyed
                    if (capturing) {
                        const auto graph = events.end_capture(*streams[*capturing]);
                        if (!graph.valid) std::abort();
                        capturing.reset();
                        if (op & 16) {
                            pool.release_graph_pool(capture_pool);
                        } else if (op & 32) {  // the pool releases itself once told, at a later call
                            events.destroy_graph(graph);
                        }
                    }
                    break;
                default: {  // plain allocate, memory usable on any stream at once
                    const std::size_t bytes = 1 + amount;
                    void* pointer = nullptr;
                    try {
                        pointer = pool.allocate(bytes, alignment);
                    } catch (const poolkit::out_of_memory&) {
                        break;
                    }
                    const auto address = reinterpret_cast<std::uintptr_t>(pointer);
                    if (address % alignment != 0) std::abort();
                    const auto next = live.lower_bound(address);
                    if (next != live.end() && next->first < address + bytes) std::abort();
                    if (next != live.begin() && std::prev(next)->first + std::prev(next)->second.bytes > address) std::abort();
                    live.emplace(address, live_block{bytes, alignment, std::nullopt});
                }
            }
            pool.check_invariants();
            if (events.capture_errors() != 0) std::abort();
        }
        if (capturing && !events.end_capture(*streams[*capturing]).valid) std::abort();
        events.complete_all();
        for (const auto& [address, block] : live) pool.deallocate(reinterpret_cast<void*>(address), block.bytes, block.alignment);
        pool.release();
        pool.check_invariants();
    }
    if (memory.live_bytes() != 0) std::abort();
    return 0;
}
