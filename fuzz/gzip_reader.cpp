// Fuzzes poolkit-replay's file reading: bytes, plain or gzip, through trace_decoder and the
// trace_reader behind it. Either a trace comes out or a trace_error whose what() is
// "name:line: message"; nothing else may happen. The first byte picks how the rest is presented:
//   bit 0  gzip it first (so that the CSV behind the inflater is reached), with
//   bit 1  a second gzip member after the first, or
//   bit 2  the stream cut short by the second byte's count, or
//   bit 3  a byte after the stream, which must be refused;
// the second byte picks a piece size. The same bytes fed whole and in pieces must give the same
// result; a gzip of text that nothing else touched must give what parse_trace gives for the text.
// Fuzzers build with NDEBUG; their checks must stay on.
#define POOLKIT_ENABLE_ASSERTS 1

#include "../tools/replay/input.hpp"

#include <poolkit/observe/trace.hpp>

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

namespace {

// `text` as one gzip member, quickly: small window, little memory.
std::string gzip(std::string_view text) {
    z_stream stream{};
    if (deflateInit2(&stream, 1, Z_DEFLATED, 16 + 9, 1, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();
    std::string out(deflateBound(&stream, static_cast<uLong>(text.size())) + 32, '\0');
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
    stream.avail_in = static_cast<uInt>(text.size());
    stream.next_out = reinterpret_cast<Bytef*>(out.data());
    stream.avail_out = static_cast<uInt>(out.size());
    if (deflate(&stream, Z_FINISH) != Z_STREAM_END) std::abort();
    out.resize(stream.total_out);
    deflateEnd(&stream);
    return out;
}

// What decoding `bytes` in pieces of `piece` bytes gives, as text to compare: a summary of the
// trace, or the error.
std::string decode(std::string_view bytes, std::size_t piece) {
    try {
        auto decoder = std::make_unique<poolkit::replay_tool::trace_decoder>("fuzz");
        for (std::size_t at = 0; at < bytes.size(); at += piece) decoder->feed(bytes.substr(at, piece));
        const poolkit::trace t = std::move(*decoder).finish();
        if (t.events.empty()) std::abort();  // a trace without events is an error
        for (const auto& e : t.events) {
            if (e.slot >= t.slots || e.stream >= t.streams.size()) std::abort();
        }
        return "events " + std::to_string(t.events.size()) + " peak " + std::to_string(t.peak_live_bytes) + " slots " +
               std::to_string(t.slots);
    } catch (const poolkit::trace_error& error) {
        if (std::string_view(error.what()).substr(0, 5) != "fuzz:") std::abort();
        return error.what();
    }
}

std::string parse(std::string_view text) {
    try {
        const poolkit::trace t = poolkit::parse_trace(text, "fuzz");
        return "events " + std::to_string(t.events.size()) + " peak " + std::to_string(t.peak_live_bytes) + " slots " +
               std::to_string(t.slots);
    } catch (const poolkit::trace_error& error) {
        return error.what();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 2) return 0;
    const unsigned mode = data[0];
    const std::size_t piece = 1 + data[1] % 64;
    const std::string_view payload(reinterpret_cast<const char*>(data + 2), size - 2);
    std::string bytes(payload);
    bool untouched_gzip = false;
    if (mode & 1) {
        bytes = gzip(payload);
        untouched_gzip = true;
        if (mode & 2) {
            bytes += gzip("");  // an empty second member adds nothing
        } else if ((mode & 4) && !bytes.empty()) {
            bytes.resize(bytes.size() - 1 - data[1] % bytes.size());
            untouched_gzip = false;
        } else if (mode & 8) {
            bytes += static_cast<char>(data[1]);
            untouched_gzip = false;
        }
    }
    const std::string whole = decode(bytes, bytes.size() + 1);
    if (decode(bytes, piece) != whole) std::abort();
    if (untouched_gzip && whole != parse(payload)) std::abort();
    // A valid trace, cut short or followed by a byte, is refused for that.
    if ((mode & 1) && !(mode & 2) && (mode & 12) && parse(payload).rfind("events ", 0) == 0) {
        const char* expected = (mode & 4) ? "" : "bytes after the end of the gzip stream";
        if (whole.rfind("events ", 0) == 0 || whole.find(expected) == std::string::npos) std::abort();
    }
    return 0;
}
