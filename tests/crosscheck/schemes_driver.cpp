// Cross-check driver for src/quant: reads a raw tensor written by
// schemes_crosscheck.py, quantizes it with the scheme given on the command
// line, and writes every output tensor (raw little-endian bytes) plus the
// dequantized F32 weights and the error metrics.
//
//   schemes_driver weight key=value... in=FILE dtype=BF16 shape=2,64,128 out=PREFIX
//     kind=mxfp4|mxfp8|nvfp4|fp8-tensor|fp8-channel|fp8-block|int-channel|int-group
//     rule=even|floor|ceil|rceil bits=4 asym=1 group=128 block=128,128
//     scale_dtype=F32|BF16|F16 keepdim=0|1 nvfp=ct|modelopt pack=1 global_amax=X
//     rounding=nearest|mse
//   schemes_driver act mode=fp8-token|fp8-group128|fp8-static|fp8-dyntensor|mxfp4|mxfp8|nvfp4
//     rule=... static=X n=N in=FILE(F32 rows of N) out=FILE
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "quant/scheme.h"
#include "quant/rounding_traits.h"

using namespace selq;
using namespace selq::quant;

namespace {

std::vector<std::uint8_t> read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + p);
  return {std::istreambuf_iterator<char>(f), {}};
}

void write_file(const std::string& p, const void* d, std::size_t n) {
  std::ofstream f(p, std::ios::binary);
  f.write(static_cast<const char*>(d), static_cast<std::streamsize>(n));
  if (!f) throw std::runtime_error("cannot write " + p);
}

std::vector<std::int64_t> ints(const std::string& s) {
  std::vector<std::int64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::stoll(item));
  return v;
}

ScaleRule rule_of(const std::string& s) {
  if (s == "floor") return ScaleRule::Floor;
  if (s == "ceil") return ScaleRule::Ceil;
  if (s == "rceil") return ScaleRule::RCeil;
  return ScaleRule::Even;
}

int run_weight(std::map<std::string, std::string>& a) {
  SchemeSpec spec;
  const std::string kind = a["kind"];
  static const std::map<std::string, SchemeKind> kinds = {
      {"mxfp4", SchemeKind::MXFP4},           {"mxfp8", SchemeKind::MXFP8},
      {"nvfp4", SchemeKind::NVFP4},           {"fp8-tensor", SchemeKind::FP8Tensor},
      {"fp8-channel", SchemeKind::FP8Channel}, {"fp8-block", SchemeKind::FP8Block},
      {"int-channel", SchemeKind::IntChannel}, {"int-group", SchemeKind::IntGroup}};
  spec.kind = kinds.at(kind);
  spec.scale_rule = rule_of(a["rule"]);
  if (a.count("bits")) spec.bits = std::stoi(a["bits"]);
  spec.symmetric = a["asym"] != "1";
  if (a.count("group")) spec.group_size = std::stoi(a["group"]);
  if (a.count("block")) {
    const auto b = ints(a["block"]);
    spec.block_rows = static_cast<int>(b.at(0));
    spec.block_cols = static_cast<int>(b.at(1));
  }
  if (a.count("scale_dtype")) spec.scale_dtype = *dtype_from_name(a["scale_dtype"]);
  spec.scale_keepdim = a["keepdim"] != "0";
  spec.nvfp = a["nvfp"] == "modelopt" ? NvfpConvention::ModelOpt : NvfpConvention::CompressedTensors;
  spec.int_pack_int32 = a["pack"] == "1";
  if (a.count("rounding")) spec.rounding.value = parse_rounding(a["rounding"], "rounding");
  TensorQuantizeOptions opt;
  if (a.count("global_amax")) opt.global_amax = std::stof(a["global_amax"]);
  if (a["allow_nonfinite"] == "1") opt.reject_non_finite = false;

  TensorInfo info{a.count("name") ? a["name"] : "w", *dtype_from_name(a["dtype"]), ints(a["shape"])};
  const auto data = read_file(a["in"]);
  const auto specs = scheme_outputs(spec, info.shape);
  std::vector<std::vector<std::uint8_t>> bufs;
  std::vector<std::span<std::uint8_t>> spans;
  for (const auto& s : specs) bufs.emplace_back(dtype_nbytes(s.dtype, shape_numel(s.shape)));
  for (auto& b : bufs) spans.emplace_back(b);
  ErrorMetrics m;
  quantize_weight(spec, TensorView{&info, data}, spans, m, opt);
  const std::string out = a["out"];
  for (std::size_t i = 0; i < bufs.size(); ++i)
    write_file(out + "." + std::to_string(i) + ".bin", bufs[i].data(), bufs[i].size());
  std::vector<std::span<const std::uint8_t>> cspans(spans.begin(), spans.end());
  const auto dq = dequantize_weight(spec, info.shape, cspans);
  write_file(out + ".dq.bin", dq.data(), dq.size() * 4);
  std::ofstream mf(out + ".metrics.txt");
  mf.precision(17);
  mf << "sum_sq_ref " << m.sum_sq_ref << "\nsum_sq_err " << m.sum_sq_err << "\nsum_dot "
     << m.sum_dot << "\nsum_sq_dq " << m.sum_sq_dq << "\nmax_abs_err " << m.max_abs_err
     << "\nelements " << m.elements << "\nclipped_elements " << m.clipped_elements
     << "\nblocks " << m.blocks << "\nclipped_blocks " << m.clipped_blocks << "\n";
  std::ofstream sf(out + ".shapes.txt");
  for (const auto& s : specs) sf << dtype_name(s.dtype) << " " << shape_to_string(s.shape) << "\n";
  return 0;
}

int run_act(std::map<std::string, std::string>& a) {
  static const std::map<std::string, ActMode> modes = {
      {"fp8-token", ActMode::FP8PerToken},   {"fp8-group128", ActMode::FP8PerTokenGroup128},
      {"fp8-static", ActMode::FP8StaticTensor}, {"fp8-dyntensor", ActMode::FP8DynamicTensor},
      {"mxfp4", ActMode::MXFP4Dynamic},      {"mxfp8", ActMode::MXFP8Dynamic},
      {"nvfp4", ActMode::NVFP4}};
  const ActMode mode = modes.at(a["mode"]);
  auto raw = read_file(a["in"]);
  std::vector<float> x(raw.size() / 4);
  std::memcpy(x.data(), raw.data(), raw.size());
  const std::size_t n = std::stoul(a["n"]);
  const float st = a.count("static") ? std::stof(a["static"]) : 0.0f;
  for (std::size_t r = 0; r + n <= x.size(); r += n) qdq_activation_row(mode, x.data() + r, n, st, rule_of(a["rule"]));
  write_file(a["out"], x.data(), x.size() * 4);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: schemes_driver weight|act key=value...\n";
    return 2;
  }
  std::map<std::string, std::string> a;
  for (int i = 2; i < argc; ++i) {
    const std::string s = argv[i];
    const auto eq = s.find('=');
    a[s.substr(0, eq)] = eq == std::string::npos ? "" : s.substr(eq + 1);
  }
  try {
    return std::string(argv[1]) == "act" ? run_act(a) : run_weight(a);
  } catch (const selq::Error& e) {
    std::cerr << "selq error (" << static_cast<int>(e.kind()) << "): "
              << format_error(e.kind(), e.message(), e.where()) << "\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 4;
  }
}
