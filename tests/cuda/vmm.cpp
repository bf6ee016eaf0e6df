// What is special about cuda_vmm_resource, on a real device: the reservation and its granules,
// data that survives mapping and unmapping around it, physical memory that really comes and goes,
// exhaustion, and the resource face written and read through the runtime.
#include "../support/cuda_mr.hpp"
#include "../support/sizes.hpp"
#include "support.hpp"

#include <poolkit/upstream/cuda_vmm_resource.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace poolkit;

using test::MiB;
using test::scoped_stream;

std::size_t device_free_bytes() {
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
    return free_bytes;
}

std::size_t device_total_bytes() {
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
    return total_bytes;
}

// Whether every byte of [pointer, pointer + bytes) on the device holds `value`.
bool device_holds(const void* pointer, std::size_t bytes, unsigned char value) { return test::device_touch::holds(pointer, bytes, value); }

}  // namespace

static_assert(aliasing_virtual_memory<cuda_vmm_resource>);

TEST_CASE("cuda_vmm_resource: the reservation, the device's granularity and the defaults") {
    cuda_vmm_resource vm;
    int current = -1;
    REQUIRE(cudaGetDevice(&current) == cudaSuccess);
    const std::size_t total = device_total_bytes();
    MESSAGE("granularity ", vm.granularity(), ", reserved ", vm.capacity(), ", physical limit ", vm.physical_limit());
    CHECK(vm.device() == current);
    CHECK(is_power_of_two(vm.granularity()));
    CHECK(vm.granularity() >= 2 * MiB);  // every VMM-capable device so far; 2 MiB on an H200
    CHECK(reinterpret_cast<std::uintptr_t>(vm.base()) % vm.granularity() == 0);
    CHECK(vm.capacity() >= 32 * total);
    CHECK(vm.capacity() < 32 * total + vm.granularity());
    CHECK(vm.physical_limit() <= total);
    CHECK(vm.physical_limit() + vm.granularity() > total);
    CHECK(vm.mapped_bytes() == 0);

    cuda_vmm_resource large_pages{{.reserve_bytes = 256 * MiB, .granularity = 2 * vm.granularity()}};
    CHECK(large_pages.granularity() == 2 * vm.granularity());
    void* block = large_pages.allocate(1);
    CHECK(large_pages.mapped_bytes() == 2 * vm.granularity());
    CHECK(cudaMemset(block, 7, large_pages.granularity()) == cudaSuccess);
    CHECK(device_holds(block, large_pages.granularity(), 7));
    large_pages.deallocate(block, 1);

    CHECK_THROWS_AS(cuda_vmm_resource({.granularity = 3 * MiB}), std::invalid_argument);
    CHECK_THROWS_AS(cuda_vmm_resource({.granularity = vm.granularity() / 2}), std::invalid_argument);
    CHECK_THROWS_AS(cuda_vmm_resource({.peers = {1000}}), std::invalid_argument);
    CHECK_THROWS_AS(cuda_vmm_resource({.device = 1000}), std::invalid_argument);
}

TEST_CASE("cuda_vmm_resource: a run mapped whole is one physical allocation, unmapped whole") {
    cuda_vmm_resource vm{{.reserve_bytes = 1024 * MiB}};
    const std::size_t granule = vm.granularity();
    std::byte* run = vm.base() + 2 * granule;
    const std::size_t before = device_free_bytes();
    vm.map_whole(run, 8 * granule);
    vm.map(run + 8 * granule, 2 * granule);
    vm.map_whole(run + 10 * granule, 4 * granule);
    CHECK(vm.map_calls() == 3);
    CHECK(before - device_free_bytes() >= 14 * granule);
    REQUIRE(cudaMemset(run, 0x66, 14 * granule) == cudaSuccess);  // one range to the device
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(device_holds(run, 14 * granule, 0x66));

    vm.unmap(run, 8 * granule);
    CHECK_FALSE(vm.is_mapped(run));
    CHECK(device_holds(run + 8 * granule, 6 * granule, 0x66));
    vm.unmap(run + 9 * granule, 5 * granule);  // a granule mapped alone and the whole mapping beside it
    CHECK(vm.mapped_bytes() == granule);
    CHECK(device_holds(run + 8 * granule, granule, 0x66));
    vm.unmap(run + 8 * granule, granule);
    CHECK(vm.mapped_bytes() == 0);
    CHECK(device_free_bytes() >= before - 64 * MiB);  // given back to the device

    void* block = vm.allocate(7 * granule - 1);  // the resource face maps a block whole
    CHECK(vm.map_calls() == 4);
    REQUIRE(cudaMemset(block, 0x77, 7 * granule - 1) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(device_holds(block, 7 * granule - 1, 0x77));
    vm.deallocate(block, 7 * granule - 1);
    CHECK(vm.mapped_bytes() == 0);
    vm.check_invariants();
}

TEST_CASE("cuda_vmm_resource: granules mapped in one call unmap one by one, and live data survives") {
    cuda_vmm_resource vm{{.reserve_bytes = 1024 * MiB}};
    const std::size_t granule = vm.granularity();
    std::byte* run = vm.base() + 4 * granule;

    vm.map(run, 3 * granule);  // one call, three physical allocations
    CHECK(vm.map_calls() == 1);
    CHECK(vm.mapped_bytes() == 3 * granule);
    REQUIRE(cudaMemset(run, 0x11, granule) == cudaSuccess);
    REQUIRE(cudaMemset(run + granule, 0x22, granule) == cudaSuccess);
    REQUIRE(cudaMemset(run + 2 * granule, 0x33, granule) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);

    vm.unmap(run + granule, granule);  // the middle of the run: a mapping of its own
    CHECK(vm.unmap_calls() == 1);
    CHECK_FALSE(vm.is_mapped(run + granule));
    CHECK(device_holds(run, granule, 0x11));
    CHECK(device_holds(run + 2 * granule, granule, 0x33));

    vm.unmap(run, granule);  // edges of the live granule at run + 2 granules
    vm.map(run + 3 * granule, 2 * granule);
    vm.map(run, 2 * granule);
    REQUIRE(cudaMemset(run, 0x44, 2 * granule) == cudaSuccess);
    REQUIRE(cudaMemset(run + 3 * granule, 0x55, 2 * granule) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(device_holds(run + 2 * granule, granule, 0x33));
    CHECK(device_holds(run, 2 * granule, 0x44));
    CHECK(device_holds(run + 3 * granule, 2 * granule, 0x55));

    // One copy across granules that came from three map calls: the range is one to the device.
    std::vector<unsigned char> host(5 * granule);
    REQUIRE(cudaMemcpy(host.data(), run, host.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(host[0] == 0x44);
    CHECK(host[2 * granule] == 0x33);
    CHECK(host[5 * granule - 1] == 0x55);

    CHECK(vm.map_calls() == 3);
    CHECK(vm.mapped_bytes() == 5 * granule);
    CHECK(vm.peak_mapped_bytes() == 5 * granule);
    vm.unmap(run, 5 * granule);  // one call over granules of three map calls
    CHECK(vm.mapped_bytes() == 0);
    CHECK(vm.unmap_calls() == 3);
    vm.check_invariants();
}

TEST_CASE("cuda_vmm_resource: an alias is the same memory at a second address, and takes none from the device") {
    cuda_vmm_resource vm{{.reserve_bytes = 1024 * MiB}};
    const std::size_t granule = vm.granularity();
    std::byte* source = vm.base() + 2 * granule;
    vm.map_whole(source, 4 * granule);  // one physical allocation
    vm.map(source + 4 * granule, 2 * granule);  // and two more, a granule each
    REQUIRE(cudaMemset(source, 0x21, 4 * granule) == cudaSuccess);
    REQUIRE(cudaMemset(source + 4 * granule, 0x43, 2 * granule) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const std::size_t before = device_free_bytes();

    std::byte* alias = vm.base() + 32 * granule;
    vm.alias(alias, source, 6 * granule);
    CHECK(vm.mapped_bytes() == 6 * granule);
    CHECK(device_free_bytes() + 8 * MiB >= before);  // no physical memory taken (page tables aside)
    CHECK(device_holds(alias, 4 * granule, 0x21));  // what the source holds, read through the alias
    CHECK(device_holds(alias + 4 * granule, 2 * granule, 0x43));
    REQUIRE(cudaMemset(alias + granule, 0x65, 4 * granule) == cudaSuccess);  // written through the alias, across allocations
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(device_holds(source, granule, 0x21));
    CHECK(device_holds(source + granule, 4 * granule, 0x65));
    CHECK(device_holds(source + 5 * granule, granule, 0x43));
    std::vector<unsigned char> host(6 * granule);  // one copy across the alias's mappings
    REQUIRE(cudaMemcpy(host.data(), alias, host.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(host[0] == 0x21);
    CHECK(host[granule] == 0x65);
    CHECK(host[6 * granule - 1] == 0x43);

    CHECK_THROWS_AS(vm.alias(vm.base() + 48 * granule, source + granule, granule), std::invalid_argument);  // cuts an allocation
    CHECK_THROWS_AS(vm.alias(vm.base() + 48 * granule, alias, granule), std::invalid_argument);  // an alias of an alias

    vm.unmap(alias, 6 * granule);  // the alias goes; the memory and its data stay
    CHECK_FALSE(vm.is_mapped(alias));
    CHECK(device_holds(source + granule, 4 * granule, 0x65));
    vm.alias(alias, source + 4 * granule, granule);  // a single granule's allocation, aliased again
    CHECK(device_holds(alias, granule, 0x65));
    vm.check_invariants();
    // Left mapped: the destructor unmaps the alias before the memory under it.
}

TEST_CASE("cuda_vmm_resource: mapping takes physical memory from the device and unmapping gives it back") {
    cuda_vmm_resource vm{{.reserve_bytes = 4096 * MiB}};
    const std::size_t before = device_free_bytes();
    vm.map(vm.base(), 1024 * MiB);
    const std::size_t mapped = device_free_bytes();
    CHECK(before - mapped >= 1024 * MiB);
    CHECK(before - mapped < 1024 * MiB + 64 * MiB);
    vm.unmap(vm.base(), 1024 * MiB);
    const std::size_t after = device_free_bytes();
    CHECK(after + 64 * MiB > before);
}

TEST_CASE("cuda_vmm_resource: map rejects ranges it may not touch") {
    cuda_vmm_resource vm{{.reserve_bytes = 64 * MiB}};
    const std::size_t granule = vm.granularity();
    CHECK_THROWS_AS(vm.map(vm.base() + 4096, granule), std::invalid_argument);
    CHECK_THROWS_AS(vm.map(vm.base() + vm.capacity(), granule), std::invalid_argument);
    vm.map(vm.base(), granule);
    CHECK_THROWS_AS(vm.map(vm.base(), 2 * granule), std::invalid_argument);
    CHECK(vm.map_calls() == 1);
    vm.unmap(vm.base(), granule);
}

TEST_CASE("cuda_vmm_resource: exhaustion throws out_of_memory with its figures and leaves nothing mapped") {
    SUBCASE("past the physical limit, before any driver call") {
        cuda_vmm_resource vm;
        const std::size_t granule = vm.granularity();
        vm.map(vm.base(), granule);
        try {
            vm.map(vm.base() + granule, vm.physical_limit());
            FAIL("map past the device's memory succeeded");
        } catch (const out_of_memory& error) {
            CHECK(error.figures().requested_bytes == vm.physical_limit());
            CHECK(error.figures().reserved_bytes == granule);
            CHECK(error.figures().limit_bytes == vm.physical_limit());
            CHECK(std::string(error.what()).find("cuda_vmm_resource") != std::string::npos);
        }
        CHECK(vm.mapped_bytes() == granule);
        CHECK(vm.map_calls() == 1);
        CHECK_FALSE(vm.is_mapped(vm.base() + granule));
        vm.unmap(vm.base(), granule);
    }
    SUBCASE("past a physical limit of the options") {
        cuda_vmm_resource vm{{.physical_limit = 8 * MiB}};
        void* block = vm.allocate(6 * MiB);
        CHECK_THROWS_AS(static_cast<void>(vm.allocate(4 * MiB)), out_of_memory);
        vm.deallocate(block, 6 * MiB);
        CHECK(vm.mapped_bytes() == 0);
    }
    SUBCASE("past a physical limit set below what is mapped, until enough is unmapped") {
        cuda_vmm_resource vm;
        const std::size_t granule = vm.granularity();
        vm.map(vm.base(), 3 * granule);
        vm.set_physical_limit(2 * granule);
        CHECK(vm.physical_limit() == 2 * granule);
        CHECK_THROWS_AS(vm.map(vm.base() + 4 * granule, granule), out_of_memory);
        vm.check_invariants();
        vm.unmap(vm.base(), 2 * granule);
        vm.map(vm.base() + 4 * granule, granule);
        vm.set_physical_limit(0);  // the device's memory again
        CHECK(vm.physical_limit() + granule > device_total_bytes());
        vm.unmap(vm.base() + 2 * granule, granule);
        vm.unmap(vm.base() + 4 * granule, granule);
        CHECK(vm.mapped_bytes() == 0);
    }
    SUBCASE("the device refuses cuMemCreate: what the call mapped is unmapped again") {
        cuda_vmm_resource vm;
        const std::size_t granule = vm.granularity();
        // Take all but a little of the device's memory, so that the device runs out mid-call.
        void* hog = nullptr;
        for (std::size_t slack = 256 * MiB; hog == nullptr && slack <= 8192 * MiB; slack *= 2) {
            const std::size_t free_bytes = device_free_bytes();
            if (free_bytes <= slack) break;
            if (cudaMalloc(&hog, free_bytes - slack) != cudaSuccess) {
                hog = nullptr;
                static_cast<void>(cudaGetLastError());
            }
        }
        REQUIRE(hog != nullptr);
        const std::size_t left = device_free_bytes();
        const std::size_t asked = (left / granule + 64) * granule;
        MESSAGE("device memory left ", left, ", asking to map ", asked);
        try {
            vm.map(vm.base(), asked);
            FAIL("map of more than the device has free succeeded");
        } catch (const out_of_memory& error) {
            CHECK(error.figures().requested_bytes == asked);
            CHECK(error.figures().reserved_bytes == 0);
            CHECK(error.figures().available_bytes.has_value());
            CHECK(std::string(error.what()).find("available on the device") != std::string::npos);
        }
        CHECK(vm.mapped_bytes() == 0);
        CHECK(vm.map_calls() == 0);
        CHECK_FALSE(vm.is_mapped(vm.base()));
        CHECK(device_free_bytes() + 64 * MiB > left);  // the granules the call had mapped went back
        CHECK(cudaGetLastError() == cudaSuccess);
        REQUIRE(cudaFree(hog) == cudaSuccess);
        vm.map(vm.base(), asked);  // with the memory back, the same call succeeds
        CHECK(vm.mapped_bytes() == asked);
        vm.unmap(vm.base(), asked);
        vm.check_invariants();
    }
}

TEST_CASE("cuda_vmm_resource: the resource face writes and reads like cudaMalloc memory") {
    cuda_vmm_resource vm{{.reserve_bytes = 4096 * MiB}};
    const std::size_t granule = vm.granularity();
    auto* block = static_cast<unsigned char*>(vm.allocate(5 * MiB));
    CHECK(vm.mapped_bytes() == (5 * MiB + granule - 1) / granule * granule);
    CHECK(vm.map_calls() == 1);
    CHECK(vm.owns(block + 5 * MiB - 1));
    std::vector<unsigned char> host(5 * MiB);
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(i * 7);
    REQUIRE(cudaMemcpy(block, host.data(), host.size(), cudaMemcpyHostToDevice) == cudaSuccess);
    std::vector<unsigned char> back(host.size());
    REQUIRE(cudaMemcpy(back.data(), block, back.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(back == host);

    void* aligned = vm.allocate(1000, 256 * MiB);
    CHECK(is_aligned(aligned, 256 * MiB));
    CHECK(cudaMemset(aligned, 1, 1000) == cudaSuccess);
    vm.deallocate(aligned, 1000, 256 * MiB);
    vm.deallocate(block, 5 * MiB);
    CHECK(vm.mapped_bytes() == 0);
    CHECK(vm.unmap_calls() == 2);

    scoped_stream stream;
    for (int round = 0; round < 8; ++round) {
        void* pointer = vm.allocate_async(64 * MiB, 256, stream_ref{stream.handle});
        REQUIRE(cudaMemsetAsync(pointer, round, 64 * MiB, stream.handle) == cudaSuccess);
        vm.deallocate_async(pointer, 64 * MiB, 256, stream_ref{stream.handle});  // waits for the memset
    }
    CHECK(cudaStreamSynchronize(stream.handle) == cudaSuccess);
    CHECK(vm.mapped_bytes() == 0);

    test::cuda_mr_referable<cuda_vmm_resource> handle{vm};  // not copyable: a ref from CCCL 3.2 on
    test::cuda_mr_stream_resource_ref<cuda::mr::device_accessible> reference{handle};
    void* through_ref = test::cuda_mr_allocate_async(reference, MiB, 256, ::cuda::stream_ref{stream.handle});
    CHECK(cudaMemsetAsync(through_ref, 0, MiB, stream.handle) == cudaSuccess);
    test::cuda_mr_deallocate_async(reference, through_ref, MiB, 256, ::cuda::stream_ref{stream.handle});
    vm.check_invariants();
}

TEST_CASE("cuda_vmm_resource: peers get read-write access to every mapping") {
    int devices = 0;
    REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
    int can_access = 0;
    if (devices < 2 || cudaDeviceCanAccessPeer(&can_access, 1, 0) != cudaSuccess || can_access == 0) {
        MESSAGE("skipped: needs two devices where device 1 can access device 0's memory");
        return;
    }
    cuda_vmm_resource vm{{.device = 0, .reserve_bytes = 1024 * MiB, .peers = {1}}};
    void* block = vm.allocate(MiB);
    REQUIRE(cudaSetDevice(1) == cudaSuccess);
    CHECK(cudaMemset(block, 0x5c, MiB) == cudaSuccess);  // device 1 writes device 0's memory
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    CHECK(device_holds(block, MiB, 0x5c));
    vm.deallocate(block, MiB);
}
