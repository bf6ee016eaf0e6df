#include <poolkit/interop/per_device.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace poolkit;

namespace {
// The device a scope has made current on this thread (-1: none), as detail::device_scope would.
thread_local int current = -1;

struct recorded_scope {
    explicit recorded_scope(int device) noexcept : previous_(current) { current = device; }
    recorded_scope(const recorded_scope&) = delete;
    recorded_scope& operator=(const recorded_scope&) = delete;
    ~recorded_scope() { current = previous_; }
    void check() const noexcept {}

private:
    int previous_;
};

struct device_object {
    virtual ~device_object() = default;
    int made_on = current;
};
struct derived_object final : device_object {};

using resources = per_device<device_object, recorded_scope>;
}  // namespace

TEST_CASE("per_device makes a device's resource on first use, with that device current, and keeps it") {
    resources r(3);
    CHECK(r.count() == 3);
    CHECK_FALSE(r.any());
    CHECK(r.find(1) == nullptr);
    CHECK_FALSE(r.any());  // looking makes nothing

    int makes = 0;
    auto make = [&] {
        ++makes;
        return std::make_unique<derived_object>();
    };
    device_object& first = r.get(1, make);
    CHECK(first.made_on == 1);
    CHECK(current == -1);  // the scope is over
    CHECK(&r.get(1, make) == &first);
    CHECK(makes == 1);
    CHECK(r.find(1) == &first);
    CHECK(r.find(0) == nullptr);
    CHECK(r.any());
}

TEST_CASE("per_device refuses a device that does not exist, and a make() that fails makes nothing") {
    resources r(2);
    auto make = [] { return std::make_unique<device_object>(); };
    CHECK_THROWS_WITH_AS(r.get(2, make), "poolkit: no device 2 (there are 2)", std::out_of_range);
    CHECK_THROWS_WITH_AS(static_cast<void>(r.find(-1)), "poolkit: no device -1 (there are 2)", std::out_of_range);
    CHECK_FALSE(r.contains(2));
    CHECK(r.contains(0));

    CHECK_THROWS_AS(r.get(0, []() -> std::unique_ptr<device_object> { throw std::runtime_error("out of memory"); }), std::runtime_error);
    CHECK_THROWS_WITH_AS(r.get(0, [] { return std::unique_ptr<device_object>(); }),
                         "poolkit: per_device: make() returned no resource for device 0", std::logic_error);
    CHECK_FALSE(r.any());
    CHECK(r.get(0, make).made_on == 0);  // a later make() still runs

    const resources none(-1);  // a device count the runtime could not read: no devices
    CHECK(none.count() == 0);
}

TEST_CASE("per_device visits the made resources in device order, each with its device current") {
    resources r(4);
    auto make = [] { return std::make_unique<device_object>(); };
    r.get(3, make);
    r.get(1, make);
    std::vector<int> visited;
    r.for_each([&](device_object& each, int device) {
        CHECK(current == device);
        CHECK(each.made_on == device);
        visited.push_back(device);
    });
    CHECK(visited == std::vector<int>{1, 3});
}

TEST_CASE("per_device makes one resource per device when threads ask at once") {
    resources r(2);
    std::atomic<int> makes{0};
    std::vector<device_object*> seen(8);
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < seen.size(); ++i) {
        threads.emplace_back([&, i] {
            seen[i] = &r.get(static_cast<int>(i % 2), [&] {
                ++makes;
                return std::make_unique<device_object>();
            });
        });
    }
    for (auto& thread : threads) thread.join();
    CHECK(makes == 2);
    for (std::size_t i = 0; i < seen.size(); ++i) CHECK(seen[i] == r.find(static_cast<int>(i % 2)));
}
