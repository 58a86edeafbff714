// GGUF reader and dequantizers on files the test writes byte by byte.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "core/codecs.h"
#include "core/error.h"
#include "gguf_test_writer.h"
#include "runtime/gguf/gguf.h"

namespace selq::runtime {
namespace {

using testutil::Gguf;
using testutil::write_tmp;

// A one-tensor file holding `data` as a tensor of `type` with ne = {n}.
std::vector<float> dequant_via_file(std::uint32_t type, std::uint64_t n, const std::vector<std::uint8_t>& data) {
  Gguf g;
  g.header(1, 0).tensor("t", {n}, type, 0).pad().bytes(data);
  auto f = GgufFile::open(write_tmp(g.b, "deq"));
  return f->dequantize(f->tensors()[0]);
}

std::uint16_t f16(float x) { return f32_to_f16_ref(x); }
void put16(std::vector<std::uint8_t>& v, std::size_t at, std::uint16_t x) { std::memcpy(&v[at], &x, 2); }

TEST(Gguf, ParsesMetadataTensorsAndLayout) {
  Gguf g;
  g.header(2, 3).kv_u32("general.alignment", 64).str("general.name").put<std::uint32_t>(8).str("tiny");
  g.str("arr").put<std::uint32_t>(9).put<std::uint32_t>(5).put<std::uint64_t>(3);
  g.put<std::int32_t>(-1).put<std::int32_t>(2).put<std::int32_t>(3);
  g.tensor("a", {4, 2}, 0, 0).tensor("b", {3}, 0, 64).pad(64);
  std::vector<std::uint8_t> data(64 + 12, 0);
  const float x = 1.5f;
  std::memcpy(&data[64], &x, 4);
  g.bytes(data);
  auto f = GgufFile::open(write_tmp(g.b, "ok"));
  EXPECT_EQ(f->header().alignment, 64u);
  EXPECT_EQ(f->get_string("general.name"), "tiny");
  EXPECT_EQ(f->get_number_array("arr"), (std::vector<double>{-1, 2, 3}));
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->tensors()[0].row_major_shape(), (std::vector<std::int64_t>{2, 4}));
  EXPECT_EQ(f->dequantize(*f->find_tensor("b"))[0], 1.5f);
  EXPECT_THROW(f->get_uint("missing.key"), Error);
  EXPECT_THROW(f->get_string("arr"), Error);
}

TEST(GgufDequant, Q4_1WorkedExampleFromDoc) {
  // docs/GGUF.md §2, worked example: d = 0.0625, m = -0.5, qs[0] = 0x3A, qs[15] = 0xF0, others 0x80.
  std::vector<std::uint8_t> blk = {0x00, 0x2C, 0x00, 0xB8, 0x3A};
  for (int i = 0; i < 14; ++i) blk.push_back(0x80);
  blk.push_back(0xF0);
  const auto y = dequant_via_file(3, 32, blk);
  EXPECT_EQ(y[0], 0.125f);
  EXPECT_EQ(y[16], -0.3125f);
  EXPECT_EQ(y[1], -0.5f);
  EXPECT_EQ(y[17], 0.0f);
  EXPECT_EQ(y[15], -0.5f);
  EXPECT_EQ(y[31], 0.4375f);
  EXPECT_EQ(f32_to_bf16_ref(y[31]), 0x3EE0);
}

TEST(GgufDequant, SimpleBlockTypes) {
  // Q8_0: d = 0.5, qs[j] = j - 16.
  std::vector<std::uint8_t> q8(34);
  put16(q8, 0, f16(0.5f));
  for (int j = 0; j < 32; ++j) q8[2 + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(j - 16));
  auto y = dequant_via_file(8, 32, q8);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * static_cast<float>(j - 16));
  // Q4_0: d = 2, element j (low nibble) = j % 16, element j+16 (high nibble) = 15 - j.
  std::vector<std::uint8_t> q4(18);
  put16(q4, 0, f16(2.0f));
  for (int j = 0; j < 16; ++j) q4[2 + j] = static_cast<std::uint8_t>(j | ((15 - j) << 4));
  y = dequant_via_file(2, 32, q4);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 2.0f * static_cast<float>(j - 8));
    EXPECT_EQ(y[j + 16], 2.0f * static_cast<float>(7 - j));
  }
  // Q5_1: d = 1, m = -16; 5th bit of element j from bit j of qh (set for odd j).
  std::vector<std::uint8_t> q5(24);
  put16(q5, 0, f16(1.0f));
  put16(q5, 2, f16(-16.0f));
  const std::uint32_t qh = 0xAAAAAAAA;
  std::memcpy(&q5[4], &qh, 4);
  for (int j = 0; j < 16; ++j) q5[8 + j] = static_cast<std::uint8_t>(3 | (5 << 4));
  y = dequant_via_file(7, 32, q5);
  EXPECT_EQ(y[0], 3.0f - 16.0f);
  EXPECT_EQ(y[1], 19.0f - 16.0f);
  EXPECT_EQ(y[16], 5.0f - 16.0f);
  EXPECT_EQ(y[17], 21.0f - 16.0f);
  // Q5_0 with the same qh/qs: value = (q - 16) * d.
  std::vector<std::uint8_t> q50(22);
  put16(q50, 0, f16(0.25f));
  std::memcpy(&q50[2], &qh, 4);
  for (int j = 0; j < 16; ++j) q50[6 + j] = static_cast<std::uint8_t>(3 | (5 << 4));
  y = dequant_via_file(6, 32, q50);
  EXPECT_EQ(y[0], -13 * 0.25f);
  EXPECT_EQ(y[17], 5 * 0.25f);
  // MXFP4: scale byte 128 (2^1, halved table), nibble 7 = 6.0, nibble 0xF = -6.0.
  std::vector<std::uint8_t> mx(17, 0xF7);
  mx[0] = 128;
  y = dequant_via_file(39, 32, mx);
  EXPECT_EQ(y[0], 12.0f);
  EXPECT_EQ(y[16], -12.0f);
}

TEST(GgufDequant, FloatTypes) {
  std::vector<std::uint8_t> h(4);
  put16(h, 0, 0x0001);  // smallest f16 subnormal
  put16(h, 2, 0xC000);  // -2
  auto y = dequant_via_file(1, 2, h);
  EXPECT_EQ(y[0], std::ldexp(1.0f, -24));
  EXPECT_EQ(y[1], -2.0f);
  y = dequant_via_file(30, 2, {0x80, 0x3F, 0xC0, 0x7F});
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_TRUE(std::isnan(y[1]));
}

TEST(GgufDequant, Q4_K) {
  std::vector<std::uint8_t> b(144, 0);
  put16(b, 0, f16(0.5f));   // d
  put16(b, 2, f16(0.25f));  // dmin
  // Sub-blocks 0-3: scale 1+s, min s; sub-blocks 4-7: scale 40+s (needs the high bits), min 20+s.
  for (int s = 0; s < 4; ++s) {
    const int sc_hi = 40 + s, m_hi = 20 + s;
    b[4 + s] = static_cast<std::uint8_t>((1 + s) | ((sc_hi >> 4) << 6));
    b[8 + s] = static_cast<std::uint8_t>(s | ((m_hi >> 4) << 6));
    b[12 + s] = static_cast<std::uint8_t>((sc_hi & 0xF) | ((m_hi & 0xF) << 4));
  }
  for (int i = 0; i < 128; ++i) b[16 + i] = static_cast<std::uint8_t>((i % 16) | ((15 - i % 16) << 4));
  const auto y = dequant_via_file(12, 256, b);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32, c = e / 64, l = e % 32;
    const std::uint8_t byte = b[16 + 32 * c + l];
    const int q = (e % 64) < 32 ? (byte & 0xF) : (byte >> 4);
    const int sc = s < 4 ? 1 + s : 40 + (s - 4), m = s < 4 ? s : 20 + (s - 4);
    ASSERT_EQ(y[e], (0.5f * static_cast<float>(sc)) * static_cast<float>(q) - 0.25f * static_cast<float>(m)) << e;
  }
}

TEST(GgufDequant, Q6_K) {
  std::vector<std::uint8_t> b(210, 0);
  for (int i = 0; i < 128; ++i) b[i] = static_cast<std::uint8_t>((i * 7) & 0xFF);
  for (int i = 0; i < 64; ++i) b[128 + i] = static_cast<std::uint8_t>((i * 13) & 0xFF);
  for (int i = 0; i < 16; ++i) b[192 + i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(i - 8));
  put16(b, 208, f16(0.125f));
  const auto y = dequant_via_file(14, 256, b);
  for (int e = 0; e < 256; ++e) {
    // Independent reading of the layout: element e = 128n + 32k + l.
    const int n = e / 128, k = (e % 128) / 32, l = e % 32;
    const int lo_byte = b[64 * n + l + (k % 2 ? 32 : 0)];
    const int lo = k >= 2 ? lo_byte >> 4 : lo_byte & 0xF;
    const int hi = (b[128 + 32 * n + l] >> (2 * k)) & 3;
    const float expect = 0.125f * static_cast<float>(e / 16 - 8) * static_cast<float>((lo + 16 * hi) - 32);
    ASSERT_EQ(y[e], expect) << e;
  }
}

TEST(GgufDequant, Q8_KAndUnsupported) {
  std::vector<std::uint8_t> b(292, 0);
  const float d = 0.75f;
  std::memcpy(b.data(), &d, 4);
  b[4] = 0xFF;  // -1
  b[5] = 3;
  const auto y = dequant_via_file(15, 256, b);
  EXPECT_EQ(y[0], -0.75f);
  EXPECT_EQ(y[1], 2.25f);
  std::vector<float> out(256);
  EXPECT_THROW(dequantize_row(GgmlType::Q5_K, b.data(), out.data(), 256), Error);
  EXPECT_THROW(dequantize_row(GgmlType::Q8_0, b.data(), out.data(), 31), Error);
}

// Expects parse_gguf to reject `bytes` with a message containing `needle`,
// naming the file and a byte offset.
void expect_reject(const std::vector<std::uint8_t>& bytes, const std::string& needle, const std::string& tensor = "") {
  try {
    parse_gguf(bytes, "bad.gguf");
    FAIL() << "accepted; expected: " << needle;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    EXPECT_NE(what.find("bad.gguf"), std::string::npos) << what;
    EXPECT_TRUE(e.where().offset.has_value()) << what;
    EXPECT_EQ(e.where().tensor, tensor) << what;
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
  }
}

Gguf one_f32_tensor(std::vector<std::uint64_t> ne = {4}, std::uint32_t type = 0, std::uint64_t off = 0) {
  Gguf g;
  g.header(1, 0).tensor("w", std::move(ne), type, off).pad().bytes(std::vector<std::uint8_t>(64, 0));
  return g;
}

TEST(GgufMalformed, HeaderErrors) {
  expect_reject({}, "truncated");
  auto g = one_f32_tensor();
  g.b[0] = 'X';
  expect_reject(g.b, "bad magic");
  Gguf v1;
  v1.header(0, 0, 1);
  expect_reject(v1.b, "unsupported GGUF version 1");
  Gguf be;
  be.header(0, 0, 0x03000000);
  expect_reject(be.b, "byte order");
  Gguf huge;
  huge.header(1ull << 60, 0);
  expect_reject(huge.b, "cannot fit");
  auto t = one_f32_tensor();
  t.b.resize(50);  // inside the tensor offset field
  expect_reject(t.b, "truncated", "w");
}

TEST(GgufMalformed, MetadataErrors) {
  Gguf longstr;
  longstr.header(0, 1).str("k").put<std::uint32_t>(8).put<std::uint64_t>(1000);
  expect_reject(longstr.b, "truncated");
  Gguf badtype;
  badtype.header(0, 1).str("k").put<std::uint32_t>(13).put<std::uint32_t>(0);
  expect_reject(badtype.b, "unknown value type 13");
  Gguf nested;
  nested.header(0, 1).str("k").put<std::uint32_t>(9).put<std::uint32_t>(9).put<std::uint64_t>(1).put<std::uint64_t>(0);
  expect_reject(nested.b, "nested arrays");
  Gguf bigarr;
  bigarr.header(0, 1).str("k").put<std::uint32_t>(9).put<std::uint32_t>(4).put<std::uint64_t>(1ull << 62);
  expect_reject(bigarr.b, "cannot fit");
  Gguf dup;
  dup.header(0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2);
  expect_reject(dup.b, "duplicate metadata key");
  Gguf empty;
  empty.header(0, 1).kv_u32("", 1);
  expect_reject(empty.b, "empty metadata key");
  Gguf align;
  align.header(0, 1).kv_u32("general.alignment", 24);
  expect_reject(align.b, "power of two");
  Gguf align_type;
  align_type.header(0, 1).str("general.alignment").put<std::uint32_t>(10).put<std::uint64_t>(32);
  expect_reject(align_type.b, "must be a u32");
  Gguf boolv;
  boolv.header(0, 1).str("k").put<std::uint32_t>(7).put<std::uint8_t>(2);
  expect_reject(boolv.b, "neither 0 nor 1");
}

TEST(GgufMalformed, TensorErrors) {
  Gguf dims;
  dims.header(1, 0).tensor("w", {1, 1, 1, 1, 1}, 0, 0).pad();
  expect_reject(dims.b, "n_dims 5", "w");
  expect_reject(one_f32_tensor({4}, 99).b, "unknown or unsupported ggml type 99", "w");
  expect_reject(one_f32_tensor({31}, 8).b, "not a multiple of the Q8_0 block size", "w");
  expect_reject(one_f32_tensor({4}, 0, 8).b, "not a multiple of the alignment", "w");
  expect_reject(one_f32_tensor({4}, 0, 32).b, "packed order", "w");
  expect_reject(one_f32_tensor({1000}).b, "past the end", "w");
  expect_reject(one_f32_tensor({1ull << 32, 1ull << 32}).b, "overflow", "w");
  expect_reject(one_f32_tensor({1ull << 63}).b, "negative", "w");
  Gguf dup;
  dup.header(2, 0).tensor("w", {4}, 0, 0).tensor("w", {4}, 0, 32).pad().bytes(std::vector<std::uint8_t>(64, 0));
  expect_reject(dup.b, "duplicate tensor name", "w");
  Gguf longname;
  longname.header(1, 0).tensor(std::string(64, 'x'), {4}, 0, 0).pad().bytes(std::vector<std::uint8_t>(64, 0));
  expect_reject(longname.b, "limit 63");
}

TEST(GgufMalformed, OpenErrorsAreSelqErrors) {
  EXPECT_THROW(GgufFile::open("/nonexistent/x.gguf"), Error);
  EXPECT_THROW(GgufFile::open(write_tmp({'G', 'G'}, "short")), Error);
}

}  // namespace
}  // namespace selq::runtime
