// Allocation traces in RMM's CSV log format: reading and checking (writing: core/trace_format.hpp,
// included here).
//
// The format is that of RMM's logging_resource_adaptor and of poolkit's logging<>:
//     Thread,Time,Action,Pointer,Size,Stream
//     0,00:00:00.000163,allocate,0x1,3145728,0
// Columns are found by name in the header, in any order; Action, Pointer and Size are required,
// Thread, Time and Stream default to 0. Action is `allocate` or `free` (RMM's `allocate failure`
// rows are read and skipped). Pointer is hex (with or without 0x), Size decimal bytes, Time
// `HH:MM:SS.micro` or plain seconds, Stream an integer (decimal, or hex with 0x).
//
// trace_reader reads line by line and checks the rows as a sequence: a pointer is allocated only
// while it is not live, freed only while it is, with the size it was allocated with. Every error
// is a trace_error whose what() reads "file:line: message". Nothing here allocates per event but
// the event vector; a trace of 35,000 events reads in a few milliseconds.
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
    std::size_t slots = 0;               // most allocations live at once
    std::size_t allocations = 0;
    std::size_t peak_live_bytes = 0;     // the most bytes live at once, by the sizes in the file
    std::size_t unfreed_allocations = 0; // live at the end
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

inline bool parse_unsigned(std::string_view text, std::uint64_t& value, int base = 10) noexcept {
    if (text.empty()) return false;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
    return error == std::errc{} && end == text.data() + text.size();
}

// Hex with an optional 0x, as RMM prints pointers.
inline bool parse_pointer(std::string_view text, std::uint64_t& value) noexcept {
    if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) text.remove_prefix(2);
    return parse_unsigned(text, value, 16);
}

// Decimal, or hex with 0x.
inline bool parse_integer(std::string_view text, std::uint64_t& value) noexcept {
    if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
        return parse_unsigned(text.substr(2), value, 16);
    }
    return parse_unsigned(text, value, 10);
}

// HH:MM:SS.micro (RMM), or plain seconds with an optional fraction.
inline bool parse_time(std::string_view text, std::uint64_t& microseconds) noexcept {
    std::uint64_t whole_seconds = 0;
    std::string_view clock = text;
    const auto dot = text.find('.');
    std::string_view fraction;
    if (dot != std::string_view::npos) {
        clock = text.substr(0, dot);
        fraction = text.substr(dot + 1);
        if (fraction.empty() || fraction.size() > 9) return false;
    }
    std::uint64_t part = 0;
    for (int fields = 0;; ++fields) {
        const auto colon = clock.find(':');
        if (fields == 2 && colon != std::string_view::npos) return false;
        if (!parse_unsigned(clock.substr(0, colon), part) || part > (std::uint64_t{1} << 40)) return false;
        whole_seconds = whole_seconds * 60 + part;
        if (colon == std::string_view::npos) break;
        clock.remove_prefix(colon + 1);
    }
    std::uint64_t micro = 0;
    if (!fraction.empty()) {
        std::uint64_t digits = 0;
        if (!parse_unsigned(fraction, digits)) return false;
        micro = digits;
        for (std::size_t i = fraction.size(); i < 6; ++i) micro *= 10;
        for (std::size_t i = 6; i < fraction.size(); ++i) micro /= 10;
    }
    microseconds = whole_seconds * 1'000'000 + micro;
    return true;
}

inline std::string quoted(std::string_view text) {
    constexpr std::size_t shown = 40;
    std::string result = "'";
    for (char c : text.substr(0, shown)) result += (c >= 0x20 && c < 0x7f) ? c : '?';
    if (text.size() > shown) result += "...";
    return result + "'";
}

}  // namespace detail::trace_text

// Reads a trace one line at a time: read_line() for each line in order (the first is the header),
// then finish(). Throws trace_error on the first malformed line.
class trace_reader {
public:
    explicit trace_reader(std::string file_name) { trace_.name = std::move(file_name); }

    // Requires: lines in file order, without their line break (a trailing '\r' is ignored).
    void read_line(std::string_view line) {
        ++line_;
        line = detail::trace_text::trim(line);
        if (line_ == 1 && line.size() >= 3 && static_cast<unsigned char>(line[0]) == 0xEF &&
            static_cast<unsigned char>(line[1]) == 0xBB && static_cast<unsigned char>(line[2]) == 0xBF) {
            line.remove_prefix(3);  // a UTF-8 byte order mark
        }
        if (!header_seen_) {
            read_header(line);
            return;
        }
        if (line.empty()) return;
        read_row(line);
    }

    // Ends the trace and returns it. Throws trace_error when there was no header.
    [[nodiscard]] trace finish() && {
        if (!header_seen_) fail("empty trace: no header line (expected Thread,Time,Action,Pointer,Size,Stream)");
        trace_.slots = slot_count_;
        trace_.unfreed_allocations = live_.size();
        trace_.unfreed_bytes = live_bytes_;
        return std::move(trace_);
    }

    [[nodiscard]] std::size_t lines_read() const noexcept { return line_; }
    [[nodiscard]] const std::string& file_name() const noexcept { return trace_.name; }

    [[noreturn]] void fail(const std::string& message) const { throw trace_error(trace_.name, line_, message); }

private:
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
        } else if (act == "free") {
            event.action = trace_action::free;
        } else if (act == "allocate failure") {
            return;  // RMM logs failed requests; they took nothing
        } else {
            fail("unknown action " + detail::trace_text::quoted(act) + " (expected allocate or free)");
        }
        if (!detail::trace_text::parse_pointer(fields[pointer], event.pointer)) {
            fail("bad pointer " + detail::trace_text::quoted(fields[pointer]) + " (expected hex such as 0x7f00)");
        }
        std::uint64_t bytes = 0;
        if (!detail::trace_text::parse_unsigned(fields[size], bytes) || bytes > (std::uint64_t{1} << 56)) {
            fail("bad size " + detail::trace_text::quoted(fields[size]) + " (expected decimal bytes)");
        }
        event.bytes = static_cast<std::size_t>(bytes);
        if (index_[thread] != absent && !detail::trace_text::parse_integer(fields[thread], event.thread)) {
            fail("bad thread " + detail::trace_text::quoted(fields[thread]));
        }
        if (index_[time] != absent && !detail::trace_text::parse_time(fields[time], event.time_us)) {
            fail("bad time " + detail::trace_text::quoted(fields[time]) + " (expected HH:MM:SS.microseconds)");
        }
        std::uint64_t stream_handle = 0;
        if (index_[stream] != absent && !detail::trace_text::parse_integer(fields[stream], stream_handle)) {
            fail("bad stream " + detail::trace_text::quoted(fields[stream]));
        }
        event.stream = stream_index(stream_handle);
        if (event.action == trace_action::allocate) {
            if (event.bytes == 0) fail("allocate of 0 bytes");
            const auto [where, inserted] = live_.try_emplace(event.pointer, live_allocation{event.bytes, 0});
            if (!inserted) fail("allocate of pointer " + std::string(fields[pointer]) + ", which is already live");
            where->second.slot = take_slot();
            event.slot = where->second.slot;
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
};

// Reads a whole trace held in `text`, named `file_name` in errors.
[[nodiscard]] inline trace parse_trace(std::string_view text, std::string file_name = "<trace>") {
    trace_reader reader(std::move(file_name));
    while (!text.empty()) {
        const auto newline = text.find('\n');
        reader.read_line(text.substr(0, newline));
        if (newline == std::string_view::npos) break;
        text.remove_prefix(newline + 1);
    }
    return std::move(reader).finish();
}

}  // namespace poolkit
