// The streams/pipeline benchmarks of pipeline.hpp over poolkit's presets and cudaMallocAsync.
//   build/bench/poolkit-bench-pipeline [--benchmark_filter=...]
#include "pipeline.hpp"

int main(int argc, char** argv) { return poolkit_bench::run(argc, argv); }
