// The gptq pass's hidden states between layers (calibration/gptq_states.h): a
// committed layer's output is what a later LayerStates on the same directory
// and fingerprint resumes from; a layer that fails half way (as a killed run
// would) leaves the last commit as it was; another fingerprint or another
// shape starts over.
#include <filesystem>
#include <stdexcept>

#include <gtest/gtest.h>
#include <unistd.h>

#include "calibration/gptq_states.h"

namespace fs = std::filesystem;
using selq::calibration::LayerStates;

namespace {

class LayerStatesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("selq-gptq-states-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  const std::vector<std::size_t> lengths_{3, 5};  // tokens per sequence
  static constexpr std::int64_t kHidden = 4;
};

// Adds `layer + 1` to every value: the layer a value went through is visible.
void add_layer(std::int64_t layer, std::size_t s, float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] += static_cast<float>(layer + 1) + 0.0f * static_cast<float>(s);
}

TEST_F(LayerStatesTest, ResumesFromTheLastCommittedLayer) {
  {
    LayerStates st(dir_.string(), "fp1", lengths_, kHidden);
    EXPECT_EQ(st.resume(), -1);
    for (std::size_t s = 0; s < lengths_.size(); ++s)
      st.set(s, std::vector<float>(lengths_[s] * kHidden, static_cast<float>(10 * s)));
    for (std::int64_t layer = 0; layer < 2; ++layer)
      st.advance(layer, [&](std::size_t s, float* x) { add_layer(layer, s, x, lengths_[s] * kHidden); });
    // Layer 2 fails half way: the second sequence throws after the first was written.
    EXPECT_THROW(st.advance(2, [&](std::size_t s, float* x) {
                   add_layer(2, s, x, lengths_[s] * kHidden);
                   if (s == 1) throw std::runtime_error("killed");
                 }),
                 std::runtime_error);
  }
  LayerStates again(dir_.string(), "fp1", lengths_, kHidden);
  EXPECT_EQ(again.resume(), 1);  // layers 0 and 1 committed
  const auto in = again.inputs();
  ASSERT_EQ(in.size(), 2u);
  for (std::size_t s = 0; s < in.size(); ++s) {
    ASSERT_EQ(in[s].size(), lengths_[s] * kHidden);
    for (float v : in[s]) EXPECT_EQ(v, static_cast<float>(10 * s) + 1.0f + 2.0f);
  }
  // Resumed, the pass goes on from there.
  again.advance(2, [&](std::size_t s, float* x) { add_layer(2, s, x, lengths_[s] * kHidden); });
  EXPECT_EQ(again.inputs()[1][0], 10.0f + 1.0f + 2.0f + 3.0f);
}

TEST_F(LayerStatesTest, AnotherRunStartsOver) {
  {
    LayerStates st(dir_.string(), "fp1", lengths_, kHidden);
    for (std::size_t s = 0; s < lengths_.size(); ++s) st.set(s, std::vector<float>(lengths_[s] * kHidden, 1.0f));
    st.advance(0, [&](std::size_t s, float* x) { add_layer(0, s, x, lengths_[s] * kHidden); });
  }
  EXPECT_EQ(LayerStates(dir_.string(), "fp2", lengths_, kHidden).resume(), -1);  // another fingerprint
  {
    LayerStates same(dir_.string(), "fp1", lengths_, kHidden);
    EXPECT_EQ(same.resume(), 0);
    EXPECT_EQ(same.inputs()[1][7], 2.0f);
  }
  // Sequences of other lengths reuse the files: the states named before are gone, not misread.
  EXPECT_EQ(LayerStates(dir_.string(), "fp1", {3, 6}, kHidden).resume(), -1);
  EXPECT_EQ(LayerStates(dir_.string(), "fp1", lengths_, kHidden).resume(), -1);
}

}  // namespace
