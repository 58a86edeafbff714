// Dequantization of ggml block types to F32 (docs/GGUF.md §2).
//
// Bit-exactness with ggml / gguf-py needs each product rounded on its own:
// a fused multiply-add (which GCC forms under its default -ffp-contract=fast
// when the target has FMA) changes the last bit of `d*q + m`. Hence the
// pragmas below rather than a build flag that every build would have to carry.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <cstring>

#include <fmt/format.h>

#include "core/codecs.h"
#include "core/error.h"
#include "runtime/gguf/gguf.h"

namespace selq::runtime {
namespace {

constexpr int kQK = 32;    // simple block types
constexpr int kQKK = 256;  // K-quants super-block

std::uint16_t rd16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
float h2f(const std::uint8_t* p) { return f16_to_f32(rd16(p)); }

void deq_q8_0(const std::uint8_t* b, float* y) {
  const float d = h2f(b);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * d;
}

void deq_q4_0(const std::uint8_t* b, float* y) {
  const float d = h2f(b);
  const std::uint8_t* qs = b + 2;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void deq_q4_1(const std::uint8_t* b, float* y) {
  const float d = h2f(b), m = h2f(b + 2);
  const std::uint8_t* qs = b + 4;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q5: the 5th bit of element j is bit j of the little-endian u32 qh.
int q5_value(const std::uint8_t* qs, std::uint32_t qh, int j) {
  const int lo = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
  return lo | static_cast<int>(((qh >> j) & 1u) << 4);
}

void deq_q5_0(const std::uint8_t* b, float* y) {
  const float d = h2f(b);
  std::uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(q5_value(b + 6, qh, j) - 16) * d;
}

void deq_q5_1(const std::uint8_t* b, float* y) {
  const float d = h2f(b), m = h2f(b + 2);
  std::uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(q5_value(b + 8, qh, j)) * d + m;
}

void deq_q8_k(const std::uint8_t* b, float* y) {
  float d;
  std::memcpy(&d, b, 4);
  for (int j = 0; j < kQKK; ++j) y[j] = d * static_cast<float>(static_cast<std::int8_t>(b[4 + j]));
}

// 6-bit scale and min of sub-block s from the packed 12 bytes (ggml's get_scale_min_k4).
void scale_min_k4(int s, const std::uint8_t* q, std::uint8_t& sc, std::uint8_t& m) {
  if (s < 4) {
    sc = q[s] & 63;
    m = q[s + 4] & 63;
  } else {
    sc = static_cast<std::uint8_t>((q[s + 4] & 0x0F) | ((q[s - 4] >> 6) << 4));
    m = static_cast<std::uint8_t>((q[s + 4] >> 4) | ((q[s] >> 6) << 4));
  }
}

void deq_q4_k(const std::uint8_t* b, float* y) {
  const float d = h2f(b), dmin = h2f(b + 2);
  const std::uint8_t* scales = b + 4;
  const std::uint8_t* qs = b + 16;
  for (int c = 0; c < kQKK / 64; ++c) {
    std::uint8_t sc0, m0, sc1, m1;
    scale_min_k4(2 * c, scales, sc0, m0);
    scale_min_k4(2 * c + 1, scales, sc1, m1);
    const float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
    const std::uint8_t* q = qs + 32 * c;
    for (int l = 0; l < 32; ++l) y[64 * c + l] = d0 * static_cast<float>(q[l] & 0x0F) - mm0;
    for (int l = 0; l < 32; ++l) y[64 * c + 32 + l] = d1 * static_cast<float>(q[l] >> 4) - mm1;
  }
}

void deq_q6_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* ql = b;
  const std::uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192);
  const float d = h2f(b + 208);
  for (int e = 0; e < kQKK; ++e) {
    const int n = e / 128, k = (e % 128) / 32, l = e % 32;
    const std::uint8_t lb = ql[64 * n + l + 32 * (k & 1)];
    const int lo4 = k < 2 ? (lb & 0x0F) : (lb >> 4);
    const int hi2 = (qh[32 * n + l] >> (2 * k)) & 3;
    const int q = (lo4 | (hi2 << 4)) - 32;
    y[e] = d * static_cast<float>(sc[e / 16]) * static_cast<float>(q);
  }
}

// E8M0 exponent halved (ggml_e8m0_to_fp32_half): the E2M1 table below is doubled.
float e8m0_half(std::uint8_t x) {
  const std::uint32_t bits = x < 2 ? (0x00200000u << x) : (static_cast<std::uint32_t>(x - 1) << 23);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void deq_mxfp4(const std::uint8_t* b, float* y) {
  static constexpr std::int8_t kValues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const float d = e8m0_half(b[0]);
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = d * static_cast<float>(kValues[b[1 + j] & 0x0F]);
    y[j + 16] = d * static_cast<float>(kValues[b[1 + j] >> 4]);
  }
}

using BlockFn = void (*)(const std::uint8_t*, float*);

BlockFn block_fn(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0: return deq_q8_0;
    case GgmlType::Q4_0: return deq_q4_0;
    case GgmlType::Q4_1: return deq_q4_1;
    case GgmlType::Q5_0: return deq_q5_0;
    case GgmlType::Q5_1: return deq_q5_1;
    case GgmlType::Q8_K: return deq_q8_k;
    case GgmlType::Q4_K: return deq_q4_k;
    case GgmlType::Q6_K: return deq_q6_k;
    case GgmlType::MXFP4: return deq_mxfp4;
    default: return nullptr;
  }
}

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(std::uint32_t id) {
  switch (static_cast<GgmlType>(id)) {
    case GgmlType::F32: return GgmlTypeTraits{"F32", 1, 4, true};
    case GgmlType::F16: return GgmlTypeTraits{"F16", 1, 2, true};
    case GgmlType::BF16: return GgmlTypeTraits{"BF16", 1, 2, true};
    case GgmlType::Q4_0: return GgmlTypeTraits{"Q4_0", 32, 18, true};
    case GgmlType::Q4_1: return GgmlTypeTraits{"Q4_1", 32, 20, true};
    case GgmlType::Q5_0: return GgmlTypeTraits{"Q5_0", 32, 22, true};
    case GgmlType::Q5_1: return GgmlTypeTraits{"Q5_1", 32, 24, true};
    case GgmlType::Q8_0: return GgmlTypeTraits{"Q8_0", 32, 34, true};
    case GgmlType::Q8_1: return GgmlTypeTraits{"Q8_1", 32, 36, false};
    case GgmlType::Q2_K: return GgmlTypeTraits{"Q2_K", 256, 84, false};
    case GgmlType::Q3_K: return GgmlTypeTraits{"Q3_K", 256, 110, false};
    case GgmlType::Q4_K: return GgmlTypeTraits{"Q4_K", 256, 144, true};
    case GgmlType::Q5_K: return GgmlTypeTraits{"Q5_K", 256, 176, false};
    case GgmlType::Q6_K: return GgmlTypeTraits{"Q6_K", 256, 210, true};
    case GgmlType::Q8_K: return GgmlTypeTraits{"Q8_K", 256, 292, true};
    case GgmlType::I8: return GgmlTypeTraits{"I8", 1, 1, false};
    case GgmlType::I16: return GgmlTypeTraits{"I16", 1, 2, false};
    case GgmlType::I32: return GgmlTypeTraits{"I32", 1, 4, false};
    case GgmlType::I64: return GgmlTypeTraits{"I64", 1, 8, false};
    case GgmlType::F64: return GgmlTypeTraits{"F64", 1, 8, false};
    case GgmlType::MXFP4: return GgmlTypeTraits{"MXFP4", 32, 17, true};
  }
  return std::nullopt;
}

void dequantize_row(GgmlType type, const std::uint8_t* src, float* dst, std::uint64_t n) {
  const auto traits = ggml_type_traits(static_cast<std::uint32_t>(type));
  if (!traits || !traits->dequantizable)
    throw_unsupported(fmt::format("cannot dequantize ggml type {}", static_cast<std::uint32_t>(type)));
  if (n % traits->block_elems != 0)
    throw_bad_input(fmt::format("{} elements are not a whole number of {} blocks", n, traits->name));
  if (type == GgmlType::F32) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  if (type == GgmlType::F16 || type == GgmlType::BF16) {
    for (std::uint64_t k = 0; k < n; ++k)
      dst[k] = type == GgmlType::F16 ? f16_to_f32(rd16(src + 2 * k)) : bf16_to_f32(rd16(src + 2 * k));
    return;
  }
  const BlockFn fn = block_fn(type);
  for (std::uint64_t blk = 0; blk < n / traits->block_elems; ++blk)
    fn(src + blk * traits->block_bytes, dst + blk * traits->block_elems);
}

}  // namespace selq::runtime
