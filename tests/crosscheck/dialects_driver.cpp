// Writes the configs selq builds for the test models, with each module's
// decided scheme object, so Python references can check them:
//   selq_dialects_driver OUT_DIR   -> OUT_DIR/<dialect>_<model>.json
// and reads scheme objects back the way verify/requantize and the runtime do:
//   selq_dialects_driver --recognize IN.json
//     IN: [{"dialect": d, "scheme": {...}}, ...]; prints one line of JSON:
//     [[verify's scheme name or null, the runtime's or null], ...]
#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "export/dialect_read.h"
#include "export/engine_resolve.h"
#include "export/module_names.h"
#include "runtime/model/linear.h"
#include "test_models.h"

using namespace selq::exporter;
using namespace selq::exporter::testing;
using nlohmann::json;

namespace {
int recognize(const char* path) {
  std::ifstream f(path);
  const json in = json::parse(f);
  json out = json::array();
  for (const auto& item : in) {
    const std::string dname = item.at("dialect");
    const auto d = dialect_from_name(dname);
    if (!d) throw std::runtime_error("unknown dialect " + dname);
    const auto spec = selq::exporter::scheme_from_config_json(*d, item.at("scheme"), selq::DType::BF16);
    json runtime_name = nullptr;
    try {
      runtime_name = selq::runtime::scheme_from_config_json(dname, item.at("scheme")).name();
    } catch (const selq::Error&) {
    }
    out.push_back({spec ? json(spec->name()) : json(nullptr), runtime_name});
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--recognize") {
    try {
      return recognize(argv[2]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "selq_dialects_driver: %s\n", e.what());
      return 1;
    }
  }
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR | --recognize IN.json\n", argv[0]);
    return 2;
  }
  try {
    for (Dialect d : {Dialect::CompressedTensors, Dialect::Quark, Dialect::ModelOpt}) {
      for (const std::string model : {"dspark", "llama", "kimi"}) {
        std::vector<ModuleDecision> ms = model == "dspark"  ? dspark_model(dspark_schemes(d))
                                         : model == "llama" ? llama_model(llama_schemes(d))
                                                            : kimi_model(kimi_schemes(d));
        ConfigInput in{ms, nullptr};
        ConfigOutput out = build_quantization_config(d, in);
        json modules = json::array();
        std::vector<std::string> names;
        for (const auto& m : ms) {
          modules.push_back({{"name", m.module},
                             {"expected", m.scheme ? scheme_config_json(d, *m.scheme) : json(nullptr)}});
          names.push_back(m.module);
        }
        json fused = json::array();
        for (const auto& em : engine_modules(EngineFamily::Vllm, names)) {
          if (em.kind == EngineModule::Kind::Fused) fused.push_back({{"name", em.name}, {"shards", em.members}});
        }
        json packed = json::object();
        for (const auto& r : packed_modules(EngineFamily::Vllm)) packed[r.fused] = r.shards;
        json doc = {{"dialect", dialect_name(d)}, {"model", model}, {"quantization_config", out.quantization_config},
                    {"modules", modules}, {"fused_modules", fused}, {"packed_modules_mapping", packed}};
        std::ofstream f(std::string(argv[1]) + "/" + dialect_name(d) + "_" + model + ".json");
        f << doc.dump(2) << "\n";
        if (!f) throw std::runtime_error("cannot write output");
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "selq_dialects_driver: %s\n", e.what());
    return 1;
  }
  return 0;
}
