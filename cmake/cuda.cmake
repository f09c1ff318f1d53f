# CUDA kernels (cuda/*.cu) as the static library detconv_gpu, or the stub
# csrc/gpu_stub.cc whose entry points report "built without CUDA".
#
#   DETCONV_CUDA        ON (fail without nvcc) | OFF | AUTO (default: when nvcc is found
#                       and a CUDA device is visible, for that device's architecture)
#   DETCONV_CUDA_ARCHS  CMake CUDA_ARCHITECTURES list, e.g. "80;90" or "90-real;90-virtual"
#                       or "native"; empty: the default list below. Also read from the
#                       environment variable of the same name when the cache entry is empty.
#
# Sets DETCONV_HAVE_CUDA (ON/OFF) in the including scope. See docs/cuda.md for
# the toolkit/architecture choice.
set(DETCONV_CUDA_ARCHS "" CACHE STRING "CUDA architectures for the kernels (empty: default list, see docs/cuda.md)")

set(DETCONV_HAVE_CUDA OFF)
string(TOUPPER "${DETCONV_CUDA}" _dc_cuda_mode)
if(NOT _dc_cuda_mode MATCHES "^(ON|OFF|AUTO|TRUE|FALSE|YES|NO|1|0)$")
  message(FATAL_ERROR "DETCONV_CUDA must be ON, OFF or AUTO (got '${DETCONV_CUDA}')")
endif()
if(_dc_cuda_mode MATCHES "^(ON|TRUE|YES|1)$")
  set(_dc_cuda_mode ON)
elseif(_dc_cuda_mode MATCHES "^(OFF|FALSE|NO|0)$")
  set(_dc_cuda_mode OFF)
endif()

set(_dc_device_archs "")
if(NOT _dc_cuda_mode STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(DETCONV_HAVE_CUDA ON)
  elseif(_dc_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "DETCONV_CUDA=ON but no CUDA compiler was found (put nvcc on PATH or set CUDACXX)")
  else()
    message(STATUS "detconv: no CUDA compiler found, building the CPU kernels only")
  endif()
  # AUTO builds GPU kernels only for a GPU this machine can run them on: the
  # toolkit's __nvcc_device_query (what CMake's "native" uses) lists the
  # visible devices' architectures and fails without a driver or device.
  if(DETCONV_HAVE_CUDA AND _dc_cuda_mode STREQUAL "AUTO")
    find_package(CUDAToolkit QUIET)
    find_program(_dc_devq __nvcc_device_query HINTS "${CUDAToolkit_BIN_DIR}" "$ENV{CUDA_PATH}/bin" /usr/local/cuda/bin
                 NO_CACHE)
    if(_dc_devq)
      execute_process(COMMAND "${_dc_devq}" OUTPUT_VARIABLE _dc_device_archs RESULT_VARIABLE _dc_devq_rc
                      ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(NOT _dc_devq_rc EQUAL 0)
        set(_dc_device_archs "")
      endif()
    endif()
    if(_dc_device_archs STREQUAL "")
      set(DETCONV_HAVE_CUDA OFF)
      message(STATUS "detconv: nvcc found but no CUDA device visible: building the CPU kernels only "
                     "(DETCONV_CUDA=ON builds the GPU kernels anyway; DETCONV_CUDA_ARCHS=\"80;90\" picks architectures)")
    endif()
  endif()
endif()

if(DETCONV_HAVE_CUDA)
  # Keep CMake from probing a default architecture; the target sets its own list.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES OFF)
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)

  set(_dc_archs "${DETCONV_CUDA_ARCHS}")
  if(_dc_archs STREQUAL "" AND DEFINED ENV{DETCONV_CUDA_ARCHS})
    set(_dc_archs "$ENV{DETCONV_CUDA_ARCHS}")
  endif()
  if(_dc_archs STREQUAL "" AND NOT _dc_device_archs STREQUAL "")
    # AUTO with a visible GPU: that device's architecture(s) only, e.g. "90" -> "90-real"
    string(REPLACE ";" "-real;" _dc_archs "${_dc_device_archs};")
    string(REGEX REPLACE ";$" "" _dc_archs "${_dc_archs}")
  endif()
  if(_dc_archs STREQUAL "")
    # SASS for Turing..Hopper, plus compute_90 PTX that the driver JIT-compiles
    # for anything newer (Blackwell). CUDA 13 dropped sm_70 (Volta); older
    # toolkits still build it.
    set(_dc_archs "75-real;80-real;86-real;89-real;90-real;90-virtual")
    if(CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 13.0)
      list(PREPEND _dc_archs "70-real")
    endif()
  endif()
  message(STATUS "detconv: CUDA ${CMAKE_CUDA_COMPILER_VERSION} kernels for architectures ${_dc_archs}")
  set(DETCONV_BUILT_CUDA_ARCHS "${_dc_archs}")
  set(DETCONV_BUILT_CUDA_VERSION "${CMAKE_CUDA_COMPILER_VERSION}")

  add_library(detconv_gpu STATIC
    ${CMAKE_CURRENT_SOURCE_DIR}/cuda/fprop.cu
    ${CMAKE_CURRENT_SOURCE_DIR}/cuda/dgrad.cu
    ${CMAKE_CURRENT_SOURCE_DIR}/cuda/wgrad.cu
    ${CMAKE_CURRENT_SOURCE_DIR}/cuda/bgrad.cu)
  set_target_properties(detconv_gpu PROPERTIES
    CUDA_ARCHITECTURES "${_dc_archs}"
    CUDA_STANDARD 17
    CUDA_STANDARD_REQUIRED ON
    POSITION_INDEPENDENT_CODE ON
    CUDA_SEPARABLE_COMPILATION OFF)
  target_include_directories(detconv_gpu PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/csrc)
  # The contract's numerics: no contraction into fma (every fma is an explicit
  # __fmaf_rn/__fma_rn/__hfma), subnormals kept, IEEE division/sqrt, no fast-math.
  target_compile_options(detconv_gpu PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false --ftz=false --prec-div=true --prec-sqrt=true -O3
                               -Xcompiler=-ffp-contract=off,-fno-fast-math>)
  # Static runtime: the glue libraries carry their own cudart and need only the driver.
  target_link_libraries(detconv_gpu PUBLIC CUDA::cudart_static)
else()
  add_library(detconv_gpu STATIC ${CMAKE_CURRENT_SOURCE_DIR}/csrc/gpu_stub.cc)
  target_include_directories(detconv_gpu PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/csrc)
endif()
