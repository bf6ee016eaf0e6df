// Quick start: pick an upstream, allocate and free, and choose a resource at run time through
// type erasure. Compiled and run by the tests (ctest -R example-quick_start).
#include <poolkit/poolkit.hpp>

#include <cstdio>
#include <cstring>

int main() {
    // Host memory, 256-byte aligned unless asked otherwise.
    poolkit::new_delete_resource host;
    void* buffer = host.allocate(4096);
    std::memset(buffer, 0, 4096);
    host.deallocate(buffer, 4096);

    // Address space without memory: replays allocation traces of any size on a CPU. Exceeding its
    // capacity throws poolkit::out_of_memory, a std::bad_alloc whose message gives the figures.
    poolkit::simulated_resource simulated{{.capacity = std::size_t{1} << 30}};
    void* big = simulated.allocate(std::size_t{768} << 20);
    try {
        static_cast<void>(simulated.allocate(std::size_t{512} << 20));
    } catch (const poolkit::out_of_memory& error) {
        std::printf("%s\n", error.what());
    }
    simulated.deallocate(big, std::size_t{768} << 20);

    // A resource chosen at run time: resource_ref refers, any_resource owns.
    poolkit::resource_ref<poolkit::host_accessible> chosen{host};
    poolkit::any_resource<poolkit::host_accessible> owned{poolkit::new_delete_resource{}};
    void* block = chosen.allocate(100, 64);
    owned.deallocate(block, 100, 64);  // equal resources free each other's memory
    std::printf("quick start: ok (CUDA support %s)\n", POOLKIT_HAS_CUDA ? "on" : "off");
    return 0;
}
