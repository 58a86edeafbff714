// DeepSeek-V3 forward pass. Math follows transformers' modeling_deepseek_v3.py
// (5.x): RMSNorm in F32 (q_a/kv_a norms with eps 1e-6, as DeepseekV3RMSNorm's
// default), cos/sin times YaRN's attention factor in F32, softmax attention
// scaled by qk_head_dim^-0.5 times mscale(factor, mscale_all_dim)^2, routed
// experts accumulated per token in expert order, then the shared experts.
#include "runtime/model/deepseek_v3.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include "core/error.h"
#include "io/checkpoint.h"
#include "runtime/model/architectures.h"
#include "runtime/model/blas.h"
#include "runtime/model/model_ops.h"

namespace selq::runtime {

using nlohmann::json;
using ops::load_vector;
using ops::per_token;
using ops::causal_softmax;
using ops::rms_norm;
using ops::silu;

namespace {

constexpr float kLatentNormEps = 1e-6f;  // DeepseekV3RMSNorm(q_lora_rank / kv_lora_rank): its default eps

std::int64_t req_int(const json& c, const char* key, const std::string& source) {
  if (!c.contains(key) || !c[key].is_number_integer())
    throw_bad_input(fmt::format("{}: config.json needs an integer '{}'", source, key));
  return c[key].get<std::int64_t>();
}

bool req_bool(const json& c, const char* key, const std::string& source) {
  if (!c.contains(key) || !c[key].is_boolean())
    throw_bad_input(fmt::format("{}: config.json needs a boolean '{}'", source, key));
  return c[key].get<bool>();
}

// A string field that, when present, must have the value the runtime implements.
void require_value(const json& c, const char* key, const char* implemented, bool required, const std::string& source) {
  if (!c.contains(key) || c[key].is_null()) {
    if (required)
      throw_unsupported(fmt::format("{}: config.json has no '{}'; the runtime implements {} '{}' only (DeepSeek-V3's)",
                                    source, key, key, implemented));
    return;
  }
  if (!c[key].is_string() || c[key].get<std::string>() != implemented)
    throw_unsupported(fmt::format("{}: {} {} is not implemented by the reference runtime (only '{}')", source, key,
                                  c[key].dump(), implemented));
}

// Rows [r0, r0 + rows) of matrix `e` of a float 3-D stack [experts, R, C]
// as a Matrix (BF16 bits read in place with a `mapping`, else copied as they are).
Matrix stack_slice(const TensorView& v, std::int64_t e, std::int64_t r0, std::int64_t rows,
                   const std::shared_ptr<const void>& mapping) {
  const std::int64_t R = v.info->shape[1], C = v.info->shape[2];
  const auto first = static_cast<std::uint64_t>((e * R + r0) * C), n = static_cast<std::uint64_t>(rows * C);
  const std::uint8_t* at = v.bytes.data() + 2 * first;
  if (v.info->dtype == DType::BF16 && mapping && reinterpret_cast<std::uintptr_t>(at) % 2 == 0)
    return Matrix::from_mapped_bf16(reinterpret_cast<const std::uint16_t*>(at), rows, C, mapping);
  if (v.info->dtype == DType::BF16) {
    std::vector<std::uint16_t> bits(n);
    std::memcpy(bits.data(), v.bytes.data() + 2 * first, 2 * n);
    return Matrix::from_bf16(std::move(bits), rows, C);
  }
  std::vector<float> f(n);
  load_floats(v.info->dtype, v.bytes.data(), first, n, f.data());
  return Matrix::from_f32(std::move(f), rows, C);
}

}  // namespace

DeepseekV3Config deepseek_v3_config_from_json(const json& file, const std::string& source) {
  if (!file.is_object()) throw_bad_input(fmt::format("{}: no config.json object", source));
  const json& c = decoder_config(file);
  if (!c.contains("model_type") || !c["model_type"].is_string())
    throw_bad_input(fmt::format("{}: config.json has no 'model_type'", source));
  DeepseekV3Config cfg;
  cfg.model_type = c["model_type"];  // one the registry gave this loader (runtime/model/architectures.cpp)
  // DeepSeek-V2's own router (softmax, greedy top-k) is another model: a V2
  // config runs here only when it states V3's.
  const bool v2 = cfg.model_type == "deepseek_v2";
  require_value(c, "scoring_func", "sigmoid", v2, source);
  require_value(c, "topk_method", "noaux_tc", v2, source);
  if (c.contains("hidden_act")) require_value(c, "hidden_act", "silu", false, source);
  if (c.contains("moe_layer_freq") && !(c["moe_layer_freq"].is_number_integer() && c["moe_layer_freq"] == 1))
    throw_unsupported(fmt::format("{}: moe_layer_freq {} is not implemented by the reference runtime (only 1)", source,
                                  c["moe_layer_freq"].dump()));
  cfg.hidden = req_int(c, "hidden_size", source);
  cfg.intermediate = req_int(c, "intermediate_size", source);
  cfg.moe_intermediate = req_int(c, "moe_intermediate_size", source);
  cfg.layers = req_int(c, "num_hidden_layers", source);
  cfg.heads = req_int(c, "num_attention_heads", source);
  if (c.contains("num_key_value_heads") && !c["num_key_value_heads"].is_null() &&
      req_int(c, "num_key_value_heads", source) != cfg.heads)
    throw_unsupported(fmt::format("{}: num_key_value_heads {} differs from num_attention_heads {} (MLA expands one "
                                  "latent to every head; the runtime implements no grouping on top)",
                                  source, c["num_key_value_heads"].dump(), cfg.heads));
  cfg.vocab = req_int(c, "vocab_size", source);
  cfg.q_lora_rank = c.contains("q_lora_rank") && c["q_lora_rank"].is_null() ? 0 : req_int(c, "q_lora_rank", source);
  cfg.kv_lora_rank = req_int(c, "kv_lora_rank", source);
  cfg.qk_nope_dim = req_int(c, "qk_nope_head_dim", source);
  cfg.qk_rope_dim = req_int(c, "qk_rope_head_dim", source);
  cfg.v_dim = req_int(c, "v_head_dim", source);
  cfg.routed_experts = req_int(c, "n_routed_experts", source);
  cfg.shared_experts = c.contains("n_shared_experts") && c["n_shared_experts"].is_null()
                           ? 0
                           : req_int(c, "n_shared_experts", source);
  cfg.experts_per_token = req_int(c, "num_experts_per_tok", source);
  cfg.n_group = req_int(c, "n_group", source);
  cfg.topk_group = req_int(c, "topk_group", source);
  cfg.first_dense = req_int(c, "first_k_dense_replace", source);
  cfg.norm_topk_prob = req_bool(c, "norm_topk_prob", source);
  cfg.routed_scaling = static_cast<float>(required_number(c, "routed_scaling_factor", source));
  cfg.rms_eps = static_cast<float>(required_number(c, "rms_norm_eps", source));
  cfg.max_positions = c.value("max_position_embeddings", std::int64_t{2048});
  cfg.tie_embeddings = c.value("tie_word_embeddings", false);
  // Absent: transformers' default (true), which is also what DeepSeek's own
  // code does (it permutes q/k into rotate-half order).
  if (c.contains("rope_interleave") && !c["rope_interleave"].is_null())
    cfg.rope_interleave = req_bool(c, "rope_interleave", source);
  cfg.rope = rope_or_yarn_from_config(c, source);

  if (cfg.hidden <= 0 || cfg.intermediate <= 0 || cfg.moe_intermediate <= 0 || cfg.layers <= 0 || cfg.heads <= 0 ||
      cfg.vocab <= 0 || cfg.q_lora_rank < 0 || cfg.kv_lora_rank <= 0 || cfg.qk_nope_dim < 0 || cfg.qk_rope_dim <= 0 ||
      cfg.qk_rope_dim % 2 != 0 || cfg.v_dim <= 0 || cfg.routed_experts <= 0 || cfg.shared_experts < 0 ||
      cfg.first_dense < 0)
    throw_bad_input(fmt::format("{}: inconsistent config (hidden {}, heads {}, kv_lora_rank {}, qk_rope_head_dim {}, "
                                "n_routed_experts {})",
                                source, cfg.hidden, cfg.heads, cfg.kv_lora_rank, cfg.qk_rope_dim, cfg.routed_experts));
  if (cfg.n_group <= 0 || cfg.routed_experts % cfg.n_group != 0 || cfg.routed_experts / cfg.n_group < 2 ||
      cfg.topk_group <= 0 || cfg.topk_group > cfg.n_group || cfg.experts_per_token <= 0 ||
      cfg.experts_per_token > cfg.topk_group * (cfg.routed_experts / cfg.n_group))
    throw_bad_input(fmt::format("{}: n_routed_experts {}, n_group {}, topk_group {}, num_experts_per_tok {} do not "
                                "make a group-limited top-k (each group needs at least 2 experts, the chosen groups "
                                "at least num_experts_per_tok)",
                                source, cfg.routed_experts, cfg.n_group, cfg.topk_group, cfg.experts_per_token));
  return cfg;
}

namespace {

// Every linear module of the model, for the loader's engine-style resolution.
std::vector<std::string> linear_module_names(const DeepseekV3Config& c) {
  std::vector<std::string> modules;
  for (std::int64_t i = 0; i < c.layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    if (c.q_lora_rank > 0) {
      modules.push_back(p + "self_attn.q_a_proj");
      modules.push_back(p + "self_attn.q_b_proj");
    } else {
      modules.push_back(p + "self_attn.q_proj");
    }
    for (const char* n : {"self_attn.kv_a_proj_with_mqa", "self_attn.kv_b_proj", "self_attn.o_proj"})
      modules.push_back(p + n);
    auto add_mlp = [&](const std::string& q) {
      for (const char* n : {"gate_proj", "up_proj", "down_proj"}) modules.push_back(q + n);
    };
    if (i < c.first_dense) {
      add_mlp(p + "mlp.");
    } else {
      for (std::int64_t e = 0; e < c.routed_experts; ++e) add_mlp(p + fmt::format("mlp.experts.{}.", e));
      if (c.shared_experts > 0) add_mlp(p + "mlp.shared_experts.");
    }
  }
  return modules;
}

// Loads one decoder layer's parts, each checked against the config's shapes.
class LayerLoader {
 public:
  LayerLoader(const io::Checkpoint& ck, const LinearLoader& loader, const DeepseekV3Config& c, const std::string& path,
              const std::shared_ptr<const void>& mapping)
      : ck_(ck), loader_(loader), c_(c), path_(path), mapping_(mapping) {}

  void attention(DeepseekV3Layer& L, const std::string& p) const {
    const std::int64_t qk = c_.qk_dim();
    if (c_.q_lora_rank > 0) {
      L.q_a = linear(p + "self_attn.q_a_proj", c_.q_lora_rank, c_.hidden);
      L.q_a_norm = load_vector(ck_, p + "self_attn.q_a_layernorm.weight", c_.q_lora_rank);
      L.q_b = linear(p + "self_attn.q_b_proj", c_.heads * qk, c_.q_lora_rank);
    } else {
      L.q = linear(p + "self_attn.q_proj", c_.heads * qk, c_.hidden);
    }
    L.kv_a = linear(p + "self_attn.kv_a_proj_with_mqa", c_.kv_lora_rank + c_.qk_rope_dim, c_.hidden);
    L.kv_a_norm = load_vector(ck_, p + "self_attn.kv_a_layernorm.weight", c_.kv_lora_rank);
    L.kv_b = linear(p + "self_attn.kv_b_proj", c_.heads * (c_.qk_nope_dim + c_.v_dim), c_.kv_lora_rank);
    L.o = linear(p + "self_attn.o_proj", c_.hidden, c_.heads * c_.v_dim);
  }

  DeepseekMlp mlp(const std::string& p, std::int64_t inter) const {
    DeepseekMlp mm;
    mm.gate = linear(p + "gate_proj", inter, c_.hidden);
    mm.up = linear(p + "up_proj", inter, c_.hidden);
    mm.down = linear(p + "down_proj", c_.hidden, inter);
    return mm;
  }

  // The router (floats only), the routed experts (per-expert tensors or a
  // float 3-D stack) and the shared experts of a MoE layer.
  void moe(DeepseekV3Layer& L, const std::string& p) const {
    const std::string gate = p + "mlp.gate.weight";
    if (const auto* g = ck_.find(gate); g && !dtype_is_float_source(g->info.dtype))
      throw_unsupported(fmt::format("{}: router {} is {}; the runtime reads the router as floats (BF16/F16/F32)",
                                    path_, gate, dtype_name(g->info.dtype)));
    L.router = load_vector(ck_, gate, c_.routed_experts * c_.hidden);
    L.router_bias = load_vector(ck_, p + "mlp.gate.e_score_correction_bias", c_.routed_experts);
    L.router_stored_bits = loader_.stored_bits(p + "mlp.gate");
    L.experts.reserve(static_cast<std::size_t>(c_.routed_experts));
    if (const auto* stack = ck_.find(p + "mlp.experts.gate_up_proj")) {
      expert_stack(L, p, *stack);
    } else {
      for (std::int64_t e = 0; e < c_.routed_experts; ++e)
        L.experts.push_back(mlp(p + fmt::format("mlp.experts.{}.", e), c_.moe_intermediate));
    }
    if (c_.shared_experts > 0) {
      L.shared = mlp(p + "mlp.shared_experts.", c_.moe_intermediate * c_.shared_experts);
      L.has_shared = true;
    }
  }

 private:
  Linear linear(const std::string& module, std::int64_t out, std::int64_t in) const {
    Linear l = loader_.load(module);
    if (l.out != out || l.in != in)
      throw_bad_input(fmt::format("{}: {} is [{}, {}], config implies [{}, {}]", path_, l.module, l.out, l.in, out, in));
    if (!l.bias.empty() && static_cast<std::int64_t>(l.bias.size()) != out)
      throw_bad_input(
          fmt::format("{}: {}.bias has {} elements, the weight has {} rows", path_, l.module, l.bias.size(), out));
    return l;
  }

  // transformers 5's in-memory layout saved as is: gate_up_proj [E, 2I, H]
  // (gate rows first) and down_proj [E, H, I], float only.
  void expert_stack(DeepseekV3Layer& L, const std::string& p, const io::CheckpointTensor& stack) const {
    const std::string down_name = p + "mlp.experts.down_proj";
    const auto* down = ck_.find(down_name);
    const std::int64_t E = c_.routed_experts, I = c_.moe_intermediate, H = c_.hidden;
    if (!down || !dtype_is_float_source(stack.info.dtype) || !dtype_is_float_source(down->info.dtype))
      throw_unsupported(fmt::format("{}: {} is a {} expert stack{}; the runtime reads float stacks "
                                    "(gate_up_proj [E, 2I, H] with down_proj [E, H, I]) and per-expert tensors of "
                                    "any scheme",
                                    path_, stack.info.name, dtype_name(stack.info.dtype),
                                    down ? "" : fmt::format(" without {}", down_name)));
    if (stack.info.shape != Shape{E, 2 * I, H} || down->info.shape != Shape{E, H, I})
      throw_bad_input(fmt::format("{}: expert stacks {} {} and {} {}, config implies [{}, {}, {}] and [{}, {}, {}]",
                                  path_, stack.info.name, shape_to_string(stack.info.shape), down_name,
                                  shape_to_string(down->info.shape), E, 2 * I, H, E, H, I));
    const auto sv = ck_.view(stack.info.name), dv = ck_.view(down_name);
    const double gu_bits = 8.0 * static_cast<double>(stack.info.nbytes()) / static_cast<double>(2 * E);
    const double d_bits = 8.0 * static_cast<double>(down->info.nbytes()) / static_cast<double>(E);
    auto part = [&](const std::string& module, Matrix w, double bits, const TensorView& v) {
      Linear l;
      l.module = module;
      l.out = w.rows;
      l.in = w.cols;
      l.weight = std::move(w);
      l.scheme = dtype_name(v.info->dtype);
      l.stored_bits = bits;
      return l;
    };
    for (std::int64_t e = 0; e < E; ++e) {
      const std::string q = p + fmt::format("mlp.experts.{}.", e);
      DeepseekMlp mm;
      mm.gate = part(q + "gate_proj", stack_slice(sv, e, 0, I, mapping_), gu_bits, sv);
      mm.up = part(q + "up_proj", stack_slice(sv, e, I, I, mapping_), gu_bits, sv);
      mm.down = part(q + "down_proj", stack_slice(dv, e, 0, H, mapping_), d_bits, dv);
      L.experts.push_back(std::move(mm));
    }
  }

  const io::Checkpoint& ck_;
  const LinearLoader& loader_;
  const DeepseekV3Config& c_;
  const std::string& path_;
  const std::shared_ptr<const void>& mapping_;
};

}  // namespace

std::unique_ptr<DeepseekV3Model> DeepseekV3Model::load(const std::string& path) {
  return load(checked_checkpoint(path, "deepseek-v3"), path);
}

std::unique_ptr<DeepseekV3Model> DeepseekV3Model::load(std::shared_ptr<const io::Checkpoint> ck,
                                                       const std::string& path) {
  const auto mapping = mapping_of(ck);
  auto m = std::unique_ptr<DeepseekV3Model>(new DeepseekV3Model());
  m->path_ = path;
  m->cfg_ = deepseek_v3_config_from_json(ck->config(), path);
  const DeepseekV3Config& c = m->cfg_;
  const std::int64_t qk = c.qk_dim();
  LinearLoader loader(*ck, linear_module_names(c), mapping);
  m->dialect_ = loader.dialect();
  m->load_ends(*ck, loader, c.vocab, c.hidden, c.tie_embeddings, path, mapping);
  const LayerLoader layer_loader(*ck, loader, c, path, mapping);
  m->layers_.resize(static_cast<std::size_t>(c.layers));
  m->routed_.assign(static_cast<std::size_t>(c.layers), {});
  for (std::int64_t i = 0; i < c.layers; ++i) {
    auto& L = m->layers_[static_cast<std::size_t>(i)];
    const std::string p = fmt::format("model.layers.{}.", i);
    L.attn_norm = load_vector(*ck, p + "input_layernorm.weight", c.hidden);
    L.mlp_norm = load_vector(*ck, p + "post_attention_layernorm.weight", c.hidden);
    layer_loader.attention(L, p);
    L.moe = i >= c.first_dense;
    if (L.moe) {
      layer_loader.moe(L, p);
      m->routed_[static_cast<std::size_t>(i)].assign(static_cast<std::size_t>(c.routed_experts), 0);
    } else {
      L.dense = layer_loader.mlp(p + "mlp.", c.intermediate);
    }
  }
  m->rope_ = rope_tables(c.rope, c.qk_rope_dim, c.max_positions);
  // transformers' yarn_apply_mscale: for any RoPE type but "default".
  double scale = 1.0 / std::sqrt(static_cast<double>(qk));
  if (c.rope.type != "default" && c.rope.mscale_all_dim != 0) {
    const double ms = yarn_get_mscale(c.rope.factor, c.rope.mscale_all_dim);
    scale = scale * ms * ms;
  }
  m->attn_scale_ = static_cast<float>(scale);
  m->lat_cache_.resize(static_cast<std::size_t>(c.layers));
  m->rot_cache_.resize(static_cast<std::size_t>(c.layers));
  return m;
}

namespace {

// fn(l) for every loaded linear (const or not, as `layers` is).
template <typename Layers, typename Fn>
void for_each_linear(Layers& layers, const Fn& fn) {
  for (auto& L : layers) {
    for (auto* l : {&L.q, &L.q_a, &L.q_b, &L.kv_a, &L.kv_b, &L.o})
      if (l->out > 0) fn(*l);
    auto mlp = [&](auto& m) {
      for (auto* l : {&m.gate, &m.up, &m.down})
        if (l->out > 0) fn(*l);
    };
    if (!L.moe) mlp(L.dense);
    for (auto& e : L.experts) mlp(e);
    if (L.has_shared) mlp(L.shared);
  }
}

}  // namespace

Linear* DeepseekV3Model::find_linear(const std::string& module) {
  if (by_module_.empty()) for_each_linear(layers_, [&](Linear& l) { by_module_.emplace(l.module, &l); });
  const auto it = by_module_.find(module);
  return it == by_module_.end() ? nullptr : it->second;
}

std::vector<const Linear*> DeepseekV3Model::linears() const {
  std::vector<const Linear*> out;
  for_each_linear(layers_, [&](const Linear& l) { out.push_back(&l); });
  return out;
}

std::uint64_t DeepseekV3Model::parameters() const {
  std::uint64_t n = embed_.size() + head_.size() + final_norm_.size();
  for (const auto& L : layers_)
    n += L.attn_norm.size() + L.mlp_norm.size() + L.q_a_norm.size() + L.kv_a_norm.size() + L.router.size() +
         L.router_bias.size();
  for (const Linear* l : linears()) n += l->weight.size();
  return n;
}

std::uint64_t DeepseekV3Model::weight_bytes() const {
  std::uint64_t n = embed_.bytes() + head_.bytes() + 4 * final_norm_.size();
  for (const auto& L : layers_)
    n += 4 * (L.attn_norm.size() + L.mlp_norm.size() + L.q_a_norm.size() + L.kv_a_norm.size() + L.router.size() +
              L.router_bias.size());
  for (const Linear* l : linears()) n += l->weight.bytes();
  return n;
}

double DeepseekV3Model::linear_bits_per_weight() const {
  double bits = head_stored_bits_, elements = static_cast<double>(head_.size());
  for (const auto& L : layers_) {
    bits += L.router_stored_bits;
    elements += static_cast<double>(L.router.size());
  }
  for (const Linear* l : linears()) {
    bits += l->stored_bits;
    elements += static_cast<double>(l->out * l->in);
  }
  return elements > 0 ? bits / elements : 0.0;
}

void DeepseekV3Model::reset_routing_counts() {
  for (auto& r : routed_) std::fill(r.begin(), r.end(), 0);
}

void DeepseekV3Model::ensure_cache(int /*slot: always 0, max_slots() is 1*/, std::int64_t total) {
  if (total <= capacity_) return;
  const std::int64_t cap = std::max<std::int64_t>(total, capacity_ * 2);
  for (auto& l : lat_cache_) l.resize(static_cast<std::size_t>(cap * cfg_.kv_lora_rank));
  for (auto& r : rot_cache_) r.resize(static_cast<std::size_t>(cap * cfg_.qk_rope_dim));
  capacity_ = cap;
}

namespace {

// C[M, N] = alpha * A[M, K] * op(B) + beta * C, row-major (op(B) = B[K, N] or B[N, K]^T).
void gemm(bool b_trans, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* A, std::int64_t lda,
          const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  blas::sgemm(CblasRowMajor, CblasNoTrans, b_trans ? CblasTrans : CblasNoTrans, static_cast<int>(M),
              static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta,
              C, static_cast<int>(ldc));
}

// RoPE of one rope_dim vector v into r: interleaved pairs (x0, x1), ... come
// out as [rotated evens | rotated odds] (transformers' interleave form), else
// rotate-half.
void rope_mla(const float* v, std::int64_t half, const float* cs, const float* sn, bool interleave, float* r) {
  for (std::int64_t i = 0; i < half; ++i) {
    const float a = interleave ? v[2 * i] : v[i], b = interleave ? v[2 * i + 1] : v[i + half];
    r[i] = a * cs[i] - b * sn[i];
    r[i + half] = b * cs[i] + a * sn[i];
  }
}

}  // namespace

std::vector<float> DeepseekV3Model::queries(const DeepseekV3Layer& L, const float* h, std::int64_t T) {
  const DeepseekV3Config& c = cfg_;
  std::vector<float> q(static_cast<std::size_t>(T * c.heads * c.qk_dim()));
  if (c.q_lora_rank <= 0) {
    linear(L.q, h, T, q.data());
    return q;
  }
  const std::int64_t r = c.q_lora_rank;
  std::vector<float> qa(static_cast<std::size_t>(T * r)), qn(qa.size());
  linear(L.q_a, h, T, qa.data());
  per_token(T, [&](std::int64_t t) { rms_norm(qa.data() + t * r, L.q_a_norm.data(), r, kLatentNormEps, qn.data() + t * r); });
  linear(L.q_b, qn.data(), T, q.data());
  return q;
}

void DeepseekV3Model::absorbed_attention(std::size_t li, const float* q, std::int64_t T, std::int64_t pos0,
                                         float* out) {
  const DeepseekV3Config& c = cfg_;
  const DeepseekV3Layer& L = layers_[li];
  const std::int64_t nope = c.qk_nope_dim, rd = c.qk_rope_dim, qk = c.qk_dim(), vdim = c.v_dim;
  const std::int64_t qd = c.heads * qk, vd = c.heads * vdim, kvl = c.kv_lora_rank, total = pos0 + T;
  const float* lat = lat_cache_[li].data();
  const float* rot = rot_cache_[li].data();
  const float scale = attn_scale_;
  // kv_b_proj reads the new latents (the hook sees them as its input).
  observe(L.kv_b, lat + pos0 * kvl, T);
  const std::vector<float> w = L.kv_b.weight.to_f32();  // [heads * (nope + v), kv_lora]
  tbb::parallel_for(std::int64_t{0}, c.heads, [&](std::int64_t hh) {
    thread_local std::vector<float> qabs_buf, scores_buf, ctx_buf;
    qabs_buf.resize(static_cast<std::size_t>(T * kvl));
    scores_buf.resize(static_cast<std::size_t>(T * total));
    ctx_buf.resize(static_cast<std::size_t>(T * kvl));
    float* qabs = qabs_buf.data();
    float* scores = scores_buf.data();
    float* ctx = ctx_buf.data();
    const float* wk = w.data() + hh * (nope + vdim) * kvl;  // [nope, kv_lora]
    const float* wv = wk + nope * kvl;                      // [v, kv_lora]
    float beta = 0.0f;
    if (nope > 0) {
      gemm(false, T, kvl, nope, 1.0f, q + hh * qk, qd, wk, kvl, 0.0f, qabs, kvl);
      gemm(true, T, total, kvl, scale, qabs, kvl, lat, kvl, 0.0f, scores, total);
      beta = 1.0f;
    }
    gemm(true, T, total, rd, scale, q + hh * qk + nope, qd, rot, rd, beta, scores, total);
    causal_softmax(scores, T, total, pos0);
    gemm(false, T, kvl, total, 1.0f, scores, total, lat, kvl, 0.0f, ctx, kvl);
    gemm(true, T, vdim, kvl, 1.0f, ctx, kvl, wv, kvl, 0.0f, out + hh * vdim, vd);
  });
}

void DeepseekV3Model::expanded_attention(std::size_t li, const float* q, std::int64_t T, std::int64_t pos0,
                                         float* out) {
  const DeepseekV3Config& c = cfg_;
  const DeepseekV3Layer& L = layers_[li];
  const std::int64_t nope = c.qk_nope_dim, rd = c.qk_rope_dim, qk = c.qk_dim(), vdim = c.v_dim;
  const std::int64_t qd = c.heads * qk, vd = c.heads * vdim, kvb_d = c.heads * (nope + vdim), total = pos0 + T;
  const float* rot = rot_cache_[li].data();
  const float scale = attn_scale_;
  std::vector<float> kvb(static_cast<std::size_t>(total * kvb_d));
  linear(L.kv_b, lat_cache_[li].data(), total, kvb.data());
  tbb::parallel_for(std::int64_t{0}, c.heads, [&](std::int64_t hh) {
    thread_local std::vector<float> k_buf, scores_buf;
    k_buf.resize(static_cast<std::size_t>(total * qk));
    scores_buf.resize(static_cast<std::size_t>(T * total));
    float* k = k_buf.data();
    float* scores = scores_buf.data();
    for (std::int64_t j = 0; j < total; ++j) {
      const float* s = kvb.data() + j * kvb_d + hh * (nope + vdim);
      std::copy(s, s + nope, k + j * qk);
      std::copy(rot + j * rd, rot + (j + 1) * rd, k + j * qk + nope);
    }
    gemm(true, T, total, qk, scale, q + hh * qk, qd, k, qk, 0.0f, scores, total);
    causal_softmax(scores, T, total, pos0);
    gemm(false, T, vdim, total, 1.0f, scores, total, kvb.data() + hh * (nope + vdim) + nope, kvb_d, 0.0f,
         out + hh * vdim, vd);
  });
}

void DeepseekV3Model::attention(std::size_t li, const float* h, std::int64_t T, std::int64_t pos0, const float* cosv,
                                const float* sinv, float* out) {
  const DeepseekV3Config& c = cfg_;
  const DeepseekV3Layer& L = layers_[li];
  const std::int64_t nope = c.qk_nope_dim, rd = c.qk_rope_dim, half = rd / 2, qk = c.qk_dim();
  const std::int64_t qd = c.heads * qk, kvl = c.kv_lora_rank, kva_d = kvl + rd;
  std::vector<float> q = queries(L, h, T);
  std::vector<float> kva(static_cast<std::size_t>(T * kva_d));
  linear(L.kv_a, h, T, kva.data());
  // The cache: each position's normalised latent and its rotated shared key.
  float* lat = lat_cache_[li].data();
  float* rot = rot_cache_[li].data();
  per_token(T, [&](std::int64_t t) {
    const float* cs = cosv + t * half;
    const float* sn = sinv + t * half;
    std::vector<float> tmp(static_cast<std::size_t>(rd));
    for (std::int64_t hh = 0; hh < c.heads; ++hh) {
      float* qr = q.data() + t * qd + hh * qk + nope;
      rope_mla(qr, half, cs, sn, c.rope_interleave, tmp.data());
      std::copy(tmp.begin(), tmp.end(), qr);
    }
    rms_norm(kva.data() + t * kva_d, L.kv_a_norm.data(), kvl, kLatentNormEps, lat + (pos0 + t) * kvl);
    rope_mla(kva.data() + t * kva_d + kvl, half, cs, sn, c.rope_interleave, rot + (pos0 + t) * rd);
  });
  // kv_b_proj absorbed (as engines decode MLA): per head, q_nope W_uk scores
  // the cached latents directly and W_uv maps the attention-weighted latent
  // to the head's values, so nothing per head is cached. With quantized
  // activations or a bias it is applied as a linear to every cached latent
  // (the engine's prefill form), keys and values per head.
  if (L.kv_b.act == quant::ActMode::None && L.kv_b.bias.empty())
    absorbed_attention(li, q.data(), T, pos0, out);
  else
    expanded_attention(li, q.data(), T, pos0, out);
}

void DeepseekV3Model::mlp(const DeepseekMlp& m, const float* h, std::int64_t rows, std::int64_t inter, float* y) {
  std::vector<float> g(static_cast<std::size_t>(rows * inter)), u(g.size());
  linear(m.gate, h, rows, g.data());
  linear(m.up, h, rows, u.data());
  per_token(rows, [&](std::int64_t t) {
    float* gt = g.data() + t * inter;
    const float* ut = u.data() + t * inter;
    for (std::int64_t i = 0; i < inter; ++i) gt[i] = silu(gt[i]) * ut[i];
  });
  linear(m.down, g.data(), rows, y);
}

namespace {

// Each group's score: the sum of its two best bias-corrected scores.
std::vector<float> group_scores(const std::vector<float>& choice, std::int64_t groups, std::int64_t per_group) {
  std::vector<float> gscore(static_cast<std::size_t>(groups));
  for (std::int64_t g = 0; g < groups; ++g) {
    float b1 = -std::numeric_limits<float>::infinity(), b2 = b1;
    for (std::int64_t j = 0; j < per_group; ++j) {
      const float v = choice[static_cast<std::size_t>(g * per_group + j)];
      if (v > b1) {
        b2 = b1;
        b1 = v;
      } else if (v > b2) {
        b2 = v;
      }
    }
    gscore[static_cast<std::size_t>(g)] = b1 + b2;
  }
  return gscore;
}

// One token's routing, in F32 as transformers': logits, sigmoid scores,
// group-limited top-k on the bias-corrected scores, weights from the
// uncorrected ones (normalised and scaled as the config says) into
// chosen[0..K) and weight[0..K).
void route_token(const DeepseekV3Config& c, const DeepseekV3Layer& L, const float* x, std::int32_t* chosen,
                 float* weight) {
  const std::int64_t H = c.hidden, E = c.routed_experts, K = c.experts_per_token;
  const std::int64_t G = c.n_group, per_group = E / G;
  std::vector<float> score(static_cast<std::size_t>(E)), choice(static_cast<std::size_t>(E));
  for (std::int64_t e = 0; e < E; ++e) {
    const float* w = L.router.data() + e * H;
    float acc = 0;
    for (std::int64_t i = 0; i < H; ++i) acc += x[i] * w[i];
    score[static_cast<std::size_t>(e)] = 1.0f / (1.0f + std::exp(-acc));
    choice[static_cast<std::size_t>(e)] = score[static_cast<std::size_t>(e)] + L.router_bias[static_cast<std::size_t>(e)];
  }
  const std::vector<float> gscore = group_scores(choice, G, per_group);
  std::vector<std::int64_t> gorder(static_cast<std::size_t>(G));
  std::iota(gorder.begin(), gorder.end(), 0);
  std::stable_sort(gorder.begin(), gorder.end(), [&](std::int64_t a, std::int64_t b) {
    return gscore[static_cast<std::size_t>(a)] > gscore[static_cast<std::size_t>(b)];
  });
  std::vector<char> allowed(static_cast<std::size_t>(G), 0);
  for (std::int64_t i = 0; i < c.topk_group; ++i) allowed[static_cast<std::size_t>(gorder[static_cast<std::size_t>(i)])] = 1;
  std::vector<std::int64_t> eorder;
  for (std::int64_t e = 0; e < E; ++e)
    if (allowed[static_cast<std::size_t>(e / per_group)]) eorder.push_back(e);
  std::stable_sort(eorder.begin(), eorder.end(), [&](std::int64_t a, std::int64_t b) {
    return choice[static_cast<std::size_t>(a)] > choice[static_cast<std::size_t>(b)];
  });
  float sum = 0;
  for (std::int64_t k = 0; k < K; ++k) {
    const std::int64_t e = eorder[static_cast<std::size_t>(k)];
    chosen[k] = static_cast<std::int32_t>(e);
    weight[k] = score[static_cast<std::size_t>(e)];
    sum += score[static_cast<std::size_t>(e)];
  }
  const float denom = sum + 1e-20f;
  for (std::int64_t k = 0; k < K; ++k) {
    if (c.norm_topk_prob) weight[k] /= denom;
    weight[k] *= c.routed_scaling;
  }
}

}  // namespace

void DeepseekV3Model::moe(std::size_t li, const float* h, std::int64_t T, float* y) {
  const DeepseekV3Config& c = cfg_;
  const DeepseekV3Layer& L = layers_[li];
  const std::int64_t H = c.hidden, E = c.routed_experts, K = c.experts_per_token;
  std::vector<std::int32_t> chosen(static_cast<std::size_t>(T * K));
  std::vector<float> weight(static_cast<std::size_t>(T * K));
  per_token(T, [&](std::int64_t t) { route_token(c, L, h + t * H, chosen.data() + t * K, weight.data() + t * K); });
  // Tokens per expert (in token order), then each expert over its rows; each
  // token's output sums its experts in expert order, as transformers' index_add_.
  std::vector<std::vector<std::pair<std::int64_t, float>>> rows_of(static_cast<std::size_t>(E));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t k = 0; k < K; ++k)
      rows_of[static_cast<std::size_t>(chosen[static_cast<std::size_t>(t * K + k)])].emplace_back(
          t, weight[static_cast<std::size_t>(t * K + k)]);
  std::fill(y, y + T * H, 0.0f);
  std::vector<float> xin, yout;
  auto& counts = routed_[li];
  for (std::int64_t e = 0; e < E; ++e) {
    const auto& rows = rows_of[static_cast<std::size_t>(e)];
    if (rows.empty()) continue;
    const auto n = static_cast<std::int64_t>(rows.size());
    counts[static_cast<std::size_t>(e)] += n;
    xin.resize(static_cast<std::size_t>(n * H));
    yout.resize(xin.size());
    for (std::int64_t r = 0; r < n; ++r)
      std::copy(h + rows[static_cast<std::size_t>(r)].first * H, h + (rows[static_cast<std::size_t>(r)].first + 1) * H,
                xin.data() + r * H);
    mlp(L.experts[static_cast<std::size_t>(e)], xin.data(), n, c.moe_intermediate, yout.data());
    for (std::int64_t r = 0; r < n; ++r) {
      const auto [t, w] = rows[static_cast<std::size_t>(r)];
      float* yt = y + t * H;
      const float* src = yout.data() + r * H;
      for (std::int64_t i = 0; i < H; ++i) yt[i] += src[i] * w;
    }
  }
  if (L.has_shared) {
    std::vector<float> s(static_cast<std::size_t>(T * H));
    mlp(L.shared, h, T, c.moe_intermediate * c.shared_experts, s.data());
    for (std::size_t i = 0; i < s.size(); ++i) y[i] += s[i];
  }
}

void DeepseekV3Model::position_tables(std::span<const Segment> segments) {
  const std::int64_t pos0 = single(segments).pos0, T = single(segments).rows;
  const std::int64_t half = cfg_.qk_rope_dim / 2;
  rope_cos_.resize(static_cast<std::size_t>(T * half));
  rope_sin_.resize(rope_cos_.size());
  const float af = rope_.attention_factor;
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t i = 0; i < half; ++i) {
      const float ang = static_cast<float>(pos0 + t) * rope_.inv_freq[static_cast<std::size_t>(i)];
      rope_cos_[static_cast<std::size_t>(t * half + i)] = std::cos(ang) * af;
      rope_sin_[static_cast<std::size_t>(t * half + i)] = std::sin(ang) * af;
    }
}

void DeepseekV3Model::run_layer(std::size_t li, float* x, std::span<const Segment> segments) {
  const std::int64_t pos0 = single(segments).pos0, T = single(segments).rows;
  const DeepseekV3Config& c = cfg_;
  const std::int64_t H = c.hidden;
  for (auto* buf : {&h_, &tmp_}) buf->resize(std::max(buf->size(), static_cast<std::size_t>(T * H)));
  attn_.resize(std::max(attn_.size(), static_cast<std::size_t>(T * c.heads * c.v_dim)));
  float *h = h_.data(), *tmp = tmp_.data();
  const DeepseekV3Layer& L = layers_[li];
  per_token(T, [&](std::int64_t t) { rms_norm(x + t * H, L.attn_norm.data(), H, c.rms_eps, h + t * H); });
  attention(li, h, T, pos0, rope_cos_.data(), rope_sin_.data(), attn_.data());
  linear(L.o, attn_.data(), T, tmp);
  per_token(T, [&](std::int64_t t) {
    float* xt = x + t * H;
    const float* dt = tmp + t * H;
    for (std::int64_t i = 0; i < H; ++i) xt[i] += dt[i];
    rms_norm(xt, L.mlp_norm.data(), H, c.rms_eps, h + t * H);
  });
  if (L.moe)
    moe(li, h, T, tmp);
  else
    mlp(L.dense, h, T, c.intermediate, tmp);
  for (std::int64_t i = 0; i < T * H; ++i) x[i] += tmp[i];
}

std::vector<Linear*> DeepseekV3Model::layer_linears(std::int64_t layer) {
  std::vector<Linear*> out;
  auto one = std::span(layers_).subspan(static_cast<std::size_t>(layer), 1);
  for_each_linear(one, [&](Linear& l) { out.push_back(&l); });
  return out;
}

}  // namespace selq::runtime
