// thrust_allocator<T, R> and thrust_policy: Thrust's vectors and algorithms on a poolkit resource.
//
//   thrust::device_vector<float, poolkit::thrust_allocator<float, pool>> v(n, poolkit::thrust_allocator<float, pool>{my_pool, stream});
//   thrust::sort(poolkit::thrust_policy(my_pool, stream), keys.begin(), keys.end());
//
// thrust_allocator allocates with allocate_async on its stream (default: the default stream) and
// frees on it; it refers to the resource, which must outlive it. thrust_policy(resource, stream)
// is thrust::cuda::par with such an allocator for temporary storage, on `stream`;
// thrust_policy_nosync is par_nosync (no synchronization after algorithms that would). R must be a
// device-accessible stream_resource. Needs nvcc (Thrust's device code).
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/stream_ref.hpp>

#include <thrust/device_malloc_allocator.h>
#include <thrust/device_ptr.h>
#include <thrust/execution_policy.h>

#include <cstddef>
#include <limits>
#include <memory>
#include <new>

namespace poolkit {

template <class T, stream_resource R>
    requires has_property<R, device_accessible>
class thrust_allocator : public thrust::device_malloc_allocator<T> {
    using base = thrust::device_malloc_allocator<T>;

public:
    using value_type = T;
    using pointer = typename base::pointer;
    using size_type = typename base::size_type;

    template <class U>
    struct rebind {
        using other = thrust_allocator<U, R>;
    };

    explicit thrust_allocator(R& resource, stream_ref stream = default_stream) noexcept
        : resource_(std::addressof(resource)), stream_(stream) {}
    template <class U>
    thrust_allocator(const thrust_allocator<U, R>& other) noexcept  // NOLINT: implicit rebind
        : resource_(std::addressof(other.resource())), stream_(other.stream()) {}

    pointer allocate(size_type count) {
        if (count > std::numeric_limits<size_type>::max() / sizeof(T)) throw std::bad_array_new_length();
        void* raw = resource_->allocate_async(count * sizeof(T), alignment(), stream_);
        return thrust::device_pointer_cast(static_cast<T*>(raw));
    }
    void deallocate(pointer pointer_, size_type count) noexcept {
        resource_->deallocate_async(thrust::raw_pointer_cast(pointer_), count * sizeof(T), alignment(), stream_);
    }

    [[nodiscard]] R& resource() const noexcept { return *resource_; }
    [[nodiscard]] stream_ref stream() const noexcept { return stream_; }

    template <class U>
    friend bool operator==(const thrust_allocator& a, const thrust_allocator<U, R>& b) {
        return a.stream_ == b.stream() && (a.resource_ == std::addressof(b.resource()) || *a.resource_ == b.resource());
    }

private:
    static constexpr std::size_t alignment() noexcept { return alignof(T) > default_alignment ? alignof(T) : default_alignment; }

    R* resource_;
    stream_ref stream_;
};

template <stream_resource R>
[[nodiscard]] auto thrust_policy(R& resource, stream_ref stream = default_stream) {
    return thrust::cuda::par(thrust_allocator<char, R>(resource, stream)).on(stream.get());
}

template <stream_resource R>
[[nodiscard]] auto thrust_policy_nosync(R& resource, stream_ref stream = default_stream) {
    return thrust::cuda::par_nosync(thrust_allocator<char, R>(resource, stream)).on(stream.get());
}

}  // namespace poolkit
