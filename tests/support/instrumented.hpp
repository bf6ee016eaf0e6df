// instrumented<Upstream>: a test upstream that checks how it is used.
//
// It records every live block and reports (never throws from deallocate) when a block comes back
// with another size or alignment than it left with, when a pointer it did not hand out is freed,
// when a returned block is misaligned or overlaps a live one, and what is still live (leaks).
// fail_after(n) makes every allocation after the next n throw out_of_memory; fail_every(n) makes
// every n-th allocation call throw (fault injection); limit(bytes) makes every allocation that
// would take live bytes past `bytes` throw. Identity equality.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace poolkit::test {

template <resource Upstream = new_delete_resource>
class instrumented : public forward_properties<instrumented<Upstream>, Upstream> {
public:
    instrumented() = default;
    explicit instrumented(Upstream upstream) : upstream_(std::move(upstream)) {}
    instrumented(const instrumented&) = delete;
    instrumented& operator=(const instrumented&) = delete;

    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        std::lock_guard lock(mutex_);
        const bool injected = fail_every_ != 0 && ++calls_ % fail_every_ == 0;
        if (injected) ++injected_;
        if ((failures_armed_ && allocations_left_ == 0) || injected || live_bytes_ > limit_ || bytes > limit_ - live_bytes_) {
            memory_figures figures = memory_figures::request(bytes, alignment);
            figures.live_bytes = live_bytes_;
            figures.limit_bytes = limit_;
            throw out_of_memory("instrumented", figures);
        }
        void* pointer = upstream_.allocate(bytes, alignment);
        if (failures_armed_) --allocations_left_;
        if (pointer == nullptr) return nullptr;
        try {
            record(pointer, bytes, alignment);
        } catch (...) {  // no host memory for the record: the block goes back
            upstream_.deallocate(pointer, bytes, alignment);
            throw;
        }
        return pointer;
    }

    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        std::lock_guard lock(mutex_);
        const auto found = live_.find(reinterpret_cast<std::uintptr_t>(pointer));
        if (found == live_.end()) {
            report("deallocate of a pointer this upstream did not hand out");
            return;
        }
        if (found->second.bytes != bytes) {
            report("deallocate with " + std::to_string(bytes) + " bytes, allocated with " + std::to_string(found->second.bytes));
        }
        if (found->second.alignment != alignment) {
            report("deallocate with alignment " + std::to_string(alignment) + ", allocated with " +
                   std::to_string(found->second.alignment));
        }
        live_bytes_ -= found->second.bytes;
        upstream_.deallocate(pointer, found->second.bytes, found->second.alignment);
        live_.erase(found);
        ++deallocations_;
    }

    // The next `count` allocations succeed (if the upstream can), every later one throws.
    void fail_after(std::size_t count) {
        std::lock_guard lock(mutex_);
        failures_armed_ = true;
        allocations_left_ = count;
    }
    void stop_failing() {
        std::lock_guard lock(mutex_);
        failures_armed_ = false;
    }
    // Every n-th allocation call from now on throws out_of_memory; 0 stops it.
    void fail_every(std::size_t n) {
        std::lock_guard lock(mutex_);
        fail_every_ = n;
        calls_ = 0;
    }
    // Allocation calls made to throw by fail_every.
    [[nodiscard]] std::size_t injected_failures() const {
        std::lock_guard lock(mutex_);
        return injected_;
    }
    // Allocations that would take live bytes past `bytes` throw out_of_memory.
    void limit(std::size_t bytes) {
        std::lock_guard lock(mutex_);
        limit_ = bytes;
    }

    [[nodiscard]] std::size_t live_blocks() const {
        std::lock_guard lock(mutex_);
        return live_.size();
    }
    [[nodiscard]] std::size_t live_bytes() const {
        std::lock_guard lock(mutex_);
        return live_bytes_;
    }
    [[nodiscard]] std::size_t peak_bytes() const {
        std::lock_guard lock(mutex_);
        return peak_bytes_;
    }
    [[nodiscard]] std::size_t allocations() const {
        std::lock_guard lock(mutex_);
        return allocations_;
    }
    [[nodiscard]] std::size_t deallocations() const {
        std::lock_guard lock(mutex_);
        return deallocations_;
    }
    // Every misuse seen so far, in order.
    [[nodiscard]] std::vector<std::string> errors() const {
        std::lock_guard lock(mutex_);
        return errors_;
    }

    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }

    friend bool operator==(const instrumented& a, const instrumented& b) noexcept { return &a == &b; }

    // Frees what is still live so that a failing test does not also leak.
    ~instrumented() {
        for (const auto& [address, block] : live_) {
            upstream_.deallocate(reinterpret_cast<void*>(address), block.bytes, block.alignment);
        }
    }

private:
    struct block {
        std::size_t bytes;
        std::size_t alignment;
    };

    void record(void* pointer, std::size_t bytes, std::size_t alignment) {
        const auto address = reinterpret_cast<std::uintptr_t>(pointer);
        if (!is_aligned(pointer, alignment)) report("block not aligned to " + std::to_string(alignment));
        const auto next = live_.lower_bound(address);
        if (next != live_.end() && next->first < address + bytes) report("block overlaps a live block after it");
        if (next != live_.begin()) {
            const auto previous = std::prev(next);
            if (previous->first + previous->second.bytes > address) report("block overlaps a live block before it");
        }
        live_.emplace(address, block{bytes, alignment});
        live_bytes_ += bytes;
        peak_bytes_ = std::max(peak_bytes_, live_bytes_);
        ++allocations_;
    }

    void report(std::string message) noexcept {
        try {
            errors_.push_back(std::move(message));
        } catch (...) {
        }
    }

    Upstream upstream_;
    mutable std::mutex mutex_;
    std::map<std::uintptr_t, block> live_;
    std::size_t live_bytes_ = 0;
    std::size_t peak_bytes_ = 0;
    std::size_t allocations_ = 0;
    std::size_t deallocations_ = 0;
    std::size_t fail_every_ = 0;
    std::size_t calls_ = 0;
    std::size_t injected_ = 0;
    std::size_t limit_ = std::numeric_limits<std::size_t>::max();
    bool failures_armed_ = false;
    std::size_t allocations_left_ = 0;
    std::vector<std::string> errors_;
};

static_assert(resource_with<instrumented<>, host_accessible>);

}  // namespace poolkit::test
