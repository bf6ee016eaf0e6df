// snapshot(r): the chunks and blocks of a walkable strategy as JSON, shaped like the "segments"
// of PyTorch's torch.cuda.memory._snapshot(), so tools written for those read it:
//
//   {"segments": [{"address": 139637976727552, "total_size": 2097152, "allocated_size": 1024,
//                  "active_size": 1024, "requested_size": 1000, "stream": 0,
//                  "segment_type": "large", "blocks": [
//                    {"address": 139637976727552, "size": 1024, "requested_size": 1000,
//                     "state": "active_allocated", "stream": 0},
//                    {"address": ..., "size": 2096128, "requested_size": 0, "state": "inactive", ...}]}]}
// A block's state is active_allocated (live), active_pending_free (freed, waiting on a stream)
// or inactive (free). Addresses are decimal, as PyTorch writes them. A segment of a private pool
// (a CUDA graph's, chunk_view::pool) also has "segment_pool_id": [0, pool]; the shared pool's
// segments have none (PyTorch's (0, 0)). O(blocks).
#pragma once

#include <poolkit/core/walk.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace poolkit {

template <walkable R>
[[nodiscard]] std::string snapshot(const R& r) {
    std::string json = "{\"segments\": [";
    std::string blocks;
    chunk_view current;
    std::size_t allocated = 0, active = 0, requested = 0;
    bool open = false;
    bool first_segment = true;
    const auto close_segment = [&] {
        if (!open) return;
        json += first_segment ? "" : ", ";
        first_segment = false;
        json += "{\"address\": " + std::to_string(current.address) + ", \"total_size\": " + std::to_string(current.bytes) +
                ", \"allocated_size\": " + std::to_string(allocated) + ", \"active_size\": " + std::to_string(active) +
                ", \"requested_size\": " + std::to_string(requested) + ", \"stream\": " + std::to_string(current.stream) +
                ", \"segment_type\": \"large\"" +
                (current.pool != 0 ? ", \"segment_pool_id\": [0, " + std::to_string(current.pool) + "]" : std::string()) +
                ", \"blocks\": [" + blocks + "]}";
        blocks.clear();
        allocated = active = requested = 0;
    };
    r.for_each_block([&](const chunk_view& chunk, const block_view& block) {
        if (!open || chunk.address != current.address) {
            close_segment();
            current = chunk;
            open = true;
        }
        const char* state = block.live ? "active_allocated" : (block.pending_free ? "active_pending_free" : "inactive");
        if (block.live) {
            allocated += block.bytes;
            requested += block.requested_bytes;
        }
        if (block.live || block.pending_free) active += block.bytes;
        if (!blocks.empty()) blocks += ", ";
        blocks += "{\"address\": " + std::to_string(block.address) + ", \"size\": " + std::to_string(block.bytes) +
                  ", \"requested_size\": " + std::to_string(block.requested_bytes) + ", \"state\": \"" + state +
                  "\", \"stream\": " + std::to_string(block.stream) + "}";
    });
    close_segment();
    return json + "]}";
}

}  // namespace poolkit
