#include "serve/service.h"

#include <filesystem>

#include <fmt/format.h>

#include "runtime/eval/eval.h"
#include "runtime/model/causal_lm.h"
#include "serve/tokenizer_config.h"

namespace selq::serve {

Service::Service(const std::string& checkpoint, ServiceOptions o) {
  if (o.server.model_name.empty())
    o.server.model_name = std::filesystem::path(checkpoint).lexically_normal().filename().string();
  if (o.server.model_name.empty()) o.server.model_name = "selq";
  auto tok = runtime::tokenizer_of(checkpoint);
  auto model = runtime::load_model(checkpoint);
  const int slots = std::clamp(o.engine.slots, 1, model->max_slots());
  description_ = fmt::format("{} ({}{}), {} sequence slot{}", o.server.model_name, model->model_type(),
                             model->dialect().empty() ? "" : ", " + model->dialect(), slots, slots == 1 ? "" : "s");
  engine_ = std::make_unique<Engine>(std::move(model), std::move(tok), o.engine);
  http_ = std::make_unique<HttpServer>(*engine_, read_tokenizer_config(checkpoint), o.server);
  port_ = http_->bind();
}

Service::~Service() = default;

void Service::serve() {
  http_->listen();
  engine_->shutdown();
}

void Service::stop() { http_->stop(); }

}  // namespace selq::serve
