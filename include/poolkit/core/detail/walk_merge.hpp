// walk_recording: the walk of walk.hpp over a resource made of parts (a combinator's two, the
// pools of caching_pool, the lanes of stream_ordered), each with chunks of its own.
//
// Each part walks its chunks in address order, but the chunks of different parts interleave. A
// walk_recording is handed to each part as its visitor and keeps every visit (on the host heap,
// never through the parts); replay() then visits them again with all chunks in address order,
// each chunk's blocks together and in the order they came. Complexity O(blocks + chunks log
// chunks) time, O(blocks) host memory. Not thread-safe.
#pragma once

#include <poolkit/core/walk.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace poolkit::detail {

class walk_recording {
public:
    // Records one visit. Requires: the blocks of a chunk arrive one after another.
    void operator()(const chunk_view& chunk, const block_view& block) {
        if (runs_.empty() || runs_.back().chunk.address != chunk.address) runs_.push_back({chunk, blocks_.size(), 0});
        blocks_.push_back(block);
        ++runs_.back().count;
    }

    // Visits every recorded block again, chunks in address order.
    template <class Visitor>
    void replay(Visitor&& visit) {
        std::stable_sort(runs_.begin(), runs_.end(), [](const run& a, const run& b) { return a.chunk.address < b.chunk.address; });
        for (const run& r : runs_) {
            for (std::size_t i = r.first; i < r.first + r.count; ++i) visit(r.chunk, blocks_[i]);
        }
    }

private:
    struct run {
        chunk_view chunk;
        std::size_t first;  // index of its first block in blocks_
        std::size_t count;
    };
    std::vector<run> runs_;
    std::vector<block_view> blocks_;
};

// Walks every part (each walkable), chunks of all of them in address order.
template <class Visitor, walkable... Parts>
void walk_parts(Visitor&& visit, const Parts&... parts) {
    walk_recording recording;
    (parts.for_each_block(recording), ...);
    recording.replay(visit);
}

}  // namespace poolkit::detail
