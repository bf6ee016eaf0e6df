// simulated_vmm_resource: CUDA-style virtual memory without a GPU — a reserved range of host
// address space that is never touched, whose granules are "mapped" by counting them — so that
// tests, fuzzers and poolkit-replay measure compositions over cuda_vmm_resource exactly on a CPU.
//
// It models virtual_memory (core/virtual_memory.hpp says what map and unmap mean) with the same
// semantics as cuda_vmm_resource, and is also a resource: allocate takes the smallest hole of the
// range that fits (then the lowest address), rounds the size up to whole granules, maps them whole
// and returns them; deallocate unmaps them. The range is mmap'ed PROT_NONE and MAP_NORESERVE: it costs
// no memory, and touching it faults. Complexity: O(log n) in the number of unmapped holes (an
// alignment above the granularity may look at every hole big enough). Thread-safe (one mutex).
// Alignment: any power of two; blocks start on a granule. Stream semantics: allocate_async and
// deallocate_async are the plain calls, which is exact because nothing touches the memory.
// Exhaustion: past options.physical_limit mapped bytes (set_physical_limit changes it), map and
// allocate throw out_of_memory with the bytes asked, the bytes mapped (as reserved) and the limit;
// when no hole of the range fits, allocate throws out_of_memory naming the reserved range, with
// its capacity as the limit. Either way nothing changed. Equality is identity.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/virtual_memory.hpp>
#include <poolkit/upstream/detail/locked_granules.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <system_error>

#if defined(__unix__) || defined(__APPLE__)
#  include <sys/mman.h>
#else
#  error "poolkit::simulated_vmm_resource needs mmap (POSIX)"
#endif

namespace poolkit {

struct simulated_vmm_options {
    // Bytes of address space reserved, rounded up to the granularity.
    std::size_t capacity = std::size_t{256} << 30;
    // The page size of the simulated device: a power of two. 2 MiB on most GPUs.
    std::size_t granularity = std::size_t{2} << 20;
    // Most bytes mapped at once, rounded down to the granularity; 0 means the capacity.
    std::size_t physical_limit = 0;
};

class simulated_vmm_resource : public detail::locked_granules {
public:
    static constexpr const char* name = "simulated_vmm_resource";

    simulated_vmm_resource() : simulated_vmm_resource(simulated_vmm_options{}) {}

    // Throws std::invalid_argument for a granularity that is not a power of two or a capacity of
    // 0 (or one that overflows), std::system_error when the address space cannot be reserved.
    explicit simulated_vmm_resource(simulated_vmm_options options)
        : locked_granules(name), options_(validated(options)), reservation_(options_) {
        adopt(detail::granule_map(reservation_.base(options_.granularity), options_.capacity, options_.granularity), options_.capacity,
              options_.physical_limit);
    }

    simulated_vmm_resource(const simulated_vmm_resource&) = delete;
    simulated_vmm_resource& operator=(const simulated_vmm_resource&) = delete;

    // Backs [at, at + bytes) (whole granules, inside the range, none mapped; 0 bytes does nothing).
    // Throws std::invalid_argument for a range that breaks those rules, out_of_memory past the
    // physical limit; nothing changes then.
    void map(void* at, std::size_t bytes) { map_as(at, bytes, &detail::granule_map::mark_mapped); }

    // As map, as one physical allocation: unmap must then cover [at, at + bytes) whole.
    void map_whole(void* at, std::size_t bytes) { map_as(at, bytes, &detail::granule_map::mark_mapped_whole); }

    // Maps [at, at + bytes) (whole granules, inside the range, none mapped) to the physical memory
    // mapped at [from, from + bytes) (mapped, whole physical allocations, not an alias): no memory
    // is added. Until unmap(at, bytes) takes the alias back, whole, [from, from + bytes) may not be
    // unmapped. 0 bytes does nothing. Throws std::invalid_argument for ranges that break those
    // rules; nothing changes then.
    void alias(void* at, const void* from, std::size_t bytes) {
        if (bytes == 0) return;
        const auto address = reinterpret_cast<std::uintptr_t>(at), source = reinterpret_cast<std::uintptr_t>(from);
        std::lock_guard lock(mutex_);
        granules_.check_alias(address, source, bytes, name);
        granules_.mark_aliased(address, source, bytes);
    }

    // Gives [at, at + bytes) back: whole granules, all mapped, none in a live block from allocate,
    // no physical allocation an alias still maps, an alias only whole (POOLKIT_ASSERT; with
    // assertions off such a call does nothing). 0 bytes does nothing.
    void unmap(void* at, std::size_t bytes) noexcept {
        if (bytes == 0) return;
        const auto address = reinterpret_cast<std::uintptr_t>(at);
        std::lock_guard lock(mutex_);
        if (!may_unmap_locked(address, bytes)) return;
        granules_.mark_unmapped(address, bytes);
    }

    // Nothing runs on simulated memory: every unmap is safe at once.
    void synchronize() noexcept {}

    // The resource face: a block of whole granules, mapped, in the smallest hole that fits.
    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        std::lock_guard lock(mutex_);
        return allocate_locked(bytes, alignment);
    }

    void* try_allocate(std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (bytes == 0 || !is_power_of_two(alignment)) return nullptr;
        std::lock_guard lock(mutex_);
        try {
            return allocate_locked(bytes, alignment);
        } catch (const std::bad_alloc&) {  // out_of_memory, or the host out of memory for bookkeeping
            return nullptr;
        }
    }

    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        static_cast<void>(alignment);
        const auto address = reinterpret_cast<std::uintptr_t>(pointer);
        std::lock_guard lock(mutex_);
        const auto block = granules_.block_at(address);
        POOLKIT_ASSERT(block.has_value(), "deallocate of a pointer simulated_vmm_resource did not hand out");
        if (!block) return;
        POOLKIT_ASSERT(checked_round_up(bytes, granules_.granularity()) == *block, "deallocate with a size other than the one allocated");
        granules_.forget_block(address);
        granules_.mark_unmapped(address, *block);
    }

    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref) { return allocate(bytes, alignment); }
    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref) noexcept {
        deallocate(pointer, bytes, alignment);
    }
    POOLKIT_CUDA_MR_MEMBERS(simulated_vmm_resource);

    // As constructed, with the physical limit in force now.
    [[nodiscard]] simulated_vmm_options options() const noexcept {
        simulated_vmm_options current = options_;
        current.physical_limit = physical_limit();
        return current;
    }

    friend bool operator==(const simulated_vmm_resource& a, const simulated_vmm_resource& b) noexcept { return &a == &b; }

private:
    static simulated_vmm_options validated(simulated_vmm_options options) {
        if (!is_power_of_two(options.granularity)) {
            throw std::invalid_argument("poolkit: simulated_vmm_resource granularity must be a power of two");
        }
        const auto capacity = checked_align_up(options.capacity, options.granularity);
        if (!capacity || *capacity == 0 || !checked_add(*capacity, options.granularity)) {
            throw std::invalid_argument("poolkit: simulated_vmm_resource capacity is 0 or too large");
        }
        options.capacity = *capacity;
        if (options.physical_limit == 0 || options.physical_limit > options.capacity) {
            options.physical_limit = options.capacity;
        }
        options.physical_limit = align_down(options.physical_limit, options.granularity);
        return options;
    }

    // Address space that is never readable or writable: capacity plus one granule, so that the
    // range can start on a granule boundary. Released when the resource is destroyed.
    class host_reservation {
    public:
        explicit host_reservation(const simulated_vmm_options& options) : bytes_(options.capacity + options.granularity) {
            void* start = ::mmap(nullptr, bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (start == MAP_FAILED) {
                throw std::system_error(errno, std::generic_category(), "poolkit: simulated_vmm_resource could not reserve address space");
            }
            start_ = reinterpret_cast<std::uintptr_t>(start);
        }
        host_reservation(const host_reservation&) = delete;
        host_reservation& operator=(const host_reservation&) = delete;
        ~host_reservation() { ::munmap(reinterpret_cast<void*>(start_), bytes_); }

        [[nodiscard]] std::uintptr_t base(std::size_t granularity) const noexcept { return align_up(start_, granularity); }

    private:
        std::size_t bytes_;
        std::uintptr_t start_ = 0;
    };

    void map_as(void* at, std::size_t bytes, void (detail::granule_map::*mark)(std::uintptr_t, std::size_t)) {
        if (bytes == 0) return;
        const auto address = reinterpret_cast<std::uintptr_t>(at);
        std::lock_guard lock(mutex_);
        granules_.check_map(address, bytes, name);
        if (!granules_.room_for(bytes, physical_limit())) throw out_of_memory(name, physical_figures(bytes, granules_.granularity()));
        (granules_.*mark)(address, bytes);
    }

    void* allocate_locked(std::size_t bytes, std::size_t alignment) {
        const auto rounded = checked_round_up(bytes, granules_.granularity());
        if (!rounded) throw out_of_memory(name, physical_figures(bytes, alignment));
        if (!granules_.room_for(*rounded, physical_limit())) throw out_of_memory(name, physical_figures(bytes, alignment));
        // Marked mapped with the strong guarantee; a block is unmapped whole.
        return place_block_locked(bytes, *rounded, alignment, [&](std::uintptr_t at) { granules_.mark_mapped_whole(at, *rounded); });
    }

    memory_figures physical_figures(std::size_t bytes, std::size_t alignment) const noexcept {
        memory_figures figures = memory_figures::request(bytes, alignment);
        figures.reserved_bytes = granules_.mapped_bytes();
        figures.limit_bytes = physical_limit();
        return figures;
    }

    simulated_vmm_options options_;  // as constructed; the limit in force is physical_limit()
    host_reservation reservation_;
};

static_assert(aliasing_virtual_memory<simulated_vmm_resource>);
static_assert(stream_resource<simulated_vmm_resource>);
static_assert(has_try_allocate<simulated_vmm_resource> && has_owns<simulated_vmm_resource> && has_check_invariants<simulated_vmm_resource>);
static_assert(!has_property<simulated_vmm_resource, host_accessible> && !has_property<simulated_vmm_resource, device_accessible>);

}  // namespace poolkit
