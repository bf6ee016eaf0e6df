// The global operator new of the test binaries, which fails on demand (host_faults.hpp).
#include "host_faults.hpp"

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace {

// -1: host allocations succeed; n >= 0: the next n succeed and the one after throws.
thread_local long host_allocations_before_failure = -1;
thread_local std::size_t host_bytes = 0;
std::atomic<long> host_failures{0};

}  // namespace

namespace poolkit::test {

void fail_host_allocation_after(long succeeding) noexcept { host_allocations_before_failure = succeeding; }
void stop_failing_host_allocations() noexcept { host_allocations_before_failure = -1; }
long host_allocations_failed() noexcept { return host_failures.load(); }
std::size_t host_bytes_requested() noexcept { return host_bytes; }

}  // namespace poolkit::test

// The replacement pairs operator new with malloc and operator delete with free, as it must; GCC
// cannot see that pairing across the replaced functions and warns at -O2.
#if defined(__GNUC__) && !defined(__clang__)
#  pragma GCC diagnostic push
#  pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t bytes) {
    if (host_allocations_before_failure == 0) {
        host_allocations_before_failure = -1;
        ++host_failures;
        throw std::bad_alloc();
    }
    if (host_allocations_before_failure > 0) --host_allocations_before_failure;
    host_bytes += bytes;
    if (void* pointer = std::malloc(bytes == 0 ? 1 : bytes)) return pointer;
    throw std::bad_alloc();
}
// The nothrow forms too (std::stable_sort's buffer, for one): each form is paired with the
// replaced delete, and sanitizers check that the pair matches.
void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept {
    try {
        return ::operator new(bytes);
    } catch (...) {
        return nullptr;
    }
}
void operator delete(void* pointer) noexcept { std::free(pointer); }
void operator delete(void* pointer, std::size_t) noexcept { std::free(pointer); }
void operator delete(void* pointer, const std::nothrow_t&) noexcept { std::free(pointer); }
#if defined(__GNUC__) && !defined(__clang__)
#  pragma GCC diagnostic pop
#endif
