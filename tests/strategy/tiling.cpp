// The tiling helpers' in-place refiling (strategy/detail/tiling.hpp): take_place puts a block in
// a filed block's place only where the size index stays in order, and split_around and coalesce
// file their results the same way whether or not the place is taken.
#include <poolkit/strategy/detail/intrusive.hpp>
#include <poolkit/strategy/detail/tiling.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace {

using namespace poolkit;

struct size_tag;
struct list_tag;

struct node : detail::intrusive::set_hook<size_tag>, detail::intrusive::list_hook<list_tag> {
    node(std::uintptr_t address_, std::size_t bytes_, int owner_ = 0) : address(address_), bytes(bytes_), owner(owner_) {}
    std::uintptr_t address;
    std::size_t bytes;
    int owner;
    std::size_t requested = 0;
    bool free = true;
};

struct by_size {
    bool operator()(const node& a, const node& b) const noexcept {
        return a.bytes < b.bytes || (a.bytes == b.bytes && a.address < b.address);
    }
};

using index_type = detail::intrusive::multiset<node, size_tag, by_size>;
using list_type = detail::intrusive::list<node, list_tag>;

// A node_pool's make and destroy, counting what is alive.
struct nodes {
    std::vector<node*> made;
    int alive = 0;
    node* make(std::uintptr_t address, std::size_t bytes, int owner) {
        ++alive;
        return made.emplace_back(new node(address, bytes, owner));
    }
    void destroy(node* n) noexcept {
        --alive;
        delete n;
    }
};

// The sizes in index order.
std::vector<std::size_t> sizes(const index_type& index) {
    std::vector<std::size_t> out;
    for (const node& n : index) out.push_back(n.bytes);
    return out;
}

}  // namespace

TEST_CASE("take_place: a block takes a filed block's place only where the order holds") {
    node small(0, 100), middle(1000, 300), large(2000, 500);
    index_type index;
    index.insert(small);
    index.insert(middle);
    index.insert(large);
    const by_size less;

    SUBCASE("between its neighbours: it takes the place, the old one is out") {
        node with(5000, 200);
        CHECK(detail::take_place(index, middle, with, less));
        CHECK(sizes(index) == std::vector<std::size_t>{100, 200, 500});
        CHECK(detail::in_strict_order(index, less));
        index.erase(index.iterator_to(with));
    }
    SUBCASE("past a neighbour: refused, nothing changes") {
        node smaller(5000, 50), larger(5000, 600);
        CHECK_FALSE(detail::take_place(index, middle, smaller, less));
        CHECK_FALSE(detail::take_place(index, middle, larger, less));
        CHECK(sizes(index) == std::vector<std::size_t>{100, 300, 500});
        index.erase(index.iterator_to(middle));
    }
    SUBCASE("the block itself, grown: stays where it still fits") {
        middle.bytes = 400;
        CHECK(detail::take_place(index, middle, middle, less));
        middle.bytes = 700;
        CHECK_FALSE(detail::take_place(index, middle, middle, less));
        index.erase(index.iterator_to(middle));
        index.insert(middle);
        CHECK(sizes(index) == std::vector<std::size_t>{100, 500, 700});
        index.erase(index.iterator_to(middle));
    }
    SUBCASE("an equal size orders by address") {
        node twin(3000, 300), below(500, 300), above(4000, 300);
        index.insert(twin);  // 100, 300 @1000, 300 @3000, 500
        CHECK(detail::take_place(index, middle, below, less));
        CHECK_FALSE(detail::take_place(index, below, above, less));  // past its twin at 3000
        CHECK(detail::in_strict_order(index, less));
        index.erase(index.iterator_to(below));
        index.erase(index.iterator_to(twin));
    }
    index.clear();
}

TEST_CASE("split_around and coalesce: the same tiling and index with their place taken or not") {
    for (const bool take : {false, true}) {
        CAPTURE(take);
        nodes pool;
        list_type blocks;
        index_type index;
        const by_size less;
        // ordered_index, counting its calls, and taking no place unless `take`.
        struct counting_index {
            index_type& index;
            bool take;
            int forgotten = 0, filed = 0, taken = 0;
            void forget(node& n) noexcept {
                ++forgotten;
                detail::ordered_index<index_type, by_size>{index}.forget(n);
            }
            void file(node& n) noexcept {
                ++filed;
                detail::ordered_index<index_type, by_size>{index}.file(n);
            }
            bool replace(node& old, node& with) noexcept {
                if (!take || !detail::ordered_index<index_type, by_size>{index}.replace(old, with)) return false;
                ++taken;
                return true;
            }
        } indexes{index, take};
        // One range of 1,000 bytes at 0, and a lone free block of 5,000 bytes elsewhere in the index.
        node* whole = pool.make(0, 1000, 0);
        blocks.push_back(*whole);
        index.insert(*whole);
        node other(100000, 5000);
        index.insert(other);

        // Carve [0, 100) and [100, 300): each leaves the rest after it.
        node& first = *whole;
        detail::split_around(blocks, first, 0, 100, 1, pool, indexes);
        first.free = false;
        node& rest = *std::next(blocks.iterator_to(first));
        detail::split_around(blocks, rest, 100, 200, 1, pool, indexes);
        rest.free = false;
        CHECK(sizes(index) == std::vector<std::size_t>{700, 5000});
        CHECK(detail::in_strict_order(index, less));

        // Free the first (no free neighbour), then the second (free on both sides).
        first.free = true;
        node& merged_first = detail::coalesce(blocks, first, pool, indexes);
        CHECK(&merged_first == &first);
        CHECK(sizes(index) == std::vector<std::size_t>{100, 700, 5000});
        rest.free = true;
        node& merged = detail::coalesce(blocks, rest, pool, indexes);
        CHECK(merged.address == 0);
        CHECK(merged.bytes == 1000);
        CHECK(blocks.size() == 1);
        CHECK(sizes(index) == std::vector<std::size_t>{1000, 5000});
        CHECK(detail::in_strict_order(index, less));
        CHECK(pool.alive == 1);
        // Taking a place saves a forget and a file each time: both remainders of a split, and
        // the final merge (1,000 still below 5,000).
        CHECK(indexes.taken == (take ? 3 : 0));
        CHECK(indexes.forgotten == (take ? 1 : 4));
        CHECK(indexes.filed == (take ? 1 : 4));
        index.clear();
        blocks.clear_and_dispose([&](node* n) { pool.destroy(n); });
    }
}
