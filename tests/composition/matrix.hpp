// The composition matrix: every adaptor over every strategy, every strategy over every adaptor
// (the adaptor between the strategy and its upstream), and every adaptor-over-strategy stack as the
// lane pool of a stream_ordered over simulated streams, each through the conformance suite. A
// new strategy gets an alias below and joins POOLKIT_MATRIX_LANE_STRATEGIES (or
// POOLKIT_MATRIX_STRATEGIES), a new adaptor an alias, POOLKIT_MATRIX_ADAPTORS and a translation
// unit like the others (matrix_<adaptor>.cpp). Stacks are built in place (core/in_place.hpp) and
// lanes through lanes<> (adaptor/lanes.hpp), so no block writes anything for the matrix.
#pragma once

#include "../support/conformance.hpp"

#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/limited.hpp>
#include <poolkit/adaptor/logged.hpp>
#include <poolkit/adaptor/recorded.hpp>
#include <poolkit/adaptor/retried_on_oom.hpp>
#include <poolkit/adaptor/counted.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/adaptor/synchronized.hpp>
#include <poolkit/adaptor/tracked.hpp>
#include <poolkit/adaptor/lanes.hpp>
#include <poolkit/core/in_place.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/buddy.hpp>
#include <poolkit/strategy/caching_pool.hpp>
#include <poolkit/strategy/exact_cache.hpp>
#include <poolkit/strategy/fallback.hpp>
#include <poolkit/strategy/fixed_size.hpp>
#include <poolkit/strategy/monotonic.hpp>
#include <poolkit/strategy/segregator.hpp>
#include <poolkit/strategy/size_classes.hpp>

#include <doctest/doctest.h>

#include <iostream>
#include <streambuf>
#include <string>
#include <string_view>

namespace poolkit::test::matrix {

using base = ref<instrumented<>>;

// The strategies, each a template over its upstream.
template <class U>
using best_fit_over = best_fit<U>;
template <class U>
using buddy_over = buddy<U>;
template <class U>
using size_classes_over = size_classes<U>;
template <class U>
using size_classes_large_best_fit_over = size_classes<U, best_fit<U>>;
template <class U>
using fixed_size_over = fixed_size<U>;
template <class U>
using monotonic_over = monotonic<U>;
template <class U>
using caching_pool_over = caching_pool<U>;
template <class U>
using exact_cache_over = exact_cache<U>;
template <class U>
using segregator_over = segregator<4096, size_classes<U>, best_fit<U>>;
template <class U>
using fallback_over = fallback<best_fit<U>, buddy<U>>;

// The adaptors, each a template over its upstream. Named here, not in each row's file: a template
// argument from an anonymous namespace would give every row's fixtures the same symbols.
template <class U>
using counted_of = counted<U>;
template <class U>
using tracked_of = tracked<U>;
template <class U>
using logged_of = logged<U>;
template <class U>
using recorded_of = recorded<U>;
template <class U>
using limited_of = limited<U>;
template <class U>
using retried_on_oom_of = retried_on_oom<U>;
template <class U>
using synchronized_of = synchronized<U>;

// While it lives, std::clog writes nowhere: loggers built in place (as lanes build them) write there.
class quiet_clog {
public:
    quiet_clog() : saved_(std::clog.rdbuf(&sink_)) {}
    ~quiet_clog() { std::clog.rdbuf(saved_); }
    quiet_clog(const quiet_clog&) = delete;
    quiet_clog& operator=(const quiet_clog&) = delete;

private:
    struct discard : std::streambuf {
        int overflow(int character) override { return character; }
    };
    discard sink_;
    std::streambuf* saved_;
};

// The type's name as the compiler spells it, for the suite's messages.
template <class T>
std::string type_name() {
    const std::string_view function = __PRETTY_FUNCTION__;
    const auto begin = function.find("T = ") + 4;
    const auto end = function.find_first_of(";]", begin);
    return std::string(function.substr(begin, end - begin));
}

// Tears a fixture down: invariants hold, cached memory goes back, the upstream saw no misuse.
template <class Stack>
void finish(Stack& stack, instrumented<>& upstream) {
    if constexpr (has_check_invariants<Stack>) stack.check_invariants();
    if constexpr (has_release<Stack>) {
        stack.release();
        CHECK(upstream.live_bytes() == 0);
    }
    CHECK(upstream.errors().empty());
}

// Adaptor<Strategy<upstream>>.
template <template <class> class Adaptor, template <class> class Strategy>
struct adaptor_over_strategy : host_touch {
    using stack = Adaptor<Strategy<base>>;
    static inline const std::string name = type_name<stack>();
    static constexpr bool stateless = false;
    instrumented<> upstream_;
    stack resource_ = build_from<stack>(base{upstream_});
    instrumented<>* upstream() { return &upstream_; }
    stack& resource() { return resource_; }
    void exhaust_setup() { upstream_.limit(std::size_t{1} << 20); }
    ~adaptor_over_strategy() { finish(resource_, upstream_); }
};

// Strategy<ref<Adaptor<upstream>>>: the adaptor sees what the strategy takes from its upstream.
template <template <class> class Adaptor, template <class> class Strategy>
struct strategy_over_adaptor : host_touch {
    using middle = Adaptor<base>;
    using stack = Strategy<ref<middle>>;
    static inline const std::string name = type_name<stack>();
    static constexpr bool stateless = false;
    instrumented<> upstream_;
    middle middle_ = build_from<middle>(base{upstream_});
    stack resource_ = build_from<stack>(ref<middle>{middle_});
    instrumented<>* upstream() { return &upstream_; }
    stack& resource() { return resource_; }
    void exhaust_setup() { upstream_.limit(std::size_t{1} << 20); }
    ~strategy_over_adaptor() { finish(resource_, upstream_); }
};

// Adaptor<Strategy<U>> as one template, for lanes<>.
template <template <class> class Adaptor, template <class> class Strategy>
struct stacked {
    template <class U>
    using over = Adaptor<Strategy<U>>;
};

// stream_ordered<upstream, lanes<Adaptor<Strategy<>>>>: the stack as the pool of every lane.
template <template <class> class Adaptor, template <class> class Strategy>
struct adaptor_stack_lanes : host_touch {
    using pool_lanes_type = lanes<stacked<Adaptor, Strategy>::template over>;
    static_assert(pool_lanes<pool_lanes_type, base>);
    using stack = stream_ordered<base, pool_lanes_type, host_events>;
    static inline const std::string name = type_name<stack>();
    static constexpr bool stateless = false;
    instrumented<> upstream_;
    stack resource_{base{upstream_}};
    instrumented<>* upstream() { return &upstream_; }
    stack& resource() { return resource_; }
    void exhaust_setup() { upstream_.limit(std::size_t{8} << 20); }
    ~adaptor_stack_lanes() { finish(resource_, upstream_); }
};

}  // namespace poolkit::test::matrix

// Each strategy and each adaptor is named once here. F(Adaptor, Strategy) for every strategy that
// can serve a lane (monotonic cannot: it never reuses a freed block), and for every strategy.
#define POOLKIT_MATRIX_LANE_STRATEGIES(F, Adaptor)                                                                                  \
    F(Adaptor, best_fit_over), F(Adaptor, buddy_over), F(Adaptor, size_classes_over), F(Adaptor, size_classes_large_best_fit_over), \
        F(Adaptor, fixed_size_over), F(Adaptor, caching_pool_over), F(Adaptor, segregator_over), F(Adaptor, fallback_over),         \
        F(Adaptor, exact_cache_over)
#define POOLKIT_MATRIX_STRATEGIES(F, Adaptor) POOLKIT_MATRIX_LANE_STRATEGIES(F, Adaptor), F(Adaptor, monotonic_over)
// F(Adaptor, Strategy) for every adaptor.
#define POOLKIT_MATRIX_ADAPTORS(F, Strategy)                                                                                     \
    F(counted_of, Strategy), F(tracked_of, Strategy), F(logged_of, Strategy), F(recorded_of, Strategy), F(limited_of, Strategy), \
        F(retried_on_oom_of, Strategy), F(synchronized_of, Strategy)
#define POOLKIT_MATRIX_OVER(Adaptor, Strategy) adaptor_over_strategy<Adaptor, Strategy>
#define POOLKIT_MATRIX_UNDER(Adaptor, Strategy) strategy_over_adaptor<Adaptor, Strategy>
#define POOLKIT_MATRIX_LANES(Adaptor, Strategy) adaptor_stack_lanes<Adaptor, Strategy>

// The whole row of one adaptor: over each strategy, under each, and as lanes.
#define POOLKIT_MATRIX_ROW(Adaptor)                                                                 \
    TEST_CASE_TEMPLATE_INVOKE(conformance, POOLKIT_MATRIX_STRATEGIES(POOLKIT_MATRIX_OVER, Adaptor), \
                              POOLKIT_MATRIX_STRATEGIES(POOLKIT_MATRIX_UNDER, Adaptor),             \
                              POOLKIT_MATRIX_LANE_STRATEGIES(POOLKIT_MATRIX_LANES, Adaptor))

// The whole column of one strategy (one that can serve a lane): under every adaptor, over every
// adaptor, and as lanes under every adaptor.
#define POOLKIT_MATRIX_COLUMN(Strategy)                                                            \
    TEST_CASE_TEMPLATE_INVOKE(conformance, POOLKIT_MATRIX_ADAPTORS(POOLKIT_MATRIX_OVER, Strategy), \
                              POOLKIT_MATRIX_ADAPTORS(POOLKIT_MATRIX_UNDER, Strategy),             \
                              POOLKIT_MATRIX_ADAPTORS(POOLKIT_MATRIX_LANES, Strategy))
