// poolkit-replay: replays allocation traces in RMM's CSV format (plain or gzip) through named
// compositions and compares how much memory each reserves and how fast it is.
//
//   poolkit-replay                        every bundled trace through every composition (a table)
//   poolkit-replay TRACE... [options]
// Options:
//   --composition=A,B   only these (see --list)        --list      the compositions, one a line
//   --upstream=simulated|cuda                            --json      one JSON object per line
//   --svg=FILE          live and reserved bytes over each trace, for every composition
//   --progress / --no-progress   a progress bar on stderr (default: when stderr is a terminal)
// Exit status: 0; 1 when a composition failed (out of memory) or the upstream is unusable;
// 2 for malformed input ("file:line: message") or a bad command line.
#include "compositions.hpp"
#include "input.hpp"
#include "report.hpp"

#if POOLKIT_HAS_CUDA
#  include "cuda.hpp"
#endif

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#ifndef POOLKIT_REPLAY_TRACES
#  define POOLKIT_REPLAY_TRACES "bench/traces"
#endif

namespace {

using namespace poolkit;
using namespace poolkit::replay_tool;

struct command_line {
    std::vector<std::string> files;
    std::vector<std::string> only;
    std::string upstream = "simulated";
    std::optional<std::string> svg;
    std::optional<bool> progress;
    bool json = false;
    bool list = false;
};

constexpr const char* usage =
    "usage: poolkit-replay [TRACE.csv[.gz]...] [--composition=A,B] [--upstream=simulated|cuda]\n"
    "                      [--json] [--svg=FILE] [--progress|--no-progress] [--list]\n"
    "With no trace named, replays the bundled traces (" POOLKIT_REPLAY_TRACES "/*.csv.gz).\n";

struct usage_error {
    std::string message;
};

command_line parse_arguments(int argc, char** argv) {
    command_line options;
    for (int i = 1; i < argc; ++i) {
        const std::string_view argument = argv[i];
        const auto value_of = [&](std::string_view name) -> std::optional<std::string> {
            if (argument.substr(0, name.size()) != name) return std::nullopt;
            if (argument.size() > name.size() && argument[name.size()] == '=') return std::string(argument.substr(name.size() + 1));
            if (argument.size() == name.size()) {
                if (i + 1 >= argc) throw usage_error{std::string(name) + " needs a value"};
                return std::string(argv[++i]);
            }
            return std::nullopt;
        };
        if (argument == "--help" || argument == "-h") {
            std::fputs(usage, stdout);
            std::exit(0);
        } else if (argument == "--json") {
            options.json = true;
        } else if (argument == "--list") {
            options.list = true;
        } else if (argument == "--progress") {
            options.progress = true;
        } else if (argument == "--no-progress") {
            options.progress = false;
        } else if (auto value = value_of("--composition")) {
            for (std::size_t start = 0; start <= value->size();) {
                const auto comma = value->find(',', start);
                const std::string name = value->substr(start, comma - start);
                if (!name.empty()) options.only.push_back(name);
                if (comma == std::string::npos) break;
                start = comma + 1;
            }
        } else if (auto value = value_of("--upstream")) {
            if (*value != "simulated" && *value != "cuda") throw usage_error{"--upstream is simulated or cuda, not " + *value};
            options.upstream = *value;
        } else if (auto value = value_of("--svg")) {
            options.svg = *value;
        } else if (argument.size() > 1 && argument[0] == '-') {
            throw usage_error{"unknown option " + std::string(argument)};
        } else {
            options.files.emplace_back(argument);
        }
    }
    return options;
}

std::vector<std::string> bundled_traces() {
    std::vector<std::string> files;
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(POOLKIT_REPLAY_TRACES, error)) {
        const std::string path = entry.path().string();
        if (path.size() > 7 && path.substr(path.size() - 7) == ".csv.gz") files.push_back(path);
    }
    std::sort(files.begin(), files.end());
    return files;
}

std::vector<composition> available_compositions(const std::string& upstream) {
    if (upstream == "simulated") return simulated_compositions();
#if POOLKIT_HAS_CUDA
    require_gpu();
    return cuda_compositions();
#else
    throw std::runtime_error("--upstream=cuda: this poolkit-replay was built without CUDA (POOLKIT_HAS_CUDA=0)");
#endif
}

// A bar on stderr, redrawn at most once per percent.
class progress_bar {
public:
    explicit progress_bar(bool enabled) : enabled_(enabled) {}
    void start(std::string label) {
        label_ = std::move(label);
        shown_ = -1;
    }
    void update(std::size_t done, std::size_t total) {
        if (!enabled_ || total == 0) return;
        const int percent = static_cast<int>(done * 100 / total);
        if (percent == shown_) return;
        shown_ = percent;
        char bar[41];
        const int filled = percent * 40 / 100;
        for (int i = 0; i < 40; ++i) bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
        bar[40] = '\0';
        std::fprintf(stderr, "\r[%s] %3d%% %-50.50s", bar, percent, label_.c_str());
        std::fflush(stderr);
    }
    void finish() {
        if (!enabled_ || shown_ < 0) return;
        std::fprintf(stderr, "\r%*s\r", 100, "");
        std::fflush(stderr);
    }

private:
    bool enabled_;
    std::string label_;
    int shown_ = -1;
};

int run(const command_line& options) {
    std::vector<composition> all = available_compositions(options.upstream);
    if (options.list) {
        for (const composition& c : all) std::printf("%-24s %s\n", c.name.c_str(), c.description.c_str());
        return 0;
    }
    std::vector<composition> chosen;
    if (options.only.empty()) {
        chosen = all;
    } else {
        for (const std::string& name : options.only) {
            const auto found = std::find_if(all.begin(), all.end(), [&](const composition& c) { return c.name == name; });
            if (found == all.end()) throw usage_error{"no composition named " + name + " (see --list)"};
            chosen.push_back(*found);
        }
    }
    std::vector<std::string> files = options.files;
    if (files.empty()) {
        files = bundled_traces();
        if (files.empty()) throw usage_error{"no trace named, and no bundled traces in " POOLKIT_REPLAY_TRACES};
    }
    // Read every trace first: a malformed one stops the run before anything is measured.
    std::vector<trace> traces;
    for (const std::string& file : files) traces.push_back(read_trace_file(file));

    progress_bar bar(options.progress.value_or(isatty(STDERR_FILENO) != 0));
    std::vector<outcome> outcomes;
    bool failed = false;
    for (const trace& t : traces) {
#if POOLKIT_HAS_CUDA
        std::optional<cuda_streams> device_streams;
        if (options.upstream == "cuda") device_streams.emplace(t);
#endif
        const std::vector<stream_ref> simulated = simulated_streams(t);
        for (const composition& c : chosen) {
            outcome result{t.name, c.name, t.events.size(), t.peak_live_bytes, std::nullopt, {}};
            run_settings settings;
            settings.streams = simulated;
#if POOLKIT_HAS_CUDA
            if (device_streams) settings.streams = device_streams->refs();
#endif
            settings.samples = options.svg ? 1500 : 0;
            bar.start(t.name + " / " + c.name);
            settings.progress = [&bar](std::size_t done, std::size_t total) { bar.update(done, total); };
            try {
                result.figures = c.run(t, settings);
            } catch (const std::bad_alloc& error) {
                result.error = error.what();
                failed = true;
            }
            bar.finish();
            if (options.json) print_json(stdout, result, options.upstream);
            std::fflush(stdout);
            outcomes.push_back(std::move(result));
        }
    }
    if (!options.json) {
        print_table(stdout, outcomes, read_peer_figures(std::string(POOLKIT_REPLAY_TRACES) + "/README.md"), options.upstream);
    }
    if (options.svg) {
        std::ofstream out(*options.svg);
        write_svg(out, outcomes);
        if (!out) {
            std::fprintf(stderr, "poolkit-replay: cannot write %s\n", options.svg->c_str());
            return 1;
        }
    }
    return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(parse_arguments(argc, argv));
    } catch (const usage_error& error) {
        std::fprintf(stderr, "poolkit-replay: %s\n%s", error.message.c_str(), usage);
        return 2;
    } catch (const poolkit::trace_error& error) {
        std::fprintf(stderr, "poolkit-replay: %s\n", error.what());
        return 2;
    } catch (const std::exception& error) {
        std::fprintf(stderr, "poolkit-replay: %s\n", error.what());
        return 1;
    }
}
