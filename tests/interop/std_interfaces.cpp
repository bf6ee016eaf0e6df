// pmr_adaptor and std_allocator over host compositions.
#include "../support/instrumented.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/interop/pmr_adaptor.hpp>
#include <poolkit/interop/std_allocator.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <doctest/doctest.h>

#include <list>
#include <map>
#include <memory>
#include <memory_resource>
#include <string>
#include <type_traits>
#include <vector>

using namespace poolkit;
using test::instrumented;

namespace {
using pool = best_fit<ref<instrumented<>>>;
}

// A device-only resource is refused by pmr_adaptor at compile time (the static_assert names
// pmr_device_adaptor); simulated memory has neither property, so neither bridge takes it.
static_assert(std::is_base_of_v<std::pmr::memory_resource, pmr_adaptor<new_delete_resource>>);

TEST_CASE("std::pmr containers allocate from a poolkit pool through pmr_adaptor") {
    instrumented<> memory;
    pool blocks{ref(memory)};
    pmr_adaptor<ref<pool>> adaptor{ref(blocks)};
    {
        std::pmr::vector<std::pmr::string> words{&adaptor};
        for (int i = 0; i < 1000; ++i) words.emplace_back("a string long enough to leave the small buffer #" + std::to_string(i));
        std::pmr::map<int, int> squares{&adaptor};
        for (int i = 0; i < 1000; ++i) squares[i] = i * i;
        CHECK(words[999].ends_with("#999"));
        CHECK(squares[31] == 961);
        CHECK(blocks.live_blocks() > 1000);
        CHECK(words.get_allocator().resource() == &adaptor);
    }
    CHECK(blocks.live_blocks() == 0);
    void* empty = adaptor.allocate(0, 8);  // std::pmr wants a pointer even for 0 bytes
    CHECK(empty != nullptr);
    adaptor.deallocate(empty, 0, 8);
    blocks.check_invariants();
    CHECK(memory.errors().empty());
}

TEST_CASE("pmr_adaptor equality follows the underlying resources") {
    pmr_adaptor<new_delete_resource> a, b;
    instrumented<> memory;
    pmr_adaptor<ref<instrumented<>>> c{ref(memory)}, d{ref(memory)};
    instrumented<> other;
    pmr_adaptor<ref<instrumented<>>> e{ref(other)};
    CHECK(a.is_equal(b));  // stateless: any can free another's memory
    CHECK(c.is_equal(d));  // refer to one resource
    CHECK_FALSE(c.is_equal(e));
    CHECK_FALSE(a.is_equal(c));
    CHECK_FALSE(a.is_equal(*std::pmr::new_delete_resource()));
}

TEST_CASE("std_allocator: containers, rebinding, equality, propagation") {
    instrumented<> memory;
    pool blocks{ref(memory)};
    using int_allocator = std_allocator<int, pool>;
    std::vector<int, int_allocator> numbers{int_allocator{blocks}};
    for (int i = 0; i < 10000; ++i) numbers.push_back(i);
    CHECK(numbers[9999] == 9999);
    std::list<double, std_allocator<double, pool>> doubles{std_allocator<double, pool>{blocks}};  // rebinds to its node type
    doubles.assign(100, 1.5);
    CHECK(blocks.live_blocks() >= 101);

    static_assert(std::allocator_traits<int_allocator>::propagate_on_container_move_assignment::value);
    static_assert(std::is_same_v<std::allocator_traits<int_allocator>::rebind_alloc<char>, std_allocator<char, pool>>);
    std_allocator<char, pool> bytes{numbers.get_allocator()};
    CHECK(bytes == numbers.get_allocator());
    pool elsewhere{ref(memory)};
    CHECK_FALSE(int_allocator{elsewhere} == numbers.get_allocator());

    std::vector<int, int_allocator> moved_into{int_allocator{elsewhere}};
    moved_into = std::move(numbers);  // the allocator moves with the elements: no copy, no mixing
    CHECK(moved_into.get_allocator() == int_allocator{blocks});
    CHECK(moved_into.size() == 10000);

    struct alignas(64) wide {
        char bytes[64];
    };
    std::vector<wide, std_allocator<wide, pool>> aligned{std_allocator<wide, pool>{blocks}};
    aligned.resize(10);
    CHECK(is_aligned(aligned.data(), 64));
    CHECK_THROWS_AS(static_cast<void>(int_allocator{blocks}.allocate(std::size_t(-1) / 2)), std::bad_array_new_length);
}
