#pragma once
// ChatML, the chat form of SmolLM2's and Qwen's templates: "<|im_start|>role\n
// content<|im_end|>\n" per turn, then the assistant's turn opened. selq eval's
// acceptance prompts and selq serve's chat completions both write it here.
#include <string>
#include <vector>

namespace selq::runtime {

inline constexpr const char* kImStart = "<|im_start|>";
inline constexpr const char* kImEnd = "<|im_end|>";

struct ChatTurn {
  std::string role;  // system, user, assistant
  std::string content;
};

inline std::string render_chatml(const std::vector<ChatTurn>& turns) {
  std::string out;
  for (const auto& t : turns) out += std::string(kImStart) + t.role + "\n" + t.content + kImEnd + "\n";
  return out + kImStart + "assistant\n";
}

}  // namespace selq::runtime
