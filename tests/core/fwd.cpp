// fwd.hpp agrees with the headers: its declarations come first here, so a template parameter list,
// constraint or class key that differs from the definition poolkit.hpp brings fails to compile.
#include <poolkit/fwd.hpp>
#include <poolkit/poolkit.hpp>

#include <doctest/doctest.h>

#include <type_traits>

using namespace poolkit;

namespace {
// What a header that only includes fwd.hpp may do: name the types, as pointers and references.
struct holder {
    best_fit<new_delete_resource>* pool = nullptr;
    counted<best_fit<new_delete_resource>, concurrent_counters>* observed = nullptr;
};
}  // namespace

TEST_CASE("fwd.hpp: the declared types are the defined ones") {
    best_fit<new_delete_resource> pool;
    counted<best_fit<new_delete_resource>, concurrent_counters> observed;
    holder h{&pool, &observed};
    CHECK(h.pool == &pool);
    static_assert(std::is_same_v<decltype(h.observed), counted<best_fit<new_delete_resource>>*>);
}
