# Reads TensorFlow's compile and link flags from the installed TensorFlow and
# builds detconv/_detconv_ops.so, loaded with tf.load_op_library.
execute_process(
  COMMAND ${Python_EXECUTABLE} -c "import os; os.environ['TF_CPP_MIN_LOG_LEVEL']='3'; import tensorflow as tf; print(tf.__version__); print(';'.join(tf.sysconfig.get_compile_flags())); print(';'.join(tf.sysconfig.get_link_flags()))"
  OUTPUT_VARIABLE _tf_out RESULT_VARIABLE _tf_rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _tf_rc EQUAL 0)
  message(FATAL_ERROR "detconv: could not import tensorflow with ${Python_EXECUTABLE}; install tensorflow 2.21 or configure with -DDETCONV_WITH_TF=OFF")
endif()
string(REPLACE "\n" ";" _tf_lines "${_tf_out}")
list(GET _tf_lines 0 DETCONV_TF_VERSION)
list(GET _tf_lines 1 _tf_cflags)
list(GET _tf_lines 2 _tf_lflags)
string(REPLACE " " ";" _tf_cflags "${_tf_cflags}")
string(REPLACE " " ";" _tf_lflags "${_tf_lflags}")
if(NOT DETCONV_TF_VERSION MATCHES "^2\\.21\\.")
  message(FATAL_ERROR "detconv is pinned to TensorFlow 2.21.x, found ${DETCONV_TF_VERSION}")
endif()
message(STATUS "detconv: TensorFlow ${DETCONV_TF_VERSION}")

file(GLOB DETCONV_TF_SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/csrc/tf/*.cc)
add_library(detconv_ops SHARED ${DETCONV_TF_SOURCES})
set_target_properties(detconv_ops PROPERTIES PREFIX "_" OUTPUT_NAME "detconv_ops"
  LIBRARY_OUTPUT_DIRECTORY ${DETCONV_OUTPUT_DIR})
# TF's flags set -std=c++17 and the ABI; -O2 and no contraction for our glue too.
target_compile_options(detconv_ops PRIVATE ${_tf_cflags} ${DETCONV_HOST_FP_FLAGS} -O2 -Wno-sign-compare -Wno-deprecated-declarations -Wno-interference-size)
if(DETCONV_HAVE_CUDA)
  target_compile_definitions(detconv_ops PRIVATE DETCONV_GPU=1)
endif()
target_link_libraries(detconv_ops PRIVATE detconv_cpu detconv_gpu ${_tf_lflags})
