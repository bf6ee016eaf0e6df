// waiting_blocks<Events>: free blocks behind events — reusable by any stream once every event of
// their batch is done.
//
// Contract:
// - A batch is one or more events and the blocks they cover: a stream's front cache covered by
//   one event recorded on that stream, or a block used on several streams (record_use) covered by
//   an event on each. A block is handed on only after its batch's events are done (drain), or to
//   a taker that was ordered after them (take).
// - drain() polls oldest first and stops after `patience` batches that are not done, so a call
//   costs at most that many driver queries beyond the batches it returns; newer batches mostly
//   sit behind older ones on the same streams.
// - take() is cudaMallocAsync's internal dependency: a block of exactly the request's size and
//   alignment, oldest batch first, after `order` made the taker wait for that batch's events
//   (take_after: the taker's stream waits on them). hand_oldest_after() hands whole batches, for
//   any block that fits, once the taker's stream waited on their events.
// - The events are recycled when their batch is gone. Not thread-safe.
// Complexity: add O(blocks), no allocation in a steady state; drain O(batches returned + patience + blocks returned); take
// O(batches) plus the blocks of batches whose size mask admits the request.
#pragma once

#include <poolkit/adaptor/detail/front_cache.hpp>
#include <poolkit/core/stream_ref.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace poolkit::detail {

template <class Events>
class waiting_blocks {
public:
    using event_type = typename Events::event_type;

    explicit waiting_blocks(Events& events) noexcept : events_(&events) {}
    waiting_blocks(const waiting_blocks&) = delete;
    waiting_blocks& operator=(const waiting_blocks&) = delete;
    ~waiting_blocks() {
        for (std::size_t i = 0; i < count_; ++i) recycle(batches_[i]);
    }

    // Adds a batch: `blocks` (not empty), reusable once every one of `events` (not empty) is done;
    // it owns the events from then on. May throw std::bad_alloc: then nothing changed, and the
    // caller still owns the events. Spent batches keep their room, so that a steady state
    // allocates nothing.
    void add(std::span<const free_block> blocks, std::span<const event_type> events) {
        if (count_ == batches_.size()) batches_.emplace_back();
        batch& b = batches_[count_];
        b.blocks.reserve(blocks.size());
        b.events.reserve(events.size());
        b.blocks.assign(blocks.begin(), blocks.end());  // within the room reserved: nothing throws
        b.events.assign(events.begin(), events.end());
        b.mask = 0;
        b.bytes = 0;
        for (const free_block& x : blocks) {
            b.mask |= mask_bit(x.bytes);
            b.bytes += x.bytes;
        }
        blocks_ += blocks.size();
        bytes_ += b.bytes;
        ++count_;
    }

    // Gives the blocks of every batch whose events are done to `give(block)`, oldest first, polling
    // until `patience` batches were found not done. Returns how many blocks it gave.
    template <class Give>
    std::size_t drain(std::size_t patience, Give&& give) noexcept {
        std::size_t kept = 0, given = 0;
        for (std::size_t i = 0; i < count_; ++i) {
            batch& b = batches_[i];
            if (patience > 0 && all_done(b)) {
                given += b.blocks.size();
                hand_over(b, give);
                continue;
            }
            if (patience > 0) --patience;
            if (kept != i) std::swap(batches_[kept], b);  // the spent batch moves back, room and all
            ++kept;
        }
        count_ = kept;
        return given;
    }

    // A block of exactly `bytes` and `alignment`, oldest batch first, once `order(events)` has
    // ordered the taker after its batch's events (it may throw: then nothing was taken).
    template <class Order>
    [[nodiscard]] void* take(std::size_t bytes, std::size_t alignment, Order&& order) {
        const std::uint64_t bit = mask_bit(bytes);
        for (std::size_t i = 0; i < count_; ++i) {
            batch& b = batches_[i];
            if ((b.mask & bit) == 0) continue;
            const auto found = std::find_if(b.blocks.begin(), b.blocks.end(),
                                            [&](const free_block& x) { return x.bytes == bytes && x.alignment == alignment; });
            if (found == b.blocks.end()) continue;
            order(std::span<const event_type>(b.events));
            void* pointer = found->pointer;
            b.blocks.erase(found);  // the mask may keep the bit: it only rules sizes out
            b.bytes -= bytes;
            bytes_ -= bytes;
            --blocks_;
            if (b.blocks.empty()) {
                recycle(b);
                std::rotate(batches_.begin() + static_cast<std::ptrdiff_t>(i), batches_.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                            batches_.begin() + static_cast<std::ptrdiff_t>(count_));
                --count_;
            }
            return pointer;
        }
        return nullptr;
    }

    // take() for a taker on `taker` (nullptr: a plain allocate): the stream waits on the batch's
    // events on the GPU, or the host does.
    [[nodiscard]] void* take_after(std::size_t bytes, std::size_t alignment, const stream_ref* taker) {
        return take(bytes, alignment, [&](std::span<const event_type> events) {
            for (const event_type& event : events) {
                if (taker != nullptr) {
                    events_->wait(*taker, event);  // on an event done already, as cheap as asking
                } else {
                    events_->synchronize(event);
                }
            }
        });
    }

    // How many events the oldest `count` batches hold.
    [[nodiscard]] std::size_t events_of_oldest(std::size_t count) const noexcept {
        std::size_t events = 0;
        for (std::size_t i = 0; i < std::min(count, count_); ++i) events += batches_[i].events.size();
        return events;
    }

    // Hands the oldest `count` batches to `take(events, blocks)`, which owns their events from
    // then on, after `taker` waited on those events (that may throw: then nothing changed); the
    // batches leave. Returns how many blocks it handed.
    template <class Take>
    std::size_t hand_oldest_after(std::size_t count, stream_ref taker, Take&& take) {
        count = std::min(count, count_);
        for (std::size_t i = 0; i < count; ++i) {
            for (const event_type& event : batches_[i].events) events_->wait(taker, event);
        }
        std::size_t handed = 0;
        for (std::size_t i = 0; i < count; ++i) {
            batch& b = batches_[i];
            take(std::span<const event_type>(b.events), std::span<const free_block>(b.blocks));
            handed += b.blocks.size();
            blocks_ -= b.blocks.size();
            bytes_ -= b.bytes;
            b.events.clear();
            b.blocks.clear();
            b.bytes = 0;
        }
        std::rotate(batches_.begin(), batches_.begin() + static_cast<std::ptrdiff_t>(count),
                    batches_.begin() + static_cast<std::ptrdiff_t>(count_));
        count_ -= count;
        return handed;
    }

    // Waits on the host for every batch, then gives every block (may throw while waiting: what
    // was not given stays).
    template <class Give>
    void wait_all(Give&& give) {
        for (std::size_t i = 0; i < count_; ++i) {
            for (const event_type& event : batches_[i].events) events_->synchronize(event);
        }
        give_all(give);
    }

    // Gives every block: the caller has waited for the whole device.
    template <class Give>
    void give_all(Give&& give) noexcept {
        for (std::size_t i = 0; i < count_; ++i) hand_over(batches_[i], give);
        count_ = 0;
    }

    [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
    [[nodiscard]] std::size_t batches() const noexcept { return count_; }
    [[nodiscard]] std::size_t blocks() const noexcept { return blocks_; }
    [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

    template <class Visit>
    void for_each_block(Visit&& visit) const {
        for (std::size_t i = 0; i < count_; ++i) {
            for (const free_block& x : batches_[i].blocks) visit(x);
        }
    }

    // The counts agree with the batches, and no batch is empty.
    [[nodiscard]] bool consistent() const noexcept {
        std::size_t blocks = 0, bytes = 0;
        for (std::size_t i = 0; i < count_; ++i) {
            const batch& b = batches_[i];
            std::size_t batch_bytes = 0;
            for (const free_block& x : b.blocks) {
                batch_bytes += x.bytes;
                if ((b.mask & mask_bit(x.bytes)) == 0) return false;
            }
            if (b.blocks.empty() || b.events.empty() || batch_bytes != b.bytes) return false;
            blocks += b.blocks.size();
            bytes += batch_bytes;
        }
        return blocks == blocks_ && bytes == bytes_;
    }

private:
    struct batch {
        std::vector<event_type> events;
        std::vector<free_block> blocks;
        std::uint64_t mask = 0;  // mask_bit of each block's size (may keep bits of blocks taken)
        std::size_t bytes = 0;
    };

    static std::uint64_t mask_bit(std::size_t bytes) noexcept {
        return std::uint64_t{1} << ((static_cast<std::uint64_t>(bytes) * 0x9e3779b97f4a7c15) >> 58);
    }

    bool all_done(const batch& b) const noexcept {
        return std::all_of(b.events.begin(), b.events.end(), [&](const event_type& event) { return events_->done(event); });
    }

    void recycle(batch& b) noexcept {
        for (const event_type& event : b.events) events_->recycle(event);
        b.events.clear();
    }

    template <class Give>
    void hand_over(batch& b, Give& give) noexcept {
        recycle(b);
        for (const free_block& x : b.blocks) give(x);
        blocks_ -= b.blocks.size();
        bytes_ -= b.bytes;
        b.blocks.clear();
        b.bytes = 0;
    }

    Events* events_;
    std::vector<batch> batches_;  // the first count_ wait; the rest are spent, kept for their room
    std::size_t count_ = 0;
    std::size_t blocks_ = 0;
    std::size_t bytes_ = 0;
};

}  // namespace poolkit::detail
