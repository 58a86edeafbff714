// The runtime's architecture rows (runtime/model/architectures.h) and load_model.
#include "runtime/model/architectures.h"

#include <array>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/spoken_list.h"
#include "runtime/model/deepseek_v3.h"
#include "runtime/model/hf_config.h"
#include "runtime/model/llama.h"

namespace selq::runtime {
namespace {

std::unique_ptr<CausalLM> load_llama(std::shared_ptr<const io::Checkpoint> ck, const std::string& path) {
  return LlamaModel::load(std::move(ck), path);
}
std::unique_ptr<CausalLM> load_deepseek(std::shared_ptr<const io::Checkpoint> ck, const std::string& path) {
  return DeepseekV3Model::load(std::move(ck), path);
}

// One row per model_type. A new architecture adds its rows here and its files.
constexpr std::array<RuntimeArchitecture, 6> kArchitectures{{
    {"llama", "llama", load_llama, true, ""},
    {"mistral", "llama", load_llama, true, ""},
    {"qwen2", "llama", load_llama, true, ""},
    {"deepseek_v3", "deepseek-v3", load_deepseek, true, ""},
    {"kimi_k2", "deepseek-v3", load_deepseek, true, "DeepSeek-V3's config and code under another name"},
    {"deepseek_v2", "deepseek-v3", load_deepseek, true, "only with V3's router (sigmoid scores, noaux_tc)"},
}};

// The model_type of a checkpoint's config.json (a multimodal one's text_config's).
std::string model_type_of(const io::Checkpoint& ck, const std::string& path) {
  const auto& file = ck.config();
  if (!file.is_object()) throw_bad_input(fmt::format("{}: no config.json object", path));
  const auto& c = decoder_config(file);
  if (!c.contains("model_type") || !c["model_type"].is_string())
    throw_bad_input(fmt::format("{}: config.json has no 'model_type'", path));
  return c["model_type"].get<std::string>();
}

const RuntimeArchitecture& row_or_refuse(const std::string& model_type, const std::string& path) {
  if (const auto* a = find_runtime_architecture(model_type)) return *a;
  throw_unsupported(fmt::format("{}: model_type '{}' is not an architecture the runtime runs ({})", path, model_type,
                                fmt::join(runtime_model_types(), ", ")));
}

}  // namespace

std::span<const RuntimeArchitecture> runtime_architectures() { return kArchitectures; }

const RuntimeArchitecture* find_runtime_architecture(std::string_view model_type) {
  for (const auto& a : kArchitectures)
    if (model_type == a.model_type) return &a;
  return nullptr;
}

std::vector<std::string> runtime_model_types() {
  std::vector<std::string> out;
  for (const auto& a : kArchitectures) out.emplace_back(a.model_type);
  return out;
}

std::string layer_by_layer_model_types_text() {
  std::vector<std::string> v;
  for (const auto& a : kArchitectures)
    if (a.layer_by_layer) v.emplace_back(a.model_type);
  return spoken_list(v, "and");
}

std::shared_ptr<const io::Checkpoint> checked_checkpoint(const std::string& path, std::string_view family) {
  std::shared_ptr<const io::Checkpoint> ck = io::Checkpoint::open(path);
  const std::string mt = model_type_of(*ck, path);
  if (row_or_refuse(mt, path).family != family)
    throw_unsupported(fmt::format("{}: model_type '{}' is not a {} decoder", path, mt, family));
  return ck;
}

void require_runtime_architecture(const std::string& path) {
  const std::shared_ptr<const io::Checkpoint> ck = io::Checkpoint::open(path);
  row_or_refuse(model_type_of(*ck, path), path);
}

std::unique_ptr<CausalLM> load_model(const std::string& path) {
  std::shared_ptr<const io::Checkpoint> ck = io::Checkpoint::open(path);
  return row_or_refuse(model_type_of(*ck, path), path).load(std::move(ck), path);
}

}  // namespace selq::runtime
