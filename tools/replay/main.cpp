// poolkit-replay: replays allocation traces in RMM's CSV format (plain or gzip) through named
// compositions and compares how much memory each reserves and how fast it is.
//
//   poolkit-replay                        every bundled trace through every composition (a table)
//   poolkit-replay TRACE... [options]
// Options (CLI11; a value follows as --name=VALUE or --name VALUE):
//   --composition=A,B   only these (see --list)        --list      the compositions, one a line
//   --upstream=simulated|cuda                            --json      one JSON object per line
//   --svg=FILE          live and reserved bytes over each trace, for every composition
//   --snapshot=FILE     one composition's layout at one trace's peak, as PyTorch's snapshot JSON
//   --snapshot-at=live|reserved   that peak: of live bytes (default) or of the bytes it reserves
//   --expandable-option=NAME=VALUE   an expandable_options field on every expandable composition
//   --streams=N         each trace spread over N streams   --lag=K   simulated streams lag K events
//   --passes=N          N passes over each trace, the last reported as the warm one (default 2)
//   --progress / --no-progress   a progress bar on stderr (default: when stderr is a terminal)
// The command line and every trace are checked before anything is replayed, and nothing is written
// then: an --svg or --snapshot FILE that is an input, looks like a trace (.csv, .gz) or lies in a
// missing folder is refused; each is written to a temporary file beside FILE and renamed over it
// at the end.
// Exit status: 0; 1 when a composition failed (out of memory) or the upstream is unusable;
// 2 for malformed input ("file:line: message") or a bad command line.
#include "compositions.hpp"
#include "input.hpp"
#include "lagging.hpp"
#include "report.hpp"

#if POOLKIT_HAS_CUDA
#  include "cuda.hpp"
#endif
#if POOLKIT_REPLAY_TORCH
#  include "torch.hpp"
#endif

#include <CLI/CLI.hpp>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

// The bundled traces: POOLKIT_REPLAY_INSTALLED_TRACES relative to the folder of the program once
// installed (cmake --install: bin/ and share/poolkit/traces), else the source tree's copy.
#ifndef POOLKIT_REPLAY_INSTALLED_TRACES
#  define POOLKIT_REPLAY_INSTALLED_TRACES "../share/poolkit/traces"
#endif
#ifndef POOLKIT_REPLAY_SOURCE_TRACES
#  define POOLKIT_REPLAY_SOURCE_TRACES "bench/traces"
#endif

namespace {

using namespace poolkit;
using namespace poolkit::replay_tool;
namespace fs = std::filesystem;

// Where the bundled traces are: beside the installed program, else in the source tree it was built from.
fs::path bundled_traces_folder() {
    std::error_code error;
    const fs::path self = fs::read_symlink("/proc/self/exe", error);
    if (!error) {
        const fs::path installed = (self.parent_path() / POOLKIT_REPLAY_INSTALLED_TRACES).lexically_normal();
        if (fs::is_directory(installed, error)) return installed;
    }
    return POOLKIT_REPLAY_SOURCE_TRACES;
}

struct command_line {
    std::vector<std::string> files;
    std::vector<std::string> only;
    std::string upstream = "simulated";
    std::optional<std::string> svg;
    std::optional<std::string> snapshot;  // --snapshot: the layout at the peak, as PyTorch's snapshot JSON
    std::string snapshot_at = "live";  // --snapshot-at: the peak of live bytes, or of reserved ones
    std::optional<bool> progress;
    std::size_t streams = 0;  // 0: the trace's own streams
    std::optional<std::size_t> lag;  // none: simulated streams are always done (completed_events)
    bool transient_streams = false;  // --transient-streams: the replay's streams not declared lasting
    std::size_t passes = 2;  // the cold pass, then warm ones: the last is reported
    std::size_t cold_caches = 0;  // --cold-caches: bytes read between events (cache_sweep.hpp)
    std::string captures = "every_call";  // when stream-ordered compositions ask about CUDA graph capture
    std::vector<std::pair<std::string, std::string>> expandable_options;  // --expandable-option, in order
    bool json = false;
    bool list = false;
};

// A bad command line: exit status 2.
struct usage_error {
    std::string message;
};

// The names of the compositions a plain run knows, for messages.
std::string composition_names() {
    std::string names;
    for (const composition& c : simulated_compositions()) names += (names.empty() ? "" : ", ") + c.name;
    return names;
}

bool ends_with(std::string_view text, std::string_view suffix) {
    if (text.size() < suffix.size()) return false;
    const std::string_view tail = text.substr(text.size() - suffix.size());
    return std::equal(tail.begin(), tail.end(), suffix.begin(),
                      [](char a, char b) { return (a >= 'A' && a <= 'Z' ? a - 'A' + 'a' : a) == b; });
}

command_line parse_arguments(int argc, char** argv) {
    // CLI11 reads "--name= next" as "--name next"; an empty "--name=" is refused here instead.
    for (int i = 1; i < argc; ++i) {
        const std::string_view argument = argv[i];
        if (argument == "--") break;
        if (argument == "--svg=" || argument == "--snapshot=" || argument == "--upstream=" || argument == "--composition=") {
            const std::string name(argument.substr(0, argument.size() - 1));
            if (name == "--composition") {
                throw usage_error{"--composition= names no composition; name one or more of: " + composition_names() + " (see --list)"};
            }
            throw usage_error{name + "= needs a value"};
        }
    }
    command_line options;
    std::vector<std::string> compositions;
    std::string svg;
    std::string snapshot;
    bool progress = false;
    CLI::App app{"Replays allocation traces in RMM's CSV format (plain or gzip) through named compositions.", "poolkit-replay"};
    app.add_option("TRACE", options.files,
                   "trace files (.csv or .csv.gz); none: the bundled traces in " + bundled_traces_folder().string());
    app.add_option("--composition", compositions, "only these compositions, comma-separated (see --list)")
        ->type_name("A,B")
        ->allow_extra_args(false)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    app.add_option("--upstream", options.upstream, "where the bytes come from: simulated (default) or cuda")->type_name("simulated|cuda");
    app.add_option("--streams", options.streams,
                   "spread each trace over N new streams: event i on stream i mod N, so most frees name another "
                   "stream than their allocation (the trace is named NAME@Nstreams)")
        ->type_name("N")
        ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 16));
    app.add_option("--lag", options.lag,
                   "with the simulated upstream: the streams' work completes K events after it was issued, so that a "
                   "free is not at once ready for every stream; also counts the driver calls a GPU would take. 0: no "
                   "work lags (as on a GPU replaying a trace, which launches no kernels), the calls still counted")
        ->type_name("K")
        ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 20));
    app.add_flag("--transient-streams", options.transient_streams,
                 "do not declare the replay's streams lasting (never destroyed), as a program that may destroy its "
                 "streams would not: stream-ordered compositions then ask a stream about its frees only in its own "
                 "calls, and over CUDA ask each created stream's id at every call (with --upstream=cuda, new streams "
                 "for each trace; by default the process keeps its streams to its end)");
    app.add_option("--capture-checks", options.captures,
                   "when stream-ordered compositions ask whether a stream is in CUDA graph capture: every_call "
                   "(default), announced (only while a capture is announced) or never")
        ->type_name("every_call|announced|never")
        ->check(CLI::IsMember({"every_call", "announced", "never"}));
    std::vector<std::string> expandable_changes;
    app.add_option("--expandable-option", expandable_changes,
                   "set an expandable_options field by its C++ name on every expandable composition, "
                   "expandable/unstitched, expandable/old_holes, expandable/follow and expandable/exact included "
                   "(repeatable; e.g. peak_slack=0.05): what would these "
                   "options do to my trace? Checked by a 2 MiB granule's rules here, by the device's when run")
        ->type_name("NAME=VALUE")
        ->allow_extra_args(false)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    app.add_option("--passes", options.passes,
                   "replay each trace N times: the first is the cold pass, the last the warm pass whose figures are "
                   "shown (default 2); peak reserved is over all of them. A program runs its steps thousands of times: "
                   "more passes show whether a composition settles, or keeps creating and releasing physical memory")
        ->check(CLI::Range(2, 1000));
    app.add_option("--cold-caches", options.cold_caches,
                   "after every event read BYTES of other host memory (e.g. 2M), and take that time out of ns/op: "
                   "each call then finds the composition's data out of the CPU's caches, as a program's own work "
                   "between its allocations leaves it, where back-to-back calls keep it all cached")
        ->type_name("BYTES")
        ->transform(CLI::AsSizeValue(false))
        ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 30));
    app.add_flag("--json", options.json, "one JSON object per line instead of the table");
    app.add_option("--svg", svg, "also write live and reserved bytes over each trace, as SVG, to FILE")->type_name("FILE");
    app.add_option("--snapshot", snapshot,
                   "also write the composition's layout when live bytes first peak (or as --snapshot-at says), as the "
                   "segments of PyTorch's memory snapshot (JSON; python -m poolkit.replay --snapshot turns it into the "
                   "pickle PyTorch's viewer reads); one trace and one composition. The ns/op of the pass that takes it "
                   "then includes the walk")
        ->type_name("FILE");
    app.add_option("--snapshot-at", options.snapshot_at,
                   "with --snapshot: when to take the layout, live (default: after the event at which live bytes first "
                   "peak) or reserved (after the first event at which the composition's reserved bytes reach their most "
                   "over every pass: where its footprint was decided; the trace is replayed twice, once to find it)")
        ->type_name("live|reserved")
        ->check(CLI::IsMember({"live", "reserved"}));
    CLI::Option* progress_flag =
        app.add_flag("--progress,!--no-progress", progress, "a progress bar on stderr (default: when stderr is a terminal)");
    app.add_flag("--list", options.list, "the compositions, one a line, and exit");
    app.footer(
        "Exit status: 0; 1 when a composition failed (out of memory) or the upstream is unusable;\n"
        "2 for malformed input (\"file:line: message\") or a bad command line.");
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& help) {
        std::exit(app.exit(help));
    } catch (const CLI::ParseError& error) {
        std::string message = error.what();
        if (message.rfind("--composition", 0) == 0) message += " (one or more of: " + composition_names() + ")";
        throw usage_error{message};
    }

    if (options.upstream != "simulated" && options.upstream != "cuda") {
        throw usage_error{"--upstream is simulated or cuda, not '" + options.upstream + "'"};
    }
    for (const std::string& value : compositions) {
        if (!value.empty() && value[0] == '-') {  // "--composition --json": an option, not a name
            throw usage_error{"--composition needs composition names, not the option " + value +
                              "; name one or more of: " + composition_names() + " (see --list)"};
        }
        for (std::size_t start = 0;;) {
            const auto comma = value.find(',', start);
            const std::string name = value.substr(start, comma - start);
            if (name.empty()) {
                throw usage_error{"--composition=" + value + " has an empty name; name one or more of: " + composition_names() +
                                  " (see --list)"};
            }
            options.only.push_back(name);
            if (comma == std::string::npos) break;
            start = comma + 1;
        }
    }
    for (const std::string& change : expandable_changes) {
        const auto equals = change.find('=');
        if (equals == std::string::npos || equals == 0) {
            throw usage_error{"--expandable-option takes NAME=VALUE, not '" + change +
                              "' (the names: " + option_names<expandable_options>() + ")"};
        }
        options.expandable_options.emplace_back(change.substr(0, equals), change.substr(equals + 1));
    }
    try {  // by the rules of a 2 MiB granule (the H200's); a device's own is checked again when run
        static_cast<void>(with_changes(expandable_options{}, options.expandable_options, std::size_t{2} << 20));
    } catch (const std::invalid_argument& refused) {
        throw usage_error{std::string("--expandable-option: ") + refused.what()};
    }
    if (options.lag && options.upstream != "simulated") {
        throw usage_error{"--lag simulates streams over the simulated upstream; --upstream=" + options.upstream + " has real ones"};
    }
    if (progress_flag->count() > 0) options.progress = progress;
    if (app.count("--snapshot") > 0) {
        if (snapshot.empty() || snapshot[0] == '-') throw usage_error{"--snapshot needs a file name"};
        options.snapshot = snapshot;
    } else if (app.count("--snapshot-at") > 0) {
        throw usage_error{"--snapshot-at says when --snapshot takes its layout; no --snapshot was named"};
    }
    if (app.count("--svg") > 0) {
        if (svg.empty()) throw usage_error{"--svg needs a file name"};
        // "--svg --no-progress": an option, not a file name.
        if (svg[0] == '-') throw usage_error{"--svg needs a file name, not the option " + svg + " (write ./" + svg + " for such a file)"};
        options.svg = svg;
    }
    return options;
}

std::vector<std::string> bundled_traces() {
    std::vector<std::string> files;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(bundled_traces_folder(), error)) {
        const std::string path = entry.path().string();
        if (path.size() > 7 && path.substr(path.size() - 7) == ".csv.gz") files.push_back(path);
    }
    std::sort(files.begin(), files.end());
    return files;
}

std::vector<composition> available_compositions(const std::string& upstream, const std::optional<std::size_t>& lag) {
    if (upstream == "simulated") return !lag ? simulated_compositions() : simulated_compositions_over<lagging_events>();
#if POOLKIT_HAS_CUDA
    require_gpu();
    std::vector<composition> list = cuda_compositions();
#  if POOLKIT_REPLAY_TORCH
    for (composition& c : pytorch_compositions()) list.push_back(std::move(c));
#  endif
    return list;
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

// Refuses an output path (of `option`: --svg, --snapshot) that would write over an input or a
// trace, or that cannot be written; before anything is replayed, so that a mistake costs nothing.
// `kind` names what the file should be ("an .svg file").
void check_output_path(const std::string& option, const std::string& path, const std::vector<std::string>& inputs,
                       const std::string& kind) {
    if (ends_with(path, ".csv") || ends_with(path, ".gz")) {
        throw usage_error{option + " " + path + ": that names a trace (.csv, .csv.gz); refusing to write over it (name " + kind + ")"};
    }
    std::error_code error;
    for (const std::string& input : inputs) {
        std::error_code path_error, input_error;
        const fs::path out_path = fs::weakly_canonical(path, path_error);
        const fs::path input_path = fs::weakly_canonical(input, input_error);
        if (fs::equivalent(path, input, error) || (!path_error && !input_error && out_path == input_path)) {
            throw usage_error{option + " " + path + " is the input trace " + input + "; refusing to write over it"};
        }
    }
    if (fs::is_directory(path, error)) throw usage_error{option + " " + path + " is a directory"};
    const fs::path folder = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
    if (!fs::is_directory(folder, error)) {
        throw usage_error{option + " " + path + ": the folder " + folder.string() + " does not exist"};
    }
    if (access(folder.c_str(), W_OK) != 0) {
        throw usage_error{option + " " + path + ": cannot write in " + folder.string() + " (" + std::strerror(errno) + ")"};
    }
}

// Writes `write`'s output to a temporary file beside `path` and renames it over `path` once
// complete, so that a failed write leaves whatever was there; a path that is no regular file (a
// terminal, /dev/stdout, a pipe) is written directly. Returns false, with a message on stderr, on
// failure.
template <class Write>
bool write_file(const std::string& path, Write write) {
    std::error_code error;
    if (fs::exists(path, error) && !fs::is_regular_file(path, error)) {
        std::ofstream out(path);
        write(out);
        out.flush();
        if (out) return true;
        std::fprintf(stderr, "poolkit-replay: cannot write %s\n", path.c_str());
        return false;
    }
    std::string temporary = path + ".partial-XXXXXX";
    const int descriptor = mkstemp(temporary.data());
    if (descriptor < 0) {
        std::fprintf(stderr, "poolkit-replay: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
        return false;
    }
    const mode_t mask = umask(0);
    umask(mask);
    const bool made = fchmod(descriptor, 0666 & ~mask) == 0 && close(descriptor) == 0;
    bool written = false;
    if (made) {
        std::ofstream out(temporary, std::ios::trunc);
        write(out);
        out.close();
        written = !out.fail();
    }
    if (!written || std::rename(temporary.c_str(), path.c_str()) != 0) {
        const int cause = errno;
        std::remove(temporary.c_str());
        std::fprintf(stderr, "poolkit-replay: cannot write %s: %s\n", path.c_str(), std::strerror(cause));
        return false;
    }
    return true;
}

// The index of the event after which `t` first holds its peak of live bytes.
std::size_t first_peak(const trace& t) {
    std::size_t live = 0, most = 0, at = 0;
    for (std::size_t i = 0; i < t.events.size(); ++i) {
        const trace_event& e = t.events[i];
        live = e.action == trace_action::allocate ? live + e.bytes : live - e.bytes;
        if (live > most) {
            most = live;
            at = i;
        }
    }
    return at;
}

// Sets where `settings` take --snapshot's layout of `c` on `t`: after the event at which live bytes
// first peak (`when` "live"), or after the first at which c's reserved bytes reach their most over
// every pass ("reserved"), found by a replay of its own. Says which event on stderr.
void snapshot_when(const std::string& when, const trace& t, const composition& c, run_settings& settings) {
    if (when == "live") {
        settings.snapshot_after = first_peak(t);
        return;
    }
    run_settings finding = settings;
    finding.find_reserved_peak = true;
    finding.samples = 0;
    finding.progress = nullptr;
    const event_position at = c.run(t, finding).reserved_peak_at.value_or(event_position{});
    settings.snapshot_after = at.index;
    settings.snapshot_pass = at.pass;
    std::fprintf(stderr, "poolkit-replay: --snapshot-at=reserved: %s's reserved bytes first reach their most after event %zu of pass %zu\n",
                 c.name.c_str(), at.index + 1, at.pass + 1);
}

int run(const command_line& options) {
    std::vector<composition> all = available_compositions(options.upstream, options.lag);
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
            if (found == all.end()) {
                std::string names;
                for (const composition& c : all) names += (names.empty() ? "" : ", ") + c.name;
                throw usage_error{"no composition named " + name + "; there are: " + names + " (see --list)"};
            }
            chosen.push_back(*found);
        }
    }
    std::vector<std::string> files = options.files;
    if (files.empty()) {
        files = bundled_traces();
        if (files.empty()) throw usage_error{"no trace named, and no bundled traces in " + bundled_traces_folder().string()};
    }
    if (options.svg) check_output_path("--svg", *options.svg, files, "an .svg file");
    if (options.snapshot) {
        check_output_path("--snapshot", *options.snapshot, files, "a .json file");
        if (files.size() != 1 || chosen.size() != 1) {
            throw usage_error{
                "--snapshot takes one trace and one composition (--composition=NAME): PyTorch's viewer shows one "
                "layout; named " +
                std::to_string(files.size()) + " trace(s) and " + std::to_string(chosen.size()) + " composition(s)"};
        }
    }
    // Read every trace first: a malformed one stops the run before anything is measured.
    std::vector<trace> traces;
    std::map<std::string, quoted_peers> quoted;  // by trace name; the peers ran the trace as captured
    for (const std::string& file : files) {
        trace t = read_trace_file(file);
        if (options.streams == 0 && !options.json) {
            if (auto peers = read_quoted_peers(file, stderr)) quoted[t.name] = std::move(*peers);
        }
        traces.push_back(options.streams == 0 ? std::move(t) : spread_over_streams(std::move(t), options.streams));
    }

    progress_bar bar(options.progress.value_or(isatty(STDERR_FILENO) != 0));
    std::vector<outcome> outcomes;
    bool failed = false;
    for (const trace& t : traces) {
#if POOLKIT_HAS_CUDA
        std::optional<cuda_streams> device_streams;
        if (options.upstream == "cuda") device_streams.emplace(t, !options.transient_streams);
#endif
        std::optional<lagging_streams> lagging;
        if (options.lag) lagging.emplace(t, *options.lag, !options.transient_streams);
        const std::vector<stream_ref> simulated = simulated_streams(t);
        for (const composition& c : chosen) {
            outcome result{t.name, c.name, t.events.size(), t.peak_live_bytes, std::nullopt, {}, std::nullopt};
            run_settings settings;
            settings.streams = simulated;
#if POOLKIT_HAS_CUDA
            if (device_streams) settings.streams = device_streams->refs();
#endif
            event_calls before;
            if (lagging) {
                lagging->settle();
                before = lagging->calls();
                settings.streams = lagging->refs();
                settings.after_event = [&lagging](const trace_event& e) { lagging->after(e); };
            }
            settings.samples = options.svg ? 1500 : 0;
            settings.passes = options.passes;
            settings.cold_caches = options.cold_caches;
            settings.expandable_options = options.expandable_options;
            settings.captures = options.captures == "announced" ? capture_check::announced
                                : options.captures == "never"   ? capture_check::never
                                                                : capture_check::every_call;
            bar.start(t.name + " / " + c.name);
            settings.progress = [&bar](std::size_t done, std::size_t total) { bar.update(done, total); };
            try {
                if (options.snapshot) {
                    snapshot_when(options.snapshot_at, t, c, settings);
                    if (lagging) {  // the finding replay's work done, its calls not counted
                        lagging->settle();
                        before = lagging->calls();
                    }
                }
                result.figures = c.run(t, settings);
            } catch (const std::bad_alloc& error) {
                result.error = error.what();
                failed = true;
            }
            bar.finish();
            if (lagging) {
                const event_calls after = lagging->calls();
                result.calls = event_calls{after.records - before.records, after.queries - before.queries, after.waits - before.waits,
                                           after.synchronizations - before.synchronizations};
            }
            if (options.json) print_json(stdout, result, options.upstream);
            std::fflush(stdout);
            outcomes.push_back(std::move(result));
        }
    }
    if (!options.json) {
        print_table(stdout, outcomes, quoted, options.upstream);
    }
    if (options.svg && !write_file(*options.svg, [&outcomes](std::ostream& out) { write_svg(out, outcomes); })) return 1;
    if (options.snapshot) {
        const outcome& only = outcomes.front();
        if (!only.figures || !only.figures->snapshot) {
            std::fprintf(stderr, "poolkit-replay: --snapshot: %s\n",
                         only.figures ? (only.composition + " has no layout to walk (no pool of poolkit's)").c_str()
                                      : (only.composition + " failed (out of memory); no layout written").c_str());
            return 1;
        }
        if (!write_file(*options.snapshot, [&only](std::ostream& out) { out << *only.figures->snapshot << '\n'; })) return 1;
    }
    return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(parse_arguments(argc, argv));
    } catch (const usage_error& error) {
        std::fprintf(stderr, "poolkit-replay: %s\nRun with --help for more information.\n", error.message.c_str());
        return 2;
    } catch (const poolkit::trace_error& error) {
        std::fprintf(stderr, "poolkit-replay: %s\n", error.what());
        return 2;
    } catch (const std::exception& error) {
        std::fprintf(stderr, "poolkit-replay: %s\n", error.what());
        return 1;
    }
}
