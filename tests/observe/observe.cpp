// memory_summary, fragmentation and snapshot, over counted<> and a walkable test double.
#include <poolkit/adaptor/counted.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/observe/fragmentation.hpp>
#include <poolkit/observe/memory_summary.hpp>
#include <poolkit/observe/snapshot.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace {
using namespace poolkit;

// A strategy-like double: two chunks with fixed blocks, and the walk of walk.hpp.
struct walkable_double {
    struct chunk {
        chunk_view view;
        std::vector<block_view> blocks;
    };
    std::vector<chunk> chunks{
        {{0x10000, 4096, 0}, {{0x10000, 1024, 1000, true, false, 0}, {0x10400, 3072, 0, false, false, 0}}},
        {{0x20000, 8192, 7},
         {{0x20000, 2048, 2048, true, false, 7}, {0x20800, 512, 0, false, true, 7}, {0x20a00, 5632, 0, false, false, 7}}},
    };
    template <class Visitor>
    void for_each_block(Visitor&& visit) const {
        for (const chunk& c : chunks) {
            for (const block_view& b : c.blocks) visit(c.view, b);
        }
    }
    void* allocate(std::size_t, std::size_t = default_alignment) { return nullptr; }
    void deallocate(void*, std::size_t, std::size_t = default_alignment) noexcept {}
    friend bool operator==(const walkable_double&, const walkable_double&) { return true; }
};
}  // namespace

static_assert(walkable<walkable_double>);
static_assert(!walkable<new_delete_resource>);

TEST_CASE("fragmentation: reserved over live, largest free over free, free blocks") {
    const fragmentation_figures f = fragmentation(walkable_double{});
    CHECK(f.chunks == 2);
    CHECK(f.reserved_bytes == 12288);
    CHECK(f.live_bytes == 3072);
    CHECK(f.live_blocks == 2);
    CHECK(f.free_blocks == 3);
    CHECK(f.free_bytes == 3072 + 512 + 5632);
    CHECK(f.largest_free_block == 5632);
    CHECK(f.reserved_over_live() == doctest::Approx(4.0));
    CHECK(f.largest_free_over_free() == doctest::Approx(5632.0 / 9216.0));
    CHECK(fragmentation_figures{}.largest_free_over_free() == 1.0);
}

TEST_CASE("snapshot: segments and blocks as PyTorch's _snapshot() writes them") {
    const std::string json = snapshot(walkable_double{});
    CHECK(json.find("{\"segments\": [{\"address\": 65536, \"total_size\": 4096, \"allocated_size\": 1024, "
                    "\"active_size\": 1024, \"requested_size\": 1000, \"stream\": 0, \"segment_type\": \"large\", "
                    "\"blocks\": [{\"address\": 65536, \"size\": 1024, \"requested_size\": 1000, \"state\": "
                    "\"active_allocated\", \"stream\": 0}, {\"address\": 66560, \"size\": 3072, \"requested_size\": 0, "
                    "\"state\": \"inactive\", \"stream\": 0}]}, ") == 0);
    CHECK(json.find("\"total_size\": 8192, \"allocated_size\": 2048, \"active_size\": 2560") != std::string::npos);
    CHECK(json.find("\"state\": \"active_pending_free\", \"stream\": 7") != std::string::npos);
    CHECK(json.substr(json.size() - 5) == "}]}]}");
    struct empty_double : walkable_double {
        empty_double() { chunks.clear(); }
    };
    CHECK(snapshot(empty_double{}) == "{\"segments\": []}");
}

TEST_CASE("memory_summary: a table of current, peak, total allocated and freed") {
    simulated_resource addresses{{.capacity = std::size_t{1} << 30}};
    using counter = counted<ref<simulated_resource>>;
    counter reserved{addresses};
    best_fit<ref<counter>> pool{reserved};
    counted<ref<best_fit<ref<counter>>>> outer{pool};
    void* a = outer.allocate(3 << 20);
    void* b = outer.allocate(1536);
    outer.deallocate(a, 3 << 20);
    const std::string table = memory_summary(outer);
    CHECK(table.find("poolkit memory summary") != std::string::npos);
    CHECK(table.find("| Allocated memory  | 1.50 KiB    | 3.00 MiB    | 3.00 MiB    | 3.00 MiB    |") != std::string::npos);
    CHECK(table.find("Reserved memory") != std::string::npos);
    CHECK(table.find("| Allocations       | 1           | 2           | 2           | 1           |") != std::string::npos);
    CHECK(table.find("Segments") != std::string::npos);
    CHECK(table.find("OOMs: 0") != std::string::npos);
    CHECK(memory_summary(pool).find("Reserved memory") == std::string::npos);  // only the inner counted<> is found
    CHECK(memory_summary(addresses) == "poolkit memory summary: no counted<> in this resource\n");
    outer.deallocate(b, 1536);

    counted<ref<walkable_double>> over_double{*new walkable_double{}};
    CHECK(memory_summary(over_double).find("Free blocks: 3") != std::string::npos);
    delete &over_double.upstream_resource().get();
    const std::map<std::string, std::int64_t> partial{{"reserved_bytes.all.current", 2 << 20}, {"reserved_bytes.all.peak", 4 << 20}};
    CHECK(memory_summary(partial).find("| Reserved memory   | 2.00 MiB    | 4.00 MiB    | -           | -           |") !=
          std::string::npos);
    CHECK(detail::human_bytes(512) == "512 B");
    CHECK(detail::human_bytes(std::int64_t{5} << 30) == "5.00 GiB");
}
