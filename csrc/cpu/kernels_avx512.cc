// The CPU kernels compiled for the avx512 path. Everything ISA-specific lives in
// its own namespace, and the target pragma starts after the shared headers, so
// no inline function shared with another path is compiled for this ISA.
#include <cmath>
#include <vector>
#include "cpu/cpu_common.h"

#pragma GCC push_options
#define DETCONV_HAVE_F16C 1
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c")
namespace detconv {
namespace cpu {
namespace avx512 {
#include "cpu/simd_avx512.h"
#include "cpu/kernels_impl.h"
}  // namespace avx512

#ifdef DETCONV_CPU_PART_TABLE  // (kernels_impl.h: this unit's part)
IsaTable isa_table_avx512() { return avx512::make_table(); }
#endif

}  // namespace cpu
}  // namespace detconv
#pragma GCC pop_options
