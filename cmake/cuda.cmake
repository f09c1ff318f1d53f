# Placeholder until the CUDA issue: GPU entry points report "built without CUDA".
set(DETCONV_HAVE_CUDA OFF)
add_library(detconv_gpu STATIC ${CMAKE_CURRENT_SOURCE_DIR}/csrc/gpu_stub.cc)
target_include_directories(detconv_gpu PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/csrc)
