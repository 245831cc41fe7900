// exec.start, exec.status, exec.wait, exec.cancel (docs/protocol.md):
// managed executions, started in the background and polled, waited for or
// cancelled by id; an idempotency key makes a retried start harmless.
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>

#include <boost/asio/post.hpp>
#include <boost/json/object.hpp>

#include "absl/strings/str_cat.h"
#include "base/unique_fd.h"
#include "rpc/daemon.h"
#include "rpc/npu_methods.h"
#include "rpc/request_threads.h"

namespace cubicle::rpc {
namespace json = boost::json;

struct Daemon::Execution {
  std::string id;
  std::string state = "queued";  // queued | running | done
  json::value result;            // when done: the sandbox.run result, or {"error": ...}
  UniqueFd cancel;               // eventfd: exec.cancel makes it readable
  absl::Time finished;
};

namespace {

constexpr absl::Duration kKeyWindow = absl::Seconds(60);
constexpr absl::Duration kKeepFinished = absl::Minutes(10);
constexpr size_t kMaxFinished = 1024;

}  // namespace

void Daemon::ForgetOldExecutionsLocked() {
  const absl::Time now = absl::Now();
  std::erase_if(keys_, [&](const auto& kv) { return now - kv.second.second > kKeyWindow; });
  size_t finished = 0;
  for (const auto& [id, e] : executions_) finished += e->state == "done";
  std::erase_if(executions_, [&](const auto& kv) {
    const Execution& e = *kv.second;
    bool drop = e.state == "done" && (now - e.finished > kKeepFinished || finished > kMaxFinished);
    if (drop) --finished;
    return drop;
  });
}

Expected<std::shared_ptr<Daemon::Execution>> Daemon::NewExecution(const std::optional<std::string>& key) {
  auto exec = std::make_shared<Execution>();
  exec->cancel.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!exec->cancel) return Error{kInternalError, "eventfd: out of file descriptors", nullptr};
  std::lock_guard<std::mutex> lock(exec_mu_);
  ForgetOldExecutionsLocked();
  if (key.has_value()) {
    auto it = keys_.find(*key);
    if (it != keys_.end()) {
      return Error{kDuplicateKey,
                   absl::StrCat("key '", *key, "' started execution ", it->second.first, " less than 60 s ago"),
                   json::object{{"exec_id", it->second.first}}};
    }
  }
  exec->id = absl::StrCat("e", ++next_exec_);
  executions_[exec->id] = exec;
  if (key.has_value()) keys_[*key] = {exec->id, absl::Now()};
  return exec;
}

Expected<json::value> Daemon::ExecStart(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"profile", "argv", "env", "cwd", "stdin", "timeout_ms", "output_bytes",
                                         "key", "limits", "workspace", "network"})) {
    return *bad;
  }
  CUBICLE_RPC_ASSIGN_OR_RETURN(RunParams p, ParseRunParams(*params));
  if (auto refused = RefuseAccelerated(config_.profiles.at(p.pool->name()), "exec.start")) return *refused;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> stdin_text, GetString(*params, "stdin", false));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> key, GetString(*params, "key", false));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::shared_ptr<Execution> exec, NewExecution(key));
  // Counted like any request; the work runs on the same workers.
  in_flight_.fetch_add(1);
  boost::asio::post(workers_->pool, [this, exec, p = std::move(p), stdin_data = stdin_text.value_or("")] {
    Slot slot(workers_->slots);
    {
      std::lock_guard<std::mutex> lock(exec_mu_);
      exec->state = "running";
    }
    Expected<json::value> result = [&]() -> Expected<json::value> {
      if (running_.abandoned()) return Error{kShuttingDown, "the daemon is shutting down: its parent exited", nullptr};
      RunningExecutions::Tracked tracked = running_.Track(exec->cancel.get());
      return RunToJson(p, stdin_data, exec->cancel.get());
    }();
    {
      std::lock_guard<std::mutex> lock(exec_mu_);
      exec->result = result.ok() ? std::move(result).value()
                                 : json::value(json::object{{"error", json::object{{"code", result.error().code},
                                                                                    {"message", result.error().message}}}});
      exec->state = "done";
      exec->finished = absl::Now();
    }
    exec_done_.notify_all();
    in_flight_.fetch_sub(1);
  });
  return json::value(json::object{{"exec_id", exec->id}, {"state", "queued"}});
}

Expected<std::shared_ptr<Daemon::Execution>> Daemon::FindExecution(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"exec_id", "timeout_ms"})) return *bad;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> id, GetString(*params, "exec_id", true));
  std::lock_guard<std::mutex> lock(exec_mu_);
  auto it = executions_.find(*id);
  if (it == executions_.end()) return Error{kNotFound, absl::StrCat("no execution '", *id, "'"), nullptr};
  return it->second;
}

Expected<json::value> Daemon::ExecStatus(const json::value& raw, bool wait) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::shared_ptr<Execution> exec, FindExecution(raw));
  std::unique_lock<std::mutex> lock(exec_mu_);
  if (wait) {
    int64_t timeout_ms = 30000;
    if (const json::object* params = raw.if_object(); params != nullptr) {
      CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> t, GetInt64(*params, "timeout_ms", false, 0, 600000));
      timeout_ms = t.value_or(timeout_ms);
    }
    // An abandoned daemon (no one to answer) waits no more.
    exec_done_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                        [&] { return exec->state == "done" || running_.abandoned(); });
  }
  json::object out{{"exec_id", exec->id}, {"state", exec->state}};
  if (exec->state == "done") out["result"] = exec->result;
  return json::value(std::move(out));
}

Expected<json::value> Daemon::ExecCancel(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::shared_ptr<Execution> exec, FindExecution(raw));
  uint64_t one = 1;
  (void)!::write(exec->cancel.get(), &one, sizeof(one));
  std::lock_guard<std::mutex> lock(exec_mu_);
  return json::value(json::object{{"exec_id", exec->id}, {"state", exec->state}});
}

void Daemon::WakeExecWaiters() {
  // Under the lock: a waiter between its check and its wait would miss it.
  std::lock_guard<std::mutex> lock(exec_mu_);
  exec_done_.notify_all();
}

}  // namespace cubicle::rpc
