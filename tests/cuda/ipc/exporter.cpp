// poolkit-ipc-exporter SOCKET DEVICE BYTES: the other process of tests/cuda/ipc.cpp. Makes a
// shareable cuda_async_resource on DEVICE, allocates BYTES, fills them with 0xA5, and sends the
// pool's descriptor with the allocation's export data over the Unix socket SOCKET. Then waits for
// one byte (the importer wrote 0x3C everywhere and freed its import), checks the bytes, frees the
// allocation and answers one byte: 1 if every byte was 0x3C. Exit status 0 when all went well.
#include "descriptors.hpp"

#include <poolkit/upstream/cuda_async_resource.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: poolkit-ipc-exporter SOCKET DEVICE BYTES\n");
        return 2;
    }
    const int socket = std::atoi(argv[1]);
    const int device = std::atoi(argv[2]);
    const auto bytes = static_cast<std::size_t>(std::atoll(argv[3]));
    try {
        poolkit::detail::check_cuda(cudaSetDevice(device), "cudaSetDevice");
        poolkit::cuda_async_resource pool{{.shareable = true}};
        void* memory = pool.allocate(bytes);
        poolkit::detail::check_cuda(cudaMemset(memory, 0xA5, bytes), "cudaMemset");
        poolkit::detail::check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        const int handle = pool.export_handle();
        const cudaMemPoolPtrExportData data = pool.export_pointer(memory);
        poolkit::test::send_descriptor(socket, handle, &data, sizeof data);
        close(handle);
        char done = 0;
        if (read(socket, &done, 1) != 1) throw std::runtime_error("the importer hung up");
        std::vector<unsigned char> copy(bytes);
        poolkit::detail::check_cuda(cudaMemcpy(copy.data(), memory, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
        char same = 1;
        for (unsigned char b : copy) same = static_cast<char>(same && b == 0x3C);
        pool.deallocate(memory, bytes);
        if (write(socket, &same, 1) != 1) throw std::runtime_error("cannot answer the importer");
        return same ? 0 : 1;
    } catch (const std::exception& error) {
        std::fprintf(stderr, "poolkit-ipc-exporter: %s\n", error.what());
        return 1;
    }
}
