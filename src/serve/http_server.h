#pragma once
// `selq serve`'s HTTP side (cpp-httplib, Debian's libcpp-httplib-dev): the
// routes lm-evaluation-harness's local-completions and local-chat-completions
// use, each request checked (400 with the reason), queued on the Engine (503
// when the queue is full) and answered when its sequences are done (504 past
// the timeout). docs/SERVE.md lists the routes and fields.
#include <cstddef>
#include <memory>
#include <string>

#include "serve/tokenizer_config.h"
#include "serve/engine.h"

namespace selq::serve {

struct ServerOptions {
  std::string host{"127.0.0.1"};
  int port{8000};                        // 0: any free port
  std::size_t max_body{8u << 20};        // bytes of a request body
  int connections{16};                   // handled at once (each a thread)
  int timeout_s{600};                    // a request's wait for its answer
  std::string model_name;                // what /v1/models and every answer call the model
};

class HttpServer {
 public:
  HttpServer(Engine& engine, TokenizerConfig config, ServerOptions options);
  ~HttpServer();
  // Binds host:port; the port bound (the one chosen when options.port is 0).
  int bind();
  // Serves until stop(); requests being answered finish first.
  void listen();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace selq::serve
