// Reading a trace file, plain or gzip (zlib reads both), into a checked poolkit::trace.
//
// Every failure is a poolkit::trace_error whose what() reads "file:line: message": a file that
// cannot be opened (line 0), a gzip stream that is cut short or corrupt (the line reached), and
// every malformed row the trace_reader finds.
#pragma once

#include <poolkit/observe/trace.hpp>

#include <zlib.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>

namespace poolkit::replay_tool {

// The base name of `path` without .csv / .csv.gz / .gz, for tables.
inline std::string trace_name(std::string_view path) {
    if (const auto slash = path.rfind('/'); slash != std::string_view::npos) path.remove_prefix(slash + 1);
    for (std::string_view suffix : {".gz", ".csv"}) {
        if (path.size() > suffix.size() && path.substr(path.size() - suffix.size()) == suffix) {
            path.remove_suffix(suffix.size());
        }
    }
    return std::string(path);
}

// Reads `path` line by line through zlib; lines may be of any length.
inline trace read_trace_file(const std::string& path) {
    gzFile file = gzopen(path.c_str(), "rb");
    if (file == nullptr) {
        throw trace_error(path, 0, std::string("cannot open: ") + std::strerror(errno));
    }
    struct closer {
        gzFile& file;
        ~closer() {
            if (file != nullptr) gzclose(file);
        }
    } close_on_exit{file};
    gzbuffer(file, 1 << 17);
    trace_reader reader(path);
    std::string pending;
    char buffer[1 << 16];
    for (;;) {
        const int got = gzread(file, buffer, sizeof buffer);
        if (got < 0) {
            int code = 0;
            const char* message = gzerror(file, &code);
            throw trace_error(path, reader.lines_read() + 1, std::string("corrupt gzip data (") + (message ? message : "unknown zlib error") + ")");
        }
        if (got == 0) {
            int code = 0;
            const char* message = gzerror(file, &code);
            if (code != Z_OK && code != Z_STREAM_END) {
                throw trace_error(path, reader.lines_read() + 1, std::string("truncated or corrupt gzip stream (") + (message ? message : "zlib error") + ")");
            }
            break;
        }
        std::string_view chunk(buffer, static_cast<std::size_t>(got));
        if (chunk.find('\0') != std::string_view::npos) reader.fail("binary data (a NUL byte) in a text trace");
        while (!chunk.empty()) {
            const auto newline = chunk.find('\n');
            if (newline == std::string_view::npos) {
                pending.append(chunk);
                if (pending.size() > (std::size_t{1} << 20)) reader.fail("a line longer than 1 MiB");
                break;
            }
            if (pending.empty()) {
                reader.read_line(chunk.substr(0, newline));
            } else {
                pending.append(chunk.substr(0, newline));
                reader.read_line(pending);
                pending.clear();
            }
            chunk.remove_prefix(newline + 1);
        }
    }
    if (!pending.empty()) reader.read_line(pending);
    trace result = std::move(reader).finish();
    result.name = trace_name(path);
    return result;
}

}  // namespace poolkit::replay_tool
