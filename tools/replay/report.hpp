// What poolkit-replay prints: the table, JSON lines, the SVG chart, and the peers' figures quoted
// from the JSON beside each trace.
#pragma once

#include "compositions.hpp"

#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace poolkit::replay_tool {

// One trace through one composition.
struct outcome {
    std::string trace;
    std::string composition;
    std::size_t events = 0;
    std::size_t peak_live_bytes = 0;
    std::optional<run_figures> figures;  // empty when the run failed
    std::string error;
    std::optional<event_calls> calls;  // with --lag: the driver calls a GPU would have taken

    [[nodiscard]] double ratio() const {
        return figures && peak_live_bytes != 0 ? static_cast<double>(figures->peak_reserved_bytes) / static_cast<double>(peak_live_bytes)
                                               : 0.0;
    }
};

// What another allocator reached on a trace, measured elsewhere: quoted from the "peers" object of
// the JSON file beside the trace (NAME.json beside NAME.csv.gz), with where and when it was measured.
struct peer_figure {
    std::string name;
    std::optional<double> ns_per_op, ratio;
};
struct quoted_peers {
    std::string measured;
    std::vector<peer_figure> peers;
};

// The JSON file beside a trace file: NAME.json for NAME.csv.gz or NAME.csv.
inline std::filesystem::path peers_file_of(const std::filesystem::path& trace_file) {
    std::string name = trace_file.filename().string();
    for (const std::string_view suffix : {std::string_view(".csv.gz"), std::string_view(".csv")}) {
        if (name.size() > suffix.size() && name.ends_with(suffix)) {
            name.resize(name.size() - suffix.size());
            break;
        }
    }
    return trace_file.parent_path() / (name + ".json");
}

// The peers quoted beside `trace_file`; nullopt where there is no such file or it holds none. A file
// that cannot be read as JSON, or whose figures are not numbers, is reported on `warnings` and
// left out: the replay itself does not need it.
inline std::optional<quoted_peers> read_quoted_peers(const std::filesystem::path& trace_file, std::FILE* warnings) {
    const std::filesystem::path file = peers_file_of(trace_file);
    std::error_code error;
    if (!std::filesystem::is_regular_file(file, error)) return std::nullopt;
    namespace pt = boost::property_tree;
    pt::ptree root;
    try {
        pt::read_json(file.string(), root);
    } catch (const pt::json_parser_error& bad) {
        std::fprintf(warnings, "poolkit-replay: warning: %s:%lu: %s; its quoted peer figures are left out\n", file.string().c_str(),
                     bad.line(), bad.message().c_str());
        return std::nullopt;
    }
    const auto peers = root.get_child_optional("peers");
    if (!peers) return std::nullopt;
    quoted_peers quoted;
    try {
        quoted.measured = peers->get<std::string>("measured", "");
        for (const auto& entry : *peers) {
            const std::string& name = entry.first;
            const pt::ptree& figures = entry.second;  // a variable, not a binding: lambdas capture it under clang < 16
            if (name == "measured") continue;
            const auto number = [&figures](const char* key) -> std::optional<double> {
                if (figures.count(key) == 0) return std::nullopt;
                return figures.get<double>(key);  // ptree_bad_data where it is not a number
            };
            peer_figure figure{name, number("ns_per_op"), number("ratio")};
            if (!figure.ns_per_op && !figure.ratio) throw pt::ptree_error("peer " + name + " has neither ns_per_op nor ratio");
            quoted.peers.push_back(std::move(figure));
        }
    } catch (const pt::ptree_error& bad) {
        std::fprintf(warnings, "poolkit-replay: warning: %s: \"peers\": %s; its quoted peer figures are left out\n", file.string().c_str(),
                     bad.what());
        return std::nullopt;
    }
    return quoted;
}

inline std::string mebibytes(std::size_t bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0));
    return text;
}

// "25,920": a whole number with its thousands apart.
inline std::string grouped(double value) {
    const std::string digits = std::to_string(static_cast<unsigned long long>(value + 0.5));
    std::string text;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) text.push_back(',');
        text.push_back(digits[i]);
    }
    return text;
}

// "PyTorch 2.909, 380 ns/op": a peer's ratio and ns/op, where it has them.
inline std::string peer_text(const peer_figure& p) {
    std::string text = p.name;
    if (p.ratio) {
        char ratio[32];
        std::snprintf(ratio, sizeof ratio, " %.3f", *p.ratio);
        text.append(ratio);
    }
    if (p.ns_per_op) text.append(p.ratio ? ", " : " ").append(grouped(*p.ns_per_op)).append(" ns/op");
    return text;
}

// "14858 / 0": the upstream's allocations in the cold and the warm pass, or "-" where unknown.
inline std::string upstream_allocs_text(const run_figures& f) {
    if (!f.upstream_allocs || !f.warm_upstream_allocs) return "-";
    return std::to_string(*f.upstream_allocs) + " / " + std::to_string(*f.warm_upstream_allocs);
}

// Physical allocations created and released in the warm pass per 1,000 of its events (what a GPU
// pays tens of microseconds each for), or "-" where the composition maps no virtual memory.
inline std::string physical_text(const run_figures& f, std::size_t events) {
    if (!f.warm_ops || events == 0) return "-";
    char text[32];
    std::snprintf(text, sizeof text, "%.2f",
                  static_cast<double>(f.warm_ops->creates + f.warm_ops->releases) * 1000.0 / static_cast<double>(events));
    return text;
}

// `quoted`: the peers quoted beside each trace, by trace name.
inline void print_table(std::FILE* out, const std::vector<outcome>& outcomes, const std::map<std::string, quoted_peers>& quoted,
                        std::string_view upstream) {
    std::fprintf(out, "%-20s %-28s %8s %9s %12s %15s %7s %15s %10s\n", "trace", "composition", "events", "ns/op", "peak live",
                 "peak reserved", "ratio", "upstream allocs", "physical");
    std::fprintf(out, "%-20s %-28s %8s %9s %12s %15s %7s %15s %10s\n", "", "", "", "", "MiB", "MiB", "", "cold / warm", "per 1k ev");
    std::string previous;
    for (const outcome& o : outcomes) {
        if (!previous.empty() && previous != o.trace) std::fprintf(out, "\n");
        previous = o.trace;
        if (!o.figures) {
            std::fprintf(out, "%-20s %-28s %8zu   failed: %s\n", o.trace.c_str(), o.composition.c_str(), o.events, o.error.c_str());
            continue;
        }
        const std::string allocs = upstream_allocs_text(*o.figures);
        const std::string physical = physical_text(*o.figures, o.events);
        std::fprintf(out, "%-20s %-28s %8zu %9.1f %12s %15s %7.3f %15s %10s\n", o.trace.c_str(), o.composition.c_str(), o.events,
                     o.figures->warm.ns_per_op(), mebibytes(o.peak_live_bytes).c_str(), mebibytes(o.figures->peak_reserved_bytes).c_str(),
                     o.ratio(), allocs.c_str(), physical.c_str());
    }
    bool mapped = false;
    for (const outcome& o : outcomes) {
        if (!o.figures || !o.figures->cold_ops || !o.figures->warm_ops) continue;
        if (!mapped) {
            std::fprintf(out,
                         "\nphysical memory operations of the compositions over virtual memory, cold / warm pass (physical: "
                         "creates and releases\nper 1,000 warm events; each costs a GPU tens of microseconds, docs/costs.md):\n");
            std::fprintf(out, "%-20s %-28s %15s %15s %15s %15s\n", "trace", "composition", "maps", "unmaps", "creates", "releases");
            mapped = true;
        }
        const physical_ops& cold = *o.figures->cold_ops;
        const physical_ops& warm = *o.figures->warm_ops;
        const auto pair = [](std::size_t a, std::size_t b) { return std::to_string(a) + " / " + std::to_string(b); };
        std::fprintf(out, "%-20s %-28s %15s %15s %15s %15s\n", o.trace.c_str(), o.composition.c_str(), pair(cold.maps, warm.maps).c_str(),
                     pair(cold.unmaps, warm.unmaps).c_str(), pair(cold.creates, warm.creates).c_str(),
                     pair(cold.releases, warm.releases).c_str());
    }
    bool counted = false;
    for (const outcome& o : outcomes) {
        if (!o.figures || !o.calls) continue;
        if (!counted) {
            std::fprintf(out, "\ndriver calls a GPU would have taken, per 1,000 events of every pass (simulated streams, --lag):\n");
            std::fprintf(out, "%-20s %-28s %9s %9s %9s %9s\n", "trace", "composition", "records", "queries", "waits", "syncs");
            counted = true;
        }
        const auto per_1000 = [&](std::uint64_t calls) {
            return static_cast<double>(calls) * 1000.0 / static_cast<double>(o.figures->passes * o.events);
        };
        std::fprintf(out, "%-20s %-28s %9.1f %9.1f %9.1f %9.1f\n", o.trace.c_str(), o.composition.c_str(), per_1000(o.calls->records),
                     per_1000(o.calls->queries), per_1000(o.calls->waits), per_1000(o.calls->synchronizations));
    }
    // Per trace: the lowest ratio, and the lowest among pools that call the upstream for at most
    // one event in a hundred of the cold pass (a ratio bought with constant cudaMalloc calls is no
    // pool on a GPU). Over virtual memory the calls that count are the physical allocations
    // created, which the driver charges as much as a cudaMalloc (not the map calls that make
    // them), and the warm pass must also create and release at most one per hundred events.
    const auto caching = [](const outcome& o) {
        const run_figures& f = *o.figures;
        if (f.cold_ops && f.warm_ops) {
            return f.cold_ops->creates * 100 <= o.events && (f.warm_ops->creates + f.warm_ops->releases) * 100 <= o.events;
        }
        return f.upstream_allocs && *f.upstream_allocs * 100 <= o.events;
    };
    std::map<std::string, const outcome*> best;
    std::map<std::string, const outcome*> best_caching;
    for (const outcome& o : outcomes) {
        if (!o.figures || o.composition == "upstream") continue;
        auto& slot = best[o.trace];
        if (slot == nullptr || o.ratio() < slot->ratio()) slot = &o;
        if (caching(o)) {
            auto& pool = best_caching[o.trace];
            if (pool == nullptr || o.ratio() < pool->ratio()) pool = &o;
        }
    }
    std::size_t passes = 2, cold_caches = 0;
    for (const outcome& o : outcomes) {
        if (!o.figures) continue;
        passes = o.figures->passes;
        cold_caches = o.figures->cold_caches;
    }
    std::string warm = passes == 2 ? "warm second pass" : "warm pass, the last of " + std::to_string(passes);
    if (cold_caches != 0) warm += ", " + std::to_string(cold_caches >> 10) + " KiB of other memory read between events";
    std::fprintf(out,
                 "\nbest per trace (upstream: %.*s; ratio = peak reserved / peak live over every pass; ns/op: %s):\n"
                 "  any:  the lowest ratio of every composition but `upstream`\n"
                 "  pool: the lowest ratio among those that called the upstream for at most one event in a hundred\n"
                 "        in the cold pass (over virtual memory: created a physical allocation, and created or released\n"
                 "        as few in the warm pass), where that is not the same composition (a ratio bought with a driver\n"
                 "        call per few events is no pool on a GPU)\n",
                 static_cast<int>(upstream.size()), upstream.data(), warm.c_str());
    const auto line = [&](const char* label, const std::string& trace_name, const outcome* o) {
        if (o == nullptr) return;
        const run_figures& f = *o->figures;
        // What the pick counted: physical allocations over virtual memory, else upstream calls.
        const std::string counted = f.cold_ops && f.warm_ops ? std::to_string(f.cold_ops->creates) + " / " +
                                                                   std::to_string(f.warm_ops->creates + f.warm_ops->releases) +
                                                                   " physical allocations (created cold / created and released warm)"
                                                             : upstream_allocs_text(f) + " upstream allocs (cold / warm)";
        std::fprintf(out, "  %-20s %-8s %-28s ratio %.3f  %.1f ns/op  %s\n", trace_name.c_str(), label, o->composition.c_str(), o->ratio(),
                     f.warm.ns_per_op(), counted.c_str());
    };
    for (const auto& [trace_name, o] : best) {
        line("any", trace_name, o);
        const auto pool = best_caching.find(trace_name);
        if (pool != best_caching.end() && pool->second != o) line("pool", trace_name, pool->second);
    }
    // Figures of other allocators measured elsewhere, labeled as such: only this run's rows are
    // measured side by side.
    std::string measured;
    for (const auto& [trace_name, o] : best) {
        const auto found = quoted.find(trace_name);
        if (found == quoted.end() || found->second.peers.empty()) continue;
        if (measured.empty()) {
            std::fprintf(
                out, "\nquoted, not measured in this run (peer ratio, ns/op, from the JSON beside each trace)%s:\n",
                upstream == "simulated" ? "; the rows above ran over simulated memory on this machine, so compare ratios, not ns/op" : "");
        }
        if (found->second.measured != measured) {
            measured = found->second.measured;
            std::fprintf(out, "  measured: %s\n", measured.c_str());
        }
        std::string peers;
        for (const peer_figure& p : found->second.peers) peers += (peers.empty() ? "" : "; ") + peer_text(p);
        std::fprintf(out, "  %-20s %s\n", trace_name.c_str(), peers.c_str());
    }
}

inline std::string json_string(std::string_view text) {
    std::string out = "\"";
    for (char c : text) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            char escaped[8];
            std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
            out += escaped;
        } else {
            out += c;
        }
    }
    return out + "\"";
}

inline void print_json(std::FILE* out, const outcome& o, std::string_view upstream) {
    std::fprintf(out, "{\"trace\":%s,\"composition\":%s,\"upstream\":%s,\"events\":%zu,\"peak_live_bytes\":%zu",
                 json_string(o.trace).c_str(), json_string(o.composition).c_str(), json_string(upstream).c_str(), o.events,
                 o.peak_live_bytes);
    if (o.figures) {
        std::fprintf(out,
                     ",\"ns_per_op\":%.2f,\"cold_ns_per_op\":%.2f,\"peak_reserved_bytes\":%zu,\"ratio\":%.4f,\"passes\":%zu,"
                     "\"upstream_allocs\":",
                     o.figures->warm.ns_per_op(), o.figures->cold.ns_per_op(), o.figures->peak_reserved_bytes, o.ratio(),
                     o.figures->passes);
        if (o.figures->upstream_allocs && o.figures->warm_upstream_allocs) {
            std::fprintf(out, "%zu,\"warm_upstream_allocs\":%zu", *o.figures->upstream_allocs, *o.figures->warm_upstream_allocs);
        } else {
            std::fprintf(out, "null,\"warm_upstream_allocs\":null");
        }
        if (o.figures->cold_ops && o.figures->warm_ops) {
            const physical_ops& c = *o.figures->cold_ops;
            const physical_ops& w = *o.figures->warm_ops;
            std::fprintf(out, ",\"physical_ops\":{\"maps\":[%zu,%zu],\"unmaps\":[%zu,%zu],\"creates\":[%zu,%zu],\"releases\":[%zu,%zu]}",
                         c.maps, w.maps, c.unmaps, w.unmaps, c.creates, w.creates, c.releases, w.releases);
        }
    } else {
        std::fprintf(out, ",\"error\":%s", json_string(o.error).c_str());
    }
    if (o.calls) {
        std::fprintf(out, ",\"event_calls\":{\"records\":%llu,\"queries\":%llu,\"waits\":%llu,\"synchronizations\":%llu}",
                     static_cast<unsigned long long>(o.calls->records), static_cast<unsigned long long>(o.calls->queries),
                     static_cast<unsigned long long>(o.calls->waits), static_cast<unsigned long long>(o.calls->synchronizations));
    }
    if (o.figures && o.figures->cold_caches != 0) std::fprintf(out, ",\"cold_caches_bytes\":%zu", o.figures->cold_caches);
    std::fprintf(out, "}\n");
}

// `text` as XML character data or an attribute value: & < > " ' escaped; control characters, which
// XML 1.0 does not allow, shown as '?'.
inline std::string xml_text(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            case '\'':
                out += "&apos;";
                break;
            default:
                out += static_cast<unsigned char>(c) < 0x20 && c != '\t' ? '?' : c;
        }
    }
    return out;
}

// One panel per trace: live bytes (black) and each composition's reserved bytes over the events.
inline void write_svg(std::ostream& out, const std::vector<outcome>& outcomes) {
    static constexpr const char* colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                              "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
    std::vector<std::string> traces;
    for (const outcome& o : outcomes) {
        if (std::find(traces.begin(), traces.end(), o.trace) == traces.end()) traces.push_back(o.trace);
    }
    constexpr int width = 960, panel = 320, left = 80, right = 240, top = 40, bottom = 40;
    const int height = static_cast<int>(traces.size()) * panel;
    out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
        << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    for (std::size_t p = 0; p < traces.size(); ++p) {
        const int y0 = static_cast<int>(p) * panel;
        const int plot_w = width - left - right, plot_h = panel - top - bottom;
        std::size_t max_bytes = 1, max_event = 1;
        for (const outcome& o : outcomes) {
            if (o.trace != traces[p] || !o.figures) continue;
            for (const sample& s : o.figures->samples) {
                max_bytes = std::max({max_bytes, s.reserved_bytes, s.live_bytes});
                max_event = std::max(max_event, s.event);
            }
        }
        const auto x = [&](std::size_t event) { return left + static_cast<double>(event) * plot_w / static_cast<double>(max_event); };
        const auto y = [&](std::size_t bytes) {
            return y0 + top + plot_h - static_cast<double>(bytes) * plot_h / static_cast<double>(max_bytes);
        };
        out << "<text x=\"" << left << "\" y=\"" << y0 + 24 << "\" font-size=\"15\">" << xml_text(traces[p])
            << ": live and reserved bytes over the trace</text>\n";
        out << "<rect x=\"" << left << "\" y=\"" << y0 + top << "\" width=\"" << plot_w << "\" height=\"" << plot_h
            << "\" fill=\"none\" stroke=\"#ccc\"/>\n";
        for (int tick = 0; tick <= 4; ++tick) {
            const std::size_t bytes = max_bytes / 4 * static_cast<std::size_t>(tick);
            out << "<text x=\"" << left - 6 << "\" y=\"" << y(bytes) + 4 << "\" text-anchor=\"end\">" << mebibytes(bytes)
                << " MiB</text>\n";
        }
        out << "<text x=\"" << left + plot_w << "\" y=\"" << y0 + panel - 12 << "\" text-anchor=\"end\">event " << max_event << "</text>\n";
        int legend = 0;
        const auto polyline = [&](const std::vector<sample>& samples, bool live, const char* colour, const std::string& label) {
            out << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"" << (live ? 2 : 1.2) << "\" points=\"";
            for (const sample& s : samples) out << x(s.event) << ',' << y(live ? s.live_bytes : s.reserved_bytes) << ' ';
            out << "\"/>\n";
            const int ly = y0 + top + 14 * legend++;
            out << "<line x1=\"" << width - right + 12 << "\" y1=\"" << ly << "\" x2=\"" << width - right + 32 << "\" y2=\"" << ly
                << "\" stroke=\"" << colour << "\" stroke-width=\"2\"/><text x=\"" << width - right + 36 << "\" y=\"" << ly + 4 << "\">"
                << xml_text(label) << "</text>\n";
        };
        bool live_drawn = false;
        std::size_t colour = 0;
        for (const outcome& o : outcomes) {
            if (o.trace != traces[p] || !o.figures || o.figures->samples.empty()) continue;
            if (!live_drawn) {
                polyline(o.figures->samples, true, "#000", "live");
                live_drawn = true;
            }
            char ratio[32];
            std::snprintf(ratio, sizeof ratio, " (%.3f)", o.ratio());
            polyline(o.figures->samples, false, colours[colour++ % std::size(colours)], o.composition + ratio);
        }
    }
    out << "</svg>\n";
}

}  // namespace poolkit::replay_tool
