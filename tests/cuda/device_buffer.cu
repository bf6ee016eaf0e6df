// device_buffer and device_uvector on a real GPU: allocation on a stream through poolkit pools,
// copies from host and device, growth that keeps the bytes, element access, moves, Thrust
// algorithms over the iterators, and bad input that leaks nothing.
#include "support.hpp"

#include <poolkit/adaptor/counted.hpp>
#include <poolkit/interop/device_buffer.hpp>
#include <poolkit/interop/device_uvector.hpp>
#include <poolkit/interop/thrust_allocator.hpp>
#include <poolkit/presets.hpp>
#include <poolkit/upstream/cuda_device_resource.hpp>

#include <thrust/reduce.h>
#include <thrust/sequence.h>
#include <thrust/transform.h>

#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace {

using namespace poolkit;

using test::scoped_stream;

// What the buffers took and gave back: live bytes must be 0 once they are gone.
using counted_pool = counted<caching_device_resource>;

std::vector<std::uint32_t> to_host(const device_uvector<std::uint32_t>& v, stream_ref stream) {
    std::vector<std::uint32_t> host(v.size());
    REQUIRE(cudaMemcpyAsync(host.data(), v.data(), v.size() * sizeof(std::uint32_t), cudaMemcpyDefault, stream.get()) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(stream.get()) == cudaSuccess);
    return host;
}

struct square {
    __device__ std::uint64_t operator()(std::uint32_t x) const { return std::uint64_t{x} * x; }
};

std::vector<std::uint32_t> counting_up(std::size_t count, std::uint32_t from = 0) {
    std::vector<std::uint32_t> values(count);
    std::iota(values.begin(), values.end(), from);
    return values;
}

}  // namespace

TEST_CASE("device_buffer: copies, growth that keeps the bytes, shrink_to_fit, moves, all freed on their stream") {
    counted_pool pool;
    scoped_stream stream;
    const std::vector<std::uint32_t> values = counting_up(1000);
    {
        device_buffer buffer(values.data(), values.size() * sizeof(std::uint32_t), stream, pool);
        CHECK(buffer.size() == 4000);
        CHECK(buffer.capacity() == 4000);
        CHECK(is_aligned(buffer.data(), default_alignment));
        CHECK(buffer.stream() == stream_ref{stream});

        buffer.reserve(1 << 20, stream);  // grows: the 4000 bytes move with it
        CHECK(buffer.capacity() == (1 << 20));
        CHECK(buffer.size() == 4000);
        buffer.resize(8000, stream);  // within capacity: no new allocation
        CHECK(buffer.capacity() == (1 << 20));
        buffer.shrink_to_fit(stream);
        CHECK(buffer.capacity() == 8000);
        buffer.resize(2000, stream);
        std::vector<std::uint32_t> back(500);
        REQUIRE(cudaMemcpyAsync(back.data(), buffer.data(), 2000, cudaMemcpyDefault, stream.handle) == cudaSuccess);
        REQUIRE(cudaStreamSynchronize(stream.handle) == cudaSuccess);
        CHECK(back == counting_up(500));

        device_buffer copy(buffer, stream, pool);  // a deep copy
        CHECK(copy.data() != buffer.data());
        CHECK(copy.size() == 2000);
        device_buffer moved(std::move(copy));
        CHECK(copy.data() == nullptr);  // NOLINT: moved-from is empty by contract
        CHECK(copy.is_empty());
        CHECK(moved.size() == 2000);
        device_buffer assigned(16, stream, pool);
        assigned = std::move(moved);  // frees its own 16 bytes first
        CHECK(assigned.size() == 2000);
        CHECK(pool.figures().allocated_bytes.current > 0);
    }
    REQUIRE(cudaStreamSynchronize(stream.handle) == cudaSuccess);
    CHECK(pool.figures().allocated_bytes.current == 0);
}

TEST_CASE("device_buffer: an empty buffer holds no memory; a zero-byte copy copies nothing") {
    counted_pool pool;
    scoped_stream stream;
    device_buffer empty(0, stream, pool);
    CHECK(empty.data() == nullptr);
    CHECK(empty.is_empty());
    device_buffer none(static_cast<const void*>(nullptr), 0, stream, pool);
    CHECK(none.data() == nullptr);
    empty.resize(64, stream);
    CHECK(empty.data() != nullptr);
    CHECK(pool.figures().allocated_bytes.current > 0);
    empty.resize(0, stream);
    empty.shrink_to_fit(stream);
    CHECK(empty.data() == nullptr);
    CHECK(pool.figures().allocated_bytes.current == 0);
}

TEST_CASE("device_buffer: without a resource named, the per-device registry's current resource serves it") {
    counted_pool pool;
    const device_resource_ref previous = set_current_device_resource(pool);
    {
        device_buffer buffer(1 << 16, default_stream);
        CHECK(pool.figures().allocated_bytes.current >= (1 << 16));
        CHECK(buffer.memory_resource() == device_resource_ref{pool});
    }
    set_current_device_resource(previous);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(pool.figures().allocated_bytes.current == 0);
}

TEST_CASE("device_uvector: host copies, element and set_element, resize that keeps the elements") {
    counted_pool pool;
    scoped_stream stream;
    const std::vector<std::uint32_t> values = counting_up(4096, 7);
    {
        device_uvector<std::uint32_t> v(values, stream, pool);
        CHECK(v.size() == 4096);
        CHECK(v.end() - v.begin() == 4096);
        CHECK(v.element(0, stream) == 7);
        CHECK(v.back_element(stream) == 7 + 4095);
        v.set_element(100, 12345, stream);
        CHECK(v.element(100, stream) == 12345);
        CHECK_THROWS_AS((void)v.element(4096, stream), std::out_of_range);
        CHECK_THROWS_AS(v.set_element(4096, 1, stream), std::out_of_range);

        v.resize(10000, stream);  // past capacity: the first 4096 elements move with it
        CHECK(v.size() == 10000);
        std::vector<std::uint32_t> host = to_host(v, stream);
        host.resize(4096);
        std::vector<std::uint32_t> expected = values;
        expected[100] = 12345;
        CHECK(host == expected);

        device_uvector<std::uint32_t> copy(v, stream, pool);
        CHECK(copy.size() == 10000);
        CHECK(copy.element(100, stream) == 12345);
        v.resize(10, stream);
        v.shrink_to_fit(stream);
        CHECK(v.capacity() == 10);
        CHECK(to_host(v, stream) == std::vector<std::uint32_t>(expected.begin(), expected.begin() + 10));
    }
    REQUIRE(cudaStreamSynchronize(stream.handle) == cudaSuccess);
    CHECK(pool.figures().allocated_bytes.current == 0);
}

TEST_CASE("device_uvector: Thrust fills, transforms and reduces over its iterators on its stream, temporaries from the pool") {
    counted_pool pool;
    scoped_stream stream;
    const std::size_t count = 1 << 20;
    device_uvector<std::uint32_t> v(count, stream, pool);
    device_uvector<std::uint64_t> squares(count, stream, pool);
    const auto on_stream = thrust_policy(pool, stream);
    thrust::sequence(on_stream, v.begin(), v.end());
    thrust::transform(on_stream, v.begin(), v.end(), squares.begin(), square{});
    const std::uint64_t sum = thrust::reduce(on_stream, squares.begin(), squares.end(), std::uint64_t{0});
    const std::uint64_t n = count - 1;
    CHECK(sum == n * (n + 1) * (2 * n + 1) / 6);
    CHECK(squares.element(1000, stream) == 1000000);
}

// Named for gpu-check's memcheck run, which leaves out the exhaustion tests (the failed cudaMalloc
// is an API error to compute-sanitizer).
TEST_CASE("device_uvector exhaustion: a count too large is length_error, an allocation too large out_of_memory, nothing leaks") {
    counted_pool pool;
    scoped_stream stream;
    using big = std::uint64_t;
    CHECK_THROWS_AS(device_uvector<big>(device_uvector<big>::max_size() + 1, stream, pool), std::length_error);
    device_uvector<big> v(16, stream, pool);
    v.set_element(3, 42, stream);
    CHECK_THROWS_AS(v.resize(device_uvector<big>::max_size() + 1, stream), std::length_error);
    // 1 PiB: the device has no such memory; the buffer stays as it was.
    CHECK_THROWS_AS(v.resize(std::size_t{1} << 47, stream), out_of_memory);
    CHECK(v.size() == 16);
    CHECK(v.element(3, stream) == 42);
    v = device_uvector<big>{};  // frees the 16 elements on their stream
    REQUIRE(cudaStreamSynchronize(stream.handle) == cudaSuccess);
    CHECK(pool.figures().allocated_bytes.current == 0);
}
