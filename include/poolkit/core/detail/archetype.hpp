// Archetypes: the least a part can be, for the static_asserts at the end of the strategy and
// adaptor headers, so that a header checks its concepts without naming another block.
//     resource_archetype<Properties...>   a resource with exactly those properties
//     cached_pool_archetype<Upstream>     a strategy stream_ordered<> can make lanes of: a
//                                         resource over Upstream with try_allocate_cached, release,
//                                         owns, check_invariants, the walk and its byte counts
// Their members are declared and never defined: they exist only in unevaluated contexts.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/walk.hpp>

#include <cstddef>

namespace poolkit::detail {

template <class... Properties>
struct resource_archetype : with_properties<resource_archetype<Properties...>, Properties...> {
    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment);
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept;
    friend bool operator==(const resource_archetype&, const resource_archetype&) noexcept { return true; }
};

template <class Upstream>
struct cached_pool_archetype : forward_properties<cached_pool_archetype<Upstream>, Upstream> {
    using upstream_type = Upstream;
    struct options_type {};

    cached_pool_archetype();
    explicit cached_pool_archetype(Upstream upstream, options_type options = {});

    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment);
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept;
    void* try_allocate_cached(std::size_t bytes, std::size_t alignment = default_alignment) noexcept;
    void release() noexcept;
    bool owns(const void* pointer) const noexcept;
    void check_invariants() const;
    template <class Visitor>
    void for_each_block(Visitor&& visit) const;
    std::size_t live_bytes() const noexcept;
    std::size_t reserved_bytes() const noexcept;
    Upstream& upstream_resource() noexcept;
    const Upstream& upstream_resource() const noexcept;
    friend bool operator==(const cached_pool_archetype&, const cached_pool_archetype&) noexcept { return true; }
};

}  // namespace poolkit::detail
