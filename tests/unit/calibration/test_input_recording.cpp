// A layer's input recording shared among ranks (InputRecording::share): two
// ranks each record a contiguous share of the calls, and after sharing each
// reads every call in the order one process recording them all reads them
// (what makes a Hessian summed under mpirun the bits of one process's).
#include <gtest/gtest.h>

#include <unistd.h>

#include <barrier>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "calibration/input_recording.h"
#include "core/error.h"

namespace selq::calibration {
namespace {

namespace fs = std::filesystem;

// Rank `rank` of two threads of this process; only the barrier is used.
class ThreadRanks final : public dist::Ranks {
 public:
  ThreadRanks(int rank, std::barrier<>& b) : rank_(rank), barrier_(b) {}
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  void max_floats(std::span<float>) override {}
  void sum_u64(std::span<std::uint64_t>) override {}
  std::vector<std::string> gather_text(const std::string& mine) override { return {mine}; }
  std::string broadcast_text(const std::string& text) override { return text; }
  void barrier() override { barrier_.arrive_and_wait(); }
  [[noreturn]] void abort(int) override { std::abort(); }

 private:
  int rank_;
  std::barrier<>& barrier_;
};

runtime::Linear linear(const std::string& module, std::int64_t in) {
  runtime::Linear l;
  l.module = module;
  l.in = in;
  l.out = 4;
  return l;
}

// A call: which linear, which part, its rows (values that say which call they are).
struct Call {
  int linear;
  RecordedPart part;
  std::vector<float> rows;
};

// Each call's rows as its reader sees them, per linear and part, in reading order.
std::vector<std::vector<float>> read_back(const InputRecording& r, const std::vector<runtime::Linear*>& ls) {
  std::vector<std::vector<float>> out;
  for (const auto* l : ls)
    for (const RecordedPart part : {RecordedPart::Fit, RecordedPart::HeldOut})
      r.for_each_call(*l, part, [&](const float* x, std::int64_t rows) { out.emplace_back(x, x + rows * l->in); });
  return out;
}

TEST(InputRecording, SharedAmongRanksReadsEveryCallInOneProcesssOrder) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("selq-recording-{}", ::getpid());
  fs::create_directories(dir);
  runtime::Linear q = linear("model.layers.0.self_attn.q_proj", 3), k = linear("model.layers.0.self_attn.k_proj", 3),
                  down = linear("model.layers.0.mlp.down_proj", 5);
  const std::vector<runtime::Linear*> ls = {&q, &k, &down};  // q and k read one input
  std::vector<Call> calls;
  for (int c = 0; c < 12; ++c) {
    const int which = c % 2 == 0 ? 0 : 2;
    const std::int64_t in = ls[static_cast<std::size_t>(which)]->in, rows = 1 + c % 3;
    std::vector<float> x(static_cast<std::size_t>(rows * in));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(c * 100 + static_cast<int>(i));
    calls.push_back({which, c >= 9 ? RecordedPart::HeldOut : RecordedPart::Fit, std::move(x)});
  }
  const auto record = [&](InputRecording& r, std::size_t from, std::size_t to) {
    for (std::size_t c = from; c < to; ++c) {
      r.set_part(calls[c].part);
      const auto* l = ls[static_cast<std::size_t>(calls[c].linear)];
      InputRecording::hook(&r, *l, calls[c].rows.data(), static_cast<std::int64_t>(calls[c].rows.size()) / l->in);
    }
    r.finish();
  };
  InputRecording whole((dir / "whole.f32").string(), ls);
  record(whole, 0, calls.size());
  const auto want = read_back(whole, ls);
  ASSERT_EQ(want.size(), 18u);  // q and k read the same six calls; down_proj six

  // Rank 0 the first 5 calls, rank 1 the rest (its held-out ones too), on two threads.
  const auto path_of = [&](int rank) { return (dir / fmt::format("rank{}.f32", rank)).string(); };
  std::barrier<> b(2);
  std::vector<std::vector<float>> got[2];
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank)
    ranks.emplace_back([&, rank] {
      ThreadRanks rk(rank, b);
      InputRecording mine(path_of(rank), ls);
      record(mine, rank == 0 ? 0 : 5, rank == 0 ? 5 : calls.size());
      mine.share(rk, path_of);
      got[rank] = read_back(mine, ls);
      rk.barrier();  // the other rank is done reading this one's file
    });
  for (auto& t : ranks) t.join();
  EXPECT_EQ(got[0], want);
  EXPECT_EQ(got[1], want);
  EXPECT_FALSE(fs::exists(path_of(0)) || fs::exists(path_of(1)));  // each recording removed its file
  fs::remove_all(dir);
}

}  // namespace
}  // namespace selq::calibration
