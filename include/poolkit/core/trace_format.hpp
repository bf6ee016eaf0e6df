// The RMM CSV log format, writing side: what logged<> writes and observe/trace.hpp reads.
//
//     Thread,Time,Action,Pointer,Size,Stream
//     0,00:00:00.000163,allocate,0x1,3145728,0
// One row per event: the thread, the time since the first event (HH:MM:SS.micro), `allocate` or
// `free`, the pointer in hex, the bytes in decimal and the stream handle. Writing a row formats it
// on the stack and allocates nothing. The reader, which checks a whole trace, is
// observe/trace.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string_view>

namespace poolkit {

enum class trace_action : unsigned char { allocate, free };

// The CSV header of the format.
inline constexpr std::string_view trace_header = "Thread,Time,Action,Pointer,Size,Stream";

// Writes one row in the format: `time_us` since the first event, pointer in hex.
inline void write_trace_row(std::ostream& out, std::uint64_t thread, std::uint64_t time_us, trace_action action, std::uint64_t pointer,
                            std::size_t bytes, std::uint64_t stream) {
    char row[160];
    const auto seconds = time_us / 1'000'000;
    const int length =
        std::snprintf(row, sizeof row, "%llu,%02llu:%02llu:%02llu.%06llu,%s,0x%llx,%zu,%llu\n", static_cast<unsigned long long>(thread),
                      static_cast<unsigned long long>(seconds / 3600), static_cast<unsigned long long>(seconds / 60 % 60),
                      static_cast<unsigned long long>(seconds % 60), static_cast<unsigned long long>(time_us % 1'000'000),
                      action == trace_action::allocate ? "allocate" : "free", static_cast<unsigned long long>(pointer), bytes,
                      static_cast<unsigned long long>(stream));
    out.write(row, length);
}

}  // namespace poolkit
