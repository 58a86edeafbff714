#include "core/codecs.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <cmath>
#include <limits>

namespace selq {
namespace {

// A small float format: 1 sign bit, `ebits` exponent bits, `mbits` mantissa
// bits, exponent bias `bias`, largest finite magnitude `max_finite`.
struct MiniFloat {
  int ebits;
  int mbits;
  int bias;
  float max_finite;
};
constexpr MiniFloat kE4M3{4, 3, 7, 448.0f};
constexpr MiniFloat kE5M2{5, 2, 15, 57344.0f};
constexpr MiniFloat kE2M1{2, 1, 1, 6.0f};

// Rounds |a| (finite, >= 0) to the nearest representable value of `fmt` with
// ties to even, ignoring the top of the range (the caller decides what
// overflow means). Returns the rounded magnitude as an unsigned code
// (exponent << mbits | mantissa), which may be one binade past max_finite.
// Written by hand because the reference must be independent of the SIMD code
// and of any library whose rounding we are checking.
std::uint32_t round_magnitude_rne(float a, const MiniFloat& fmt) {
  const int emin = 1 - fmt.bias;  // exponent of the smallest normal
  if (a == 0.0f) return 0;
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)  => floor(log2 a) = e - 1
  int exp = std::max(e - 1, emin);
  // Quantum (spacing) of the binade: 2^(exp - mbits). Scaling by a power of two
  // is exact, and nearbyint uses the default ties-to-even mode.
  float q = std::nearbyint(std::ldexp(a, fmt.mbits - exp));
  std::uint32_t qi = static_cast<std::uint32_t>(q);
  // qi is in [0, 2^(mbits+1)]; values >= 2^mbits are normal in binade `exp`.
  if (exp == emin && qi < (1u << fmt.mbits)) return qi;  // subnormal (or zero)
  if (qi == (2u << fmt.mbits)) {  // rounded up into the next binade
    ++exp;
    qi = 1u << fmt.mbits;
  }
  const std::uint32_t biased = static_cast<std::uint32_t>(exp + fmt.bias);
  return (biased << fmt.mbits) | (qi - (1u << fmt.mbits));
}

float decode_minifloat(std::uint32_t code, const MiniFloat& fmt) {
  const std::uint32_t sign = code >> (fmt.ebits + fmt.mbits);
  const std::uint32_t exp = (code >> fmt.mbits) & ((1u << fmt.ebits) - 1);
  const std::uint32_t man = code & ((1u << fmt.mbits) - 1);
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(man), 1 - fmt.bias - fmt.mbits);
  else
    v = std::ldexp(static_cast<float>(man | (1u << fmt.mbits)),
                   static_cast<int>(exp) - fmt.bias - fmt.mbits);
  return sign ? -v : v;
}

std::uint8_t sign_bit8(float f, int shift) {
  return static_cast<std::uint8_t>(std::signbit(f) ? (1u << shift) : 0u);
}

}  // namespace

// ---------------------------------------------------------------- 16-bit

float bf16_to_f32(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

std::uint16_t f32_to_bf16_ref(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if (std::isnan(f)) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

std::optional<std::vector<std::uint16_t>> exact_bf16(std::span<const float> values) {
  std::vector<std::uint16_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::uint32_t u;
    std::memcpy(&u, &values[i], 4);
    if ((u & 0xFFFFu) != 0) return std::nullopt;
    bits[i] = static_cast<std::uint16_t>(u >> 16);
  }
  return bits;
}

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = (h >> 15) & 1u;
  const std::uint32_t exp = (h >> 10) & 0x1Fu;
  const std::uint32_t man = h & 0x3FFu;
  float v;
  if (exp == 0x1F)
    v = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else if (exp == 0)
    v = std::ldexp(static_cast<float>(man), -24);
  else
    v = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

std::uint16_t f32_to_f16_ref(float f) {
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return sign | 0x7E00;
  const float a = std::fabs(f);
  static constexpr MiniFloat kF16{5, 10, 15, 65504.0f};
  if (std::isinf(a)) return sign | 0x7C00;
  const std::uint32_t code = round_magnitude_rne(a, kF16);
  if (code >= 0x7C00) return sign | 0x7C00;  // overflow to infinity (IEEE)
  return static_cast<std::uint16_t>(sign | code);
}

// ---------------------------------------------------------------- E4M3FN

float e4m3_to_f32(std::uint8_t b) {
  if ((b & 0x7F) == 0x7F) return std::numeric_limits<float>::quiet_NaN();
  return decode_minifloat(b, kE4M3);
}

std::uint8_t f32_to_e4m3_sat_ref(float f) {
  const std::uint8_t s = sign_bit8(f, 7);
  if (std::isnan(f)) return s | 0x7F;
  const float a = std::min(std::fabs(f), kE4M3.max_finite);
  return s | static_cast<std::uint8_t>(round_magnitude_rne(a, kE4M3));
}

std::uint8_t f32_to_e4m3_nonsat_ref(float f) {
  const std::uint8_t s = sign_bit8(f, 7);
  const float a = std::fabs(f);
  if (std::isnan(f) || std::isinf(a)) return s | 0x7F;
  const std::uint32_t code = round_magnitude_rne(a, kE4M3);
  if (code > 0x7E) return s | 0x7F;  // rounded past 448: NaN
  return s | static_cast<std::uint8_t>(code);
}

// ---------------------------------------------------------------- E5M2

float e5m2_to_f32(std::uint8_t b) {
  const std::uint8_t m = b & 0x7F;
  if (m > 0x7C) return std::numeric_limits<float>::quiet_NaN();
  if (m == 0x7C) return (b & 0x80) ? -std::numeric_limits<float>::infinity()
                                   : std::numeric_limits<float>::infinity();
  return decode_minifloat(b, kE5M2);
}

std::uint8_t f32_to_e5m2_sat_ref(float f) {
  const std::uint8_t s = sign_bit8(f, 7);
  if (std::isnan(f)) return s | 0x7F;
  const float a = std::min(std::fabs(f), kE5M2.max_finite);
  return s | static_cast<std::uint8_t>(round_magnitude_rne(a, kE5M2));
}

std::uint8_t f32_to_e5m2_nonsat_ref(float f) {
  const std::uint8_t s = sign_bit8(f, 7);
  if (std::isnan(f)) return s | 0x7F;
  const float a = std::fabs(f);
  if (std::isinf(a)) return s | 0x7C;
  const std::uint32_t code = round_magnitude_rne(a, kE5M2);
  if (code >= 0x7C) return s | 0x7C;
  return s | static_cast<std::uint8_t>(code);
}

// ---------------------------------------------------------------- E2M1

float e2m1_to_f32(std::uint8_t code) { return decode_minifloat(code & 0x0F, kE2M1); }

std::uint8_t f32_to_e2m1_ref(float f) {
  const std::uint8_t s = sign_bit8(f, 3);
  // E2M1 has no NaN or Inf. Like ml_dtypes' float4_e2m1fn, we saturate Inf to
  // ±6. Deliberate difference: ml_dtypes 0.6 turns NaN into a zero of the
  // opposite sign (+NaN -> 0x8, -NaN -> 0x0), which silently hides it; we
  // return ±6 (0x7 | sign) so a NaN stays loud after dequantisation. Schemes
  // reject NaN weights before they get here.
  if (std::isnan(f)) return s | 0x7;
  const float a = std::min(std::fabs(f), kE2M1.max_finite);
  return s | static_cast<std::uint8_t>(round_magnitude_rne(a, kE2M1));
}

// ---------------------------------------------------------------- E8M0

float e8m0_to_f32(std::uint8_t b) {
  if (b == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(b) - 127);
}

std::uint8_t f32_to_e8m0_rne_ref(float f) {
  // E8M0 has no zero and no sign: ml_dtypes answers NaN for them (torch
  // instead ignores the sign and maps 0 to 0x00; we follow ml_dtypes because a
  // non-positive scale is a bug upstream and NaN makes it visible).
  if (std::isnan(f) || std::isinf(f) || f <= 0.0f) return 0xFF;
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t exp_field = (u >> 23) & 0xFFu;
  const std::uint32_t man = u & 0x7FFFFFu;
  // Round the significand to zero fraction bits, ties to even. The kept bit is
  // the implicit leading bit: 1 for normals (so the tie at 1.5 rounds up) and
  // 0 for subnormals (so exactly 2^-127 = 0x00 stays, anything above rounds up
  // to 2^-126). torch and ml_dtypes agree on this.
  const bool kept_odd = exp_field != 0;
  const bool round_up = man > 0x400000u || (man == 0x400000u && kept_odd);
  const std::uint32_t biased = exp_field + (round_up ? 1u : 0u);
  if (biased > 254) return 0xFF;
  return static_cast<std::uint8_t>(biased);
}

std::uint8_t e8m0_scale_from_amax_ref(float amax, ScaleRule rule, int elem_emax, int elem_mbits,
                                      float elem_max) {
  if (std::isnan(amax) || std::isinf(amax)) return 0xFF;
  amax = std::fabs(amax);
  int unbiased = -127;
  if (amax == 0.0f) {
    // An all-zero block: every reference ends at the smallest scale (torchao
    // and vLLM clamp log2(0) = -inf up to -127).
    unbiased = -127;
  } else {
    std::uint32_t bits = std::bit_cast<std::uint32_t>(amax);
    if (rule == ScaleRule::Even) {
      // Round the significand of amax to the element's mantissa width first
      // (carry may bump the exponent), then take the floor of log2.
      bits += 1u << (23 - elem_mbits - 1);
      bits &= 0xFF800000u;
    }
    const int exp_field = static_cast<int>((bits >> 23) & 0xFF);
    const int floor_log2 = exp_field - 127;  // subnormal amax -> -127, clamps below anyway
    switch (rule) {
      case ScaleRule::Floor:
      case ScaleRule::Even:
        unbiased = floor_log2 - elem_emax;
        break;
      case ScaleRule::Ceil: {
        const bool exact_pow2 = (bits & 0x7FFFFFu) == 0 && exp_field != 0;
        unbiased = (exact_pow2 ? floor_log2 : floor_log2 + 1) - elem_emax;
        break;
      }
      case ScaleRule::RCeil: {
        // E8M0 of amax/elem_max rounded up (PTX cvt.rp.ue8m0x2.f32).
        const float d = amax / elem_max;
        const std::uint32_t db = std::bit_cast<std::uint32_t>(d);
        const int dexp = static_cast<int>((db >> 23) & 0xFF);
        if (dexp == 0) {
          // Subnormal quotient: 0x00 means 2^-127, so anything above that
          // rounds up to 2^-126 (torchao _f32_to_e8m0_rceil, PTX cvt.rp).
          unbiased = (db & 0x7FFFFFu) > 0x400000u ? -126 : -127;
        } else {
          unbiased = dexp - 127 + ((db & 0x7FFFFFu) != 0 ? 1 : 0);
        }
        break;
      }
    }
  }
  int biased = unbiased + 127;
  if (biased < 0) biased = 0;
  if (biased > 254) biased = 254;
  return static_cast<std::uint8_t>(biased);
}

}  // namespace selq
