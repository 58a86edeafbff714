#include <gtest/gtest.h>

#include <algorithm>

#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io_test_util.h"

namespace selq::io {
namespace {

using testing::catch_error;
using testing::TempDir;
namespace fs = std::filesystem;

TensorBytes tb(const std::string& name, std::int64_t n, std::uint32_t seed) {
  return {{name, DType::BF16, {n}}, testing::random_bytes(static_cast<std::size_t>(2 * n), seed)};
}

// Two shards + index + side files, as a sharded HF checkpoint looks.
void make_sharded(const TempDir& d) {
  save_safetensors(d.file("model-00001-of-00002.safetensors"), {tb("a", 4, 1), tb("b", 2, 2)}, {{"format", "pt"}});
  save_safetensors(d.file("model-00002-of-00002.safetensors"), {tb("c", 3, 3)});
  write_index(d.file(kIndexName),
              {{"a", "model-00001-of-00002.safetensors"},
               {"b", "model-00001-of-00002.safetensors"},
               {"c", "model-00002-of-00002.safetensors"}},
              18);
  write_file_atomic(d.file("config.json"), R"({"model_type":"llama","hidden_size":8})");
  write_file_atomic(d.file("tokenizer.json"), "{}");
  write_file_atomic(d.file("modeling_x.py"), "# code\n");
}

void write_index_text(const TempDir& d, const std::string& weight_map) {
  write_file_atomic(d.file(kIndexName), R"({"metadata":{"total_size":1},"weight_map":)" + weight_map + "}");
}

TEST(Checkpoint, OpensDirectoryWithIndex) {
  TempDir d;
  make_sharded(d);
  for (const std::string& p : {d.path().string(), d.file(kIndexName)}) {
    const auto c = Checkpoint::open(p);
    EXPECT_TRUE(c->has_index());
    EXPECT_EQ(c->shards(),
              (std::vector<std::string>{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}));
    ASSERT_EQ(c->tensors().size(), 3u);
    EXPECT_EQ(c->tensors()[0].info.name, "a");
    EXPECT_EQ(c->tensors()[2].shard, "model-00002-of-00002.safetensors");
    EXPECT_EQ(c->find("c")->info.shape, Shape{3});
    const auto v = c->view("c");
    const auto expect = tb("c", 3, 3).bytes;
    EXPECT_TRUE(std::equal(v.bytes.begin(), v.bytes.end(), expect.begin(), expect.end()));
    EXPECT_EQ(c->config()["model_type"], "llama");
    EXPECT_EQ(c->other_files(), (std::vector<std::string>{"config.json", "modeling_x.py", "tokenizer.json"}));
    EXPECT_EQ(c->shard_file("model-00001-of-00002.safetensors").metadata().at("format"), "pt");
  }
}

TEST(Checkpoint, WriteIndexRoundTrips) {
  TempDir d;
  const std::map<std::string, std::string> wm{{"x", "s1.safetensors"}, {"y", "sub/s2.safetensors"}};
  write_index(d.file("i.json"), wm, 1234);
  const auto j = nlohmann::json::parse(read_file(d.file("i.json")));
  EXPECT_EQ(j["metadata"]["total_size"], 1234);
  EXPECT_EQ(parse_index_json(read_file(d.file("i.json")), "i.json"), wm);
}

TEST(Checkpoint, OpensDirectoryWithoutIndexAndSingleFile) {
  TempDir d;
  save_safetensors(d.file("b.safetensors"), {tb("y", 1, 5)});
  save_safetensors(d.file("a.safetensors"), {tb("x", 1, 4)});
  const auto c = Checkpoint::open(d.path().string());
  EXPECT_FALSE(c->has_index());
  EXPECT_EQ(c->shards(), (std::vector<std::string>{"a.safetensors", "b.safetensors"}));
  EXPECT_TRUE(c->config().is_null());
  const auto one = Checkpoint::open(d.file("b.safetensors"));
  EXPECT_EQ(one->shards(), std::vector<std::string>{"b.safetensors"});
  EXPECT_EQ(one->find("x"), nullptr);
  EXPECT_EQ(catch_error([&] { one->view("x"); }).where().tensor, "x");
}

TEST(Checkpoint, RejectsEscapingWeightMapPaths) {
  TempDir outside;
  save_safetensors(outside.file("evil.safetensors"), {tb("a", 4, 1)});
  TempDir d;
  make_sharded(d);
  const std::vector<std::string> bads{"../evil.safetensors", "a/../../evil.safetensors",
                                      outside.file("evil.safetensors"), ""};
  for (const std::string& bad : bads) {
    SCOPED_TRACE(bad);
    write_index_text(d, R"({"a":")" + bad + "\"}");
    const Error e = catch_error([&] { Checkpoint::open(d.path().string()); });
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_EQ(e.where().file, d.file(kIndexName));
    EXPECT_EQ(e.where().tensor, "a");
  }
  // A symlink inside the directory that resolves outside it.
  fs::create_symlink(outside.file("evil.safetensors"), d.file("link.safetensors"));
  write_index_text(d, R"({"a":"link.safetensors"})");
  const Error e = catch_error([&] { Checkpoint::open(d.path().string()); });
  EXPECT_NE(std::string(e.what()).find("outside the checkpoint directory"), std::string::npos) << e.what();
  // A symlink that stays inside is fine.
  fs::create_symlink(d.file("model-00001-of-00002.safetensors"), d.file("in.safetensors"));
  write_index_text(d, R"({"a":"in.safetensors"})");
  EXPECT_EQ(Checkpoint::open(d.path().string())->shards(), std::vector<std::string>{"in.safetensors"});
}

// Hugging Face cache layout: <repo>/snapshots/<rev>/<file> -> ../../blobs/<hash>.
TEST(Checkpoint, HuggingFaceCacheSnapshotSymlinksIntoItsBlobsAreAllowed) {
  TempDir cache;
  const fs::path repo = fs::path(cache.path()) / "models--org--m";
  const fs::path snap = repo / "snapshots" / "abc123";
  fs::create_directories(snap);
  fs::create_directories(repo / "blobs");
  fs::create_directories(fs::path(cache.path()) / "models--org--other" / "blobs");
  save_safetensors((repo / "blobs" / "h1").string(), {tb("a", 4, 1)}, {{"format", "pt"}});
  save_safetensors((fs::path(cache.path()) / "models--org--other" / "blobs" / "h2").string(), {tb("a", 4, 1)});
  fs::create_symlink("../../blobs/h1", snap / "model-00001-of-00001.safetensors");
  fs::create_symlink("../../../models--org--other/blobs/h2", snap / "stolen.safetensors");
  auto index = [&](const std::string& shard) {
    write_file_atomic((snap / kIndexName).string(),
                      R"({"metadata":{"total_size":1},"weight_map":{"a":")" + shard + "\"}}");
  };
  index("model-00001-of-00001.safetensors");
  EXPECT_EQ(Checkpoint::open(snap.string())->shards(), std::vector<std::string>{"model-00001-of-00001.safetensors"});
  // Another repo's blobs are outside this checkpoint.
  index("stolen.safetensors");
  const Error e = catch_error([&] { Checkpoint::open(snap.string()); });
  EXPECT_NE(std::string(e.what()).find("outside the checkpoint directory"), std::string::npos) << e.what();
}

TEST(Checkpoint, MissingShardAndMissingTensorAreNamed) {
  TempDir d;
  make_sharded(d);
  write_index_text(d, R"({"a":"model-00001-of-00002.safetensors","z":"gone.safetensors"})");
  Error e = catch_error([&] { Checkpoint::open(d.path().string()); });
  EXPECT_NE(std::string(e.what()).find("gone.safetensors"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();

  write_index_text(d, R"({"a":"model-00001-of-00002.safetensors","c":"model-00001-of-00002.safetensors"})");
  e = catch_error([&] { Checkpoint::open(d.path().string()); });
  EXPECT_EQ(e.where().tensor, "c");
  EXPECT_EQ(e.where().file, d.file("model-00001-of-00002.safetensors"));
  EXPECT_NE(std::string(e.what()).find(kIndexName), std::string::npos) << e.what();
}

TEST(Checkpoint, RejectsMalformedIndexAndConfig) {
  TempDir d;
  make_sharded(d);
  write_file_atomic(d.file(kIndexName), R"({"weight_map":{"a":"x.safetensors","a":"y.safetensors"}})");
  EXPECT_NE(std::string(catch_error([&] { Checkpoint::open(d.path().string()); }).what()).find("duplicate"),
            std::string::npos);
  write_file_atomic(d.file(kIndexName), R"({"weight_map":{"a":3}})");
  EXPECT_EQ(catch_error([&] { Checkpoint::open(d.path().string()); }).where().tensor, "a");
  write_file_atomic(d.file(kIndexName), R"({"metadata":{}})");
  EXPECT_NE(std::string(catch_error([&] { Checkpoint::open(d.path().string()); }).what()).find("weight_map"),
            std::string::npos);

  make_sharded(d);
  write_file_atomic(d.file("config.json"), "{\"model_type\":");
  const Error e = catch_error([&] { Checkpoint::open(d.path().string()); });
  EXPECT_EQ(e.where().file, d.file("config.json"));
}

TEST(Checkpoint, RejectsTensorInTwoShards) {
  TempDir d;
  save_safetensors(d.file("a.safetensors"), {tb("x", 1, 4)});
  save_safetensors(d.file("b.safetensors"), {tb("x", 1, 4)});
  const Error e = catch_error([&] { Checkpoint::open(d.path().string()); });
  EXPECT_EQ(e.where().tensor, "x");
  EXPECT_EQ(e.where().file, d.file("b.safetensors"));
}

TEST(AtomicFile, WriteReadCopy) {
  TempDir d;
  write_file_atomic(d.file("a.txt"), "hello");
  write_file_atomic(d.file("a.txt"), "world!");
  EXPECT_EQ(read_file(d.file("a.txt")), "world!");
  const std::string big(3 << 20, 'q');
  write_file_atomic(d.file("big"), big);
  copy_file_atomic(d.file("big"), d.file("big2"));
  EXPECT_EQ(read_file(d.file("big2")), big);
  EXPECT_FALSE(fs::exists(d.file("big2.selq-tmp")));
  const Error e = catch_error([&] { read_file(d.file("missing")); });
  EXPECT_EQ(e.kind(), ErrorKind::Io);
  EXPECT_EQ(e.where().file, d.file("missing"));
  EXPECT_EQ(catch_error([&] { write_file_atomic(d.file("no/such/dir"), "x"); }).kind(), ErrorKind::Io);
}

}  // namespace
}  // namespace selq::io
