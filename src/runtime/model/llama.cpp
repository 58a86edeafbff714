// Llama forward pass. Math follows HF LlamaForCausalLM (docs/GGUF.md §6):
// RMSNorm in FP32, rotate-half RoPE, GQA with causal mask, SwiGLU. Qwen2 is
// the same decoder with q/k/v biases, which the linears carry when stored.
#include "runtime/model/llama.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include "core/error.h"
#include "io/checkpoint.h"
#include "runtime/model/architectures.h"
#include "runtime/model/blas.h"
#include "runtime/model/hf_config.h"
#include "runtime/model/model_ops.h"

namespace selq::runtime {

using ops::load_vector;
using ops::per_token;
using ops::rms_norm;

namespace {

std::int64_t req_int(const nlohmann::json& c, const char* key, const std::string& source) {
  if (!c.contains(key) || !c[key].is_number_integer())
    throw_bad_input(fmt::format("{}: config.json needs an integer '{}'", source, key));
  return c[key].get<std::int64_t>();
}

}  // namespace

LlamaConfig llama_config_from_json(const nlohmann::json& file, const std::string& source) {
  if (!file.is_object()) throw_bad_input(fmt::format("{}: no config.json object", source));
  const nlohmann::json& c = decoder_config(file);
  if (!c.contains("model_type") || !c["model_type"].is_string())
    throw_bad_input(fmt::format("{}: config.json has no 'model_type'", source));
  LlamaConfig cfg;
  cfg.hidden = req_int(c, "hidden_size", source);
  cfg.intermediate = req_int(c, "intermediate_size", source);
  cfg.layers = req_int(c, "num_hidden_layers", source);
  cfg.heads = req_int(c, "num_attention_heads", source);
  cfg.kv_heads = c.contains("num_key_value_heads") ? req_int(c, "num_key_value_heads", source) : cfg.heads;
  cfg.vocab = req_int(c, "vocab_size", source);
  if (cfg.hidden <= 0 || cfg.heads <= 0 || cfg.kv_heads <= 0 || cfg.layers <= 0 || cfg.vocab <= 0 ||
      cfg.intermediate <= 0 || cfg.heads % cfg.kv_heads != 0)
    throw_bad_input(fmt::format("{}: inconsistent config (hidden {}, heads {}, kv_heads {})", source, cfg.hidden,
                                cfg.heads, cfg.kv_heads));
  cfg.head_dim = c.contains("head_dim") && c["head_dim"].is_number_integer() ? c["head_dim"].get<std::int64_t>()
                                                                              : cfg.hidden / cfg.heads;
  if (cfg.head_dim % 2 != 0) throw_bad_input(fmt::format("{}: head_dim {} must be even", source, cfg.head_dim));
  cfg.max_positions = c.value("max_position_embeddings", std::int64_t{2048});
  cfg.rms_eps = static_cast<float>(required_number(c, "rms_norm_eps", source));
  cfg.rope_theta = static_cast<float>(rope_from_config(c, source).theta);
  cfg.tie_embeddings = c.value("tie_word_embeddings", false);
  return cfg;
}

std::unique_ptr<LlamaModel> LlamaModel::load(const std::string& path) {
  return load(checked_checkpoint(path, "llama"), path);
}

std::unique_ptr<LlamaModel> LlamaModel::load(std::shared_ptr<const io::Checkpoint> ck, const std::string& path) {
  const auto mapping = mapping_of(ck);
  auto m = std::unique_ptr<LlamaModel>(new LlamaModel());
  m->path_ = path;
  m->cfg_ = llama_config_from_json(ck->config(), path);
  m->model_type_ = decoder_config(ck->config())["model_type"].get<std::string>();
  const LlamaConfig& c = m->cfg_;
  static const char* kLinears[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                   "self_attn.o_proj", "mlp.gate_proj",   "mlp.up_proj",
                                   "mlp.down_proj"};
  std::vector<std::string> modules;
  for (std::int64_t i = 0; i < c.layers; ++i)
    for (const char* n : kLinears) modules.push_back(fmt::format("model.layers.{}.{}", i, n));
  LinearLoader loader(*ck, modules, mapping);
  m->dialect_ = loader.dialect();
  m->load_ends(*ck, loader, c.vocab, c.hidden, c.tie_embeddings, path, mapping);
  const std::int64_t qd = c.heads * c.head_dim, kvd = c.kv_heads * c.head_dim;
  auto check = [&](const Linear& l, std::int64_t out, std::int64_t in) {
    if (l.out != out || l.in != in)
      throw_bad_input(fmt::format("{}: {} is [{}, {}], config implies [{}, {}]", path, l.module, l.out, l.in, out, in));
    if (!l.bias.empty() && static_cast<std::int64_t>(l.bias.size()) != out)
      throw_bad_input(fmt::format("{}: {}.bias has {} elements, the weight has {} rows", path, l.module, l.bias.size(), out));
  };
  m->layers_.resize(static_cast<std::size_t>(c.layers));
  for (std::int64_t i = 0; i < c.layers; ++i) {
    auto& L = m->layers_[static_cast<std::size_t>(i)];
    const std::string p = fmt::format("model.layers.{}.", i);
    L.attn_norm = load_vector(*ck, p + "input_layernorm.weight", c.hidden);
    L.mlp_norm = load_vector(*ck, p + "post_attention_layernorm.weight", c.hidden);
    L.q = loader.load(p + "self_attn.q_proj");
    check(L.q, qd, c.hidden);
    L.k = loader.load(p + "self_attn.k_proj");
    check(L.k, kvd, c.hidden);
    L.v = loader.load(p + "self_attn.v_proj");
    check(L.v, kvd, c.hidden);
    L.o = loader.load(p + "self_attn.o_proj");
    check(L.o, c.hidden, qd);
    L.gate = loader.load(p + "mlp.gate_proj");
    check(L.gate, c.intermediate, c.hidden);
    L.up = loader.load(p + "mlp.up_proj");
    check(L.up, c.intermediate, c.hidden);
    L.down = loader.load(p + "mlp.down_proj");
    check(L.down, c.hidden, c.intermediate);
  }
  m->inv_freq_.resize(static_cast<std::size_t>(c.head_dim / 2));
  for (std::int64_t i = 0; i < c.head_dim / 2; ++i)
    m->inv_freq_[static_cast<std::size_t>(i)] = static_cast<float>(
        1.0 / std::pow(static_cast<double>(c.rope_theta), 2.0 * static_cast<double>(i) / static_cast<double>(c.head_dim)));
  return m;
}

Linear* LlamaModel::find_linear(const std::string& module) {
  for (auto& l : layers_)
    for (Linear* lin : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      if (lin->module == module) return lin;
  return nullptr;
}

std::vector<const Linear*> LlamaModel::linears() const {
  std::vector<const Linear*> out;
  for (const auto& l : layers_)
    for (const Linear* lin : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) out.push_back(lin);
  return out;
}

std::uint64_t LlamaModel::parameters() const {
  std::uint64_t n = embed_.size() + head_.size() + final_norm_.size();
  for (const auto& L : layers_) {
    n += L.attn_norm.size() + L.mlp_norm.size();
    for (const Linear* l : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) n += l->weight.size();
  }
  return n;
}

double LlamaModel::linear_bits_per_weight() const {
  double bits = head_stored_bits_, elements = static_cast<double>(head_.size());  // both 0 when tied
  for (const auto& L : layers_)
    for (const Linear* l : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) {
      bits += l->stored_bits;
      elements += static_cast<double>(l->out * l->in);
    }
  return elements > 0 ? bits / elements : 0.0;
}

std::uint64_t LlamaModel::weight_bytes() const {
  std::uint64_t n = embed_.bytes() + head_.bytes() + 4 * final_norm_.size();
  for (const auto& L : layers_) {
    n += 4 * (L.attn_norm.size() + L.mlp_norm.size());
    for (const Linear* l : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) n += l->weight.bytes();
  }
  return n;
}

void LlamaModel::ensure_cache(int slot, std::int64_t total) {
  if (caches_.size() <= static_cast<std::size_t>(slot)) caches_.resize(static_cast<std::size_t>(slot) + 1);
  KvCache& kv = caches_[static_cast<std::size_t>(slot)];
  if (total <= kv.capacity) return;
  const std::int64_t cap = std::max<std::int64_t>(total, kv.capacity * 2);
  const auto size = static_cast<std::size_t>(cap * cfg_.kv_heads * cfg_.head_dim);
  for (auto* caches : {&kv.k, &kv.v}) {
    caches->resize(static_cast<std::size_t>(cfg_.layers));
    for (auto& c : *caches) c.resize(size);
  }
  kv.capacity = cap;
}

void LlamaModel::position_tables(std::span<const Segment> segments) {
  const std::int64_t half = cfg_.head_dim / 2;
  std::int64_t rows = 0;
  for (const Segment& g : segments) rows = std::max(rows, g.row0 + g.rows);
  rope_cos_.resize(static_cast<std::size_t>(rows * half));
  rope_sin_.resize(rope_cos_.size());
  for (const Segment& g : segments)
    for (std::int64_t t = 0; t < g.rows; ++t)
      for (std::int64_t i = 0; i < half; ++i) {
        // HF computes the angle in FP32 (position * inv_freq) before cos/sin.
        const float ang = static_cast<float>(g.pos0 + t) * inv_freq_[static_cast<std::size_t>(i)];
        const auto at = static_cast<std::size_t>((g.row0 + t) * half + i);
        rope_cos_[at] = std::cos(ang);
        rope_sin_[at] = std::sin(ang);
      }
}

namespace {

// Query head hh over the cached keys and values of its KV head:
// softmax(Q_h K_h^T * scale) V_h into head hh's columns of attn.
void attend_head(const LlamaConfig& c, std::int64_t hh, const float* q, const float* kc, const float* vc,
                 std::int64_t T, std::int64_t pos0, float* attn) {
  const std::int64_t hd = c.head_dim, qd = c.heads * hd, kvd = c.kv_heads * hd, total = pos0 + T;
  const std::int64_t kh = hh / (c.heads / c.kv_heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  thread_local std::vector<float> scores_buf;
  if (scores_buf.size() < static_cast<std::size_t>(T * total)) scores_buf.resize(static_cast<std::size_t>(T * total));
  float* scores = scores_buf.data();
  // scores[T, total] = Q_h K_h^T * scale. One decode token: gemv, which
  // OpenBLAS 0.3.21's sgemm with M=1 does not forward to (it packs K).
  if (T == 1)
    blas::sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(total), static_cast<int>(hd), scale, kc + kh * hd,
                static_cast<int>(kvd), q + hh * hd, 1, 0.0f, scores, 1);
  else
    blas::sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(T), static_cast<int>(total),
                static_cast<int>(hd), scale, q + hh * hd, static_cast<int>(qd), kc + kh * hd, static_cast<int>(kvd),
                0.0f, scores, static_cast<int>(total));
  ops::causal_softmax(scores, T, total, pos0);
  if (T == 1)
    blas::sgemv(CblasRowMajor, CblasTrans, static_cast<int>(total), static_cast<int>(hd), 1.0f, vc + kh * hd,
                static_cast<int>(kvd), scores, 1, 0.0f, attn + hh * hd, 1);
  else
    blas::sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(T), static_cast<int>(hd),
                static_cast<int>(total), 1.0f, scores, static_cast<int>(total), vc + kh * hd, static_cast<int>(kvd),
                0.0f, attn + hh * hd, static_cast<int>(qd));
}

// Rotates the two halves of a head_dim-wide vector by one position's angles.
void apply_rope(float* v, std::int64_t half, const float* cosv, const float* sinv) {
  for (std::int64_t i = 0; i < half; ++i) {
    const float cs = cosv[i], sn = sinv[i];
    const float a = v[i], b = v[i + half];
    v[i] = a * cs - b * sn;
    v[i + half] = b * cs + a * sn;
  }
}

}  // namespace

void LlamaModel::run_layer(std::size_t li, float* x, std::span<const Segment> segments) {
  const LlamaConfig& c = cfg_;
  const std::int64_t H = c.hidden, hd = c.head_dim, qd = c.heads * hd, kvd = c.kv_heads * hd, half = hd / 2;
  std::int64_t T = 0;
  for (const Segment& g : segments) T = std::max(T, g.row0 + g.rows);
  for (auto* buf : {&h_, &tmp_}) buf->resize(std::max(buf->size(), static_cast<std::size_t>(T * H)));
  for (auto* buf : {&q_, &attn_}) buf->resize(std::max(buf->size(), static_cast<std::size_t>(T * qd)));
  for (auto* buf : {&k_, &v_}) buf->resize(std::max(buf->size(), static_cast<std::size_t>(T * kvd)));
  for (auto* buf : {&gate_, &up_}) buf->resize(std::max(buf->size(), static_cast<std::size_t>(T * c.intermediate)));
  float *h = h_.data(), *q = q_.data(), *k = k_.data(), *v = v_.data(), *attn = attn_.data(), *g = gate_.data(),
        *u = up_.data(), *tmp = tmp_.data();
  const LlamaLayer& L = layers_[li];
  // Attention over every row at once but for the attention proper, which
  // reads each segment's own cache, its new keys and values appended first.
  per_token(T, [&](std::int64_t t) { rms_norm(x + t * H, L.attn_norm.data(), H, c.rms_eps, h + t * H); });
  linear(L.q, h, T, q);
  linear(L.k, h, T, k);
  linear(L.v, h, T, v);
  per_token(T, [&](std::int64_t t) {
    const float* cosv = rope_cos_.data() + t * half;
    const float* sinv = rope_sin_.data() + t * half;
    for (std::int64_t hh = 0; hh < c.heads; ++hh) apply_rope(q + t * qd + hh * hd, half, cosv, sinv);
    for (std::int64_t hh = 0; hh < c.kv_heads; ++hh) apply_rope(k + t * kvd + hh * hd, half, cosv, sinv);
  });
  for (const Segment& sg : segments) {
    KvCache& kv = caches_[static_cast<std::size_t>(sg.slot)];
    std::copy_n(k + sg.row0 * kvd, sg.rows * kvd, kv.k[li].data() + sg.pos0 * kvd);
    std::copy_n(v + sg.row0 * kvd, sg.rows * kvd, kv.v[li].data() + sg.pos0 * kvd);
  }
  // One task per segment and query head; each writes only its own rows and columns of `attn`.
  const auto heads = c.heads;
  tbb::parallel_for(std::int64_t{0}, static_cast<std::int64_t>(segments.size()) * heads, [&](std::int64_t i) {
    const Segment& sg = segments[static_cast<std::size_t>(i / heads)];
    const KvCache& kv = caches_[static_cast<std::size_t>(sg.slot)];
    attend_head(c, i % heads, q + sg.row0 * qd, kv.k[li].data(), kv.v[li].data(), sg.rows, sg.pos0,
                attn + sg.row0 * qd);
  });
  linear(L.o, attn, T, tmp);
  // The MLP (SwiGLU) on the residual.
  per_token(T, [&](std::int64_t t) {
    float* xt = x + t * H;
    const float* dt = tmp + t * H;
    for (std::int64_t i = 0; i < H; ++i) xt[i] += dt[i];
    rms_norm(xt, L.mlp_norm.data(), H, c.rms_eps, h + t * H);
  });
  linear(L.gate, h, T, g);
  linear(L.up, h, T, u);
  per_token(T, [&](std::int64_t t) {
    float* gt = g + t * c.intermediate;
    const float* ut = u + t * c.intermediate;
    for (std::int64_t i = 0; i < c.intermediate; ++i) gt[i] = ops::silu(gt[i]) * ut[i];
  });
  linear(L.down, g, T, tmp);
  for (std::int64_t i = 0; i < T * H; ++i) x[i] += tmp[i];
}

std::vector<Linear*> LlamaModel::layer_linears(std::int64_t layer) {
  LlamaLayer& L = layers_.at(static_cast<std::size_t>(layer));
  return {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down};
}

}  // namespace selq::runtime
