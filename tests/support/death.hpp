// run_in_child(body): runs `body` in a forked child with its stderr captured, and says how the
// child ended, with the default handler for every crash signal. For tests of POOLKIT_ASSERT (a failed check aborts) and of what a strategy prints
// on destruction. The body must not use doctest macros: its checks belong to the parent.
#pragma once

#include <csignal>
#include <cstdio>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

namespace poolkit::test {

struct child_outcome {
    int signal = 0;  // the signal that ended the child, or 0
    int exit_code = -1;  // its exit code when it exited, or -1
    std::string error_output;

    [[nodiscard]] bool aborted() const noexcept { return signal == SIGABRT; }
    [[nodiscard]] bool exited_cleanly() const noexcept { return signal == 0 && exit_code == 0; }
    [[nodiscard]] bool said(const std::string& text) const { return error_output.find(text) != std::string::npos; }
};

template <class Body>
child_outcome run_in_child(Body&& body) {
    int pipe_ends[2];
    if (::pipe(pipe_ends) != 0) return {};
    std::fflush(nullptr);  // nothing buffered may be written twice
    const pid_t child = ::fork();
    if (child < 0) return {};
    if (child == 0) {
        ::close(pipe_ends[0]);
        ::dup2(pipe_ends[1], STDERR_FILENO);
        ::close(pipe_ends[1]);
        // The test runner's crash handlers would report the child's death as the parent's.
        for (int signal_number : {SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE}) std::signal(signal_number, SIG_DFL);
        body();
        std::fflush(nullptr);
        ::_exit(0);  // no atexit handlers, no doctest teardown
    }
    ::close(pipe_ends[1]);
    child_outcome outcome;
    char buffer[4096];
    for (ssize_t got; (got = ::read(pipe_ends[0], buffer, sizeof buffer)) != 0;) {
        if (got < 0) break;
        outcome.error_output.append(buffer, static_cast<std::size_t>(got));
    }
    ::close(pipe_ends[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    if (WIFSIGNALED(status)) outcome.signal = WTERMSIG(status);
    if (WIFEXITED(status)) outcome.exit_code = WEXITSTATUS(status);
    return outcome;
}

}  // namespace poolkit::test
