// What poolkit-replay prints: the table, JSON lines, the SVG chart, and the peers' figures read
// from the traces' README.
#pragma once

#include "compositions.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
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

    [[nodiscard]] double ratio() const {
        return figures && peak_live_bytes != 0
                   ? static_cast<double>(figures->peak_reserved_bytes) / static_cast<double>(peak_live_bytes)
                   : 0.0;
    }
};

// What the peers reached on a trace, as bench/traces/README.md reports it.
struct peer_figures {
    std::optional<double> pytorch_ratio, pytorch_ns, async_ratio, async_ns, expandable_ratio;
};

// Reads the README's table rows: "| name | ns | ns, ratio | ns, ratio | ns, ratio | ratio |".
inline std::map<std::string, peer_figures> read_peer_figures(const std::string& readme_path) {
    std::map<std::string, peer_figures> peers;
    std::ifstream in(readme_path);
    std::string line;
    const auto numbers = [](std::string cell) {
        cell.erase(std::remove(cell.begin(), cell.end(), ','), cell.end());  // 1,399 1.146 -> tokens below
        std::vector<double> values;
        std::istringstream tokens(cell);
        for (std::string token; tokens >> token;) {
            try {
                values.push_back(std::stod(token));
            } catch (...) {
                return std::vector<double>{};
            }
        }
        return values;
    };
    while (std::getline(in, line)) {
        if (line.size() < 2 || line[0] != '|') continue;
        std::vector<std::string> cells;
        std::string cell;
        for (char c : line.substr(1)) {
            if (c == '|') {
                cells.push_back(cell);
                cell.clear();
            } else {
                cell += c;
            }
        }
        if (cells.size() < 6) continue;
        // "1,399, 1.146": the thousands comma and the separating ", " differ only by the space.
        const auto pair = [&](const std::string& text) -> std::vector<double> {
            const auto split = text.find(", ");
            if (split == std::string::npos) return {};
            auto first = numbers(text.substr(0, split));
            auto second = numbers(text.substr(split + 2));
            if (first.size() != 1 || second.size() != 1) return {};
            return {first[0], second[0]};
        };
        std::string name = cells[0];
        name.erase(0, name.find_first_not_of(' '));
        name.erase(name.find_last_not_of(' ') + 1);
        const auto async = pair(cells[2]);
        const auto pytorch = pair(cells[3]);
        const auto expandable = pair(cells[4]);
        if (async.empty() || pytorch.empty()) continue;
        peer_figures figures;
        figures.async_ns = async[0];
        figures.async_ratio = async[1];
        figures.pytorch_ns = pytorch[0];
        figures.pytorch_ratio = pytorch[1];
        if (!expandable.empty()) figures.expandable_ratio = expandable[1];
        peers[name] = figures;
    }
    return peers;
}

inline std::string mebibytes(std::size_t bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0));
    return text;
}

inline void print_table(std::FILE* out, const std::vector<outcome>& outcomes, const std::map<std::string, peer_figures>& peers,
                        std::string_view upstream) {
    std::fprintf(out, "%-20s %-22s %8s %9s %12s %15s %7s %10s   %s\n", "trace", "composition", "events", "ns/op",
                 "peak live", "peak reserved", "ratio", "upstream", "peers (ratio, ns/op)");
    std::fprintf(out, "%-20s %-22s %8s %9s %12s %15s %7s %10s\n", "", "", "", "", "MiB", "MiB", "", "allocs");
    std::string previous;
    for (const outcome& o : outcomes) {
        if (!previous.empty() && previous != o.trace) std::fprintf(out, "\n");
        const bool first = previous != o.trace;
        previous = o.trace;
        if (!o.figures) {
            std::fprintf(out, "%-20s %-22s %8zu   failed: %s\n", o.trace.c_str(), o.composition.c_str(), o.events, o.error.c_str());
            continue;
        }
        std::string allocs = o.figures->upstream_allocs ? std::to_string(*o.figures->upstream_allocs) : "-";
        std::string peer_text;
        if (first) {
            if (const auto found = peers.find(o.trace); found != peers.end()) {
                char text[160];
                const peer_figures& p = found->second;
                std::snprintf(text, sizeof text, "PyTorch %.3f, %.0f; cudaMallocAsync %.3f, %.0f", p.pytorch_ratio.value_or(0),
                              p.pytorch_ns.value_or(0), p.async_ratio.value_or(0), p.async_ns.value_or(0));
                peer_text = text;
            }
        }
        std::fprintf(out, "%-20s %-22s %8zu %9.1f %12s %15s %7.3f %10s   %s\n", o.trace.c_str(), o.composition.c_str(), o.events,
                     o.figures->warm.ns_per_op(), mebibytes(o.peak_live_bytes).c_str(),
                     mebibytes(o.figures->peak_reserved_bytes).c_str(), o.ratio(), allocs.c_str(), peer_text.c_str());
    }
    // Per trace: the lowest ratio, and the lowest among pools that call the upstream for at most
    // one event in a hundred (a ratio bought with constant cudaMalloc calls is no pool on a GPU).
    const auto caching = [](const outcome& o) {
        return o.figures->upstream_allocs && *o.figures->upstream_allocs * 100 <= o.events;
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
    std::fprintf(out, "\nbest per trace (upstream: %.*s; ratio = peak reserved / peak live; ns/op: warm second pass):\n",
                 static_cast<int>(upstream.size()), upstream.data());
    const auto line = [&](const char* label, const std::string& trace_name, const outcome* o) {
        if (o == nullptr) return;
        std::string peer_text;
        if (const auto found = peers.find(trace_name); found != peers.end()) {
            char text[96];
            std::snprintf(text, sizeof text, "  (PyTorch %.3f, cudaMallocAsync %.3f)", found->second.pytorch_ratio.value_or(0),
                          found->second.async_ratio.value_or(0));
            peer_text = text;
        }
        const std::string allocs = o->figures->upstream_allocs ? std::to_string(*o->figures->upstream_allocs) : "-";
        std::fprintf(out, "  %-20s %-8s %-22s ratio %.3f  %.1f ns/op  %s upstream allocs%s\n", trace_name.c_str(), label,
                     o->composition.c_str(), o->ratio(), o->figures->warm.ns_per_op(), allocs.c_str(), peer_text.c_str());
    };
    for (const auto& [trace_name, o] : best) {
        line("any", trace_name, o);
        const auto pool = best_caching.find(trace_name);
        if (pool != best_caching.end() && pool->second != o) line("pool", trace_name, pool->second);
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
        std::fprintf(out, ",\"ns_per_op\":%.2f,\"cold_ns_per_op\":%.2f,\"peak_reserved_bytes\":%zu,\"ratio\":%.4f,\"upstream_allocs\":",
                     o.figures->warm.ns_per_op(), o.figures->cold.ns_per_op(), o.figures->peak_reserved_bytes, o.ratio());
        if (o.figures->upstream_allocs) {
            std::fprintf(out, "%zu", *o.figures->upstream_allocs);
        } else {
            std::fprintf(out, "null");
        }
    } else {
        std::fprintf(out, ",\"error\":%s", json_string(o.error).c_str());
    }
    std::fprintf(out, "}\n");
}

// `text` as XML character data or an attribute value: & < > " ' escaped; control characters, which
// XML 1.0 does not allow, shown as '?'.
inline std::string xml_text(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&apos;"; break;
            default: out += static_cast<unsigned char>(c) < 0x20 && c != '\t' ? '?' : c;
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
        out << "<text x=\"" << left + plot_w << "\" y=\"" << y0 + panel - 12 << "\" text-anchor=\"end\">event " << max_event
            << "</text>\n";
        int legend = 0;
        const auto polyline = [&](const std::vector<sample>& samples, bool live, const char* colour, const std::string& label) {
            out << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"" << (live ? 2 : 1.2) << "\" points=\"";
            for (const sample& s : samples) out << x(s.event) << ',' << y(live ? s.live_bytes : s.reserved_bytes) << ' ';
            out << "\"/>\n";
            const int ly = y0 + top + 14 * legend++;
            out << "<line x1=\"" << width - right + 12 << "\" y1=\"" << ly << "\" x2=\"" << width - right + 32 << "\" y2=\"" << ly
                << "\" stroke=\"" << colour << "\" stroke-width=\"2\"/><text x=\"" << width - right + 36 << "\" y=\"" << ly + 4
                << "\">" << xml_text(label) << "</text>\n";
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
