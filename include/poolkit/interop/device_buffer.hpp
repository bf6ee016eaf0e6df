// device_buffer: untyped, uninitialized device memory owned on a stream.
//
// A buffer holds size() bytes in an allocation of capacity() bytes from memory_resource() — any
// poolkit stream resource with device_accessible, by default the per-device registry's current
// resource (interop/device_registry.hpp) — allocated and freed on stream(). Its bytes are never
// initialized. Copies are explicit: a constructor that names the stream (and resource) of the new
// buffer; moves take the allocation and leave the source empty. reserve, resize past capacity and
// shrink_to_fit allocate anew on the stream they are given, copy the bytes there (cudaMemcpyAsync)
// and free the old allocation on that stream, which becomes the buffer's stream: the caller orders
// it after the work that used the buffer on its previous stream (as with set_stream).
// Complexity: each call is one allocation, one copy and one free at most. Thread safety: none (one
// buffer, one thread at a time). Alignment: default_alignment (256 bytes). Exhaustion: the
// resource's out_of_memory; a failed allocation or copy frees what it took and leaves the buffer
// as it was (strong guarantee). Needs CUDA.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/stream_ref.hpp>
#include <poolkit/interop/device_registry.hpp>
#include <poolkit/core/detail/cuda_runtime.hpp>

#include <cstddef>
#include <utility>

namespace poolkit {

class device_buffer {
public:
    // Empty, on the default stream, over the current device's resource.
    device_buffer() : device_buffer(0, default_stream) {}

    // `bytes` uninitialized bytes allocated on `stream`.
    device_buffer(std::size_t bytes, stream_ref stream, device_resource_ref resource = current_device_resource())
        : stream_(stream), resource_(resource) {
        data_ = allocate(bytes);
        size_ = capacity_ = bytes;
    }

    // A copy of `bytes` bytes at `source` (host or device memory: cudaMemcpyDefault), made on
    // `stream`. Pageable host memory may be reused once this returns; pinned host memory and device
    // memory must stay as they are until the stream's work so far is done.
    device_buffer(const void* source, std::size_t bytes, stream_ref stream, device_resource_ref resource = current_device_resource())
        : device_buffer(bytes, stream, resource) {
        copy_bytes(data_, source, bytes, stream_);  // if it throws, the destructor frees the allocation
    }

    // A copy of `other`'s bytes, made on `stream`: the caller orders `stream` after the work that
    // writes `other` on its stream.
    device_buffer(const device_buffer& other, stream_ref stream, device_resource_ref resource = current_device_resource())
        : device_buffer(other.data_, other.size_, stream, resource) {}

    device_buffer(const device_buffer&) = delete;
    device_buffer& operator=(const device_buffer&) = delete;

    device_buffer(device_buffer&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)),
          size_(std::exchange(other.size_, 0)),
          capacity_(std::exchange(other.capacity_, 0)),
          stream_(other.stream_),
          resource_(other.resource_) {}

    // Frees this buffer's allocation on its stream, then takes `other`'s.
    device_buffer& operator=(device_buffer&& other) noexcept {
        if (this != &other) {
            free_allocation();
            data_ = std::exchange(other.data_, nullptr);
            size_ = std::exchange(other.size_, 0);
            capacity_ = std::exchange(other.capacity_, 0);
            stream_ = other.stream_;
            resource_ = other.resource_;
        }
        return *this;
    }

    // Freed on stream(): the memory is reused once the work issued there so far is done.
    ~device_buffer() { free_allocation(); }

    // At least `bytes` of capacity; the first size() bytes are kept. Works on `stream`.
    void reserve(std::size_t bytes, stream_ref stream) {
        set_stream(stream);
        if (bytes > capacity_) move_to_allocation_of(bytes);
    }

    // size() becomes `bytes`; the first min(size(), bytes) bytes are kept, the rest is
    // uninitialized. Reallocates only past capacity(), to exactly `bytes`. Works on `stream`.
    void resize(std::size_t bytes, stream_ref stream) {
        set_stream(stream);
        if (bytes > capacity_) move_to_allocation_of(bytes);
        size_ = bytes;
    }

    // capacity() becomes size(). Works on `stream`.
    void shrink_to_fit(stream_ref stream) {
        set_stream(stream);
        if (size_ < capacity_) move_to_allocation_of(size_);
    }

    [[nodiscard]] void* data() noexcept { return data_; }
    [[nodiscard]] const void* data() const noexcept { return data_; }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
    [[nodiscard]] bool is_empty() const noexcept { return size_ == 0; }

    // The stream the buffer is freed on (and reallocated on, unless a call names another).
    [[nodiscard]] stream_ref stream() const noexcept { return stream_; }
    // From now on the buffer is freed on `stream`; the caller orders `stream` after the work that
    // uses the buffer on its current stream (an event, or a synchronization).
    void set_stream(stream_ref stream) noexcept { stream_ = stream; }
    [[nodiscard]] device_resource_ref memory_resource() const noexcept { return resource_; }

private:
    void* allocate(std::size_t bytes) { return bytes == 0 ? nullptr : resource_.allocate_async(bytes, default_alignment, stream_); }

    static void copy_bytes(void* destination, const void* source, std::size_t bytes, stream_ref stream) {
        if (bytes == 0) return;
        detail::check_cuda(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDefault, stream.get()), "cudaMemcpyAsync");
    }

    // A new allocation of `bytes` on stream_, holding the first min(size_, bytes) bytes.
    void move_to_allocation_of(std::size_t bytes) {
        void* moved = allocate(bytes);
        const std::size_t kept = size_ < bytes ? size_ : bytes;
        try {
            copy_bytes(moved, data_, kept, stream_);
        } catch (...) {
            if (moved != nullptr) resource_.deallocate_async(moved, bytes, default_alignment, stream_);
            throw;
        }
        free_allocation();
        data_ = moved;
        size_ = kept;
        capacity_ = bytes;
    }

    void free_allocation() noexcept {
        if (data_ != nullptr) resource_.deallocate_async(data_, capacity_, default_alignment, stream_);
        data_ = nullptr;
        size_ = capacity_ = 0;
    }

    void* data_ = nullptr;
    std::size_t size_ = 0;
    std::size_t capacity_ = 0;
    stream_ref stream_;
    device_resource_ref resource_;
};

}  // namespace poolkit
