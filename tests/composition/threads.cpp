// Every thread-safe composition under sixteen threads (each adaptor over a synchronized pool, the
// synchronized strategies, stream_ordered and per_thread): blocks allocated, written, handed to other
// threads through mailboxes, checked and freed there. Every byte must hold, the composition's
// invariants and figures must agree at the end, and the upstream (instrumented: thread-safe, and
// it reports any misuse) must get back every block it handed out. Run under TSan in CI, where a
// block handed to two threads at once, or any unguarded state, is a reported race.
#include "../support/instrumented.hpp"

#include <poolkit/adaptor/completed_events.hpp>
#include <poolkit/adaptor/limited.hpp>
#include <poolkit/adaptor/logged.hpp>
#include <poolkit/adaptor/per_thread.hpp>
#include <poolkit/adaptor/retried_on_oom.hpp>
#include <poolkit/adaptor/counted.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/adaptor/synchronized.hpp>
#include <poolkit/adaptor/tracked.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/buddy.hpp>
#include <poolkit/strategy/caching_pool.hpp>
#include <poolkit/strategy/fixed_size.hpp>
#include <poolkit/strategy/size_classes.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace poolkit;

namespace {

using base = ref<test::instrumented<>>;

// A fixture holds an instrumented upstream and the composition over it, made in place.
template <class Composition>
struct over_instrumented {
    test::instrumented<> memory;
    Composition pool{std::in_place, base{memory}};
};

struct synchronized_best_fit : over_instrumented<synchronized<best_fit<base>>> {
    static constexpr const char* name = "synchronized<best_fit>";
};
struct synchronized_caching_pool : over_instrumented<synchronized<caching_pool<base>>> {
    static constexpr const char* name = "synchronized<caching_pool>";
};
struct synchronized_size_classes : over_instrumented<synchronized<size_classes<base>>> {
    static constexpr const char* name = "synchronized<size_classes>";
};
struct synchronized_buddy : over_instrumented<synchronized<buddy<base>>> {
    static constexpr const char* name = "synchronized<buddy>";
};
struct synchronized_fixed_size : over_instrumented<synchronized<fixed_size<base>>> {
    static constexpr const char* name = "synchronized<fixed_size>";
};
struct statistics_over_synchronized : over_instrumented<counted<synchronized<best_fit<base>>>> {
    static constexpr const char* name = "counted<synchronized<best_fit>>";
};
struct limiting_over_synchronized : over_instrumented<limited<synchronized<caching_pool<base>>>> {
    static constexpr const char* name = "limited<synchronized<caching_pool>>";
};
struct tracking_over_synchronized : over_instrumented<tracked<synchronized<size_classes<base>>>> {
    static constexpr const char* name = "tracked<synchronized<size_classes>>";
};
struct retry_over_synchronized : over_instrumented<retried_on_oom<synchronized<best_fit<base>>>> {
    static constexpr const char* name = "retried_on_oom<synchronized<best_fit>>";
};
struct logging_over_synchronized {
    static constexpr const char* name = "logged<synchronized<best_fit>>";
    test::instrumented<> memory;
    synchronized<best_fit<base>> inner{std::in_place, base{memory}};
    std::ostringstream log;
    logged<ref<synchronized<best_fit<base>>>> pool{ref(inner), log};
};
struct synchronized_stream_ordered : over_instrumented<synchronized<stream_ordered<base, lanes<caching_pool>, completed_events>>> {
    static constexpr const char* name = "synchronized<stream_ordered<caching_pool>>";
};
struct per_thread_over_synchronized {
    static constexpr const char* name = "per_thread<synchronized<stream_ordered<caching_pool>>>";
    test::instrumented<> memory;
    per_thread<synchronized<stream_ordered<base, lanes<caching_pool>, completed_events>>, completed_events> pool{
        std::in_place, per_thread_options{.max_cached_bytes = 256 << 10}, completed_events{}, base{memory}};
};

struct handed {
    unsigned char* data;
    std::size_t bytes;
    unsigned char value;
};

}  // namespace

TEST_CASE_TEMPLATE("sixteen threads through a thread-safe composition keep every byte, and the upstream gets every block back", F,
                   synchronized_best_fit, synchronized_caching_pool, synchronized_size_classes, synchronized_buddy, synchronized_fixed_size,
                   statistics_over_synchronized, limiting_over_synchronized, tracking_over_synchronized, retry_over_synchronized,
                   logging_over_synchronized, synchronized_stream_ordered, per_thread_over_synchronized) {
    INFO("composition: ", F::name);
    F fixture;
    auto& pool = fixture.pool;
    constexpr int threads = 16;
    std::vector<std::deque<handed>> mailboxes(threads);
    std::vector<std::mutex> locks(threads);
    std::atomic<long> bad{0};
    const auto check_and_free = [&](const handed& h) {
        long wrong = 0;
        for (std::size_t i = 0; i < h.bytes; ++i) wrong += h.data[i] != h.value;
        bad += wrong;
        pool.deallocate(h.data, h.bytes);
    };
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&, t] {
            std::mt19937_64 random(static_cast<std::uint64_t>(t) * 7919 + 1);
            std::vector<handed> mine;
            for (int step = 0; step < 1500; ++step) {
                if (mine.empty() || random() % 100 < 55) {
                    const std::size_t bytes = 1 + random() % (random() % 16 == 0 ? 300000 : 3000);
                    auto* data = static_cast<unsigned char*>(pool.allocate(bytes));
                    const auto value = static_cast<unsigned char>(random());
                    std::memset(data, value, bytes);
                    mine.push_back({data, bytes, value});
                } else {
                    const std::size_t index = random() % mine.size();
                    const handed h = mine[index];
                    mine[index] = mine.back();
                    mine.pop_back();
                    if (random() % 3 == 0) {
                        const auto to = static_cast<std::size_t>(random() % threads);
                        std::lock_guard lock(locks[to]);
                        mailboxes[to].push_back(h);
                    } else {
                        check_and_free(h);
                    }
                }
                if (step % 32 == 0) {
                    std::deque<handed> arrived;
                    {
                        std::lock_guard lock(locks[t]);
                        arrived.swap(mailboxes[t]);
                    }
                    for (const handed& h : arrived) check_and_free(h);
                }
            }
            for (const handed& h : mine) check_and_free(h);
        });
    }
    for (auto& worker : workers) worker.join();
    for (int t = 0; t < threads; ++t) {
        for (const handed& h : mailboxes[t]) check_and_free(h);
    }
    CHECK(bad == 0);
    if constexpr (has_check_invariants<decltype(pool)>) pool.check_invariants();
    if constexpr (has_release<decltype(pool)>) {
        pool.release();
        CHECK(fixture.memory.live_bytes() == 0);
    }
    CHECK(fixture.memory.errors() == std::vector<std::string>{});
}
