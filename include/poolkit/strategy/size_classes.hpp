// size_classes<Upstream, Large>: binning. Requests up to the largest size class are served from
// slabs of fixed-size blocks, one set of slabs per class; larger requests (and alignments no
// class gives) go to Large, which is the upstream itself unless another resource is named.
//
// The classes are options.sizes, or by default a geometric series: options.classes_per_doubling
// classes per power of two from options.smallest to options.largest (256 B to 1 MiB, four per
// doubling: 256, 320, 384, 448, 512, 640 ...). A block of class c is aligned to the largest power
// of two dividing c, at most options.slab_alignment; a request goes to the smallest class that
// is large enough and aligned enough. Bookkeeping (free stacks, live bitmaps) lives in host
// records, never in the slabs.
// Complexity: a precomputed table maps a size to its class in O(1); allocate is O(1) while the
// class has a slab with a free block; deallocate O(1) into the slab last used, else O(log slabs).
// Thread safety: none; wrap in synchronized<>.
// Alignment: any power of two; classes serve up to their own alignment, Large the rest.
// Stream semantics: none; a freed block is reusable at once. Put stream_ordered<> around it.
// Exhaustion: a class that needs a slab asks for a full one, then for one block, then returns
// every wholly free slab and asks for one block once more, then throws out_of_memory with the
// live, reserved and cached bytes. Large requests fail as Large fails.
// Bad input: a free of a slab's block that is not live (a foreign or interior pointer, a size of
// another class, a second free) is a failed POOLKIT_ASSERT, and ignored without assertions. A
// large free is checked before it reaches Large: with POOLKIT_ENABLE_ASSERTS every block given to
// Large is remembered (one host record each), and a free of one not live, or with another size,
// is a failed POOLKIT_ASSERT instead of a crash inside Large. Without assertions a large free
// that cannot be right (no large block live, more bytes than are live, or a pointer Large says
// it does not own, where Large has owns()) is ignored; the counters never go below zero. Only
// owns() tells a second free from a right one while another large block of that size is live.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/detail/leak_report.hpp>
#include <poolkit/core/detail/walk_merge.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/in_place.hpp>
#include <poolkit/core/walk.hpp>
#include <poolkit/strategy/detail/slabs.hpp>

#include <algorithm>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>
#if POOLKIT_ENABLE_ASSERTS
#  include <unordered_map>
#endif

namespace poolkit {

struct size_classes_options {
    // The geometric default: classes_per_doubling classes per power of two in [smallest, largest].
    std::size_t smallest = 256;
    std::size_t largest = std::size_t{1} << 20;
    std::size_t classes_per_doubling = 4;
    // Explicit class sizes, ascending; when not empty they replace the geometric series.
    std::vector<std::size_t> sizes;
    // Bytes a slab aims for; a slab holds at least one block.
    std::size_t slab_size = std::size_t{2} << 20;
    // The most alignment a slab is asked for; blocks are aligned to at most this.
    std::size_t slab_alignment = 4096;
    // Most bytes reserved for slabs at once.
    std::size_t maximum_size = std::numeric_limits<std::size_t>::max();
};

// Names the upstream as the resource for large requests.
struct large_to_upstream {
    friend constexpr bool operator==(large_to_upstream, large_to_upstream) noexcept { return true; }
};

namespace detail {
// The class sizes that `options` describe; std::invalid_argument when they make no sense.
inline std::vector<std::size_t> class_sizes(const size_classes_options& options) {
    std::vector<std::size_t> sizes = options.sizes;
    if (sizes.empty()) {
        if (options.smallest == 0 || options.largest < options.smallest || options.classes_per_doubling == 0) {
            throw std::invalid_argument("poolkit: size_classes needs 0 < smallest <= largest and classes_per_doubling > 0");
        }
        for (std::size_t base = options.smallest; base <= options.largest;) {
            const std::size_t step = std::max<std::size_t>(base / options.classes_per_doubling, 1);
            for (std::size_t i = 0; i < options.classes_per_doubling && base + i * step <= options.largest; ++i) {
                const std::size_t size = base + i * step;
                if (sizes.empty() || sizes.back() < size) sizes.push_back(size);
            }
            if (base > options.largest / 2) break;
            base *= 2;
        }
        if (sizes.back() != options.largest) sizes.push_back(options.largest);
    }
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        if (sizes[i] == 0 || (i > 0 && sizes[i] <= sizes[i - 1])) {
            throw std::invalid_argument("poolkit: size_classes sizes must be positive and strictly ascending");
        }
    }
    if (sizes.size() >= std::numeric_limits<std::uint16_t>::max()) {
        throw std::invalid_argument("poolkit: size_classes has too many classes");
    }
    return sizes;
}
}  // namespace detail

template <resource Upstream, class Large = large_to_upstream>
class size_classes {
    static constexpr bool large_is_upstream = std::same_as<Large, large_to_upstream>;
    using large_resource_type = std::conditional_t<large_is_upstream, Upstream, Large>;

public:
    using upstream_type = Upstream;
    using options_type = size_classes_options;

    size_classes()
        requires std::default_initializable<Upstream> && std::default_initializable<Large>
        : size_classes(Upstream{}, size_classes_options{}) {}

    explicit size_classes(Upstream upstream, size_classes_options options = {})
        requires std::default_initializable<Large>
        : size_classes(std::move(upstream), Large{}, std::move(options)) {}

    // Large built in place over the same upstream, with its default options (it need not move).
    size_classes(std::in_place_t, Upstream upstream, const size_classes_options& options = {})
        requires(!large_is_upstream && constructible_in_place<Large, const Upstream&>)
        : upstream_(upstream),
          large_(build_from<Large>(std::as_const(upstream))),
          sizes_(detail::class_sizes(options)),
          engine_(specs(sizes_, options), options.maximum_size) {
        build_lookup(options.slab_alignment);
    }

    size_classes(Upstream upstream, Large large, size_classes_options options)
        : upstream_(std::move(upstream)),
          large_(std::move(large)),
          sizes_(detail::class_sizes(options)),
          engine_(specs(sizes_, options), options.maximum_size) {
        build_lookup(options.slab_alignment);
    }

    size_classes(const size_classes&) = delete;
    size_classes& operator=(const size_classes&) = delete;
    // Moves every slab; the source may only be destroyed.
    size_classes(size_classes&& other) noexcept
        : upstream_(std::move(other.upstream_)),
          large_(std::move(other.large_)),
          sizes_(std::move(other.sizes_)),
          engine_(std::move(other.engine_)),
          table_(std::move(other.table_)),
          table_shift_(other.table_shift_),
          aligned_class_(std::move(other.aligned_class_)),
          alignment_levels_(other.alignment_levels_),
          large_blocks_(std::exchange(other.large_blocks_, 0)),
          large_bytes_(std::exchange(other.large_bytes_, 0))
#if POOLKIT_ENABLE_ASSERTS
          ,
          large_live_(std::move(other.large_live_))
#endif
    {
    }

    ~size_classes() {
        detail::report_leaks("size_classes", engine_.live_blocks() + large_blocks_, engine_.live_bytes() + large_bytes_);
        engine_.release_all(upstream_);
    }

    // Requires: alignment a power of two (else std::invalid_argument). Returns nullptr for 0 bytes.
    [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        const std::size_t index = class_of(bytes, alignment);
        if (index == sizes_.size()) return allocate_large(bytes, alignment);
        if (void* pointer = engine_.allocate(upstream_, index)) return pointer;
        memory_figures figures = memory_figures::request(bytes, alignment);
        figures.live_bytes = engine_.live_bytes() + large_bytes_;
        figures.reserved_bytes = engine_.reserved_bytes();
        figures.cached_bytes = engine_.reserved_bytes() - engine_.live_bytes();
        throw out_of_memory("size_classes", figures);
    }

    // As allocate, but only from blocks already held: a free block of a slab it has, or Large's
    // own cache where Large offers try_allocate_cached; never takes a slab, never asks the
    // upstream. nullptr when nothing fits (or for 0 bytes or a bad alignment). stream_ordered<>
    // asks this of a stream's lane before it looks elsewhere. O(1) for a class.
    [[nodiscard]] void* try_allocate_cached(std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (bytes == 0 || !is_power_of_two(alignment)) return nullptr;
        const std::size_t index = class_of(bytes, alignment);
        if (index != sizes_.size()) return engine_.allocate_cached(index);
        if constexpr (!large_is_upstream && requires(Large& large) {
                          { large.try_allocate_cached(bytes, alignment) } noexcept;
                      }) {
            void* pointer = large_.try_allocate_cached(bytes, alignment);
            if (pointer == nullptr) return nullptr;
            try {
                count_large(pointer, bytes);
            } catch (...) {  // no host memory for the record of a debug build: the block goes back
                large_.deallocate(pointer, bytes, alignment);
                return nullptr;
            }
            return pointer;
        } else {
            return nullptr;
        }
    }

    // Requires: `pointer` came from allocate(bytes, alignment) of this resource and is not yet
    // freed. Asserts it in debug builds, large blocks included (a size in another class counts
    // as a wrong pointer); otherwise a block it cannot find is ignored, and a large free that
    // cannot be right is not passed on to Large (see the header comment).
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        POOLKIT_ASSERT(is_power_of_two(alignment), "deallocate with an alignment that is not a power of two");
        const auto address = reinterpret_cast<std::uintptr_t>(pointer);
        const std::size_t index = class_of(bytes, alignment);
        if (index == sizes_.size()) {
            // Never hand a slab's block to Large: a size that is wrong by a class would corrupt it.
            const bool in_slab = engine_.find(address) != nullptr;
            POOLKIT_ASSERT(!in_slab, "deallocate with a size other than the one allocated (a slab block freed as large)");
            if (in_slab) return;
            if (!uncount_large(pointer, bytes)) return;
            large_resource().deallocate(pointer, bytes, alignment);
            return;
        }
        [[maybe_unused]] const bool freed = engine_.deallocate(index, address);
        POOLKIT_ASSERT(freed,
                       "deallocate of a pointer size_classes did not hand out for this size (wrong pointer, "
                       "a size other than the one allocated, or freed twice)");
    }
    POOLKIT_CUDA_MR_MEMBERS(size_classes);

    // Returns every wholly free slab to the upstream, and Large's cache where it has one.
    void release() noexcept {
        engine_.release(upstream_);
        if constexpr (!large_is_upstream && has_release<Large>) large_.release();
    }

    // Whether `pointer` lies in a live block: a slab's, or Large's when it can tell.
    [[nodiscard]] bool owns(const void* pointer) const
        requires has_owns<large_resource_type>
    {
        const auto address = reinterpret_cast<std::uintptr_t>(pointer);
        if (engine_.find(address) != nullptr) return engine_.in_live_block(address);
        return large_resource().owns(pointer);
    }

    void check_invariants() const {
        engine_.check_invariants();
        if constexpr (!large_is_upstream && has_check_invariants<Large>) large_.check_invariants();
    }

    // The walk of walk.hpp: every slab as a chunk of equal blocks (requested_bytes 0: slabs keep
    // no request sizes), and, when Large is a resource of its own that offers the walk, Large's
    // chunks too, all in address order. What goes to the upstream itself is not seen. O(blocks).
    template <class Visitor>
    void for_each_block(Visitor&& visit) const {
        if constexpr (!large_is_upstream && walkable<Large>) {
            detail::walk_parts(visit, engine_, large_);
        } else {
            engine_.for_each_block(visit);
        }
    }

    // The class sizes, ascending; requests above the last go to Large.
    [[nodiscard]] const std::vector<std::size_t>& sizes() const noexcept { return sizes_; }
    // The block size a request would get, or 0 when it goes to Large.
    [[nodiscard]] std::size_t block_size(std::size_t bytes, std::size_t alignment = default_alignment) const noexcept {
        if (bytes == 0 || !is_power_of_two(alignment)) return 0;
        const std::size_t index = class_of(bytes, alignment);
        return index == sizes_.size() ? 0 : sizes_[index];
    }
    [[nodiscard]] std::size_t live_bytes() const noexcept { return engine_.live_bytes(); }
    [[nodiscard]] std::size_t reserved_bytes() const noexcept { return engine_.reserved_bytes(); }
    // Slabs held, the chunks this strategy took from the upstream.
    [[nodiscard]] std::size_t chunks() const noexcept { return engine_.chunks(); }

    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }
    [[nodiscard]] large_resource_type& large_resource() noexcept {
        if constexpr (large_is_upstream)
            return upstream_;
        else
            return large_;
    }
    [[nodiscard]] const large_resource_type& large_resource() const noexcept {
        if constexpr (large_is_upstream)
            return upstream_;
        else
            return large_;
    }

    // Identity: only the resource that handed out a block can take it back.
    friend bool operator==(const size_classes& a, const size_classes& b) noexcept { return &a == &b; }

    // A property both the upstream and Large have.
    template <class Property>
        requires has_property<Upstream, Property> && has_property<large_resource_type, Property>
    friend constexpr void get_property(const size_classes&, Property) noexcept {}

private:
    // The class for a request, or sizes_.size() when Large serves it.
    [[nodiscard]] std::size_t class_of(std::size_t bytes, std::size_t alignment) const noexcept {
        if (bytes > sizes_.back()) return sizes_.size();
        std::size_t index = table_[(bytes - 1) >> table_shift_];
        while (sizes_[index] < bytes) ++index;
        const auto level = static_cast<std::size_t>(std::countr_zero(alignment));
        if (level >= alignment_levels_) return sizes_.size();
        return aligned_class_[index * alignment_levels_ + level];
    }

    static std::vector<detail::slabs::class_spec> specs(const std::vector<std::size_t>& sizes, const size_classes_options& options) {
        validate_alignment(options.slab_alignment);
        std::vector<detail::slabs::class_spec> result;
        for (std::size_t size : sizes) {
            const std::size_t blocks = std::clamp<std::size_t>(options.slab_size / size, 1, std::size_t{1} << 30);
            result.push_back({size, detail::slabs::natural_alignment(size, options.slab_alignment), static_cast<std::uint32_t>(blocks)});
        }
        return result;
    }

    void build_lookup(std::size_t slab_alignment) {
        // At most 16K table entries; each covers 2^table_shift_ sizes and names the smallest class
        // that holds its first size, so class_of steps past at most the classes inside one entry.
        table_shift_ = 0;
        while (((sizes_.back() - 1) >> table_shift_) >= (1U << 14)) ++table_shift_;
        table_.resize(((sizes_.back() - 1) >> table_shift_) + 1);
        std::size_t index = 0;
        for (std::size_t entry = 0; entry < table_.size(); ++entry) {
            const std::size_t first = (entry << table_shift_) + 1;
            while (sizes_[index] < first) ++index;
            table_[entry] = static_cast<std::uint16_t>(index);
        }
        alignment_levels_ = static_cast<std::size_t>(std::countr_zero(slab_alignment)) + 1;
        aligned_class_.assign(sizes_.size() * alignment_levels_, static_cast<std::uint16_t>(sizes_.size()));
        for (std::size_t level = 0; level < alignment_levels_; ++level) {
            std::size_t next = sizes_.size();  // smallest class at or after i aligned to 2^level
            for (std::size_t i = sizes_.size(); i-- > 0;) {
                if (detail::slabs::natural_alignment(sizes_[i], slab_alignment) >= (std::size_t{1} << level)) next = i;
                aligned_class_[i * alignment_levels_ + level] = static_cast<std::uint16_t>(next);
            }
        }
    }

    void* allocate_large(std::size_t bytes, std::size_t alignment) {
        void* pointer = large_resource().allocate(bytes, alignment);
        try {
            count_large(pointer, bytes);
        } catch (...) {  // no host memory for the record of a debug build: the block goes back
            large_resource().deallocate(pointer, bytes, alignment);
            throw;
        }
        return pointer;
    }

    // Counts a block Large just handed out (and, with assertions, remembers it). May throw
    // std::bad_alloc only with assertions, before anything is counted.
    void count_large([[maybe_unused]] void* pointer, std::size_t bytes) {
#if POOLKIT_ENABLE_ASSERTS
        const bool fresh = large_live_.emplace(reinterpret_cast<std::uintptr_t>(pointer), bytes).second;
        POOLKIT_ASSERT(fresh, "size_classes: Large handed out a block that is still live");
#endif
        ++large_blocks_;
        large_bytes_ += bytes;
    }

    // Whether a large free can be right, and if so uncounts it. A failed POOLKIT_ASSERT naming
    // the rule when assertions are on; false (nothing changed, nothing to pass on) otherwise.
    bool uncount_large([[maybe_unused]] void* pointer, std::size_t bytes) noexcept {
#if POOLKIT_ENABLE_ASSERTS
        const auto found = large_live_.find(reinterpret_cast<std::uintptr_t>(pointer));
        POOLKIT_ASSERT(found != large_live_.end(), "size_classes: deallocate of a large block it did not hand out, or one freed twice");
        if (found == large_live_.end()) return false;
        POOLKIT_ASSERT(found->second == bytes, "size_classes: deallocate of a large block with a size other than the one allocated");
        if (found->second != bytes) return false;
        large_live_.erase(found);
#else
        if (large_blocks_ == 0 || bytes > large_bytes_) return false;
        if constexpr (has_owns<large_resource_type>) {
            if (!large_resource().owns(pointer)) return false;
        }
#endif
        --large_blocks_;
        large_bytes_ -= bytes;
        return true;
    }

    [[no_unique_address]] Upstream upstream_;
    Large large_;  // not [[no_unique_address]]: built in place from a prvalue (build_from)
    std::vector<std::size_t> sizes_;  // the class sizes, ascending
    detail::slabs::slab_engine engine_;
    std::vector<std::uint16_t> table_;  // (bytes - 1) >> table_shift_ -> a class to start from
    std::size_t table_shift_ = 0;
    std::vector<std::uint16_t> aligned_class_;  // [class][log2 alignment] -> smallest fit, or sizes_.size()
    std::size_t alignment_levels_ = 0;
    std::size_t large_blocks_ = 0;  // live blocks Large holds for us
    std::size_t large_bytes_ = 0;
#if POOLKIT_ENABLE_ASSERTS
    std::unordered_map<std::uintptr_t, std::size_t> large_live_;  // each live large block -> its bytes
#endif
};

static_assert(resource_with<size_classes<detail::resource_archetype<host_accessible>>, host_accessible>);
static_assert(!has_property<size_classes<detail::resource_archetype<host_accessible>, detail::resource_archetype<>>, host_accessible>);
static_assert(has_release<size_classes<detail::resource_archetype<>>> && has_check_invariants<size_classes<detail::resource_archetype<>>> &&
              has_upstream<size_classes<detail::resource_archetype<>>>);
static_assert(!has_owns<size_classes<detail::resource_archetype<>>>);
static_assert(walkable<size_classes<detail::resource_archetype<>>>);

}  // namespace poolkit
