// Sessions through the `cubicle serve` binary (issue 29): what running in a
// session costs next to a one-shot sandbox, and how fast files move in and
// out of a session's workspace.
//
// One daemon, `$CUBICLE_BINARY serve --socket DIR/cubicle.sock --stdio
// --config DIR/config.json --state-dir DIR/state` (the built-in config; the
// state directory fresh, 0700), with four sessions made before anything is
// timed. Then, one request at a time on one connection, each request
// after the pools are warm and quiet (so each times a hand-off, not a
// refill), interleaved round by round with the order rotated each round:
//
//   - `sandbox.run /bin/true` (profile shell): the baseline;
//   - `session.exec /bin/true` in a shell session, collecting outputs (the
//     default) and with `"collect_outputs": false`;
//   - the same three for `python3 -I -c pass` on the python profile (the
//     built-in warm interpreter is `python3 -I`, so all three are served by
//     a forked, preloaded interpreter; the result's `warm` is checked);
//   - `files.put` and `files.get` of 1 MiB and 16 MiB of noise (the 16 MiB
//     pair every sixth round), against `cat` moving the same bytes through
//     a pipe between this process and a file on /dev/shm (a workspace is a
//     tmpfs): a process start and one copy, the floor of a request that
//     carries bytes over a socket into a file.
//
// Per request: the client's round trip (request line written to reply line
// read; the request line is built and a files.get reply decoded outside
// it), and from an execution's result its `wall_ms`, `setup_ms` and
// `steps`, whose medians say where a difference comes from. Then sustained
// load: 2 clients, each on its own connection, back to back for 10 s:
// `sandbox.run /bin/true` and then `session.exec /bin/true`, each client in
// its own session (executions/s, latency, the shell pool's hit ratio). It
// ends with a Markdown summary for bench/README.md.
//
// A plain driver, not Google Benchmark: the contenders share one daemon and
// its sessions and are interleaved request by request (Benchmark's random
// interleaving reorders whole repetitions of one benchmark at a time), a
// sample's per-step times come from the daemon's reply and are summarized
// beside its latency, and the summary divides one contender's figures by
// another's.
//
// `CUBICLE_BENCH_REPS` (default 150): rounds, so samples per contender (a
// sixth of them for 16 MiB). `CUBICLE_SESSION_LOAD_S` (default 10): the
// seconds of each load run. SIGINT or SIGTERM ends the measuring early and
// still destroys the sessions, stops the daemon and removes its files and
// the workspaces' mounts. Run as root (sessions mount a tmpfs each).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/bench_stats.h"
#include "bench/serve_daemon.h"
#include "rpc/config.h"

namespace cubicle::bench {
namespace {
namespace json = boost::json;

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

constexpr auto kCallTimeout = std::chrono::seconds(60);
constexpr size_t kMiB = 1 << 20;

// ---- One request, its latency and what its reply says --------------------------

struct Outcome {
  double ms = 0;
  std::string error;                    // "" when it did what it should
  std::map<std::string, double> parts;  // wall_ms, setup_ms, step:NAME
};
using Operation = std::function<Outcome()>;

struct Series {
  std::string label;
  std::vector<double> ms;
  std::map<std::string, std::vector<double>> parts;
  std::map<std::string, int> errors;
  size_t bytes = 0;  // moved per request, for MiB/s
  void Add(Outcome o) {
    if (!o.error.empty()) {
      ++errors[o.error];
      return;
    }
    ms.push_back(o.ms);
    for (const auto& [k, v] : o.parts) parts[k].push_back(v);
  }
  double P50() const { return Percentile<50>(ms); }
  double P99() const { return Percentile<99>(ms); }
  double Part50(const std::string& k) const {
    auto it = parts.find(k);
    return it == parts.end() ? NAN : Percentile<50>(it->second);
  }
};

std::string Failures(const std::map<std::string, int>& errors) {
  if (errors.empty()) return "0";
  std::string s;
  for (const auto& [why, n] : errors) absl::StrAppend(&s, s.empty() ? "" : "; ", n, "× ", why);
  return s;
}

absl::StatusOr<json::value> Result(Connection& c, const std::string& line, double* ms = nullptr) {
  const Clock::time_point t0 = Clock::now();
  absl::StatusOr<std::string> reply = c.Call(line, kCallTimeout);
  if (ms != nullptr) *ms = MsBetween(t0, Clock::now());
  if (!reply.ok()) return reply.status();
  try {
    json::value v = json::parse(*reply);
    if (const json::value* e = v.as_object().if_contains("error")) {
      return absl::InternalError(absl::StrCat("error ", json::serialize(*e)));
    }
    return v.as_object().at("result");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("unexpected reply (", e.what(), ")"));
  }
}

std::string Request(const std::string& method, json::object params) {
  static std::atomic<int64_t> next_id{1};
  return json::serialize(
      json::object{{"jsonrpc", "2.0"}, {"id", next_id++}, {"method", method}, {"params", std::move(params)}});
}

// An execution (`sandbox.run` or `session.exec`) that must exit 0, and
// warm when `warm` says so; its wall, setup and step times as parts.
Operation ExecOperation(Connection* c, std::string method, json::object params, bool warm) {
  return [c, method = std::move(method), params = std::move(params), warm]() -> Outcome {
    const std::string line = Request(method, params);
    Outcome o;
    absl::StatusOr<json::value> r = Result(*c, line, &o.ms);
    if (!r.ok()) return {0, std::string(r.status().message()), {}};
    try {
      const json::object& res = r->as_object();
      if (res.at("reason").as_string() != "exited" || res.at("exit_code").to_number<int64_t>() != 0) {
        return {0, absl::StrCat("ended ", json::serialize(res.at("reason"))), {}};
      }
      const json::value* w = res.if_contains("warm");
      const bool served_warm = w != nullptr && w->is_bool() && w->as_bool();
      if (warm && !served_warm) return {0, "not served warm", {}};
      o.parts["wall_ms"] = res.at("wall_ms").to_number<double>();
      o.parts["setup_ms"] = res.at("setup_ms").to_number<double>();
      for (const json::value& s : res.at("steps").as_array()) {
        o.parts[absl::StrCat("step:", std::string(s.at("step").as_string()))] += s.at("ms").to_number<double>();
      }
    } catch (const std::exception& e) {
      return {0, absl::StrCat("unexpected result (", e.what(), ")"), {}};
    }
    return o;
  };
}

// files.put of `data` to `path`; the request line is made once.
Operation PutOperation(Connection* c, const std::string& session, const std::string& path, const std::string& data) {
  auto params = json::object{{"session", session}, {"path", path}, {"data", absl::Base64Escape(data)}};
  auto line = std::make_shared<std::string>(Request("files.put", std::move(params)));
  return [c, line]() -> Outcome {
    Outcome o;
    absl::StatusOr<json::value> r = Result(*c, *line, &o.ms);
    if (!r.ok()) return {0, std::string(r.status().message()), {}};
    return o;
  };
}

// files.get of `path`, whose bytes must be `want` (decoded after the clock stops).
Operation GetOperation(Connection* c, const std::string& session, const std::string& path, const std::string* want) {
  auto line = std::make_shared<std::string>(Request("files.get", json::object{{"session", session}, {"path", path}}));
  return [c, line, want]() -> Outcome {
    Outcome o;
    absl::StatusOr<json::value> r = Result(*c, *line, &o.ms);
    if (!r.ok()) return {0, std::string(r.status().message()), {}};
    std::string got;
    const json::value* data = r->as_object().if_contains("data");
    if (data == nullptr || !data->is_string() ||
        !absl::Base64Unescape(absl::string_view(data->as_string().data(), data->as_string().size()), &got) ||
        got != *want) {
      return {0, "files.get: not the bytes put", {}};
    }
    return o;
  };
}

// ---- The floor: cat through a pipe --------------------------------------------------

// `cat` with `in` as stdin and `out` as stdout, spawned; its pid or -1.
pid_t SpawnCat(const std::vector<std::string>& args, int in, int out) {
  std::vector<char*> argv;
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in, 0);
  posix_spawn_file_actions_adddup2(&actions, out, 1);
  posix_spawn_file_actions_adddup2(&actions, DevNull(), 2);
  pid_t pid = -1;
  const int err = ::posix_spawn(&pid, "/bin/cat", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return err == 0 ? pid : -1;
}

std::string Reaped(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "" : "cat failed";
}

// The put floor: `data` written into a pipe, `cat > dest`.
Operation CatInOperation(std::string dest, const std::string* data) {
  return [dest = std::move(dest), data]() -> Outcome {
    const Clock::time_point t0 = Clock::now();
    Fd file(::open(dest.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    int p[2];
    if (!file || ::pipe2(p, O_CLOEXEC) != 0) return {0, "open or pipe2 failed", {}};
    Fd read_end(p[0]), write_end(p[1]);
    const pid_t pid = SpawnCat({"cat"}, read_end.get(), file.get());
    if (pid < 0) return {0, "posix_spawn(cat) failed", {}};
    read_end.reset();
    file.reset();
    for (size_t off = 0; off < data->size();) {
      const ssize_t n = ::write(write_end.get(), data->data() + off, data->size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      off += static_cast<size_t>(n);
    }
    write_end.reset();
    Outcome o;
    o.error = Reaped(pid);
    o.ms = MsBetween(t0, Clock::now());
    return o;
  };
}

// The get floor: `cat source` into a pipe, read to its end.
Operation CatOutOperation(std::string source, size_t size) {
  return [source = std::move(source), size]() -> Outcome {
    const Clock::time_point t0 = Clock::now();
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return {0, "pipe2 failed", {}};
    Fd read_end(p[0]), write_end(p[1]);
    const pid_t pid = SpawnCat({"cat", source}, DevNull(), write_end.get());
    if (pid < 0) return {0, "posix_spawn(cat) failed", {}};
    write_end.reset();
    std::string got;
    got.reserve(size);
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(read_end.get(), buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    Outcome o;
    o.error = Reaped(pid);
    o.ms = MsBetween(t0, Clock::now());
    if (o.error.empty() && got.size() != size) o.error = "cat: short read";
    return o;
  };
}

// ---- Sustained load --------------------------------------------------------------

struct LoadRun {
  std::string label;
  double seconds = 0;
  std::vector<double> ms;
  std::map<std::string, int> errors;
  double hit_ratio = NAN;
  double PerSecond() const { return seconds > 0 ? static_cast<double>(ms.size()) / seconds : 0; }
};

// Each client its own connection and operation, back to back for `length`.
LoadRun RunLoad(const std::string& label, const std::string& socket_path, Connection& control,
                const std::vector<std::function<Operation(Connection*)>>& clients, std::chrono::milliseconds length) {
  LoadRun run;
  run.label = label;
  std::vector<std::unique_ptr<Connection>> connections;
  std::vector<Operation> ops;
  for (const auto& make : clients) {
    absl::StatusOr<Connection> c = Connection::Open(socket_path);
    if (!c.ok()) {
      ++run.errors[std::string(c.status().message())];
      return run;
    }
    connections.push_back(std::make_unique<Connection>(*std::move(c)));
    ops.push_back(make(connections.back().get()));
  }
  WaitQuiet(control, std::chrono::seconds(60));
  absl::StatusOr<PoolsSnapshot> before = ReadPoolStats(control);
  std::mutex mu;
  std::latch start(static_cast<ptrdiff_t>(ops.size()) + 1);
  std::vector<std::thread> threads;
  Clock::time_point deadline;
  for (Operation& op : ops) {
    threads.emplace_back([&] {
      std::vector<double> mine;
      std::map<std::string, int> errors;
      start.arrive_and_wait();
      while (Clock::now() < deadline && !g_stop.load()) {
        Outcome o = op();
        if (o.error.empty()) {
          mine.push_back(o.ms);
        } else {
          ++errors[o.error];
        }
      }
      std::lock_guard lock(mu);
      run.ms.insert(run.ms.end(), mine.begin(), mine.end());
      for (const auto& [why, n] : errors) run.errors[why] += n;
    });
  }
  const Clock::time_point begin = Clock::now();
  deadline = begin + length;
  start.arrive_and_wait();
  for (std::thread& t : threads) t.join();
  run.seconds = MsBetween(begin, Clock::now()) / 1000;
  absl::StatusOr<PoolsSnapshot> after = ReadPoolStats(control);
  if (before.ok() && after.ok() && before->count("shell") != 0 && after->count("shell") != 0) {
    run.hit_ratio = Delta(after->at("shell"), before->at("shell")).HitRatio();
  }
  return run;
}

// ---- Clean-up --------------------------------------------------------------------

// Mounts at or below `dir` (the workspaces' tmpfs a daemon leaves on
// purpose: they outlive it), deepest first.
std::vector<std::string> MountsUnder(const std::string& dir) {
  std::vector<std::string> out;
  std::ifstream in("/proc/self/mounts");
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string source, target;
    if (!(fields >> source >> target)) continue;
    if (target == dir || absl::StartsWith(target, dir + "/")) out.push_back(target);
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

// ---- The program -----------------------------------------------------------------

std::string Num(double v, int decimals = 2) {
  if (std::isnan(v)) return "–";
  return absl::StrFormat("%.*f", decimals, v);
}

struct Contender {
  std::string key;
  Operation op;
  int every = 1;  // runs in every `every`-th round
};

int Run() {
  const char* binary_env = std::getenv("CUBICLE_BINARY");
  const std::string binary = binary_env != nullptr && *binary_env != '\0' ? binary_env : CUBICLE_BINARY_PATH;
  const int rounds = Repetitions(150);
  double load_s = 10;
  if (const char* s = std::getenv("CUBICLE_SESSION_LOAD_S"); s != nullptr && (!absl::SimpleAtod(s, &load_s) || load_s <= 0)) {
    std::fprintf(stderr, "session_bench: CUBICLE_SESSION_LOAD_S=%s: expected seconds > 0\n", s);
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  absl::StatusOr<TempDir> dir = TempDir::Make("/tmp/cubicle-session-bench-");
  absl::StatusOr<TempDir> shm = TempDir::Make("/dev/shm/cubicle-session-bench-");
  if (!dir.ok() || !shm.ok()) {
    std::fprintf(stderr, "session_bench: %s\n", std::string((dir.ok() ? shm.status() : dir.status()).message()).c_str());
    return 1;
  }
  const std::string state_dir = dir->Child("state");
  if (::mkdir(state_dir.c_str(), 0700) != 0) {
    std::fprintf(stderr, "session_bench: mkdir(%s): %s\n", state_dir.c_str(), std::strerror(errno));
    return 1;
  }
  const std::string config_path = dir->Child("config.json");
  std::ofstream(config_path) << rpc::DefaultConfigJson();
  const std::string socket_path = dir->Child("cubicle.sock");
  const std::string log_path = dir->Child("serve.log");
  const std::string started = Now();
  const std::string start_load = LoadAverage();

  absl::StatusOr<std::unique_ptr<ServeDaemon>> daemon =
      ServeDaemon::Start(binary, config_path, socket_path, log_path, {"--state-dir", state_dir});
  if (!daemon.ok()) {
    std::ifstream log(log_path);
    std::fprintf(stderr, "session_bench: %s\n%s", std::string(daemon.status().message()).c_str(),
                 std::string((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>()).c_str());
    return 1;
  }
  absl::StatusOr<Connection> control = Connection::Open(socket_path);
  absl::StatusOr<Connection> client = Connection::Open(socket_path);
  if (!control.ok() || !client.ok()) {
    std::fprintf(stderr, "session_bench: cannot connect to %s\n", socket_path.c_str());
    return 1;
  }

  // The sessions, made before anything is timed.
  const std::vector<std::pair<std::string, std::string>> sessions = {
      {"bench-shell", "shell"}, {"bench-python", "python"}, {"bench-files", "shell"},
      {"bench-load-1", "shell"}, {"bench-load-2", "shell"}};
  std::vector<std::string> made;
  int status = 0;
  for (const auto& [key, profile] : sessions) {
    absl::StatusOr<json::value> r =
        Result(*control, Request("session.create", json::object{{"session", key}, {"profile", profile}}));
    if (!r.ok()) {
      std::fprintf(stderr, "session_bench: session.create %s: %s\n", key.c_str(), std::string(r.status().message()).c_str());
      status = 1;
      break;
    }
    made.push_back(key);
  }

  std::map<std::string, Series> series;
  std::vector<LoadRun> load;
  std::string noise_1, noise_16;
  if (status == 0) {
    std::mt19937_64 rng(29);
    auto noise = [&](size_t n) {
      std::string s(n, '\0');
      for (size_t i = 0; i < n; i += 8) {
        const uint64_t v = rng();
        std::memcpy(s.data() + i, &v, std::min<size_t>(8, n - i));
      }
      return s;
    };
    noise_1 = noise(kMiB);
    noise_16 = noise(16 * kMiB);
    const std::string src_1 = shm->Child("src-1"), src_16 = shm->Child("src-16");
    std::ofstream(src_1, std::ios::binary) << noise_1;
    std::ofstream(src_16, std::ios::binary) << noise_16;

    Connection* c = &*client;
    const json::array true_argv{"/bin/true"};
    const json::array python_argv{"python3", "-I", "-c", "pass"};
    std::vector<Contender> contenders = {
        {"run_true", ExecOperation(c, "sandbox.run", {{"argv", true_argv}}, false)},
        {"exec_true", ExecOperation(c, "session.exec", {{"session", "bench-shell"}, {"argv", true_argv}}, false)},
        {"exec_true_nocollect",
         ExecOperation(c, "session.exec",
                       {{"session", "bench-shell"}, {"argv", true_argv}, {"collect_outputs", false}}, false)},
        {"run_python", ExecOperation(c, "sandbox.run", {{"profile", "python"}, {"argv", python_argv}}, true)},
        {"exec_python", ExecOperation(c, "session.exec", {{"session", "bench-python"}, {"argv", python_argv}}, true)},
        {"exec_python_nocollect",
         ExecOperation(c, "session.exec",
                       {{"session", "bench-python"}, {"argv", python_argv}, {"collect_outputs", false}}, true)},
        {"put_1", PutOperation(c, "bench-files", "uploads/one", noise_1)},
        {"get_1", GetOperation(c, "bench-files", "uploads/one", &noise_1)},
        {"cat_in_1", CatInOperation(shm->Child("dst-1"), &noise_1)},
        {"cat_out_1", CatOutOperation(src_1, kMiB)},
        {"put_16", PutOperation(c, "bench-files", "uploads/sixteen", noise_16), 6},
        {"get_16", GetOperation(c, "bench-files", "uploads/sixteen", &noise_16), 6},
        {"cat_in_16", CatInOperation(shm->Child("dst-16"), &noise_16), 6},
        {"cat_out_16", CatOutOperation(src_16, 16 * kMiB), 6},
    };
    for (const Contender& k : contenders) {
      series[k.key].label = k.key;
      series[k.key].bytes = absl::EndsWith(k.key, "_16") ? 16 * kMiB : kMiB;
    }

    // Untimed: each path a few times (page cache, .pyc, the daemon's first
    // use of each session); a get needs its put first.
    for (int i = 0; i < 3; ++i) {
      for (Contender& k : contenders) {
        Outcome o = k.op();
        if (!o.error.empty()) std::fprintf(stderr, "session_bench: warm-up %s: %s\n", k.key.c_str(), o.error.c_str());
      }
    }
    if (!WaitQuiet(*control, std::chrono::seconds(60)).second) {
      std::fprintf(stderr, "session_bench: the pools were not warm and quiet within 60 s\n");
    }

    // Interleaved: each round every contender once (the 16 MiB ones every
    // sixth round), the order rotated by one each round; the pools warm
    // and quiet before each request. A put precedes its get in every
    // rotation but the ones that split the pair, where the get reads the
    // previous round's bytes (the same).
    const Clock::time_point t0 = Clock::now();
    for (int r = 0; r < rounds && !g_stop.load(); ++r) {
      for (size_t i = 0; i < contenders.size(); ++i) {
        Contender& k = contenders[(i + static_cast<size_t>(r)) % contenders.size()];
        if (r % k.every != 0) continue;
        WaitQuiet(*control, std::chrono::seconds(10));
        series[k.key].Add(k.op());
      }
      if ((r + 1) % 20 == 0) {
        std::fprintf(stderr, "session_bench: round %d of %d, %.0f s\n", r + 1, rounds,
                     MsBetween(t0, Clock::now()) / 1000);
      }
    }

    // Sustained load: two clients back to back, one-shot and in sessions.
    const auto length = std::chrono::milliseconds(std::lround(load_s * 1000));
    auto one_shot = [&](Connection* conn) { return ExecOperation(conn, "sandbox.run", {{"argv", true_argv}}, false); };
    auto in_session = [&](const std::string& key) {
      return [&, key](Connection* conn) {
        return ExecOperation(conn, "session.exec", {{"session", key}, {"argv", true_argv}}, false);
      };
    };
    if (!g_stop.load()) load.push_back(RunLoad("sandbox.run", socket_path, *control, {one_shot, one_shot}, length));
    if (!g_stop.load()) {
      load.push_back(RunLoad("session.exec", socket_path, *control,
                             {in_session("bench-load-1"), in_session("bench-load-2")}, length));
    }
    for (const LoadRun& l : load) {
      std::fprintf(stderr, "session_bench: load %s: %.1f/s, P50 %.2f, P99 %.2f ms, failed: %s\n", l.label.c_str(),
                   l.PerSecond(), Percentile<50>(l.ms), Percentile<99>(l.ms), Failures(l.errors).c_str());
    }
  }
  const std::string end_load = LoadAverage();

  // Clean-up, whatever happened above: the sessions destroyed without an
  // archive, the daemon stopped, any workspace mount it left unmounted.
  for (const std::string& key : made) {
    absl::StatusOr<json::value> r =
        Result(*control, Request("session.destroy", json::object{{"session", key}, {"archive", false}}));
    if (!r.ok()) {
      std::fprintf(stderr, "session_bench: session.destroy %s: %s\n", key.c_str(), std::string(r.status().message()).c_str());
    }
  }
  const std::string stopped = (*daemon)->Stop();
  for (const std::string& m : MountsUnder(dir->path())) {
    std::fprintf(stderr, "session_bench: %s still mounted after the daemon stopped: unmounting it\n", m.c_str());
    ::umount2(m.c_str(), MNT_DETACH);
  }
  std::ifstream log(log_path);
  std::vector<std::string> log_lines;
  for (std::string line; std::getline(log, line) && log_lines.size() < 1000;) log_lines.push_back(line);
  std::fprintf(stderr, "session_bench: cubicle serve %s; %zu lines in its log\n", stopped.c_str(), log_lines.size());
  for (size_t i = 0; i < log_lines.size() && i < 10; ++i) std::fprintf(stderr, "  %s\n", log_lines[i].c_str());
  if (status != 0 || series.empty()) return status;

  // ---- The summary ----
  std::printf("cubicle_session_bench, %s, load average %s at the start, %s at the end; binary %s; built-in config; "
              "%d rounds.\n\n",
              started.c_str(), start_load.c_str(), end_load.c_str(), binary.c_str(), rounds);
  auto s = [&](const char* k) -> const Series& { return series.at(k); };
  struct Row {
    const char* key;
    const char* label;
  };
  const std::vector<Row> exec_rows = {
      {"run_true", "`sandbox.run /bin/true` (shell)"},
      {"exec_true", "`session.exec /bin/true` (shell session)"},
      {"exec_true_nocollect", "the same, `collect_outputs: false`"},
      {"run_python", "`sandbox.run python3 -I -c pass` (python, warm)"},
      {"exec_python", "`session.exec python3 -I -c pass` (python session, warm)"},
      {"exec_python_nocollect", "the same, `collect_outputs: false`"},
  };
  std::printf("| one at a time, quiet warm pools, ms | n | P50 | P99 | result `wall_ms` P50 | round trip − `wall_ms` "
              "P50 | failed |\n|---|---:|---:|---:|---:|---:|---|\n");
  for (const Row& row : exec_rows) {
    const Series& x = s(row.key);
    std::vector<double> outside;
    const auto& wall = x.parts.count("wall_ms") != 0 ? x.parts.at("wall_ms") : std::vector<double>{};
    for (size_t i = 0; i < x.ms.size() && i < wall.size(); ++i) outside.push_back(x.ms[i] - wall[i]);
    std::printf("| %s | %zu | %s | %s | %s | %s | %s |\n", row.label, x.ms.size(), Num(x.P50()).c_str(),
                Num(x.P99()).c_str(), Num(x.Part50("wall_ms")).c_str(), Num(Percentile<50>(outside)).c_str(),
                Failures(x.errors).c_str());
  }
  const std::vector<Row> file_rows = {
      {"put_1", "`files.put` 1 MiB"},        {"cat_in_1", "`cat > file` 1 MiB"},
      {"get_1", "`files.get` 1 MiB"},        {"cat_out_1", "`cat file \\|` 1 MiB"},
      {"put_16", "`files.put` 16 MiB"},      {"cat_in_16", "`cat > file` 16 MiB"},
      {"get_16", "`files.get` 16 MiB"},      {"cat_out_16", "`cat file \\|` 16 MiB"},
  };
  std::printf("\n| files | n | P50 ms | P99 ms | MiB/s at P50 | failed |\n|---|---:|---:|---:|---:|---|\n");
  for (const Row& row : file_rows) {
    const Series& x = s(row.key);
    const double mib = static_cast<double>(x.bytes) / kMiB;
    std::printf("| %s | %zu | %s | %s | %s | %s |\n", row.label, x.ms.size(), Num(x.P50()).c_str(),
                Num(x.P99()).c_str(), Num(mib / (x.P50() / 1000), 0).c_str(), Failures(x.errors).c_str());
  }
  std::printf("\n| 2 clients back to back, `/bin/true` | s | executions/s | P50 ms | P99 ms | shell hit ratio | failed "
              "|\n|---|---:|---:|---:|---:|---:|---|\n");
  for (const LoadRun& l : load) {
    std::printf("| `%s`%s | %.1f | %s | %s | %s | %s | %s |\n", l.label.c_str(),
                l.label == "session.exec" ? ", a session per client" : "", l.seconds, Num(l.PerSecond(), 1).c_str(),
                Num(Percentile<50>(l.ms)).c_str(), Num(Percentile<99>(l.ms)).c_str(), Num(l.hit_ratio).c_str(),
                Failures(l.errors).c_str());
  }

  auto ratio = [](double a, double b) { return b > 0 ? a / b : NAN; };
  std::printf("\n| ratio | P50 | P99 |\n|---|---:|---:|\n");
  auto ratio_row = [&](const char* what, const char* a, const char* b) {
    std::printf("| %s | %s | %s |\n", what, Num(ratio(s(a).P50(), s(b).P50())).c_str(),
                Num(ratio(s(a).P99(), s(b).P99())).c_str());
  };
  ratio_row("`session.exec` / `sandbox.run`, `/bin/true`", "exec_true", "run_true");
  ratio_row("the same, `collect_outputs: false`", "exec_true_nocollect", "run_true");
  ratio_row("`session.exec` / `sandbox.run`, python", "exec_python", "run_python");
  ratio_row("the same, `collect_outputs: false`", "exec_python_nocollect", "run_python");
  ratio_row("`files.put` / `cat > file`, 1 MiB", "put_1", "cat_in_1");
  ratio_row("`files.get` / `cat file |`, 1 MiB", "get_1", "cat_out_1");
  ratio_row("`files.put` / `cat > file`, 16 MiB", "put_16", "cat_in_16");
  ratio_row("`files.get` / `cat file |`, 16 MiB", "get_16", "cat_out_16");
  if (load.size() == 2) {
    const double a = ratio(load[1].PerSecond(), load[0].PerSecond());
    const double p50 = ratio(Percentile<50>(load[1].ms), Percentile<50>(load[0].ms));
    const double p99 = ratio(Percentile<99>(load[1].ms), Percentile<99>(load[0].ms));
    std::printf("| under load, `session.exec` / `sandbox.run`: latency (executions/s %s) | %s | %s |\n",
                Num(a).c_str(), Num(p50).c_str(), Num(p99).c_str());
  }

  // Where the time goes: medians of the result's parts.
  std::set<std::string> names;
  for (const Row& row : exec_rows) {
    for (const auto& [k, v] : s(row.key).parts) names.insert(k);
  }
  std::printf("\n| P50 ms of the result's parts |");
  for (const Row& row : exec_rows) std::printf(" %s |", row.key);
  std::printf("\n|---|");
  for (size_t i = 0; i < exec_rows.size(); ++i) std::printf("---:|");
  std::printf("\n| round trip |");
  for (const Row& row : exec_rows) std::printf(" %s |", Num(s(row.key).P50()).c_str());
  std::printf("\n");
  for (const std::string& n : names) {
    std::printf("| %s |", n.c_str());
    for (const Row& row : exec_rows) std::printf(" %s |", Num(s(row.key).Part50(n)).c_str());
    std::printf("\n");
  }
  return 0;
}

}  // namespace
}  // namespace cubicle::bench

int main() { return cubicle::bench::Run(); }
