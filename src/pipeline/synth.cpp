// Writes synthetic checkpoints. Values come from a counter-based hash of
// (seed, tensor name, element index), so generation is parallel and the
// output is identical for any thread count; std:: distributions are neither
// fast enough for multi-GB checkpoints nor reproducible across libstdc++
// versions, which is why the generator is written here.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <oneapi/tbb/parallel_for.h>

#include "core/codecs.h"
#include "export/dialect.h"
#include "core/error.h"
#include "core/expert_name.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "io/xxh3.h"
#include "pipeline/synth.h"
#include "quant/scheme.h"
#include "recipe/fused_modules.h"

namespace fs = std::filesystem;

namespace selq::pipeline {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Approximately standard normal from one 64-bit hash: the sum of four
// uniform 16-bit lanes (Irwin-Hall), rescaled to unit variance.
float approx_normal(std::uint64_t h) {
  float s = 0;
  for (int k = 0; k < 4; ++k) s += static_cast<float>((h >> (16 * k)) & 0xFFFF) / 65535.0f;
  return (s - 2.0f) * 1.7320508f;  // var of the sum of 4 U(0,1) is 1/3
}

// Fills `out` (F32) with trained-looking weights for one tensor.
void generate_values(const SynthTensor& t, std::uint64_t seed, std::vector<float>& out) {
  const std::uint64_t n = shape_numel(t.info.shape);
  out.resize(n);
  const std::uint64_t tseed = XXH3_64bits_withSeed(t.info.name.data(), t.info.name.size(), seed);
  const std::uint64_t cols = t.info.shape.empty() ? 1 : static_cast<std::uint64_t>(t.info.shape.back());
  const std::uint64_t rows = cols ? n / cols : 0;
  tbb::parallel_for(tbb::blocked_range<std::uint64_t>(0, rows, 64), [&](const auto& r) {
    for (std::uint64_t row = r.begin(); row != r.end(); ++row) {
      // Per-output-channel spread: log-normal row scale.
      const float row_scale = t.row_scale * std::exp(0.5f * approx_normal(splitmix64(tseed ^ (row * 0x100000001ull))));
      for (std::uint64_t c = 0; c < cols; ++c) {
        const std::uint64_t i = row * cols + c;
        const std::uint64_t h = splitmix64(tseed + i);
        if (t.is_norm) {
          out[i] = 1.0f + 0.1f * approx_normal(h);
          continue;
        }
        // About 1% of input channels carry outliers (the activation-outlier
        // channels of trained LLMs show up as large weight columns).
        const bool outlier_col = (splitmix64(tseed ^ (c * 0x9E37ull)) % 100) == 0;
        float v = approx_normal(h) * row_scale * (outlier_col ? 6.0f : 1.0f);
        // Heavy tail: 1 element in 4096 is 10x larger.
        if (((h >> 52) & 0xFFF) == 0) v *= 10.0f;
        out[i] = v;
      }
    }
  });
}

std::vector<std::uint8_t> to_bf16_bytes(const std::vector<float>& v) {
  std::vector<std::uint8_t> b(v.size() * 2);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, v.size(), 1 << 16), [&](const auto& r) {
    for (std::size_t i = r.begin(); i != r.end(); ++i) {
      const std::uint16_t h = f32_to_bf16_ref(v[i]);
      b[2 * i] = static_cast<std::uint8_t>(h & 0xFF);
      b[2 * i + 1] = static_cast<std::uint8_t>(h >> 8);
    }
  });
  return b;
}

bool is_routed_expert(const std::string& name) { return parse_routed_expert(name).has_value(); }

// compressed-tensors NVFP4 (what a published NVFP4 checkpoint holds): the
// tensors that replace `<module>.weight`.
quant::SchemeSpec ct_nvfp4() {
  quant::SchemeSpec s;
  s.kind = quant::SchemeKind::NVFP4;
  s.act = quant::ActMode::NVFP4;
  s.nvfp = quant::NvfpConvention::CompressedTensors;
  return s;
}

std::string ct_name(quant::OutRole role) {
  switch (role) {
    case quant::OutRole::Weight: return "weight_packed";
    case quant::OutRole::Scale: return "weight_scale";
    case quant::OutRole::GlobalScale: return "weight_global_scale";
    default: throw Error(ErrorKind::Internal, "unexpected NVFP4 output role");
  }
}

struct OutputTensor {
  TensorInfo info;
  std::size_t source;  // index in SynthModel::tensors
};

nlohmann::json nvfp4_quantization_config(const SynthModel& m) {
  nlohmann::json ignore = nlohmann::json::array();
  for (const auto& t : m.tensors) {
    const auto& n = t.info.name;
    if (t.is_norm || t.info.shape.size() < 2 || is_routed_expert(n)) continue;
    if (n.size() < 7 || n.substr(n.size() - 7) != ".weight") continue;
    if (n.find("embed_tokens") != std::string::npos || n.find("mlp.gate.") != std::string::npos) continue;
    ignore.push_back(n.substr(0, n.size() - 7));
  }
  // The group as selq's own compressed-tensors writer spells NVFP4 (W4A4,
  // dynamic "local" activations), so that verify recognizes the scheme.
  nlohmann::json group = exporter::scheme_config_json(exporter::Dialect::CompressedTensors, ct_nvfp4());
  group["targets"] = {"re:.*mlp\\.experts\\.\\d+\\.(gate|up|down)_proj$"};
  return {{"quant_method", "compressed-tensors"},
          {"format", "nvfp4-pack-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", group}}},
          {"ignore", ignore},
          {"kv_cache_scheme", nullptr}};
}

// The output tensors in order: a routed expert's weight becomes the NVFP4
// tensors when the source is to look pre-quantized.
std::vector<OutputTensor> synth_outputs(const SynthModel& m, const SynthOptions& o) {
  std::vector<OutputTensor> outputs;
  for (std::size_t i = 0; i < m.tensors.size(); ++i) {
    const auto& t = m.tensors[i];
    if (o.experts_nvfp4 && is_routed_expert(t.info.name)) {
      const std::string module = t.info.name.substr(0, t.info.name.size() - 7);
      for (const auto& spec : quant::scheme_outputs(ct_nvfp4(), t.info.shape))
        outputs.push_back({{module + "." + ct_name(spec.role), spec.dtype, spec.shape}, i});
      outputs.push_back({{module + ".input_global_scale", DType::F32, {1}}, i});
    } else {
      outputs.push_back({t.info, i});
    }
  }
  return outputs;
}

// The outputs' indices per shard, in order, each shard capped in bytes.
std::vector<std::vector<std::size_t>> shard_outputs(const std::vector<OutputTensor>& outputs, std::uint64_t cap) {
  std::vector<std::vector<std::size_t>> shards(1);
  std::uint64_t current = 0;
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    const std::uint64_t b = outputs[k].info.nbytes();
    if (current > 0 && current + b > cap) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(k);
    current += b;
  }
  return shards;
}

// Shards of one fused module (an expert's gate/up) share an NVFP4 global
// scale, as engines require: the amax over all of them, by fused key.
std::map<std::string, float> expert_group_amax(const SynthModel& m, const SynthOptions& o) {
  std::map<std::string, float> group_amax;
  if (!o.experts_nvfp4) return group_amax;
  std::vector<float> values;
  for (const auto& t : m.tensors) {
    if (!is_routed_expert(t.info.name)) continue;
    const std::string key = recipe::fused_shard_key(t.info.name.substr(0, t.info.name.size() - 7));
    if (key.empty()) continue;
    generate_values(t, o.seed, values);
    float amax = 0;
    for (float v : values) amax = std::max(amax, std::fabs(bf16_to_f32(f32_to_bf16_ref(v))));
    group_amax[key] = std::max(group_amax[key], amax);
  }
  return group_amax;
}

// A generated expert quantized to NVFP4: its stored tensors by name, and the
// static activation global scale calibration would give for |x| <= 8.
std::map<std::string, std::vector<std::uint8_t>> quantized_expert(const SynthTensor& src, std::uint64_t seed,
                                                                   const std::map<std::string, float>& group_amax) {
  std::vector<float> values;
  generate_values(src, seed, values);
  const auto bf16 = to_bf16_bytes(values);
  TensorView view{&src.info, bf16};
  const auto specs = quant::scheme_outputs(ct_nvfp4(), src.info.shape);
  std::vector<std::vector<std::uint8_t>> bufs(specs.size());
  std::vector<std::span<std::uint8_t>> spans;
  for (std::size_t j = 0; j < specs.size(); ++j) {
    bufs[j].assign(dtype_nbytes(specs[j].dtype, shape_numel(specs[j].shape)), 0);
    spans.push_back(bufs[j]);
  }
  const std::string module = src.info.name.substr(0, src.info.name.size() - 7);
  quant::TensorQuantizeOptions qo;
  if (auto g = group_amax.find(recipe::fused_shard_key(module)); g != group_amax.end()) qo.global_amax = g->second;
  quant::ErrorMetrics metrics;
  quant::quantize_weight(ct_nvfp4(), view, spans, metrics, qo);
  std::map<std::string, std::vector<std::uint8_t>> out;
  for (std::size_t j = 0; j < specs.size(); ++j) out[module + "." + ct_name(specs[j].role)] = std::move(bufs[j]);
  const float igs = 448.0f * 6.0f / 8.0f;
  std::vector<std::uint8_t> igs_bytes(4);
  std::memcpy(igs_bytes.data(), &igs, 4);
  out[module + ".input_global_scale"] = igs_bytes;
  return out;
}

void write_synth_shard(const std::string& path, const SynthModel& m, const SynthOptions& o,
                       const std::vector<OutputTensor>& outputs, const std::vector<std::size_t>& members,
                       const std::map<std::string, float>& group_amax) {
  std::vector<TensorInfo> infos;
  for (auto k : members) infos.push_back(outputs[k].info);
  io::SafetensorsWriter writer(path, infos, {{"format", "pt"}});
  std::vector<float> values;
  std::size_t last_source = SIZE_MAX;
  std::map<std::string, std::vector<std::uint8_t>> pending;  // NVFP4 outputs of the current source
  for (auto k : members) {
    const auto& out = outputs[k];
    const auto& src = m.tensors[out.source];
    if (out.info.name == src.info.name) {
      generate_values(src, o.seed, values);
      if (src.info.dtype == DType::F32)
        writer.write(out.info.name, std::span(reinterpret_cast<const std::uint8_t*>(values.data()), values.size() * 4));
      else
        writer.write(out.info.name, to_bf16_bytes(values));
      continue;
    }
    if (out.source != last_source) {  // quantize the expert once; its outputs are written as they come up
      last_source = out.source;
      pending = quantized_expert(src, o.seed, group_amax);
    }
    writer.write(out.info.name, pending.at(out.info.name));
  }
  writer.commit();
}

// config.json, the index and the non-tensor files a real checkpoint carries
// (so that copying them is exercised).
void write_synth_side_files(const std::string& staging, const SynthModel& m, const SynthOptions& o,
                            const std::map<std::string, std::string>& weight_map, std::uint64_t total) {
  nlohmann::json config = m.config;
  if (o.experts_nvfp4) config["quantization_config"] = nvfp4_quantization_config(m);
  io::write_file_atomic((fs::path(staging) / "config.json").string(), config.dump(2) + "\n");
  io::write_index((fs::path(staging) / io::kIndexName).string(), weight_map, total);
  io::write_file_atomic((fs::path(staging) / "generation_config.json").string(),
                        nlohmann::json{{"do_sample", false}, {"max_new_tokens", 256}}.dump(2) + "\n");
  io::write_file_atomic((fs::path(staging) / "tokenizer_config.json").string(),
                        nlohmann::json{{"model_max_length", 8192}, {"tokenizer_class", "PreTrainedTokenizerFast"}}.dump(2) + "\n");
  for (const auto& [name, content] : o.extra_files) io::write_file_atomic((fs::path(staging) / name).string(), content);
}

}  // namespace

std::uint64_t write_synth_checkpoint(const SynthOptions& o, const std::string& dst) {
  if (fs::exists(dst)) throw_bad_input("destination exists", {dst});
  if (o.experts_nvfp4 && !synth_architecture(o.arch).moe)
    throw_bad_input(fmt::format("NVFP4 routed experts need an architecture with routed experts, and {} has none",
                                o.arch));
  const SynthModel m = describe_synth_model(o);
  const std::string staging = dst + ".selq-partial";
  std::error_code ec;
  fs::remove_all(staging, ec);
  fs::create_directories(staging);

  const std::vector<OutputTensor> outputs = synth_outputs(m, o);
  const auto shards = shard_outputs(outputs, o.max_shard_bytes);
  const auto group_amax = expert_group_amax(m, o);
  std::map<std::string, std::string> weight_map;
  std::uint64_t total = 0;
  for (std::size_t s = 0; s < shards.size(); ++s) {
    const std::string shard_name = fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
    for (auto k : shards[s]) {
      weight_map[outputs[k].info.name] = shard_name;
      total += outputs[k].info.nbytes();
    }
    write_synth_shard((fs::path(staging) / shard_name).string(), m, o, outputs, shards[s], group_amax);
  }
  write_synth_side_files(staging, m, o, weight_map, total);
  fs::rename(staging, dst, ec);
  if (ec) throw_io(fmt::format("cannot rename the synthetic checkpoint into place: {}", ec.message()), {dst});
  return total;
}

}  // namespace selq::pipeline
