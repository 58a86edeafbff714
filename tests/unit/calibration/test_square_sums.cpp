// calibration::SquareSums: the input second moments are the same bits however
// the windows were shared among ranks and merged, and close to a long-double
// reference; sums out of range are refused naming the module.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "calibration/calibrate.h"
#include "core/error.h"

namespace selq::calibration {
namespace {

constexpr std::int64_t kRows = 200, kIn = 16;

// Rows whose channels span many orders of magnitude, so that a double sum's
// bits depend on the order of its terms.
std::vector<float> wide_rows() {
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.f, 1.f);
  std::uniform_int_distribution<int> e(-12, 12);
  std::vector<float> x(static_cast<std::size_t>(kRows * kIn));
  for (float& v : x) v = std::ldexp(n(rng), e(rng));
  return x;
}

constexpr std::int64_t kWindowRows = 20;  // 10 windows

// The windows [first, last), each added in two hook calls and closed.
SquareSums windows(const std::vector<float>& x, std::int64_t first, std::int64_t last) {
  SquareSums s;
  for (std::int64_t w = first; w < last; ++w) {
    const float* rows = x.data() + w * kWindowRows * kIn;
    s.add(rows, 7, kIn);
    s.add(rows + 7 * kIn, kWindowRows - 7, kIn);
    s.close_window("m");
  }
  return s;
}

// The windows shared among ranks as contiguous runs cut at `cuts`, their sums
// exchanged as calibrate's ranks do: each share's limbs (one channel more
// than it has: zeros), added word by word (MPI_SUM), read back.
SquareSums shared(const std::vector<float>& x, const std::vector<std::int64_t>& cuts) {
  std::vector<std::uint64_t> words((kIn + 1) * SquareSums::kLimbs, 0);
  SquareSums all;
  std::int64_t first = 0;
  for (std::int64_t last : cuts) {
    const SquareSums share = windows(x, first, last);
    std::vector<std::uint64_t> limbs;
    share.append_limbs(limbs, kIn + 1);
    for (std::size_t i = 0; i < words.size(); ++i) words[i] += limbs[i];
    all.rows += share.rows;
    first = last;
  }
  for (std::size_t c = 0; c <= static_cast<std::size_t>(kIn); ++c)
    all.sum.push_back(SquareSums::from_limbs(&words[c * SquareSums::kLimbs]));
  EXPECT_TRUE(all.sum.back() == 0);  // the padding channel
  all.sum.pop_back();
  return all;
}

TEST(SquareSums, SameBitsForAnySplitOfTheWindows) {
  const auto x = wide_rows();
  const std::int64_t windows_count = kRows / kWindowRows;
  const SquareSums one = shared(x, {windows_count});
  for (const auto& cuts : std::vector<std::vector<std::int64_t>>{{1, 10}, {5, 10}, {3, 4, 8, 10}}) {
    const SquareSums s = shared(x, cuts);
    EXPECT_EQ(s.rows, kRows);
    EXPECT_TRUE(s.sum == one.sum) << cuts.size() << " ranks";
    EXPECT_EQ(s.means(), one.means());
  }
  // The data is such that double sums of the windows' sums differ by the split
  // (what rank 0 added before the sums were exact).
  bool doubles_differ = false;
  for (std::int64_t c = 0; c < kIn; ++c) {
    double whole = 0, halves[2] = {0, 0};
    for (std::int64_t i = 0; i < kRows; ++i) {
      const double t = double(x[i * kIn + c]) * x[i * kIn + c];
      whole += t;
      halves[i < kRows / 2 ? 0 : 1] += t;
    }
    doubles_differ = doubles_differ || whole != halves[0] + halves[1];
  }
  EXPECT_TRUE(doubles_differ);
}

TEST(SquareSums, MeansMatchALongDoubleReference) {
  const auto x = wide_rows();
  const auto means = shared(x, {kRows / kWindowRows}).means();
  ASSERT_EQ(means.size(), static_cast<std::size_t>(kIn));
  for (std::int64_t c = 0; c < kIn; ++c) {
    long double sum = 0;
    for (std::int64_t i = 0; i < kRows; ++i) sum += static_cast<long double>(x[i * kIn + c]) * x[i * kIn + c];
    const auto want = static_cast<float>(sum / kRows);
    EXPECT_NEAR(means[c], want, std::nextafter(want, INFINITY) - want) << "channel " << c;
  }
}

// One process's sums are its windows' closed sums, rows included; a sum past
// 2^64 keeps its high words through the limbs.
TEST(SquareSums, OneProcessAndLimbsKeepEveryBit) {
  const auto x = wide_rows();
  SquareSums open;
  open.add(x.data(), 5, kIn);
  EXPECT_TRUE(open.means().empty());  // nothing closed yet
  open.close_window("m");
  EXPECT_EQ(open.rows, 5);
  const SquareSums whole = windows(x, 0, kRows / kWindowRows), one = shared(x, {kRows / kWindowRows});
  EXPECT_EQ(whole.rows, kRows);
  EXPECT_TRUE(whole.sum == one.sum);
  SquareSums big;
  big.sum = {(SquareSums::Fixed{1} << 100) + 12345};
  std::vector<std::uint64_t> l;
  big.append_limbs(l, 1);
  EXPECT_TRUE(SquareSums::from_limbs(l.data()) == big.sum[0]);
}

TEST(SquareSums, SumsOutOfRangeAreRefusedNamingTheModule) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), 1e20f}) {  // 1e40 > 2^78
    std::vector<float> x = {1.f, bad};
    SquareSums s;
    s.add(x.data(), 1, 2);
    try {
      s.close_window("model.layers.0.mlp.down_proj");
      FAIL() << bad << " was summed";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("model.layers.0.mlp.down_proj"), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("channel 1"), std::string::npos) << e.message();
    }
  }
}

}  // namespace
}  // namespace selq::calibration
