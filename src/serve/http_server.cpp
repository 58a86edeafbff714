#include "serve/http_server.h"

#include <atomic>
#include <chrono>

#include <fmt/format.h>
#include <httplib.h>

#include "core/error.h"
#include "serve/request.h"
#include "serve/responses.h"

namespace selq::serve {

struct HttpServer::Impl {
  Engine& engine;
  TokenizerConfig chat;  // the chat template and special tokens
  ServerOptions o;
  httplib::Server svr;
  std::atomic<std::uint64_t> next_id{1};
  std::set<std::int32_t> stop_ids;  // what every completion may end on (stop_tokens)

  Impl(Engine& e, TokenizerConfig c, ServerOptions opt)
      : engine(e), chat(std::move(c)), o(std::move(opt)), stop_ids(stop_tokens()) {}

  RequestLimits limits() const {
    RequestLimits l;
    l.vocab = engine.model().vocab();
    return l;
  }

  static void reply(httplib::Response& res, int status, const nlohmann::json& body) {
    res.status = status;
    res.set_content(dump(body), "application/json");
  }
  static void reply_error(httplib::Response& res, int status, const std::string& message) {
    reply(res, status, error_body(status, message));
  }

  std::vector<std::int32_t> encode(const Prompt& p) const {
    return p.is_ids ? p.ids : engine.tokenizer().encode(p.text);
  }

  // The tokens a completion may end on: end of sequence, and end of turn for ChatML.
  std::set<std::int32_t> stop_tokens() const {
    std::set<std::int32_t> s;
    const auto& tok = engine.tokenizer();
    if (tok.special_ids().eos) s.insert(*tok.special_ids().eos);
    if (!chat.eos_token.empty())
      if (auto id = tok.token_id(chat.eos_token)) s.insert(*id);
    if (chat.chatml)
      if (auto id = tok.token_id(runtime::kImEnd)) s.insert(*id);
    return s;
  }

  // Queues the sequences and waits; false (the response set) when they could not be answered.
  bool run(const std::shared_ptr<Work>& work, httplib::Response& res) {
    const std::int64_t limit = engine.model().max_positions();
    for (std::size_t i = 0; i < work->sequences.size(); ++i) {
      const Sequence& s = work->sequences[i];
      if (s.prompt.empty()) {
        reply_error(res, 400, fmt::format("prompt {} is empty", i));
        return false;
      }
      if (static_cast<std::int64_t>(s.prompt.size()) + s.max_tokens > limit) {
        reply_error(res, 400, fmt::format("prompt {}: {} tokens plus max_tokens {} exceed the model's {} positions", i,
                                          s.prompt.size(), s.max_tokens, limit));
        return false;
      }
    }
    auto done = work->done.get_future();
    if (!engine.submit(work)) {
      res.set_header("Retry-After", "1");
      reply_error(res, 503, fmt::format("the queue is full ({} sequences waiting); retry later", engine.stats().queued));
      return false;
    }
    if (done.wait_for(std::chrono::seconds(o.timeout_s)) != std::future_status::ready) {
      work->cancelled = true;
      reply_error(res, 504, fmt::format("no answer within the server's timeout of {} s; the request was dropped",
                                        o.timeout_s));
      return false;
    }
    if (!work->error.empty()) {  // shutting down (503, retry elsewhere), or the model failed (500)
      reply_error(res, work->error == kShuttingDown ? 503 : 500, work->error);
      return false;
    }
    return true;
  }

  std::string id(const char* prefix) { return fmt::format("{}-{}", prefix, next_id++); }

  void completions(const httplib::Request& req, httplib::Response& res) {
    const auto r = completion_request(parse_body(req.body), limits());
    auto work = std::make_shared<Work>();
    for (const auto& p : r.prompts) {
      Sequence s;
      s.prompt = encode(p);
      s.max_tokens = r.max_tokens;
      s.stop = r.stop;
      s.stop_ids = stop_ids;
      s.prompt_logprobs = r.echo && r.logprobs >= 0;
      s.top_logprobs = r.logprobs;
      work->sequences.push_back(std::move(s));
    }
    if (!run(work, res)) return;
    reply(res, 200, completion_response(work->sequences, engine.tokenizer(), r.echo, o.model_name, id("cmpl")));
  }

  void chat_completions(const httplib::Request& req, httplib::Response& res) {
    const auto r = chat_request(parse_body(req.body), limits());
    if (!chat.chatml)
      throw RequestError(chat.chat_template.empty() ? "this checkpoint has no chat template: use /v1/completions"
                                           : "this checkpoint's chat template is not ChatML, which is all selq renders: "
                                             "use /v1/completions with the template applied by the client");
    auto work = std::make_shared<Work>();
    Sequence s;
    s.prompt = engine.tokenizer().encode(runtime::render_chatml(r.messages));
    s.max_tokens = r.max_tokens;
    s.stop = r.stop;
    s.stop_ids = stop_ids;
    work->sequences.push_back(std::move(s));
    if (!run(work, res)) return;
    reply(res, 200, chat_response(work->sequences[0], o.model_name, id("chatcmpl")));
  }

  nlohmann::json tokenizer_info() const {
    const auto& tok = engine.tokenizer();
    // The config's text, else the tokenizer's own special token.
    const auto name = [&](const std::string& text, const std::optional<std::int32_t>& id) -> nlohmann::json {
      if (!text.empty()) return text;
      return id ? nlohmann::json(tok.token(*id)) : nlohmann::json(nullptr);
    };
    const auto& sp = tok.special_ids();
    nlohmann::json j = {{"eos_token", name(chat.eos_token, sp.eos)},  {"bos_token", name(chat.bos_token, sp.bos)},
                        {"pad_token", name(chat.pad_token, sp.pad)},  {"model_max_length", engine.model().max_positions()},
                        {"vocab_size", tok.vocab_size()}, {"tokenizer_class", "selq byte-level BPE"}};
    if (!chat.chat_template.empty()) j["chat_template"] = chat.chat_template;
    return j;
  }

  void tokenize(const httplib::Request& req, httplib::Response& res) {
    const auto j = parse_body(req.body);
    std::string text;
    if (j.contains("prompt") && j["prompt"].is_string()) {
      text = j["prompt"].get<std::string>();
    } else if (j.contains("messages")) {
      if (!chat.chatml) throw RequestError("'messages' needs a ChatML chat template, which this checkpoint lacks");
      text = runtime::render_chatml(chat_request(j, limits()).messages);
    } else {
      throw RequestError("'prompt' (a string) or 'messages' is required");
    }
    const auto ids = engine.tokenizer().encode(text);
    reply(res, 200, {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", engine.model().max_positions()}});
  }

  void detokenize(const httplib::Request& req, httplib::Response& res) {
    const auto j = parse_body(req.body);
    if (!j.contains("tokens")) throw RequestError("'tokens' (a list of token ids) is required");
    reply(res, 200, {{"prompt", engine.tokenizer().decode(token_ids(j["tokens"], limits()))}});
  }

  void routes() {
    const auto guarded = [this](void (Impl::*f)(const httplib::Request&, httplib::Response&)) {
      return [this, f](const httplib::Request& req, httplib::Response& res) {
        try {
          (this->*f)(req, res);
        } catch (const RequestError& e) {
          reply_error(res, 400, e.what());
        } catch (const Error& e) {  // the tokenizer or model refusing an input
          reply_error(res, e.kind() == ErrorKind::BadInput ? 400 : 500, e.what());
        } catch (const std::exception& e) {
          reply_error(res, 500, e.what());
        }
      };
    };
    svr.Post("/v1/completions", guarded(&Impl::completions));
    svr.Post("/v1/chat/completions", guarded(&Impl::chat_completions));
    svr.Post("/tokenize", guarded(&Impl::tokenize));
    svr.Post("/detokenize", guarded(&Impl::detokenize));
    svr.Get("/tokenizer_info", [this](const httplib::Request&, httplib::Response& res) { reply(res, 200, tokenizer_info()); });
    svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      reply(res, 200, {{"object", "list"},
                       {"data", {{{"id", o.model_name}, {"object", "model"}, {"owned_by", "selq"},
                                  {"max_model_len", engine.model().max_positions()}}}}});
    });
    svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const auto s = engine.stats();
      reply(res, 200, {{"status", "ok"}, {"queued", s.queued}, {"running", s.running}, {"steps", s.steps},
                       {"prompt_tokens", s.prompt_tokens}, {"generated_tokens", s.generated_tokens},
                       {"sequences", s.sequences}});
    });
    svr.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (res.status == 404) reply_error(res, 404, fmt::format("no route {} {}", req.method, req.path));
      else if (res.status == 413)
        reply_error(res, 413, fmt::format("the request body is larger than the server's limit of {} bytes", o.max_body));
    });
  }
};

HttpServer::HttpServer(Engine& engine, TokenizerConfig chat, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(chat), std::move(options))) {
  auto& s = impl_->svr;
  s.set_payload_max_length(impl_->o.max_body);
  s.set_read_timeout(30);
  s.set_write_timeout(30);
  const int threads = impl_->o.connections;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
  impl_->routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  auto& s = impl_->svr;
  const auto& o = impl_->o;
  const int port = o.port == 0 ? s.bind_to_any_port(o.host) : (s.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port < 0) throw_io(fmt::format("cannot listen on {}:{} (in use, or not an address of this machine)", o.host, o.port));
  return port;
}

void HttpServer::listen() { impl_->svr.listen_after_bind(); }
void HttpServer::stop() { impl_->svr.stop(); }

}  // namespace selq::serve
