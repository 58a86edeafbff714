// selq.serve(): a checkpoint served in this process (serve/service.h), its
// HTTP loop on a thread of its own so that Python goes on; stop() closes it.
#include <memory>
#include <thread>

#include <nanobind/stl/string.h>

#include "bindings.h"
#include "serve/service.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace selq::python {
namespace {

class ServerHandle {
 public:
  ServerHandle(const std::string& checkpoint, const std::string& host, int port, const std::string& model_name,
               int slots, std::size_t queue, int timeout_s) {
    serve::ServiceOptions o;
    o.server.host = host;
    o.server.port = port;
    o.server.model_name = model_name;
    o.server.timeout_s = timeout_s;
    o.engine.slots = slots;
    o.engine.queue = queue;
    service_ = std::make_unique<serve::Service>(checkpoint, o);
    thread_ = std::thread([s = service_.get()] { s->serve(); });
  }
  ~ServerHandle() { stop(); }
  int port() const { return service_->port(); }
  std::string description() const { return service_->description(); }
  bool running() const { return thread_.joinable(); }
  // Requests being answered finish first.
  void stop() {
    if (!thread_.joinable()) return;
    service_->stop();
    thread_.join();
  }

 private:
  std::unique_ptr<serve::Service> service_;
  std::thread thread_;
};

}  // namespace

void bind_serve(nb::module_& m) {
  nb::class_<ServerHandle>(m, "ServerHandle")
      .def(
          "__init__",
          [](ServerHandle* self, const std::string& checkpoint, const std::string& host, int port,
             const std::string& model_name, int slots, std::size_t queue, int timeout_s) {
            nb::gil_scoped_release nogil;  // loading the model takes a while
            new (self) ServerHandle(checkpoint, host, port, model_name, slots, queue, timeout_s);
          },
          "checkpoint"_a, "host"_a, "port"_a, "model_name"_a, "slots"_a, "queue"_a, "timeout_s"_a)
      .def_prop_ro("port", &ServerHandle::port)
      .def_prop_ro("description", &ServerHandle::description)
      .def_prop_ro("running", &ServerHandle::running)
      .def("stop", [](ServerHandle& h) {
        nb::gil_scoped_release nogil;
        h.stop();
      });
}

}  // namespace selq::python
