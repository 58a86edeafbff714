#pragma once
// selq-rotation.json: what `selq rotate` folded into a checkpoint (the kind,
// the seed, the matrices' constructions, the source), so that a quantization
// of the rotated checkpoint records it in its manifest and a recipe asking for
// a rotation can tell whether its source has it.
#include <string>

#include <nlohmann/json.hpp>

namespace selq::io {

constexpr const char* kRotationRecordName = "selq-rotation.json";

// The record in checkpoint directory `dir`, or null when it has none;
// BadInput when the file is there but not a JSON object.
nlohmann::json read_rotation_record(const std::string& dir);

}  // namespace selq::io
