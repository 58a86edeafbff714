#pragma once
// GGUF reading (mmap, strict validation) and dequantization of ggml block
// types to F32. Container and block layouts: docs/GGUF.md §1-§2. The
// validation is at least as strict as ggml's own loader (gguf.cpp), so a
// file selq accepts is one llama.cpp would load.
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace selq::runtime {

// ggml_type ids (ggml.h). Only the ones selq knows the block size of.
enum class GgmlType : std::uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30, MXFP4 = 39,
};

struct GgmlTypeTraits {
  std::string_view name;
  std::uint32_t block_elems;  // elements per block along ne[0]
  std::uint32_t block_bytes;
  bool dequantizable;  // selq can turn it into F32
};
// nullopt for ids selq does not know (the reader rejects those tensors).
std::optional<GgmlTypeTraits> ggml_type_traits(std::uint32_t type_id);

// Dequantizes `n` consecutive elements (a multiple of the block size) of a
// tensor of `type` starting at `src`. Arithmetic follows ggml's reference
// dequantizers in f32 without fused multiply-adds, so results are bit-exact
// with ggml and gguf-py. Throws Unsupported for non-dequantizable types.
void dequantize_row(GgmlType type, const std::uint8_t* src, float* dst, std::uint64_t n);

enum class GgufValueType : std::uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

// One metadata value. Scalars fill the field of their kind (unsigned/signed
// integers and bools also fill `i`/`u` when representable); arrays fill
// `strings` or `numbers` according to `elem_type`.
struct GgufValue {
  GgufValueType type{GgufValueType::U8};
  GgufValueType elem_type{GgufValueType::U8};  // arrays only
  std::optional<std::uint64_t> u;
  std::optional<std::int64_t> i;
  double f{0.0};
  std::string s;
  std::vector<std::string> strings;
  std::vector<double> numbers;  // numeric/bool array elements (exact for |x| < 2^53)
  std::uint64_t count{0};       // array length
};

struct GgufTensorInfo {
  std::string name;
  std::uint32_t n_dims{0};
  std::array<std::uint64_t, 4> ne{1, 1, 1, 1};  // ne[0] is the contiguous axis
  GgmlType type{GgmlType::F32};
  std::uint64_t offset{0};       // relative to the data section
  std::uint64_t nbytes{0};
  std::uint64_t info_offset{0};  // where its info record starts in the file
  std::uint64_t numel() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  // Row-major shape, i.e. reversed(ne[:n_dims]) (HF's [out, in] for weights).
  std::vector<std::int64_t> row_major_shape() const;
};

// Parsed header of a GGUF file; refers to nothing outside itself.
struct GgufHeader {
  std::uint32_t version{0};
  std::uint64_t alignment{32};
  std::uint64_t data_start{0};  // absolute offset of the data section
  std::vector<std::pair<std::string, GgufValue>> kv;  // file order
  std::vector<GgufTensorInfo> tensors;                 // file order
};

// Parses and validates a whole GGUF image. `file` is used in errors only.
// Every rejection is a selq::Error (BadInput) naming the file, the tensor
// when there is one, and the byte offset.
GgufHeader parse_gguf(std::span<const std::uint8_t> bytes, const std::string& file);

class GgufFile {
 public:
  static std::unique_ptr<GgufFile> open(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  const GgufHeader& header() const { return header_; }
  const std::vector<GgufTensorInfo>& tensors() const { return header_.tensors; }

  const GgufValue* find(std::string_view key) const;
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // Typed accessors: throw BadInput naming the key when it is missing or has
  // another type.
  std::uint64_t get_uint(std::string_view key) const;
  std::optional<std::uint64_t> get_uint_opt(std::string_view key) const;
  double get_float(std::string_view key) const;
  std::string get_string(std::string_view key) const;
  std::optional<bool> get_bool_opt(std::string_view key) const;
  const std::vector<std::string>& get_string_array(std::string_view key) const;
  const std::vector<double>& get_number_array(std::string_view key) const;

  std::span<const std::uint8_t> tensor_bytes(const GgufTensorInfo& t) const;
  // The whole tensor as F32, in row-major order (= ggml memory order).
  std::vector<float> dequantize(const GgufTensorInfo& t) const;

 private:
  GgufFile() = default;
  const GgufValue& require(std::string_view key, GgufValueType type) const;
  std::string path_;
  const std::uint8_t* map_{nullptr};
  std::uint64_t size_{0};
  GgufHeader header_;
  std::map<std::string, std::size_t, std::less<>> kv_index_;
  std::map<std::string, std::size_t, std::less<>> tensor_index_;
};

}  // namespace selq::runtime
