// node_pool<T>: host storage for bookkeeping nodes, so that a strategy's steady state allocates
// nothing per call.
//
// Slots come from the global operator new in batches that double from 32 to 4096; freed slots
// go onto a free list and are reused first. Batches are kept until the pool is destroyed, which
// frees them without running destructors: every node must have been destroyed, or be trivially
// destructible. make() is O(1) amortized and may throw std::bad_alloc; destroy() is O(1) and
// noexcept. Not thread-safe. Movable: nodes keep their addresses.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace poolkit::detail {

template <class T>
class node_pool {
public:
    node_pool() = default;
    node_pool(const node_pool&) = delete;
    node_pool& operator=(const node_pool&) = delete;
    node_pool(node_pool&& other) noexcept
        : batches_(std::move(other.batches_)),
          free_(std::exchange(other.free_, nullptr)),
          next_batch_(std::exchange(other.next_batch_, first_batch)),
          in_use_(std::exchange(other.in_use_, 0)) {}
    ~node_pool() = default;

    // A new T built from `arguments`; std::bad_alloc when the host is out of memory.
    template <class... Arguments>
    [[nodiscard]] T* make(Arguments&&... arguments) {
        if (free_ == nullptr) grow();
        slot* taken = free_;
        T* node = ::new (static_cast<void*>(taken->storage)) T(std::forward<Arguments>(arguments)...);
        free_ = taken->next;  // after construction: a throwing constructor leaves the pool as it was
        ++in_use_;
        return node;
    }

    // Destroys a node that make() returned and keeps its slot for reuse.
    void destroy(T* node) noexcept {
        node->~T();
        slot* freed = ::new (static_cast<void*>(node)) slot;
        freed->next = free_;
        free_ = freed;
        --in_use_;
    }

    // Nodes made and not yet destroyed.
    [[nodiscard]] std::size_t in_use() const noexcept { return in_use_; }

private:
    static constexpr std::size_t first_batch = 32;
    static constexpr std::size_t largest_batch = 4096;

    union slot {
        slot* next;
        alignas(T) unsigned char storage[sizeof(T)];
    };

    void grow() {
        const std::size_t count = next_batch_;
        batches_.reserve(batches_.size() + 1);  // so that push_back below cannot throw
        std::unique_ptr<slot[]> batch(new slot[count]);
        for (std::size_t i = 0; i < count; ++i) batch[i].next = i + 1 < count ? &batch[i + 1] : free_;
        free_ = &batch[0];
        batches_.push_back(std::move(batch));
        next_batch_ = std::min(count * 2, largest_batch);
    }

    std::vector<std::unique_ptr<slot[]>> batches_;
    slot* free_ = nullptr;
    std::size_t next_batch_ = first_batch;
    std::size_t in_use_ = 0;
};

}  // namespace poolkit::detail
