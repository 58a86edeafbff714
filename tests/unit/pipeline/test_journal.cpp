// The resume journal: what a rerun trusts, what it drops, and that each shard
// appends one line instead of rewriting the file.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors_hash.h"
#include "pipeline/journal.h"

namespace selq::pipeline {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("selq_journal_" + std::to_string(::getpid()));
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// A one-tensor safetensors file with `byte` as its data.
std::uint64_t write_shard(const std::string& path, char byte) {
  const std::string header = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  std::string bytes(8, '\0');
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  io::write_file_atomic(path, bytes + header + byte);
  return *io::file_content_hash(path);
}

TensorRecord record(const std::string& source, std::uint64_t hash) {
  TensorRecord r;
  r.source = source;
  r.source_hash = hash;
  r.output_hashes = {hash + 1, hash + 2};
  return r;
}

std::size_t lines(const std::string& path) {
  std::ifstream in(path);
  std::size_t n = 0;
  for (std::string l; std::getline(in, l);) ++n;
  return n;
}

TEST(Journal, CommittedShardsAreThoseOnDiskWithTheRecordedHash) {
  TempDir d;
  const std::string j = d.file("journal.json"), s1 = d.file("s1.safetensors"), s2 = d.file("s2.safetensors");
  const auto h1 = write_shard(s1, 'x');
  {
    Journal journal(j, "fp");
    EXPECT_FALSE(journal.resumed());
    journal.record_intent("s1.safetensors", h1, {{3, record("w3", 30)}, {4, record("w4", 40)}});
    journal.record_intent("s2.safetensors", 12345, {{5, record("w5", 50)}});  // died before its file was written
  }
  Journal again(j, "fp");
  EXPECT_TRUE(again.resumed());
  EXPECT_TRUE(again.is_committed("s1.safetensors", s1));
  EXPECT_FALSE(again.is_committed("s2.safetensors", s2));  // no file
  write_shard(s2, 'y');
  EXPECT_FALSE(again.is_committed("s2.safetensors", s2));  // a file, not the recorded one
  EXPECT_FALSE(again.is_committed("s3.safetensors", s1));  // never journaled
  const auto r = again.records("s1.safetensors");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].first, 4u);
  EXPECT_EQ(r[1].second.source, "w4");
  EXPECT_EQ(r[1].second.output_hashes, (std::vector<std::uint64_t>{41, 42}));
}

TEST(Journal, AnotherPlansJournalIsNotTrusted) {
  TempDir d;
  const std::string j = d.file("journal.json");
  Journal(j, "plan A").record_intent("s1.safetensors", 1, {});
  Journal b(j, "plan B");
  EXPECT_FALSE(b.resumed());
  EXPECT_TRUE(b.has_existing_with_other_fingerprint());
  EXPECT_THROW(b.records("s1.safetensors"), std::exception);
  EXPECT_EQ(lines(j), 1u);  // started over: the header only
  EXPECT_FALSE(Journal(j, "plan B").has_existing_with_other_fingerprint());
}

TEST(Journal, EachShardAppendsOneLine) {
  TempDir d;
  const std::string j = d.file("journal.json");
  Journal journal(j, "fp");
  std::ifstream first_line_in(j);
  std::string header;
  std::getline(first_line_in, header);
  struct stat before {};
  ASSERT_EQ(::stat(j.c_str(), &before), 0);
  for (int s = 0; s < 5; ++s) {
    journal.record_intent("s" + std::to_string(s), static_cast<std::uint64_t>(s), {{static_cast<std::size_t>(s), record("w", 1)}});
    EXPECT_EQ(lines(j), static_cast<std::size_t>(s) + 2);
  }
  std::ifstream in(j);
  std::string again;
  std::getline(in, again);
  EXPECT_EQ(again, header);
  struct stat after {};
  ASSERT_EQ(::stat(j.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);  // the same file, appended to (a rewrite renames a new one in)
}

TEST(Journal, ATornLastLineIsDroppedAndTheRestKept) {
  TempDir d;
  const std::string j = d.file("journal.json");
  {
    Journal journal(j, "fp");
    journal.record_intent("s1", 11, {{0, record("w0", 1)}});
    journal.set_group_amax({{"l0.qkv", 0.1f}});
  }
  std::ofstream(j, std::ios::app) << R"({"shard": "s2", "hash": 22, "reco)";  // killed mid-write
  {
    Journal journal(j, "fp");
    EXPECT_TRUE(journal.resumed());
    EXPECT_EQ(journal.records("s1").size(), 1u);
    EXPECT_THROW(journal.records("s2"), std::exception);
    ASSERT_TRUE(journal.has_group_amax());
    EXPECT_EQ(std::bit_cast<std::uint32_t>(journal.group_amax().at("l0.qkv")), std::bit_cast<std::uint32_t>(0.1f));
    journal.record_intent("s3", 33, {});  // appended after the tail was dropped
  }
  Journal journal(j, "fp");
  EXPECT_EQ(journal.records("s1").size(), 1u);
  EXPECT_TRUE(journal.records("s3").empty());
  EXPECT_EQ(lines(j), 4u);  // header, s1, amax, s3
}

TEST(Journal, CorruptHeaderIsAnErrorNamingTheFile) {
  TempDir d;
  const std::string j = d.file("journal.json");
  io::write_file_atomic(j, "not json\n");
  try {
    Journal journal(j, "fp");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("journal.json"), std::string::npos) << e.what();
  }
}

TEST(Journal, ReadsTheWholeObjectJournalOfTheLastVersion) {
  TempDir d;
  const std::string j = d.file("journal.json");
  io::write_file_atomic(j, R"({"version": 2, "fingerprint": "fp", "group_amax": {"g": 1065353216},)"
                           R"( "shards": {"s1": {"hash": 7, "records": [{"index": 2, "record": {"source": "w",)"
                           R"( "source_hash": 1, "output_hashes": [5]}}]}}})"
                           "\n");
  Journal journal(j, "fp");
  EXPECT_TRUE(journal.resumed());
  EXPECT_EQ(journal.records("s1").at(0).first, 2u);
  EXPECT_EQ(journal.group_amax().at("g"), 1.0f);
  journal.record_intent("s2", 8, {});
  Journal again(j, "fp");  // rewritten as lines when read, then appended to
  EXPECT_EQ(again.records("s1").size(), 1u);
  EXPECT_TRUE(again.records("s2").empty());
}

}  // namespace
}  // namespace selq::pipeline
