#pragma once
// A checkpoint served: its model and tokenizer loaded, the engine started and
// the port bound. The CLI (`selq serve`) and Python (`selq.serve`) both start
// one; serve() answers requests until stop().
#include <memory>
#include <string>

#include "serve/engine.h"
#include "serve/http_server.h"

namespace selq::serve {

struct ServiceOptions {
  ServerOptions server;
  EngineOptions engine;
};

class Service {
 public:
  // Loads CHECKPOINT (as selq eval does) and binds; throws selq::Error (bad
  // checkpoint, port in use) before anything is served.
  Service(const std::string& checkpoint, ServiceOptions options);
  ~Service();
  int port() const { return port_; }
  // "NAME (ARCH[, DIALECT]), N sequence slots": what the start line says.
  const std::string& description() const { return description_; }
  void serve();  // blocks until stop(); requests being answered finish first
  void stop();

 private:
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<HttpServer> http_;
  int port_{0};
  std::string description_;
};

}  // namespace selq::serve
