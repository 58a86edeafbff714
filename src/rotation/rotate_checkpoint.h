#pragma once
// `selq rotate SRC DST`: a float checkpoint with a rotation folded into its
// weights (rotation/fold_rules.h), the same architecture and tensor names (a
// tied head written out as lm_head.weight), so every engine loads it as the
// plain model it is. Streamed tensor by tensor (large ones in row blocks), in
// the source's dtype; staged in DST.selq-partial and renamed when complete.
// DST carries selq-rotation.json (io/rotation_record.h), the record a quantization of it copies into
// its manifest.
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "io/rotation_record.h"
#include "rotation/fold_rules.h"

namespace selq::rotation {

struct RotateOptions {
  RotationKind kind{RotationKind::R1};
  std::uint64_t seed{0};
  // The residual rotation block-diagonal in runs of this many channels (0:
  // one rotation of the whole hidden size).
  std::int64_t block{0};
  bool overwrite{false};
  // The decoder layers' rotated linears in F32 instead of the source's dtype:
  // a BF16 rounding of every rotated weight is most of what separates the
  // rotation's logits from the original's (SmolLM2: KL 2.7e-4 of 2.9e-4).
  bool f32_linears{false};
  // Bounds the float copy of one tensor: an input-side fold goes in row
  // blocks of at most this; an output-side one holds one [out, in] matrix.
  std::uint64_t block_bytes{std::uint64_t{64} << 20};
  std::function<void(std::size_t tensors_done, std::size_t tensors_total)> on_progress;
};

struct RotateResult {
  nlohmann::json record;  // what selq-rotation.json says
  double seconds{0};
  std::uint64_t bytes_read{0};
  std::uint64_t bytes_written{0};
};

// Refuses in one line, before writing anything: a source that is not a float
// checkpoint (quantization_config, a non-float tensor), one already rotated,
// an architecture the runtime does not run, a tensor with no rule.
RotateResult rotate_checkpoint(const std::string& source, const std::string& dst, const RotateOptions& options);

// What a quantization with a rotation reads: `source` itself when it already
// carries rotation `options.kind` (its record says so), else its rotation in
// `work_dir` (made there, or kept from an interrupted run when its record
// names the same source, kind and seed). The caller removes work_dir once the
// quantization has committed. Refused: a source rotated otherwise.
std::string rotated_source(const std::string& source, const std::string& work_dir, const RotateOptions& options);
// Where `selq quantize --rotation` into `dst` rotates its source.
inline std::string rotation_work_dir(const std::string& dst) { return dst + ".selq-rotated"; }

}  // namespace selq::rotation
