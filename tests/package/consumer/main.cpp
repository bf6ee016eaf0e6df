// Allocates through the umbrella header: proof that the package's include path and flags work.
#include <poolkit/poolkit.hpp>

#include <cstdio>

static_assert(CONSUMER_POOLKIT_HAS_CUDA == POOLKIT_HAS_CUDA, "poolkit_HAS_CUDA disagrees with what poolkit::poolkit compiles with");

int main() {
    poolkit::new_delete_resource host;
    poolkit::resource_ref<poolkit::host_accessible> erased{host};
    void* block = erased.allocate(1024);
    if (block == nullptr) return 1;
    erased.deallocate(block, 1024);
    std::printf("consumer: allocated and freed 1024 bytes through poolkit (CUDA %d)\n", POOLKIT_HAS_CUDA);
    return 0;
}
