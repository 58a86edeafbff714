// Dumps the scalar reference codecs' outputs as raw little-endian arrays so
// that codecs_crosscheck.py can compare them bit for bit with ml_dtypes/torch.
//
//   codecs_dump <outdir>
//
// Input sets (written too, so the script never has to regenerate them):
//   bf16all: every BF16 pattern 0..65535, widened to F32
//   f32rand: random F32 bit patterns plus BF16 midpoints and their neighbours
//            (the inputs that exercise F32 -> BF16 rounding)
//   amax:    block maxima for the E8M0 scale rules
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/codecs.h"

namespace {

template <typename T>
bool write(const std::string& path, const std::vector<T>& v) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(v.data(), sizeof(T), v.size(), f) == v.size();
  return std::fclose(f) == 0 && ok;
}

template <typename T, typename F>
std::vector<T> map(const std::vector<float>& in, F f) {
  std::vector<T> out;
  out.reserve(in.size());
  for (float x : in) out.push_back(static_cast<T>(f(x)));
  return out;
}

bool dump_codecs(const std::string& dir, const std::string& set, const std::vector<float>& in) {
  using namespace selq;
  const std::string p = dir + "/" + set + ".";
  return write(p + "input.f32", in) &&
         write(p + "bf16.u16", map<std::uint16_t>(in, f32_to_bf16_ref)) &&
         write(p + "f16.u16", map<std::uint16_t>(in, f32_to_f16_ref)) &&
         write(p + "e4m3_sat.u8", map<std::uint8_t>(in, f32_to_e4m3_sat_ref)) &&
         write(p + "e4m3_nonsat.u8", map<std::uint8_t>(in, f32_to_e4m3_nonsat_ref)) &&
         write(p + "e5m2_sat.u8", map<std::uint8_t>(in, f32_to_e5m2_sat_ref)) &&
         write(p + "e5m2_nonsat.u8", map<std::uint8_t>(in, f32_to_e5m2_nonsat_ref)) &&
         write(p + "e2m1.u8", map<std::uint8_t>(in, f32_to_e2m1_ref)) &&
         write(p + "e8m0.u8", map<std::uint8_t>(in, f32_to_e8m0_rne_ref));
}

std::vector<float> amax_set() {
  std::vector<float> v;
  for (std::uint32_t b = 0; b < 0x7F80; ++b) v.push_back(selq::bf16_to_f32(static_cast<std::uint16_t>(b)));
  std::mt19937 rng(99);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()) & 0x7FFFFFFFu);
    if (std::isfinite(f)) v.push_back(f);
  }
  // Around max_elem * 2^k, where RCEIL's amax/max_elem crosses a power of two.
  for (float m : {6.0f, 448.0f}) {
    for (int k = -140; k <= 120; ++k) {
      const float c = std::ldexp(m, k);
      v.push_back(c);
      v.push_back(std::nextafter(c, 0.0f));
      v.push_back(std::nextafter(c, std::numeric_limits<float>::infinity()));
    }
  }
  v.push_back(std::numeric_limits<float>::max());
  v.push_back(std::numeric_limits<float>::infinity());
  v.push_back(std::numeric_limits<float>::quiet_NaN());
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <outdir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];

  std::vector<float> bf16all;
  for (std::uint32_t b = 0; b < 0x10000; ++b) bf16all.push_back(selq::bf16_to_f32(static_cast<std::uint16_t>(b)));

  std::vector<float> f32rand;
  std::mt19937 rng(42);
  for (int i = 0; i < 200000; ++i) f32rand.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  for (std::uint32_t b = 0; b < 0x7F80; b += 1) {  // BF16 midpoints: F32 -> BF16 ties
    const std::uint32_t mid = (b << 16) | 0x8000u;
    for (std::uint32_t u : {mid, mid - 1, mid + 1, mid | 0x80000000u})
      f32rand.push_back(std::bit_cast<float>(u));
  }

  bool ok = dump_codecs(dir, "bf16all", bf16all) && dump_codecs(dir, "f32rand", f32rand);

  const std::vector<float> amax = amax_set();
  ok = ok && write(dir + "/amax.f32", amax);
  struct Elem {
    const char* name;
    int emax, mbits;
    float max;
  };
  const Elem elems[] = {{"e2m1", 2, 1, 6.0f}, {"e4m3", 8, 3, 448.0f}};
  const std::pair<const char*, selq::ScaleRule> rules[] = {{"floor", selq::ScaleRule::Floor},
                                                           {"ceil", selq::ScaleRule::Ceil},
                                                           {"even", selq::ScaleRule::Even},
                                                           {"rceil", selq::ScaleRule::RCeil}};
  for (const Elem& e : elems)
    for (const auto& [rname, rule] : rules)
      ok = ok && write(dir + "/scale_" + e.name + "_" + rname + ".u8",
                       map<std::uint8_t>(amax, [&](float a) {
                         return selq::e8m0_scale_from_amax_ref(a, rule, e.emax, e.mbits, e.max);
                       }));
  // compressed-tensors rounds MXFP8 maxima at E2M1's mantissa width too (see
  // the script), so dump EVEN with mbits=1 for E4M3's emax as well.
  ok = ok && write(dir + "/scale_e4m3_even_m1.u8", map<std::uint8_t>(amax, [](float a) {
                     return selq::e8m0_scale_from_amax_ref(a, selq::ScaleRule::Even, 8, 1, 448.0f);
                   }));
  if (!ok) {
    std::fprintf(stderr, "codecs_dump: cannot write to %s\n", dir.c_str());
    return 1;
  }
  return 0;
}
