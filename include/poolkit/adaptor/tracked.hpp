// tracked<Upstream>: remembers every outstanding allocation, optionally with the call stack that
// made it, and reports what is still live (a leak report).
//
// outstanding() lists the live allocations (address, bytes, alignment, stream, sequence number,
// backtrace); leak_report() renders them as text, largest first. On destruction, in builds with
// POOLKIT_ENABLE_ASSERTS, a non-empty report goes to stderr (memory is not freed: it belongs to
// Upstream). A deallocate of a pointer it does not know (foreign, or freed twice), or with another
// size, is a failed POOLKIT_ASSERT; without assertions a pointer it does not know is not passed
// on, and one with another size is passed on with the size it was allocated with. Where a bad
// free must not end the process (a C API, a foreign runtime), checked_deallocate and
// checked_deallocate_async refuse it instead: std::invalid_argument saying why, nothing changed;
// while_outstanding runs a use of a block (record_use) only while it is outstanding.
// Complexity: O(1) expected per call (an open-addressing table by address: no host allocation per
// block), plus a backtrace() (a few µs) per allocate when options.capture_backtraces is set.
// Thread safety: a mutex guards the records; otherwise as Upstream. Alignment, stream semantics
// and exhaustion: Upstream's; when there is no host memory for the record of a block (the table
// grows, or a backtrace), the block goes back to Upstream and std::bad_alloc propagates (try_
// forms: nullptr), so nothing is lost.
#pragma once

#include <poolkit/adaptor/detail/pointer_map.hpp>
#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/forwarding.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/in_place.hpp>
#include <poolkit/core/ref.hpp>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if defined(__has_include)
#  if __has_include(<execinfo.h>)
#    include <execinfo.h>
#    define POOLKIT_HAS_EXECINFO 1
#  endif
#endif
#ifndef POOLKIT_HAS_EXECINFO
#  define POOLKIT_HAS_EXECINFO 0
#endif

namespace poolkit {

struct tracked_options {
    // Record the call stack of every allocate (glibc's backtrace(); empty where it is missing).
    bool capture_backtraces = false;
    // Frames kept per backtrace.
    int backtrace_depth = 16;
};

// One live allocation.
struct tracked_allocation {
    const void* pointer = nullptr;
    std::size_t bytes = 0;
    std::size_t alignment = 0;
    std::uintptr_t stream = 0;  // stream_id of an allocate_async, 0 otherwise
    std::uint64_t sequence = 0;  // the n-th allocation through this tracker
    std::vector<void*> backtrace;  // return addresses, innermost first
};

template <resource Upstream>
class tracked : public forwarding<tracked<Upstream>, Upstream> {
    friend forwarding<tracked, Upstream>;

public:
    using upstream_type = Upstream;
    using options_type = tracked_options;

    tracked()
        requires std::default_initializable<Upstream>
    = default;
    explicit tracked(Upstream upstream, tracked_options options = {}) : upstream_(std::move(upstream)), options_(options) {}
    template <class... Args>
        requires constructible_in_place<Upstream, Args...>
    explicit tracked(std::in_place_t, Args&&... args) : upstream_(build_from<Upstream>(std::forward<Args>(args)...)) {}
    template <class... Args>
        requires constructible_in_place<Upstream, Args...>
    tracked(std::in_place_t, tracked_options options, Args&&... args)
        : upstream_(build_from<Upstream>(std::forward<Args>(args)...)), options_(options) {}

    tracked(const tracked&) = delete;
    tracked& operator=(const tracked&) = delete;

    ~tracked() {
#if POOLKIT_ENABLE_ASSERTS
        if (live_blocks() != 0) {
            const std::string report = leak_report();
            std::fprintf(stderr, "%s", report.c_str());
            std::fflush(stderr);
        }
#endif
    }

    // No two outstanding allocations overlap; then Upstream's invariants.
    void check_invariants() const {
        {
            std::lock_guard lock(mutex_);
            std::vector<std::pair<std::uintptr_t, std::size_t>> blocks;
            blocks.reserve(live_.size());
            live_.for_each(
                [&](const void* address, const record& r) { blocks.emplace_back(reinterpret_cast<std::uintptr_t>(address), r.bytes); });
            std::sort(blocks.begin(), blocks.end());
            std::uintptr_t previous_end = 0;
            for (const auto& [address, bytes] : blocks) {
                POOLKIT_VERIFY(address >= previous_end, "tracked: two outstanding allocations overlap");
                previous_end = address + bytes;
            }
        }
        if constexpr (has_check_invariants<Upstream>) upstream_.check_invariants();
    }

    // The live allocations, in address order.
    [[nodiscard]] std::vector<tracked_allocation> outstanding() const {
        std::lock_guard lock(mutex_);
        std::vector<tracked_allocation> result;
        result.reserve(live_.size());
        live_.for_each([&](const void* address, const record& r) {
            tracked_allocation& a = result.emplace_back();
            a.pointer = address;
            a.bytes = r.bytes;
            a.alignment = r.alignment;
            a.stream = r.stream;
            a.sequence = r.sequence;
            if (const auto* frames = backtraces_.find(address)) a.backtrace = *frames;
        });
        std::sort(result.begin(), result.end(),
                  [](const tracked_allocation& a, const tracked_allocation& b) { return a.pointer < b.pointer; });
        return result;
    }
    [[nodiscard]] std::size_t live_blocks() const {
        std::lock_guard lock(mutex_);
        return live_.size();
    }
    [[nodiscard]] std::size_t live_bytes() const {
        std::lock_guard lock(mutex_);
        return live_bytes_;
    }

    // "N allocations (B bytes) outstanding", then one line per allocation, largest first (at most
    // `limit` of them), each followed by its backtrace when one was captured.
    [[nodiscard]] std::string leak_report(std::size_t limit = 20) const {
        std::vector<tracked_allocation> live = outstanding();
        std::sort(live.begin(), live.end(), [](const tracked_allocation& a, const tracked_allocation& b) {
            return a.bytes > b.bytes || (a.bytes == b.bytes && a.sequence < b.sequence);
        });
        std::size_t total = 0;
        for (const auto& record : live) total += record.bytes;
        std::string report = "poolkit: tracked: " + std::to_string(live.size()) + " allocation" + (live.size() == 1 ? "" : "s") + " (" +
                             std::to_string(total) + " bytes) outstanding\n";
        for (std::size_t i = 0; i < live.size() && i < limit; ++i) {
            const tracked_allocation& record = live[i];
            char line[160];
            std::snprintf(line, sizeof line, "  %p: %zu bytes, alignment %zu, stream %#llx, allocation #%llu\n", record.pointer,
                          record.bytes, record.alignment, static_cast<unsigned long long>(record.stream),
                          static_cast<unsigned long long>(record.sequence));
            report += line;
            report += symbolize(record.backtrace);
        }
        if (live.size() > limit) report += "  ... and " + std::to_string(live.size() - limit) + " more\n";
        return report;
    }

    // deallocate, refusing a bad free: throws std::invalid_argument, changing nothing, when
    // `pointer` is not the start of an outstanding allocation (inside one, never allocated here,
    // or freed already) or `bytes` is not its size; the message names `pointer` and, after it,
    // `where` (" on device 0", say). O(1) expected; O(n) in the live allocations when refused.
    void checked_deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment, std::string_view where = {}) {
        if (pointer == nullptr) return;
        forget_checked(pointer, bytes, where);
        this->undo_allocate({bytes, alignment, allocation_kind::allocate}, pointer);
    }
    void checked_deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream, std::string_view where = {})
        requires stream_resource<Upstream>
    {
        if (pointer == nullptr) return;
        forget_checked(pointer, bytes, where);
        this->undo_allocate({bytes, alignment, allocation_kind::allocate_async, stream}, pointer);
    }

    // use(), while the allocation starting at `pointer` stays outstanding (a free of it waits);
    // std::invalid_argument saying why, as checked_deallocate, naming `call`, when there is none.
    template <class Use>
    decltype(auto) while_outstanding(const void* pointer, std::string_view call, std::string_view where, Use&& use) {
        std::lock_guard lock(mutex_);
        if (live_.find(pointer) == nullptr) throw std::invalid_argument(not_outstanding(call, pointer, where));
        return use();
    }

    [[nodiscard]] const tracked_options& options() const noexcept { return options_; }
    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }

    // Identity: each keeps its own records.
    friend bool operator==(const tracked& a, const tracked& b) noexcept { return &a == &b; }

private:
    // Every allocating entry point: a block is recorded once Upstream handed it out; if recording
    // fails (no host memory for the record), the block goes back and the failure is reported.
    template <class Call>
    void* around_allocate(const allocation_request& request, Call&& call) {
        void* pointer = call();
        if (pointer == nullptr) return nullptr;
        try {
            remember(pointer, request.bytes, request.alignment,
                     request.kind == allocation_kind::allocate_async ? stream_id(request.stream) : 0);
        } catch (...) {
            this->undo_allocate(request, pointer);
            throw;
        }
        return pointer;
    }
    template <class Call>
    void around_deallocate(const deallocation_request& request, Call&& call) noexcept {
        if (request.pointer == nullptr) return;
        std::size_t allocated = request.bytes;
        if (!forget(request.pointer, allocated)) return;  // not outstanding: nothing to pass on
        if (allocated == request.bytes) {
            call();
            return;
        }
        // A wrong size that assertions did not stop: Upstream gets back the block as it was taken.
        const allocation_request taken{allocated, request.alignment,
                                       request.on_stream ? allocation_kind::allocate_async : allocation_kind::allocate, request.stream};
        this->undo_allocate(taken, request.pointer);
    }

    void remember(void* pointer, std::size_t bytes, std::size_t alignment, std::uintptr_t stream) {
        if (pointer == nullptr) return;
        std::vector<void*> frames;
#if POOLKIT_HAS_EXECINFO
        if (options_.capture_backtraces && options_.backtrace_depth > 0) {
            frames.resize(static_cast<std::size_t>(options_.backtrace_depth));
            const int depth = ::backtrace(frames.data(), options_.backtrace_depth);
            frames.resize(static_cast<std::size_t>(std::max(depth, 0)));
        }
#endif
        std::lock_guard lock(mutex_);
        const bool fresh = live_.find(pointer) == nullptr;
        POOLKIT_ASSERT(fresh, "tracked: the upstream handed out an address that is still live");
        if (!fresh) return;
        live_.insert(pointer, record{bytes, alignment, stream, sequence_});
        if (!frames.empty()) {
            try {
                backtraces_.insert(pointer, std::move(frames));
            } catch (...) {
                live_.erase(pointer);
                throw;
            }
        }
        ++sequence_;
        live_bytes_ += bytes;
    }

    // Drops the record of `pointer` and sets `bytes` (as the caller says) to the bytes it was
    // allocated with; false, changing nothing, when it is not outstanding.
    bool forget(void* pointer, std::size_t& bytes) noexcept {
        std::lock_guard lock(mutex_);
        const record* found = live_.find(pointer);
        POOLKIT_ASSERT(found != nullptr, "tracked: deallocate of a pointer that is not outstanding (never allocated here, or freed twice)");
        if (found == nullptr) return false;
        POOLKIT_ASSERT(found->bytes == bytes, "tracked: deallocate with a size other than the one allocated");
        bytes = found->bytes;
        drop(pointer, bytes);
        return true;
    }

    // As forget, but a pointer that is not outstanding, or a size other than the one allocated,
    // throws std::invalid_argument saying so, and nothing changes.
    void forget_checked(void* pointer, std::size_t bytes, std::string_view where) {
        std::lock_guard lock(mutex_);
        const record* found = live_.find(pointer);
        if (found == nullptr) throw std::invalid_argument(not_outstanding("free", pointer, where));
        if (found->bytes != bytes) {
            throw std::invalid_argument("poolkit: free of " + address_text(pointer) + " with " + std::to_string(bytes) + " bytes" +
                                        std::string(where) + ": the block was allocated with " + std::to_string(found->bytes));
        }
        drop(pointer, bytes);
    }

    // Under the lock: forgets the outstanding block at `pointer` of `bytes`.
    void drop(const void* pointer, std::size_t bytes) noexcept {
        live_bytes_ -= bytes;
        live_.erase(pointer);
        if (!backtraces_.empty()) backtraces_.erase(pointer);
    }

    // Why `pointer` is no outstanding allocation's start; under the lock. O(n): only a refused call
    // pays it.
    std::string not_outstanding(std::string_view call, const void* pointer, std::string_view where) const {
        const auto address = reinterpret_cast<std::uintptr_t>(pointer);
        const std::string said = "poolkit: " + std::string(call) + " of " + address_text(pointer) + std::string(where);
        std::string inside;
        live_.for_each([&](const void* start, const record& r) {
            const auto begin = reinterpret_cast<std::uintptr_t>(start);
            if (begin < address && address - begin < r.bytes) {
                inside = ": inside the block at " + address_text(start) + " (" + std::to_string(r.bytes) + " bytes), not its start";
            }
        });
        return said + (inside.empty() ? ": not a live block (never allocated here, or freed already)" : inside);
    }

    static std::string address_text(const void* pointer) {
        char text[32];
        std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(pointer)));
        return text;
    }

    static std::string symbolize(const std::vector<void*>& frames) {
        std::string text;
#if POOLKIT_HAS_EXECINFO
        if (frames.empty()) return text;
        char** names = ::backtrace_symbols(frames.data(), static_cast<int>(frames.size()));
        for (std::size_t i = 0; i < frames.size(); ++i) {
            text += "      ";
            text += names ? names[i] : "?";
            text += '\n';
        }
        std::free(names);  // NOLINT: backtrace_symbols' contract
#else
        static_cast<void>(frames);
#endif
        return text;
    }

    Upstream upstream_;  // not [[no_unique_address]]: built in place from a prvalue (build_from)
    tracked_options options_;
    mutable std::mutex mutex_;
    // What tracked_allocation says of a block, but its address (the key) and backtrace.
    struct record {
        std::size_t bytes = 0;
        std::size_t alignment = 0;
        std::uintptr_t stream = 0;
        std::uint64_t sequence = 0;
    };
    detail::pointer_map<record> live_;  // invariant: exactly the allocations not yet freed
    detail::pointer_map<std::vector<void*>> backtraces_;  // of the live blocks that have one
    std::size_t live_bytes_ = 0;
    std::uint64_t sequence_ = 0;
};

static_assert(resource_with<tracked<detail::resource_archetype<host_accessible>>, host_accessible>);
static_assert(has_upstream<tracked<detail::resource_archetype<>>> && has_check_invariants<tracked<detail::resource_archetype<>>>);

// An lvalue is referred to, an rvalue owned (docs/concepts.md).
template <resource R>
tracked(R&, tracked_options = {}) -> tracked<ref<R>>;
template <resource R>
    requires(!std::is_lvalue_reference_v<R>)
tracked(R&&, tracked_options = {}) -> tracked<R>;

// The names before the naming scheme of docs/concepts.md (Names), kept for one release.
template <resource Upstream>
using tracking [[deprecated("poolkit: tracking<> is now tracked<> (docs/concepts.md, Names)")]] = tracked<Upstream>;
using tracking_options [[deprecated("poolkit: tracking_options is now tracked_options (docs/concepts.md, Names)")]] = tracked_options;

}  // namespace poolkit
