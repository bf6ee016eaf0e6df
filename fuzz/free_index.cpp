// Fuzzes stream_ordered's free index parts (adaptor/detail/): per-stream front caches covered
// into waiting blocks behind events of simulated streams (host_events), record_use batches with an
// event on each stream, drains with fuzzer-chosen patience, internal-dependency takes, work
// completing and the whole device settling. Every block is in exactly one place (out, a front,
// waiting, free for all); a front hands a block only to its own stream; a block becomes free for
// all only once every event of its batch is done, or after the whole device was waited for; a
// taker from the waiting blocks waited on every event of the block's batch; the counts agree.
// Fuzzers build with NDEBUG; their checks must stay on.
#define POOLKIT_ENABLE_ASSERTS 1

#include <poolkit/adaptor/detail/front_cache.hpp>
#include <poolkit/adaptor/detail/waiting_blocks.hpp>
#include <poolkit/adaptor/host_events.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <span>
#include <vector>

namespace {

using poolkit::host_events;
using poolkit::stream_ref;
using poolkit::detail::free_block;

constexpr std::size_t streams_count = 4;
constexpr std::size_t blocks_count = 32;

void require(bool condition) {
    if (!condition) std::abort();
}

enum class place { out, front, waiting, free_for_all };

struct block_state {
    place where = place::free_for_all;
    std::size_t stream = 0;  // its front's stream, while in a front
    std::vector<host_events::event_type> after;  // its batch's events, while waiting
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    host_events events;
    std::array<stream_ref, streams_count> streams{};
    for (auto& s : streams) s = events.make_stream();
    std::vector<poolkit::detail::front_cache> fronts(streams_count, poolkit::detail::front_cache(8));
    poolkit::detail::waiting_blocks<host_events> waiting(events);
    std::array<block_state, blocks_count> blocks{};
    const auto pointer_of = [](std::size_t i) { return reinterpret_cast<void*>(0x100000 + 0x1000 * i); };
    const auto index_of = [](const void* p) { return (reinterpret_cast<std::uintptr_t>(p) - 0x100000) / 0x1000; };
    const auto size_of = [](std::size_t i) { return 256 * (1 + i % 4); };  // four sizes: takes often match
    const auto freed = [&](const free_block& b) {
        block_state& s = blocks[index_of(b.pointer)];
        require(s.where == place::waiting);
        for (const auto& e : s.after) require(events.done(e));
        s.where = place::free_for_all;
        s.after.clear();
    };
    const auto cover = [&](std::size_t k) {
        if (fronts[k].empty()) return;
        const auto event = events.record(streams[k]);
        for (const free_block& b : fronts[k].blocks()) {
            block_state& s = blocks[index_of(b.pointer)];
            s.where = place::waiting;
            s.after = {event};
        }
        waiting.add(fronts[k].blocks(), std::span(&event, 1));
        fronts[k].clear();
    };
    for (std::size_t step = 0; step + 3 <= size && step < 3 * 256; step += 3) {
        const std::uint8_t op = data[step] % 9;
        const std::size_t k = data[step + 1] % streams_count;
        const std::size_t i = data[step + 2] % blocks_count;
        block_state& b = blocks[i];
        switch (op) {
            case 0:  // allocate block i on stream k, if free for all; work uses it there
                if (b.where == place::free_for_all) {
                    b.where = place::out;
                    events.submit(streams[k]);
                }
                break;
            case 1:  // free block i on stream k: into k's front (covered first when full)
                if (b.where != place::out) break;
                if (fronts[k].full()) cover(k);
                require(fronts[k].push({pointer_of(i), size_of(i), 256}));
                b.where = place::front;
                b.stream = k;
                break;
            case 2: {  // stream k asks its front for block i's size
                void* p = fronts[k].take(size_of(i), 256);
                if (p == nullptr) break;
                block_state& got = blocks[index_of(p)];
                require(got.where == place::front && got.stream == k && size_of(index_of(p)) == size_of(i));
                got.where = place::out;
                break;
            }
            case 3:
                cover(k);
                break;
            case 4: {  // a block used on every stream (record_use), freed: one event per stream
                if (b.where != place::out) break;
                std::vector<host_events::event_type> all;
                for (stream_ref s : streams) all.push_back(events.record(s));
                const free_block one{pointer_of(i), size_of(i), 256};
                waiting.add(std::span(&one, 1), all);
                b.where = place::waiting;
                b.after = all;
                break;
            }
            case 5:
                waiting.drain(data[step + 2] % 4, freed);
                break;
            case 6: {  // stream k takes a waiting block of block i's size, waiting on its batch
                std::vector<host_events::event_type> waited;
                void* p = waiting.take(size_of(i), 256, [&](std::span<const host_events::event_type> batch) {
                    for (const auto& e : batch) {
                        events.wait(streams[k], e);
                        waited.push_back(e);
                    }
                });
                if (p == nullptr) break;
                block_state& got = blocks[index_of(p)];
                require(got.where == place::waiting && size_of(index_of(p)) == size_of(i));
                require(waited.size() == got.after.size());
                got.where = place::out;
                got.after.clear();
                break;
            }
            case 7:
                events.complete(streams[k]);
                break;
            default:  // the host waits for the whole device: everything is free for all
                events.complete_all();
                waiting.give_all(freed);
                for (std::size_t s = 0; s < streams_count; ++s) cover(s);
                waiting.give_all(freed);
                break;
        }
        std::size_t in_fronts = 0, in_waiting = 0;
        for (const block_state& s : blocks) {
            in_fronts += s.where == place::front;
            in_waiting += s.where == place::waiting;
        }
        std::size_t front_count = 0;
        for (const auto& f : fronts) {
            require(f.consistent());
            front_count += f.size();
        }
        require(front_count == in_fronts && waiting.blocks() == in_waiting && waiting.consistent());
    }
    return 0;
}
