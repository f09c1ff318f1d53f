// Scalar IEEE helpers shared by host and device code: 16-bit conversions,
// the single final rounding, canonical NaN, and exact binary16 arithmetic
// emulated in binary32 (docs/contract.md, "Types and rounding").
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include "detconv/problem.h"

namespace detconv {

DC_HD std::uint32_t f32_bits(float f) { std::uint32_t u; std::memcpy(&u, &f, 4); return u; }
DC_HD float bits_f32(std::uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
DC_HD std::uint64_t f64_bits(double d) { std::uint64_t u; std::memcpy(&u, &d, 8); return u; }
DC_HD double bits_f64(std::uint64_t u) { double d; std::memcpy(&d, &u, 8); return d; }

constexpr std::uint32_t kCanonNaN32 = 0x7FC00000u;
constexpr std::uint64_t kCanonNaN64 = 0x7FF8000000000000ull;
constexpr std::uint16_t kCanonNaN16 = 0x7E00u;
constexpr std::uint16_t kCanonNaNBF16 = 0x7FC0u;

// binary16 -> binary32, exact (subnormals included).
DC_HD float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  if (exp == 0x1F) return bits_f32(sign | 0x7F800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return bits_f32(sign);
    // subnormal: value = man * 2^-24, exact in binary32
    const float v = float(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

// binary32 -> binary16, round to nearest even, overflow to inf, canonical NaN.
DC_HD std::uint16_t float_to_half(float f) {
  const std::uint32_t u = f32_bits(f);
  const std::uint16_t sign = std::uint16_t((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kCanonNaN16;
  if (a >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 rounds to inf (inf included)
  if (a < 0x38800000u) {                          // below 2^-14: binary16 subnormal or zero
    if (a < 0x33000000u) return sign;             // < 2^-25: rounds to zero (2^-25 ties to 0)
    const std::uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u;
    const std::uint32_t shift = 126u - e;        // 14..24: value = m * 2^(e-150); units of 2^-24
    const std::uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    const std::uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return sign | std::uint16_t(r);
  }
  // normal: rebias and round 13 dropped bits (carry into the exponent is correct)
  std::uint32_t r = a - 0x38000000u;  // exponent 127 -> 15
  const std::uint32_t rem = r & 0x1FFFu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return sign | std::uint16_t(r);
}

DC_HD float bf16_to_float(std::uint16_t b) { return bits_f32(std::uint32_t(b) << 16); }

DC_HD std::uint16_t float_to_bf16(float f) {
  const std::uint32_t u = f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return kCanonNaNBF16;
  const std::uint32_t lsb = (u >> 16) & 1u;
  return std::uint16_t((u + 0x7FFFu + lsb) >> 16);  // nearest even; overflow carries into inf
}

DC_HD float canon32(float f) { return f != f ? bits_f32(kCanonNaN32) : f; }
DC_HD double canon64(double d) { return d != d ? bits_f64(kCanonNaN64) : d; }

// ------------------------------------------------------ padded taps, exactly
// A run of padded taps folds fma(+0, f_k, acc) for its filter values f_k.
// +0·f_k is ±0 for finite f_k and NaN otherwise, and acc + ±0 is acc except
// that −0 + +0 = +0; so the run equals ONE fma(+0, z, acc), with z the run's
// own fold from −0: z = fma(+0, f_k, z) gives
//   z = NaN  if some f_k is inf or NaN,
//   z = +0   else if some f_k has sign bit 0 (its +0 product turns −0 into +0),
//   z = −0   else (every product is −0: acc keeps its bits).
// Bit for bit, in every accumulation (binary16 included: ±0 and acc are
// binary16 values). docs/numerics.md, "Padded taps in one fma". The filter
// gradient folds z the same way in vectors, over dy (wgrad_impl.h).
template <class T>
struct PaddedRun {
  T z = T(-0.0);
  DC_HD void add(T f) { z = std::fma(T(0), f, z); }
  DC_HD void merge(const PaddedRun& o) { add(o.z); }  // o.z stands for o's run
  DC_HD T weight() const { return z; }
};

// ------------------------------------------------- exact binary16 arithmetic
// A binary16 value is held in a binary32. a*b of two such values is exact in
// binary32. a*b + c is summed with TwoSum and rounded to odd at 24 bits, which
// then rounds to nearest binary16 exactly as one IEEE binary16 fma would
// (24 >= 11 + 2; Boldo & Melquiond, "Emulation of FMA and correctly rounded
// sums: proved algorithms using rounding to odd").
DC_HD float round_to_odd_sum(float x, float y) {
  const float t = x + y;
  const float bb = t - x;
  const float e = (x - (t - bb)) + (y - bb);
  std::uint32_t u = f32_bits(t);
  if (e != 0.0f && (u & 1u) == 0u && (u & 0x7F800000u) != 0x7F800000u) {
    const bool grow = (e > 0.0f) == (t > 0.0f);
    u = grow ? u + 1u : u - 1u;
  }
  return bits_f32(u);
}
DC_HD float half_round(float f) { return half_to_float(float_to_half(f)); }
// binary16 fma / add on binary16 values stored in binary32.
DC_HD float fma_h16(float a, float b, float c) { return half_round(round_to_odd_sum(a * b, c)); }
DC_HD float add_h16(float a, float b) { return half_round(round_to_odd_sum(a, b)); }

}  // namespace detconv
