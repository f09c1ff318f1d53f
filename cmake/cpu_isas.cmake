# Which CPU kernel paths to compile. Each path is one translation unit of all
# the kernels for one ISA, minutes of one core each (docs/install.md), so a
# from-source install builds what its machine runs:
#
#   DETCONV_CPU_ISAS  AUTO (default: scalar and the best path this machine's CPU
#                     runs, as cmake/cpu_isa_probe.cc finds it) | ALL | a list
#                     such as "scalar;avx2" (setup.py passes the environment
#                     variable of the same name).
#
# scalar is always built: it is the path any CPU runs, so a build copied to a
# machine without the others still works (the bits are the same on every path).
# Wheels and CI build ALL. Sets DETCONV_BUILT_CPU_ISAS (in build order: longest
# compile first, so on two cores the shorter ones fill the other core).
set(DETCONV_CPU_ISAS "AUTO" CACHE STRING "CPU kernel paths to build: AUTO (what this machine runs), ALL, or a list of scalar;avx2;avx512")

set(_dc_isa_request "${DETCONV_CPU_ISAS}")
string(REPLACE "," ";" _dc_isa_request "${_dc_isa_request}")
string(TOLOWER "${_dc_isa_request}" _dc_isa_request)

if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64|x64)$")
  set(_dc_isa_known avx512 avx2 scalar)
else()
  set(_dc_isa_known scalar)  # the AVX files are x86 intrinsics
endif()

if(_dc_isa_request STREQUAL "all")
  set(_dc_isa_want ${_dc_isa_known})
elseif(_dc_isa_request STREQUAL "auto")
  set(_dc_isa_best "")
  if(NOT CMAKE_CROSSCOMPILING)
    try_run(_dc_probe_run _dc_probe_compiled "${CMAKE_BINARY_DIR}/cpu_isa_probe"
            "${CMAKE_CURRENT_SOURCE_DIR}/cmake/cpu_isa_probe.cc"
            CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${CMAKE_CURRENT_SOURCE_DIR}/csrc"
            CXX_STANDARD 17
            RUN_OUTPUT_VARIABLE _dc_isa_best)
    if(NOT _dc_probe_compiled OR NOT _dc_probe_run EQUAL 0)
      set(_dc_isa_best "")
    endif()
  endif()
  if(_dc_isa_best STREQUAL "")
    set(_dc_isa_want ${_dc_isa_known})
    message(STATUS "detconv: could not tell which CPU paths this machine runs: building all")
  else()
    set(_dc_isa_want scalar ${_dc_isa_best})
  endif()
else()
  set(_dc_isa_want ${_dc_isa_request} scalar)
  foreach(_i IN LISTS _dc_isa_want)
    if(NOT _i IN_LIST _dc_isa_known)
      message(FATAL_ERROR "DETCONV_CPU_ISAS: '${_i}' is not a CPU path this build can compile "
                          "(expected AUTO, ALL or a list of: ${_dc_isa_known})")
    endif()
  endforeach()
endif()

set(DETCONV_BUILT_CPU_ISAS "")
foreach(_i IN LISTS _dc_isa_known)  # known order: longest compile first
  if(_i IN_LIST _dc_isa_want)
    list(APPEND DETCONV_BUILT_CPU_ISAS ${_i})
  endif()
endforeach()
list(JOIN DETCONV_BUILT_CPU_ISAS ", " _dc_isa_text)
if(DETCONV_BUILT_CPU_ISAS STREQUAL _dc_isa_known)
  message(STATUS "detconv: CPU kernel paths: ${_dc_isa_text}")
else()
  message(STATUS "detconv: CPU kernel paths: ${_dc_isa_text} (DETCONV_CPU_ISAS=ALL builds every path)")
endif()
