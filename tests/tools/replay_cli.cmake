# poolkit-replay's command line, run by ctest (tools/CMakeLists.txt):
#   cmake -DREPLAY=<poolkit-replay> -DTRACES=<bench/traces> -DWORK_DIR=<scratch> -P replay_cli.cmake
# Every malformed input and every misuse must end with exit status 2 and "file:line: message" (or
# what was wrong with the command line) on stderr, leave every input as it was and write nothing.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(expect_run name expected_status expected_output)
  execute_process(COMMAND ${REPLAY} ${ARGN} --no-progress
    RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK_DIR})
  if(NOT status STREQUAL "${expected_status}")
    message(FATAL_ERROR "${name}: exit status ${status}, expected ${expected_status}\nstdout: ${out}\nstderr: ${err}")
  endif()
  string(FIND "${out}${err}" "${expected_output}" found)
  if(found EQUAL -1)
    message(FATAL_ERROR "${name}: output lacks '${expected_output}'\nstdout: ${out}\nstderr: ${err}")
  endif()
  message(STATUS "ok: ${name}")
endfunction()

# The file at `path` holds `text`, or the test fails saying `what`.
function(expect_file_holds path text what)
  file(READ ${path} content)
  string(FIND "${content}" "${text}" found)
  if(found EQUAL -1)
    message(FATAL_ERROR "${what}:\n${content}")
  endif()
endfunction()

# A plain CSV file, and its gzip.
function(trace_file name text)
  file(WRITE ${WORK_DIR}/${name} "${text}")
endfunction()
set(header "Thread,Time,Action,Pointer,Size,Stream\n")
set(row1 "0,00:00:00.000001,allocate,0x1,1048576,0\n")

expect_run("--list" 0 "best_fit " --list)
expect_run("--help" 0 "Usage: poolkit-replay" --help)
expect_run("--help names every option" 0 "--no-progress" --help)
expect_run("unknown option" 2 "not expected: --bogus" --bogus)
expect_run("unknown composition" 2 "no composition named nothing" --composition=nothing)
expect_run("bad upstream" 2 "--upstream is simulated or cuda" --upstream=gpu)
expect_run("missing file" 2 "nothing.csv:0: cannot open" nothing.csv)

trace_file(good.csv "${header}${row1}0,00:00:00.000002,allocate,0x2,512,3\n0,00:00:00.000003,free,0x1,1048576,0\n")
expect_run("a JSON line per composition" 0
  "{\"trace\":\"good\",\"composition\":\"best_fit\",\"upstream\":\"simulated\",\"events\":3,\"peak_live_bytes\":1049088,\"ns_per_op\":"
  good.csv --json --composition=best_fit,upstream)
expect_run("the table" 0 "best per trace" good.csv --composition=best_fit)
expect_run("the table explains its picks" 0 "pool: the lowest ratio among those" good.csv --composition=best_fit)
# The upstream takes both allocations in each pass: counted per pass, not over both.
expect_run("upstream allocations per pass" 0 "\"upstream_allocs\":2,\"warm_upstream_allocs\":2}" good.csv --json --composition=upstream)
expect_run("upstream allocations per pass, in the table" 0 "2 / 2" good.csv --composition=upstream)
# --passes: the warm figures are the last pass's alone (2 allocations, not the 4 of both warm passes).
expect_run("--passes" 0 "\"passes\":3,\"upstream_allocs\"" good.csv --json --composition=upstream --passes=3)
expect_run("--passes reports the last pass" 0 "\"upstream_allocs\":2,\"warm_upstream_allocs\":2}" good.csv --json
  --composition=upstream --passes=3)
expect_run("--passes in the table" 0 "ns/op: warm pass, the last of 3" good.csv --composition=upstream --passes=3)
expect_run("--passes with --lag counts calls per event of every pass" 0 "per 1,000 events of every pass" good.csv
  --composition=caching --streams=3 --lag=2 --passes=3)
expect_run("--passes 1" 2 "--passes: Value 1 not in range" good.csv --passes=1)
# --cold-caches reads other memory between events and says so; the ratio is the same.
expect_run("--cold-caches in JSON" 0 "\"cold_caches_bytes\":65536}" good.csv --json --composition=best_fit --cold-caches=64K)
expect_run("--cold-caches in the table" 0 "64 KiB of other memory read between events" good.csv --composition=best_fit
  --cold-caches=64K)
expect_run("--cold-caches past 1 GiB" 2 "--cold-caches" good.csv --cold-caches=2G)
expect_run("--cold-caches not a size" 2 "--cold-caches" good.csv --cold-caches=lots)
expect_run("--capture-checks" 0 "\"composition\":\"caching\"" good.csv --json --composition=caching --capture-checks=announced)
expect_run("--capture-checks of no mode" 2 "--capture-checks: sometimes not in {every_call,announced,never}" good.csv
  --capture-checks=sometimes)
expect_run("--streams names the spread trace" 0 "{\"trace\":\"good@3streams\",\"composition\":\"caching\""
  good.csv --json --composition=caching --streams=3)
# CLI11 versions word the range differently ("1 to 65536", "[1 - 65536]").
expect_run("--streams 0" 2 "--streams: Value 0 not in range" good.csv --streams=0)
expect_run("--streams not a number" 2 "--streams: Value four not in range" good.csv --streams=four)
expect_run("--lag counts the driver calls" 0 "driver calls a GPU would have taken"
  good.csv --composition=caching --streams=3 --lag=2)
expect_run("--lag in JSON" 0 "\"event_calls\":{\"records\":" good.csv --json --composition=caching --streams=3 --lag=2)
# --lag 0: no work lags, as on a GPU that replays a trace; the driver calls are still counted. Three
# streams, each free on another stream than its allocation's: stream_ordered asks whether the
# freeing stream is idle (a query, no record).
expect_run("--lag 0 counts the calls of idle streams" 0 "\"event_calls\":{\"records\":0,\"queries\":2," good.csv --json
  --composition=expandable --streams=3 --lag=0)
expect_run("--lag past its range" 2 "--lag: Value" good.csv --lag=2000000)
expect_run("--lag over real streams" 2 "--lag simulates streams over the simulated upstream" good.csv --upstream=cuda --lag=4)
# --expandable-option sets a field on every expandable composition: a 4 MiB block is one physical
# allocation of the default 16 MiB, two granules of their own with mapping_bytes=0.
trace_file(four_mib.csv "${header}0,00:00:00.000001,allocate,0x1,4194304,0\n0,00:00:00.000002,free,0x1,4194304,0\n")
expect_run("expandable's defaults" 0 "\"creates\":[1,0]" four_mib.csv --json --composition=expandable)
expect_run("--expandable-option" 0 "\"creates\":[2,0]" four_mib.csv --json --composition=expandable
  --expandable-option=mapping_bytes=0)
expect_run("--expandable-option, no such option" 2 "no option \"bogus\" (the options are span_bytes" four_mib.csv
  --expandable-option=bogus=1)
expect_run("--expandable-option, no value" 2 "--expandable-option takes NAME=VALUE, not 'peak_slack'" four_mib.csv
  --expandable-option=peak_slack)
expect_run("--expandable-option, a value the pool refuses" 2 "mapping_bytes must be 0 or a power of two" four_mib.csv
  --expandable-option=mapping_bytes=3)
# --snapshot: one composition's layout when live bytes first peak (after the second event of
# good.csv: 1 MiB and 512 B live), as the segments of PyTorch's snapshot.
expect_run("--snapshot" 0 "best_fit" good.csv --composition=best_fit --snapshot=${WORK_DIR}/layout.json)
expect_file_holds(${WORK_DIR}/layout.json "\"size\": 1048576, \"requested_size\": 1048576, \"state\": \"active_allocated\""
  "--snapshot: the 1 MiB block is not live in the layout")
expect_run("--snapshot of two compositions" 2 "--snapshot takes one trace and one composition" good.csv
  --composition=best_fit,buddy --snapshot=${WORK_DIR}/two.json)
expect_run("--snapshot over a trace" 2 "--snapshot good.csv: that names a trace" good.csv --composition=best_fit --snapshot=good.csv)
expect_run("--snapshot of no pool" 1 "upstream has no layout to walk" good.csv --composition=upstream
  --snapshot=${WORK_DIR}/none.json)
# --snapshot-at=reserved: the layout where reserved bytes first reach their most. Here the live
# peak is the 64 MiB block (event 1); the reserved peak comes at event 3, when a 4 KiB block maps a
# granule of a small span while the 64 MiB stay mapped and free.
trace_file(later_peak.csv "${header}0,00:00:00.000001,allocate,0x1,67108864,0\n0,00:00:00.000002,free,0x1,67108864,0\n0,00:00:00.000003,allocate,0x2,4096,0\n0,00:00:00.000004,free,0x2,4096,0\n")
expect_run("--snapshot-at=reserved" 0 "reach their most after event 3 of pass 1" later_peak.csv --composition=expandable
  --snapshot=${WORK_DIR}/reserved.json --snapshot-at=reserved)
expect_file_holds(${WORK_DIR}/reserved.json "\"requested_size\": 4096, \"state\": \"active_allocated\""
  "--snapshot-at=reserved: the 4 KiB block is not live in the layout")
expect_run("--snapshot-at=live" 0 "expandable" later_peak.csv --composition=expandable --snapshot=${WORK_DIR}/live.json
  --snapshot-at=live)
expect_file_holds(${WORK_DIR}/live.json "\"requested_size\": 67108864, \"state\": \"active_allocated\""
  "--snapshot-at=live: the 64 MiB block is not live in the layout")
# A reserved peak in a later pass, under --lag: the second pass starts while the first pass's last
# frees are still pending on the other stream, so its 3 MiB block maps past them (a 50 MiB span,
# against 44 MiB in the first pass). The replay that finds the peak is not counted in the calls
# reported: they are those of a run without --snapshot.
trace_file(lag_peak.csv "${header}0,00:00:00.000001,allocate,0x1,3145728,0\n0,00:00:00.000002,allocate,0x2,4096,0\n0,00:00:00.000003,allocate,0x3,41943040,0\n0,00:00:00.000004,free,0x3,41943040,0\n0,00:00:00.000005,allocate,0x4,3145728,0\n0,00:00:00.000006,free,0x4,3145728,0\n")
set(lagged lag_peak.csv --composition=expandable --streams=2 --lag=4 --passes=3)
execute_process(COMMAND ${REPLAY} ${lagged} --json --no-progress OUTPUT_VARIABLE unsnapped WORKING_DIRECTORY ${WORK_DIR})
string(REGEX MATCH "\"event_calls\":{[^}]*}" unsnapped_calls "${unsnapped}")
if(NOT unsnapped_calls MATCHES "\"records\":[1-9]")
  message(FATAL_ERROR "--lag: no driver calls counted in ${unsnapped}")
endif()
expect_run("--snapshot-at=reserved, a later pass under --lag" 0 "reach their most after event 3 of pass 2" ${lagged}
  --snapshot=${WORK_DIR}/lagged.json --snapshot-at=reserved)
expect_file_holds(${WORK_DIR}/lagged.json "\"total_size\": 52428800"
  "--snapshot-at=reserved: the layout is not the second pass's")
expect_run("--snapshot-at=reserved counts the reported run's calls alone" 0 "${unsnapped_calls}" ${lagged} --json
  --snapshot=${WORK_DIR}/lagged-calls.json --snapshot-at=reserved)
expect_run("--snapshot-at without --snapshot" 2 "no --snapshot was named" later_peak.csv --snapshot-at=reserved)
expect_run("--snapshot-at, another word" 2 "--snapshot-at" later_peak.csv --composition=expandable
  --snapshot=${WORK_DIR}/other.json --snapshot-at=peak)
foreach(unwritten two.json none.json other.json)
  if(EXISTS ${WORK_DIR}/${unwritten})
    message(FATAL_ERROR "--snapshot wrote ${unwritten} for a run it refused")
  endif()
endforeach()
expect_run("an SVG" 0 "best_fit" good.csv --composition=best_fit --svg=${WORK_DIR}/chart.svg)
expect_file_holds(${WORK_DIR}/chart.svg "<polyline" "the SVG has no polyline")

# The peers quoted from the JSON beside a trace: printed as quoted; a malformed file is a warning
# and leaves them out, and the replay still runs.
file(WRITE ${WORK_DIR}/good.json "{\"peers\": {\"measured\": \"somewhere, some day\", \"PyTorch\": {\"ns_per_op\": 1234, \"ratio\": 2.5}}}")
expect_run("quoted peers" 0 "quoted, not measured in this run" good.csv --composition=best_fit)
expect_run("quoted peers' figures" 0 "good                 PyTorch 2.500, 1,234 ns/op" good.csv --composition=best_fit)
expect_run("where the quoted peers were measured" 0 "measured: somewhere, some day" good.csv --composition=best_fit)
file(WRITE ${WORK_DIR}/good.json "{\"peers\": {\"PyTorch\": {\"ratio\": \"fast\"}}}")
expect_run("a peer figure that is no number" 0 "good.json: \"peers\": conversion of data to type" good.csv --composition=best_fit)
file(WRITE ${WORK_DIR}/good.json "{\"peers\": {")
expect_run("a malformed peers file" 0 "good.json:1: " good.csv --composition=best_fit)
expect_run("a malformed peers file is left out" 0 "its quoted peer figures are left out" good.csv --composition=best_fit)
file(REMOVE ${WORK_DIR}/good.json)

trace_file(no_action.csv "Thread,Time,Pointer,Size,Stream\n0,00:00:00.000001,0x1,5,0\n")
expect_run("a missing column in the header" 2 "no_action.csv:1: header lacks the Action column" no_action.csv)
trace_file(short_row.csv "${header}${row1}0,00:00:00.000002,allocate,0x2\n")
expect_run("a row with too few columns" 2 "short_row.csv:3: expected 6 columns, found 4" short_row.csv)
trace_file(unknown_free.csv "${header}${row1}0,00:00:00.000002,free,0x7,64,0\n")
expect_run("free of an unknown pointer" 2 "unknown_free.csv:3: free of unknown pointer 0x7" unknown_free.csv)
trace_file(bad_size.csv "${header}0,00:00:00.000001,allocate,0x1,12kb,0\n")
expect_run("a bad size" 2 "bad_size.csv:2: bad size '12kb'" bad_size.csv)
trace_file(bad_pointer.csv "${header}0,00:00:00.000001,allocate,zz,12,0\n")
expect_run("a bad pointer" 2 "bad_pointer.csv:2: bad pointer 'zz'" bad_pointer.csv)
trace_file(bad_time.csv "${header}0,noon,allocate,0x1,12,0\n")
expect_run("a bad time" 2 "bad_time.csv:2: bad time 'noon'" bad_time.csv)
trace_file(bad_stream.csv "${header}0,00:00:00.000001,allocate,0x1,12,-1\n")
expect_run("a bad stream" 2 "bad_stream.csv:2: bad stream '-1'" bad_stream.csv)
trace_file(double_allocate.csv "${header}${row1}${row1}")
expect_run("a pointer allocated twice" 2 "double_allocate.csv:3: allocate of pointer 0x1, which is already live" double_allocate.csv)
trace_file(empty.csv "")
expect_run("an empty file" 2 "empty.csv:0: empty trace" empty.csv)

# gzip: a good one cut short, and one whose stream is garbage after the magic bytes.
execute_process(COMMAND head -c 20000 ${TRACES}/resnet50_train.csv.gz OUTPUT_FILE ${WORK_DIR}/truncated.csv.gz RESULT_VARIABLE cut)
if(NOT cut EQUAL 0)
  message(FATAL_ERROR "could not cut the gzip trace")
endif()
expect_run("truncated gzip" 2 "truncated.csv.gz:" truncated.csv.gz)
expect_run("truncated gzip says so" 2 "truncated gzip stream: the file ends inside the compressed data" truncated.csv.gz)
file(ARCHIVE_CREATE OUTPUT ${WORK_DIR}/unknown_free.csv.gz PATHS ${WORK_DIR}/unknown_free.csv FORMAT raw COMPRESSION GZip)
expect_run("malformed rows inside gzip" 2 "unknown_free.csv.gz:3: free of unknown pointer 0x7" unknown_free.csv.gz)

# The file at `path` still holds what it held when remember_file() saw it.
function(remember_file path)
  file(SHA256 ${path} hash)
  string(MAKE_C_IDENTIFIER "${path}" key)
  set(remembered_${key} ${hash} PARENT_SCOPE)
endfunction()
function(expect_unchanged name path)
  file(SHA256 ${path} hash)
  string(MAKE_C_IDENTIFIER "${path}" key)
  if(NOT hash STREQUAL "${remembered_${key}}")
    message(FATAL_ERROR "${name}: ${path} was changed")
  endif()
endfunction()
function(expect_absent name path)
  if(EXISTS ${path})
    message(FATAL_ERROR "${name}: ${path} was written")
  endif()
endfunction()

# 6. --svg never writes over an input, and takes a file name, not the next option.
file(ARCHIVE_CREATE OUTPUT ${WORK_DIR}/victim.csv.gz PATHS ${WORK_DIR}/good.csv FORMAT raw COMPRESSION GZip)
remember_file(${WORK_DIR}/victim.csv.gz)
expect_run("--svg TRACE.csv.gz, with the bundled traces" 2 "--svg victim.csv.gz: that names a trace" --svg victim.csv.gz)
expect_unchanged("--svg TRACE.csv.gz, with the bundled traces" ${WORK_DIR}/victim.csv.gz)
expect_run("--svg=TRACE.csv.gz beside the trace" 2 "refusing to write over it" victim.csv.gz --svg=victim.csv.gz)
expect_unchanged("--svg=TRACE.csv.gz beside the trace" ${WORK_DIR}/victim.csv.gz)
remember_file(${WORK_DIR}/good.csv)
expect_run("--svg over a .csv trace" 2 "--svg good.csv: that names a trace" victim.csv.gz --svg good.csv)
expect_unchanged("--svg over a .csv trace" ${WORK_DIR}/good.csv)
trace_file(input.txt "${header}${row1}")
remember_file(${WORK_DIR}/input.txt)
expect_run("--svg names an input trace" 2 "--svg ./input.txt is the input trace input.txt" input.txt --svg=./input.txt)
expect_unchanged("--svg names an input trace" ${WORK_DIR}/input.txt)
expect_run("--svg followed by an option" 2 "--svg needs a file name, not the option --no-progress" good.csv --svg)
expect_absent("--svg followed by an option" ${WORK_DIR}/--no-progress)
expect_run("--svg= empty" 2 "--svg= needs a value" good.csv --svg=)
expect_run("--svg into a missing folder" 2 "the folder missing does not exist" good.csv --svg=missing/chart.svg)
expect_run("--svg FILE with a space" 0 "best_fit" good.csv --composition=best_fit --svg ${WORK_DIR}/spaced.svg)
if(NOT EXISTS ${WORK_DIR}/spaced.svg)
  message(FATAL_ERROR "--svg FILE with a space: no SVG written")
endif()
expect_run("--composition= empty" 2 "--composition= names no composition; name one or more of: upstream, best_fit" good.csv --composition=)
expect_run("--composition= empty before a trace" 2 "names no composition" --composition= good.csv)
expect_run("--composition with an empty name" 2 "has an empty name" good.csv --composition=best_fit,)
expect_run("--composition without a value" 2 "--composition needs composition names, not the option --no-progress" good.csv --composition)
expect_run("unknown composition names the valid ones" 2 "there are: upstream, best_fit" good.csv --composition=nothing)

# 7. Nothing unread passes: line endings, empty traces, bytes after the gzip stream, overflow.
trace_file(cr_only.csv "Thread,Time,Action,Pointer,Size,Stream\r0,00:00:00.000001,allocate,0x1,1048576,0\r0,00:00:00.000002,free,0x1,1048576,0\r")
expect_run("CR-only line endings" 0 "\"trace\":\"cr_only\",\"composition\":\"best_fit\",\"upstream\":\"simulated\",\"events\":2,"
  cr_only.csv --json --composition=best_fit)
trace_file(crlf.csv "Thread,Time,Action,Pointer,Size,Stream\r\n0,00:00:00.000001,allocate,0x1,1048576,0\r\n0,00:00:00.000002,free,0x1,1048576,0\r\n")
expect_run("CRLF line endings" 0 "\"trace\":\"crlf\",\"composition\":\"best_fit\",\"upstream\":\"simulated\",\"events\":2,"
  crlf.csv --json --composition=best_fit)
trace_file(header_only.csv "${header}")
expect_run("a header and no events" 2 "header_only.csv:1: no events" header_only.csv --svg=${WORK_DIR}/never.svg)
expect_absent("a header and no events" ${WORK_DIR}/never.svg)
trace_file(failures_only.csv "${header}0,00:00:00.000001,allocate failure,0x0,64,0\n")
expect_run("only failed allocations" 2 "failures_only.csv:2: no events" failures_only.csv)
file(ARCHIVE_CREATE OUTPUT ${WORK_DIR}/empty.csv.gz PATHS ${WORK_DIR}/empty.csv FORMAT raw COMPRESSION GZip)
expect_run("an empty gzip" 2 "empty.csv.gz:0: empty trace" empty.csv.gz)
file(ARCHIVE_CREATE OUTPUT ${WORK_DIR}/trailing.csv.gz PATHS ${WORK_DIR}/good.csv FORMAT raw COMPRESSION GZip)
file(APPEND ${WORK_DIR}/trailing.csv.gz "trailing")
remember_file(${WORK_DIR}/trailing.csv.gz)
expect_run("bytes after the gzip stream" 2 "trailing.csv.gz:5: bytes after the end of the gzip stream" trailing.csv.gz)
expect_unchanged("bytes after the gzip stream" ${WORK_DIR}/trailing.csv.gz)
trace_file(time_overflow.csv "${header}${row1}0,9999999999:00:00.000001,free,0x1,1048576,0\n")
expect_run("a time past 2^64 microseconds" 2 "time_overflow.csv:3: bad time '9999999999:00:00.000001' (does not fit in 64 bits)" time_overflow.csv)
trace_file(pointer_overflow.csv "${header}0,0,allocate,0x10000000000000000,64,0\n")
expect_run("a pointer past 64 bits" 2 "pointer_overflow.csv:2: bad pointer '0x10000000000000000' (does not fit in 64 bits)" pointer_overflow.csv)
set(huge_rows "")
foreach(i RANGE 1 256)
  string(APPEND huge_rows "0,0,allocate,${i}0,72057594037927936,0\n")
endforeach()
trace_file(peak_overflow.csv "${header}${huge_rows}")
expect_run("live bytes past 2^64" 2 "peak_overflow.csv:257: the bytes live at once pass 2^64" peak_overflow.csv)

# 8. The true line, and the true cause.
execute_process(COMMAND printf "Thread,Time,Act\\000ion,Pointer,Size,Stream\\n0,0,allocate,0x1,64,0\\n" OUTPUT_FILE ${WORK_DIR}/nul_header.csv)
expect_run("a NUL byte on line 1" 2 "nul_header.csv:1: binary data (a NUL byte)" nul_header.csv)
execute_process(COMMAND printf "Thread,Time,Action,Pointer,Size,Stream\\n0,0,allocate,0x1,64,0\\n0,0,allocate,0x2,64,0\\n0,0,free,0x1,6\\0004,0\\n" OUTPUT_FILE ${WORK_DIR}/nul_row.csv)
expect_run("a NUL byte on line 4" 2 "nul_row.csv:4: binary data (a NUL byte)" nul_row.csv)
string(REPEAT " " 1078600 padding)
trace_file(long_line.csv "${header}${row1}0,0,free,0x1,1048576,0${padding}\n")
expect_run("a line of 1,078,600 bytes" 2 "long_line.csv:3: a line longer than 1 MiB" long_line.csv)
string(REPEAT "x" 3000000 no_breaks)
trace_file(no_breaks.csv "${header}${no_breaks}")
expect_run("a line without end" 2 "no_breaks.csv:2: a line longer than 1 MiB" no_breaks.csv)
file(MAKE_DIRECTORY ${WORK_DIR}/folder.csv.gz)
expect_run("a directory" 2 "folder.csv.gz:0: is a directory" folder.csv.gz)
# Names in the SVG are escaped: the trace's file name holds all five of XML's special characters.
set(odd_name "a&b<c>d'e\"f")
trace_file("${odd_name}.csv" "${header}${row1}")
expect_run("an SVG of an oddly named trace" 0 "best_fit" "${odd_name}.csv" --composition=best_fit --svg=${WORK_DIR}/escaped.svg)
file(READ ${WORK_DIR}/escaped.svg svg)
string(FIND "${svg}" "a&amp;b&lt;c&gt;d&apos;e&quot;f: live and reserved bytes" found)
string(FIND "${svg}" "a&b" raw)
if(found EQUAL -1 OR NOT raw EQUAL -1)
  message(FATAL_ERROR "the SVG does not escape the trace's name:\n${svg}")
endif()
file(GLOB leftovers ${WORK_DIR}/*.partial-*)
if(leftovers)
  message(FATAL_ERROR "temporary files left behind: ${leftovers}")
endif()
