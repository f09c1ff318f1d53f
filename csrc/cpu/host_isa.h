// The best CPU kernel path this machine's CPU runs, from its features alone.
// Read at run time by dispatch.cc (which also asks whether the build holds that
// path) and at configure time by cmake/cpu_isa_probe.cc (DETCONV_CPU_ISAS=AUTO
// builds the paths this machine runs), so the two never disagree.
#pragma once
#include "detconv/kernels.h"

namespace detconv {

inline CpuIsa host_best_isa() {
#if defined(__x86_64__) || defined(_M_X64)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("f16c") &&
      __builtin_cpu_supports("fma"))
    return CpuIsa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
    return CpuIsa::kAvx2;
#endif
  return CpuIsa::kScalar;
}

}  // namespace detconv
