// Integer weights (int4/int8), per output channel or per group of input
// channels, with compressed-tensors semantics (calculate_qparams, _quantize):
//   symmetric:  s = T(amax / ((2^b - 1) / 2))   i.e. amax/7.5 (int4), amax/127.5 (int8)
//   asymmetric: min/max widened to include 0; s = T(T(max - min) / (2^b - 1)),
//               zp = rne(clamp(T(qmin - T(min / s)), qmin, qmax))
//   q = rne(clamp(T(T(x / s) + zp), qmin, qmax));  zero scale -> finfo(dtype).eps
// T is the weight's dtype when the scale is stored in it (compressed-tensors
// keeps scales in the model dtype), else f32 rounded once to the scale dtype.
// pack-quantized: offset-binary q + 2^(b-1), element i at bit i*b of the row,
// LSB first in I32 words; zero points packed the same way along the output
// dimension (pack_to_int32(packed_dim=0)), so each group column is a
// bit-stream of `out` values.
#include <fmt/format.h>

#include "quant/detail.h"
#include "quant/detail_simd.h"
#include "quant/rounding_mse.h"
#include "quant/row_kernel.h"

namespace selq::quant::detail {

// The packed layout is written as bytes (see quantize_int).
static_assert(std::endian::native == std::endian::little);

namespace {
inline float rne_small(float v) {  // |v| < 2^22
  return (v + 12582912.0f) - 12582912.0f;
}

// round_to, without its NaN branch where the value is a number: the search
// (rounding `mse`) asks for eight ranges per group.
inline float round_scale(DType t, float v) { return v == v ? round_to_fast(t, v) : round_to(t, v); }

}  // namespace

void int_group_qparams(const IntRowParams& p, float qmin, float qmax, float mn, float mx, float& s, float& zp) {
  const float range = static_cast<float>((1 << p.bits) - 1);
  zp = 0.0f;
  if (p.sym) {
    s = round_scale(p.mt, std::max(-mn, mx) / (range / 2.0f));
    if (p.sd != p.mt) s = round_scale(p.sd, s);
  } else {
    s = round_to(p.mt, round_to(p.mt, mx - mn) / range);
    if (p.sd != p.mt) s = round_to(p.sd, s);
    float z = round_to(p.mt, qmin - round_to(p.mt, mn / s));
    // 0/0 for an all-zero group: torch's NaN -> int8 cast yields 0.
    z = z != z ? 0.0f : std::clamp(z, qmin, qmax);
    zp = std::nearbyint(z);
  }
  if (s == 0.0f) s = dtype_eps(p.sd);
}

namespace {

inline void put_bits(std::uint8_t* words, std::uint64_t word_stride_bytes, std::uint64_t bitpos,
                     std::uint32_t value) {
  // b divides 32 (4 or 8), so a value never straddles two words.
  const std::uint64_t w = bitpos / 32;
  const std::uint32_t shift = static_cast<std::uint32_t>(bitpos % 32);
  std::uint32_t cur;
  std::memcpy(&cur, words + w * word_stride_bytes, 4);
  cur |= value << shift;
  std::memcpy(words + w * word_stride_bytes, &cur, 4);
}

inline std::uint32_t get_bits(const std::uint8_t* words, std::uint64_t word_stride_bytes,
                              std::uint64_t bitpos, int bits) {
  std::uint32_t cur;
  std::memcpy(&cur, words + (bitpos / 32) * word_stride_bytes, 4);
  return (cur >> (bitpos % 32)) & ((1u << bits) - 1u);
}

int out_index(OutRole role, const SchemeSpec& spec) {
  // Weight, Scale, [ZeroPoint], [WeightShape]
  switch (role) {
    case OutRole::Weight: return 0;
    case OutRole::Scale: return 1;
    case OutRole::ZeroPoint: return 2;
    case OutRole::WeightShape: return spec.symmetric ? 2 : 3;
    default: return -1;
  }
}
}  // namespace

void stored_group_qparams(const SchemeSpec& spec, std::int64_t out, std::int64_t in, const std::uint8_t* scales,
                          const std::uint8_t* zps, std::int64_t e, std::int64_t r, std::int64_t gi, float& s,
                          float& zp) {
  const int b = spec.bits;
  const std::int64_t ngroups = in / (spec.kind == SchemeKind::IntChannel ? in : spec.group_size);
  const std::uint64_t sidx = static_cast<std::uint64_t>((e * out + r) * ngroups + gi);
  s = load_float_element(spec.scale_dtype, scales, sidx);
  zp = 0.0f;
  if (spec.symmetric) return;
  if (spec.int_pack_int32) {
    const std::int64_t zp_words = ceil_div(out * b, 32);
    zp = static_cast<float>(static_cast<int>(get_bits(zps + (e * zp_words * ngroups + gi) * 4,
                                                      static_cast<std::uint64_t>(ngroups) * 4,
                                                      static_cast<std::uint64_t>(r * b), b)) -
                            (1 << (b - 1)));
  } else {
    zp = static_cast<float>(static_cast<std::int8_t>(zps[sidx]));
  }
}

void int_row(const IntRowParams& p, const float* x, std::int64_t in, std::uint8_t* codes,
             float* scales, float* zps, ErrorMetrics& m, bool simd) {
  const float qmin = -std::ldexp(1.0f, p.bits - 1), qmax = std::ldexp(1.0f, p.bits - 1) - 1.0f;
  const std::int64_t ngroups = in / p.gw;
  thread_local std::vector<float> mn, mx;  // a heap allocation per row showed in profiles
  mn.resize(static_cast<std::size_t>(ngroups));
  mx.resize(mn.size());
  // F16 quotients need f16 rounding, which only the scalar path has.
  simd = simd && p.ct != DType::F16;
  if (simd)
    block_minmax_simd(x, static_cast<std::size_t>(in), static_cast<std::size_t>(p.gw), mn.data(),
                      mx.data());
  for (std::int64_t gi = 0; gi < ngroups; ++gi) {
    float& lo = mn[static_cast<std::size_t>(gi)];
    float& hi = mx[static_cast<std::size_t>(gi)];
    if (!simd) {
      lo = hi = 0.0f;
      const float* xg = x + gi * p.gw;
      for (std::int64_t i = 0; i < p.gw; ++i) {
        lo = std::min(lo, xg[i]);
        hi = std::max(hi, xg[i]);
      }
    }
    if (!keeps_given_scales(p.rounding)) int_group_qparams(p, qmin, qmax, lo, hi, scales[gi], zps[gi]);
  }
  // The scales are chosen; the encoding below uses them, whichever rounding chose.
  if (searches_scales(p.rounding)) mse_int_scales(p, qmin, qmax, x, in, mn.data(), mx.data(), scales, zps);
  if (simd) {
    int_groups_simd(x, static_cast<std::size_t>(in), static_cast<std::size_t>(p.gw), scales, zps,
                    !p.sym, p.ct == DType::BF16, qmin, qmax, p.offset, codes, m);
    return;
  }
  if (keeps_given_scales(p.rounding))  // GPTQ's weights are finite: they take the SIMD path
    throw Error(ErrorKind::Internal, "int_row: kept scales on a non-finite row");
  std::vector<float> dq(static_cast<std::size_t>(p.gw));
  for (std::int64_t gi = 0; gi < ngroups; ++gi) {
    const float* xg = x + gi * p.gw;
    const float s = scales[gi], zp = zps[gi];
    std::uint64_t clipped = 0;
    for (std::int64_t i = 0; i < p.gw; ++i) {
      float v = round_to_fast(p.ct, xg[i] / s);
      if (!p.sym) v = round_to_fast(p.ct, v + zp);
      const float q = rne_small(std::clamp(v, qmin - 1.0f, qmax + 1.0f));
      const float qc = std::clamp(q, qmin, qmax);
      clipped += q != qc;
      dq[static_cast<std::size_t>(i)] = (qc - zp) * s;
      if (codes) codes[gi * p.gw + i] = static_cast<std::uint8_t>(static_cast<std::int32_t>(qc) + p.offset);
    }
    block_metrics(xg, dq.data(), static_cast<std::size_t>(p.gw), m);
    m.blocks += 1;
    m.clipped_elements += clipped;
    m.clipped_blocks += clipped != 0;
  }
}

IntRowParams int_row_params(const SchemeSpec& spec, DType t, std::int64_t in) {
  return {spec.bits,
          spec.symmetric,
          spec.scale_dtype,
          spec.scale_dtype == t ? t : DType::F32,
          promote(t, spec.scale_dtype),
          spec.kind == SchemeKind::IntChannel ? in : spec.group_size,
          spec.int_pack_int32 ? 1 << (spec.bits - 1) : 0,
          spec.rounding.value};
}

namespace {

// Where one expert matrix's int outputs go, and their layout.
struct IntOutputs {
  std::uint8_t* w;       // the matrix's codes (bytes, or packed I32 words)
  std::uint8_t* s;       // every expert's scales
  std::uint8_t* zp;      // every expert's zero points, null when symmetric
  bool packed;
  int bits;
  std::int64_t out, in, ngroups, words_per_row, zp_words, e;
};

IntOutputs int_outputs(const MatrixJob& job, const IntRowParams& p) {
  const SchemeSpec& spec = *job.spec;
  IntOutputs o{};
  o.packed = spec.int_pack_int32;
  o.bits = spec.bits;
  o.out = job.g.out;
  o.in = job.g.in;
  o.e = job.e;
  o.ngroups = o.in / p.gw;
  o.words_per_row = ceil_div(o.in * o.bits, 32);
  o.zp_words = ceil_div(o.out * o.bits, 32);
  o.w = job.outs[0].data() + static_cast<std::uint64_t>(o.packed ? job.e * o.out * o.words_per_row * 4
                                                                 : job.e * o.out * o.in);
  o.s = job.outs[1].data();
  o.zp = spec.symmetric ? nullptr : job.outs[2].data();
  return o;
}

// GPTQ keeps the scales and zero points the outputs already hold: read them
// ([out, ngroups] each) before packed outputs are cleared.
void read_kept_qparams(const MatrixJob& job, const IntOutputs& o, std::vector<float>& s, std::vector<float>& zp) {
  s.resize(static_cast<std::size_t>(o.out * o.ngroups));
  zp.resize(s.size());
  for (std::int64_t r = 0; r < o.out; ++r)
    for (std::int64_t gi = 0; gi < o.ngroups; ++gi) {
      const auto i = static_cast<std::size_t>(r * o.ngroups + gi);
      stored_group_qparams(*job.spec, o.out, o.in, o.s, o.zp, job.e, r, gi, s[i], zp[i]);
    }
}

// Packed outputs are zero-filled once (row padding bits stay 0, zero points
// are OR-ed in), and the first expert writes the weight_shape tensor.
void prepare_packed(const MatrixJob& job, const IntOutputs& o) {
  std::memset(o.w, 0, static_cast<std::size_t>(o.out * o.words_per_row * 4));
  if (o.zp) std::memset(o.zp + o.e * o.zp_words * o.ngroups * 4, 0, static_cast<std::size_t>(o.zp_words * o.ngroups * 4));
  if (job.e != 0) return;
  std::int64_t shape[3] = {job.g.experts, o.out, o.in};
  auto& ws = job.outs[static_cast<std::size_t>(out_index(OutRole::WeightShape, *job.spec))];
  if (job.g.three_d)
    std::memcpy(ws.data(), shape, 24);
  else
    std::memcpy(ws.data(), shape + 1, 16);
}

// Row r's group scales (in the stored dtype) and zero points.
void store_row_qparams(const IntOutputs& o, DType sd, std::int64_t r, const float* scales, const float* zps) {
  for (std::int64_t gi = 0; gi < o.ngroups; ++gi) {
    const std::uint64_t sidx = static_cast<std::uint64_t>((o.e * o.out + r) * o.ngroups + gi);
    store_float(sd, o.s, sidx, scales[gi]);
    if (!o.zp) continue;
    const auto zq = static_cast<std::int8_t>(zps[gi]);
    if (o.packed)
      put_bits(o.zp + (o.e * o.zp_words * o.ngroups + gi) * 4, static_cast<std::uint64_t>(o.ngroups) * 4,
               static_cast<std::uint64_t>(r * o.bits), static_cast<std::uint32_t>(zq + (1 << (o.bits - 1))));
    else
      o.zp[sidx] = static_cast<std::uint8_t>(zq);
  }
}

// Row r's code bytes. Little-endian I32 words with element i at bit i*b are
// the code bytes themselves (b = 8) or nibble pairs, low nibble first (b = 4).
void store_row_codes(const IntOutputs& o, std::int64_t r, const std::uint8_t* c) {
  std::uint8_t* wr = o.packed ? o.w + r * o.words_per_row * 4 : o.w + r * o.in;
  if (!o.packed || o.bits == 8) {
    std::memcpy(wr, c, static_cast<std::size_t>(o.in));
    return;
  }
  for (std::int64_t k = 0; k < o.in / 2; ++k) wr[k] = static_cast<std::uint8_t>(c[2 * k] | (c[2 * k + 1] << 4));
  if (o.in % 2) wr[o.in / 2] = c[o.in - 1];
}

}  // namespace

void quantize_int(const MatrixJob& job, ErrorMetrics& metrics) {
  const DType t = job.src->info->dtype;
  const std::int64_t in = job.g.in;
  IntRowParams p = int_row_params(*job.spec, t, in);
  p.weights = channel_weights_of(job);
  const IntOutputs o = int_outputs(job, p);
  std::vector<float> kept_s, kept_zp;
  if (keeps_given_scales(p.rounding)) read_kept_qparams(job, o, kept_s, kept_zp);
  if (o.packed) prepare_packed(job, o);
  const std::uint8_t* src = job.src->bytes.data();
  const std::uint64_t base0 = static_cast<std::uint64_t>(job.e * o.out * in);
  // Chunks of 16 rows keep packed zero-point words (8 or 4 rows each) owned
  // by a single task.
  for_row_chunks(o.out, kIntChunkRows, metrics, job.pieces, [&](std::int64_t r0, std::int64_t r1, ErrorMetrics& m) {
    std::vector<float> buf(static_cast<std::size_t>(in));
    std::vector<float> scales(static_cast<std::size_t>(o.ngroups)), zps(scales.size());
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(in));
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::uint64_t base = base0 + static_cast<std::uint64_t>(r * in);
      float amax = 0.0f;  // only decides finiteness (min/max come per group)
      const float* row = load_row_block_amax(t, src, base, buf.size(), buf.size(), buf.data(), &amax);
      const bool finite = all_finite(&amax, 1);
      if (!finite) check_finite(row, buf.size(), base, *job.src, *job.options);
      if (!kept_s.empty()) {
        std::copy_n(kept_s.begin() + r * o.ngroups, o.ngroups, scales.begin());
        std::copy_n(kept_zp.begin() + r * o.ngroups, o.ngroups, zps.begin());
      }
      int_row(p, row, in, codes.data(), scales.data(), zps.data(), m, finite);
      store_row_qparams(o, p.sd, r, scales.data(), zps.data());
      store_row_codes(o, r, codes.data());
    }
  });
}

void dequantize_int(const SchemeSpec& spec, const Geometry& g,
                    std::span<const std::span<const std::uint8_t>> outs, float* dst) {
  const std::int64_t in = g.in, out = g.out;
  const int b = spec.bits;
  const std::int64_t gw = spec.kind == SchemeKind::IntChannel ? in : spec.group_size;
  const std::int64_t words_per_row = ceil_div(in * b, 32);
  const int off = 1 << (b - 1);
  require_scale_dtype(spec.scale_dtype);
  const std::uint8_t* zps = spec.symmetric ? nullptr : outs[2].data();
  for (std::int64_t e = 0; e < g.experts; ++e)
    for (std::int64_t r = 0; r < out; ++r)
      for (std::int64_t c = 0; c < in; ++c) {
        float s, zp;
        stored_group_qparams(spec, g.out, g.in, outs[1].data(), zps, e, r, c / gw, s, zp);
        float q;
        if (spec.int_pack_int32)
          q = static_cast<float>(
              static_cast<int>(get_bits(outs[0].data() + ((e * out + r) * words_per_row) * 4, 4,
                                        static_cast<std::uint64_t>(c * b), b)) -
              off);
        else
          q = static_cast<float>(static_cast<std::int8_t>(outs[0][static_cast<std::size_t>((e * out + r) * in + c)]));
        dst[(e * out + r) * in + c] = (q - zp) * s;
      }
}

void int_prepare_rows(RowParams& p, const TensorView& src, const TensorQuantizeOptions&, std::int64_t in,
                      std::uint64_t, std::uint64_t) {
  p.ints = int_row_params(*p.spec, src.info->dtype, in);
}

void int_row_kernel(const RowParams& p, const RowInput& row, const RowOutput& out, ErrorMetrics& m) {
  int_row(p.ints, row.x, row.in, out.codes, out.scales, out.zero_points, m, row.finite);
}

}  // namespace selq::quant::detail
