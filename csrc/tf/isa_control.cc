// Tiny C entry points (for ctypes) into the loaded op library: select the CPU
// ISA path (tests force each and compare bits), measure the FMA peak, and
// report the order version the library was compiled with.
#include "detconv/kernels.h"
#include "detconv/order.h"

extern "C" {
__attribute__((visibility("default"))) int detconv_order_version() { return detconv::kOrderVersion; }
__attribute__((visibility("default"))) int detconv_cpu_isa_force(int isa) {
  return detconv::cpu_isa_force(static_cast<detconv::CpuIsa>(isa)) ? 1 : 0;
}
__attribute__((visibility("default"))) int detconv_cpu_isa_active() {
  return static_cast<int>(detconv::cpu_isa_active());
}
__attribute__((visibility("default"))) double detconv_cpu_fma_peak_gflops(int threads) {
  return detconv::cpu_fma_peak_gflops(threads);
}
__attribute__((visibility("default"))) int detconv_cpu_isa_supported(int isa) {
  return detconv::cpu_isa_supported(static_cast<detconv::CpuIsa>(isa)) ? 1 : 0;
}
}
