// logged<Upstream>: writes every allocate and free as one CSV row in RMM's format, so that
// poolkit-replay (and RMM's replay benchmark) can replay what a program did.
//
//     Thread,Time,Action,Pointer,Size,Stream
//     0,00:00:00.000163,allocate,0x7f2a00000000,3145728,0
// Time counts from the logger's construction; Thread is a small number per thread, in order of
// first use; Stream is the stream handle for the *_async calls and 0 for the plain ones. A failed
// allocate writes an `allocate failure` row (as RMM does), then rethrows.
// Complexity: one formatted row per call, written under a mutex. Thread safety: as Upstream;
// rows from several threads never interleave. Alignment, stream semantics and exhaustion:
// Upstream's. The sink is an std::ostream the caller keeps alive, or a file the logger opens and
// owns; flush() pushes what is buffered.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/forwarding.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/in_place.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/core/trace_format.hpp>

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <new>
#include <ostream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace poolkit {

// Where rows go: `stream` when set (the caller keeps it alive), else the file at `path` (replaced
// if it exists), else std::clog.
struct logged_options {
    std::ostream* stream = nullptr;
    std::string path;
};

namespace detail {
// A small number for the calling thread, the same in every logger.
inline std::uint64_t log_thread_number() noexcept {
    static std::atomic<std::uint64_t> next{0};
    thread_local const std::uint64_t mine = next.fetch_add(1, std::memory_order_relaxed);
    return mine;
}
}  // namespace detail

template <resource Upstream>
class logged : public forwarding<logged<Upstream>, Upstream> {
    friend forwarding<logged, Upstream>;

public:
    using upstream_type = Upstream;
    using options_type = logged_options;

    // Writes to std::clog.
    logged()
        requires std::default_initializable<Upstream>
        : logged(Upstream{}, logged_options{}) {}

    // std::runtime_error if options.path cannot be opened.
    explicit logged(Upstream upstream, const logged_options& options = {}) : upstream_(std::move(upstream)) { open(options); }
    // Writes to `out`, which must outlive the logger.
    logged(Upstream upstream, std::ostream& out) : logged(std::move(upstream), logged_options{.stream = &out, .path = {}}) {}
    // Writes to the file at `path`.
    logged(Upstream upstream, const std::string& path) : logged(std::move(upstream), logged_options{.stream = nullptr, .path = path}) {}
    // Builds the upstream in place; writes to std::clog.
    template <class... Args>
        requires constructible_in_place<Upstream, Args...>
    explicit logged(std::in_place_t, Args&&... args) : upstream_(build_from<Upstream>(std::forward<Args>(args)...)) {
        open({});
    }
    template <class... Args>
        requires constructible_in_place<Upstream, Args...>
    logged(std::in_place_t, const logged_options& options, Args&&... args) : upstream_(build_from<Upstream>(std::forward<Args>(args)...)) {
        open(options);
    }

    logged(const logged&) = delete;
    logged& operator=(const logged&) = delete;
    ~logged() { flush(); }

    // Pushes buffered rows to the sink.
    void flush() noexcept {
        std::lock_guard lock(mutex_);
        try {
            out_->flush();
        } catch (...) {
        }
    }

    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }

    friend bool operator==(const logged& a, const logged& b) { return a.upstream_ == b.upstream_; }

private:
    // Every allocating entry point: a row for the block, or an `allocate failure` row (not for a
    // cache miss of try_allocate_cached).
    template <class Call>
    void* around_allocate(const allocation_request& request, Call&& call) {
        const std::uint64_t stream = request.kind == allocation_kind::allocate_async ? stream_id(request.stream) : 0;
        void* pointer = nullptr;
        try {
            pointer = call();
        } catch (const std::bad_alloc&) {
            write_failure(request.bytes, stream);
            throw;
        }
        if (pointer != nullptr) {
            write(trace_action::allocate, pointer, request.bytes, stream);
        } else if (request.kind == allocation_kind::try_allocate && request.bytes != 0) {
            write_failure(request.bytes, stream);
        }
        return pointer;
    }
    template <class Call>
    void around_deallocate(const deallocation_request& request, Call&& call) noexcept {
        if (request.pointer == nullptr) return;
        // Before the free: the address may be handed out again at once.
        write(trace_action::free, request.pointer, request.bytes, request.on_stream ? stream_id(request.stream) : 0);
        call();
    }

    void open(const logged_options& options) {
        if (options.stream != nullptr) {
            out_ = options.stream;
        } else if (!options.path.empty()) {
            file_ = std::make_unique<std::ofstream>(options.path, std::ios::trunc);
            if (!*file_) throw std::runtime_error("poolkit: logged cannot open " + options.path);
            out_ = file_.get();
        } else {
            out_ = &std::clog;
        }
        write_header();
    }

    void write_header() {
        std::lock_guard lock(mutex_);
        *out_ << trace_header << '\n';
    }

    [[nodiscard]] std::uint64_t elapsed_us() const noexcept {
        return static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start_).count());
    }

    // A row that cannot be written (a full disk) is dropped: deallocate must not throw.
    void write(trace_action action, void* pointer, std::size_t bytes, std::uint64_t stream) noexcept {
        const std::uint64_t thread = detail::log_thread_number();
        std::lock_guard lock(mutex_);
        try {
            write_trace_row(*out_, thread, elapsed_us(), action, reinterpret_cast<std::uintptr_t>(pointer), bytes, stream);
        } catch (...) {
        }
    }
    void write_failure(std::size_t bytes, std::uint64_t stream) noexcept {
        const std::uint64_t thread = detail::log_thread_number();
        std::lock_guard lock(mutex_);
        try {
            const auto time = elapsed_us();
            const auto seconds = time / 1'000'000;
            *out_ << thread << ',' << (seconds / 3600 < 10 ? "0" : "") << seconds / 3600 << ':' << (seconds / 60 % 60 < 10 ? "0" : "")
                  << seconds / 60 % 60 << ':' << (seconds % 60 < 10 ? "0" : "") << seconds % 60 << '.'
                  << std::string(6 - std::to_string(time % 1'000'000).size(), '0') << time % 1'000'000 << ",allocate failure,0x0," << bytes
                  << ',' << stream << '\n';
        } catch (...) {
        }
    }

    Upstream upstream_;  // not [[no_unique_address]]: built in place from a prvalue (build_from)
    std::unique_ptr<std::ofstream> file_;  // when the logger owns its sink
    std::ostream* out_ = nullptr;
    std::mutex mutex_;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

static_assert(resource_with<logged<detail::resource_archetype<host_accessible>>, host_accessible>);
static_assert(has_upstream<logged<detail::resource_archetype<>>> && !has_release<logged<detail::resource_archetype<>>>);

// An lvalue is referred to, an rvalue owned (docs/concepts.md).
template <resource R>
logged(R&, logged_options = {}) -> logged<ref<R>>;
template <resource R>
    requires(!std::is_lvalue_reference_v<R>)
logged(R&&, logged_options = {}) -> logged<R>;
template <resource R, class Sink>
logged(R&, Sink&&) -> logged<ref<R>>;
template <resource R, class Sink>
    requires(!std::is_lvalue_reference_v<R>)
logged(R&&, Sink&&) -> logged<R>;

// The names before the naming scheme of docs/concepts.md (Names), kept for one release.
template <resource Upstream>
using logging [[deprecated("poolkit: logging<> is now logged<> (docs/concepts.md, Names)")]] = logged<Upstream>;
using logging_options [[deprecated("poolkit: logging_options is now logged_options (docs/concepts.md, Names)")]] = logged_options;

}  // namespace poolkit
