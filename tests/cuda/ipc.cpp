// CUDA IPC through cuda_async_resource: a pool allocation made and filled by another process
// (poolkit-ipc-exporter), imported here, read and rewritten, freed, and checked by the exporter;
// on the same GPU and, where there are two, from the other GPU. Bad handles and misuse give clear
// errors.
#include "ipc/descriptors.hpp"
#include "support.hpp"

#include <poolkit/upstream/cuda_async_resource.hpp>

#include <doctest/doctest.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

extern char** environ;

using namespace poolkit;
using namespace poolkit::test;

namespace {

constexpr std::size_t bytes = std::size_t{8} << 20;

// Runs the exporter on `device`, imports its allocation on the current device, and returns the
// exporter's exit status.
int share_with_exporter(int device) {
    int sockets[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sockets) == 0);
    REQUIRE(fcntl(sockets[0], F_SETFD, FD_CLOEXEC) == 0);
    const std::string socket = std::to_string(sockets[1]), on = std::to_string(device), size = std::to_string(bytes);
    char* arguments[] = {const_cast<char*>(POOLKIT_IPC_EXPORTER), const_cast<char*>(socket.c_str()), const_cast<char*>(on.c_str()),
                         const_cast<char*>(size.c_str()), nullptr};
    pid_t child = 0;
    REQUIRE(posix_spawn(&child, POOLKIT_IPC_EXPORTER, nullptr, nullptr, arguments, environ) == 0);
    close(sockets[1]);

    cudaMemPoolPtrExportData data{};
    const int handle = receive_descriptor(sockets[0], &data, sizeof data);
    {
        cuda_async_resource pool = cuda_async_resource::import_handle(handle);
        close(handle);
        CHECK(pool.imported());
        int here = 0;
        REQUIRE(cudaGetDevice(&here) == cudaSuccess);
        if (device != here) pool.grant_access(here);  // the memory is on the other GPU
        void* memory = pool.import_pointer(data);
        CHECK(device_touch::holds(memory, bytes, 0xA5));
        device_touch::fill(memory, bytes, 0x3C);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        pool.deallocate(memory, bytes);  // freed here before the exporter frees it
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    }
    const char go = 1;
    REQUIRE(write(sockets[0], &go, 1) == 1);
    char same = 0;
    CHECK(read(sockets[0], &same, 1) == 1);
    CHECK(same == 1);  // the exporter saw what this process wrote
    close(sockets[0]);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("cuda_async_resource IPC: another process's allocation on this GPU, written by each side, read by the other") {
    CHECK(share_with_exporter(0) == 0);
}

TEST_CASE("cuda_async_resource IPC: another process's allocation on the other GPU, reached as a peer") {
    int devices = 0, can_access = 0;
    REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
    if (devices < 2 || cudaDeviceCanAccessPeer(&can_access, 0, 1) != cudaSuccess || can_access == 0) {
        MESSAGE("skipped: needs two devices where device 0 can access device 1's memory");
        return;
    }
    CHECK(share_with_exporter(1) == 0);
}

TEST_CASE("cuda_async_resource IPC: bad handles and misuse are clear errors") {
    cuda_async_resource plain;
    CHECK_THROWS_WITH_AS(static_cast<void>(plain.export_handle()), doctest::Contains("shareable"), cuda_error);
    CHECK_THROWS_AS(static_cast<void>(plain.import_pointer(cudaMemPoolPtrExportData{})), std::logic_error);
    CHECK_THROWS_WITH_AS(static_cast<void>(cuda_async_resource::import_handle(-1)), doctest::Contains("export_handle"), cuda_error);
    const int not_a_pool = open("/dev/null", O_RDONLY);
    REQUIRE(not_a_pool >= 0);
    CHECK_THROWS_AS(static_cast<void>(cuda_async_resource::import_handle(not_a_pool)), cuda_error);
    close(not_a_pool);

    cuda_async_resource shareable{{.shareable = true}};
    const int handle = shareable.export_handle();
    cuda_async_resource imported = cuda_async_resource::import_handle(handle);  // this process's own pool, imported
    close(handle);
    CHECK_THROWS_AS(static_cast<void>(imported.allocate(1024)), std::logic_error);
    cudaMemPoolPtrExportData garbage{};
    for (std::size_t i = 0; i < sizeof garbage.reserved; ++i) garbage.reserved[i] = static_cast<unsigned char>(i * 37 + 1);
    CHECK_THROWS_AS(static_cast<void>(imported.import_pointer(garbage)), cuda_error);
    static_cast<void>(cudaGetLastError());
}
