// One managed execution (exec.*), shared by rpc/exec_methods.cc and
// rpc/exec_records.cc. Internal to rpc/.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "absl/functional/any_invocable.h"
#include "absl/time/time.h"
#include "rpc/daemon.h"

namespace cubicle::rpc {
namespace json = boost::json;

// One managed execution. Its cancel eventfd exists only while it runs
// (RunExecution's), so a finished one holds no fd.
struct Daemon::Execution {
  std::string id;
  std::string state = "queued";  // queued | running | done | cancelled
  std::string session;           // the session it runs in, if any
  json::value result;            // when done: the sandbox.run result, or {"error": ...}
  std::shared_ptr<Cancellation> cancel = std::make_shared<Cancellation>();
  std::shared_ptr<LiveOutput> live = std::make_shared<LiveOutput>();  // output so far
  absl::Time created = absl::Now();
  absl::Time finished;
  // exec.wait calls waiting for its end, by waiter id: each answers once,
  // by whoever takes it out of here (the end, its timer, its cancel).
  std::map<uint64_t, absl::AnyInvocable<void(json::value status) &&>> waiters;

  bool ended() const { return state == "done" || state == "cancelled"; }
  json::value StatusJson() const {
    json::object out{{"exec_id", id}, {"state", state}, {"created_ms", absl::ToUnixMillis(created)}};
    if (state == "done") out["result"] = result;
    if (state == "running") {
      std::lock_guard<std::mutex> lock(live->mu);
      out["output"] = json::object{{"stdout", live->out}, {"stderr", live->err}};
    }
    return out;
  }
};

}  // namespace cubicle::rpc
