// OCP MX (MXFP4 / MXFP8): one E8M0 scale per 32 consecutive input channels.
//
// Scale rule trade-offs (docs/FORMAT_RULES.md §2.4, error table there):
//   Floor (OCP spec): amax/X lands in [4, 8) for FP4, so block maxima above 6
//     saturate -- up to 25% error on the largest element of a block.
//   Ceil: never clips but doubles the scale whenever amax is in (4, 6]*2^k,
//     costing every small element of the block one binade of precision.
//   Even (default; compressed-tensors, Quark, vLLM reference): round amax's
//     significand to the element's width first, then Floor; clips only when
//     the significand is in (1.5, 1.75), with clip error below 1/7.
//   RCeil (cuBLAS / PTX cvt.rp.ue8m0, ModelOpt MXFP4): smallest power of two
//     with amax/X <= max; never clips, occasionally wastes part of a binade.
//
// Elements are RNE(w / 2^(scale-127)) saturated to the element max. Scales are
// powers of two, so w * 2^(127-scale) is the same correctly rounded quotient as
// the division the references do (the reciprocal is exact for every byte).
#include <fmt/format.h>

#include "core/codecs_simd.h"
#include "quant/detail.h"
#include "quant/detail_simd.h"
#include "quant/rounding_mse.h"
#include "quant/row_kernel.h"

namespace selq::quant::detail {
namespace {

struct MxFormat {
  bool fp4;
  int emax;
  int mbits_for_even;
  float max;
  // Quotients at or past the rounding midpoint between max and the next
  // value the format would have (8 for E2M1, 480 for E4M3) lose more than a
  // rounding step: that is what "clipped" counts.
  float clip_at;
};

MxFormat mx_format(const SchemeSpec& spec) {
  if (spec.kind == SchemeKind::MXFP4) return {true, 2, 1, 6.0f, 7.0f};
  // compressed-tensors' generate_mx_scales rounds the amax significand to
  // E2M1's single mantissa bit for MXFP8 too (it only special-cases FP6), so
  // Even uses 1 here to stay bit-exact with it (torchao would use 3).
  return {false, 8, 1, 448.0f, 464.0000305f};
}

std::uint8_t mx_scale_byte(float amax, ScaleRule rule, const MxFormat& f) {
  return e8m0_scale_from_amax_ref(amax, rule, f.emax, f.mbits_for_even, f.max);
}

}  // namespace

void mx_row(const SchemeSpec& spec, const float* x, std::int64_t in, std::uint8_t* w,
            std::uint8_t* sout, ErrorMetrics& m, bool simd, const float* block_amax, const float* weights) {
  const MxFormat f = mx_format(spec);
  const std::int64_t nblk = in / 32;
  m.blocks += static_cast<std::uint64_t>(nblk);
  if (simd) {
    // Per-thread scratch: no heap allocation per row.
    thread_local std::vector<float> amax, inv, sc;
    inv.resize(static_cast<std::size_t>(nblk));
    sc.resize(inv.size());
    if (!block_amax) {
      amax.resize(inv.size());
      block_amax_simd(x, static_cast<std::size_t>(in), 32, amax.data());
      block_amax = amax.data();
    }
    if (keeps_given_scales(spec.rounding.value)) {
      for (std::size_t b = 0; b < inv.size(); ++b) {
        sc[b] = pow2(sout[b] - 127);
        inv[b] = pow2(127 - sout[b]);
      }
    } else {
      mx_scales_simd(block_amax, inv.size(), spec.scale_rule, f.emax, f.mbits_for_even, f.max, sout, inv.data(),
                     sc.data());
    }
    // The scales are chosen; the kernels encode with them, whichever rounding chose.
    if (searches_scales(spec.rounding.value))
      mse_mx_scales(f.fp4, x, weights, inv.size(), sout, inv.data(), sc.data());
    if (f.fp4)
      e2m1_blocks_simd(x, static_cast<std::size_t>(in), 32, inv.data(), sc.data(), false,
                       f.clip_at, w, m);
    else
      e4m3_blocks_simd(x, static_cast<std::size_t>(in), 32, inv.data(), sc.data(), false, false,
                       f.clip_at, w, m);
    return;
  }
  if (keeps_given_scales(spec.rounding.value))  // GPTQ's weights are finite: they take the SIMD path
    throw Error(ErrorKind::Internal, "mx_row: kept scales on a non-finite row");
  std::vector<float> v(static_cast<std::size_t>(in)), dq(v.size());
  std::vector<float> scales(static_cast<std::size_t>(nblk));
  std::vector<std::uint8_t> codes;  // decoded from, when the caller stores none
  if (!w) {
    codes.resize(static_cast<std::size_t>(f.fp4 ? in / 2 : in));
    w = codes.data();
  }
  for (std::int64_t b = 0; b < nblk; ++b) {
    const float* xb = x + b * 32;
    const std::uint8_t sb = mx_scale_byte(amax_f32(xb, 32), spec.scale_rule, f);
    sout[b] = sb;
    const bool nan = sb == 0xFF;
    scales[static_cast<std::size_t>(b)] = nan ? std::numeric_limits<float>::quiet_NaN() : pow2(sb - 127);
    const float inv = nan ? std::numeric_limits<float>::quiet_NaN() : pow2(127 - sb);
    float* vb = v.data() + b * 32;
    std::uint32_t clipped = 0;
    // For FP4, + 0.0f turns a -0.0 quotient into +0.0 (see e2m1_code) and
    // changes nothing else; FP8 keeps -0.0 (0x80) like torch's cast.
    const float zero_fix = f.fp4 ? 0.0f : -0.0f;
    for (int i = 0; i < 32; ++i) {
      vb[i] = xb[i] * inv + zero_fix;
      clipped += std::fabs(vb[i]) >= f.clip_at;
    }
    m.clipped_elements += clipped;
    m.clipped_blocks += clipped != 0;
  }
  if (f.fp4) {
    f32_to_e2m1_packed_bulk(v.data(), w, static_cast<std::size_t>(in));
    e2m1_packed_to_f32_bulk(w, dq.data(), static_cast<std::size_t>(in));
  } else {
    f32_to_e4m3_sat_bulk(v.data(), w, static_cast<std::size_t>(in));
    e4m3_to_f32_bulk(w, dq.data(), static_cast<std::size_t>(in));
  }
  scale_blocks_and_measure(x, dq.data(), scales.data(), in, 32, m);
}

void quantize_mx(const MatrixJob& job, ErrorMetrics& metrics) {
  const SchemeSpec& spec = *job.spec;
  const bool fp4 = spec.kind == SchemeKind::MXFP4;
  const Geometry& g = job.g;
  const std::int64_t in = g.in, nblk = in / 32;
  const std::int64_t wrow = fp4 ? in / 2 : in;
  std::uint8_t* wout = job.outs[0].data() + static_cast<std::uint64_t>(job.e * g.out * wrow);
  std::uint8_t* sout = job.outs[1].data() + static_cast<std::uint64_t>(job.e * g.out * nblk);
  const DType sdt = job.src->info->dtype;
  const std::uint8_t* src = job.src->bytes.data();
  const std::uint64_t base0 = static_cast<std::uint64_t>(job.e * g.out * in);
  const float* weights = channel_weights_of(job);

  for_row_chunks(g.out, kMxChunkRows, metrics, job.pieces, [&](std::int64_t r0, std::int64_t r1, ErrorMetrics& m) {
    std::vector<float> buf(static_cast<std::size_t>(in)), amax(static_cast<std::size_t>(nblk));
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::uint64_t base = base0 + static_cast<std::uint64_t>(r * in);
      // One pass loads the row, finds the block maxima and, through them,
      // any NaN/Inf.
      const float* row = load_row_block_amax(sdt, src, base, buf.size(), 32, buf.data(), amax.data());
      const bool finite = all_finite(amax.data(), amax.size());
      if (!finite) check_finite(row, buf.size(), base, *job.src, *job.options);
      mx_row(spec, row, in, wout + r * wrow, sout + r * nblk, m, finite, amax.data(), weights);
    }
  });
}

void dequantize_mx(const SchemeSpec& spec, const Geometry& g,
                   std::span<const std::span<const std::uint8_t>> outs, float* dst) {
  const bool fp4 = spec.kind == SchemeKind::MXFP4;
  const std::int64_t rows = g.experts * g.out, in = g.in, nblk = in / 32;
  const std::uint8_t* w = outs[0].data();
  const std::uint8_t* s = outs[1].data();
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < in; ++c) {
      const std::uint8_t sb = s[r * nblk + c / 32];
      const float scale = sb == 0xFF ? std::numeric_limits<float>::quiet_NaN() : pow2(sb - 127);
      float q;
      if (fp4) {
        const std::uint8_t byte = w[r * (in / 2) + c / 2];
        q = kE2M1Values[(c & 1) ? (byte >> 4) : (byte & 0xF)];
      } else {
        q = e4m3_value(w[r * in + c]);
      }
      dst[r * in + c] = q * scale;
    }
  }
}

void mx_row_kernel(const RowParams& p, const RowInput& row, const RowOutput& out, ErrorMetrics& m) {
  mx_row(*p.spec, row.x, row.in, out.codes, out.scale_bytes, m, row.finite, row.amax32);
}

}  // namespace selq::quant::detail
