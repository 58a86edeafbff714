#pragma once
// Long calls (quantize, eval, sensitivity) run on a thread of their own while
// the calling thread, with the GIL released, waits: it wakes every 50 ms to
// run Python's signal handlers (only the main thread can), and whenever the
// work reports progress, to call the Python callback there. A
// KeyboardInterrupt or an exception from the callback cancels: the work's
// next report throws Cancelled, which unwinds the library as any error does
// (file-to-file output stays in DST.selq-partial, nothing under the final
// name), and the Python exception is raised once the thread has joined.
// A report waits for its callback, so a callback that raises always stops
// the run before it completes.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include <nanobind/nanobind.h>

namespace selq::python {

struct Cancelled : std::exception {
  const char* what() const noexcept override { return "cancelled from Python"; }
};

class Session {
 public:
  // Work side: throws Cancelled once Python asked to stop.
  void check() const {
    if (cancelled_.load()) throw Cancelled();
  }
  // Work side: runs `deliver` (which calls Python) on the Python thread and
  // waits for it.
  void report(std::function<void()> deliver) {
    check();
    std::unique_lock lock(m_);
    pending_ = std::move(deliver);
    cv_.notify_all();
    cv_.wait(lock, [&] { return !pending_ || cancelled_.load(); });
    lock.unlock();
    check();
  }

  // Runs `work(session)` (GIL released) to its end on a new thread. Returns
  // its result or raises its error, or the Python error that cancelled it.
  template <typename R>
  static R run(const std::function<R(Session&)>& work) {
    Session s;
    std::optional<R> result;
    std::exception_ptr error;
    std::thread worker([&] {
      try {
        result.emplace(work(s));
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard lock(s.m_);
      s.done_ = true;
      s.cv_.notify_all();
    });
    std::optional<nanobind::python_error> python_error;
    for (;;) {
      std::function<void()> deliver;
      {
        nanobind::gil_scoped_release nogil;
        std::unique_lock lock(s.m_);
        s.cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return s.done_ || s.pending_; });
        if (s.done_) break;
        deliver = s.pending_;
      }
      try {
        if (!python_error && PyErr_CheckSignals() != 0) throw nanobind::python_error();
        if (deliver && !python_error) deliver();
      } catch (nanobind::python_error& e) {
        python_error.emplace(std::move(e));
        s.cancelled_.store(true);
      }
      if (deliver) {
        std::lock_guard lock(s.m_);
        s.pending_ = nullptr;
        s.cv_.notify_all();
      }
    }
    {
      nanobind::gil_scoped_release nogil;
      worker.join();
    }
    if (python_error) throw std::move(*python_error);
    if (error) std::rethrow_exception(error);
    return std::move(*result);
  }

 private:
  std::atomic<bool> cancelled_{false};
  std::mutex m_;
  std::condition_variable cv_;
  std::function<void()> pending_;
  bool done_{false};
};

}  // namespace selq::python
