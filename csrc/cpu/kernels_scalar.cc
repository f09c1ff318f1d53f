// The CPU kernels compiled for the scalar path. Everything ISA-specific lives in
// its own namespace, and the target pragma starts after the shared headers, so
// no inline function shared with another path is compiled for this ISA.
#include <cmath>
#include <vector>
#include "cpu/cpu_common.h"


namespace detconv {
namespace cpu {
namespace scalar {
#include "cpu/simd_scalar.h"
#include "cpu/kernels_impl.h"
}  // namespace scalar

#ifdef DETCONV_CPU_PART_TABLE  // (kernels_impl.h: this unit's part)
IsaTable isa_table_scalar() { return scalar::make_table(); }
#endif

}  // namespace cpu
}  // namespace detconv

