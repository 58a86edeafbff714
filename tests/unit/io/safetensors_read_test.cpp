#include <gtest/gtest.h>

#include <cstring>
#include <optional>

#include "core/dtype.h"
#include "io_test_util.h"
#include "io/safetensors.h"

namespace selq::io {
namespace {

using testing::catch_error;
using testing::raw_file;
using testing::TempDir;

struct Rejection {
  std::string header;
  std::size_t data_bytes;
  std::string tensor;                 // expected ErrorWhere::tensor
  std::optional<std::uint64_t> offset;  // expected absolute offset
  std::string message_part;
};

// Writes the file, opens it, and checks that the error names file, tensor and offset.
void expect_rejected(const Rejection& r) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  testing::write_bytes(path, raw_file(r.header, r.data_bytes));
  const Error e = catch_error([&] { SafetensorsFile::open(path); });
  EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
  EXPECT_EQ(e.where().file, path);
  EXPECT_EQ(e.where().tensor, r.tensor) << e.what();
  EXPECT_EQ(e.where().offset, r.offset) << e.what();
  const std::string what = e.what();
  EXPECT_NE(what.find(path), std::string::npos) << what;
  if (!r.tensor.empty()) {
    EXPECT_NE(what.find("'" + r.tensor + "'"), std::string::npos) << what;
  }
  if (r.offset) {
    EXPECT_NE(what.find("at byte " + std::to_string(*r.offset)), std::string::npos) << what;
  }
  EXPECT_NE(what.find(r.message_part), std::string::npos) << what;

  // The in-memory parser (the fuzz target) must agree.
  const auto bytes = raw_file(r.header, r.data_bytes);
  const Error e2 = catch_error([&] { parse_safetensors_bytes(bytes, "mem"); });
  EXPECT_EQ(e2.where().offset, r.offset);
  EXPECT_EQ(e2.message(), e.message());
}

std::uint64_t data_start(const std::string& header) { return 8 + header.size(); }

TEST(SafetensorsRead, EveryDtypeIsReadWithZeroCopyViews) {
  for (int i = 0; i <= static_cast<int>(DType::U64); ++i) {
    const auto dt = static_cast<DType>(i);
    SCOPED_TRACE(std::string(dtype_name(dt)));
    // 24 elements fill whole bytes for every width (4, 6, 8, ..., 64 bits).
    TensorInfo a{"a", dt, {2, 12}};
    TensorInfo b{"b.scalar", dt, {}};
    if (dtype_bits(dt) < 8) b.shape = {8};
    const auto abytes = testing::random_bytes(a.nbytes(), 1 + i);
    const auto bbytes = testing::random_bytes(b.nbytes(), 100 + i);
    TempDir dir;
    const std::string path = dir.file("x.safetensors");
    testing::write_bytes(path, serialize_safetensors({{a, abytes}, {b, bbytes}}, {{"format", "pt"}}));
    const auto f = SafetensorsFile::open(path);
    ASSERT_EQ(f->entries().size(), 2u);
    EXPECT_EQ(f->metadata().at("format"), "pt");
    const TensorView va = f->view("a");
    EXPECT_EQ(va.info->dtype, dt);
    EXPECT_EQ(va.info->shape, a.shape);
    ASSERT_EQ(va.bytes.size(), abytes.size());
    EXPECT_EQ(0, std::memcmp(va.bytes.data(), abytes.data(), abytes.size()));
    const TensorView vb = f->view("b.scalar");
    EXPECT_EQ(vb.info->shape, b.shape);
    ASSERT_EQ(vb.bytes.size(), bbytes.size());
    EXPECT_EQ(0, std::memcmp(vb.bytes.data(), bbytes.data(), bbytes.size()));
    // Zero-copy: the view points into the mapping at data_start + begin.
    EXPECT_EQ(vb.bytes.data() - va.bytes.data(), static_cast<std::ptrdiff_t>(f->find("b.scalar")->begin));
  }
}

TEST(SafetensorsRead, AcceptsEdgeCasesTheSpecAllows) {
  // Leading/trailing whitespace, rank-0, zero-size tensors, F6 with count%4==0.
  const std::string h =
      "  \n{\"z\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[0,0]},"
      "\"s\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[0,2]},"
      "\"f6\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":[2,5]},"
      "\"f4\":{\"dtype\":\"F4\",\"shape\":[2,1],\"data_offsets\":[5,6]},"
      "\"__metadata__\":{}}\t  ";
  const auto bytes = raw_file(h, 6);
  const ParsedHeader p = parse_safetensors_bytes(bytes, "mem");
  ASSERT_EQ(p.entries.size(), 4u);
  EXPECT_EQ(p.entries[0].info.name, "z");  // offset order, ties by name
  EXPECT_EQ(p.entries[1].info.name, "s");
  EXPECT_TRUE(p.entries[1].info.shape.empty());
  EXPECT_EQ(p.entries[3].info.dtype, DType::F4);
  EXPECT_TRUE(parse_safetensors_bytes(raw_file("{}"), "mem").entries.empty());
}

TEST(SafetensorsRead, RejectsFileShorterThanLengthPrefix) {
  TempDir dir;
  const std::string path = dir.file("tiny.safetensors");
  testing::write_bytes(path, {1, 2, 3});
  const Error e = catch_error([&] { SafetensorsFile::open(path); });
  EXPECT_EQ(e.where().file, path);
  EXPECT_EQ(e.where().offset, 0u);
  EXPECT_NE(std::string(e.what()).find("too small"), std::string::npos);
}

TEST(SafetensorsRead, RejectsHeaderTooLargeAndPastEof) {
  TempDir dir;
  const std::string path = dir.file("h.safetensors");
  auto with_length = [](std::uint64_t n) {
    std::vector<std::uint8_t> out(64, ' ');
    const auto len = testing::le64(n);
    std::copy(len.begin(), len.end(), out.begin());
    return out;
  };
  auto bytes = with_length(kMaxHeaderBytes + 1);
  testing::write_bytes(path, bytes);
  Error e = catch_error([&] { SafetensorsFile::open(path); });
  EXPECT_NE(std::string(e.what()).find("exceeds the limit"), std::string::npos) << e.what();
  EXPECT_EQ(e.where().offset, 0u);

  bytes = with_length(1000);
  testing::write_bytes(path, bytes);
  e = catch_error([&] { SafetensorsFile::open(path); });
  EXPECT_NE(std::string(e.what()).find("past the end"), std::string::npos) << e.what();
  EXPECT_EQ(e.where().file, path);
}

TEST(SafetensorsRead, RejectsBadJsonAndNonUtf8WithHeaderOffset) {
  const std::string bad_utf8 = "{\"a\xff\":{}}";
  expect_rejected({bad_utf8, 0, "", 8 + 3, "invalid JSON"});
  const std::string truncated = "{\"a\":{\"dtype\":";
  expect_rejected({truncated, 0, "", 8 + truncated.size(), "invalid JSON"});
  expect_rejected({"[1,2]", 0, "", 8, "must be a JSON object"});
  expect_rejected({"{} x", 0, "", 8 + 3, "invalid JSON"});
}

TEST(SafetensorsRead, RejectsWrongTypesNamingTheTensor) {
  const std::string pre = "{\"w\":";
  auto h = [&](const std::string& body) { return pre + body + "}"; };
  expect_rejected({h("[]"), 0, "w", 9, "must be an object"});
  expect_rejected({h(R"({"dtype":5,"shape":[],"data_offsets":[0,4]})"), 4, "w", 9, "'dtype' must be a string"});
  expect_rejected({h(R"({"dtype":"F32","shape":"x","data_offsets":[0,4]})"), 4, "w", 9, "'shape' must be an array"});
  expect_rejected({h(R"({"dtype":"F32","shape":[],"data_offsets":[0]})"), 4, "w", 9, "'data_offsets'"});
  expect_rejected({h(R"({"dtype":"F32","shape":[]})"), 4, "w", 9, "missing 'data_offsets'"});
  expect_rejected({h(R"({"dtype":"F12","shape":[],"data_offsets":[0,4]})"), 4, "w", 9, "unknown dtype 'F12'"});
  expect_rejected({h(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})"), 4, "w", 9, "negative"});
  expect_rejected({h(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})"), 4, "w", 9, "not an integer"});
  expect_rejected({h(R"({"dtype":"F32","shape":[],"data_offsets":[0,18446744073709551616]})"), 4, "w", 9,
                   "does not fit in 64 bits"});
  expect_rejected({h(R"({"dtype":"F32","shape":[],"data_offsets":[-4,0]})"), 4, "w", 9, "negative"});
}

TEST(SafetensorsRead, RejectsGapsOverlapsAndReversedOffsetsAtTheTensorData) {
  std::string h = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                  R"("b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})";
  expect_rejected({h, 12, "b", data_start(h) + 8, "gap"});
  h = R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})";
  expect_rejected({h, 12, "b", data_start(h) + 4, "overlap"});
  h = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})";
  expect_rejected({h, 8, "a", data_start(h) + 4, "gap"});
  h = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
      R"("b":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})";
  expect_rejected({h, 4, "b", data_start(h) + 4, "end before they begin"});
}

TEST(SafetensorsRead, RejectsOverflowMisalignmentAndSizeMismatch) {
  std::string h = R"({"o":{"dtype":"U8","shape":[4611686018427387904,8],"data_offsets":[0,0]}})";
  expect_rejected({h, 0, "o", data_start(h), "overflows"});
  h = R"({"o":{"dtype":"F64","shape":[2305843009213693952,2],"data_offsets":[0,0]}})";
  expect_rejected({h, 0, "o", data_start(h), "size in bits"});
  h = R"({"f4":{"dtype":"F4","shape":[1,3],"data_offsets":[0,2]}})";
  expect_rejected({h, 2, "f4", data_start(h), "misaligned"});
  h = R"({"f6":{"dtype":"F6_E3M2","shape":[2],"data_offsets":[0,2]}})";
  expect_rejected({h, 2, "f6", data_start(h), "misaligned"});
  h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})";
  expect_rejected({h, 4, "a", data_start(h), "span 4 bytes but F32 [2] needs 8"});
}

TEST(SafetensorsRead, RejectsDataNotFullyUsed) {
  const std::string h = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
  expect_rejected({h, 9, "", data_start(h) + 4, "cover 4 bytes of a 9-byte"});
}

TEST(SafetensorsRead, RejectsDuplicateKeysEvenWhenIdentical) {
  const std::string t = R"({"dtype":"U8","shape":[4],"data_offsets":[0,4]})";
  const std::string h = "{\"a\":" + t + ",\"a\":" + t + "}";
  expect_rejected({h, 4, "a", 8 + 5 + t.size() + 1, "duplicate JSON key 'a'"});
  // Duplicates inside a tensor entry are caught too (no tensor name then).
  const std::string h2 = R"({"a":{"dtype":"U8","dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
  expect_rejected({h2, 4, "", 8 + 19, "duplicate JSON key 'dtype'"});
}

TEST(SafetensorsRead, RejectsMetadataAbuse) {
  std::string h = R"({"__metadata__":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
  expect_rejected({h, 4, "__metadata__", 9, "may not be named __metadata__"});
  h = R"({"__metadata__":{"format":"pt","n":3}})";
  expect_rejected({h, 0, "__metadata__", 9, "value of 'n' must be a string"});
  h = R"({"__metadata__":"pt"})";
  expect_rejected({h, 0, "__metadata__", 9, "must be an object"});
}

TEST(SafetensorsRead, ViewOfMissingTensorNamesIt) {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  testing::write_bytes(path, serialize_safetensors({}));
  const auto f = SafetensorsFile::open(path);
  const Error e = catch_error([&] { f->view("nope"); });
  EXPECT_EQ(e.where().tensor, "nope");
  EXPECT_EQ(e.where().file, path);
}

}  // namespace
}  // namespace selq::io
