// memory_summary(r): a text table in the manner of torch.cuda.memory_summary().
//
// Rows are the metrics of the outermost layer with memory_stats() (a counted<>) found in `r`
// (r itself, or down through upstream_resource(): core/stack.hpp): allocated, active and
// requested bytes, reserved bytes when a counted<> sits below the strategy, then the counts;
// columns are current, peak, total allocated and total freed, in human units; a figure the stats
// lack shows as "-" (a virtual memory knows its reserved bytes now and at peak, not the totals).
// When a layer of `r` offers the walk of core/walk.hpp, the fragmentation figures follow. Without
// any counted<> the table says so.
#pragma once

#include <poolkit/core/concepts.hpp>
#include <poolkit/core/stack.hpp>
#include <poolkit/observe/fragmentation.hpp>

#include <concepts>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>

namespace poolkit {

// R reports PyTorch's memory_stats() dictionary, as counted<> does.
template <class R>
concept has_memory_stats = requires(const R& r) {
    { r.memory_stats() } -> std::same_as<std::map<std::string, std::int64_t>>;
};

// memory_stats() of the first layer that has it, walking down from `r`, or nothing.
template <class R>
[[nodiscard]] std::optional<std::map<std::string, std::int64_t>> find_memory_stats(const R& r) {
    return find_in_stack(r, []<class Layer>(const Layer& layer) -> std::optional<std::map<std::string, std::int64_t>> {
        if constexpr (has_memory_stats<Layer>) return layer.memory_stats();
        return std::nullopt;
    });
}

namespace detail {
// 1536 -> "1.50 KiB", as memory_summary writes sizes.
inline std::string human_bytes(std::int64_t bytes) {
    static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double value = static_cast<double>(bytes < 0 ? -bytes : bytes);
    std::size_t unit = 0;
    while (value >= 1024.0 && unit + 1 < std::size(units)) {
        value /= 1024.0;
        ++unit;
    }
    char text[48];
    if (unit == 0) {
        std::snprintf(text, sizeof text, "%s%lld B", bytes < 0 ? "-" : "", static_cast<long long>(value));
    } else {
        std::snprintf(text, sizeof text, "%s%.2f %s", bytes < 0 ? "-" : "", value, units[unit]);
    }
    return text;
}

// The first walkable resource met walking down from `r`, as a fragmentation reading.
template <class R>
std::optional<fragmentation_figures> find_fragmentation(const R& r) {
    return find_in_stack(r, []<class Layer>(const Layer& layer) -> std::optional<fragmentation_figures> {
        if constexpr (walkable<Layer>) return fragmentation(layer);
        return std::nullopt;
    });
}
}  // namespace detail

// The table for a map of memory_stats() keys.
[[nodiscard]] inline std::string memory_summary(const std::map<std::string, std::int64_t>& stats,
                                                const std::optional<fragmentation_figures>& fragments = std::nullopt) {
    constexpr const char* rule = "|===========================================================================|\n";
    constexpr const char* line = "|---------------------------------------------------------------------------|\n";
    std::string text = rule;
    text += "|                     poolkit memory summary                                |\n";
    text += line;
    char row[160];
    std::snprintf(row, sizeof row, "| %-18s| %-12s| %-12s| %-12s| %-12s|\n", "Metric", "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed");
    text += row;
    text += line;
    const auto metric = [&](const char* label, const std::string& key, bool bytes) {
        if (stats.count(key + ".all.current") == 0) return;
        const auto cell = [&](const char* which) {
            const auto found = stats.find(key + ".all." + which);
            if (found == stats.end()) return std::string("-");
            return bytes ? detail::human_bytes(found->second) : std::to_string(found->second);
        };
        std::snprintf(row, sizeof row, "| %-18s| %-12s| %-12s| %-12s| %-12s|\n", label, cell("current").c_str(), cell("peak").c_str(),
                      cell("allocated").c_str(), cell("freed").c_str());
        text += row;
    };
    metric("Allocated memory", "allocated_bytes", true);
    metric("Active memory", "active_bytes", true);
    metric("Requested memory", "requested_bytes", true);
    metric("Reserved memory", "reserved_bytes", true);
    text += line;
    metric("Allocations", "allocation", false);
    metric("Active allocs", "active", false);
    metric("Segments", "segment", false);
    text += line;
    const auto count = [&](const char* key) {
        const auto found = stats.find(key);
        return found == stats.end() ? std::string("-") : std::to_string(found->second);
    };
    std::snprintf(row, sizeof row, "| OOMs: %-8s Alloc retries: %-8s Upstream allocs: %-8s frees: %-2s|\n", count("num_ooms").c_str(),
                  count("num_alloc_retries").c_str(), count("num_device_alloc").c_str(), count("num_device_free").c_str());
    text += row;
    if (fragments) {
        text += line;
        std::snprintf(row, sizeof row, "| Reserved / live: %-6.3f Largest free / free: %-6.3f Free blocks: %-9zu|\n",
                      fragments->reserved_over_live(), fragments->largest_free_over_free(), fragments->free_blocks);
        text += row;
        if (fragments->private_pools > 0) {  // CUDA graphs' memory, included in the figures above
            std::snprintf(row, sizeof row, "| Graph pools: %-5zu reserved: %-13s live: %-25s|\n", fragments->private_pools,
                          detail::human_bytes(static_cast<std::int64_t>(fragments->private_reserved_bytes)).c_str(),
                          detail::human_bytes(static_cast<std::int64_t>(fragments->private_live_bytes)).c_str());
            text += row;
        }
    }
    text += rule;
    return text;
}

// The table for any resource with a counted<> in it.
template <class R>
[[nodiscard]] std::string memory_summary(const R& r) {
    const auto stats = find_memory_stats(r);
    if (!stats) return "poolkit memory summary: no counted<> in this resource\n";
    return memory_summary(*stats, detail::find_fragmentation(r));
}

}  // namespace poolkit
