# detconv._kernels: the framework-free pybind11 module over the raw kernels
# (csrc/python/kernels_module.cc), written to ${DETCONV_OUTPUT_DIR}. Needs no
# TensorFlow: configure with -DDETCONV_WITH_TF=OFF to build only this.
find_package(Python COMPONENTS Interpreter Development.Module REQUIRED)
execute_process(
  COMMAND ${Python_EXECUTABLE} -m pybind11 --cmakedir
  OUTPUT_VARIABLE _dc_pybind11_dir RESULT_VARIABLE _dc_pybind11_rc
  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT _dc_pybind11_rc EQUAL 0)
  message(FATAL_ERROR "detconv: pybind11 is not installed for ${Python_EXECUTABLE} "
                      "(pip install pybind11, or configure with -DDETCONV_WITH_PYBIND=OFF)")
endif()
set(PYBIND11_FINDPYTHON ON)  # reuse the Python found above
find_package(pybind11 CONFIG REQUIRED HINTS "${_dc_pybind11_dir}")
message(STATUS "detconv: pybind11 ${pybind11_VERSION} for the kernels module")

# NO_EXTRAS: no LTO or stripping, so the module links the kernel libraries as built.
pybind11_add_module(detconv_kernels_module MODULE NO_EXTRAS ${CMAKE_CURRENT_SOURCE_DIR}/csrc/python/kernels_module.cc)
set_target_properties(detconv_kernels_module PROPERTIES
  OUTPUT_NAME "_kernels"
  LIBRARY_OUTPUT_DIRECTORY "${DETCONV_OUTPUT_DIR}")
target_compile_options(detconv_kernels_module PRIVATE ${DETCONV_HOST_FP_FLAGS} -O2)
target_link_libraries(detconv_kernels_module PRIVATE detconv_cpu detconv_gpu)
if(DETCONV_HAVE_CUDA)
  target_compile_definitions(detconv_kernels_module PRIVATE DETCONV_MODULE_CUDA=1)
endif()
