// ref, resource_ref, any_resource: forwarding, properties, equality, ownership.
#include "../support/instrumented.hpp"

#include <poolkit/core/any_resource.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/core/resource_ref.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <doctest/doctest.h>

#include <type_traits>

using namespace poolkit;
using test::instrumented;

namespace {

// A resource with a value, so that equality means something; counts live copies.
struct copy_counted {
    int id = 0;
    static inline int live = 0;
    explicit copy_counted(int value) : id(value) { ++live; }
    copy_counted(const copy_counted& other) : id(other.id) { ++live; }
    ~copy_counted() { --live; }
    void* allocate(std::size_t bytes, std::size_t alignment) { return new_delete_resource{}.allocate(bytes, alignment); }
    void deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept { new_delete_resource{}.deallocate(p, bytes, alignment); }
    friend bool operator==(const copy_counted& a, const copy_counted& b) { return a.id == b.id; }
    friend void get_property(const copy_counted&, host_accessible) noexcept {}
};

// A resource without properties.
struct plain {
    void* allocate(std::size_t, std::size_t) { return nullptr; }
    void deallocate(void*, std::size_t, std::size_t) noexcept {}
    friend bool operator==(const plain&, const plain&) = default;
};

}  // namespace

// The concepts accept what they should and nothing else.
static_assert(resource<copy_counted> && !stream_resource<copy_counted>);
static_assert(resource<plain> && !has_property<plain, host_accessible>);
static_assert(!resource<int>);
static_assert(stream_resource<simulated_resource>);

// ref forwards calls, capabilities and properties, and is trivially copyable.
static_assert(std::is_trivially_copyable_v<ref<instrumented<>>>);
static_assert(has_property<ref<new_delete_resource>, host_accessible>);
static_assert(!has_property<ref<plain>, host_accessible>);
static_assert(has_try_allocate<ref<new_delete_resource>> && !has_try_allocate<ref<plain>>);
static_assert(stream_resource<ref<simulated_resource>> && !stream_resource<ref<new_delete_resource>>);
static_assert(has_owns<ref<simulated_resource>> && has_check_invariants<ref<simulated_resource>>);
static_assert(!std::is_constructible_v<ref<new_delete_resource>, new_delete_resource&&>);

// Erased wrappers carry exactly the properties they were declared with.
static_assert(std::is_trivially_copyable_v<resource_ref<host_accessible>>);
static_assert(has_property<resource_ref<host_accessible>, host_accessible>);
static_assert(!has_property<resource_ref<>, host_accessible>);
static_assert(std::is_constructible_v<resource_ref<host_accessible>, new_delete_resource&>);
static_assert(!std::is_constructible_v<resource_ref<host_accessible>, plain&>);
static_assert(!std::is_constructible_v<resource_ref<device_accessible>, new_delete_resource&>);
static_assert(!std::is_constructible_v<stream_resource_ref<>, new_delete_resource&>);
static_assert(std::is_constructible_v<stream_resource_ref<>, simulated_resource&>);
static_assert(std::is_constructible_v<resource_ref<>, stream_resource_ref<>&>);
static_assert(!std::is_constructible_v<any_resource<>, simulated_resource>);  // not copyable
static_assert(std::is_copy_constructible_v<any_resource<host_accessible>>);

TEST_CASE("ref shares one resource between users") {
    instrumented<> upstream;
    ref<instrumented<>> a{upstream};
    ref<instrumented<>> b = a;
    void* p = a.allocate(100, 16);
    CHECK(upstream.live_blocks() == 1);
    b.deallocate(p, 100, 16);
    CHECK(upstream.live_blocks() == 0);
    CHECK(a == b);
    CHECK(&a.get() == &upstream);
    instrumented<> other;
    CHECK_FALSE(a == ref<instrumented<>>{other});
    CHECK(upstream.errors().empty());
}

TEST_CASE("resource_ref: equal when the referenced resources are equal and of one type") {
    new_delete_resource first, second;
    instrumented<> upstream;
    resource_ref<host_accessible> to_first{first}, to_second{second}, to_upstream{upstream};
    CHECK(to_first == to_second);  // stateless: all equal
    CHECK_FALSE(to_first == to_upstream);
    copy_counted one{1}, also_one{1}, two{2};
    CHECK(resource_ref<>{one} == resource_ref<>{also_one});
    CHECK_FALSE(resource_ref<>{one} == resource_ref<>{two});

    resource_ref<> narrowed{to_upstream};  // fewer properties: refers to the same object
    void* p = narrowed.allocate(64, 64);
    to_upstream.deallocate(p, 64, 64);
    CHECK(upstream.allocations() == 1);
    CHECK(upstream.deallocations() == 1);
}

TEST_CASE("stream_resource_ref forwards the stream-ordered calls") {
    simulated_resource simulated{{.capacity = 1 << 20}};
    stream_resource_ref<> erased{simulated};
    void* p = erased.allocate_async(1000, 256, default_stream);
    CHECK(simulated.live_allocations() == 1);
    erased.deallocate_async(p, 1000, 256, default_stream);
    CHECK(simulated.live_allocations() == 0);
    resource_ref<> plain_view{erased};
    CHECK(plain_view == resource_ref<>{simulated});
}

TEST_CASE("any_resource owns a copy, copies deeply and moves cheaply") {
    REQUIRE(copy_counted::live == 0);
    {
        any_resource<host_accessible> a{copy_counted{7}};
        CHECK(copy_counted::live == 1);
        any_resource<host_accessible> b = a;
        CHECK(copy_counted::live == 2);
        CHECK(a == b);
        any_resource<host_accessible> c{copy_counted{8}};
        CHECK_FALSE(a == c);
        c = std::move(a);
        CHECK(copy_counted::live == 2);
        CHECK(c == b);
        void* p = c.allocate(32, 32);
        b.deallocate(p, 32, 32);
        resource_ref<host_accessible> borrowed{c};  // refers to the held object, not to the wrapper
        any_resource<host_accessible> d = std::move(c);
        void* q = borrowed.allocate(8, 8);  // still valid: the object did not move
        d.deallocate(q, 8, 8);
    }
    CHECK(copy_counted::live == 0);
}
