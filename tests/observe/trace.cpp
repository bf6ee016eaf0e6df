// Reading and writing RMM-format traces: the columns, line endings, every malformed input with its
// line (NUL bytes, long lines, numbers past 64 bits, no events), and the round trip through
// write_trace_row.
#include <poolkit/observe/trace.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

namespace {

using namespace poolkit;

// The message of the trace_error that parsing `text` throws, or "" when it parses.
std::string error_of(const std::string& text) {
    try {
        static_cast<void>(parse_trace(text, "t.csv"));
    } catch (const trace_error& error) {
        return error.what();
    }
    return "";
}

}  // namespace

TEST_CASE("trace: reads RMM's columns, numbers the slots and finds the peak") {
    const trace t = parse_trace(
        "Thread,Time,Action,Pointer,Size,Stream\n"
        "0,00:00:00.000163,allocate,0x1,3145728,0\n"
        "0,00:00:01.5,allocate,0x2,1024,0x7f00\n"
        "0,00:00:02.000000,free,0x1,3145728,0\n"
        "0,00:01:00.000001,allocate,0x1,512,0\n"
        "\n"
        "0,01:00:00.000000,allocate failure,0x0,99999999999,0\r\n"
        "0,01:00:00.000000,free,0x2,1024,0x7f00\n",
        "small.csv");
    REQUIRE(t.events.size() == 5);
    CHECK(t.name == "small.csv");
    CHECK(t.allocations == 3);
    CHECK(t.peak_live_bytes == 3145728 + 1024);
    CHECK(t.slots == 2);
    CHECK(t.events[0].time_us == 163);
    CHECK(t.events[1].time_us == 1'500'000);
    CHECK(t.events[3].time_us == 60'000'001);
    CHECK(t.events[3].slot == t.events[0].slot);  // a freed slot is reused
    CHECK(t.streams == std::vector<std::uint64_t>{0, 0x7f00});
    CHECK(t.events[1].stream == 1);
    CHECK(t.unfreed_allocations == 1);
    CHECK(t.unfreed_bytes == 512);
}

TEST_CASE("trace: RMM's logs as its adaptor writes them and as its docs show them") {
    // logging_resource_adaptor: the thread id, HH:MM:SS.micro, `%p` (glibc's `(nil)` for a failed
    // request), the stream as std::hex writes a cudaStream_t (0 for the default stream).
    const trace adaptor = parse_trace(
        "Thread,Time,Action,Pointer,Size,Stream\n"
        "140573312345856,10:30:45.123456,allocate,0x7f8a40000000,1024,0\n"
        "140573312345856,10:30:45.123460,allocate failure,(nil),99999999999999,0x55d1c3a0b2c0\n"
        "140573312345856,10:30:45.234567,allocate,0x7f8a40000400,2048,0x55d1c3a0b2c0\n"
        "140573312345856,10:30:45.345678,free,0x7f8a40000000,1024,0\n",
        "adaptor.csv");
    REQUIRE(adaptor.events.size() == 3);
    CHECK(adaptor.streams == std::vector<std::uint64_t>{0, 0x55d1c3a0b2c0});
    CHECK(adaptor.events[2].time_us - adaptor.events[0].time_us == 222'222);
    // The user guide's example: seconds since the epoch, and `deallocate`.
    const trace documented = parse_trace(
        "Thread,Time,Action,Pointer,Size,Stream\n"
        "140573312345856,1634567890.123456,allocate,0x7f8a40000000,1024,0x7f8a38001020\n"
        "140573312345856,1634567890.234567,allocate,0x7f8a40000400,2048,0x7f8a38001020\n"
        "140573312345856,1634567890.345678,deallocate,0x7f8a40000000,1024,0x7f8a38001020\n",
        "documented.csv");
    REQUIRE(documented.events.size() == 3);
    CHECK(documented.events[2].action == trace_action::free);
    CHECK(documented.peak_live_bytes == 3072);
}

TEST_CASE("trace: columns in another order, and without the optional ones") {
    const trace t = parse_trace("Size,Pointer,Action\n100,ff,allocate\n100,0xFF,free\n");
    REQUIRE(t.events.size() == 2);
    CHECK(t.events[0].pointer == 0xff);
    CHECK(t.events[0].bytes == 100);
    CHECK(t.streams == std::vector<std::uint64_t>{0});
}

TEST_CASE("trace: malformed input names the file and line") {
    const std::string header = "Thread,Time,Action,Pointer,Size,Stream\n";
    const std::string ok = "0,00:00:00.000001,allocate,0x1,256,0\n";
    CHECK(error_of("") == "t.csv:0: empty trace: no header line (expected Thread,Time,Action,Pointer,Size,Stream)");
    CHECK(error_of("Thread,Time,Pointer,Size,Stream\n").find("t.csv:1: header lacks the Action column") == 0);
    CHECK(error_of("Action,Pointer,Size,Size\n").find("t.csv:1: column Size appears twice") == 0);
    CHECK(error_of(header + ok + "0,00:00:00.000002,allocate,0x2,256\n") == "t.csv:3: expected 6 columns, found 5");
    CHECK(error_of(header + ok + "0,00:00:00.000002,allocate,0x2,256,0,7\n") == "t.csv:3: expected 6 columns, found 7");
    CHECK(error_of(header + "0,00:00:00.000001,alloc,0x1,256,0\n") ==
          "t.csv:2: unknown action 'alloc' (expected allocate, free or deallocate)");
    CHECK(error_of(header + "0,00:00:00.000001,allocate,0xZZ,256,0\n") == "t.csv:2: bad pointer '0xZZ' (expected hex such as 0x7f00)");
    CHECK(error_of(header + "0,00:00:00.000001,allocate,0x1,12a,0\n") == "t.csv:2: bad size '12a' (expected decimal bytes)");
    CHECK(error_of(header + "0,00:00:00.000001,allocate,0x1,-5,0\n") == "t.csv:2: bad size '-5' (expected decimal bytes)");
    CHECK(error_of(header + "0,00:00:00.000001,allocate,0x1,99999999999999999999999,0\n").find("t.csv:2: bad size") == 0);
    CHECK(error_of(header + "0,00:00:00.000001,allocate,0x1,0,0\n") == "t.csv:2: allocate of 0 bytes");
    CHECK(error_of(header + "0,yesterday,allocate,0x1,256,0\n").find("t.csv:2: bad time 'yesterday'") == 0);
    CHECK(error_of(header + "0,00:00:00.,allocate,0x1,256,0\n").find("t.csv:2: bad time") == 0);
    CHECK(error_of(header + "x,00:00:00.000001,allocate,0x1,256,0\n") == "t.csv:2: bad thread 'x'");
    CHECK(error_of(header + "0,00:00:00.000001,allocate,0x1,256,s1\n") == "t.csv:2: bad stream 's1'");
    CHECK(error_of(header + ok + ok) == "t.csv:3: allocate of pointer 0x1, which is already live");
    CHECK(error_of(header + ok + "0,00:00:00.000002,free,0x9,256,0\n") == "t.csv:3: free of unknown pointer 0x9");
    CHECK(error_of(header + ok + "0,00:00:00.000002,free,0x1,512,0\n") ==
          "t.csv:3: free of pointer 0x1 with 512 bytes; it was allocated with 256");
    // Control characters are not echoed.
    CHECK(error_of(header + "0,0,all\x01oc,0x1,256,0\n") == "t.csv:2: unknown action 'all?oc' (expected allocate, free or deallocate)");
}

TEST_CASE("trace: trace_error carries the line and the bare message") {
    try {
        static_cast<void>(parse_trace("Action,Pointer,Size\nfree,0x1,8\n", "f"));
        FAIL("no error");
    } catch (const trace_error& error) {
        CHECK(error.line() == 2);
        CHECK(error.message() == "free of unknown pointer 0x1");
    }
}

TEST_CASE("trace: rows written by write_trace_row read back the same") {
    std::ostringstream out;
    out << trace_header << '\n';
    write_trace_row(out, 3, 3'723'000'042, trace_action::allocate, 0xdead00, 4096, 7);
    write_trace_row(out, 3, 3'723'000'043, trace_action::free, 0xdead00, 4096, 7);
    CHECK(out.str() ==
          "Thread,Time,Action,Pointer,Size,Stream\n"
          "3,01:02:03.000042,allocate,0xdead00,4096,7\n"
          "3,01:02:03.000043,free,0xdead00,4096,7\n");
    const trace t = parse_trace(out.str());
    REQUIRE(t.events.size() == 2);
    CHECK(t.events[0].thread == 3);
    CHECK(t.events[0].time_us == 3'723'000'042);
    CHECK(t.events[0].pointer == 0xdead00);
    CHECK(t.events[1].action == trace_action::free);
    CHECK(t.streams == std::vector<std::uint64_t>{7});
}

namespace {

// What reading `text` through trace_reader::read() in pieces of `piece` bytes gives: the number of
// events, or the error's message.
std::string read_in_pieces(std::string_view text, std::size_t piece) {
    try {
        trace_reader reader("t.csv");
        for (std::size_t at = 0; at < text.size(); at += piece) reader.read(text.substr(at, piece));
        return std::to_string(std::move(reader).finish().events.size()) + " events";
    } catch (const trace_error& error) {
        return error.what();
    }
}

const std::string header = "Thread,Time,Action,Pointer,Size,Stream\n";
const std::string row = "0,00:00:00.000001,allocate,0x1,256,0\n";

}  // namespace

TEST_CASE("trace: LF, CRLF and CR-only line endings read alike, in pieces of any size") {
    const std::string lf = header + row + "0,00:00:00.000002,allocate,0x2,64,0\n\n0,00:00:00.000003,free,0x1,256,0\n";
    std::string crlf, cr;
    for (char c : lf) {
        crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
        cr += c == '\n' ? '\r' : c;
    }
    for (const std::string& text : {lf, crlf, cr}) {
        CHECK(parse_trace(text).events.size() == 3);
        for (std::size_t piece : {1, 2, 3, 7, 64}) CHECK(read_in_pieces(text, piece) == "3 events");
    }
    // The line numbers count a CRLF once, and a lone CR as a line break.
    CHECK(error_of("Action,Pointer,Size\r\nallocate,0x1,8\r\nfree,0x2,8\r\n") == "t.csv:3: free of unknown pointer 0x2");
    CHECK(error_of("Action,Pointer,Size\rallocate,0x1,8\rfree,0x2,8\r") == "t.csv:3: free of unknown pointer 0x2");
    CHECK(error_of("Action,Pointer,Size\r\rallocate,0x1,8\rfree,0x2,8") == "t.csv:4: free of unknown pointer 0x2");
}

TEST_CASE("trace: a trace without events is an error") {
    CHECK(error_of(header) == "t.csv:1: no events: the trace has a header but no allocate or free rows");
    CHECK(error_of(header + "\n\n") == "t.csv:3: no events: the trace has a header but no allocate or free rows");
    CHECK(error_of(header + "0,0,allocate failure,0x0,64,0\n").find("t.csv:2: no events") == 0);
    CHECK(error_of("Thread,Time,Action,Pointer,Size,Stream").find("t.csv:1: no events") == 0);
    CHECK(error_of("\r\n").find("t.csv:1: header lacks the Action column") == 0);
}

TEST_CASE("trace: a NUL byte is reported on its own line") {
    using namespace std::string_literals;
    CHECK(error_of("Thread,Ti\0me,Action,Pointer,Size,Stream\n"s + row) == "t.csv:1: binary data (a NUL byte) in a text trace");
    const std::string third = header + row + "0,0,free,0x1,2\0"s + "56,0\n" + row;
    CHECK(error_of(third) == "t.csv:3: binary data (a NUL byte) in a text trace");
    for (std::size_t piece : {1, 5, 40, 4096}) CHECK(read_in_pieces(third, piece) == "t.csv:3: binary data (a NUL byte) in a text trace");
    CHECK(read_in_pieces("\0"s, 1) == "t.csv:1: binary data (a NUL byte) in a text trace");
}

TEST_CASE("trace: a line longer than 1 MiB is reported on its own line, whole or in pieces") {
    // 1,078,600 bytes: longer than 1 MiB, though every piece of 64 KiB is shorter.
    const std::string long_row = "0,0,free,0x1,256,0" + std::string(1'078'600 - 18, ' ');
    const std::string text = header + row + long_row + "\n" + row;
    CHECK(error_of(text).find("t.csv:3: a line longer than 1 MiB") == 0);
    for (std::size_t piece : {std::size_t{1} << 16, std::size_t{1} << 20, text.size()}) {
        CHECK(read_in_pieces(text, piece).find("t.csv:3: a line longer than 1 MiB") == 0);
    }
    CHECK(read_in_pieces(header + std::string(3'000'000, 'x'), 1 << 16).find("t.csv:2: a line longer than 1 MiB") == 0);
    // A line of exactly 1 MiB is read.
    const std::string mebibyte = "0,0,free,0x1,256,0" + std::string((std::size_t{1} << 20) - 18, ' ');
    CHECK(parse_trace(header + row + mebibyte + "\n").events.size() == 2);
    CHECK(read_in_pieces(header + row + mebibyte, 1 << 16) == "2 events");
}

TEST_CASE("trace: numbers past 64 bits are errors on their line") {
    CHECK(error_of(header + "0,0,allocate,0x10000000000000000,256,0\n") ==
          "t.csv:2: bad pointer '0x10000000000000000' (does not fit in 64 bits)");
    CHECK(error_of(header + "0,0,allocate,0x1,18446744073709551616,0\n") ==
          "t.csv:2: bad size '18446744073709551616' (does not fit in 64 bits)");
    CHECK(error_of(header + "0,0,allocate,0x1,72057594037927937,0\n") == "t.csv:2: bad size '72057594037927937' (more than 2^56 bytes)");
    CHECK(error_of(header + "18446744073709551616,0,allocate,0x1,256,0\n") ==
          "t.csv:2: bad thread '18446744073709551616' (does not fit in 64 bits)");
    CHECK(error_of(header + "0,0,allocate,0x1,256,0x10000000000000000\n") ==
          "t.csv:2: bad stream '0x10000000000000000' (does not fit in 64 bits)");
    // Times: each field fits, but the microseconds do not (2^64 us is about 5,124,095,576 hours).
    CHECK(error_of(header + row + "0,5124095577:00:00.000000,free,0x1,256,0\n") ==
          "t.csv:3: bad time '5124095577:00:00.000000' (does not fit in 64 bits)");
    CHECK(error_of(header + "0,18446744073709.551616,allocate,0x1,256,0\n") ==
          "t.csv:2: bad time '18446744073709.551616' (does not fit in 64 bits)");
    CHECK(error_of(header + "0,99999999999999999999,allocate,0x1,256,0\n").find("t.csv:2: bad time") == 0);
    const trace t = parse_trace(header + "0,5124095575:00:00.000000,allocate,0x1,256,0\n");
    CHECK(t.events[0].time_us == std::uint64_t{5124095575} * 3600 * 1'000'000);
    // Live bytes: 256 allocations of 2^56 bytes reach 2^64.
    std::string huge = header;
    for (int i = 1; i <= 256; ++i) huge += "0,0,allocate," + std::to_string(i) + ",72057594037927936,0\n";
    CHECK(error_of(huge) == "t.csv:257: the bytes live at once pass 2^64");
}
