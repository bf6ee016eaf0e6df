// cuda_events::declare_lasting on a real GPU: a declared stream keeps the id the driver gave it
// (identity() then asks the driver nothing: it answers even in capture, where asking would break
// the capture), and a stream in capture is not declared, its capture left valid.
#include "support.hpp"

#include <poolkit/adaptor/cuda_events.hpp>
#include <poolkit/presets.hpp>

#include <cuda_runtime_api.h>

#include <doctest/doctest.h>

#include <cstdint>

TEST_CASE("cuda_events: a stream declared lasting keeps its id, and a pool serves it") {
    // Never destroyed, as a lasting stream must not be: a destroyed one would lend its id.
    static cudaStream_t lasting = [] {
        cudaStream_t made{};
        REQUIRE(cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking) == cudaSuccess);
        return made;
    }();
    unsigned long long driver_id = 0;
    REQUIRE(cudaStreamGetId(lasting, &driver_id) == cudaSuccess);
    CHECK(poolkit::cuda_events::identity(poolkit::stream_ref{lasting}) == driver_id);
    CHECK(poolkit::cuda_events::declare_lasting(poolkit::stream_ref{lasting}));
    CHECK(poolkit::cuda_events::declare_lasting(poolkit::stream_ref{lasting}));  // again: still declared
    CHECK(poolkit::cuda_events::identity(poolkit::stream_ref{lasting}) == driver_id);
    CHECK(poolkit::cuda_events::declare_lasting(poolkit::stream_ref{cudaStreamLegacy}));  // nothing to declare
    // In capture the driver cannot be asked (cuStreamGetId would fail and invalidate the capture):
    // the id comes from the table, and the capture ends valid.
    REQUIRE(cudaStreamBeginCapture(lasting, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    CHECK(poolkit::cuda_events::identity(poolkit::stream_ref{lasting}) == driver_id);
    cudaGraph_t graph{};
    CHECK(cudaStreamEndCapture(lasting, &graph) == cudaSuccess);
    if (graph != nullptr) cudaGraphDestroy(graph);

    poolkit::expandable_device_resource pool;
    poolkit::test::scoped_stream other;
    void* a = pool.allocate_async(1 << 20, 256, poolkit::stream_ref{lasting});
    REQUIRE(cudaMemsetAsync(a, 1, 1 << 20, lasting) == cudaSuccess);
    pool.deallocate_async(a, 1 << 20, 256, poolkit::stream_ref{lasting});
    void* b = pool.allocate_async(1 << 20, 256, other);  // another stream: a's block only after its work
    REQUIRE(cudaMemsetAsync(b, 2, 1 << 20, other.handle) == cudaSuccess);
    pool.deallocate_async(b, 1 << 20, 256, other);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    pool.check_invariants();
    pool.release();
}

TEST_CASE("cuda_events: a stream in capture is not declared lasting, and its capture stays valid") {
    poolkit::test::scoped_stream capturing;
    REQUIRE(cudaStreamBeginCapture(capturing.handle, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    CHECK_FALSE(poolkit::cuda_events::declare_lasting(capturing));
    cudaGraph_t graph{};
    CHECK(cudaStreamEndCapture(capturing.handle, &graph) == cudaSuccess);
    if (graph != nullptr) cudaGraphDestroy(graph);
    unsigned long long driver_id = 0;
    REQUIRE(cudaStreamGetId(capturing.handle, &driver_id) == cudaSuccess);
    CHECK(poolkit::cuda_events::identity(capturing) == driver_id);  // not declared: asked of the driver
}
