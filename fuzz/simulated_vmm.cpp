// Fuzzes simulated_vmm_resource with fuzzer-chosen map, map_whole, alias, unmap, allocate and
// deallocate steps over both of its faces, checked granule by granule against a model.
//
// Each step reads four bytes: an operation, a first granule, a length in granules, and a size or
// alignment byte. map must succeed exactly when the run is unmapped and fits under the physical
// limit (else std::invalid_argument or out_of_memory, changing nothing); alias must succeed
// exactly when its range is unmapped and its source mapped, cutting no mapping made whole, and add
// no mapped bytes; unmap is only asked where it is allowed (an alias whole, or granules no alias
// maps, cutting no mapping made whole); every block from allocate must be aligned and lie on
// unmapped granules.
//
// The model's figures are checked against the resource at every step. check_invariants(), which
// walks every hole, block and mapping, and a recount of the model run after every 16th step (at a
// phase set by the input's length), after the first refusal (out_of_memory, or no block from
// allocate) of a run, after the last step and at the end. An input runs at most 128 steps (bytes
// past them are ignored), so that the fuzzer runs at well over 1,000 inputs a second.
#include <poolkit/upstream/simulated_vmm_resource.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <vector>

namespace {

constexpr std::size_t granule = 64 * 1024;
constexpr std::size_t granules = 256;
constexpr std::size_t max_steps = 128;
constexpr std::size_t check_every = 16;

enum class state : std::uint8_t { unmapped, mapped, block, alias };

struct live_block {
    std::size_t bytes;
    std::size_t alignment;
};

void require(bool condition) {
    if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    poolkit::simulated_vmm_resource vm{
        {.capacity = granules * granule, .granularity = granule, .physical_limit = granules * granule * 3 / 4}};
    std::vector<state> model(granules, state::unmapped);
    std::vector<std::uint32_t> whole(granules, 0);  // which map_whole mapping holds a granule; 0: none
    std::uint32_t wholes = 0;
    // An unmap of [first, first + count) cuts no mapping made whole.
    const auto cuts_none = [&](std::size_t first, std::size_t count) {
        const std::size_t last = first + count;
        const bool head = first == 0 || whole[first] == 0 || whole[first - 1] != whole[first];
        const bool tail = last == granules || whole[last - 1] == 0 || whole[last] != whole[last - 1];
        return head && tail;
    };
    std::map<std::uintptr_t, live_block> blocks;
    std::map<std::size_t, std::pair<std::size_t, std::size_t>> aliases;  // first granule -> (source's first, count)
    std::vector<std::uint32_t> aliased(granules, 0);  // aliases of each mapped granule
    std::size_t alias_granules = 0;
    std::size_t maps = 0;
    std::size_t unmaps = 0;
    std::size_t peak = 0;
    const auto base = reinterpret_cast<std::uintptr_t>(vm.base());
    std::size_t unmapped = granules;  // granules of the model in state::unmapped, kept by set()
    const auto mapped = [&] { return (granules - unmapped - alias_granules) * granule; };
    const auto set = [&](std::size_t first, std::size_t count, state value) {
        for (std::size_t g = first; g < first + count; ++g) {
            if (model[g] == state::unmapped) --unmapped;
            if (model[g] == state::alias) --alias_granules;
            if (value == state::unmapped) ++unmapped;
            if (value == state::alias) ++alias_granules;
            model[g] = value;
        }
    };
    const auto check = [&] {
        require(static_cast<std::size_t>(std::count(model.begin(), model.end(), state::unmapped)) == unmapped);
        vm.check_invariants();
    };
    const auto all = [&](std::size_t first, std::size_t count, state value) {
        return std::all_of(model.begin() + static_cast<std::ptrdiff_t>(first), model.begin() + static_cast<std::ptrdiff_t>(first + count),
                           [value](state s) { return s == value; });
    };

    const std::size_t steps = std::min(size / 4, max_steps);
    const std::size_t phase = steps % check_every;
    bool out_of_memory_before = false;  // the previous step was refused for the physical limit
    for (std::size_t step = 0; step < steps; ++step) {
        const std::size_t i = 4 * step;
        bool must_check = step + 1 == steps || (step + phase) % check_every == 0;
        bool out_of_memory_now = false;
        const std::uint8_t op = data[i];
        const std::size_t first = data[i + 1] % granules;
        const std::size_t count = 1 + data[i + 2] % 32;
        const std::uint8_t extra = data[i + 3];
        switch (op % 6) {
            case 0: {  // map or map_whole, possibly out of range or over mapped granules
                auto* at = vm.base() + first * granule;
                const std::size_t bytes = count * granule;
                const bool inside = first + count <= granules;
                const bool free = inside && all(first, count, state::unmapped);
                const bool as_one = extra % 2 == 1;
                try {
                    if (as_one) {
                        vm.map_whole(at, bytes);
                    } else {
                        vm.map(at, bytes);
                    }
                    require(free && mapped() + bytes <= vm.physical_limit());
                    set(first, count, state::mapped);
                    if (as_one && count > 1) {
                        ++wholes;
                        std::fill(whole.begin() + static_cast<std::ptrdiff_t>(first),
                                  whole.begin() + static_cast<std::ptrdiff_t>(first + count), wholes);
                    }
                    ++maps;
                } catch (const std::invalid_argument&) {
                    require(!free);
                } catch (const poolkit::out_of_memory& error) {
                    require(free && mapped() + bytes > vm.physical_limit());
                    require(error.figures().requested_bytes == bytes && error.figures().reserved_bytes == mapped());
                    out_of_memory_now = true;
                    must_check = must_check || !out_of_memory_before;
                }
                break;
            }
            case 1:  // map with a misaligned address or size: always rejected
                try {
                    vm.map(vm.base() + first * granule + (extra % 2 ? 4096 : 0), count * granule + (extra % 2 ? 0 : 512));
                    std::abort();
                } catch (const std::invalid_argument&) {
                }
                break;
            case 2:  // unmap where allowed: an alias whole, or mapped granules that no alias maps
                if (const auto alias = aliases.find(first); alias != aliases.end() && extra % 2 == 0) {
                    vm.unmap(vm.base() + first * granule, alias->second.second * granule);
                    set(first, alias->second.second, state::unmapped);
                    for (std::size_t g = 0; g < alias->second.second; ++g) --aliased[alias->second.first + g];
                    aliases.erase(alias);
                    ++unmaps;
                } else if (first + count <= granules && all(first, count, state::mapped) && cuts_none(first, count) &&
                           std::all_of(aliased.begin() + static_cast<std::ptrdiff_t>(first),
                                       aliased.begin() + static_cast<std::ptrdiff_t>(first + count),
                                       [](std::uint32_t n) { return n == 0; })) {
                    vm.unmap(vm.base() + first * granule, count * granule);
                    set(first, count, state::unmapped);
                    std::fill(whole.begin() + static_cast<std::ptrdiff_t>(first),
                              whole.begin() + static_cast<std::ptrdiff_t>(first + count), 0);
                    ++unmaps;
                }
                break;
            case 3: {  // allocate
                const std::size_t bytes = 1 + (std::size_t{extra} << 10) * (1 + data[i + 2] % 8);
                const std::size_t alignment = std::size_t{1} << (data[i + 1] % 21);
                void* pointer = vm.try_allocate(bytes, alignment);
                if (pointer == nullptr) {
                    out_of_memory_now = true;
                    must_check = must_check || !out_of_memory_before;
                    break;
                }
                const auto address = reinterpret_cast<std::uintptr_t>(pointer);
                require(address % alignment == 0 && (address - base) % granule == 0);
                const std::size_t start = (address - base) / granule;
                const std::size_t span = (bytes + granule - 1) / granule;
                require(start + span <= granules && all(start, span, state::unmapped));
                set(start, span, state::block);
                blocks.emplace(address, live_block{bytes, alignment});
                ++maps;
                break;
            }
            case 4: {  // alias mapped granules elsewhere: allowed exactly where the model says
                const std::size_t source = extra % granules;
                auto* at = vm.base() + first * granule;
                const bool inside = first + count <= granules && source + count <= granules;
                if (inside &&
                    std::any_of(model.begin() + static_cast<std::ptrdiff_t>(source),
                                model.begin() + static_cast<std::ptrdiff_t>(source + count), [](state s) { return s == state::block; })) {
                    break;  // blocks from allocate are the resource face's
                }
                const bool allowed =
                    inside && all(first, count, state::unmapped) && all(source, count, state::mapped) && cuts_none(source, count);
                try {
                    vm.alias(at, vm.base() + source * granule, count * granule);
                    require(allowed);
                    set(first, count, state::alias);
                    for (std::size_t g = 0; g < count; ++g) ++aliased[source + g];
                    aliases.emplace(first, std::pair{source, count});
                    ++maps;
                } catch (const std::invalid_argument&) {
                    require(!allowed);
                }
                break;
            }
            default: {  // deallocate
                if (blocks.empty()) break;
                auto victim = blocks.begin();
                std::advance(victim, static_cast<std::ptrdiff_t>(first % blocks.size()));
                vm.deallocate(reinterpret_cast<void*>(victim->first), victim->second.bytes, victim->second.alignment);
                set((victim->first - base) / granule, (victim->second.bytes + granule - 1) / granule, state::unmapped);
                blocks.erase(victim);
                ++unmaps;
            }
        }
        peak = std::max(peak, mapped());
        require(vm.mapped_bytes() == mapped() && vm.peak_mapped_bytes() == peak);
        require(vm.map_calls() == maps && vm.unmap_calls() == unmaps && vm.live_allocations() == blocks.size());
        const std::size_t probe = (first + count) % granules;
        require(vm.is_mapped(vm.base() + probe * granule) == (model[probe] != state::unmapped));
        require(vm.owns(vm.base() + probe * granule) == (model[probe] == state::block));
        out_of_memory_before = out_of_memory_now;
        if (must_check) check();
    }
    for (const auto& [address, block] : blocks) vm.deallocate(reinterpret_cast<void*>(address), block.bytes, block.alignment);
    for (const auto& [first, alias] : aliases) vm.unmap(vm.base() + first * granule, alias.second * granule);
    for (std::size_t g = 0; g < granules;) {
        std::size_t end = g + 1;  // a mapping: one granule, or the whole of one made whole
        while (whole[g] != 0 && end < granules && whole[end] == whole[g]) ++end;
        if (model[g] == state::mapped) vm.unmap(vm.base() + g * granule, (end - g) * granule);
        g = end;
    }
    require(vm.mapped_bytes() == 0);
    vm.check_invariants();
    return 0;
}
