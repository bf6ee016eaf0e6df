// pmr_adaptor<R>: a std::pmr::memory_resource over a host-accessible poolkit resource.
//
// std::pmr containers (std::pmr::vector, std::pmr::string, ...) then allocate from any poolkit
// composition: `poolkit::pmr_adaptor memory{pool}; std::pmr::vector<int> v{&memory};`. Like every
// poolkit adaptor it refers to an lvalue (pmr_adaptor<ref<R>>) and owns an rvalue (pmr_adaptor<R>).
// Complexity, thread safety, alignment and exhaustion: R's. A 0-byte request takes 1 byte, as
// std::pmr expects a pointer. do_is_equal: the other is a pmr_adaptor of the same R whose resource compares equal.
//
// pmr_device_adaptor<R> is the same bridge for memory the host must not touch (device memory):
// code that passes a std::pmr::memory_resource* around only to obtain buffers for kernels can
// use it; a std::pmr container must not, and pmr_adaptor refuses such R at compile time.
#pragma once

#include <poolkit/core/concepts.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/ref.hpp>

#include <cstddef>
#include <memory_resource>
#include <type_traits>
#include <utility>

namespace poolkit {

namespace detail {
template <resource R>
class pmr_bridge : public std::pmr::memory_resource {
public:
    pmr_bridge()
        requires std::default_initializable<R>
    = default;
    explicit pmr_bridge(R resource) : resource_(std::move(resource)) {}

    [[nodiscard]] R& resource() noexcept { return resource_; }
    [[nodiscard]] const R& resource() const noexcept { return resource_; }

protected:
    void* do_allocate(std::size_t bytes, std::size_t alignment) override { return resource_.allocate(bytes == 0 ? 1 : bytes, alignment); }
    void do_deallocate(void* pointer, std::size_t bytes, std::size_t alignment) override {
        resource_.deallocate(pointer, bytes == 0 ? 1 : bytes, alignment);
    }
    bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
        if (this == &other) return true;
        const auto* same = dynamic_cast<const pmr_bridge*>(&other);
        if (same == nullptr) return false;
        try {
            return resource_ == same->resource_;
        } catch (...) {
            return false;
        }
    }

private:
    R resource_;
};
}  // namespace detail

template <resource R>
class pmr_adaptor : public detail::pmr_bridge<R> {
    static_assert(has_property<R, host_accessible>,
                  "pmr_adaptor needs host-accessible memory (std::pmr containers write through it); "
                  "for device memory use pmr_device_adaptor");

public:
    using detail::pmr_bridge<R>::pmr_bridge;
};

template <resource R>
class pmr_device_adaptor : public detail::pmr_bridge<R> {
    static_assert(has_property<R, device_accessible>, "pmr_device_adaptor is for device-accessible memory");

public:
    using detail::pmr_bridge<R>::pmr_bridge;
};

// An lvalue is referred to, an rvalue owned (docs/concepts.md).
template <resource R>
pmr_adaptor(R&) -> pmr_adaptor<ref<R>>;
template <resource R>
    requires(!std::is_lvalue_reference_v<R>)
pmr_adaptor(R&&) -> pmr_adaptor<R>;
template <resource R>
pmr_device_adaptor(R&) -> pmr_device_adaptor<ref<R>>;
template <resource R>
    requires(!std::is_lvalue_reference_v<R>)
pmr_device_adaptor(R&&) -> pmr_device_adaptor<R>;

}  // namespace poolkit
