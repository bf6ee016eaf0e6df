// logging<Upstream>: writes every allocate and free as one CSV row in RMM's format, so that
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
#include <poolkit/core/properties.hpp>
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
#include <utility>

namespace poolkit {

namespace detail {
// A small number for the calling thread, the same in every logger.
inline std::uint64_t log_thread_number() noexcept {
    static std::atomic<std::uint64_t> next{0};
    thread_local const std::uint64_t mine = next.fetch_add(1, std::memory_order_relaxed);
    return mine;
}
}  // namespace detail

template <resource Upstream>
class logging : public forward_properties<logging<Upstream>, Upstream> {
public:
    using upstream_type = Upstream;

    // Writes to std::clog.
    logging()
        requires std::default_initializable<Upstream>
        : logging(Upstream{}, std::clog) {}

    // Writes to `out`, which must outlive the logger.
    logging(Upstream upstream, std::ostream& out) : upstream_(std::move(upstream)), out_(&out) { write_header(); }

    // Writes to the file at `path` (replaced if it exists); std::runtime_error if it cannot be opened.
    logging(Upstream upstream, const std::string& path)
        : upstream_(std::move(upstream)), file_(std::make_unique<std::ofstream>(path, std::ios::trunc)) {
        if (!*file_) throw std::runtime_error("poolkit: logging cannot open " + path);
        out_ = file_.get();
        write_header();
    }

    logging(const logging&) = delete;
    logging& operator=(const logging&) = delete;
    ~logging() { flush(); }

    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        try {
            void* pointer = upstream_.allocate(bytes, alignment);
            if (pointer != nullptr) write(trace_action::allocate, pointer, bytes, 0);
            return pointer;
        } catch (const std::bad_alloc&) {
            write_failure(bytes, 0);
            throw;
        }
    }
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        write(trace_action::free, pointer, bytes, 0);  // before: the address may be handed out again at once
        upstream_.deallocate(pointer, bytes, alignment);
    }

    [[nodiscard]] void* try_allocate(std::size_t bytes, std::size_t alignment = default_alignment) noexcept
        requires has_try_allocate<Upstream>
    {
        void* pointer = upstream_.try_allocate(bytes, alignment);
        if (pointer != nullptr) {
            write(trace_action::allocate, pointer, bytes, 0);
        } else if (bytes != 0) {
            write_failure(bytes, 0);
        }
        return pointer;
    }

    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream)
        requires stream_resource<Upstream>
    {
        try {
            void* pointer = upstream_.allocate_async(bytes, alignment, stream);
            if (pointer != nullptr) write(trace_action::allocate, pointer, bytes, stream_id(stream));
            return pointer;
        } catch (const std::bad_alloc&) {
            write_failure(bytes, stream_id(stream));
            throw;
        }
    }
    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept
        requires stream_resource<Upstream>
    {
        if (pointer == nullptr) return;
        write(trace_action::free, pointer, bytes, stream_id(stream));
        upstream_.deallocate_async(pointer, bytes, alignment, stream);
    }

    void release()
        requires has_release<Upstream>
    {
        upstream_.release();
    }
    [[nodiscard]] bool owns(const void* pointer) const
        requires has_owns<Upstream>
    {
        return upstream_.owns(pointer);
    }
    void check_invariants() const
        requires has_check_invariants<Upstream>
    {
        upstream_.check_invariants();
    }

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

    friend bool operator==(const logging& a, const logging& b) { return a.upstream_ == b.upstream_; }

private:
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
            *out_ << thread << ',' << (seconds / 3600 < 10 ? "0" : "") << seconds / 3600 << ':'
                  << (seconds / 60 % 60 < 10 ? "0" : "") << seconds / 60 % 60 << ':' << (seconds % 60 < 10 ? "0" : "")
                  << seconds % 60 << '.' << std::string(6 - std::to_string(time % 1'000'000).size(), '0')
                  << time % 1'000'000 << ",allocate failure,0x0," << bytes << ',' << stream << '\n';
        } catch (...) {
        }
    }

    [[no_unique_address]] Upstream upstream_;
    std::unique_ptr<std::ofstream> file_;  // when the logger owns its sink
    std::ostream* out_ = nullptr;
    std::mutex mutex_;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

static_assert(resource_with<logging<detail::resource_archetype<host_accessible>>, host_accessible>);
static_assert(has_upstream<logging<detail::resource_archetype<>>> && !has_release<logging<detail::resource_archetype<>>>);

}  // namespace poolkit
