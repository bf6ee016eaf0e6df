// poolkit-ipc-exporter async|vmm SOCKET DEVICE BYTES: the other process of tests/cuda/ipc.cpp.
// Makes a shareable cuda_async_resource (async) or cuda_vmm_resource (vmm) on DEVICE, allocates
// BYTES, fills them with 0xA5, and sends over the Unix socket SOCKET the pool's descriptor with
// the allocation's export data (async), or the block's descriptor with its size (vmm). Then waits
// for one byte (the importer wrote 0x3C everywhere; for async it also freed its import), checks the
// bytes, frees the allocation and answers one byte: 1 if every byte was 0x3C; then exits, for vmm
// while the importer still maps the memory. Exit status 0 when all went well.
#include "descriptors.hpp"

#include <poolkit/upstream/cuda_async_resource.hpp>
#include <poolkit/upstream/cuda_vmm_resource.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// Waits for the importer, checks that it wrote 0x3C everywhere, and answers; true if it did.
bool check_and_answer(int socket, const void* memory, std::size_t bytes) {
    char done = 0;
    if (read(socket, &done, 1) != 1) throw std::runtime_error("the importer hung up");
    std::vector<unsigned char> copy(bytes);
    poolkit::detail::check_cuda(cudaMemcpy(copy.data(), memory, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
    char same = 1;
    for (unsigned char b : copy) same = static_cast<char>(same && b == 0x3C);
    if (write(socket, &same, 1) != 1) throw std::runtime_error("cannot answer the importer");
    return same != 0;
}

void fill(void* memory, std::size_t bytes) {
    poolkit::detail::check_cuda(cudaMemset(memory, 0xA5, bytes), "cudaMemset");
    poolkit::detail::check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

bool share_pool_allocation(int socket, std::size_t bytes) {
    poolkit::cuda_async_resource pool{{.shareable = true}};
    void* memory = pool.allocate(bytes);
    fill(memory, bytes);
    const int handle = pool.export_handle();
    const cudaMemPoolPtrExportData data = pool.export_pointer(memory);
    poolkit::test::send_descriptor(socket, handle, &data, sizeof data);
    close(handle);
    const bool same = check_and_answer(socket, memory, bytes);  // the importer freed its import first
    pool.deallocate(memory, bytes);
    return same;
}

bool share_vmm_block(int socket, int device, std::size_t bytes) {
    poolkit::cuda_vmm_resource memory{{.device = device, .reserve_bytes = std::size_t{1} << 30, .shareable = true}};
    void* block = memory.allocate(bytes);
    fill(block, bytes);
    const int handle = memory.export_block(block);
    const std::size_t mapped = (bytes + memory.granularity() - 1) / memory.granularity() * memory.granularity();
    poolkit::test::send_descriptor(socket, handle, &mapped, sizeof mapped);
    close(handle);
    const bool same = check_and_answer(socket, block, bytes);
    memory.deallocate(block, bytes);  // while the importer still maps it: the memory lives on there
    return same;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 5) {
        std::fprintf(stderr, "usage: poolkit-ipc-exporter async|vmm SOCKET DEVICE BYTES\n");
        return 2;
    }
    const std::string kind = argv[1];
    const int socket = std::atoi(argv[2]);
    const int device = std::atoi(argv[3]);
    const auto bytes = static_cast<std::size_t>(std::atoll(argv[4]));
    try {
        poolkit::detail::check_cuda(cudaSetDevice(device), "cudaSetDevice");
        const bool same = kind == "vmm" ? share_vmm_block(socket, device, bytes) : share_pool_allocation(socket, bytes);
        return same ? 0 : 1;
    } catch (const std::exception& error) {
        std::fprintf(stderr, "poolkit-ipc-exporter: %s\n", error.what());
        return 1;
    }
}
