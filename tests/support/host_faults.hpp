// Host out-of-memory on demand: the test binaries replace the global operator new
// (support/host_faults.cpp) so that a test can make a host allocation of its own thread throw
// std::bad_alloc, as a full host would.
#pragma once

#include <cstddef>

namespace poolkit::test {

// The next `succeeding` host allocations of this thread succeed and the one after throws
// std::bad_alloc (once); then they succeed again.
void fail_host_allocation_after(long succeeding) noexcept;
void stop_failing_host_allocations() noexcept;
// Host allocations made to throw so far, on every thread.
[[nodiscard]] long host_allocations_failed() noexcept;
// Bytes this thread has asked of operator new so far: what a call built on the host, without a clock.
[[nodiscard]] std::size_t host_bytes_requested() noexcept;

}  // namespace poolkit::test
