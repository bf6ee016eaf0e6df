// stream_table<State>: stream_ordered's record of each stream it has seen, found by the stream's
// identity.
//
// Contract:
// - A key is the stream's identity (Events::identity: unique over the program's life, so a new
//   stream that gets a destroyed stream's handle has a key of its own) plus, for a handle that
//   names another stream on each host thread (cudaStreamPerThread), the calling thread.
// - find() is O(1): the record of the last lookup, else a flat pointer_map for the common key (a
//   created stream, not per-thread), else a hash map.
// - Records keep their addresses until erased; erase_if() visits each once, O(records).
// - add() gives the strong guarantee: if it throws, the table is as it was.
// State must have a public `stream_key key` member. Not thread-safe.
#pragma once

#include <poolkit/adaptor/detail/pointer_map.hpp>
#include <poolkit/core/assert.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace poolkit::detail {

struct stream_key {
    std::uint64_t stream = 0;  // Events::identity of the stream
    std::thread::id thread;  // the calling thread, for per-thread handles only
    friend bool operator==(const stream_key&, const stream_key&) = default;
};

template <class State>
class stream_table {
public:
    [[nodiscard]] State* find(const stream_key& key) noexcept {
        if (last_ != nullptr && last_->key == key) return last_;
        State* found = indexed(key);
        if (found != nullptr) last_ = found;
        return found;
    }

    // Adds the record `made` (whose key is not in the table yet).
    State& add(std::unique_ptr<State> made) {
        POOLKIT_ASSERT(made != nullptr && indexed(made->key) == nullptr, "stream_table::add of a key it holds");
        if (records_.size() == records_.capacity()) records_.reserve(2 * records_.size() + 8);  // O(1) amortized
        if (is_flat(made->key)) {
            flat_.reserve(flat_.size() + 1);
        } else {
            others_.reserve(others_.size() + 1);  // rehashes geometrically
        }
        State* record = made.get();
        records_.push_back(std::move(made));  // room was reserved: nothing below throws
        if (is_flat(record->key)) {
            flat_.insert(flat_key(record->key), record);
        } else {
            others_.emplace(record->key, record);
        }
        return *(last_ = record);
    }

    // Erases every record `drop` selects; returns how many.
    template <class Predicate>
    std::size_t erase_if(Predicate&& drop) noexcept {
        std::size_t kept = 0, dropped = 0;
        for (auto& record : records_) {
            if (drop(*record)) {
                unindex(*record);
                record.reset();
                ++dropped;
            } else {
                records_[kept++] = std::move(record);
            }
        }
        records_.resize(kept);
        return dropped;
    }

    template <class Visit>
    void for_each(Visit&& visit) {
        for (auto& record : records_) visit(*record);
    }
    template <class Visit>
    void for_each(Visit&& visit) const {
        for (const auto& record : records_) visit(static_cast<const State&>(*record));
    }

    [[nodiscard]] std::size_t size() const noexcept { return records_.size(); }
    [[nodiscard]] bool empty() const noexcept { return records_.empty(); }

    // Every record is reachable through the indexes, and the indexes hold nothing else.
    [[nodiscard]] bool consistent() const noexcept {
        for (const auto& record : records_) {
            if (indexed(record->key) != record.get()) return false;
        }
        return flat_.size() + others_.size() == records_.size();
    }

private:
    struct key_hash {
        std::size_t operator()(const stream_key& key) const noexcept {
            return std::hash<std::uint64_t>{}(key.stream) ^ (std::hash<std::thread::id>{}(key.thread) + 0x9e3779b97f4a7c15);
        }
    };

    // A created stream (not per-thread, identity not 0) is keyed in the flat map by its identity.
    static bool is_flat(const stream_key& key) noexcept { return key.thread == std::thread::id{} && key.stream != 0; }
    static const void* flat_key(const stream_key& key) noexcept {
        return reinterpret_cast<const void*>(static_cast<std::uintptr_t>(key.stream));
    }

    State* indexed(const stream_key& key) const noexcept {
        if (is_flat(key)) {
            State* const* found = flat_.find(flat_key(key));
            return found == nullptr ? nullptr : *found;
        }
        const auto found = others_.find(key);
        return found == others_.end() ? nullptr : found->second;
    }

    void unindex(const State& record) noexcept {
        if (is_flat(record.key)) {
            flat_.erase(flat_key(record.key));
        } else {
            others_.erase(record.key);
        }
        if (last_ == &record) last_ = nullptr;
    }

    std::vector<std::unique_ptr<State>> records_;
    pointer_map<State*> flat_;
    std::unordered_map<stream_key, State*, key_hash> others_;
    State* last_ = nullptr;  // most calls name the stream of the call before
};

}  // namespace poolkit::detail
