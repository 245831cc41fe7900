// exec.start, exec.status, exec.wait, exec.cancel (docs/protocol.md):
// managed executions, queued for a slot and polled, waited for or
// cancelled by id; an idempotency key makes a retried start harmless.
// Nothing here waits for a slot: exec.start answers with the id at once,
// exec.wait is answered by the execution's end or a timer.
#include <chrono>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/object.hpp>

#include "absl/strings/str_cat.h"
#include "rpc/daemon.h"
#include "rpc/npu_methods.h"

namespace cubicle::rpc {
namespace asio = boost::asio;
namespace json = boost::json;

// One managed execution. Its cancel eventfd exists only while it runs
// (RunExecution's), so a finished one holds no fd.
struct Daemon::Execution {
  std::string id;
  std::string state = "queued";  // queued | running | done | cancelled
  json::value result;            // when done: the sandbox.run result, or {"error": ...}
  std::shared_ptr<Cancellation> cancel = std::make_shared<Cancellation>();
  absl::Time finished;
  // exec.wait calls waiting for its end, by waiter id: each answers once,
  // by whoever takes it out of here (the end, its timer, its cancel).
  std::map<uint64_t, absl::AnyInvocable<void(json::value status) &&>> waiters;

  bool ended() const { return state == "done" || state == "cancelled"; }
  json::value StatusJson() const {
    json::object out{{"exec_id", id}, {"state", state}};
    if (state == "done") out["result"] = result;
    return out;
  }
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
  for (const auto& [id, e] : executions_) finished += e->ended();
  std::erase_if(executions_, [&](const auto& kv) {
    const Execution& e = *kv.second;
    bool drop = e.ended() && (now - e.finished > kKeepFinished || finished > kMaxFinished);
    if (drop) --finished;
    return drop;
  });
}

Expected<std::shared_ptr<Daemon::Execution>> Daemon::NewExecution(const std::optional<std::string>& key) {
  auto exec = std::make_shared<Execution>();
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
  // Queued for a slot like any execution, and in flight (a drain waits for
  // it) until it ends. Cancel withdraws it while it waits.
  in_flight_.fetch_add(1);
  const uint64_t ticket = queue_->Reserve();
  (void)exec->cancel->SetStop([queue = queue_.get(), ticket] { queue->Withdraw(ticket); });
  const bool queued =
      queue_->Submit(ticket, [this, exec, p = std::move(p), stdin_data = stdin_text.value_or("")](bool run) mutable {
        RunManaged(exec, run, p, stdin_data);
      });
  if (!queued) {
    in_flight_.fetch_sub(1);
    std::lock_guard<std::mutex> lock(exec_mu_);
    executions_.erase(exec->id);
    if (key.has_value()) keys_.erase(*key);  // nothing started: a retry may use it
    return Error{kBusy,
                 absl::StrCat("busy: ", config_.max_concurrent, " executions run and ", config_.max_queue,
                              " wait already (concurrency.max_concurrent, max_queue)"),
                 nullptr};
  }
  return json::value(json::object{{"exec_id", exec->id}, {"state", "queued"}});
}

void Daemon::RunManaged(const std::shared_ptr<Execution>& exec, bool run, RunParams& p, const std::string& stdin_data) {
  if (!run) return EndExecution(exec, "cancelled", nullptr);  // withdrawn: it never ran
  {
    std::lock_guard<std::mutex> lock(exec_mu_);
    exec->state = "running";
  }
  RunWork work = [&](int cancel_fd) { return RunToJson(p, stdin_data, cancel_fd); };
  json::value outcome;
  const bool ran = RunCancellable(*exec->cancel, work, /*sandbox=*/true, [&](Expected<json::value> result) {
    outcome = result.ok() ? std::move(result).value()
                          : json::value(json::object{{"error", json::object{{"code", result.error().code},
                                                                             {"message", result.error().message}}}});
  });
  // Not ran: cancelled between its turn and its start.
  EndExecution(exec, ran ? "done" : "cancelled", std::move(outcome));
}

void Daemon::EndExecution(const std::shared_ptr<Execution>& exec, const char* state, json::value result) {
  std::map<uint64_t, absl::AnyInvocable<void(json::value) &&>> waiters;
  json::value status;
  {
    std::lock_guard<std::mutex> lock(exec_mu_);
    exec->state = state;
    exec->result = std::move(result);
    exec->finished = absl::Now();
    waiters.swap(exec->waiters);
    status = exec->StatusJson();
  }
  for (auto& [id, answer] : waiters) std::move(answer)(status);
  in_flight_.fetch_sub(1);
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

Expected<json::value> Daemon::ExecStatus(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::shared_ptr<Execution> exec, FindExecution(raw));
  std::lock_guard<std::mutex> lock(exec_mu_);
  return exec->StatusJson();
}

void Daemon::ExecWait(Request request) {
  Expected<std::shared_ptr<Execution>> found = FindExecution(request.call.params);
  int64_t timeout_ms = 30000;
  if (found.ok()) {
    if (const json::object* params = request.call.params.if_object(); params != nullptr) {
      Expected<std::optional<int64_t>> t = GetInt64(*params, "timeout_ms", false, 0, 600000);
      if (!t.ok()) found = t.error();
      if (t.ok()) timeout_ms = t->value_or(timeout_ms);
    }
  }
  if (!found.ok()) return request.replies->Add(ReplyTo(request.call, std::move(found).error()));
  std::shared_ptr<Execution> exec = *std::move(found);
  auto timer = std::make_shared<asio::steady_timer>(control_);
  std::unique_lock<std::mutex> lock(exec_mu_);
  // Ended, or the daemon ends its waits (a drain's deadline): at once.
  if (exec->ended() || timeout_ms == 0 || cut_off_) {
    json::value status = exec->StatusJson();
    lock.unlock();
    return request.replies->Add(ReplyTo(request.call, std::move(status)));
  }
  Defer(request);
  const uint64_t waiter = ++next_waiter_;
  auto shared = std::make_shared<Request>(std::move(request));
  exec->waiters[waiter] = [this, shared, timer](json::value status) mutable {
    // Its timer goes with it; cancelled on the control thread, which alone
    // runs its handler.
    asio::post(control_, [timer] { timer->cancel(); });
    Finish(*shared, std::move(status));
  };
  // The timeout, or the request's cancel (its client left, the daemon
  // ends its waits), takes the waiter out and answers with the state now.
  auto take = [this, exec, waiter]() {
    std::unique_lock<std::mutex> lock(exec_mu_);
    auto it = exec->waiters.find(waiter);
    if (it == exec->waiters.end()) return;  // answered already
    auto answer = std::move(it->second);
    exec->waiters.erase(it);
    json::value status = exec->StatusJson();
    lock.unlock();
    std::move(answer)(std::move(status));
  };
  lock.unlock();
  if (!shared->cancel->SetStop(take)) return take();  // cancelled already
  // Armed on the control thread, where its cancel runs too.
  asio::post(control_, [timer, timeout_ms, take] {
    timer->expires_after(std::chrono::milliseconds(timeout_ms));
    timer->async_wait([take](boost::system::error_code ec) {
      if (!ec) take();
    });
  });
}

Expected<json::value> Daemon::ExecCancel(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::shared_ptr<Execution> exec, FindExecution(raw));
  // Queued: withdrawn now, it never runs (state "cancelled" before this
  // answers). Running: its sandbox is killed (reason "killed" soon).
  // Ended: nothing to do.
  exec->cancel->Cancel();
  std::lock_guard<std::mutex> lock(exec_mu_);
  return json::value(json::object{{"exec_id", exec->id}, {"state", exec->state}});
}

void Daemon::EndExecWaits() {
  std::vector<std::shared_ptr<Execution>> all;
  {
    std::lock_guard<std::mutex> lock(exec_mu_);
    for (const auto& [id, exec] : executions_) all.push_back(exec);
  }
  for (const std::shared_ptr<Execution>& exec : all) {
    std::map<uint64_t, absl::AnyInvocable<void(json::value) &&>> waiters;
    json::value status;
    {
      std::lock_guard<std::mutex> lock(exec_mu_);
      waiters.swap(exec->waiters);
      status = exec->StatusJson();
    }
    for (auto& [id, answer] : waiters) std::move(answer)(status);
  }
}

}  // namespace cubicle::rpc
