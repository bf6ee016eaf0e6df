# Fails when a test case's name holds a ';': doctest_discover_tests would split it into names that
# match no case, and those entries would pass without running anything.
#   cmake -DTEST_BINARY=<poolkit-tests> -P tests/test_names.cmake
execute_process(COMMAND ${TEST_BINARY} --list-test-cases OUTPUT_VARIABLE names RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${TEST_BINARY} --list-test-cases failed (${status})")
endif()
string(FIND "${names}" ";" at)
if(NOT at EQUAL -1)
  string(SUBSTRING "${names}" ${at} 120 rest)
  message(FATAL_ERROR "a test case's name holds ';' (CMake's list separator), near: ${rest}")
endif()
