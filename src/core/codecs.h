#pragma once
// Scalar reference conversions between F32/BF16/F16 and the small float
// formats of docs/FORMAT_RULES.md §2-§4. These `*_ref` functions are the oracle: the
// SIMD bulk paths (codecs_simd.h) are tested bit-exact against them, and they
// are tested against ml_dtypes/torch in tests/crosscheck.
//
// Rounding is round-to-nearest-even everywhere (torch, ml_dtypes,
// compressed-tensors, Quark all use RNE for elements).
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace selq {

// ---- 16-bit floats ----
float bf16_to_f32(std::uint16_t b);
// RNE; NaN stays NaN (quiet bit set), like torch/ggml.
std::uint16_t f32_to_bf16_ref(float f);
// The BF16 bits of `values` when every one is exactly a BF16 value (its low 16
// bits zero, NaN payloads included), else none: what may be held in half the bytes.
std::optional<std::vector<std::uint16_t>> exact_bf16(std::span<const float> values);
float f16_to_f32(std::uint16_t h);
std::uint16_t f32_to_f16_ref(float f);

// ---- FP8 E4M3FN (bias 7, max 448 = 0x7E, NaN = 0x7F/0xFF, no inf) ----
float e4m3_to_f32(std::uint8_t b);
// Saturating: finite values beyond ±448 clamp to ±448 (what compressed-tensors
// does by clamping before the cast); ±Inf also clamp; NaN -> 0x7F | sign.
std::uint8_t f32_to_e4m3_sat_ref(float f);
// ml_dtypes (and torch's eager cast before 2.13): anything that rounds past
// 448 is NaN (so 464 -> 0x7E but 464.5 -> 0x7F), ±Inf -> NaN. torch >= 2.13
// eager `.to(float8_e4m3fn)` saturates instead, i.e. matches the _sat variant.
std::uint8_t f32_to_e4m3_nonsat_ref(float f);

// ---- FP8 E5M2 (IEEE-like, bias 15, max 57344, inf 0x7C) ----
float e5m2_to_f32(std::uint8_t b);
std::uint8_t f32_to_e5m2_sat_ref(float f);     // clamps to ±57344, Inf too
std::uint8_t f32_to_e5m2_nonsat_ref(float f);  // overflow -> ±Inf

// ---- FP4 E2M1 (codes 0..7 = 0,.5,1,1.5,2,3,4,6; bit 3 = sign) ----
float e2m1_to_f32(std::uint8_t code);
// Saturates to ±6 (ml_dtypes and every quantizer do); NaN -> 0x7 | sign (there
// is no NaN code; ml_dtypes maps NaN to a zero, see codecs.cpp for why not).
std::uint8_t f32_to_e2m1_ref(float f);

// ---- E8M0 scales (bias 127, 0xFF = NaN) ----
float e8m0_to_f32(std::uint8_t b);  // 0x00 -> 2^-127 (subnormal float)
// torch/ml_dtypes cast semantics: RNE on the exponent (1.5 -> 0x80). Zero and
// negatives give 0xFF like ml_dtypes (torch ignores the sign instead).
std::uint8_t f32_to_e8m0_rne_ref(float f);

enum class ScaleRule { Floor, Ceil, Even, RCeil };
// Biased E8M0 exponent of the shared block scale for a block whose largest
// magnitude is `amax` (docs/FORMAT_RULES.md §2.4 "Scale rounding modes").
//   elem_emax:      exponent of the element format's max (2 for E2M1, 8 for E4M3)
//   elem_mbits:     mantissa bits of the element format (1 for E2M1, 3 for E4M3)
//   elem_max:       largest element magnitude (6 for E2M1, 448 for E4M3)
// amax == 0 gives the smallest exponent the rule allows (see codecs.cpp).
// NaN/Inf amax gives 0xFF.
std::uint8_t e8m0_scale_from_amax_ref(float amax, ScaleRule rule, int elem_emax, int elem_mbits,
                                      float elem_max);

}  // namespace selq
