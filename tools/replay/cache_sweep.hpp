// cache_sweep: what --cold-caches does between two events of a replay. A program does its own
// work between two allocations (Python, the framework's dispatch, kernel launches), and that work
// evicts the allocator's data from the CPU's caches; a replay that calls the allocator back to
// back keeps it all cached and times the allocator at its best. With a sweep, `bytes` of other
// host memory are read after every event, one load per cache line, and the time the sweeps took
// (measured around each, with one clock read's cost calibrated away) is taken out of the pass's.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace poolkit::replay_tool {

class cache_sweep {
public:
    static constexpr std::size_t line = 64;

    // `bytes` == 0: no sweep (between() does nothing and takes no time).
    explicit cache_sweep(std::size_t bytes) : memory_((bytes + line - 1) / line * (line / sizeof(std::uint64_t)), 1) {
        if (memory_.empty()) return;
        constexpr int reads = 10000;
        const auto start = clock::now();
        for (int i = 0; i < reads; ++i) sink_ = sink_ + static_cast<std::uint64_t>(clock::now().time_since_epoch().count());
        clock_read_ = std::chrono::duration<double>(clock::now() - start).count() / reads;
    }

    // After an event: reads the memory, and counts the time that took.
    void between() noexcept {
        if (memory_.empty()) return;
        const auto start = clock::now();
        std::uint64_t sum = 0;
        for (std::size_t i = 0; i < memory_.size(); i += line / sizeof(std::uint64_t)) sum += memory_[i];
        sink_ = sink_ + sum;
        // The pass also spends the two clock reads around the sweep: about one lies inside the
        // span measured, the other is added.
        swept_ += std::chrono::duration<double>(clock::now() - start).count() + clock_read_;
    }

    // The seconds the sweeps took since the last call, then zero.
    [[nodiscard]] double take_seconds() noexcept {
        const double seconds = swept_;
        swept_ = 0;
        return seconds;
    }

    [[nodiscard]] std::size_t bytes() const noexcept { return memory_.size() * sizeof(std::uint64_t); }

private:
    using clock = std::chrono::steady_clock;
    std::vector<std::uint64_t> memory_;
    double clock_read_ = 0;  // seconds per clock read
    double swept_ = 0;
    volatile std::uint64_t sink_ = 0;  // the loads must happen
};

}  // namespace poolkit::replay_tool
