// detail::device_scope on a real GPU: on the device whose primary context is current it asks the
// driver alone and switches nothing; on a thread with no context yet, or a device that does not
// exist, it falls back to the runtime, which binds the device or reports the failure through
// check().
#include <poolkit/core/detail/cuda_driver.hpp>
#include <poolkit/core/errors.hpp>

#include <cuda_runtime_api.h>

#include <doctest/doctest.h>

#include <thread>

namespace {

int current_device() {
    int device = -1;
    REQUIRE(cudaGetDevice(&device) == cudaSuccess);
    return device;
}

int device_count() {
    int devices = 0;
    REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
    return devices;
}

}  // namespace

TEST_CASE("device_scope: on the current device it switches nothing, on another it switches and restores") {
    using poolkit::detail::device_scope;
    const int devices = device_count();
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    REQUIRE(cudaFree(nullptr) == cudaSuccess);  // the primary context is current from here
    CHECK(device_scope::primary_current(0));
    CHECK_FALSE(device_scope::primary_current(devices));  // no such device: no driver call fails either
    CHECK_FALSE(device_scope::primary_current(-1));
    {
        const device_scope scope(0);
        CHECK_NOTHROW(scope.check());
        CHECK(current_device() == 0);
    }
    CHECK(current_device() == 0);

    if (devices > 1) {
        {
            const device_scope scope(1);
            CHECK_NOTHROW(scope.check());
            CHECK(current_device() == 1);
            CHECK(device_scope::primary_current(1));
            CHECK_FALSE(device_scope::primary_current(0));
        }
        CHECK(current_device() == 0);
        CHECK(device_scope::primary_current(0));
    } else {
        MESSAGE("one device: switching to another is not exercised");
    }
}

TEST_CASE("device_scope: a thread with no context yet gets its device from the runtime") {
    using poolkit::detail::device_scope;
    bool before = true;
    bool bound = false;
    bool after = false;
    std::thread([&] {
        before = device_scope::primary_current(0);  // nothing made current on this thread yet
        const device_scope scope(0);
        int device = -1;  // asked without doctest's macros, which must not throw on this thread
        bound = cudaFree(nullptr) == cudaSuccess && cudaGetDevice(&device) == cudaSuccess && device == 0;
        after = device_scope::primary_current(0);
    }).join();
    CHECK_FALSE(before);
    CHECK(bound);
    CHECK(after);
}

TEST_CASE("device_scope: a device that does not exist is refused through check() (an API error on purpose)") {
    using poolkit::detail::device_scope;
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    {
        const device_scope scope(device_count());  // the runtime refuses; nothing changes
        CHECK_THROWS_AS(scope.check(), poolkit::cuda_error);
    }
    static_cast<void>(cudaGetLastError());
    CHECK(current_device() == 0);
}
