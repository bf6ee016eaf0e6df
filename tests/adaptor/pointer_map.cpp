// detail::pointer_map against std::unordered_map under heavy insert/erase churn.
#include <poolkit/adaptor/detail/pointer_map.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

TEST_CASE("pointer_map agrees with std::unordered_map through random churn") {
    poolkit::detail::pointer_map<std::uint64_t> map;
    std::unordered_map<std::uintptr_t, std::uint64_t> oracle;
    std::mt19937_64 random(23);
    std::vector<std::uintptr_t> keys;
    for (int step = 0; step < 200000; ++step) {
        const unsigned action = random() % 10;
        if (keys.empty() || action < 5) {
            // 256-byte aligned keys clustered in a few regions, like real blocks.
            const std::uintptr_t key = ((random() % 4 + 1) << 40) + (random() % 100000) * 256;
            const std::uint64_t value = random();
            map.insert(reinterpret_cast<void*>(key), value);
            if (oracle.insert_or_assign(key, value).second) keys.push_back(key);
        } else if (action < 8) {
            const std::size_t index = random() % keys.size();
            const std::uintptr_t key = keys[index];
            CHECK(map.erase(reinterpret_cast<void*>(key)));
            oracle.erase(key);
            keys[index] = keys.back();
            keys.pop_back();
        } else {
            const std::uintptr_t key = keys[random() % keys.size()];
            const auto* found = map.find(reinterpret_cast<void*>(key));
            REQUIRE(found != nullptr);
            CHECK(*found == oracle.at(key));
            CHECK(map.find(reinterpret_cast<void*>(key + 8)) == nullptr);
        }
        REQUIRE(map.size() == oracle.size());
    }
    std::size_t visited = 0;
    map.for_each([&](void* key, std::uint64_t value) {
        ++visited;
        CHECK(oracle.at(reinterpret_cast<std::uintptr_t>(key)) == value);
    });
    CHECK(visited == oracle.size());
    CHECK_FALSE(map.erase(reinterpret_cast<void*>(std::uintptr_t{8})));
    map.clear();
    CHECK(map.empty());
}
