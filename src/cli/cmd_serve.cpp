// `selq serve CHECKPOINT`: the checkpoint behind an OpenAI-compatible HTTP
// endpoint (serve/http_server.h), computing with its stored formats as
// `selq eval` does, so that lm-evaluation-harness can score it. SIGTERM or
// SIGINT stops it: requests being answered finish, queued ones get 503.
#include <csignal>
#include <thread>

#include <fmt/format.h>
#include <pthread.h>

#include "cli/command.h"
#include "core/error.h"
#include "serve/service.h"

namespace selq::cli {
namespace {

struct ServeArgs {
  std::string checkpoint;
  serve::ServiceOptions o;
  bool quiet{false};
};

int run_serve(const ServeArgs& a) {
  // Signals are taken by one thread (sigwait), so every thread started below
  // inherits them blocked.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  serve::Service service(a.checkpoint, a.o);
  if (!a.quiet)
    fmt::print(stderr, "selq serve: {}, listening on http://{}:{}/v1\n", service.description(), a.o.server.host,
               service.port());
  std::fflush(stderr);
  std::thread signals([&service, sigs, quiet = a.quiet] {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (sig == SIGTERM || sig == SIGINT) {
      if (!quiet) fmt::print(stderr, "selq serve: {} received, finishing what is running\n", strsignal(sig));
      service.stop();
    }
  });
  service.serve();
  pthread_kill(signals.native_handle(), SIGTERM);  // serve() ended on its own: release the signal thread
  signals.join();
  return 0;
}

const CommandRegistration kServe(28, [](CLI::App& root, int& status) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = root.add_subcommand(
      "serve",
      "Serve CHECKPOINT over HTTP with OpenAI-style endpoints (/v1/completions with echo and logprobs,\n"
      "/v1/chat/completions, /tokenize, /detokenize, /tokenizer_info, /v1/models, /health), computing with\n"
      "its stored formats exactly as selq eval does, so that lm-evaluation-harness can score any format.\n"
      "Greedy decoding only; requests are batched together; binds 127.0.0.1 unless --host says otherwise.");
  cmd->footer(
      "Examples:\n"
      "  selq serve out-nvfp4 --port 8000\n"
      "  lm_eval --model local-completions --tasks lambada_openai \\\n"
      "      --model_args base_url=http://127.0.0.1:8000/v1/completions,model=out-nvfp4,num_concurrent=8\n"
      "  curl -s localhost:8000/v1/completions -d '{\"prompt\": \"It is a truth\", \"max_tokens\": 8}'\n"
      "docs/SERVE.md: every route and field, limits, and lm-eval set-ups.");
  cmd->add_option("CHECKPOINT", a->checkpoint, "A checkpoint directory selq eval runs")->required();
  cmd->add_option("--host", a->o.server.host, "Address to bind")->capture_default_str();
  cmd->add_option("--port", a->o.server.port, "Port (0: any free one, printed at start)")->capture_default_str();
  cmd->add_option("--model-name", a->o.server.model_name, "The model's name in answers (default: the directory's)");
  cmd->add_option("--slots", a->o.engine.slots, "Sequences decoded together")->capture_default_str()->check(CLI::Range(1, 256));
  cmd->add_option("--queue", a->o.engine.queue, "Sequences that may wait beyond those; more get 503")
      ->capture_default_str();
  cmd->add_option("--step-tokens", a->o.engine.step_tokens, "Prompt tokens admitted into one step")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--connections", a->o.server.connections, "Connections handled at once")->capture_default_str()->check(CLI::Range(1, 1024));
  cmd->add_option("--max-body", a->o.server.max_body, "Largest request body in bytes (more: 413)")->capture_default_str();
  cmd->add_option("--timeout", a->o.server.timeout_s, "Seconds a request may wait for its answer (then 504)")
      ->capture_default_str()->check(CLI::Range(1, 86400));
  cmd->add_flag("-q,--quiet", a->quiet, "No start and stop lines on stderr");
  cmd->callback([a, &status] { status = run_serve(*a); });
});

}  // namespace
}  // namespace selq::cli
