// Fuzzes the plugin's option parser and the pools it configures (plugins/poolkit_plugin.cpp, over
// simulated memory): the input's text up to its first NUL is lines "name=value" applied to the
// caching or the expandable kind (the first byte's low bit), the rest fuzzer-chosen allocations
// and frees on two streams through the pool the options made, with its stats, summary and
// snapshot after each step. A bad name or value, or options the pool refuses, must be
// std::invalid_argument; out_of_memory is allowed; anything else aborts. At the end every block
// is freed and the pool must hold no live bytes.
#define POOLKIT_ENABLE_ASSERTS 1  // fuzzers build with NDEBUG; their checks must stay on
#define POOLKIT_PLUGIN_SIMULATED 1
#include "../plugins/poolkit_plugin.cpp"

#include <cstdlib>
#include <string_view>

namespace {

// Applies each "name=value" line; false if one is refused (with std::invalid_argument).
bool apply(settings& s, allocator_kind kind, std::string_view text) {
    while (!text.empty()) {
        const std::size_t end = std::min(text.find('\n'), text.size());
        const std::string_view line = text.substr(0, end);
        text.remove_prefix(std::min(end + 1, text.size()));
        const std::size_t equals = line.find('=');
        try {
            set_option(s, kind, line.substr(0, equals), equals == std::string_view::npos ? "" : line.substr(equals + 1));
        } catch (const std::invalid_argument&) {
            return false;
        }
    }
    return true;
}

void check_texts(const device_pool& pool) {
    const std::string json = pool.snapshot_json();
    if (!json.starts_with("{\"segments\": [") || !json.ends_with("]}")) std::abort();
    if (pool.summary().find("Allocated memory") == std::string::npos) std::abort();
    if (pool.memory_stats().at("allocation.all.current") < 0) std::abort();
}

template <class Parts>
void run(const settings& s, const std::uint8_t* data, std::size_t size) {
    std::unique_ptr<device_pool> pool;
    try {
        pool = std::make_unique<device_pool_of<Parts>>(s);
    } catch (const std::invalid_argument&) {
        return;  // options the pool refuses, e.g. a rounding that is not a power of two
    }
    struct live_block {
        std::size_t bytes;
        stream_ref stream;
    };
    std::map<std::uintptr_t, live_block> live;
    const stream_ref streams[] = {stream_ref{reinterpret_cast<stream_handle>(0x100)}, stream_ref{reinterpret_cast<stream_handle>(0x200)}};
    for (std::size_t i = 0; i + 3 <= size; i += 3) {
        const std::uint8_t op = data[i];
        const std::size_t amount = std::size_t{data[i + 1]} << 8 | data[i + 2];
        const stream_ref stream = streams[op & 1];
        if (op % 5 == 4) {
            pool->release();
        } else if (op % 3 != 0 || live.empty()) {
            const std::size_t bytes = 1 + amount * (op & 2 ? 4096 : 1);
            try {
                void* pointer = pool->allocate(bytes, stream);
                if (pointer == nullptr || !live.emplace(reinterpret_cast<std::uintptr_t>(pointer), live_block{bytes, stream}).second) {
                    std::abort();
                }
            } catch (const out_of_memory&) {
            }
        } else {
            auto victim = live.begin();
            std::advance(victim, static_cast<std::ptrdiff_t>(amount % live.size()));
            pool->deallocate(reinterpret_cast<void*>(victim->first), victim->second.bytes, op & 4 ? stream : victim->second.stream);
            live.erase(victim);
        }
        check_texts(*pool);
    }
    for (const auto& [address, block] : live) pool->deallocate(reinterpret_cast<void*>(address), block.bytes, block.stream);
    if (pool->memory_stats().at("allocated_bytes.all.current") != 0) std::abort();
    pool->release();
    check_texts(*pool);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const auto kind = data[0] & 1 ? allocator_kind::expandable : allocator_kind::caching;
    const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
    const std::size_t text_end = std::min(input.find('\0'), input.size());
    settings s;
    // Small simulated devices, so that exhaustion happens.
    setenv("POOLKIT_SIMULATED_MEMORY", "268435456", 1);
    if (!apply(s, kind, input.substr(0, text_end))) return 0;
    const std::size_t steps = std::min(text_end + 2, size);
    if (kind == allocator_kind::caching) {
        run<caching_parts>(s, data + steps, size - steps);
    } else {
        run<expandable_parts>(s, data + steps, size - steps);
    }
    return 0;
}
