// The R lazy-load reader on databases written here the way R writes them,
// and on damaged ones (one error naming the file and the chunk's offset).
#include <gtest/gtest.h>

#include "../r_lazyload_fixture.h"
#include "core/error.h"
#include "io_test_util.h"
#include "io/r_lazyload.h"

namespace selq::io {
namespace {

using selq::testing::r_character_vector;
using selq::testing::r_integer_vector;
using selq::testing::r_lazyload_chunk;
using selq::testing::RString;
using selq::testing::write_binary;

TEST(RLazyLoad, ReadsCharacterVectorsInOrderAndSkipsOtherObjects) {
  testing::TempDir dir;
  const std::string db = dir.file("Rdata.rdb");
  write_binary(db, r_lazyload_chunk(r_character_vector({{"EMMA"}, {""}, {"Emma Woodhouse, handsome"}})) +
                       r_lazyload_chunk(r_integer_vector({1, 2, 3})) +
                       r_lazyload_chunk(r_character_vector({{std::nullopt}, {"caf\xe9", true}, {"na\xc3\xafve"}})));
  auto v = read_r_character_vectors(db);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0], (std::vector<std::string>{"EMMA", "", "Emma Woodhouse, handsome"}));
  // NA becomes "", a Latin-1 string becomes UTF-8, a UTF-8 one stays as it is.
  EXPECT_EQ(v[1], (std::vector<std::string>{"", "caf\xc3\xa9", "na\xc3\xafve"}));
}

TEST(RLazyLoad, DamagedChunkNamesFileAndOffset) {
  testing::TempDir dir;
  const std::string db = dir.file("Rdata.rdb");
  const std::string first = r_lazyload_chunk(r_character_vector({{"one"}}));
  std::string second = r_lazyload_chunk(r_character_vector({{"two"}, {"three"}}));
  second[second.size() / 2] ^= 0x5A;  // corrupt the zlib stream
  write_binary(db, first + second);
  try {
    read_r_character_vectors(db);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_EQ(e.where().file, db);
    ASSERT_TRUE(e.where().offset.has_value());
    EXPECT_EQ(*e.where().offset, first.size());
  }
}

TEST(RLazyLoad, TruncatedObjectIsBadInput) {
  testing::TempDir dir;
  const std::string db = dir.file("Rdata.rdb");
  std::string ser = r_character_vector({{"a longer line of text"}});
  ser.resize(ser.size() - 5);  // the string is cut short inside the serialization
  write_binary(db, r_lazyload_chunk(ser));
  try {
    read_r_character_vectors(db);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
    EXPECT_EQ(e.where().offset, std::optional<std::uint64_t>(0));
  }
}

TEST(RLazyLoad, NotXdrIsBadInput) {
  testing::TempDir dir;
  const std::string db = dir.file("Rdata.rdb");
  write_binary(db, r_lazyload_chunk("A\n3\n..."));
  EXPECT_THROW(read_r_character_vectors(db), Error);
  write_binary(db, std::string("\x00\x00", 2));
  EXPECT_THROW(read_r_character_vectors(db), Error);
}

}  // namespace
}  // namespace selq::io
