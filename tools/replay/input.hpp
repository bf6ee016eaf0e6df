// Reading a trace file, plain or gzip, into a checked poolkit::trace.
//
// A file that starts with gzip's magic bytes (1f 8b) is inflated, member after member as gzip
// writes them; any other file is read as text. Every failure is a poolkit::trace_error whose what()
// reads "file:line: message": a file that cannot be read or is a directory (line 0), a gzip stream
// that is corrupt, cut short or followed by bytes that are no gzip member (the line reached), and
// every malformed row the trace_reader finds (its line).
#pragma once

#include <poolkit/observe/trace.hpp>

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

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

// Turns the bytes of a trace file, taken in pieces of any size, into a trace: gzip is inflated,
// text goes to a trace_reader. feed() for each piece in order, then finish(). Not copyable.
class trace_decoder {
public:
    explicit trace_decoder(std::string file_name) : reader_(std::move(file_name)) {}
    trace_decoder(const trace_decoder&) = delete;
    trace_decoder& operator=(const trace_decoder&) = delete;
    ~trace_decoder() {
        if (inflating_) inflateEnd(&stream_);
    }

    void feed(std::string_view bytes) {
        while (!bytes.empty()) {
            switch (state_) {
                case state::detecting:
                case state::between_members: {
                    // Two bytes tell gzip (1f 8b) from text; after a member, only a member may follow.
                    const std::size_t taken = std::min(bytes.size(), 2 - magic_.size());
                    magic_.append(bytes.substr(0, taken));
                    bytes.remove_prefix(taken);
                    if (magic_.size() < 2) return;
                    if (magic_ == "\x1f\x8b") {
                        start_member();
                        inflate_bytes(magic_);
                    } else if (state_ == state::detecting) {
                        state_ = state::text;
                        reader_.read(magic_);
                    } else {
                        trailing_bytes();
                    }
                    magic_.clear();
                    break;
                }
                case state::text:
                    reader_.read(bytes);
                    return;
                case state::member: {
                    // zlib counts input in 32 bits: at most 1 GiB at a time.
                    const std::string_view slice = bytes.substr(0, std::size_t{1} << 30);
                    const std::string_view after_member = inflate_bytes(slice);
                    bytes.remove_prefix(slice.size() - after_member.size());
                    break;
                }
            }
        }
    }

    // The trace, once every byte was fed. Throws trace_error when the gzip stream ends early, when
    // bytes follow it, or when the text is no trace.
    [[nodiscard]] trace finish() && {
        if (state_ == state::detecting) reader_.read(magic_);  // a text file of one byte
        if (state_ == state::member) fail_gzip("truncated gzip stream: the file ends inside the compressed data");
        if (state_ == state::between_members && !magic_.empty()) trailing_bytes();
        return std::move(reader_).finish();
    }

    [[nodiscard]] const std::string& file_name() const noexcept { return reader_.file_name(); }

private:
    enum class state : unsigned char { detecting, text, member, between_members };

    void start_member() {
        if (!inflating_) {
            stream_ = {};
            if (inflateInit2(&stream_, 16 + MAX_WBITS) != Z_OK) throw std::bad_alloc();  // 16: gzip only
            inflating_ = true;
        } else {
            inflateReset(&stream_);
        }
        state_ = state::member;
    }

    // Inflates `bytes` into the reader; returns what follows the end of the member, if it ends.
    std::string_view inflate_bytes(std::string_view bytes) {
        stream_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
        stream_.avail_in = static_cast<uInt>(bytes.size());
        for (;;) {
            stream_.next_out = reinterpret_cast<Bytef*>(text_);
            stream_.avail_out = sizeof text_;
            const int result = inflate(&stream_, Z_NO_FLUSH);
            if (result == Z_MEM_ERROR) throw std::bad_alloc();
            if (result == Z_DATA_ERROR || result == Z_NEED_DICT || result == Z_STREAM_ERROR) {
                fail_gzip(std::string("corrupt gzip data (") + (stream_.msg != nullptr ? stream_.msg : "zlib error") + ")");
            }
            reader_.read(std::string_view(text_, sizeof text_ - stream_.avail_out));
            if (result == Z_STREAM_END) {
                state_ = state::between_members;
                return bytes.substr(bytes.size() - stream_.avail_in);
            }
            // Z_BUF_ERROR: no progress is possible without more input.
            if (result == Z_BUF_ERROR || (stream_.avail_in == 0 && stream_.avail_out != 0)) return {};
        }
    }

    [[noreturn]] void trailing_bytes() const { fail_gzip("bytes after the end of the gzip stream (gzip -t rejects this file too)"); }

    [[noreturn]] void fail_gzip(const std::string& message) const {
        throw trace_error(reader_.file_name(), reader_.lines_read() + 1, message);
    }

    trace_reader reader_;
    state state_ = state::detecting;
    std::string magic_;  // detecting, between_members: the first bytes, until there are two
    z_stream stream_{};
    bool inflating_ = false;  // stream_ is initialised and needs inflateEnd
    char text_[1 << 16];
};

// Reads a whole trace held in `bytes` (plain or gzip), named `file_name` in errors.
[[nodiscard]] inline trace decode_trace(std::string_view bytes, std::string file_name) {
    auto decoder = std::make_unique<trace_decoder>(std::move(file_name));
    decoder->feed(bytes);
    return std::move(*decoder).finish();
}

// Reads `path`, plain or gzip; its trace is named by trace_name(path).
inline trace read_trace_file(const std::string& path) {
    std::error_code error;
    if (std::filesystem::is_directory(path, error)) throw trace_error(path, 0, "is a directory, not a trace file");
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
    if (file == nullptr) throw trace_error(path, 0, std::string("cannot open: ") + std::strerror(errno));
    auto decoder = std::make_unique<trace_decoder>(path);
    auto buffer = std::make_unique<char[]>(std::size_t{1} << 17);
    for (;;) {
        const std::size_t got = std::fread(buffer.get(), 1, std::size_t{1} << 17, file.get());
        if (got > 0) decoder->feed(std::string_view(buffer.get(), got));
        if (got < (std::size_t{1} << 17)) {
            if (std::ferror(file.get())) throw trace_error(path, 0, std::string("cannot read: ") + std::strerror(errno));
            break;
        }
    }
    trace result = std::move(*decoder).finish();
    result.name = trace_name(path);
    return result;
}

// The trace spread over `count` streams, for the shape of a multi-stream program: event i (an
// allocation or a free) is issued on stream i mod count, so most frees name another stream than
// their allocation did (88% of the bundled traces' frees over 4 streams: a block is often freed a
// few events after its allocation), and each stream's blocks are freed on all of them. The
// streams are new ones (handles 0x1000, 0x2000, ...: never the default or special handles); the
// name says how many.
inline trace spread_over_streams(trace t, std::size_t count) {
    if (count == 0) throw std::invalid_argument("spread_over_streams: count must be at least 1");
    t.streams.clear();
    for (std::size_t i = 0; i < count; ++i) t.streams.push_back((i + 1) << 12);
    for (std::size_t i = 0; i < t.events.size(); ++i) t.events[i].stream = static_cast<std::uint32_t>(i % count);
    t.name += "@" + std::to_string(count) + "streams";
    return t;
}

}  // namespace poolkit::replay_tool
