# poolkit-replay's command line, run by ctest (tools/CMakeLists.txt):
#   cmake -DREPLAY=<poolkit-replay> -DTRACES=<bench/traces> -DWORK_DIR=<scratch> -P replay_cli.cmake
# Every malformed input must end with exit status 2 and "file:line: message" on stderr.
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

# A plain CSV file, and its gzip.
function(trace_file name text)
  file(WRITE ${WORK_DIR}/${name} "${text}")
endfunction()
set(header "Thread,Time,Action,Pointer,Size,Stream\n")
set(row1 "0,00:00:00.000001,allocate,0x1,1048576,0\n")

expect_run("--list" 0 "best_fit " --list)
expect_run("--help" 0 "usage: poolkit-replay" --help)
expect_run("unknown option" 2 "unknown option --bogus" --bogus)
expect_run("unknown composition" 2 "no composition named nothing" --composition=nothing)
expect_run("bad upstream" 2 "--upstream is simulated or cuda" --upstream=gpu)
expect_run("missing file" 2 "nothing.csv:0: cannot open" nothing.csv)

trace_file(good.csv "${header}${row1}0,00:00:00.000002,allocate,0x2,512,3\n0,00:00:00.000003,free,0x1,1048576,0\n")
expect_run("a JSON line per composition" 0
  "{\"trace\":\"good\",\"composition\":\"best_fit\",\"upstream\":\"simulated\",\"events\":3,\"peak_live_bytes\":1049088,\"ns_per_op\":"
  good.csv --json --composition=best_fit,upstream)
expect_run("the table" 0 "best per trace" good.csv --composition=best_fit)
expect_run("an SVG" 0 "best_fit" good.csv --composition=best_fit --svg=${WORK_DIR}/chart.svg)
file(READ ${WORK_DIR}/chart.svg svg)
string(FIND "${svg}" "<polyline" found)
if(found EQUAL -1)
  message(FATAL_ERROR "the SVG has no polyline")
endif()

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
expect_run("truncated gzip says so" 2 "truncated or corrupt gzip stream" truncated.csv.gz)
file(ARCHIVE_CREATE OUTPUT ${WORK_DIR}/unknown_free.csv.gz PATHS ${WORK_DIR}/unknown_free.csv FORMAT raw COMPRESSION GZip)
expect_run("malformed rows inside gzip" 2 "unknown_free.csv.gz:3: free of unknown pointer 0x7" unknown_free.csv.gz)
