// Tiny C entry points (for ctypes) to select the CPU ISA path in the loaded
// op library, so tests can force each path and compare bits.
#include "detconv/kernels.h"

extern "C" {
__attribute__((visibility("default"))) int detconv_cpu_isa_force(int isa) {
  return detconv::cpu_isa_force(static_cast<detconv::CpuIsa>(isa)) ? 1 : 0;
}
__attribute__((visibility("default"))) int detconv_cpu_isa_active() {
  return static_cast<int>(detconv::cpu_isa_active());
}
__attribute__((visibility("default"))) int detconv_cpu_isa_supported(int isa) {
  return detconv::cpu_isa_supported(static_cast<detconv::CpuIsa>(isa)) ? 1 : 0;
}
}
