// Where the daemon's requests run (rpc/daemon.h): its worker threads, the
// slots that bound how many run at once (`max_concurrent`), and the stdio
// reader thread that may run a lone request itself (rpc/transports.h).
#pragma once

#include <cstddef>
#include <functional>
#include <semaphore>

#include <boost/asio/thread_pool.hpp>

#include "runtime/zygote.h"

namespace cubicle::rpc {

// A request the stdio transport runs on the thread that read it
// (Daemon::HandleLine's `may_run_here`) takes a slot too.
struct Workers {
  explicit Workers(size_t n) : pool(n), slots(static_cast<std::ptrdiff_t>(n)) {}
  boost::asio::thread_pool pool;
  std::counting_semaphore<4096> slots;
};

// One of the slots, held while a request's work runs.
class Slot {
 public:
  explicit Slot(std::counting_semaphore<4096>& slots) : slots_(slots) { slots_.acquire(); }
  ~Slot() { slots_.release(); }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;

 private:
  std::counting_semaphore<4096>& slots_;
};

// While a reader thread of the stdio transport runs a request itself:
// stdin, and what to do when a line comes meanwhile (hand the reading on).
struct ReaderWatch {
  int fd;
  std::function<void()> on_line;
};

// Set (and cleared with nullptr) by the reader around the request it runs;
// thread-local.
void SetReaderWatch(const ReaderWatch* watch);

// On the reader thread, has the sandbox's wait watch stdin for the next
// line (runtime::ExecRequest::watch_fd); elsewhere, does nothing.
void WatchForTheReader(runtime::ExecRequest* request);

}  // namespace cubicle::rpc
