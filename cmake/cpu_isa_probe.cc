// Prints the best CPU kernel path this machine runs (cmake/cpu_isas.cmake, DETCONV_CPU_ISAS=AUTO).
#include <cstdio>
#include "cpu/host_isa.h"

int main() {
  const detconv::CpuIsa isa = detconv::host_best_isa();
  std::printf("%s", isa == detconv::CpuIsa::kAvx512 ? "avx512" : isa == detconv::CpuIsa::kAvx2 ? "avx2" : "scalar");
  return 0;
}
