# Checks the include graph of include/poolkit against the layer order, lowest first:
#     core  <  upstream, strategy  <  adaptor  <  interop, observe  <  the top-level headers
# A header may include headers of its own folder or of a lower rung. Folders on one rung
# (upstream and strategy; interop and observe) do not include each other, and nothing includes a
# top-level header (poolkit.hpp, presets.hpp, fwd.hpp). A detail/ folder belongs to its parent.
# Fails naming every edge that breaks the order.
#   cmake -DINCLUDE_DIR=<repo>/include -P check.cmake
if(NOT INCLUDE_DIR)
  message(FATAL_ERROR "usage: cmake -DINCLUDE_DIR=<path to include/> -P check.cmake")
endif()

# The rung of each folder; top-level headers stand above every folder.
set(rung_core 0)
set(rung_upstream 1)
set(rung_strategy 1)
set(rung_adaptor 2)
set(rung_interop 3)
set(rung_observe 3)
set(rung_top 4)

# Sets <out> to the layer of `path` (relative to include/, e.g. poolkit/core/detail/x.hpp).
function(layer_of path out)
  if(path MATCHES "^poolkit/([^/]+)/")
    set(${out} ${CMAKE_MATCH_1} PARENT_SCOPE)
  else()
    set(${out} top PARENT_SCOPE)
  endif()
endfunction()

file(GLOB_RECURSE headers RELATIVE ${INCLUDE_DIR} ${INCLUDE_DIR}/poolkit/*.hpp ${INCLUDE_DIR}/poolkit/*.h)
list(SORT headers)
set(violations "")
set(edges 0)
foreach(header IN LISTS headers)
  layer_of(${header} from)
  if(NOT DEFINED rung_${from})
    list(APPEND violations "${header}: folder '${from}' has no place in the layer order")
    continue()
  endif()
  file(STRINGS ${INCLUDE_DIR}/${header} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]poolkit/")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"].*$" "\\1" target "${line}")
    math(EXPR edges "${edges} + 1")
    layer_of(${target} to)
    if(NOT DEFINED rung_${to})
      list(APPEND violations "${header} -> ${target}: folder '${to}' has no place in the layer order")
    elseif(NOT from STREQUAL to AND NOT rung_${to} LESS rung_${from})
      list(APPEND violations "${header} (${from}) -> ${target} (${to})")
    endif()
  endforeach()
endforeach()

list(LENGTH headers header_count)
if(violations)
  list(LENGTH violations count)
  list(JOIN violations "\n  " text)
  message(FATAL_ERROR "${count} include(s) against the layer order "
                      "core < upstream, strategy < adaptor < interop, observe < top level:\n  ${text}")
endif()
message(STATUS "include layers: ${header_count} headers, ${edges} poolkit includes, all in order")
