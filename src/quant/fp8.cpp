// FP8 E4M3FN weights with a per-tensor, per-output-channel or 2-D block scale.
//
// s = amax/448 is computed in the scale's dtype arithmetic and rounded to the
// stored dtype *before* dividing, so the value that divides is exactly the
// one written (compressed-tensors: scale in the model dtype, x / scale in that
// dtype, clamp to ±448, cast RNE). A zero scale becomes finfo(scale dtype).eps
// as in compressed-tensors' calculate_qparams. Block scales follow DeepSeek-V3
// (`weight_scale_inv`, W = q * s): edge blocks are the partial blocks, whose
// amax equals the zero-padded block's.
#include "core/codecs_simd.h"
#include "quant/detail.h"
#include "quant/detail_simd.h"
#include "quant/rounding_mse.h"
#include "quant/row_kernel.h"

namespace selq::quant::detail {

namespace {
inline float fp8_scale(const Fp8Params& p, float amax) {
  float s = round_to(p.sd, round_to(p.mt, amax / 448.0f));
  if (s == 0.0f) s = dtype_eps(p.sd);
  return s;
}

// Quantizes n elements with scale s into w, accumulating metrics. Quotients
// past 464 (the 448|480 midpoint; 464 itself rounds to 448) count as clipped.
inline void fp8_run_scalar(DType ct, const float* x, std::size_t n, float s, std::uint8_t* w,
                           ErrorMetrics& m) {
  float v[256], dq[256];
  std::uint16_t h[256];
  std::uint8_t own[256];  // the codes decoded from, when the caller stores none (w null)
  std::uint64_t clipped = 0;
  for (std::size_t i0 = 0; i0 < n; i0 += 256) {
    const std::size_t k = std::min<std::size_t>(256, n - i0);
    std::uint8_t* const wk = w ? w + i0 : own;
    scale_f32_bulk(x + i0, v, k, s);
    if (ct == DType::BF16) {
      // round the quotient to bf16 first, as torch's bf16 division does
      f32_to_bf16_bulk(v, h, k);
      bf16_to_e4m3_sat_bulk(h, wk, k);
      bf16_to_f32_bulk(h, v, k);
    } else if (ct == DType::F16) {
      for (std::size_t i = 0; i < k; ++i) v[i] = round_to(DType::F16, v[i]);
      f32_to_e4m3_sat_bulk(v, wk, k);
    } else {
      f32_to_e4m3_sat_bulk(v, wk, k);
    }
    for (std::size_t i = 0; i < k; ++i) clipped += std::fabs(v[i]) > 464.0f;
    e4m3_to_f32_bulk(wk, dq, k);
    for (std::size_t i = 0; i < k; ++i) dq[i] *= s;
    block_metrics(x + i0, dq, k, m);
  }
  m.clipped_elements += clipped;
}

// Quantizes n elements with scale s into w, accumulating metrics and
// clipped_blocks (one block).
inline void fp8_run(const Fp8Params& p, const float* x, std::size_t n, float s, std::uint8_t* w,
                    ErrorMetrics& m, bool simd) {
  const std::uint64_t before = m.clipped_elements;
  fp8_row(p.ct, x, n, s, w, m, simd);
  m.clipped_blocks += m.clipped_elements != before;
}
}  // namespace

Fp8Params fp8_params(const SchemeSpec& spec, DType t) {
  return {t, spec.scale_dtype, spec.scale_dtype == t ? t : DType::F32, promote(t, spec.scale_dtype),
          spec.rounding.value};
}

float fp8_scale_for_amax(const Fp8Params& p, float amax) { return fp8_scale(p, amax); }

float fp8_channel_row(const Fp8Params& p, const float* row, std::size_t n, float amax, bool finite, std::uint8_t* w,
                      ErrorMetrics& m) {
  if (!finite) {  // the load's bit-pattern amax holds the NaN; the scale ignores NaN, keeps Inf
    amax = 0.0f;
    for (std::size_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(row[i]));
  }
  float s = fp8_scale(p, amax);
  // The scale is chosen; the kernel encodes with it, whichever rounding chose.
  if (searches_scales(p.rounding) && finite) s = mse_fp8_scale(p, row, p.weights, n, amax, s);
  ErrorMetrics rm;
  fp8_run(p, row, n, s, w, rm, finite);
  rm.blocks = 1;
  m.merge(rm);
  return s;
}

void fp8_row(DType ct, const float* x, std::size_t n, float s, std::uint8_t* w, ErrorMetrics& m,
             bool simd) {
  if (simd && ct != DType::F16) {
    const std::uint64_t blocks_before = m.clipped_blocks;  // fp8_run counts blocks
    e4m3_blocks_simd(x, n, n, &s, &s, true, ct == DType::BF16, 464.0000305f, w, m);
    m.clipped_blocks = blocks_before;
    return;
  }
  fp8_run_scalar(ct, x, n, s, w, m);
}

namespace {

// FP8 per tensor or per channel: row by row.
void quantize_fp8_rows(const MatrixJob& job, const Fp8Params& p, ErrorMetrics& metrics) {
  const std::int64_t in = job.g.in, out = job.g.out;
  const std::uint64_t base0 = static_cast<std::uint64_t>(job.e * out * in);
  std::uint8_t* wout = job.outs[0].data() + base0;
  std::uint8_t* sout = job.outs[1].data();
  const bool tensor = job.spec->kind == SchemeKind::FP8Tensor;
  float ts = 0.0f;
  if (tensor) {
    const auto& given = job.options->global_amax;
    ts = fp8_scale(p, given ? *given : span_amax_fast(*job.src, base0, static_cast<std::uint64_t>(out * in)));
    store_float(p.sd, sout, static_cast<std::uint64_t>(job.e), ts);
  }
  const std::size_t n = static_cast<std::size_t>(in);
  for_each_loaded_row(job, kFp8ChunkRows, metrics, [&](std::int64_t r, const float* row, float amax, bool finite,
                                                       ErrorMetrics& m) {
    if (!tensor) {
      const float s = fp8_channel_row(p, row, n, amax, finite, wout + r * in, m);
      store_float(p.sd, sout, static_cast<std::uint64_t>(job.e * out + r), s);
      return;
    }
    ErrorMetrics rm;
    fp8_run(p, row, n, ts, wout + r * in, rm, finite);
    rm.clipped_blocks = 0;  // counted once below
    rm.blocks = 0;
    m.merge(rm);
  });
  if (tensor && !job.pieces) {  // for a block, merge_pieces counts it
    metrics.blocks += 1;
    metrics.clipped_blocks += metrics.clipped_elements != 0;
  }
}

// Rows [r0, r0 + nr) x columns [c0, c0 + nc) of the job's matrix into `block`
// as F32, row segments back to back, each loaded once with its amax (the
// fused load); returns the block's amax, and whether it is finite (a
// non-finite segment is refused by check_finite unless allowed).
float load_fp8_block(const MatrixJob& job, std::int64_t r0, std::int64_t nr, std::int64_t c0, std::size_t nc,
                     float* block, bool& finite) {
  const std::int64_t in = job.g.in;
  const std::uint64_t base0 = static_cast<std::uint64_t>(job.e * job.g.out * in);
  float amax = 0.0f;
  finite = true;
  for (std::int64_t r = 0; r < nr; ++r) {
    const std::uint64_t base = base0 + static_cast<std::uint64_t>((r0 + r) * in + c0);
    float* seg = block + r * static_cast<std::int64_t>(nc);
    float seg_amax = 0.0f;
    const float* row = load_row_block_amax(job.src->info->dtype, job.src->bytes.data(), base, nc, nc, seg, &seg_amax);
    if (row != seg) std::memcpy(seg, row, nc * sizeof(float));  // aligned F32, read in place
    if (!all_finite(&seg_amax, 1)) {
      finite = false;
      check_finite(seg, nc, base, *job.src, *job.options);
    }
    amax = std::max(amax, seg_amax);
  }
  if (!finite) {  // NaN ignored, Inf kept (as the scalar definition)
    amax = 0.0f;
    for (std::size_t i = 0; i < static_cast<std::size_t>(nr) * nc; ++i) amax = std::max(amax, std::fabs(block[i]));
  }
  return amax;
}

// 2-D blocks: one task per stripe of block_rows rows, worked through one
// block at a time, so that a block's at most 128 x 128 floats are loaded once
// and stay in cache for the quantizing pass.
void quantize_fp8_blocks(const MatrixJob& job, const Fp8Params& p, ErrorMetrics& metrics) {
  const std::int64_t in = job.g.in, out = job.g.out;
  std::uint8_t* wout = job.outs[0].data() + static_cast<std::uint64_t>(job.e * out * in);
  std::uint8_t* sout = job.outs[1].data();
  const std::int64_t br = job.spec->block_rows, bc = job.spec->block_cols;
  const std::int64_t nbr = ceil_div(out, br), nbc = ceil_div(in, bc);
  ErrorMetrics unused;
  for_row_chunks(nbr, 1, unused, job.pieces, [&](std::int64_t s0, std::int64_t s1, ErrorMetrics& m) {
    thread_local std::vector<float> block, block_weights;
    thread_local std::vector<std::uint8_t> codes;
    for (std::int64_t sr = s0; sr < s1; ++sr) {
      const std::int64_t r0 = sr * br, nr = std::min(out, r0 + br) - r0;
      for (std::int64_t bj = 0; bj < nbc; ++bj) {
        const std::int64_t c0 = bj * bc;
        const auto nc = static_cast<std::size_t>(std::min(in, c0 + bc) - c0);
        const std::size_t n = static_cast<std::size_t>(nr) * nc;
        if (block.size() < n) block.resize(n);
        if (codes.size() < n) codes.resize(n);
        bool finite = true;
        const float amax = load_fp8_block(job, r0, nr, c0, nc, block.data(), finite);
        float s = fp8_scale(p, amax);
        if (searches_scales(p.rounding) && finite) {
          // Weighted: each row segment of the block takes its columns' weights.
          const float* w = nullptr;
          if (p.weights) {
            block_weights.resize(n);
            for (std::int64_t r = 0; r < nr; ++r)
              std::memcpy(block_weights.data() + r * static_cast<std::int64_t>(nc), p.weights + c0, nc * sizeof(float));
            w = block_weights.data();
          }
          s = mse_fp8_scale(p, block.data(), w, n, amax, s);
        }
        store_float(p.sd, sout, static_cast<std::uint64_t>((job.e * nbr + sr) * nbc + bj), s);
        // One kernel call for the whole block, not one per row segment; then
        // the codes go to their rows.
        ErrorMetrics bm;
        fp8_run(p, block.data(), n, s, codes.data(), bm, finite);
        for (std::int64_t r = 0; r < nr; ++r)
          std::memcpy(wout + (r0 + r) * in + c0, codes.data() + r * static_cast<std::int64_t>(nc), nc);
        bm.clipped_blocks = bm.clipped_elements != 0;
        bm.blocks = 1;
        m.merge(bm);
      }
    }
  });
  metrics.merge(unused);
}

}  // namespace

void quantize_fp8(const MatrixJob& job, ErrorMetrics& metrics) {
  Fp8Params p = fp8_params(*job.spec, job.src->info->dtype);
  p.weights = channel_weights_of(job);
  if (job.spec->kind == SchemeKind::FP8Block)
    quantize_fp8_blocks(job, p, metrics);
  else
    quantize_fp8_rows(job, p, metrics);
}

void dequantize_fp8(const SchemeSpec& spec, const Geometry& g,
                    std::span<const std::span<const std::uint8_t>> outs, float* dst) {
  const std::int64_t in = g.in, out = g.out;
  const DType sd = spec.scale_dtype;
  require_scale_dtype(sd);
  const std::int64_t br = spec.block_rows, bc = spec.block_cols;
  const std::int64_t nbr = ceil_div(out, br), nbc = ceil_div(in, bc);
  for (std::int64_t e = 0; e < g.experts; ++e)
    for (std::int64_t r = 0; r < out; ++r)
      for (std::int64_t c = 0; c < in; ++c) {
        std::uint64_t si = 0;
        switch (spec.kind) {
          case SchemeKind::FP8Tensor: si = static_cast<std::uint64_t>(e); break;
          case SchemeKind::FP8Channel: si = static_cast<std::uint64_t>(e * out + r); break;
          default: si = static_cast<std::uint64_t>((e * nbr + r / br) * nbc + c / bc); break;
        }
        const std::int64_t i = (e * out + r) * in + c;
        dst[i] = e4m3_value(outs[0][static_cast<std::size_t>(i)]) * load_float_element(sd, outs[1].data(), si);
      }
}

void fp8_prepare_rows(RowParams& p, const TensorView& src, const TensorQuantizeOptions&, std::int64_t, std::uint64_t,
                      std::uint64_t) {
  p.fp8 = fp8_params(*p.spec, src.info->dtype);
}

void fp8_channel_row_kernel(const RowParams& p, const RowInput& row, const RowOutput& out, ErrorMetrics& m) {
  out.scales[0] = fp8_channel_row(p.fp8, row.x, static_cast<std::size_t>(row.in), row.amax, row.finite, out.codes, m);
}

}  // namespace selq::quant::detail
