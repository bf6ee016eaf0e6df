// Reading and writing RMM-format traces: the columns, every malformed input with its line, and
// the round trip through write_trace_row.
#include <poolkit/observe/trace.hpp>

#include <doctest/doctest.h>

#include <sstream>
#include <string>

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
          "t.csv:2: unknown action 'alloc' (expected allocate or free)");
    CHECK(error_of(header + "0,00:00:00.000001,allocate,0xZZ,256,0\n") ==
          "t.csv:2: bad pointer '0xZZ' (expected hex such as 0x7f00)");
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
    CHECK(error_of(header + "0,0,all\x01oc,0x1,256,0\n") == "t.csv:2: unknown action 'all?oc' (expected allocate or free)");
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
