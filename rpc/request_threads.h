// The stdio reader thread that may run a lone request itself
// (rpc/transports.h); the worker threads and slots are the execution
// queue's (rpc/execution_queue.h).
#pragma once

#include <functional>

#include "runtime/zygote.h"

namespace cubicle::rpc {

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
