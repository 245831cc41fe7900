#include "rpc/daemon.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <semaphore>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "base/hot_memory.h"
#include "base/unique_fd.h"
#include "rpc/npu_methods.h"
#include "egress/policy_json.h"
#include "rpc/results_json.h"
#include "runtime/cgroup_host.h"
#include "runtime/defaults.h"
#include "runtime/capture.h"
#include "runtime/probe.h"

namespace cubicle::rpc {
namespace asio = boost::asio;
namespace json = boost::json;

// The threads requests run on, and the slots that bound how many run at
// once (`max_concurrent`): a request the stdio transport runs on the
// thread that read it (HandleLine's `may_run_here`) takes a slot too.
struct Daemon::Workers {
  explicit Workers(size_t n) : pool(n), slots(static_cast<std::ptrdiff_t>(n)) {}
  asio::thread_pool pool;
  std::counting_semaphore<4096> slots;
};

namespace {

// While a reader thread of the stdio transport runs a request itself:
// stdin, and what to do when a line comes meanwhile (hand the reading on).
// The sandbox's wait watches it (runtime::ExecRequest::watch_fd).
struct ReaderWatch {
  int fd;
  std::function<void()> on_line;
};
thread_local const ReaderWatch* t_reader_watch = nullptr;

void WatchForTheReader(runtime::ExecRequest* request) {
  if (t_reader_watch == nullptr) return;
  request->watch_fd = t_reader_watch->fd;
  request->on_watch = t_reader_watch->on_line;
}

// One of the `max_concurrent` slots, held while a request's work runs.
class Slot {
 public:
  explicit Slot(std::counting_semaphore<4096>& slots) : slots_(slots) { slots_.acquire(); }
  ~Slot() { slots_.release(); }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;

 private:
  std::counting_semaphore<4096>& slots_;
};

constexpr const char* kVersion = "0.1.0";

bool ValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    }
    i += len;
  }
  return true;
}

// A stream's bytes in the reply: text when it is UTF-8, else base64.
void PutStream(json::object& out, const char* name, const std::string& data, bool truncated, uint64_t total) {
  if (ValidUtf8(data)) {
    out[name] = data;
  } else {
    out[absl::StrCat(name, "_base64")] = absl::Base64Escape(data);
  }
  out[absl::StrCat(name, "_truncated")] = truncated;
  out[absl::StrCat(name, "_bytes")] = total;
}

Error FromStatus(const absl::Status& st, int code) { return Error{code, std::string(st.message()), nullptr}; }

// How a failed run (not a failed payload: that is a result) is answered.
Error FromRunStatus(const absl::Status& st) {
  if (absl::IsResourceExhausted(st)) return FromStatus(st, kBusy);
  if (absl::IsInvalidArgument(st)) return FromStatus(st, kInvalidParams);
  return FromStatus(st, kInternalError);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Create(DaemonConfig config) {
  std::unique_ptr<Daemon> d(new Daemon(std::move(config)));
  for (auto& [name, profile] : d->config_.profiles) {
    runtime::PoolConfig pool_config = profile.pool;
    // A workspace is attached at hand-off (a detached mount moved in by
    // init): the zygotes need /workspace as a mountpoint. Root only.
    pool_config.zygote.accept_workspace = !d->config_.workspace_roots.empty() && ::geteuid() == 0;
    CUBICLE_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Pool> pool,
                             runtime::Pool::Create(name, profile.spec, pool_config));
    d->pools_.emplace(name, std::move(pool));
  }
  {
    npu::InventoryOptions npu_options;
    npu_options.root = d->config_.npu.root;
    npu_options.cache_window = d->config_.npu.cache_window;
    CUBICLE_ASSIGN_OR_RETURN(npu_options.probe_spec, runtime::DefaultSpec({}));
    npu_options.probe_spec.limits = runtime::DefaultLimits();
    CUBICLE_ASSIGN_OR_RETURN(d->inventory_, npu::Inventory::Create(std::move(npu_options)));
  }
  d->workers_ = std::make_unique<Workers>(std::max<size_t>(1, d->config_.max_concurrent));
  return d;
}

Daemon::Daemon(DaemonConfig config) : config_(std::move(config)) {}

Daemon::~Daemon() {
  if (workers_ != nullptr) workers_->pool.join();
  pools_.clear();
}

std::string Daemon::MetricsText() {
  std::map<std::string, PoolMetrics> pools;
  for (auto& [name, pool] : pools_) pools[name] = PoolMetrics{pool->Stats(), pool->config()};
  return PrometheusText(pools, in_flight_.load());
}

namespace {

// A histogram for pool.stats: count, mean and the cumulative buckets in ms.
json::object HistogramJson(const runtime::LatencyHistogram& h) {
  json::array buckets;
  for (size_t i = 0; i < runtime::LatencyHistogram::kBounds.size(); ++i) {
    buckets.push_back(json::array{runtime::LatencyHistogram::kBounds[i] * 1000, h.Cumulative(i)});
  }
  return json::object{{"count", h.count()},
                      {"mean_ms", h.count() > 0 ? h.sum_seconds() * 1000 / static_cast<double>(h.count()) : 0.0},
                      {"le_ms", std::move(buckets)}};
}

}  // namespace

json::value Daemon::PoolStatsJson() {
  json::object pools;
  for (auto& [name, pool] : pools_) {
    runtime::PoolStats s = pool->Stats();
    runtime::PoolConfig c = pool->config();
    pools[name] = json::object{{"idle", s.idle},
                               {"building", s.building},
                               {"in_use", s.in_use},
                               {"tearing_down", s.tearing_down},
                               {"hits", s.hits},
                               {"misses", s.misses},
                               {"busy", s.busy},
                               {"built", s.built},
                               {"build_failures", s.build_failures},
                               {"expired", s.expired},
                               {"last_build_ms", absl::ToDoubleMilliseconds(s.last_build)},
                               {"refill_ms", HistogramJson(s.refill)},
                               {"handoff_ms", HistogramJson(s.handoff)},
                               {"cold_start_ms", HistogramJson(s.cold_start)},
                               {"warm_interpreter", c.zygote.interpreter.has_value()},
                               {"min_idle", c.min_idle},
                               {"max_idle", c.max_idle},
                               {"max_total", c.max_total}};
  }
  return pools;
}

json::value Daemon::Health() {
  return json::object{{"status", stopping_ ? "draining" : "ok"},
                      {"version", kVersion},
                      {"in_flight", in_flight_.load()},
                      {"pools", PoolStatsJson()}};
}

Expected<runtime::Pool*> Daemon::FindPool(const json::object& params) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> name, GetString(params, "profile", false));
  std::string profile = name.value_or("shell");
  auto it = pools_.find(profile);
  if (it == pools_.end()) {
    return Error{kNotFound, absl::StrCat("no profile named '", profile, "'"), nullptr};
  }
  return it->second.get();
}

Expected<Daemon::RunParams> Daemon::ParseRunParams(const json::object& params) {
  RunParams out;
  CUBICLE_RPC_ASSIGN_OR_RETURN(out.pool, FindPool(params));
  const Profile& profile = config_.profiles.at(out.pool->name());
  runtime::ExecRequest& request = out.request;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> argv, GetStringArray(params, "argv", true));
  request.argv = *argv;
  if (request.argv.empty() || request.argv[0].empty()) {
    return InvalidParam("params", "argv", "must hold at least the command");
  }
  request.env = profile.spec.env;
  CUBICLE_RPC_ASSIGN_OR_RETURN(auto env, GetStringMap(params, "env", false));
  if (env.has_value()) {
    for (const auto& [k, v] : *env) {
      if (k.empty() || k.find('=') != std::string::npos) return InvalidParam("params.env", k, "is not a variable name");
      std::erase_if(request.env, [&](const std::string& kv) { return kv.rfind(k + "=", 0) == 0; });
      request.env.push_back(absl::StrCat(k, "=", v));
    }
  }
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> cwd, GetString(params, "cwd", false));
  request.cwd = cwd.value_or(profile.spec.cwd);
  const int64_t max_timeout_ms = absl::ToInt64Milliseconds(profile.max_timeout);
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> timeout_ms, GetInt64(params, "timeout_ms", false, 1));
  if (timeout_ms.has_value() && *timeout_ms > max_timeout_ms) {
    return Error{kLimitExceeded,
                 absl::StrCat("params.timeout_ms: ", *timeout_ms, " exceeds the profile's ceiling of ", max_timeout_ms),
                 nullptr};
  }
  request.timeout = timeout_ms.has_value() ? absl::Milliseconds(*timeout_ms) : profile.default_timeout;
  if (const json::value* limits = FindParam(params, "limits")) {
    absl::StatusOr<cgroups::Limits> asked = ParseRequestLimits(*limits, "params.limits");
    if (!asked.ok()) return FromStatus(asked.status(), kInvalidParams);
    absl::StatusOr<cgroups::Limits> tightened = TightenLimits(profile.spec.limits, *asked);
    if (!tightened.ok()) {
      return Error{kLimitExceeded, absl::StrCat("params.limits: ", tightened.status().message()), nullptr};
    }
    request.limits = *std::move(tightened);
  }
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> workspace, GetString(params, "workspace", false));
  if (workspace.has_value()) {
    char real[PATH_MAX];
    if (config_.workspace_roots.empty()) {
      return InvalidParam("params", "workspace", "is not accepted: the daemon has no workspace_roots configured");
    }
    if (::realpath(workspace->c_str(), real) == nullptr) {
      return InvalidParam("params", "workspace", absl::StrCat("'", *workspace, "': ", ErrnoName(errno)));
    }
    const std::string resolved = real;
    bool under = std::any_of(config_.workspace_roots.begin(), config_.workspace_roots.end(), [&](const std::string& root) {
      return resolved == root || absl::StartsWith(resolved, root == "/" ? root : root + "/");
    });
    if (!under) {
      return InvalidParam("params", "workspace",
                          absl::StrCat("'", *workspace, "' is not under a configured workspace root"));
    }
    request.workspace = resolved;
  }
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> output_bytes, GetInt64(params, "output_bytes", false, 0));
  out.budget = profile.output_bytes;
  if (output_bytes.has_value()) {
    if (static_cast<uint64_t>(*output_bytes) > out.budget) {
      return Error{kLimitExceeded,
                   absl::StrCat("params.output_bytes: ", *output_bytes, " exceeds the profile's ceiling of ", out.budget),
                   nullptr};
    }
    out.budget = static_cast<uint64_t>(*output_bytes);
  }
  // params.network may only narrow the profile's policy.
  if (const json::value* network = FindParam(params, "network")) {
    absl::StatusOr<egress::Policy> policy = egress::PolicyFromJson(*network, "params.network", profile.spec.egress);
    if (!policy.ok()) return Error{kInvalidParams, std::string(policy.status().message()), nullptr};
    if (absl::Status st = egress::CheckNarrows(profile.spec.egress, *policy); !st.ok()) {
      return Error{kLimitExceeded, absl::StrCat("params.network: ", st.message()), nullptr};
    }
    if (*policy != profile.spec.egress) {
      out.narrowed = profile.spec;
      out.narrowed->egress = *std::move(policy);
      if (out.narrowed->egress.mode == egress::NetMode::kNone) out.narrowed->seccomp = seccomp::Policy::kNoNetwork;
    }
  }
  return out;
}

Expected<json::value> Daemon::SandboxRun(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"profile", "argv", "env", "cwd", "stdin", "stdin_base64", "timeout_ms",
                                         "output_bytes", "limits", "workspace", "network", "npu", "gpu"})) {
    return *bad;
  }
  CUBICLE_RPC_ASSIGN_OR_RETURN(RunParams p, ParseRunParams(*params));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> stdin_text, GetString(*params, "stdin", false));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> stdin_b64, GetString(*params, "stdin_base64", false));
  std::string stdin_data = stdin_text.value_or("");
  if (stdin_b64.has_value()) {
    if (stdin_text.has_value()) return InvalidParam("params", "stdin_base64", "cannot be given with stdin");
    if (!absl::Base64Unescape(*stdin_b64, &stdin_data)) return InvalidParam("params", "stdin_base64", "is not base64");
  }
  return SandboxRunAccelerated(p, *params, stdin_data);
}

Expected<json::value> Daemon::SandboxRunAccelerated(const RunParams& p, const json::object& params,
                                                    const std::string& stdin_data) {
  const Profile& profile = config_.profiles.at(p.pool->name());
  CUBICLE_RPC_ASSIGN_OR_RETURN(RunChips chips, ChipsOfRun(params, profile));
  if (chips.empty()) return RunToJson(p, stdin_data, -1);  // the pool, as always
  runtime::ExecRequest request = p.request;
  WatchForTheReader(&request);
  absl::StatusOr<AcceleratedRun> run = RunWithAccelerators(*inventory_, profile, chips, request, stdin_data, p.budget);
  if (!run.ok()) {
    // A chip that is gone or unusable fails the whole execution, naming it.
    return FromStatus(run.status(), absl::IsInvalidArgument(run.status()) ? kInvalidParams : kSetupFailed);
  }
  json::object out = ResultToJson(run->captured.result);
  out["profile"] = p.pool->name();
  out["accelerators"] = run->mapping;
  PutStream(out, "stdout", run->captured.out, run->captured.out_truncated, run->captured.out_total);
  PutStream(out, "stderr", run->captured.err, run->captured.err_truncated, run->captured.err_total);
  return json::value(std::move(out));
}

Expected<json::value> Daemon::RunToJson(const RunParams& p, const std::string& stdin_data, int cancel_fd) {
  runtime::Pool* pool = p.pool;
  runtime::Runner runner = [pool](const runtime::ExecRequest& r) { return pool->Run(r); };
  if (p.narrowed.has_value()) {
    // Its own policy revision: a sandbox made for this request (the cold
    // path), attached to that revision's gateway.
    runner = runtime::FreshSandboxRunner(*p.narrowed);
  }
  runtime::ExecRequest request = p.request;
  request.cancel_fd = cancel_fd;
  WatchForTheReader(&request);
  absl::StatusOr<runtime::CapturedRun> run = runtime::RunCaptured(runner, request, stdin_data, p.budget);
  if (!run.ok()) return FromRunStatus(run.status());
  json::object out = ResultToJson(run->result);
  out["profile"] = pool->name();
  PutStream(out, "stdout", run->out, run->out_truncated, run->out_total);
  PutStream(out, "stderr", run->err, run->err_truncated, run->err_total);
  return json::value(std::move(out));
}

struct Daemon::Execution {
  std::string id;
  std::string state = "queued";  // queued | running | done
  json::value result;            // when done: the sandbox.run result, or {"error": ...}
  UniqueFd cancel;               // eventfd: exec.cancel makes it readable
  absl::Time finished;
};

constexpr absl::Duration kKeyWindow = absl::Seconds(60);
constexpr absl::Duration kKeepFinished = absl::Minutes(10);
constexpr size_t kMaxFinished = 1024;

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
  auto exec = std::make_shared<Execution>();
  exec->cancel.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!exec->cancel) return Error{kInternalError, "eventfd: out of file descriptors", nullptr};
  {
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
  }
  // Counted like any request; the work runs on the same workers.
  in_flight_.fetch_add(1);
  asio::post(workers_->pool, [this, exec, p = std::move(p), stdin_data = stdin_text.value_or("")] {
    Slot slot(workers_->slots);
    {
      std::lock_guard<std::mutex> lock(exec_mu_);
      exec->state = "running";
    }
    Expected<json::value> result = RunToJson(p, stdin_data, exec->cancel.get());
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
    exec_done_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return exec->state == "done"; });
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

Expected<json::value> Daemon::SkillCall(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"profile", "argv", "env", "cwd", "timeout_ms", "output_bytes", "method",
                                         "params", "limits", "workspace"})) {
    return *bad;
  }
  CUBICLE_RPC_ASSIGN_OR_RETURN(RunParams p, ParseRunParams(*params));
  if (auto refused = RefuseAccelerated(config_.profiles.at(p.pool->name()), "skill.call")) return *refused;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> method, GetString(*params, "method", true));
  json::value skill_params = params->contains("params") ? params->at("params") : json::value(nullptr);
  if (!skill_params.is_null() && !skill_params.is_object() && !skill_params.is_array()) {
    return InvalidParam("params", "params", "must be an object or an array");
  }
  // The skill's request: one line on its stdin. Each skill is a fresh
  // process, so a fixed id cannot collide.
  const json::value id = 1;
  const std::string line = Request(id, *method, skill_params) + "\n";
  std::optional<json::object> response;
  bool overlong = false;
  std::string stdout_logs;  // the skill's other stdout lines, kept as logs
  runtime::CaptureOptions options;
  options.budget = p.budget;
  options.max_line = 4 << 20;
  options.on_stdout_line = [&](absl::string_view text, bool too_long) {
    if (too_long) {
      overlong = true;
      return true;
    }
    response = MatchResponse(text, id);
    if (!response.has_value() && stdout_logs.size() < p.budget) {
      absl::StrAppend(&stdout_logs, text.substr(0, p.budget - stdout_logs.size()), "\n");
    }
    return response.has_value();  // answered: the sandbox may go
  };
  runtime::Pool* pool = p.pool;
  runtime::Runner runner = [pool](const runtime::ExecRequest& r) { return pool->Run(r); };
  runtime::ExecRequest request = p.request;
  WatchForTheReader(&request);
  absl::StatusOr<runtime::CapturedRun> run = runtime::RunCaptured(runner, request, line, options);
  if (!run.ok()) return FromRunStatus(run.status());
  auto tail = [](const std::string& s) { return s.size() <= 4096 ? s : s.substr(s.size() - 4096); };
  if (!response.has_value()) {
    const runtime::ExecResult& r = run->result;
    std::string why = overlong ? "the skill wrote a stdout line longer than 4 MiB"
                      : r.reason == runtime::ExitReason::kTimeout
                          ? absl::StrCat("the skill did not answer within ", absl::FormatDuration(p.request.timeout))
                          : absl::StrCat("the skill ended (", runtime::ExitReasonName(r.reason), ", status ",
                                         r.ShellStatus(), ") without answering");
    json::object data{{"reason", std::string(runtime::ExitReasonName(r.reason))},
                      {"status", r.ShellStatus()},
                      {"stderr_tail", tail(run->err)},
                      {"stdout_tail", tail(run->out)}};
    if (r.reason == runtime::ExitReason::kSetupFailed) data["error"] = std::string(r.setup_error.message());
    return Error{kSkillFailed, why, std::move(data)};
  }
  json::object out;
  if (response->contains("result")) out["result"] = response->at("result");
  if (response->contains("error")) out["error"] = response->at("error");
  out["logs"] = ValidUtf8(run->err) ? json::value(run->err) : json::value(absl::Base64Escape(run->err));
  out["logs_truncated"] = run->err_truncated;
  out["stdout_logs"] = ValidUtf8(stdout_logs) ? json::value(stdout_logs) : json::value(absl::Base64Escape(stdout_logs));
  out["wall_ms"] = absl::ToDoubleMilliseconds(run->result.wall);
  out["profile"] = pool->name();
  return json::value(std::move(out));
}

Expected<json::value> Daemon::PoolConfigure(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"profile", "min_idle", "max_idle", "max_total", "max_age_s"})) return *bad;
  CUBICLE_RPC_ASSIGN_OR_RETURN(runtime::Pool * pool, FindPool(*params));
  runtime::PoolConfig c = pool->config();
  for (auto [key, field] : {std::pair{"min_idle", &c.min_idle}, {"max_idle", &c.max_idle}, {"max_total", &c.max_total}}) {
    CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> v, GetInt64(*params, key, false, 0, 4096));
    if (v.has_value()) *field = static_cast<size_t>(*v);
  }
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> age, GetInt64(*params, "max_age_s", false, 1, 86400));
  if (age.has_value()) c.max_age = absl::Seconds(*age);
  if (absl::Status st = pool->Configure(c); !st.ok()) return FromStatus(st, kInvalidParams);
  return PoolStatsJson();
}

Expected<json::value> Daemon::PoolWarm(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"profile", "count", "timeout_ms"})) return *bad;
  CUBICLE_RPC_ASSIGN_OR_RETURN(runtime::Pool * pool, FindPool(*params));
  runtime::PoolConfig c = pool->config();
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> count,
                               GetInt64(*params, "count", false, 0, static_cast<int64_t>(c.max_total)));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> timeout_ms, GetInt64(*params, "timeout_ms", false, 1, 600000));
  if (count.has_value()) {
    c.min_idle = static_cast<size_t>(*count);
    c.max_idle = std::max(c.max_idle, c.min_idle);
    if (absl::Status st = pool->Configure(c); !st.ok()) return FromStatus(st, kInvalidParams);
  }
  bool warm = pool->WaitWarm(absl::Milliseconds(timeout_ms.value_or(30000)));
  runtime::PoolStats s = pool->Stats();
  return json::value(json::object{{"profile", pool->name()}, {"warm", warm}, {"idle", s.idle}, {"min_idle", c.min_idle}});
}

json::value Daemon::Dispatch(const Call& call, Error* error) {
  auto take = [&](Expected<json::value> r) -> json::value {
    if (r.ok()) return std::move(r).value();
    *error = std::move(r).error();
    return nullptr;
  };
  if (call.method == "health") return Health();
  if (call.method == "pool.stats") return json::object{{"pools", PoolStatsJson()}};
  if (call.method == "pool.configure") return take(PoolConfigure(call.params));
  if (call.method == "pool.warm") return take(PoolWarm(call.params));
  if (call.method == "sandbox.run") return take(SandboxRun(call.params));
  if (call.method == "skill.call") return take(SkillCall(call.params));
  if (call.method == "exec.start") return take(ExecStart(call.params));
  if (call.method == "exec.status") return take(ExecStatus(call.params, false));
  if (call.method == "exec.wait") return take(ExecStatus(call.params, true));
  if (call.method == "exec.cancel") return take(ExecCancel(call.params));
  if (call.method == "probe") return ProbeToJson(runtime::Probe());
  if (call.method == "npu.list") return take(NpuList(*inventory_, call.params));
  if (call.method == "npu.broker.run") return take(NpuBrokerRun(config_.npu.broker, call.params));
  *error = Error{kMethodNotFound, absl::StrCat("no method named '", call.method, "'"), nullptr};
  return nullptr;
}

Daemon::Work Daemon::HandleLine(const std::string& line, std::function<void(std::string)> reply, bool may_run_here) {
  Incoming in = ParseLine(line, std::string::npos);
  if (in.entries.empty()) return {};
  // Every entry needing work goes to the workers as one task; the cap on
  // accepted requests bounds both the queue and the daemon's memory.
  if (stopping_) {
    std::vector<std::string> replies;
    for (const Entry& e : in.entries) {
      if (!e.NeedsReply()) continue;
      replies.push_back(e.error ? ErrorReply(e.call.id, *e.error)
                                : ErrorReply(e.call.id, Error{kShuttingDown, "the daemon is shutting down", nullptr}));
    }
    std::string out = in.batch ? Batch(replies) : (replies.empty() ? "" : replies.front());
    if (!out.empty()) reply(std::move(out));
    return {};
  }
  const bool runs_a_sandbox = !in.batch && in.entries.size() == 1 && !in.entries[0].error &&
                              (in.entries[0].call.method == "sandbox.run" || in.entries[0].call.method == "skill.call");
  const size_t cap = config_.max_concurrent + config_.max_queue;
  const size_t before = in_flight_.fetch_add(1);
  if (before >= cap) {
    in_flight_.fetch_sub(1);
    std::vector<std::string> replies;
    for (const Entry& e : in.entries) {
      if (!e.NeedsReply()) continue;
      replies.push_back(ErrorReply(e.call.id, e.error ? *e.error
                                                      : Error{kBusy,
                                                              absl::StrCat("busy: ", cap,
                                                                           " requests are running or queued"),
                                                              nullptr}));
    }
    std::string out = in.batch ? Batch(replies) : (replies.empty() ? "" : replies.front());
    if (!out.empty()) reply(std::move(out));
    return {};
  }
  auto work = [this, in = std::move(in), reply = std::move(reply)]() mutable {
    Slot slot(workers_->slots);
    // A request that runs a sandbox holds back every pool's refill and
    // teardown until its reply is out (runtime::Pool::Hold): they would
    // share the CPUs with it, and a refill's fork of this process makes
    // the reply's writes copy-on-write faults.
    std::vector<runtime::Pool::Hold> holds;
    for (const Entry& e : in.entries) {
      if (!e.error && (e.call.method == "sandbox.run" || e.call.method == "skill.call")) {
        holds.reserve(pools_.size());
        for (auto& [name, pool] : pools_) holds.push_back(pool->HoldBackground());
        break;
      }
    }
    std::vector<std::string> replies;
    for (Entry& e : in.entries) {
      if (e.error) {
        if (e.NeedsReply()) replies.push_back(ErrorReply(e.call.id, *e.error));
        continue;
      }
      Error error;
      error.code = 0;
      json::value result;
      try {
        result = Dispatch(e.call, &error);
      } catch (const std::exception& ex) {  // Boost.JSON's, caught at the edge
        error = Error{kInternalError, ex.what(), nullptr};
      }
      if (!e.NeedsReply()) continue;
      replies.push_back(error.code != 0 ? ErrorReply(e.call.id, error) : Result(e.call.id, result));
    }
    std::string out = in.batch ? Batch(replies) : (replies.empty() ? "" : replies.front());
    if (!out.empty()) reply(std::move(out));
    holds.clear();  // written (stdio) or queued for the socket's writer
    in_flight_.fetch_sub(1);
  };
  // Alone, a run of a sandbox runs where it was read: handing it to a
  // worker would put a wake-up of another thread (and of an idle CPU) on
  // its path. Only these: the reader watches stdin from the sandbox's wait
  // (WatchForTheReader), and nothing else here may block for long.
  if (may_run_here && before == 0 && runs_a_sandbox) return Work(std::move(work));
  asio::post(workers_->pool, std::move(work));
  return {};
}

namespace {

// One client on the Unix socket: lines in, replies out, in any order.
class SocketSession : public std::enable_shared_from_this<SocketSession> {
 public:
  SocketSession(Daemon* daemon, asio::local::stream_protocol::socket socket, size_t max_line)
      : daemon_(daemon), socket_(std::move(socket)), buffer_(max_line) {}

  void Start() { ReadLine(); }

 private:
  void ReadLine() {
    asio::async_read_until(socket_, buffer_, '\n', [self = shared_from_this()](boost::system::error_code ec, size_t n) {
      if (ec == asio::error::not_found) {  // the line outgrew the buffer
        self->Send(ErrorReply(nullptr, LineTooLongError(self->buffer_.max_size())));
        self->closing_ = true;
        return;
      }
      if (ec) return;  // EOF or closed: replies still pending keep us alive
      std::string line(asio::buffers_begin(self->buffer_.data()), asio::buffers_begin(self->buffer_.data()) + n);
      self->buffer_.consume(n);
      self->daemon_->HandleLine(line, [self](std::string reply) {
        asio::post(self->socket_.get_executor(), [self, reply = std::move(reply)]() mutable { self->Send(std::move(reply)); });
      });
      self->ReadLine();
    });
  }

  void Send(std::string reply) {
    queue_.push_back(std::move(reply) + "\n");
    if (queue_.size() == 1) WriteNext();
  }

  void WriteNext() {
    asio::async_write(socket_, asio::buffer(queue_.front()), [self = shared_from_this()](boost::system::error_code ec, size_t) {
      if (ec) return;
      self->queue_.pop_front();
      if (!self->queue_.empty()) {
        self->WriteNext();
      } else if (self->closing_) {
        boost::system::error_code ignored;
        self->socket_.shutdown(asio::local::stream_protocol::socket::shutdown_both, ignored);
      }
    });
  }

  Daemon* daemon_;
  asio::local::stream_protocol::socket socket_;
  asio::streambuf buffer_;
  std::deque<std::string> queue_;
  bool closing_ = false;
};

void Accept(Daemon* daemon, asio::local::stream_protocol::acceptor& acceptor, size_t max_line) {
  acceptor.async_accept([daemon, &acceptor, max_line](boost::system::error_code ec,
                                                      asio::local::stream_protocol::socket socket) {
    if (ec) return;  // closed at shutdown
    std::make_shared<SocketSession>(daemon, std::move(socket), max_line)->Start();
    Accept(daemon, acceptor, max_line);
  });
}

// The stdio transport: readers (stdin may be a pipe, a tty or a file,
// which epoll cannot watch) and serialized blocking writes to stdout.
//
// Two reader threads take turns reading. The one reading hands each line
// to the daemon; a sandbox run that would be the only request in flight
// comes back as work to run on this thread (HandleLine's `may_run_here`),
// which runs it while still holding the turn, with stdin watched from the
// sandbox's wait: only if another line comes meanwhile is the turn passed
// to the other thread, which reads on. A lone request so runs on the
// thread that read it, awake, instead of waiting for a worker's wake-up,
// and no other thread wakes at all unless there is something to read.
class StdioTransport {
 public:
  StdioTransport(Daemon* daemon, size_t max_line, std::function<void()> on_eof)
      : daemon_(daemon), max_line_(max_line), on_eof_(std::move(on_eof)) {
    if (::pipe2(wake_, O_CLOEXEC) != 0) wake_[0] = wake_[1] = -1;
    for (std::thread& t : readers_) t = std::thread([this] { Take(); });
  }
  ~StdioTransport() {
    if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);  // never drained: ends the reading
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    turn_.notify_all();
    for (std::thread& t : readers_) t.join();
    for (int fd : wake_) if (fd >= 0) ::close(fd);
  }

 private:
  void Write(const std::string& reply) {
    std::lock_guard<std::mutex> lock(write_mu_);
    std::string line = reply + "\n";
    for (size_t off = 0; off < line.size();) {
      ssize_t n = ::write(STDOUT_FILENO, line.data() + off, line.size() - off);
      if (n < 0) {
        if (errno == EINTR) continue;
        return;  // the orchestrator is gone
      }
      off += static_cast<size_t>(n);
    }
  }

  // One reader thread: waits for the turn, then reads and runs what comes
  // back, until the turn was passed on during a run, or reading ends.
  void Take() {
    RegisterHotStack();  // requests run here: see base/hot_memory.h
    RegisterHotHeap();
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        turn_.wait(lock, [&] { return done_ || !reading_; });
        if (done_) return;
        reading_ = true;
      }
      bool passed = false;
      while (!passed) {
        Daemon::Work work = Read();
        if (!work) {  // stdin ended or shutting down: done_ is set
          turn_.notify_all();
          return;
        }
        const ReaderWatch watch{STDIN_FILENO, [&] {
                                  passed = true;
                                  {
                                    std::lock_guard<std::mutex> lock(mu_);
                                    reading_ = false;
                                  }
                                  turn_.notify_one();
                                }};
        t_reader_watch = &watch;
        std::move(work)();
        t_reader_watch = nullptr;
      }
    }
  }

  // The turn's reading: the whole lines read so far, then blocking reads,
  // until a line's work is to run on this thread (returned), or stdin ends
  // or the transport is shut down (done_ set, nothing returned). Only the
  // thread with the turn touches pending_ and discarding_.
  Daemon::Work Read() {
    auto reply = [this](std::string reply) { Write(reply); };
    char buf[65536];
    for (;;) {
      size_t nl;
      while ((nl = pending_.find('\n')) != std::string::npos) {
        std::string line = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        if (discarding_) {
          discarding_ = false;
          continue;
        }
        Daemon::Work work = daemon_->HandleLine(line, reply, /*may_run_here=*/true);
        if (work) return work;
      }
      if (pending_.size() > max_line_) {
        if (!discarding_) Write(ErrorReply(nullptr, LineTooLongError(max_line_)));
        discarding_ = true;
        pending_.clear();
      }
      struct pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return Stop(/*eof=*/true);
      }
      if (fds[1].revents) return Stop(/*eof=*/false);  // shutting down
      ssize_t n = ::read(STDIN_FILENO, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Stop(/*eof=*/true);
      pending_.append(buf, static_cast<size_t>(n));
    }
  }

  // The end of reading. At EOF a last line without "\n" still counts (to
  // the workers), and the daemon is told.
  Daemon::Work Stop(bool eof) {
    if (eof) {
      if (!pending_.empty() && !discarding_) {
        (void)daemon_->HandleLine(pending_, [this](std::string reply) { Write(reply); });
      }
      pending_.clear();
      on_eof_();
    }
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    return {};
  }

  Daemon* daemon_;
  size_t max_line_;
  std::function<void()> on_eof_;
  int wake_[2] = {-1, -1};
  std::mutex write_mu_;
  std::mutex mu_;
  std::condition_variable turn_;
  bool reading_ = false;  // a reader has the turn
  bool done_ = false;     // stdin ended or the transport is shutting down
  std::string pending_;   // read, not yet a whole line
  bool discarding_ = false;
  std::thread readers_[2];
};

}  // namespace

namespace {

// A listening Unix socket at `path` (a stale socket there is replaced),
// created under a umask so that it is never reachable with wider
// permissions than `mode`, even between bind and chmod.
absl::StatusOr<std::unique_ptr<asio::local::stream_protocol::acceptor>> ListenUnix(asio::io_context& io,
                                                                                   const std::string& path,
                                                                                   uint32_t mode) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(path.c_str());
  boost::system::error_code ec;
  auto acceptor = std::make_unique<asio::local::stream_protocol::acceptor>(io);
  acceptor->open(asio::local::stream_protocol(), ec);
  if (!ec) {
    const mode_t old = ::umask(0777 & ~mode);
    acceptor->bind(asio::local::stream_protocol::endpoint(path), ec);
    ::umask(old);
  }
  if (!ec && ::chmod(path.c_str(), mode) != 0) ec = boost::system::error_code(errno, boost::system::system_category());
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return absl::InternalError(absl::StrCat(path, ": ", ec.message()));
  return acceptor;
}

// Each connection gets one HTTP/1.0 response with the metrics at once. The
// sending side is then shut down and whatever the client sends (a
// scraper's GET) is read and dropped until it closes — at most 64 KiB and
// 5 s — so a client that writes after the response never meets a closed
// socket (EPIPE).
class MetricsConnection : public std::enable_shared_from_this<MetricsConnection> {
 public:
  MetricsConnection(asio::local::stream_protocol::socket socket, std::string body)
      : socket_(std::move(socket)), timer_(socket_.get_executor()) {
    reply_ = absl::StrCat("HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: ",
                          body.size(), "\r\nConnection: close\r\n\r\n", body);
  }
  void Start() {
    timer_.expires_after(std::chrono::seconds(5));
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) self->Close();
    });
    asio::async_write(socket_, asio::buffer(reply_), [self = shared_from_this()](boost::system::error_code ec, size_t) {
      if (ec) return self->Close();
      boost::system::error_code ignored;
      self->socket_.shutdown(asio::socket_base::shutdown_send, ignored);
      self->Drain();
    });
  }

 private:
  void Drain() {
    socket_.async_read_some(asio::buffer(scratch_), [self = shared_from_this()](boost::system::error_code ec, size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ > (64u << 10)) return self->Close();
      self->Drain();
    });
  }
  void Close() {
    boost::system::error_code ignored;
    timer_.cancel();
    socket_.close(ignored);
  }

  asio::local::stream_protocol::socket socket_;
  asio::steady_timer timer_;
  std::string reply_;
  std::array<char, 4096> scratch_;
  size_t drained_ = 0;
};

void ServeMetrics(Daemon* daemon, asio::local::stream_protocol::acceptor& acceptor) {
  acceptor.async_accept([daemon, &acceptor](boost::system::error_code ec, asio::local::stream_protocol::socket s) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) std::make_shared<MetricsConnection>(std::move(s), daemon->MetricsText())->Start();
    ServeMetrics(daemon, acceptor);
  });
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open(", tmp, ")"));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return ErrnoStatus(err, absl::StrCat("write(", tmp, ")"));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus(err, absl::StrCat("rename(", tmp, ", ", path, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

int Daemon::Serve(const ServeOptions& options) {
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  asio::signal_set signals(io, SIGTERM, SIGINT);
  std::unique_ptr<asio::local::stream_protocol::acceptor> acceptor;
  if (!options.socket_path.empty()) {
    absl::StatusOr<std::unique_ptr<asio::local::stream_protocol::acceptor>> made =
        ListenUnix(io, options.socket_path, options.socket_mode);
    if (!made.ok()) {
      std::fprintf(stderr, "cubicle serve: socket %s\n", std::string(made.status().message()).c_str());
      return 1;
    }
    acceptor = *std::move(made);
    Accept(this, *acceptor, options.max_line_bytes);
  }
  // Metrics: a socket answering every connection, or a file rewritten.
  std::unique_ptr<asio::local::stream_protocol::acceptor> metrics_acceptor;
  asio::steady_timer metrics_timer(io);
  std::function<void()> write_metrics_file;
  if (options.metrics.has_value()) {
    const std::string& path = options.metrics->path;
    if (options.metrics->unix_socket) {
      absl::StatusOr<std::unique_ptr<asio::local::stream_protocol::acceptor>> made =
          ListenUnix(io, path, options.socket_mode);
      if (!made.ok()) {
        std::fprintf(stderr, "cubicle serve: metrics socket %s\n", std::string(made.status().message()).c_str());
        return 1;
      }
      metrics_acceptor = *std::move(made);
      ServeMetrics(this, *metrics_acceptor);
    } else {
      write_metrics_file = [&, path] {
        absl::Status written = WriteFileAtomically(path, MetricsText());
        if (!written.ok()) options.warn(absl::StrCat("metrics file: ", written.message()));
        if (stopping_.load()) return;
        metrics_timer.expires_after(std::chrono::seconds(5));
        metrics_timer.async_wait([&](boost::system::error_code ec) {
          if (!ec) write_metrics_file();
        });
      };
      write_metrics_file();
    }
  }
  // Shutdown: stop taking requests, let in-flight ones finish, then stop.
  asio::steady_timer drain_timer(io);
  std::function<void()> check_drained = [&] {
    if (in_flight_.load() == 0) {
      work.reset();
      io.stop();
      return;
    }
    drain_timer.expires_after(std::chrono::milliseconds(10));
    drain_timer.async_wait([&](boost::system::error_code) { check_drained(); });
  };
  auto begin_shutdown = [&] {
    if (stopping_.exchange(true)) return;
    boost::system::error_code ignored;
    if (acceptor) acceptor->close(ignored);
    if (metrics_acceptor) metrics_acceptor->close(ignored);
    metrics_timer.cancel();
    check_drained();
  };
  signals.async_wait([&](boost::system::error_code ec, int) {
    if (!ec) begin_shutdown();
  });
  // A daemon serving its spawner's stdio belongs to that process: when it
  // exits (however it dies), the daemon exits at once, and so does every
  // sandbox (each init dies with the daemon thread that made it; their
  // cgroups are swept at the next start, as after a SIGKILL of the
  // daemon). Watched through a pidfd of the parent process rather than
  // PR_SET_PDEATHSIG, which follows the parent *thread*: an orchestrator
  // that spawned the daemon from a worker thread would lose it when that
  // thread ends. A socket-only daemon is a service and outlives its parent.
  std::unique_ptr<asio::posix::stream_descriptor> parent_watch;
  if (options.die_with_parent) {
    const pid_t parent = ::getppid();
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, parent, 0));
    if (pidfd < 0) {
      // No pidfds (Linux < 5.3): the thread-bound signal is the best there is.
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
        std::fprintf(stderr, "cubicle serve: prctl(PR_SET_PDEATHSIG): %s\n", std::strerror(errno));
        return 1;
      }
    } else {
      parent_watch = std::make_unique<asio::posix::stream_descriptor>(io, pidfd);
    }
    if (::getppid() != parent) {  // gone before the watch existed
      std::fprintf(stderr, "cubicle serve: the parent process exited before the daemon started\n");
      return 1;
    }
    if (parent_watch) {
      parent_watch->async_wait(asio::posix::stream_descriptor::wait_read,
                               [&options, parent](boost::system::error_code ec) {
                                 if (ec) return;
                                 options.warn(absl::StrCat("the parent process ", parent,
                                                           " exited: the daemon and its sandboxes end with it"));
                                 ::_exit(1);
                               });
    }
  }
  std::unique_ptr<StdioTransport> stdio;
  if (options.stdio) {
    stdio = std::make_unique<StdioTransport>(this, options.max_line_bytes,
                                             [&] { asio::post(io, [&] { begin_shutdown(); }); });
  }
  io.run();
  stdio.reset();
  workers_->pool.join();
  if (!options.socket_path.empty()) ::unlink(options.socket_path.c_str());
  if (options.metrics.has_value()) {
    if (options.metrics->unix_socket) {
      ::unlink(options.metrics->path.c_str());
    } else {
      WriteFileAtomically(options.metrics->path, MetricsText()).IgnoreError();  // the final counts
    }
  }
  pools_.clear();  // every zygote killed, every cgroup removed
  return 0;
}

}  // namespace cubicle::rpc
