#pragma once
// How serving engines group checkpoint linear modules into their own modules
// (docs/ENGINE_RULES.md §1.3, §4, §6): fused shards (q/k/v -> qkv_proj, gate/up ->
// gate_up_proj, q_a + kv_a -> fused_qkv_a_proj) and routed experts (one
// `...mlp.experts` module for every `...mlp.experts.<n>.<proj>`). The fused
// rules are recipe/fused_modules.h's; config writers and the engine resolvers
// group by them so they cannot drift.
#include <optional>
#include <string>
#include <vector>

#include "recipe/fused_modules.h"

namespace selq::exporter {

// Engines differ only in the name of the fused DeepSeek q_a/kv_a module.
enum class EngineFamily { Vllm, Sglang, Atom };

// recipe::fused_linear_rules with the family's module names.
using recipe::FusedRule;
const std::vector<FusedRule>& packed_modules(EngineFamily family);

struct EngineModule {
  enum class Kind { Linear, Fused, Experts };
  std::string name;                  // engine prefix
  Kind kind{Kind::Linear};
  std::vector<std::string> members;  // checkpoint modules (shards in order, experts sorted)
};

// Groups checkpoint module names the way `family` builds its modules. A fused
// module is formed only when every shard exists under the same parent.
std::vector<EngineModule> engine_modules(EngineFamily family,
                                         const std::vector<std::string>& checkpoint_modules);

// "a.mlp.experts.12.up_proj" -> "a.mlp.experts"; nullopt if not a routed expert.
std::optional<std::string> experts_parent(const std::string& module);

// Modules the engines build without quant_config whatever the config says
// (docs/ENGINE_RULES.md §6: the MoE router `mlp.gate`, indexer wk/weights_proj, MTP eh_proj).
bool engine_never_quantizes(const std::string& engine_module);

// Heads an engine builds although the checkpoint stores no weight for them,
// because they share the embedding's (docs/ENGINE_RULES.md, "Tied heads"): `lm_head`
// when there is no lm_head weight but an embed_tokens one, and the MTP
// layers' `shared_head.head` when a layer has `eh_proj` but no head of its
// own. vLLM's ModelOpt config builds such a head quantized unless excluded.
// `tensor_names`: every tensor of the checkpoint.
std::vector<std::string> unstored_head_modules(const std::vector<std::string>& tensor_names);

std::string last_component(const std::string& name);
std::string parent_of(const std::string& name);  // "" for a name without '.'

// Python-compatible matching primitives used by the engines.
bool py_re_match(const std::string& pattern, const std::string& s);   // re.match
bool py_re_search(const std::string& pattern, const std::string& s);  // re.search
bool py_fnmatch(const std::string& name, const std::string& pattern); // fnmatch.fnmatch (POSIX)
std::string regex_escape(const std::string& s);

}  // namespace selq::exporter
