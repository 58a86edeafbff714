#pragma once
// `selq import-gguf`: a Llama- or Qwen2-architecture GGUF file as an HF-style
// BF16 checkpoint (model.safetensors, config.json, tokenizer files). Mapping
// and the Q/K row un-permutation (Llama only): docs/GGUF.md §3.
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace selq::runtime {

class GgufFile;

struct ImportGgufOptions {
  bool overwrite{false};  // replace files already in DST
};

struct ImportGgufReport {
  std::string source;
  std::string destination;
  std::size_t tensors{0};
  std::uint64_t bytes_written{0};              // model.safetensors
  std::map<std::string, int> source_types;     // ggml type name -> tensor count
  double seconds{0};
  nlohmann::json config;                       // what config.json holds
  nlohmann::json to_json() const;
};

ImportGgufReport import_gguf(const std::string& gguf_path, const std::string& dst_dir,
                             const ImportGgufOptions& options = {});

// HF name of a GGUF Llama tensor ("blk.3.attn_q.weight" ->
// "model.layers.3.self_attn.q_proj.weight"); nullopt for names selq does not map.
std::optional<std::string> hf_llama_tensor_name(std::string_view gguf_name);

// Undoes llama.cpp's converter permutation of Q/K rows (whole rows move):
// hf_row[h*d + s*d/2 + j] = gguf_row[h*d + 2*j + s], with d = rows / n_head.
void unpermute_qk_rows(std::span<float> rows, std::uint64_t n_rows, std::uint64_t row_len,
                       std::uint64_t n_head);

// config.json for LlamaForCausalLM or Qwen2ForCausalLM (general.architecture
// llama or qwen2) from the GGUF metadata (and whether the file has a separate
// output.weight); Unsupported for any other architecture.
nlohmann::json llama_config_from_gguf(const GgufFile& gguf);

}  // namespace selq::runtime
