// measure_weight: the error of several schemes on one weight from one read of
// it. Each row is loaded to F32 once, with the amax of its 16-element blocks
// (from which the 32-element and whole-row maxima follow exactly: a max of
// bit patterns), and handed to every scheme's row kernel, the one
// quantize_weight runs, with its codes not stored. The metric pieces are the
// kernels' own row chunks, merged in their order, so every sum is the same
// double as quantize_weight's. Kinds without a row kernel (their scale spans
// rows: FP8 per tensor and 2-D blocks) are measured by quantizing into a
// scratch buffer.
#include <fmt/format.h>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "quant/detail.h"
#include "quant/detail_simd.h"
#include "quant/row_kernel.h"
#include "quant/scheme_traits.h"
#include "quant/rounding_traits.h"

namespace selq::quant {
namespace {

using namespace detail;

// Every row chunk in detail.h divides this: a task of kTaskRows rows owns
// whole pieces of every scheme.
constexpr std::int64_t kTaskRows = 16;

// One scheme on one matrix (a 2-D weight or one expert).
struct RowScheme {
  const SchemeTraits* traits{nullptr};
  const TensorQuantizeOptions* options{nullptr};
  RowParams params{};
  std::vector<ErrorMetrics> pieces;  // one per chunk of traits->chunk_rows rows
};

// The block maxima of one loaded row, each as a load of that width returns it.
struct RowAmax {
  std::vector<float> b16, b32;  // empty when in % 16 (or 32) != 0
  float row{0};
};

float max_bits(float a, float b) {  // non-negative bit patterns order as unsigned
  return std::bit_cast<std::uint32_t>(a) >= std::bit_cast<std::uint32_t>(b) ? a : b;
}

const float* load_row(DType t, const std::uint8_t* src, std::uint64_t base, std::int64_t in, float* buf, RowAmax& a) {
  const auto n = static_cast<std::size_t>(in);
  if (in % 16 != 0) return load_row_block_amax(t, src, base, n, n, buf, &a.row);
  const float* row = load_row_block_amax(t, src, base, n, 16, buf, a.b16.data());
  a.row = 0.0f;
  for (std::size_t b = 0; b < a.b16.size(); ++b) a.row = max_bits(a.row, a.b16[b]);
  for (std::size_t b = 0; b < a.b32.size(); ++b) a.b32[b] = max_bits(a.b16[2 * b], a.b16[2 * b + 1]);
  return row;
}

// Scratch for the scales a row kernel writes (never read back).
struct RowScratch {
  std::vector<std::uint8_t> scale_bytes;
  std::vector<float> scales, zero_points;
};

// The row-kernel schemes on expert e: their merged pieces, as quantize_weight's
// kernel for that expert returns them.
void measure_matrix(std::vector<RowScheme>& schemes, const TensorView& src, const Geometry& g, std::int64_t e,
                    std::vector<ErrorMetrics>& expert_metrics) {
  const DType t = src.info->dtype;
  const std::uint8_t* data = src.bytes.data();
  const std::uint64_t base0 = static_cast<std::uint64_t>(e * g.out * g.in);
  for (auto& s : schemes) {
    if (s.traits->prepare_rows)
      s.traits->prepare_rows(s.params, src, *s.options, g.in, base0, static_cast<std::uint64_t>(g.out * g.in));
    s.pieces.assign(static_cast<std::size_t>(ceil_div(g.out, s.traits->chunk_rows)), ErrorMetrics{});
  }
  const std::int64_t tasks = ceil_div(g.out, kTaskRows);
  // simple_partitioner, grain 1: each piece is filled by one task, row by row.
  tbb::parallel_for(
      tbb::blocked_range<std::int64_t>(0, tasks, 1),
      [&](const tbb::blocked_range<std::int64_t>& range) {
        const auto in = static_cast<std::size_t>(g.in);
        // Per thread, not per task: 70,000 small tensors make many tasks.
        thread_local std::vector<float> buf;
        thread_local RowAmax amax;
        thread_local RowScratch scratch;
        buf.resize(in);
        amax.b16.resize(g.in % 16 == 0 ? in / 16 : 0);
        amax.b32.resize(g.in % 32 == 0 ? in / 32 : 0);
        scratch.scale_bytes.resize(in / 16 + 1);
        scratch.scales.resize(in);
        scratch.zero_points.resize(in);
        for (std::int64_t task = range.begin(); task != range.end(); ++task) {
          for (std::int64_t r = task * kTaskRows; r < std::min(g.out, (task + 1) * kTaskRows); ++r) {
            const std::uint64_t base = base0 + static_cast<std::uint64_t>(r * g.in);
            const float* row = load_row(t, data, base, g.in, buf.data(), amax);
            const bool finite = all_finite(&amax.row, 1);
            if (!finite)
              for (const auto& s : schemes) check_finite(row, in, base, src, *s.options);
            const RowInput input{row, g.in, amax.b16.empty() ? nullptr : amax.b16.data(),
                                 amax.b32.empty() ? nullptr : amax.b32.data(), amax.row, finite};
            const RowOutput output{nullptr, scratch.scale_bytes.data(), scratch.scales.data(),
                                   scratch.zero_points.data()};
            for (auto& s : schemes)
              s.traits->row_kernel(s.params, input, output,
                                   s.pieces[static_cast<std::size_t>(r / s.traits->chunk_rows)]);
          }
        }
      },
      tbb::simple_partitioner());
  for (std::size_t i = 0; i < schemes.size(); ++i) {
    ErrorMetrics m;
    for (const auto& p : schemes[i].pieces) m.merge(p);
    expert_metrics[i] = m;
  }
}

void check_source(const TensorView& src) {
  if (src.info == nullptr) throw Error(ErrorKind::Internal, "measure_weight: TensorView without info");
  const TensorInfo& info = *src.info;
  if (!dtype_is_float_source(info.dtype) || info.dtype == DType::F64)
    throw_unsupported(
        fmt::format("cannot quantize a {} tensor: source must be F32, BF16 or F16", dtype_name(info.dtype)),
        ErrorWhere{{}, info.name, {}});
  if (src.bytes.size() != info.nbytes())
    throw_bad_input(fmt::format("tensor data is {} bytes, header says {}", src.bytes.size(), info.nbytes()),
                    ErrorWhere{{}, info.name, {}});
}

// A kind without a row kernel: quantize_weight into a scratch buffer.
ErrorMetrics measure_by_quantizing(const SchemeSpec& spec, const TensorView& src,
                                   const TensorQuantizeOptions& options) {
  std::vector<std::vector<std::uint8_t>> storage;
  std::vector<std::span<std::uint8_t>> outs;
  for (const auto& o : scheme_outputs(spec, src.info->shape))
    outs.emplace_back(storage.emplace_back(dtype_nbytes(o.dtype, shape_numel(o.shape))));
  ErrorMetrics m;
  quantize_weight(spec, src, outs, m, options);
  return m;
}

}  // namespace

void measure_weight(std::span<const SchemeSpec> specs, const TensorView& src,
                    std::span<const TensorQuantizeOptions> options,
                    std::span<ErrorMetrics> metrics) {
  if (options.size() != specs.size() || metrics.size() != specs.size())
    throw Error(ErrorKind::Internal, "measure_weight: one option set and one metrics per scheme");
  check_source(src);
  std::vector<RowScheme> schemes;
  std::vector<std::size_t> index;  // schemes[k] is specs[index[k]]
  Geometry g;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (options[i].pieces) throw Error(ErrorKind::Internal, "measure_weight: metric pieces are not supported");
    if (rounding_input(specs[i].rounding.value) == RoundingInput::ModelPass)  // its weights come from the runtime
      throw Error(ErrorKind::Internal, fmt::format("measure_weight: rounding {} is not measured from the weight alone",
                                                   rounding_name(specs[i].rounding.value)));
    g = geometry_for(specs[i], src.info->shape, src.info->name);  // the same for every scheme
    const SchemeTraits& traits = scheme_traits(specs[i].kind);
    // A rounding with input moments takes them through quantize_weight (checked there).
    if (!traits.row_kernel || rounding_input(specs[i].rounding.value) == RoundingInput::InputMoments) {
      metrics[i] = measure_by_quantizing(specs[i], src, options[i]);
      continue;
    }
    RowScheme s;
    s.traits = &traits;
    s.options = &options[i];
    s.params.spec = &specs[i];
    schemes.push_back(std::move(s));
    index.push_back(i);
  }
  if (schemes.empty()) return;
  std::vector<ErrorMetrics> totals(schemes.size()), expert(schemes.size());
  for (std::int64_t e = 0; e < g.experts; ++e) {
    measure_matrix(schemes, src, g, e, expert);
    for (std::size_t k = 0; k < schemes.size(); ++k) totals[k].merge(expert[k]);
  }
  for (std::size_t k = 0; k < schemes.size(); ++k) metrics[index[k]] = totals[k];
}

}  // namespace selq::quant
