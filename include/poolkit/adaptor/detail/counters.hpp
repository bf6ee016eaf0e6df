// The counters counted<> keeps: one metric is current, peak, total allocated and total freed.
//
// Two policies, chosen at compile time: concurrent_counters (relaxed atomics; peak is an atomic
// maximum, so it is exact under any interleaving) and single_thread_counters (plain integers, for
// a resource used from one thread, such as a replay).
#pragma once

#include <atomic>
#include <cstdint>

namespace poolkit {

// Counter policies for counted<R, Counters>.
struct concurrent_counters {};
struct single_thread_counters {};

// One metric as read at one moment.
struct metric_figures {
    std::int64_t current = 0;
    std::int64_t peak = 0;
    std::int64_t allocated = 0;  // total added since construction or reset_accumulated()
    std::int64_t freed = 0;  // total removed since construction or reset_accumulated()
};

namespace detail {

template <class Policy>
class metric;

template <>
class metric<concurrent_counters> {
public:
    void add(std::int64_t amount) noexcept {
        allocated_.fetch_add(amount, std::memory_order_relaxed);
        const std::int64_t now = current_.fetch_add(amount, std::memory_order_relaxed) + amount;
        raise_peak(now);
    }
    void remove(std::int64_t amount) noexcept {
        freed_.fetch_add(amount, std::memory_order_relaxed);
        current_.fetch_sub(amount, std::memory_order_relaxed);
    }
    [[nodiscard]] metric_figures read() const noexcept {
        return {current_.load(std::memory_order_relaxed), peak_.load(std::memory_order_relaxed), allocated_.load(std::memory_order_relaxed),
                freed_.load(std::memory_order_relaxed)};
    }
    // Peak becomes current. A concurrent add may land between the two steps; the second raise
    // keeps the peak at least the current value afterwards.
    void reset_peak() noexcept {
        peak_.store(current_.load(std::memory_order_relaxed), std::memory_order_relaxed);
        raise_peak(current_.load(std::memory_order_relaxed));
    }
    void set_peak(std::int64_t value) noexcept {
        peak_.store(value, std::memory_order_relaxed);
        raise_peak(current_.load(std::memory_order_relaxed));
    }
    void raise_peak(std::int64_t value) noexcept {
        std::int64_t seen = peak_.load(std::memory_order_relaxed);
        while (value > seen && !peak_.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
        }
    }
    void reset_accumulated() noexcept {
        allocated_.store(0, std::memory_order_relaxed);
        freed_.store(0, std::memory_order_relaxed);
    }

private:
    std::atomic<std::int64_t> current_{0};
    std::atomic<std::int64_t> peak_{0};
    std::atomic<std::int64_t> allocated_{0};
    std::atomic<std::int64_t> freed_{0};
};

template <>
class metric<single_thread_counters> {
public:
    void add(std::int64_t amount) noexcept {
        allocated_ += amount;
        current_ += amount;
        if (current_ > peak_) peak_ = current_;
    }
    void remove(std::int64_t amount) noexcept {
        freed_ += amount;
        current_ -= amount;
    }
    [[nodiscard]] metric_figures read() const noexcept { return {current_, peak_, allocated_, freed_}; }
    void reset_peak() noexcept { peak_ = current_; }
    void set_peak(std::int64_t value) noexcept { peak_ = value > current_ ? value : current_; }
    void raise_peak(std::int64_t value) noexcept { peak_ = value > peak_ ? value : peak_; }
    void reset_accumulated() noexcept { allocated_ = freed_ = 0; }

private:
    std::int64_t current_ = 0;
    std::int64_t peak_ = 0;
    std::int64_t allocated_ = 0;
    std::int64_t freed_ = 0;
};

template <class Policy>
class event_count;

template <>
class event_count<concurrent_counters> {
public:
    void increment() noexcept { value_.fetch_add(1, std::memory_order_relaxed); }
    [[nodiscard]] std::int64_t read() const noexcept { return value_.load(std::memory_order_relaxed); }
    void reset() noexcept { value_.store(0, std::memory_order_relaxed); }

private:
    std::atomic<std::int64_t> value_{0};
};

template <>
class event_count<single_thread_counters> {
public:
    void increment() noexcept { ++value_; }
    [[nodiscard]] std::int64_t read() const noexcept { return value_; }
    void reset() noexcept { value_ = 0; }

private:
    std::int64_t value_ = 0;
};

}  // namespace detail
}  // namespace poolkit
