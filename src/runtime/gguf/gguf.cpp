// GGUF header parsing and validation (docs/GGUF.md §1) and the mmap'd file.
#include "runtime/gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "core/error.h"

namespace selq::runtime {
namespace {

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" read as LE u32
constexpr std::uint64_t kMaxKeyBytes = 65535;
constexpr std::uint64_t kMaxTensorNameBytes = 63;  // ggml: GGML_MAX_NAME - 1
constexpr std::uint32_t kMaxDims = 4;

// Bounds-checked little-endian reader over the file image; every error it
// raises names the file and the byte offset where the bad field starts.
class Cursor {
 public:
  Cursor(std::span<const std::uint8_t> bytes, const std::string& file) : b_(bytes), file_(file) {}

  std::uint64_t pos() const { return pos_; }
  std::uint64_t remaining() const { return b_.size() - pos_; }
  void set_tensor(std::string name) { tensor_ = std::move(name); }

  [[noreturn]] void fail(const std::string& msg, std::uint64_t at) const {
    throw_bad_input(msg, {file_, tensor_, at});
  }
  [[noreturn]] void fail(const std::string& msg) const { fail(msg, pos_); }

  void need(std::uint64_t n, const char* what) const {
    if (n > remaining())
      fail(fmt::format("truncated file: {} needs {} bytes, {} left", what, n, remaining()));
  }
  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what, std::uint64_t max_len) {
    const std::uint64_t at = pos_;
    const auto len = read<std::uint64_t>(what);
    if (len > max_len) fail(fmt::format("{} is {} bytes long (limit {})", what, len, max_len), at);
    need(len, what);
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), len);
    pos_ += len;
    return s;
  }
  void skip(std::uint64_t n, const char* what) {
    need(n, what);
    pos_ += n;
  }

 private:
  std::span<const std::uint8_t> b_;
  const std::string& file_;
  std::string tensor_;
  std::uint64_t pos_{0};
};

std::uint64_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::BOOL: return 1;
    case GgufValueType::U16: case GgufValueType::I16: return 2;
    case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::F32: return 4;
    case GgufValueType::U64: case GgufValueType::I64: case GgufValueType::F64: return 8;
    default: return 0;
  }
}

GgufValueType read_value_type(Cursor& c, const char* what) {
  const std::uint64_t at = c.pos();
  const auto raw = c.read<std::uint32_t>(what);
  if (raw > static_cast<std::uint32_t>(GgufValueType::F64))
    c.fail(fmt::format("unknown {} {}", what, raw), at);
  return static_cast<GgufValueType>(raw);
}

// Reads one scalar and stores it as number (for arrays) or typed fields.
double read_scalar(Cursor& c, GgufValueType t, GgufValue& v) {
  const std::uint64_t at = c.pos();
  auto set_int = [&](std::int64_t x) {
    v.i = x;
    if (x >= 0) v.u = static_cast<std::uint64_t>(x);
    return static_cast<double>(x);
  };
  switch (t) {
    case GgufValueType::U8: return set_int(c.read<std::uint8_t>("u8 value"));
    case GgufValueType::I8: return set_int(c.read<std::int8_t>("i8 value"));
    case GgufValueType::U16: return set_int(c.read<std::uint16_t>("u16 value"));
    case GgufValueType::I16: return set_int(c.read<std::int16_t>("i16 value"));
    case GgufValueType::U32: return set_int(c.read<std::uint32_t>("u32 value"));
    case GgufValueType::I32: return set_int(c.read<std::int32_t>("i32 value"));
    case GgufValueType::I64: return set_int(c.read<std::int64_t>("i64 value"));
    case GgufValueType::U64: {
      const auto x = c.read<std::uint64_t>("u64 value");
      v.u = x;
      if (x <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        v.i = static_cast<std::int64_t>(x);
      return static_cast<double>(x);
    }
    case GgufValueType::F32: return v.f = c.read<float>("f32 value");
    case GgufValueType::F64: return v.f = c.read<double>("f64 value");
    case GgufValueType::BOOL: {
      const auto x = c.read<std::uint8_t>("bool value");
      if (x > 1) c.fail(fmt::format("bool value {} is neither 0 nor 1", x), at);
      return set_int(x);
    }
    default: c.fail("internal: not a scalar type", at);
  }
}

void read_array(Cursor& c, GgufValue& v) {
  v.elem_type = read_value_type(c, "array element type");
  const std::uint64_t count_at = c.pos();
  v.count = c.read<std::uint64_t>("array length");
  if (v.elem_type == GgufValueType::ARRAY) c.fail("nested arrays are not supported", count_at);
  if (v.elem_type == GgufValueType::STRING) {
    // Each element needs at least its 8-byte length: bound the count before reserving.
    if (v.count > c.remaining() / 8)
      c.fail(fmt::format("array of {} strings cannot fit in the file", v.count), count_at);
    v.strings.reserve(v.count);
    for (std::uint64_t k = 0; k < v.count; ++k)
      v.strings.push_back(c.read_string("array string", std::numeric_limits<std::uint64_t>::max()));
    return;
  }
  const std::uint64_t es = scalar_size(v.elem_type);
  if (v.count > c.remaining() / es)
    c.fail(fmt::format("array of {} elements cannot fit in the file", v.count), count_at);
  v.numbers.reserve(v.count);
  GgufValue scratch;
  for (std::uint64_t k = 0; k < v.count; ++k) v.numbers.push_back(read_scalar(c, v.elem_type, scratch));
}

GgufValue read_value(Cursor& c) {
  GgufValue v;
  v.type = read_value_type(c, "value type");
  if (v.type == GgufValueType::STRING)
    v.s = c.read_string("string value", std::numeric_limits<std::uint64_t>::max());
  else if (v.type == GgufValueType::ARRAY)
    read_array(c, v);
  else
    read_scalar(c, v.type, v);
  return v;
}

void read_kvs(Cursor& c, std::uint64_t kv_count, GgufHeader& h) {
  std::set<std::string> seen;
  for (std::uint64_t k = 0; k < kv_count; ++k) {
    const std::uint64_t at = c.pos();
    std::string key = c.read_string("metadata key", kMaxKeyBytes);
    if (key.empty()) c.fail("empty metadata key", at);
    if (!seen.insert(key).second) c.fail(fmt::format("duplicate metadata key '{}'", key), at);
    GgufValue v = read_value(c);
    if (key == "general.alignment") {
      if (v.type != GgufValueType::U32) c.fail("general.alignment must be a u32", at);
      const std::uint64_t a = *v.u;
      if (a == 0 || (a & (a - 1)) != 0)
        c.fail(fmt::format("general.alignment {} is not a power of two", a), at);
      h.alignment = a;
    }
    h.kv.emplace_back(std::move(key), std::move(v));
  }
}

std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, Cursor& c, std::uint64_t at) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a)
    c.fail("tensor size overflows 64 bits", at);
  return a * b;
}

GgufTensorInfo read_tensor_info(Cursor& c, std::set<std::string>& seen) {
  GgufTensorInfo t;
  t.info_offset = c.pos();
  c.set_tensor("");
  t.name = c.read_string("tensor name", kMaxTensorNameBytes);
  c.set_tensor(t.name);
  if (t.name.empty()) c.fail("empty tensor name", t.info_offset);
  if (!seen.insert(t.name).second) c.fail("duplicate tensor name", t.info_offset);
  const std::uint64_t dims_at = c.pos();
  t.n_dims = c.read<std::uint32_t>("n_dims");
  if (t.n_dims > kMaxDims) c.fail(fmt::format("n_dims {} exceeds {}", t.n_dims, kMaxDims), dims_at);
  std::uint64_t numel = 1;
  for (std::uint32_t d = 0; d < t.n_dims; ++d) {
    const std::uint64_t at = c.pos();
    t.ne[d] = c.read<std::uint64_t>("dimension");
    if (t.ne[d] > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      c.fail(fmt::format("dimension {} is negative as int64", d), at);
    numel = checked_mul(numel, t.ne[d], c, at);
    if (numel > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      c.fail("element count overflows int64", at);
  }
  const std::uint64_t type_at = c.pos();
  const auto type_id = c.read<std::uint32_t>("tensor type");
  const auto traits = ggml_type_traits(type_id);
  if (!traits) c.fail(fmt::format("unknown or unsupported ggml type {}", type_id), type_at);
  t.type = static_cast<GgmlType>(type_id);
  if (t.ne[0] % traits->block_elems != 0)
    c.fail(fmt::format("ne[0] = {} is not a multiple of the {} block size {}", t.ne[0],
                       traits->name, traits->block_elems), dims_at);
  t.nbytes = checked_mul(numel / traits->block_elems, traits->block_bytes, c, dims_at);
  t.offset = c.read<std::uint64_t>("tensor offset");
  return t;
}

std::uint64_t align_up(std::uint64_t x, std::uint64_t a, Cursor& c, std::uint64_t at) {
  const std::uint64_t pad = (a - x % a) % a;
  if (x > std::numeric_limits<std::uint64_t>::max() - pad) c.fail("offset overflows 64 bits", at);
  return x + pad;
}

// ggml's rule: tensors are laid out in info order, each at the aligned end of
// the previous one; anything else (gaps, overlaps, reordering) is rejected.
void check_layout(Cursor& c, GgufHeader& h, std::uint64_t file_size) {
  std::uint64_t expected = 0;
  for (const auto& t : h.tensors) {
    c.set_tensor(t.name);
    const std::uint64_t at = t.info_offset;
    if (t.offset % h.alignment != 0)
      c.fail(fmt::format("data offset {} is not a multiple of the alignment {}", t.offset, h.alignment), at);
    if (t.offset != expected)
      c.fail(fmt::format("data offset {} breaks the packed order (expected {})", t.offset, expected), at);
    const std::uint64_t begin = h.data_start + t.offset;
    if (begin < h.data_start || t.nbytes > file_size || begin > file_size - t.nbytes)
      c.fail(fmt::format("data [{}, +{}) runs past the end of the file ({} bytes)", begin, t.nbytes,
                         file_size), at);
    expected = align_up(t.offset + t.nbytes, h.alignment, c, at);
  }
  c.set_tensor("");
}

}  // namespace

GgufHeader parse_gguf(std::span<const std::uint8_t> bytes, const std::string& file) {
  Cursor c(bytes, file);
  GgufHeader h;
  const auto magic = c.read<std::uint32_t>("magic");
  if (magic != kMagic) c.fail("not a GGUF file (bad magic)", 0);
  h.version = c.read<std::uint32_t>("version");
  if (h.version != 2 && h.version != 3) {
    if ((h.version & 0xFFFF) == 0) c.fail("GGUF file has the wrong byte order (big-endian?)", 4);
    c.fail(fmt::format("unsupported GGUF version {} (selq reads 2 and 3)", h.version), 4);
  }
  const std::uint64_t counts_at = c.pos();
  const auto tensor_count = c.read<std::uint64_t>("tensor count");
  const auto kv_count = c.read<std::uint64_t>("metadata count");
  // A tensor info takes at least 8+4+4+8 bytes, a kv at least 8+1+4+1: bound
  // the counts by the file size before trusting them.
  if (tensor_count > c.remaining() / 24 || kv_count > c.remaining() / 14)
    c.fail(fmt::format("tensor count {} / metadata count {} cannot fit in the file", tensor_count,
                       kv_count), counts_at);
  read_kvs(c, kv_count, h);
  std::set<std::string> seen;
  h.tensors.reserve(tensor_count);
  for (std::uint64_t k = 0; k < tensor_count; ++k) h.tensors.push_back(read_tensor_info(c, seen));
  c.set_tensor("");
  h.data_start = tensor_count > 0 ? align_up(c.pos(), h.alignment, c, c.pos()) : c.pos();
  if (h.data_start > bytes.size()) c.fail("file ends inside the padding before the data section");
  check_layout(c, h, bytes.size());
  return h;
}

std::vector<std::int64_t> GgufTensorInfo::row_major_shape() const {
  std::vector<std::int64_t> s;
  for (std::uint32_t d = n_dims; d-- > 0;) s.push_back(static_cast<std::int64_t>(ne[d]));
  return s;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_io(fmt::format("cannot open: {}", std::strerror(errno)), {path, "", {}});
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_io("not a regular file", {path, "", {}});
  }
  f->size_ = static_cast<std::uint64_t>(st.st_size);
  if (f->size_ > 0) {
    void* m = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      ::close(fd);
      throw_io(fmt::format("mmap failed: {}", std::strerror(errno)), {path, "", {}});
    }
    f->map_ = static_cast<const std::uint8_t*>(m);
  }
  ::close(fd);
  f->header_ = parse_gguf({f->map_, f->size_}, path);
  for (std::size_t k = 0; k < f->header_.kv.size(); ++k) f->kv_index_[f->header_.kv[k].first] = k;
  for (std::size_t k = 0; k < f->header_.tensors.size(); ++k)
    f->tensor_index_[f->header_.tensors[k].name] = k;
  return f;
}

GgufFile::~GgufFile() {
  if (map_) ::munmap(const_cast<std::uint8_t*>(map_), size_);
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &header_.kv[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &header_.tensors[it->second];
}

const GgufValue& GgufFile::require(std::string_view key, GgufValueType type) const {
  const GgufValue* v = find(key);
  if (!v) throw_bad_input(fmt::format("metadata key '{}' is missing", key), {path_, "", {}});
  if (v->type != type)
    throw_bad_input(fmt::format("metadata key '{}' has value type {}, expected {}", key,
                                static_cast<int>(v->type), static_cast<int>(type)),
                    {path_, "", {}});
  return *v;
}

std::optional<std::uint64_t> GgufFile::get_uint_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type == GgufValueType::ARRAY || v->type == GgufValueType::STRING || !v->u)
    throw_bad_input(fmt::format("metadata key '{}' is not a non-negative integer", key),
                    {path_, "", {}});
  return v->u;
}

std::uint64_t GgufFile::get_uint(std::string_view key) const {
  auto v = get_uint_opt(key);
  if (!v) throw_bad_input(fmt::format("metadata key '{}' is missing", key), {path_, "", {}});
  return *v;
}

double GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v && v->type == GgufValueType::F64) return v->f;
  return require(key, GgufValueType::F32).f;
}

std::string GgufFile::get_string(std::string_view key) const {
  return require(key, GgufValueType::STRING).s;
}

std::optional<bool> GgufFile::get_bool_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  return require(key, GgufValueType::BOOL).u.value_or(0) != 0;
}

const std::vector<std::string>& GgufFile::get_string_array(std::string_view key) const {
  const GgufValue& v = require(key, GgufValueType::ARRAY);
  if (v.elem_type != GgufValueType::STRING)
    throw_bad_input(fmt::format("metadata key '{}' is not an array of strings", key), {path_, "", {}});
  return v.strings;
}

const std::vector<double>& GgufFile::get_number_array(std::string_view key) const {
  const GgufValue& v = require(key, GgufValueType::ARRAY);
  if (v.elem_type == GgufValueType::STRING)
    throw_bad_input(fmt::format("metadata key '{}' is not a numeric array", key), {path_, "", {}});
  return v.numbers;
}

std::span<const std::uint8_t> GgufFile::tensor_bytes(const GgufTensorInfo& t) const {
  return {map_ + header_.data_start + t.offset, t.nbytes};
}

std::vector<float> GgufFile::dequantize(const GgufTensorInfo& t) const {
  std::vector<float> out(t.numel());
  const auto traits = ggml_type_traits(static_cast<std::uint32_t>(t.type));
  if (!traits->dequantizable)
    throw_unsupported(fmt::format("cannot dequantize ggml type {}", traits->name),
                      {path_, t.name, header_.data_start + t.offset});
  dequantize_row(t.type, tensor_bytes(t).data(), out.data(), out.size());
  return out;
}

}  // namespace selq::runtime
