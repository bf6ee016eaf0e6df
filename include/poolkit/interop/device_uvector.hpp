// device_uvector<T>: a device array of trivially copyable T whose elements are never initialized
// (no constructor kernel), owned on a stream.
//
// A device_buffer of size() * sizeof(T) bytes (interop/device_buffer.hpp: its resource, stream and
// reallocation rules). Iterators are T*, device pointers: Thrust and CUB algorithms take them with
// a device execution policy on the buffer's stream (thrust::cuda::par.on(v.stream().get())).
// element() and set_element() copy one element on a stream and wait for that stream; the
// uninitialized resize leaves new elements as they happen to be.
// Complexity: as device_buffer; element access is one copy and one stream synchronization. Thread
// safety: none. Alignment: default_alignment (256 bytes). Exhaustion: the resource's
// out_of_memory; a count whose bytes do not fit in std::size_t is std::length_error; an index past
// size() is std::out_of_range. Needs CUDA.
#pragma once

#include <poolkit/interop/device_buffer.hpp>
#include <poolkit/core/detail/cuda_runtime.hpp>

#include <array>
#include <bit>
#include <cstddef>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace poolkit {

template <class T>
    requires std::is_trivially_copyable_v<T>
class device_uvector {
public:
    using value_type = T;
    using size_type = std::size_t;
    using pointer = T*;
    using const_pointer = const T*;
    using iterator = T*;
    using const_iterator = const T*;

    // Empty, on the default stream, over the current device's resource.
    device_uvector() = default;

    // `count` uninitialized elements allocated on `stream`.
    device_uvector(std::size_t count, stream_ref stream, device_resource_ref resource = current_device_resource())
        : storage_(bytes_for(count), stream, resource) {}

    // A copy of `source` (host or device memory), made on `stream`; as device_buffer's copy.
    device_uvector(std::span<const T> source, stream_ref stream, device_resource_ref resource = current_device_resource())
        : storage_(source.data(), source.size_bytes(), stream, resource) {}

    // A copy of `other`'s elements, made on `stream`.
    device_uvector(const device_uvector& other, stream_ref stream, device_resource_ref resource = current_device_resource())
        : storage_(other.storage_, stream, resource) {}

    device_uvector(const device_uvector&) = delete;
    device_uvector& operator=(const device_uvector&) = delete;
    device_uvector(device_uvector&&) noexcept = default;
    device_uvector& operator=(device_uvector&&) noexcept = default;
    ~device_uvector() = default;

    [[nodiscard]] T* data() noexcept { return static_cast<T*>(storage_.data()); }
    [[nodiscard]] const T* data() const noexcept { return static_cast<const T*>(storage_.data()); }
    [[nodiscard]] iterator begin() noexcept { return data(); }
    [[nodiscard]] iterator end() noexcept { return data() + size(); }
    [[nodiscard]] const_iterator begin() const noexcept { return data(); }
    [[nodiscard]] const_iterator end() const noexcept { return data() + size(); }
    [[nodiscard]] const_iterator cbegin() const noexcept { return begin(); }
    [[nodiscard]] const_iterator cend() const noexcept { return end(); }

    [[nodiscard]] std::size_t size() const noexcept { return storage_.size() / sizeof(T); }
    [[nodiscard]] std::size_t capacity() const noexcept { return storage_.capacity() / sizeof(T); }
    [[nodiscard]] bool is_empty() const noexcept { return storage_.is_empty(); }
    [[nodiscard]] static constexpr std::size_t max_size() noexcept { return std::numeric_limits<std::size_t>::max() / sizeof(T); }

    // As device_buffer's, in elements.
    void reserve(std::size_t count, stream_ref stream) { storage_.reserve(bytes_for(count), stream); }
    void resize(std::size_t count, stream_ref stream) { storage_.resize(bytes_for(count), stream); }
    void shrink_to_fit(stream_ref stream) { storage_.shrink_to_fit(stream); }

    // The element at `index`, copied to the host on `stream`, which is then waited for.
    [[nodiscard]] T element(std::size_t index, stream_ref stream) const {
        check_index(index);
        std::array<std::byte, sizeof(T)> bytes;  // T need not be default-constructible
        detail::check_cuda(cudaMemcpyAsync(bytes.data(), data() + index, sizeof(T), cudaMemcpyDefault, stream.get()), "cudaMemcpyAsync");
        detail::check_cuda(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize");
        return std::bit_cast<T>(bytes);
    }
    [[nodiscard]] T front_element(stream_ref stream) const { return element(0, stream); }
    [[nodiscard]] T back_element(stream_ref stream) const { return element(size() - 1, stream); }

    // Writes `value` at `index` on `stream` and waits for that stream (so `value` may go at once).
    void set_element(std::size_t index, const T& value, stream_ref stream) {
        check_index(index);
        detail::check_cuda(cudaMemcpyAsync(data() + index, &value, sizeof(T), cudaMemcpyDefault, stream.get()), "cudaMemcpyAsync");
        detail::check_cuda(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize");
    }

    [[nodiscard]] stream_ref stream() const noexcept { return storage_.stream(); }
    void set_stream(stream_ref stream) noexcept { storage_.set_stream(stream); }
    [[nodiscard]] device_resource_ref memory_resource() const noexcept { return storage_.memory_resource(); }

    // The bytes underneath, for APIs that take untyped memory.
    [[nodiscard]] device_buffer& buffer() noexcept { return storage_; }
    [[nodiscard]] const device_buffer& buffer() const noexcept { return storage_; }

private:
    static std::size_t bytes_for(std::size_t count) {
        if (count > max_size()) {
            throw std::length_error("poolkit::device_uvector: " + std::to_string(count) + " elements of " + std::to_string(sizeof(T)) +
                                    " bytes exceed the largest size (" + std::to_string(max_size()) + " elements)");
        }
        return count * sizeof(T);
    }
    void check_index(std::size_t index) const {
        if (index >= size()) {
            throw std::out_of_range("poolkit::device_uvector: index " + std::to_string(index) + " past the " + std::to_string(size()) +
                                    " elements");
        }
    }

    device_buffer storage_;
};

}  // namespace poolkit
