// CUDA IPC: memory made and filled by another process (poolkit-ipc-exporter), imported here, read
// and rewritten, and checked by the exporter: an allocation of a shareable cuda_async_resource
// (freed here first), and a block of a shareable cuda_vmm_resource (which the exporter frees, and
// exits, while it is still mapped here); on the same GPU and, where there are two, from the other
// GPU. Bad handles and misuse give clear errors.
#include "ipc/descriptors.hpp"
#include "support.hpp"

#include <poolkit/upstream/cuda_async_resource.hpp>
#include <poolkit/upstream/cuda_vmm_resource.hpp>

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

// The exporter's process, its end of a socket pair, and its exit status.
class exporter {
public:
    exporter(const char* kind, int device) {
        int sockets[2];
        REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sockets) == 0);
        REQUIRE(fcntl(sockets[0], F_SETFD, FD_CLOEXEC) == 0);
        socket_ = sockets[0];
        const std::string socket = std::to_string(sockets[1]), on = std::to_string(device), size = std::to_string(bytes);
        char* arguments[] = {const_cast<char*>(POOLKIT_IPC_EXPORTER), const_cast<char*>(kind),         const_cast<char*>(socket.c_str()),
                             const_cast<char*>(on.c_str()),           const_cast<char*>(size.c_str()), nullptr};
        REQUIRE(posix_spawn(&child_, POOLKIT_IPC_EXPORTER, nullptr, nullptr, arguments, environ) == 0);
        close(sockets[1]);
    }
    exporter(const exporter&) = delete;
    exporter& operator=(const exporter&) = delete;
    ~exporter() {
        close(socket_);
        if (child_ != 0) waitpid(child_, nullptr, 0);
    }

    // The descriptor it sent (close it), with `size` bytes of data.
    int receive(void* data, std::size_t size) const { return receive_descriptor(socket_, data, size); }

    // Tells it the memory holds 0x3C now; whether it saw that.
    bool confirm() const {
        const char go = 1;
        REQUIRE(write(socket_, &go, 1) == 1);
        char same = 0;
        return read(socket_, &same, 1) == 1 && same == 1;
    }

    // Its exit status once it has exited.
    int wait() {
        int status = 0;
        REQUIRE(waitpid(child_, &status, 0) == child_);
        child_ = 0;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }

private:
    int socket_ = -1;
    pid_t child_ = 0;
};

int current() {
    int here = 0;
    REQUIRE(cudaGetDevice(&here) == cudaSuccess);
    return here;
}

// The exporter's pool allocation on `device`, imported on the current device.
int share_pool_allocation(int device) {
    exporter other("async", device);
    cudaMemPoolPtrExportData data{};
    const int handle = other.receive(&data, sizeof data);
    {
        cuda_async_resource pool = cuda_async_resource::import_handle(handle);
        close(handle);
        CHECK(pool.imported());
        if (device != current()) pool.grant_access(current());  // the memory is on the other GPU
        void* memory = pool.import_pointer(data);
        CHECK(device_touch::holds(memory, bytes, 0xA5));
        device_touch::fill(memory, bytes, 0x3C);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        pool.deallocate(memory, bytes);  // freed here before the exporter frees it
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    }
    CHECK(other.confirm());  // the exporter saw what this process wrote
    return other.wait();
}

// The exporter's VMM block on `device`, mapped here for the current device; still readable after
// the exporter freed it and exited.
int share_vmm_block(int device) {
    exporter other("vmm", device);
    std::size_t mapped = 0;
    const int handle = other.receive(&mapped, sizeof mapped);
    imported_block block(handle, mapped);
    close(handle);
    CHECK(block.size() >= bytes);
    CHECK(device_touch::holds(block.data(), bytes, 0xA5));
    device_touch::fill(block.data(), bytes, 0x3C);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(other.confirm());
    const int status = other.wait();
    CHECK(device_touch::holds(block.data(), bytes, 0x3C));  // the exporter is gone; the memory is not
    return status;
}

bool two_peer_devices() {
    int devices = 0, can_access = 0;
    REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
    if (devices >= 2 && cudaDeviceCanAccessPeer(&can_access, 0, 1) == cudaSuccess && can_access != 0) return true;
    MESSAGE("skipped: needs two devices where device 0 can access device 1's memory");
    return false;
}

}  // namespace

TEST_CASE("cuda_async_resource IPC: another process's allocation on this GPU, written by each side, read by the other") {
    CHECK(share_pool_allocation(0) == 0);
}

TEST_CASE("cuda_async_resource IPC: another process's allocation on the other GPU, reached as a peer") {
    if (two_peer_devices()) CHECK(share_pool_allocation(1) == 0);
}

TEST_CASE("cuda_vmm_resource IPC: another process's block, mapped here, outlives the exporter") {
    CHECK(share_vmm_block(0) == 0);
    if (two_peer_devices()) CHECK(share_vmm_block(1) == 0);
}

TEST_CASE("IPC: bad handles and misuse are clear errors") {
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

    cuda_vmm_resource private_memory{{.reserve_bytes = std::size_t{1} << 30}};
    void* block = private_memory.allocate(bytes);
    CHECK_THROWS_WITH_AS(static_cast<void>(private_memory.export_block(block)), doctest::Contains("shareable"), cuda_error);
    CHECK_THROWS_AS(static_cast<void>(private_memory.export_block(static_cast<char*>(block) + 4096)), std::invalid_argument);
    private_memory.deallocate(block, bytes);
    const int null_device = open("/dev/null", O_RDONLY);
    CHECK_THROWS_WITH_AS(imported_block(null_device, bytes), doctest::Contains("export_block"), cuda_error);
    close(null_device);
}
