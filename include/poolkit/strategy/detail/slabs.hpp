// slab_engine: classes of fixed-size blocks carved from slabs, shared by size_classes and
// fixed_size.
//
// A slab is one upstream chunk cut into equal blocks. Its host record keeps a stack of free block
// indices and a bitmap of live blocks; nothing is written into the slab itself. Each class keeps
// its slabs that have a free block in a list (most recently freed into first) and remembers the
// slab it last touched; every slab of every class also sits in one set by address, for owns()
// and for freeing into a slab other than the remembered one.
// Complexity: allocate O(1) while the class has a slab with a free block; deallocate O(1) into
// the remembered slab, else O(log slabs); a new slab O(blocks in it) to fill its free stack.
// Not thread-safe. The upstream is passed to each call that needs it.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/walk.hpp>
#include <poolkit/strategy/detail/chunks.hpp>
#include <poolkit/strategy/detail/intrusive.hpp>
#include <poolkit/strategy/detail/node_pool.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

namespace poolkit::detail::slabs {

struct by_address_tag;
struct with_free_tag;

struct slab : intrusive::set_hook<by_address_tag>, intrusive::list_hook<with_free_tag> {
    slab(std::uintptr_t address_, std::size_t block_size, std::uint32_t blocks_, std::size_t alignment_, std::uint32_t class_index_)
        : address(address_),
          bytes(block_size * blocks_),
          alignment(alignment_),
          blocks(blocks_),
          free_count(blocks_),
          class_index(class_index_),
          free_stack(new std::uint32_t[blocks_]),
          live_bits(new std::uint64_t[(blocks_ + 63) / 64]()) {
        // Popped in ascending order: the first blocks handed out are the lowest.
        for (std::uint32_t i = 0; i < blocks_; ++i) free_stack[i] = blocks_ - 1 - i;
    }

    [[nodiscard]] bool is_live(std::uint32_t index) const noexcept { return (live_bits[index / 64] >> (index % 64)) & 1U; }
    void flip(std::uint32_t index) noexcept { live_bits[index / 64] ^= std::uint64_t{1} << (index % 64); }

    std::uintptr_t address;
    std::size_t bytes;
    std::size_t alignment;  // as asked of the upstream
    std::uint32_t blocks;
    std::uint32_t free_count;
    std::uint32_t class_index;
    std::unique_ptr<std::uint32_t[]> free_stack;  // free block indices; the top is free_stack[free_count - 1]
    std::unique_ptr<std::uint64_t[]> live_bits;  // bit i: block i is live
};

using slab_set = chunk_index<slab, by_address_tag>;
using slab_list = intrusive::list<slab, with_free_tag>;

// What a class is made of: its block size, the alignment of its slabs (and so of its blocks),
// and how many blocks a slab holds when the upstream allows.
struct class_spec {
    std::size_t block_size;
    std::size_t alignment;
    std::uint32_t blocks_per_slab;
};

// The largest power of two that divides `size`, at most `cap`: the alignment of every block of a
// class of that size in slabs aligned to `cap`.
constexpr std::size_t natural_alignment(std::size_t size, std::size_t cap) noexcept { return std::min(size & (~size + 1), cap); }

struct slab_class {
    class_spec spec{};
    slab_list with_free;  // slabs of this class with at least one free block
    slab* recent = nullptr;  // the slab last allocated from or freed into, or nullptr
    std::size_t live_blocks = 0;
};

class slab_engine {
public:
    slab_engine() = default;
    slab_engine(const std::vector<class_spec>& specs, std::size_t maximum_reserved)
        : classes_(new slab_class[specs.size()]), class_count_(specs.size()), maximum_reserved_(maximum_reserved) {
        for (std::size_t i = 0; i < specs.size(); ++i) classes_[i].spec = specs[i];
    }
    slab_engine(const slab_engine&) = delete;
    slab_engine& operator=(const slab_engine&) = delete;
    slab_engine(slab_engine&& other) noexcept
        : classes_(std::move(other.classes_)),
          class_count_(std::exchange(other.class_count_, 0)),
          maximum_reserved_(other.maximum_reserved_),
          nodes_(std::move(other.nodes_)),
          slabs_(std::move(other.slabs_)),
          reserved_bytes_(std::exchange(other.reserved_bytes_, 0)),
          live_bytes_(std::exchange(other.live_bytes_, 0)) {}
    ~slab_engine() { POOLKIT_VERIFY(slabs_.empty(), "slab_engine destroyed before its slabs went back"); }

    [[nodiscard]] std::size_t class_count() const noexcept { return class_count_; }
    [[nodiscard]] const class_spec& spec(std::size_t index) const noexcept { return classes_[index].spec; }

    // A block of class `index`, taking a slab from `upstream` when the class has none free: a
    // full slab, else a slab of one block, else (after returning every wholly free slab) one
    // block once more. nullptr when all of that fails; std::bad_alloc only if the host cannot
    // hold the bookkeeping.
    template <class Upstream>
    [[nodiscard]] void* allocate(Upstream& upstream, std::size_t index) {
        if (classes_[index].with_free.empty() && !add_slab(upstream, index)) return nullptr;
        return allocate_cached(index);
    }

    // A block of class `index` from a slab it already has, or nullptr: never takes a slab. O(1).
    [[nodiscard]] void* allocate_cached(std::size_t index) noexcept {
        slab_class& c = classes_[index];
        if (c.with_free.empty()) return nullptr;
        slab& s = c.with_free.front();
        const std::uint32_t block = s.free_stack[--s.free_count];
        s.flip(block);
        if (s.free_count == 0) c.with_free.pop_front();
        c.recent = &s;
        ++c.live_blocks;
        live_bytes_ += c.spec.block_size;
        return reinterpret_cast<void*>(s.address + block * c.spec.block_size);
    }

    // Frees a block of class `index`; false (and nothing changes) when `address` is not the
    // start of a live block of that class.
    [[nodiscard]] bool deallocate(std::size_t index, std::uintptr_t address) noexcept {
        slab_class& c = classes_[index];
        slab* s = c.recent;
        if (s == nullptr || address - s->address >= s->bytes) {
            s = find_slab(address);
            if (s == nullptr || s->class_index != index) return false;
        }
        const std::size_t offset = address - s->address;
        const auto block = static_cast<std::uint32_t>(offset / c.spec.block_size);
        if (offset % c.spec.block_size != 0 || !s->is_live(block)) return false;
        s->flip(block);
        if (s->free_count == 0) c.with_free.push_front(*s);
        s->free_stack[s->free_count++] = block;
        c.recent = s;
        --c.live_blocks;
        live_bytes_ -= c.spec.block_size;
        return true;
    }

    // Whether `address` lies inside a slab; `live` then says whether inside a live block.
    [[nodiscard]] const slab* find(std::uintptr_t address) const noexcept { return find_chunk(slabs_, address); }
    [[nodiscard]] bool in_live_block(std::uintptr_t address) const noexcept {
        const slab* s = find(address);
        return s != nullptr && s->is_live(static_cast<std::uint32_t>((address - s->address) / classes_[s->class_index].spec.block_size));
    }

    // Returns every wholly free slab to `upstream`. O(slabs).
    template <class Upstream>
    void release(Upstream& upstream) noexcept {
        for (auto it = slabs_.begin(); it != slabs_.end();) {
            slab& s = *it++;
            if (s.free_count == s.blocks) drop_slab(upstream, s);
        }
    }

    // Returns every slab, live blocks or not.
    template <class Upstream>
    void release_all(Upstream& upstream) noexcept {
        while (!slabs_.empty()) drop_slab(upstream, *slabs_.begin());
        for (std::size_t i = 0; i < class_count_; ++i) classes_[i].live_blocks = 0;
        live_bytes_ = 0;
    }

    [[nodiscard]] std::size_t reserved_bytes() const noexcept { return reserved_bytes_; }
    [[nodiscard]] std::size_t live_bytes() const noexcept { return live_bytes_; }
    [[nodiscard]] std::size_t live_blocks() const noexcept {
        std::size_t total = 0;
        for (std::size_t i = 0; i < class_count_; ++i) total += classes_[i].live_blocks;
        return total;
    }
    [[nodiscard]] std::size_t chunks() const noexcept { return slabs_.size(); }

    // The walk of walk.hpp: every slab in address order as a chunk, each of its blocks in address
    // order; a slab keeps no request sizes, so requested_bytes is 0. O(blocks); allocates nothing.
    template <class Visitor>
    void for_each_block(Visitor&& visit) const {
        for (const slab& s : slabs_) {
            chunk_view chunk_seen;
            chunk_seen.address = s.address;
            chunk_seen.bytes = s.bytes;
            const std::size_t block_size = classes_[s.class_index].spec.block_size;
            for (std::uint32_t i = 0; i < s.blocks; ++i) {
                block_view seen;
                seen.address = s.address + i * block_size;
                seen.bytes = block_size;
                seen.live = s.is_live(i);
                visit(chunk_seen, seen);
            }
        }
    }

    // Every slab: its free stack and live bitmap agree, each free index appears once, it is on
    // its class's list exactly when it has a free block; counts and byte totals add up.
    void check_invariants() const {
        std::size_t reserved = 0, live_bytes = 0, on_lists = 0;
        std::vector<std::size_t> live_per_class(class_count_, 0);
        std::vector<std::size_t> with_free_per_class(class_count_, 0);
        std::vector<bool> seen;
        for (const slab& s : slabs_) {
            POOLKIT_VERIFY(s.class_index < class_count_, "a slab of no class");
            const slab_class& c = classes_[s.class_index];
            POOLKIT_VERIFY(s.blocks > 0 && s.free_count <= s.blocks, "a slab's free count is out of range");
            POOLKIT_VERIFY(s.bytes == s.blocks * c.spec.block_size, "a slab's size is not its blocks");
            POOLKIT_VERIFY(s.address % c.spec.alignment == 0, "a slab off its class alignment");
            seen.assign(s.blocks, false);
            for (std::uint32_t i = 0; i < s.free_count; ++i) {
                const std::uint32_t block = s.free_stack[i];
                POOLKIT_VERIFY(block < s.blocks && !seen[block], "a free index out of range or listed twice");
                POOLKIT_VERIFY(!s.is_live(block), "a free index marked live");
                seen[block] = true;
            }
            std::size_t live = 0;
            for (std::uint32_t i = 0; i < s.blocks; ++i) live += s.is_live(i) ? 1 : 0;
            POOLKIT_VERIFY(live + s.free_count == s.blocks, "live and free blocks do not add up to the slab");
            if (s.free_count > 0) ++with_free_per_class[s.class_index];
            live_per_class[s.class_index] += live;
            live_bytes += live * c.spec.block_size;
            reserved += s.bytes;
        }
        for (std::size_t i = 0; i < class_count_; ++i) {
            POOLKIT_VERIFY(live_per_class[i] == classes_[i].live_blocks, "a class's live count drifted");
            // Only slabs of this class with a free block, as many as the walk found: each once.
            for (const slab& listed : classes_[i].with_free) {
                POOLKIT_VERIFY(listed.class_index == i && listed.free_count > 0, "a full slab or another class's on a list");
                POOLKIT_VERIFY(slabs_.find(listed) != slabs_.end(), "a list holds a slab that is not in the index");
            }
            POOLKIT_VERIFY(classes_[i].with_free.size() == with_free_per_class[i], "a slab with free blocks off its list");
            on_lists += classes_[i].with_free.size();
            if (const slab* recent = classes_[i].recent) {
                POOLKIT_VERIFY(slabs_.find(*recent) != slabs_.end() && recent->class_index == i,
                               "a class remembers a slab it does not have");
            }
        }
        POOLKIT_VERIFY(on_lists <= slabs_.size(), "a slab on two lists");
        POOLKIT_VERIFY(reserved == reserved_bytes_, "reserved byte count drifted");
        POOLKIT_VERIFY(live_bytes == live_bytes_, "live byte count drifted");
        POOLKIT_VERIFY(reserved <= maximum_reserved_, "reserved past the maximum");
        POOLKIT_VERIFY(nodes_.in_use() == slabs_.size(), "slab records leaked");
    }

private:
    slab* find_slab(std::uintptr_t address) noexcept { return const_cast<slab*>(std::as_const(*this).find(address)); }

    // Out of line, like every growth path: inlined, it keeps allocate from being inlined.
    template <class Upstream>
    [[gnu::noinline]] bool add_slab(Upstream& upstream, std::size_t index) {
        const class_spec& spec = classes_[index].spec;
        return grow_chunk(
            spec.block_size * spec.blocks_per_slab, spec.block_size,
            [&](std::size_t bytes) { return try_add_slab(upstream, index, static_cast<std::uint32_t>(bytes / spec.block_size)); },
            [&] { release(upstream); });
    }

    template <class Upstream>
    bool try_add_slab(Upstream& upstream, std::size_t index, std::uint32_t blocks) {
        const class_spec& spec = classes_[index].spec;
        const std::size_t bytes = spec.block_size * blocks;
        if (!fits_under(bytes, reserved_bytes_, maximum_reserved_)) return false;
        void* memory = allocate_chunk(upstream, bytes, spec.alignment);
        if (memory == nullptr) return false;
        slab* s = nullptr;
        try {
            s = nodes_.make(reinterpret_cast<std::uintptr_t>(memory), spec.block_size, blocks, spec.alignment,
                            static_cast<std::uint32_t>(index));
        } catch (...) {
            upstream.deallocate(memory, bytes, spec.alignment);
            throw;
        }
        slabs_.insert(*s);
        classes_[index].with_free.push_front(*s);
        reserved_bytes_ += bytes;
        return true;
    }

    template <class Upstream>
    void drop_slab(Upstream& upstream, slab& s) noexcept {
        slab_class& c = classes_[s.class_index];
        if (s.free_count > 0) c.with_free.erase(c.with_free.iterator_to(s));
        if (c.recent == &s) c.recent = nullptr;
        slabs_.erase(slabs_.iterator_to(s));
        reserved_bytes_ -= s.bytes;
        upstream.deallocate(reinterpret_cast<void*>(s.address), s.bytes, s.alignment);
        nodes_.destroy(&s);
    }

    std::unique_ptr<slab_class[]> classes_;
    std::size_t class_count_ = 0;
    std::size_t maximum_reserved_ = std::numeric_limits<std::size_t>::max();
    node_pool<slab> nodes_;  // before slabs_: the set goes first on destruction
    slab_set slabs_;  // every slab of every class, by address
    std::size_t reserved_bytes_ = 0;
    std::size_t live_bytes_ = 0;
};

}  // namespace poolkit::detail::slabs
