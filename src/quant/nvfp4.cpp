// NVFP4: E2M1 elements, one E4M3 scale per 16 input channels, one F32
// per-tensor scale, in either checkpoint convention.
//
// compressed-tensors (llm-compressor observers + calculate_qparams, torch ops
// in the weight's dtype T, e.g. bf16):
//   gs   = T(T(1 / max(amax, tiny_T)) * 2688), NaN/Inf -> 1  (generate_gparam;
//          torch evaluates `2688.0 / tensor` as tensor.reciprocal() * 2688)
//   sblk = e4m3_sat(f32(gs * T(amax_blk / 6))), 0 -> 0.125   (fp8 finfo eps)
//   q    = E2M1(f32(w / f32(sblk / gs)))                    (_quantize)
//   stored global scale = gs (F32 [1]); dequant q * sblk / gs
// ModelOpt (NVFP4QTensor, all in f32):
//   wsf2 = f32(amax) / 2688
//   sblk = e4m3(f32(amax_blk / f32(6 * wsf2))), 0 -> 1.0
//   q    = E2M1(f32(w / f32(f32(sblk) * wsf2)))
//   stored weight_scale_2 = wsf2 (F32 []); dequant q * sblk * wsf2
// An all-zero tensor makes ModelOpt's block scales NaN (0/0); we use
// wsf2 = 1/2688 there instead so the output stays finite (all codes 0).
#include "core/codecs_simd.h"
#include "quant/detail.h"
#include "quant/detail_simd.h"
#include "quant/rounding_mse.h"
#include "quant/row_kernel.h"

namespace selq::quant::detail {

namespace {
constexpr float kFp4Fp8Max = 448.0f * 6.0f;

using NvParams = Nvfp4RowParams;

inline std::uint8_t block_scale_byte(const NvParams& p, float amax_blk, float target = 6.0f) {
  if (p.ct) {
    const float s = p.global * round_to_fast(p.t, amax_blk / target);
    const std::uint8_t b = e4m3_sat_code(s);
    return (b & 0x7F) == 0 ? std::uint8_t{0x20} : b;  // 0x20 = 0.125
  }
  float s = amax_blk / (target * p.global);
  if (s == 0.0f) s = 1.0f;
  return e4m3_sat_code(s);
}

inline float effective_scale(const NvParams& p, std::uint8_t b) {
  return p.ct ? e4m3_value(b) / p.global : e4m3_value(b) * p.global;
}

// ceil(log2(a / 6)) for a > 0, exactly (frexp: a = m 2^e, m in [0.5, 1)).
int pow2_exponent(float amax) {
  int e = 0;
  const float m = std::frexp(amax / 6.0f, &e);
  return m == 0.5f ? e - 1 : e;
}

// Power-of-two block scales (TensorQuantizeOptions::nvfp4_pow2_scales): the
// block's exponent k, clamped to E4M3's 18 binades below the top one, as the
// E4M3 byte of 2^(k - top + 8) (256 = 2^8 is E4M3's largest power of two).
void pow2_block_scales(const NvParams& p, const float* block_amax, std::size_t nblk, std::uint8_t* sout, float* eff) {
  const int top = *p.pow2_top;
  for (std::size_t b = 0; b < nblk; ++b) {
    const int k = block_amax[b] > 0.0f ? std::max(pow2_exponent(block_amax[b]), top - 17) : top - 17;
    sout[b] = e4m3_sat_code(std::ldexp(1.0f, k - top + 8));
    eff[b] = effective_scale(p, sout[b]);
  }
}
}  // namespace

std::uint8_t nvfp4_block_scale_byte(const Nvfp4RowParams& p, float amax_blk, float target) {
  return block_scale_byte(p, amax_blk, target);
}
float nvfp4_effective_scale(const Nvfp4RowParams& p, std::uint8_t b) { return effective_scale(p, b); }

float nvfp4_global_scale(NvfpConvention conv, DType t, float amax) {
  if (conv == NvfpConvention::CompressedTensors) {
    const float gs = round_to(t, round_to(t, 1.0f / std::max(amax, dtype_tiny(t))) * kFp4Fp8Max);
    return std::isfinite(gs) ? gs : 1.0f;
  }
  if (amax == 0.0f) return 1.0f / kFp4Fp8Max;
  return amax / kFp4Fp8Max;
}

void nvfp4_row(const Nvfp4RowParams& p, const float* x, std::int64_t in, std::uint8_t* w,
               std::uint8_t* sout, ErrorMetrics& m, bool simd, const float* block_amax) {
  const std::int64_t nblk = in / 16;
  m.blocks += static_cast<std::uint64_t>(nblk);
  if (simd) {
    // Per-thread scratch: no heap allocation per row.
    thread_local std::vector<float> effs, amax;
    effs.resize(static_cast<std::size_t>(nblk));
    if (!block_amax) {
      amax.resize(effs.size());
      block_amax_simd(x, static_cast<std::size_t>(in), 16, amax.data());
      block_amax = amax.data();
    }
    if (keeps_given_scales(p.rounding)) {
      for (std::size_t b = 0; b < effs.size(); ++b) effs[b] = effective_scale(p, sout[b]);
    } else if (!p.ct || p.t != DType::F16) {
      nvfp4_scales_simd(block_amax, effs.size(), p.ct, p.t == DType::BF16, p.global, sout,
                        effs.data());
    } else {
      for (std::size_t b = 0; b < effs.size(); ++b) {
        sout[b] = block_scale_byte(p, block_amax[b]);
        effs[b] = effective_scale(p, sout[b]);
      }
    }
    // The scales are chosen; the kernel encodes with them, whichever rounding chose.
    if (keeps_given_scales(p.rounding))
      ;
    else if (p.pow2_top)
      pow2_block_scales(p, block_amax, effs.size(), sout, effs.data());
    else if (searches_scales(p.rounding))
      mse_nvfp4_scales(p, x, block_amax, effs.size(), sout, effs.data());
    e2m1_blocks_simd(x, static_cast<std::size_t>(in), 16, effs.data(), effs.data(), true, 7.0f,
                     w, m);
    return;
  }
  if (keeps_given_scales(p.rounding))  // GPTQ's weights are finite: they take the SIMD path
    throw Error(ErrorKind::Internal, "nvfp4_row: kept scales on a non-finite row");
  std::vector<float> effs(static_cast<std::size_t>(nblk));
  std::vector<float> v(static_cast<std::size_t>(in)), dq(v.size());
  std::vector<std::uint8_t> codes;  // decoded from, when the caller stores none
  if (!w) {
    codes.resize(static_cast<std::size_t>(in / 2));
    w = codes.data();
  }
  for (std::int64_t b = 0; b < nblk; ++b) {
    const float* xb = x + b * 16;
    const std::uint8_t sb = block_scale_byte(p, amax_f32(xb, 16));
    sout[b] = sb;
    const float eff = effective_scale(p, sb);
    effs[static_cast<std::size_t>(b)] = eff;
    float* vb = v.data() + b * 16;
    std::uint32_t clipped = 0;
    for (int i = 0; i < 16; ++i) {
      vb[i] = xb[i] / eff + 0.0f;  // true division, as torch; -0.0 -> +0.0
      clipped += std::fabs(vb[i]) >= 7.0f;  // past the 6|8 midpoint (see mx.cpp)
    }
    m.clipped_elements += clipped;
    m.clipped_blocks += clipped != 0;
  }
  f32_to_e2m1_packed_bulk(v.data(), w, static_cast<std::size_t>(in));
  e2m1_packed_to_f32_bulk(w, dq.data(), static_cast<std::size_t>(in));
  scale_blocks_and_measure(x, dq.data(), effs.data(), in, 16, m);
}

Nvfp4RowParams nvfp4_row_params(const SchemeSpec& spec, const TensorView& src, const TensorQuantizeOptions& options,
                                std::uint64_t first, std::uint64_t count) {
  const DType t = src.info->dtype;
  const float amax = options.global_amax ? *options.global_amax : span_amax_fast(src, first, count);
  Nvfp4RowParams p{spec.nvfp == NvfpConvention::CompressedTensors, t, nvfp4_global_scale(spec.nvfp, t, amax),
                   spec.rounding.value};
  if (options.nvfp4_pow2_scales && amax > 0.0f && std::isfinite(amax)) {
    p.pow2_top = pow2_exponent(amax);
    p.global = std::ldexp(1.0f, p.ct ? 8 - *p.pow2_top : *p.pow2_top - 8);
  }
  return p;
}

void quantize_nvfp4(const MatrixJob& job, ErrorMetrics& metrics) {
  const SchemeSpec& spec = *job.spec;
  const Geometry& g = job.g;
  const std::int64_t in = g.in, nblk = in / 16;
  const DType sdt = job.src->info->dtype;
  const std::uint8_t* src = job.src->bytes.data();
  const std::uint64_t base0 = static_cast<std::uint64_t>(job.e * g.out * in);

  NvParams p = nvfp4_row_params(spec, *job.src, *job.options, base0, static_cast<std::uint64_t>(g.out * in));
  p.weights = channel_weights_of(job);
  if (keeps_given_scales(p.rounding))
    std::memcpy(&p.global, job.outs[2].data() + 4 * job.e, 4);
  else
    std::memcpy(job.outs[2].data() + 4 * job.e, &p.global, 4);

  std::uint8_t* wout = job.outs[0].data() + static_cast<std::uint64_t>(job.e * g.out * (in / 2));
  std::uint8_t* sout = job.outs[1].data() + static_cast<std::uint64_t>(job.e * g.out * nblk);

  for_row_chunks(g.out, kNvfp4ChunkRows, metrics, job.pieces, [&](std::int64_t r0, std::int64_t r1, ErrorMetrics& m) {
    std::vector<float> buf(static_cast<std::size_t>(in)), amax(static_cast<std::size_t>(nblk));
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::uint64_t base = base0 + static_cast<std::uint64_t>(r * in);
      const float* row = load_row_block_amax(sdt, src, base, buf.size(), 16, buf.data(), amax.data());
      const bool finite = all_finite(amax.data(), amax.size());
      if (!finite) check_finite(row, buf.size(), base, *job.src, *job.options);
      nvfp4_row(p, row, in, wout + r * (in / 2), sout + r * nblk, m, finite, amax.data());
    }
  });
}

void dequantize_nvfp4(const SchemeSpec& spec, const Geometry& g,
                      std::span<const std::span<const std::uint8_t>> outs, float* dst) {
  const std::int64_t in = g.in, nblk = in / 16;
  for (std::int64_t e = 0; e < g.experts; ++e) {
    float global;
    std::memcpy(&global, outs[2].data() + 4 * e, 4);
    const NvParams p{spec.nvfp == NvfpConvention::CompressedTensors, DType::F32, global};
    for (std::int64_t r = e * g.out; r < (e + 1) * g.out; ++r) {
      for (std::int64_t c = 0; c < in; ++c) {
        const float eff = effective_scale(p, outs[1][static_cast<std::size_t>(r * nblk + c / 16)]);
        const std::uint8_t byte = outs[0][static_cast<std::size_t>(r * (in / 2) + c / 2)];
        dst[r * in + c] = kE2M1Values[(c & 1) ? (byte >> 4) : (byte & 0xF)] * eff;
      }
    }
  }
}

void nvfp4_prepare_rows(RowParams& p, const TensorView& src, const TensorQuantizeOptions& options, std::int64_t,
                        std::uint64_t first, std::uint64_t count) {
  p.nvfp4 = nvfp4_row_params(*p.spec, src, options, first, count);
}

void nvfp4_row_kernel(const RowParams& p, const RowInput& row, const RowOutput& out, ErrorMetrics& m) {
  nvfp4_row(p.nvfp4, row.x, row.in, out.codes, out.scale_bytes, m, row.finite, row.amax16);
}

}  // namespace selq::quant::detail
