// new_delete_resource: host memory from the global aligned operator new.
//
// Complexity: that of operator new. Thread-safe. Any power-of-two alignment is honoured. Not
// stream-ordered. On exhaustion throws out_of_memory (or try_allocate returns nullptr).
// Stateless: every instance is equal to every other.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/errors.hpp>

#include <new>

namespace poolkit {

class new_delete_resource {
public:
    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        if (void* pointer = try_allocate(bytes, alignment)) return pointer;
        throw out_of_memory("new_delete_resource", memory_figures::request(bytes, alignment));
    }

    void* try_allocate(std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (bytes == 0 || !is_power_of_two(alignment)) return nullptr;
        // libstdc++'s aligned operator new rounds the size up without an overflow check, so
        // SIZE_MAX would wrap to a tiny block: refuse what cannot be rounded.
        if (!checked_align_up(bytes, alignment)) return nullptr;
        return ::operator new(bytes, std::align_val_t{alignment}, std::nothrow);
    }

    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        static_cast<void>(bytes);  // the sized form needs -fsized-deallocation under clang
        ::operator delete(pointer, std::align_val_t{alignment});
    }
    POOLKIT_CUDA_MR_MEMBERS(new_delete_resource);

    friend constexpr bool operator==(const new_delete_resource&, const new_delete_resource&) noexcept { return true; }
    friend constexpr void get_property(const new_delete_resource&, host_accessible) noexcept {}
};

static_assert(resource_with<new_delete_resource, host_accessible>);
static_assert(has_try_allocate<new_delete_resource>);

}  // namespace poolkit
