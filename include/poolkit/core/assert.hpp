// POOLKIT_ASSERT: the one precondition check of the library, and POOLKIT_VERIFY, its always-on twin.
//
// POOLKIT_ASSERT guards preconditions on hot paths (a deallocate of a pointer a block does not own).
// It is active when POOLKIT_ENABLE_ASSERTS is 1, which it is by default unless NDEBUG is defined.
// POOLKIT_VERIFY is for checks that were asked for explicitly (check_invariants()) and is active in
// every build. A failed check calls the installed handler (default: print to stderr, then
// std::abort()). A user may define POOLKIT_ASSERT before including any poolkit header to replace it.
#pragma once

#include <atomic>
#include <cstdio>
#include <cstdlib>

#ifndef POOLKIT_ENABLE_ASSERTS
#  ifdef NDEBUG
#    define POOLKIT_ENABLE_ASSERTS 0
#  else
#    define POOLKIT_ENABLE_ASSERTS 1
#  endif
#endif

namespace poolkit {

// What a failed POOLKIT_ASSERT reports. `message` says which rule was broken.
struct assertion_failure {
    const char* expression;
    const char* message;
    const char* file;
    int line;
};

// Called on a failed assertion. It must not return. It may throw, but a throw out of a noexcept
// function (every deallocate) ends the program, so a handler for production logs and aborts.
using assertion_handler = void (*)(const assertion_failure&);

namespace detail {
[[noreturn]] inline void default_assertion_handler(const assertion_failure& failure) {
    std::fprintf(stderr, "poolkit: assertion failed: %s (%s) at %s:%d\n", failure.message, failure.expression, failure.file, failure.line);
    std::fflush(stderr);
    std::abort();
}

inline std::atomic<assertion_handler>& installed_assertion_handler() noexcept {
    static std::atomic<assertion_handler> handler{&default_assertion_handler};
    return handler;
}

[[noreturn]] inline void assertion_failed(const char* expression, const char* message, const char* file, int line) {
    installed_assertion_handler().load()(assertion_failure{expression, message, file, line});
    std::abort();  // a handler that returns still stops the program
}
}  // namespace detail

// Installs `handler` and returns the previous one. Thread-safe.
inline assertion_handler set_assertion_handler(assertion_handler handler) noexcept {
    return detail::installed_assertion_handler().exchange(handler ? handler : &detail::default_assertion_handler);
}

}  // namespace poolkit

#define POOLKIT_VERIFY(expression, message) \
    (static_cast<bool>(expression) ? void(0) : ::poolkit::detail::assertion_failed(#expression, message, __FILE__, __LINE__))

#ifndef POOLKIT_ASSERT
#  if POOLKIT_ENABLE_ASSERTS
#    define POOLKIT_ASSERT(expression, message) \
        (static_cast<bool>(expression) ? void(0) : ::poolkit::detail::assertion_failed(#expression, message, __FILE__, __LINE__))
#  else
// Never called, but names that only assertions read still count as used (g++ and nvcc alike).
#    define POOLKIT_ASSERT(expression, message) static_cast<void>([&]() -> bool { return expression; })
#  endif
#endif
