// The CPU kernels compiled for the avx2 path. Everything ISA-specific lives in
// its own namespace, and the target pragma starts after the shared headers, so
// no inline function shared with another path is compiled for this ISA.
#include <cmath>
#include <vector>
#include "cpu/cpu_common.h"

#pragma GCC push_options
#define DETCONV_HAVE_F16C 1
#pragma GCC target("avx2,fma,f16c")
namespace detconv {
namespace cpu {
namespace avx2 {
#include "cpu/simd_avx2.h"
#include "cpu/kernels_impl.h"
}  // namespace avx2

#ifdef DETCONV_CPU_PART_TABLE  // (kernels_impl.h: this unit's part)
IsaTable isa_table_avx2() { return avx2::make_table(); }
#endif

}  // namespace cpu
}  // namespace detconv
#pragma GCC pop_options
