#pragma once
// Bulk (SIMD, runtime-dispatched via Google Highway) versions of the codecs in
// codecs.h. Every function is bit-exact with the scalar `*_ref` oracle applied
// element by element (tests/unit/core/test_codecs_simd.cpp proves it for every
// compiled target), so callers may mix bulk and scalar paths freely.
//
// Arrays may have any length, including 0, and need no alignment. `in` and
// `out` must not overlap unless noted.
#include <cstddef>
#include <cstdint>

namespace selq {

void bf16_to_f32_bulk(const std::uint16_t* in, float* out, std::size_t n);
void f32_to_bf16_bulk(const float* in, std::uint16_t* out, std::size_t n);

// f32_to_e4m3_sat_ref per element.
void f32_to_e4m3_sat_bulk(const float* in, std::uint8_t* out, std::size_t n);
void bf16_to_e4m3_sat_bulk(const std::uint16_t* in, std::uint8_t* out, std::size_t n);

// f32_to_e2m1_ref per element, one code per byte.
void f32_to_e2m1_bulk(const float* in, std::uint8_t* codes, std::size_t n);
// Two codes per byte: element 2i in the low nibble, 2i+1 in the high nibble
// (torch float4_e2m1fn_x2 / compressed-tensors order). Writes (n+1)/2 bytes; n
// should be even, and an odd n leaves the last high nibble 0.
void f32_to_e2m1_packed_bulk(const float* in, std::uint8_t* packed, std::size_t n);
void bf16_to_e2m1_packed_bulk(const std::uint16_t* in, std::uint8_t* packed, std::size_t n);

// e4m3_to_f32 per element.
void e4m3_to_f32_bulk(const std::uint8_t* in, float* out, std::size_t n);
// e2m1_to_f32 of the n nibbles in (n+1)/2 packed bytes, same order as above.
void e2m1_packed_to_f32_bulk(const std::uint8_t* packed, float* out, std::size_t n);

// out[i] = in[i] / divisor with IEEE division (not multiplication by the
// reciprocal), because schemes must match torch's `x / scale` bit for bit.
// in == out is allowed.
void scale_f32_bulk(const float* in, float* out, std::size_t n, float divisor);

// max |x|; any NaN makes the result NaN; 0 for n == 0.
float amax_f32(const float* in, std::size_t n);
float amax_bf16(const std::uint16_t* in, std::size_t n);

// Name of the Highway target that the calls above dispatch to (e.g. "AVX2").
const char* codecs_simd_target();

}  // namespace selq
