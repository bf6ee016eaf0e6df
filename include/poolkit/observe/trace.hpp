// Allocation traces in RMM's CSV log format: reading and checking (writing: core/trace_format.hpp,
// included here).
//
// The format is that of RMM's logging_resource_adaptor and of poolkit's logged<>:
//     Thread,Time,Action,Pointer,Size,Stream
//     0,00:00:00.000163,allocate,0x1,3145728,0
// Columns are found by name in the header, in any order; Action, Pointer and Size are required,
// Thread, Time and Stream default to 0. Action is `allocate` or `free` (`deallocate` too, as RMM's
// docs show it; RMM's `allocate failure` rows, whose pointer is `(nil)`, are read and skipped).
// Pointer is hex (with or without 0x), Size decimal bytes, Time `HH:MM:SS.micro` (what RMM's
// adaptor writes) or plain seconds (since the epoch, as RMM's docs show), Stream an integer
// (decimal, or hex with 0x; RMM writes the default stream as 0).
//
// trace_reader takes the file's bytes in pieces of any size, splits them into lines (a line ends at
// LF, CRLF or a lone CR, so Unix, Windows and old Mac files read alike) and checks the rows as a
// sequence: a pointer is allocated only while it is not live, freed only while it is, with the
// size it was allocated with. A trace needs a header and at least one event. Every error is a
// trace_error whose what() reads "file:line: message", with the line the fault is on: a NUL byte,
// a line longer than 1 MiB, a number that does not fit in 64 bits, live bytes past 2^64. Nothing
// here allocates per event but the event vector; a trace of 35,000 events reads in a few
// milliseconds.
#pragma once

#include <poolkit/core/trace_format.hpp>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

namespace poolkit {

// One row of a trace. `slot` numbers the allocation densely (0, 1, ... in order of allocation,
// reused after a free), so that a replay indexes an array instead of hashing pointers.
struct trace_event {
    trace_action action = trace_action::allocate;
    std::uint32_t slot = 0;
    std::uint32_t stream = 0;  // index into trace::streams
    std::size_t bytes = 0;
    std::uint64_t time_us = 0;  // since the first event
    std::uint64_t pointer = 0;  // the identifier the file used
    std::uint64_t thread = 0;
};

// A checked trace, ready to replay.
struct trace {
    std::string name;
    std::vector<trace_event> events;
    std::vector<std::uint64_t> streams;  // stream handles as the file wrote them, in order of appearance
    std::size_t slots = 0;  // most allocations live at once
    std::size_t allocations = 0;
    std::size_t peak_live_bytes = 0;  // the most bytes live at once, by the sizes in the file
    std::size_t unfreed_allocations = 0;  // live at the end
    std::size_t unfreed_bytes = 0;
};

// A malformed trace: what() is "file:line: message".
class trace_error : public std::runtime_error {
public:
    trace_error(const std::string& file, std::size_t line, const std::string& message)
        : std::runtime_error(file + ":" + std::to_string(line) + ": " + message), line_(line), message_(message) {}
    [[nodiscard]] std::size_t line() const noexcept { return line_; }
    [[nodiscard]] const std::string& message() const noexcept { return message_; }

private:
    std::size_t line_;
    std::string message_;
};

namespace detail::trace_text {

inline std::string_view trim(std::string_view text) noexcept {
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) text.remove_suffix(1);
    return text;
}

// How reading a number went: `too_large` is well formed but past 2^64 - 1.
enum class number_read : unsigned char { ok, malformed, too_large };

inline number_read parse_unsigned(std::string_view text, std::uint64_t& value, int base = 10) noexcept {
    if (text.empty()) return number_read::malformed;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
    if (end != text.data() + text.size()) return number_read::malformed;
    if (error == std::errc::result_out_of_range) return number_read::too_large;
    return error == std::errc{} ? number_read::ok : number_read::malformed;
}

// Hex with an optional 0x, as RMM prints pointers.
inline number_read parse_pointer(std::string_view text, std::uint64_t& value) noexcept {
    if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) text.remove_prefix(2);
    return parse_unsigned(text, value, 16);
}

// Decimal, or hex with 0x.
inline number_read parse_integer(std::string_view text, std::uint64_t& value) noexcept {
    if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
        return parse_unsigned(text.substr(2), value, 16);
    }
    return parse_unsigned(text, value, 10);
}

// value = value * factor + addend, or false (value unchanged) when that passes 2^64 - 1.
inline bool multiply_add(std::uint64_t& value, std::uint64_t factor, std::uint64_t addend) noexcept {
    if (value > (UINT64_MAX - addend) / factor) return false;
    value = value * factor + addend;
    return true;
}

// HH:MM:SS.micro (RMM), or plain seconds with an optional fraction (at most 9 digits).
inline number_read parse_time(std::string_view text, std::uint64_t& microseconds) noexcept {
    std::uint64_t whole_seconds = 0;
    std::string_view clock = text;
    const auto dot = text.find('.');
    std::string_view fraction;
    if (dot != std::string_view::npos) {
        clock = text.substr(0, dot);
        fraction = text.substr(dot + 1);
        if (fraction.empty() || fraction.size() > 9) return number_read::malformed;
    }
    bool too_large = false;
    for (int fields = 0;; ++fields) {
        const auto colon = clock.find(':');
        if (fields == 2 && colon != std::string_view::npos) return number_read::malformed;
        std::uint64_t part = 0;
        const number_read read = parse_unsigned(clock.substr(0, colon), part);
        if (read == number_read::malformed) return read;
        too_large = too_large || read == number_read::too_large || !multiply_add(whole_seconds, 60, part);
        if (colon == std::string_view::npos) break;
        clock.remove_prefix(colon + 1);
    }
    std::uint64_t micro = 0;
    if (!fraction.empty()) {
        if (parse_unsigned(fraction, micro) != number_read::ok) return number_read::malformed;
        for (std::size_t i = fraction.size(); i < 6; ++i) micro *= 10;
        for (std::size_t i = 6; i < fraction.size(); ++i) micro /= 10;
    }
    if (too_large || !multiply_add(whole_seconds, 1'000'000, micro)) return number_read::too_large;
    microseconds = whole_seconds;
    return number_read::ok;
}

inline std::string quoted(std::string_view text) {
    constexpr std::size_t shown = 40;
    std::string result = "'";
    for (char c : text.substr(0, shown)) result += (c >= 0x20 && c < 0x7f) ? c : '?';
    if (text.size() > shown) result += "...";
    return result + "'";
}

}  // namespace detail::trace_text

// Reads a trace: read() for the file's bytes in order, in pieces of any size, or read_line() for
// each line (the first is the header); then finish(). Throws trace_error on the first malformed
// line. A reader takes either bytes or lines, not both.
class trace_reader {
public:
    // The longest line read; a longer one is an error (a binary file, or a file without line breaks).
    static constexpr std::size_t max_line_bytes = std::size_t{1} << 20;

    explicit trace_reader(std::string file_name) { trace_.name = std::move(file_name); }

    // Takes the next `bytes` of the file. A line ends at LF, CRLF or a lone CR; a CRLF split
    // between two calls is one line break. Complexity: linear in bytes.
    void read(std::string_view bytes) {
        if (bytes.empty()) return;
        if (after_carriage_return_ && bytes.front() == '\n') bytes.remove_prefix(1);
        after_carriage_return_ = false;
        while (!bytes.empty()) {
            std::size_t end = 0;
            while (end < bytes.size() && bytes[end] != '\n' && bytes[end] != '\r') ++end;
            const std::string_view piece = bytes.substr(0, end);
            if (end == bytes.size()) {  // the line goes on in the next call
                take_partial_line(piece);
                return;
            }
            if (pending_.empty()) {
                read_line(piece);
            } else {
                take_partial_line(piece);
                read_line(pending_);
                pending_.clear();
            }
            const bool crlf = bytes[end] == '\r' && end + 1 < bytes.size() && bytes[end + 1] == '\n';
            if (bytes[end] == '\r' && end + 1 == bytes.size()) after_carriage_return_ = true;
            bytes.remove_prefix(end + (crlf ? 2 : 1));
        }
    }

    // Requires: lines in file order, without their line break (a trailing '\r' is ignored).
    void read_line(std::string_view line) {
        ++line_;
        if (line.size() > max_line_bytes) fail("a line longer than 1 MiB (" + std::to_string(line.size()) + " bytes)");
        if (line.find('\0') != std::string_view::npos) fail("binary data (a NUL byte) in a text trace");
        line = detail::trace_text::trim(line);
        if (line_ == 1 && line.size() >= 3 && static_cast<unsigned char>(line[0]) == 0xEF && static_cast<unsigned char>(line[1]) == 0xBB &&
            static_cast<unsigned char>(line[2]) == 0xBF) {
            line.remove_prefix(3);  // a UTF-8 byte order mark
        }
        if (!header_seen_) {
            read_header(line);
            return;
        }
        if (line.empty()) return;
        read_row(line);
    }

    // Ends the trace (reading a last line that has no line break) and returns it. Throws
    // trace_error when there was no header or no event: a trace that replays nothing is an error.
    [[nodiscard]] trace finish() && {
        if (!pending_.empty()) {
            read_line(pending_);
            pending_.clear();
        }
        if (!header_seen_) fail("empty trace: no header line (expected Thread,Time,Action,Pointer,Size,Stream)");
        if (trace_.events.empty()) fail("no events: the trace has a header but no allocate or free rows");
        trace_.slots = slot_count_;
        trace_.unfreed_allocations = live_.size();
        trace_.unfreed_bytes = live_bytes_;
        return std::move(trace_);
    }

    [[nodiscard]] std::size_t lines_read() const noexcept { return line_; }
    [[nodiscard]] const std::string& file_name() const noexcept { return trace_.name; }

    [[noreturn]] void fail(const std::string& message) const { throw trace_error(trace_.name, line_, message); }

private:
    // A piece of a line whose end is still to come: checked as it arrives, so that a NUL byte or an
    // over-long line is reported on its own line before the rest is read.
    void take_partial_line(std::string_view piece) {
        const auto fail_here = [&](const std::string& message) { throw trace_error(trace_.name, line_ + 1, message); };
        if (pending_.size() + piece.size() > max_line_bytes) fail_here("a line longer than 1 MiB");
        if (piece.find('\0') != std::string_view::npos) fail_here("binary data (a NUL byte) in a text trace");
        pending_.append(piece);
    }

    enum column : unsigned char { thread, time, action, pointer, size, stream, column_count };
    static constexpr const char* column_names[column_count] = {"Thread", "Time", "Action", "Pointer", "Size", "Stream"};
    static constexpr std::size_t absent = static_cast<std::size_t>(-1);

    struct live_allocation {
        std::size_t bytes;
        std::uint32_t slot;
    };

    void read_header(std::string_view line) {
        header_seen_ = true;
        std::fill(std::begin(index_), std::end(index_), absent);
        std::size_t position = 0;
        for_each_field(line, [&](std::string_view field) {
            field = detail::trace_text::trim(field);
            for (int c = 0; c < column_count; ++c) {
                if (field == column_names[c]) {
                    if (index_[c] != absent) fail(std::string("column ") + column_names[c] + " appears twice in the header");
                    index_[c] = position;
                }
            }
            ++position;
        });
        columns_ = position;
        for (column required : {action, pointer, size}) {
            if (index_[required] == absent) {
                fail(std::string("header lacks the ") + column_names[required] +
                     " column (expected Thread,Time,Action,Pointer,Size,Stream), got " + detail::trace_text::quoted(line));
            }
        }
    }

    template <class F>
    static void for_each_field(std::string_view line, F&& visit) {
        for (;;) {
            const auto comma = line.find(',');
            visit(line.substr(0, comma));
            if (comma == std::string_view::npos) return;
            line.remove_prefix(comma + 1);
        }
    }

    void read_row(std::string_view line) {
        std::string_view fields[column_count];
        std::size_t position = 0;
        for_each_field(line, [&](std::string_view field) {
            for (int c = 0; c < column_count; ++c) {
                if (index_[c] == position) fields[c] = detail::trace_text::trim(field);
            }
            ++position;
        });
        if (position != columns_) {
            fail("expected " + std::to_string(columns_) + " columns, found " + std::to_string(position));
        }
        trace_event event;
        const auto& act = fields[action];
        if (act == "allocate") {
            event.action = trace_action::allocate;
        } else if (act == "free" || act == "deallocate") {  // RMM's docs show `deallocate`; its adaptor writes `free`
            event.action = trace_action::free;
        } else if (act == "allocate failure") {
            return;  // RMM logs failed requests; they took nothing
        } else {
            fail("unknown action " + detail::trace_text::quoted(act) + " (expected allocate, free or deallocate)");
        }
        using detail::trace_text::number_read;
        // "bad <what> '<text>'", and why: past 64 bits, or `expected` (may be empty).
        const auto check = [&](number_read read, const char* what, std::string_view text, const char* expected) {
            if (read == number_read::ok) return;
            std::string message = std::string("bad ") + what + " " + detail::trace_text::quoted(text);
            if (read == number_read::too_large) {
                message += " (does not fit in 64 bits)";
            } else if (*expected != '\0') {
                message += std::string(" (") + expected + ")";
            }
            fail(message);
        };
        check(detail::trace_text::parse_pointer(fields[pointer], event.pointer), "pointer", fields[pointer], "expected hex such as 0x7f00");
        std::uint64_t bytes = 0;
        check(detail::trace_text::parse_unsigned(fields[size], bytes), "size", fields[size], "expected decimal bytes");
        if (bytes > (std::uint64_t{1} << 56)) fail("bad size " + detail::trace_text::quoted(fields[size]) + " (more than 2^56 bytes)");
        event.bytes = static_cast<std::size_t>(bytes);
        if (index_[thread] != absent) check(detail::trace_text::parse_integer(fields[thread], event.thread), "thread", fields[thread], "");
        if (index_[time] != absent) {
            check(detail::trace_text::parse_time(fields[time], event.time_us), "time", fields[time],
                  "expected HH:MM:SS.microseconds or seconds");
        }
        std::uint64_t stream_handle = 0;
        if (index_[stream] != absent) check(detail::trace_text::parse_integer(fields[stream], stream_handle), "stream", fields[stream], "");
        event.stream = stream_index(stream_handle);
        if (event.action == trace_action::allocate) {
            if (event.bytes == 0) fail("allocate of 0 bytes");
            const auto [where, inserted] = live_.try_emplace(event.pointer, live_allocation{event.bytes, 0});
            if (!inserted) fail("allocate of pointer " + std::string(fields[pointer]) + ", which is already live");
            where->second.slot = take_slot();
            event.slot = where->second.slot;
            if (live_bytes_ > SIZE_MAX - event.bytes) fail("the bytes live at once pass 2^64");
            live_bytes_ += event.bytes;
            trace_.peak_live_bytes = std::max(trace_.peak_live_bytes, live_bytes_);
            ++trace_.allocations;
        } else {
            const auto found = live_.find(event.pointer);
            if (found == live_.end()) fail("free of unknown pointer " + std::string(fields[pointer]));
            if (found->second.bytes != event.bytes) {
                fail("free of pointer " + std::string(fields[pointer]) + " with " + std::to_string(event.bytes) +
                     " bytes; it was allocated with " + std::to_string(found->second.bytes));
            }
            event.slot = found->second.slot;
            free_slots_.push_back(found->second.slot);
            live_bytes_ -= found->second.bytes;
            live_.erase(found);
        }
        trace_.events.push_back(event);
    }

    std::uint32_t take_slot() {
        if (!free_slots_.empty()) {
            const std::uint32_t slot = free_slots_.back();
            free_slots_.pop_back();
            return slot;
        }
        if (slot_count_ == UINT32_MAX) fail("too many live allocations");
        return static_cast<std::uint32_t>(slot_count_++);
    }

    std::uint32_t stream_index(std::uint64_t handle) {
        const auto found = std::find(trace_.streams.begin(), trace_.streams.end(), handle);
        if (found != trace_.streams.end()) return static_cast<std::uint32_t>(found - trace_.streams.begin());
        if (trace_.streams.size() >= 4096) fail("more than 4096 distinct streams");
        trace_.streams.push_back(handle);
        return static_cast<std::uint32_t>(trace_.streams.size() - 1);
    }

    trace trace_;
    std::size_t line_ = 0;
    bool header_seen_ = false;
    std::size_t index_[column_count] = {};
    std::size_t columns_ = 0;
    std::unordered_map<std::uint64_t, live_allocation> live_;
    std::vector<std::uint32_t> free_slots_;
    std::size_t slot_count_ = 0;
    std::size_t live_bytes_ = 0;
    std::string pending_;  // read(): the start of a line whose break is still to come
    bool after_carriage_return_ = false;  // read(): the last piece ended in CR; a LF next is its CRLF
};

// Reads a whole trace held in `text`, named `file_name` in errors.
[[nodiscard]] inline trace parse_trace(std::string_view text, std::string file_name = "<trace>") {
    trace_reader reader(std::move(file_name));
    reader.read(text);
    return std::move(reader).finish();
}

}  // namespace poolkit
