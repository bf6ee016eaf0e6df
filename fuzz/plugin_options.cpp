// Fuzzes the options parsed from text (interop/option_text.hpp, through the plugin's set_option)
// and the pools they configure (plugins/poolkit_plugin.cpp, over simulated memory). The first byte chooses the kind (its low bit: caching or expandable) and
// whether the pool's texts are checked (its next bit); the text up to the first NUL is lines
// "name=value" set through set_option() (apply() says how a byte can stand for a name); the
// rest, up to max_steps steps of three bytes, are allocations, frees (some on the other stream,
// some after a record_use there), releases and bad frees (a pointer not live, one inside a
// block, another size) on two streams through the pool the options made.
// A bad name or value must be std::invalid_argument from set_option(), and options it took must
// make a pool; out_of_memory is allowed; a bad free must be std::invalid_argument and change
// nothing; anything else aborts. Every block must be aligned and overlap no live one; every
// check_figures_every steps (at a phase set by the input's length) and at the end the pool's
// allocation count and requested bytes must be those of the live blocks, and at the end (where
// the input asks) its snapshot and summary well formed. Then every block is freed and the pool
// must hold no live bytes.
// Speed: checking the texts and figures after every step, over inputs of up to 1,365 steps, held
// this fuzzer to about 54 runs a second, spent formatting and in libFuzzer's bookkeeping of the
// features that formatting covers. Steps past max_steps rarely reach a state the first ones
// cannot, in a device of 256 MiB that a few blocks exhaust.
#define POOLKIT_ENABLE_ASSERTS 1  // fuzzers build with NDEBUG; their checks must stay on
#define POOLKIT_PLUGIN_SIMULATED 1
#include "../plugins/poolkit_plugin.cpp"

#include <cstdlib>
#include <iterator>
#include <map>
#include <string_view>
#include <vector>

namespace {

constexpr std::size_t max_steps = 64;
constexpr std::size_t check_figures_every = 32;

// The names of the options of `kind`, in the order of text_options() (interop/option_text.hpp).
template <class Options>
std::vector<std::string_view> names_of() {
    std::vector<std::string_view> names;
    for (const auto& o : poolkit::text_options<Options>()) names.emplace_back(o.name);
    return names;
}
const std::vector<std::string_view>& option_names(allocator_kind kind) {
    static const std::vector<std::string_view> caching = names_of<caching_options>(), expandable = names_of<expandable_options>();
    return kind == allocator_kind::caching ? caching : expandable;
}

// Applies each line, "name=value" or a byte below ' ' (which no name holds) and the value: that
// byte names option byte % count of the kind, so that every option is reached without the fuzzer
// having to guess its name first. False if one is refused (with std::invalid_argument).
bool apply(settings& s, allocator_kind kind, std::string_view text) {
    while (!text.empty()) {
        const std::size_t end = std::min(text.find('\n'), text.size());
        const std::string_view line = text.substr(0, end);
        text.remove_prefix(std::min(end + 1, text.size()));
        std::string_view name, value;
        if (const auto first = static_cast<unsigned char>(line.empty() ? ' ' : line[0]); first < ' ') {
            const auto& names = option_names(kind);
            name = names[first % names.size()];
            value = line.substr(1);
        } else {
            const std::size_t equals = line.find('=');
            name = line.substr(0, equals);
            value = equals == std::string_view::npos ? "" : line.substr(equals + 1);
        }
        try {
            set_option(s, kind, name, value);
        } catch (const std::invalid_argument&) {
            return false;
        }
    }
    return true;
}

struct live_block {
    std::size_t bytes;
    stream_ref stream;
};
using live_map = std::map<std::uintptr_t, live_block>;

// The pool's figures are those of the blocks live.
void check_figures(const device_pool& pool, std::size_t live_blocks, std::size_t live_bytes) {
    const stats_map stats = pool.memory_stats();
    if (stats.at("allocation.all.current") != static_cast<std::int64_t>(live_blocks)) std::abort();
    if (stats.at("requested_bytes.all.current") != static_cast<std::int64_t>(live_bytes)) std::abort();
    if (stats.at("allocated_bytes.all.current") < static_cast<std::int64_t>(live_bytes)) std::abort();
}

// The figures, and the pool's texts are well formed.
void check(const device_pool& pool, const live_map& live, std::size_t live_bytes) {
    check_figures(pool, live.size(), live_bytes);
    const std::string json = pool.snapshot_json();
    if (!json.starts_with("{\"segments\": [") || !json.ends_with("]}")) std::abort();
    if (pool.summary().find("Allocated memory") == std::string::npos) std::abort();
}

// A new block is aligned and overlaps no live one.
void check_placed(const live_map& live, std::uintptr_t address, std::size_t bytes) {
    if (address == 0 || address % default_alignment != 0) std::abort();
    const auto next = live.lower_bound(address);
    if (next != live.end() && next->first < address + bytes) std::abort();
    if (next != live.begin() && std::prev(next)->first + std::prev(next)->second.bytes > address) std::abort();
}

// A free that must be refused, and so change nothing.
void refused_free(device_pool& pool, std::uintptr_t address, std::size_t bytes, stream_ref stream) {
    try {
        pool.free(reinterpret_cast<void*>(address), bytes, stream);
    } catch (const std::invalid_argument&) {
        return;
    }
    std::abort();
}

template <class Parts>
void run(const settings& s, const std::uint8_t* data, std::size_t size, bool check_texts) {
    // Options set_option took make a pool (else it took one the pool refuses).
    const auto pool = std::make_unique<device_pool_of<Parts>>(s, 0);
    live_map live;
    std::size_t live_bytes = 0;
    std::uintptr_t last_freed = 0;
    const stream_ref streams[] = {stream_ref{reinterpret_cast<stream_handle>(0x100)}, stream_ref{reinterpret_cast<stream_handle>(0x200)}};
    // The figures are checked every check_figures_every steps, at a phase set by the input's
    // length, so that mutations that change the length check every step position in some input.
    const std::size_t steps = std::min(size / 3, max_steps);
    const std::size_t phase = steps % check_figures_every;
    // A step is three bytes: what (op % 8) with its choices (op's upper bits), and an amount.
    for (std::size_t step = 0; step < steps; ++step) {
        const unsigned op = data[3 * step];
        const std::size_t amount = std::size_t{data[3 * step + 1]} << 8 | data[3 * step + 2];
        const stream_ref stream = streams[op >> 3 & 1];
        const unsigned what = op % 8;
        if (what == 7) {
            pool->release();
        } else if (what <= 2 || live.empty()) {
            // Units of 1 B to 4 KiB: blocks up to 64 KiB, 4, 16 or 64 MiB, or (one in eight) up to
            // the whole device, so that exhaustion is common enough to test and rare enough that
            // most steps do something else.
            constexpr std::size_t units[] = {1, 1, 64, 64, 256, 1024, 1024, 4096};
            const std::size_t bytes = 1 + amount * units[op >> 4 & 7];
            try {
                void* pointer = pool->allocate(bytes, stream);
                const auto address = reinterpret_cast<std::uintptr_t>(pointer);
                check_placed(live, address, bytes);
                live.emplace(address, live_block{bytes, stream});
                live_bytes += bytes;
            } catch (const out_of_memory&) {
            }
        } else {
            auto victim = live.begin();
            std::advance(victim, static_cast<std::ptrdiff_t>(amount % live.size()));
            const auto [address, block] = *victim;
            if (what == 6) {  // a bad free
                switch (op >> 4 & 3) {
                    case 0:
                        refused_free(*pool, last_freed != 0 && !live.contains(last_freed) ? last_freed : 0x1000 + amount, block.bytes,
                                     stream);
                        break;
                    case 1:
                        if (block.bytes > 1) refused_free(*pool, address + 1 + amount % (block.bytes - 1), block.bytes, stream);
                        break;
                    default:
                        refused_free(*pool, address, block.bytes + 1 + amount, stream);
                        break;
                }
            } else {  // on its own stream or this one, after a use on the other or not
                if (op & 32) pool->record_use(reinterpret_cast<void*>(address), streams[~op >> 3 & 1]);
                pool->free(reinterpret_cast<void*>(address), block.bytes, op & 16 ? stream : block.stream);
                live.erase(victim);
                live_bytes -= block.bytes;
                last_freed = address;
            }
        }
        if ((step + phase) % check_figures_every == 0) check_figures(*pool, live.size(), live_bytes);
    }
    if (check_texts) {
        check(*pool, live, live_bytes);
    } else {
        check_figures(*pool, live.size(), live_bytes);
    }
    for (const auto& [address, block] : live) pool->free(reinterpret_cast<void*>(address), block.bytes, block.stream);
    pool->release();
    check_figures(*pool, 0, 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const auto kind = data[0] & 1 ? allocator_kind::expandable : allocator_kind::caching;
    const bool check_texts = (data[0] & 2) != 0;
    const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
    const std::size_t text_end = std::min(input.find('\0'), input.size());
    settings s;
    // Small simulated devices, so that exhaustion happens.
    setenv("POOLKIT_SIMULATED_MEMORY", "268435456", 1);
    if (!apply(s, kind, input.substr(0, text_end))) return 0;
    const std::size_t first_step = std::min(text_end + 2, size);
    if (kind == allocator_kind::caching) {
        run<caching_parts>(s, data + first_step, size - first_step, check_texts);
    } else {
        run<expandable_parts>(s, data + first_step, size - first_step, check_texts);
    }
    return 0;
}
