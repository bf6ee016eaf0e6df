// block_uses: the streams besides the freeing one that use each live block (record_use, PyTorch's
// record_stream).
//
// Contract:
// - add() names a stream once per block; a per-thread handle (cudaStreamPerThread) is told apart
//   by the thread that named it.
// - take() removes a block's streams as it is freed (none: empty); forget() drops a stream from
//   every block, and a block left with none from the map.
// Few blocks ever have uses: a hash map. Complexity: add, take O(1) expected plus the block's
// streams; uses and forget O(entries). Not thread-safe.
#pragma once

#include <poolkit/core/stream_ref.hpp>

#include <algorithm>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace poolkit::detail {

struct stream_use {
    stream_ref stream;
    std::thread::id thread;  // for per-thread handles; else none
    friend bool operator==(const stream_use&, const stream_use&) = default;
};

class block_uses {
public:
    void add(void* pointer, const stream_use& use) {
        auto& streams = map_[pointer];
        if (std::find(streams.begin(), streams.end(), use) == streams.end()) streams.push_back(use);
    }

    [[nodiscard]] std::vector<stream_use> take(void* pointer) noexcept {
        const auto found = map_.find(pointer);
        if (found == map_.end()) return {};
        std::vector<stream_use> streams = std::move(found->second);
        map_.erase(found);
        return streams;
    }

    // Whether any block names `use`.
    [[nodiscard]] bool uses(const stream_use& use) const noexcept {
        return std::any_of(map_.begin(), map_.end(), [&](const auto& entry) {
            return std::find(entry.second.begin(), entry.second.end(), use) != entry.second.end();
        });
    }

    void forget(const stream_use& use) noexcept {
        for (auto entry = map_.begin(); entry != map_.end();) {
            std::erase(entry->second, use);
            entry = entry->second.empty() ? map_.erase(entry) : std::next(entry);
        }
    }

    [[nodiscard]] bool empty() const noexcept { return map_.empty(); }

    template <class Visit>
    void for_each_block(Visit&& visit) const {
        for (const auto& entry : map_) visit(static_cast<const void*>(entry.first));
    }

private:
    std::unordered_map<void*, std::vector<stream_use>> map_;
};

}  // namespace poolkit::detail
