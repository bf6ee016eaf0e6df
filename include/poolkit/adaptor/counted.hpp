// counted<Upstream, Counters>: counts what passes through it, with PyTorch's memory_stats()
// names.
//
// For each metric it keeps current, peak, total allocated and total freed: allocations (blocks),
// allocated bytes (the block size where Upstream tells it through block_size(bytes, alignment),
// else the bytes asked rounded up to count_in_units_of(), 1 by default; PyTorch rounds to 512, so
// a unit of 512 makes the figures compare with its allocator's), requested bytes (as asked); and
// the allocate calls that failed (OOMs).
// Where it sits decides what it sees: around a whole composition it sees what users hold; between
// a strategy and its upstream (best_fit<ref<counted<cuda_device_resource>>>) it sees what the
// strategy reserves. memory_stats() reports both: the reserved figures (reserved_bytes.*,
// segment.*, num_device_alloc/free, num_alloc_retries) come from the nearest counted<> found
// by walking upstream_resource() (and through ref<>); where there is none, from a virtual memory
// below (reserved_bytes.all.current and .peak are its mapped bytes, num_device_alloc/free its map
// and unmap calls); else they are absent. reset_peak() and reset_accumulated() reset the peaks
// and the totals it reads there too.
// push_scope()/pop_scope() measure a region: pop returns what was allocated and freed since the
// matching push and the peak reached in between, then folds that peak into the enclosing one.
// Complexity: O(1) per call on top of Upstream. Thread safety: with concurrent_counters (the
// default) every counter is a relaxed atomic and may be updated from any number of threads, as
// Upstream allows; the scope stack takes a mutex. single_thread_counters uses plain integers.
// Alignment, stream semantics and exhaustion: Upstream's; a failed allocate is counted and rethrown.
#pragma once

#include <poolkit/adaptor/detail/counters.hpp>
#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/forwarding.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/in_place.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/core/stack.hpp>
#include <poolkit/core/virtual_memory.hpp>

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace poolkit {

// Every counter of a counted<> at one moment.
struct statistics_figures {
    metric_figures allocations;  // blocks
    metric_figures allocated_bytes;  // block sizes
    metric_figures requested_bytes;  // bytes as asked
    std::int64_t ooms = 0;  // allocate calls that threw std::bad_alloc (try_allocate: nullptr)
};

// The default argument is on the definition: after a declaration that carries it, nvcc's front
// end (13.0) emitted the definition with it again, which the host compiler refuses.
template <resource Upstream, class Counters>
class counted;

namespace detail {
template <class R>
inline constexpr bool is_counted = false;
template <class U, class C>
inline constexpr bool is_counted<counted<U, C>> = true;

// The block size Upstream reports for a request, or the request rounded up to `unit`.
template <class R>
std::size_t block_bytes(const R& resource, std::size_t bytes, std::size_t alignment, std::size_t unit = 1) noexcept {
    if constexpr (has_block_size<R>) {
        if (const std::size_t block = resource.block_size(bytes, alignment); block != 0) return block;
    }
    return bytes <= SIZE_MAX - (unit - 1) ? align_up(bytes, unit) : bytes;
}
}  // namespace detail

// The figures of the first counted<> met walking down from `r` (r itself included) through
// upstream_resource(), or nothing when there is none.
template <class R>
[[nodiscard]] std::optional<statistics_figures> find_statistics(const R& r) {
    return find_in_stack(r, []<class Layer>(const Layer& layer) -> std::optional<statistics_figures> {
        if constexpr (detail::is_counted<Layer>) return layer.figures();
        return std::nullopt;
    });
}

namespace detail {
// The reserved figures of a stack with no counted<> below the strategy: what the virtual
// memory it maps from (core/virtual_memory.hpp) says, now and at peak, and its map and unmap calls.
struct mapped_figures {
    std::int64_t current = 0;
    std::int64_t peak = 0;
    std::int64_t maps = 0;
    std::int64_t unmaps = 0;
};
template <class R>
std::optional<mapped_figures> find_mapped(const R& r) {
    return find_in_stack(r, []<class Layer>(const Layer& layer) -> std::optional<mapped_figures> {
        if constexpr (virtual_memory<Layer>) {
            return mapped_figures{static_cast<std::int64_t>(layer.mapped_bytes()), static_cast<std::int64_t>(layer.peak_mapped_bytes()),
                                  static_cast<std::int64_t>(layer.map_calls()), static_cast<std::int64_t>(layer.unmap_calls())};
        }
        return std::nullopt;
    });
}
}  // namespace detail

template <resource Upstream, class Counters = concurrent_counters>
class counted : public forwarding<counted<Upstream, Counters>, Upstream> {
    friend forwarding<counted, Upstream>;

public:
    using upstream_type = Upstream;

    counted()
        requires std::default_initializable<Upstream>
    = default;
    explicit counted(Upstream upstream) : upstream_(std::move(upstream)) {}
    // Builds the upstream in place, for upstreams that do not move (simulated_resource).
    template <class... Args>
        requires constructible_in_place<Upstream, Args...>
    explicit counted(std::in_place_t, Args&&... args) : upstream_(build_from<Upstream>(std::forward<Args>(args)...)) {}

    counted(const counted&) = delete;
    counted& operator=(const counted&) = delete;

    // Counters never go negative and peaks are at least the current values (exact when no other
    // thread is inside the resource); then Upstream's own invariants.
    void check_invariants() const {
        const statistics_figures now = figures();
        for (const metric_figures* m : {&now.allocations, &now.allocated_bytes, &now.requested_bytes}) {
            POOLKIT_VERIFY(m->current >= 0, "counted: a current count went negative (a free of what was not allocated here)");
            POOLKIT_VERIFY(m->peak >= m->current, "counted: a peak below its current value");
        }
        if constexpr (has_check_invariants<Upstream>) upstream_.check_invariants();
    }

    // Every counter, read one by one (not one atomic snapshot when other threads allocate).
    [[nodiscard]] statistics_figures figures() const noexcept {
        return {allocations_.read(), allocated_bytes_.read(), requested_bytes_.read(), ooms_.read()};
    }

    // PyTorch's memory_stats() for this resource and, for the reserved figures, the nearest
    // counted<> below it. Keys as in torch.cuda.memory_stats(): "allocated_bytes.all.current" ...
    [[nodiscard]] std::map<std::string, std::int64_t> memory_stats() const {
        std::map<std::string, std::int64_t> stats;
        const statistics_figures own = figures();
        const auto put = [&stats](const std::string& name, const metric_figures& m) {
            stats[name + ".all.current"] = m.current;
            stats[name + ".all.peak"] = m.peak;
            stats[name + ".all.allocated"] = m.allocated;
            stats[name + ".all.freed"] = m.freed;
        };
        put("allocation", own.allocations);
        put("allocated_bytes", own.allocated_bytes);
        put("requested_bytes", own.requested_bytes);
        put("active", own.allocations);  // nothing here waits on a stream: active is allocated
        put("active_bytes", own.allocated_bytes);
        stats["num_ooms"] = own.ooms;
        if (const auto reserved = find_statistics(upstream_)) {
            put("reserved_bytes", reserved->allocated_bytes);
            put("segment", reserved->allocations);
            stats["num_device_alloc"] = reserved->allocations.allocated;
            stats["num_device_free"] = reserved->allocations.freed;
            stats["num_alloc_retries"] = reserved->ooms;  // each upstream refusal made the strategy retry or fail
        } else if (const auto mapped = detail::find_mapped(upstream_)) {
            stats["reserved_bytes.all.current"] = mapped->current;
            stats["reserved_bytes.all.peak"] = mapped->peak;
            stats["num_device_alloc"] = mapped->maps - maps_before_.load(std::memory_order_relaxed);
            stats["num_device_free"] = mapped->unmaps - unmaps_before_.load(std::memory_order_relaxed);
        }
        return stats;
    }

    // Every peak becomes its current value (torch.cuda.reset_peak_memory_stats()): this layer's,
    // and those of the reserved figures memory_stats() reads below it (a counted<>, or a
    // virtual memory's peak of mapped bytes).
    void reset_peak() noexcept {
        allocations_.reset_peak();
        allocated_bytes_.reset_peak();
        requested_bytes_.reset_peak();
        reset_below([](auto& below) { below.reset_peak(); },
                    [](auto& memory) -> decltype(memory.reset_peak_mapped_bytes()) { memory.reset_peak_mapped_bytes(); });
    }
    // Totals allocated and freed and the OOM count restart at 0 (reset_accumulated_memory_stats()):
    // this layer's, and those of the reserved figures memory_stats() reads below it (a counted<>,
    // or a virtual memory's map and unmap calls, counted from here on).
    // An open scope's totals go on counting from its push.
    void reset_accumulated() {
        {
            std::lock_guard lock(scopes_mutex_);
            const statistics_figures now = figures();
            const auto shift = [](metric_figures& before, const metric_figures& reset) {
                before.allocated -= reset.allocated;
                before.freed -= reset.freed;
            };
            for (statistics_figures& scope : scopes_) {
                shift(scope.allocations, now.allocations);
                shift(scope.allocated_bytes, now.allocated_bytes);
                shift(scope.requested_bytes, now.requested_bytes);
                scope.ooms -= now.ooms;
            }
            allocations_.reset_accumulated();
            allocated_bytes_.reset_accumulated();
            requested_bytes_.reset_accumulated();
            ooms_.reset();
        }
        reset_below([](auto& below) { below.reset_accumulated(); },
                    [this](auto& memory) -> decltype(static_cast<void>(memory.map_calls() + memory.unmap_calls())) {
                        maps_before_.store(static_cast<std::int64_t>(memory.map_calls()), std::memory_order_relaxed);
                        unmaps_before_.store(static_cast<std::int64_t>(memory.unmap_calls()), std::memory_order_relaxed);
                    });
    }

    // Opens a scope: its totals start at 0 and its peaks at the current values.
    void push_scope() {
        std::lock_guard lock(scopes_mutex_);
        scopes_.push_back(figures());
        reset_peak();
    }
    // Closes the innermost scope and returns its figures: current as now, peak reached inside,
    // totals allocated and freed inside, OOMs inside. The enclosing peak keeps the larger of the
    // two. Requires: a scope is open.
    statistics_figures pop_scope() {
        std::lock_guard lock(scopes_mutex_);
        POOLKIT_ASSERT(!scopes_.empty(), "pop_scope without push_scope");
        if (scopes_.empty()) return figures();
        const statistics_figures outer = scopes_.back();
        scopes_.pop_back();
        statistics_figures inner = figures();
        const auto since = [](metric_figures& m, const metric_figures& before) {
            m.allocated -= before.allocated;
            m.freed -= before.freed;
        };
        since(inner.allocations, outer.allocations);
        since(inner.allocated_bytes, outer.allocated_bytes);
        since(inner.requested_bytes, outer.requested_bytes);
        inner.ooms -= outer.ooms;
        allocations_.raise_peak(outer.allocations.peak);
        allocated_bytes_.raise_peak(outer.allocated_bytes.peak);
        requested_bytes_.raise_peak(outer.requested_bytes.peak);
        return inner;
    }
    [[nodiscard]] std::size_t scope_depth() const {
        std::lock_guard lock(scopes_mutex_);
        return scopes_.size();
    }

    // Allocated bytes count a block Upstream tells no size of as its bytes rounded up to `unit`, a
    // power of two (512: as PyTorch's allocator counts). Set before the first allocation.
    void count_in_units_of(std::size_t unit) noexcept {
        POOLKIT_ASSERT(is_power_of_two(unit), "counted: a unit that is not a power of two");
        POOLKIT_ASSERT(allocations_.read().current == 0, "counted: the unit changed with blocks live");
        unit_ = unit;
    }
    [[nodiscard]] std::size_t unit() const noexcept { return unit_; }

    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }

    // Equal when the upstreams are: memory passes between them as it would between those.
    friend bool operator==(const counted& a, const counted& b) { return a.upstream_ == b.upstream_; }

private:
    // The reset of the reserved figures memory_stats() reads below this layer: of_counted(layer)
    // on the first counted<> met walking down, or of_memory(layer) on the first virtual memory
    // that of_memory accepts, whichever comes first. of_memory's return type says which it
    // accepts (decltype of what it calls), as it is asked of every layer.
    template <class OfCounted, class OfMemory>
    void reset_below(OfCounted of_counted, OfMemory of_memory) {
        static_cast<void>(find_in_stack(upstream_, [&]<class Layer>(Layer& layer) -> std::optional<bool> {
            if constexpr (detail::is_counted<std::remove_const_t<Layer>> && !std::is_const_v<Layer>) {
                of_counted(layer);
                return true;
            } else if constexpr (virtual_memory<std::remove_const_t<Layer>> && requires { of_memory(layer); }) {
                of_memory(layer);
                return true;
            }
            return std::nullopt;
        }));
    }
    // Every allocating entry point: counted when it succeeds; a failure counts as an OOM, except a
    // cache miss (try_allocate_cached) and requests that could never succeed.
    template <class Call>
    void* around_allocate(const allocation_request& request, Call&& call) {
        void* pointer = nullptr;
        try {
            pointer = call();
        } catch (const std::bad_alloc&) {
            ooms_.increment();
            throw;
        }
        if (pointer != nullptr) {
            record_allocate(request.bytes, request.alignment);
        } else if (request.kind == allocation_kind::try_allocate && request.bytes != 0 && is_power_of_two(request.alignment)) {
            ooms_.increment();
        }
        return pointer;
    }
    template <class Call>
    void around_deallocate(const deallocation_request& request, Call&& call) noexcept {
        if (request.pointer == nullptr) return;
        call();
        record_deallocate(request.bytes, request.alignment);
    }

    void record_allocate(std::size_t bytes, std::size_t alignment) noexcept {
        allocations_.add(1);
        allocated_bytes_.add(static_cast<std::int64_t>(detail::block_bytes(upstream_, bytes, alignment, unit_)));
        requested_bytes_.add(static_cast<std::int64_t>(bytes));
    }
    void record_deallocate(std::size_t bytes, std::size_t alignment) noexcept {
        allocations_.remove(1);
        allocated_bytes_.remove(static_cast<std::int64_t>(detail::block_bytes(upstream_, bytes, alignment, unit_)));
        requested_bytes_.remove(static_cast<std::int64_t>(bytes));
    }

    Upstream upstream_;  // not [[no_unique_address]]: built in place from a prvalue (build_from)
    std::size_t unit_ = 1;  // count_in_units_of()
    detail::metric<Counters> allocations_;
    detail::metric<Counters> allocated_bytes_;
    detail::metric<Counters> requested_bytes_;
    detail::event_count<Counters> ooms_;
    // A virtual memory's map and unmap calls at the last reset_accumulated(), which its
    // num_device_alloc/free figures start from (the layer's own counts run for its life).
    std::atomic<std::int64_t> maps_before_{0}, unmaps_before_{0};
    mutable std::mutex scopes_mutex_;
    std::vector<statistics_figures> scopes_;  // what was read at each open push_scope(), innermost last
};

static_assert(resource_with<counted<detail::resource_archetype<host_accessible>>, host_accessible>);
static_assert(!has_property<counted<detail::resource_archetype<host_accessible>>, device_accessible>);
static_assert(has_upstream<counted<detail::resource_archetype<host_accessible>>>);
static_assert(!has_release<counted<detail::resource_archetype<host_accessible>>> &&
              !has_try_allocate<counted<detail::resource_archetype<host_accessible>>>);

// An lvalue is referred to, an rvalue owned (docs/concepts.md).
template <resource R>
counted(R&) -> counted<ref<R>>;
template <resource R>
    requires(!std::is_lvalue_reference_v<R>)
counted(R&&) -> counted<R>;

// The names before the naming scheme of docs/concepts.md (Names), kept for one release.
template <resource Upstream, class Counters = concurrent_counters>
using statistics [[deprecated("poolkit: statistics<> is now counted<> (docs/concepts.md, Names)")]] = counted<Upstream, Counters>;

}  // namespace poolkit
