// Sustained load through the `cubicle serve` binary (issue 27): C clients
// (1, 2, 8), each on its own connection to the daemon's Unix socket, each
// sending its next request the moment it has the previous reply, for a
// bounded number of requests. Three workloads: `sandbox.run /bin/true`
// (profile `shell`), `sandbox.run python3 -I -c pass` served by a warm
// interpreter (profile `python`), and a trivial `skill.call` on `python`.
// Per workload and C: executions/s, per-request latency (client side, the
// request line written to the reply line read), and from pool.stats taken
// before and after (the deltas) the hit ratio, refills and their CPU and
// wall time, and the misses' wait for the next zygote. Then the same
// requests one at a time on a warm, quiet pool (the quiet latency), the
// baselines in the same run with the same C — posix_spawn+waitpid and
// bwrap (bench_stats.h's flags) of /bin/true and python3, C threads each
// spawning back to back — and the memory of an idle zygote (PSS and
// private pages of each zygote's processes, found under the daemon's fork
// servers). It ends with a Markdown summary for bench/README.md.
//
// A plain driver, not Google Benchmark: one measurement here is C threads
// sharing one daemon, whose latencies are pooled into one set of
// percentiles and whose pool.stats deltas belong to the run as a whole, and
// the summary divides figures of different runs (cubicle by bwrap, loaded
// P99 by quiet P50); Benchmark's per-thread iterations and per-benchmark
// reports fit none of that.
//
// The daemon: `$CUBICLE_BINARY serve --socket DIR/cubicle.sock --stdio
// --config DIR/config.json` (default binary: the `cubicle` of this build).
// --stdio ties it to this process, so that it tears down its sandboxes if
// this program dies; it is stopped with SIGTERM. Its config is the built-in
// one with each profile's pool at min_idle 4, max_idle 8 (room for 8
// clients at once); `CUBICLE_LOAD_REFILL_PARALLELISM=N` sets
// refill_parallelism in it, and `CUBICLE_LOAD_CONFIG=FILE` replaces it
// (it needs a `shell` profile and a `python` profile with the warm
// interpreter `["python3", "-I"]`). `CUBICLE_LOAD_SCALE` (default 1)
// multiplies every request count and time bound. Run as root.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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

// ---- Settings ---------------------------------------------------------------

struct Settings {
  double scale = 1;
  std::string binary;
  std::string config_file;     // CUBICLE_LOAD_CONFIG, or "" for the generated one
  int refill_parallelism = 0;  // 0: the built-in default
  std::chrono::milliseconds run_limit{60000};
  int Scaled(int n) const { return std::max(10, static_cast<int>(std::lround(n * scale))); }
};

Settings FromEnvironment() {
  Settings s;
  const char* scale = std::getenv("CUBICLE_LOAD_SCALE");
  if (scale != nullptr && (!absl::SimpleAtod(scale, &s.scale) || !(s.scale > 0) || s.scale > 100)) {
    std::fprintf(stderr, "load_bench: CUBICLE_LOAD_SCALE=%s: expected a number in (0, 100]\n", scale);
    std::exit(2);
  }
  s.run_limit = std::chrono::milliseconds(std::lround(60000 * std::max(1.0, s.scale)));
  const char* binary = std::getenv("CUBICLE_BINARY");
  s.binary = binary != nullptr && *binary != '\0' ? binary : CUBICLE_BINARY_PATH;
  const char* config = std::getenv("CUBICLE_LOAD_CONFIG");
  if (config != nullptr) s.config_file = config;
  const char* parallelism = std::getenv("CUBICLE_LOAD_REFILL_PARALLELISM");
  if (parallelism != nullptr &&
      (!absl::SimpleAtoi(parallelism, &s.refill_parallelism) || s.refill_parallelism < 1 || s.refill_parallelism > 64)) {
    std::fprintf(stderr, "load_bench: CUBICLE_LOAD_REFILL_PARALLELISM=%s: expected 1..64\n", parallelism);
    std::exit(2);
  }
  return s;
}

// ---- Measuring -------------------------------------------------------------------

// One request or execution: its latency, or why it failed.
struct Outcome {
  double ms = 0;
  std::string error;  // "" when it did what it should
};
using Operation = std::function<Outcome()>;

struct Run {
  std::string label;
  int clients = 0;
  size_t ok = 0;
  double seconds = 0;
  std::vector<double> latency_ms;  // of the requests that succeeded
  std::map<std::string, int> errors;
  std::optional<PoolDelta> pool;
  double PerSecond() const { return seconds > 0 ? static_cast<double>(ok) / seconds : 0; }
  double P50() const { return Percentile<50>(latency_ms); }
  double P90() const { return Percentile<90>(latency_ms); }
  double P99() const { return Percentile<99>(latency_ms); }
};

// `clients` threads, each with its own operation (its own connection),
// run back to back until `total` operations are done between them or
// `limit` has passed. A failed operation that leaves the operation unusable
// (a lost connection, a timeout) ends that client.
Run RunClients(const std::string& label, int clients, int total, std::chrono::milliseconds limit,
               const std::function<absl::StatusOr<Operation>()>& make_client) {
  Run run;
  run.label = label;
  run.clients = clients;
  std::vector<Operation> ops;
  for (int c = 0; c < clients; ++c) {
    absl::StatusOr<Operation> op = make_client();
    if (!op.ok()) {
      ++run.errors[std::string(op.status().message())];
      return run;
    }
    ops.push_back(*std::move(op));
  }
  std::mutex mu;
  std::latch start(clients + 1);
  const Clock::time_point deadline = Clock::now() + limit;
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    const int share = total / clients + (c < total % clients ? 1 : 0);
    threads.emplace_back([&, c, share] {
      std::vector<double> mine;
      mine.reserve(static_cast<size_t>(share));
      std::map<std::string, int> errors;
      start.arrive_and_wait();
      for (int i = 0; i < share && Clock::now() < deadline; ++i) {
        Outcome o = ops[static_cast<size_t>(c)]();
        if (o.error.empty()) {
          mine.push_back(o.ms);
          continue;
        }
        ++errors[o.error];
        if (absl::StartsWith(o.error, "fatal: ")) break;
      }
      std::lock_guard lock(mu);
      run.latency_ms.insert(run.latency_ms.end(), mine.begin(), mine.end());
      for (const auto& [why, n] : errors) run.errors[why] += n;
    });
  }
  const Clock::time_point begin = Clock::now();
  start.arrive_and_wait();
  for (std::thread& t : threads) t.join();
  run.seconds = MsBetween(begin, Clock::now()) / 1000;
  run.ok = run.latency_ms.size();
  return run;
}

// ---- The baselines: posix_spawn and bwrap ---------------------------------------

Operation SpawnOperation(std::vector<std::string> argv) {
  auto args = std::make_shared<std::vector<std::string>>(std::move(argv));
  return [args]() -> Outcome {
    std::vector<char*> argv;
    for (std::string& a : *args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    for (int fd = 0; fd < 3; ++fd) posix_spawn_file_actions_adddup2(&actions, DevNull(), fd);
    const Clock::time_point t0 = Clock::now();
    pid_t pid;
    const int err = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (err != 0) return {0, absl::StrCat("fatal: posix_spawn(", argv[0], "): ", std::strerror(err))};
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    const double ms = MsBetween(t0, Clock::now());
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return {ms, absl::StrCat("exit status ", status)};
    return {ms, ""};
  };
}

// /usr/bin/python3: a host PATH may put a shim first; the sandbox has none.
const std::vector<std::string> kHostPython = {"/usr/bin/python3", "-I", "-c", "pass"};
constexpr char kBwrap[] = "/usr/bin/bwrap";

// ---- The workloads through cubicle serve ---------------------------------------

// A trivial skill: one JSON-RPC request line in, the answer out. It also
// says whether it was served warm: the warm interpreter preloads json
// (docs/config.md), a fresh python3 -I has not imported it at start.
constexpr char kSkill[] =
    "import sys\n"
    "warm = 'json' in sys.modules\n"
    "import json\n"
    "req = json.loads(sys.stdin.readline())\n"
    "print(json.dumps({'jsonrpc': '2.0', 'id': req['id'], 'result': {'n': req['params']['a'] + 1, 'warm': warm}}), "
    "flush=True)\n";

struct Workload {
  std::string name;     // in the tables
  std::string profile;  // whose pool.stats it moves
  std::string line;     // the request
  // "" when the reply is what it should be; else why not.
  std::function<std::string(const json::object& result)> check;
};

// A whole number in a reply, if that is what is there.
std::optional<int64_t> Int(const json::value* v) {
  if (v == nullptr || !v->is_number()) return std::nullopt;
  json::error_code ec;
  const int64_t n = v->to_number<int64_t>(ec);
  if (ec) return std::nullopt;
  return n;
}

std::string CheckExited(const json::object& r, bool warm) {
  const json::value* reason = r.if_contains("reason");
  if (reason == nullptr || !reason->is_string() || reason->as_string() != "exited" ||
      Int(r.if_contains("exit_code")) != 0) {
    return absl::StrCat("did not exit 0: ", reason != nullptr ? json::serialize(*reason) : "no reason");
  }
  if (warm) {
    const json::value* w = r.if_contains("warm");
    if (w == nullptr || !w->is_bool() || !w->as_bool()) return "not served warm";
  }
  return "";
}

std::vector<Workload> Workloads() {
  auto run_line = [](const char* profile, const json::array& argv) {
    return json::serialize(json::object{
        {"jsonrpc", "2.0"},
        {"id", 1},
        {"method", "sandbox.run"},
        {"params", json::object{{"profile", profile}, {"argv", argv}}}});
  };
  const std::string skill_line = json::serialize(json::object{
      {"jsonrpc", "2.0"},
      {"id", 1},
      {"method", "skill.call"},
      {"params", json::object{{"profile", "python"},
                              {"argv", json::array{"python3", "-I", "-c", kSkill}},
                              {"method", "inc"},
                              {"params", json::object{{"a", 41}}}}}});
  return {
      {"`sandbox.run /bin/true` (shell)", "shell", run_line("shell", json::array{"/bin/true"}),
       [](const json::object& r) { return CheckExited(r, false); }},
      {"`sandbox.run python3 -I -c pass`, warm (python)", "python",
       run_line("python", json::array{"python3", "-I", "-c", "pass"}),
       [](const json::object& r) { return CheckExited(r, true); }},
      {"`skill.call`, warm (python)", "python", skill_line,
       [](const json::object& r) -> std::string {
         const json::value* answer = r.if_contains("result");
         if (answer == nullptr || !answer->is_object()) return "no result from the skill";
         const json::object& a = answer->as_object();
         if (Int(a.if_contains("n")) != 42) return "wrong answer";
         if (!a.contains("warm") || !a.at("warm").is_bool() || !a.at("warm").as_bool()) return "not served warm";
         return "";
       }},
  };
}

constexpr std::chrono::milliseconds kRequestTimeout{40000};  // above the profiles' 30 s default

// One client of a workload: its own connection; each call one request.
absl::StatusOr<Operation> WorkloadClient(const std::string& socket_path, const Workload& w) {
  absl::StatusOr<Connection> opened = Connection::Open(socket_path);
  if (!opened.ok()) return opened.status();
  auto conn = std::make_shared<Connection>(*std::move(opened));
  return Operation([conn, &w]() -> Outcome {
    const Clock::time_point t0 = Clock::now();
    absl::StatusOr<std::string> reply = conn->Call(w.line, kRequestTimeout);
    const double ms = MsBetween(t0, Clock::now());
    if (!reply.ok()) return {ms, absl::StrCat("fatal: ", reply.status().message())};
    json::error_code ec;
    json::value v = json::parse(*reply, ec);
    if (ec || !v.is_object()) return {ms, "a reply that is not a JSON object"};
    const json::object& o = v.as_object();
    if (const json::value* e = o.if_contains("error"); e != nullptr) {
      const std::optional<int64_t> code = Int(e->is_object() ? e->as_object().if_contains("code") : nullptr);
      return {ms, code == -32000 ? "busy (-32000)" : absl::StrCat("error ", code.value_or(0))};
    }
    const json::value* result = o.if_contains("result");
    if (result == nullptr || !result->is_object()) return {ms, "no result"};
    return {ms, w.check(result->as_object())};
  });
}

// C clients back to back, with the pool.stats deltas of the workload's
// profile from a quiet pool before to a quiet pool after (so the refills
// the run set going are counted).
Run LoadRun(const std::string& socket_path, Connection& control, const Workload& w, int clients, int total,
            const Settings& settings) {
  auto [before, quiet] = WaitQuiet(control, std::chrono::seconds(30));
  Run run = RunClients(w.name, clients, total, settings.run_limit,
                       [&] { return WorkloadClient(socket_path, w); });
  if (!quiet) ++run.errors["(the pool was not quiet at the start within 30 s)"];
  auto [after, quiet_after] = WaitQuiet(control, std::chrono::seconds(30));
  if (!quiet_after) ++run.errors["(the pool was not quiet after the run within 30 s)"];
  if (before.count(w.profile) != 0 && after.count(w.profile) != 0) {
    run.pool = Delta(after.at(w.profile), before.at(w.profile));
  }
  return run;
}

// One request at a time, each on a warm pool with nothing else going on
// (waited for, untimed, bounded): the latency of requests further apart
// than a refill.
Run QuietRun(const std::string& socket_path, Connection& control, const Workload& w, int count,
             const Settings& settings) {
  Run run;
  run.label = w.name;
  run.clients = 1;
  absl::StatusOr<Operation> op = WorkloadClient(socket_path, w);
  if (!op.ok()) {
    ++run.errors[std::string(op.status().message())];
    return run;
  }
  const Clock::time_point deadline = Clock::now() + settings.run_limit * 2;
  for (int i = 0; i < count && Clock::now() < deadline; ++i) {
    if (!WaitQuiet(control, std::chrono::seconds(10)).second) ++run.errors["(not quiet within 10 s)"];
    Outcome o = (*op)();
    if (!o.error.empty()) {
      ++run.errors[o.error];
      if (absl::StartsWith(o.error, "fatal: ")) break;
      continue;
    }
    run.latency_ms.push_back(o.ms);
  }
  run.ok = run.latency_ms.size();
  return run;
}

// ---- Idle zygote memory -------------------------------------------------------------

struct ProcessTable {
  std::map<pid_t, std::vector<pid_t>> children;
  std::map<pid_t, std::string> comm;
};

ProcessTable ReadProcesses() {
  ProcessTable t;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    pid_t pid;
    if (!absl::SimpleAtoi(name, &pid)) continue;
    std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open) continue;
    std::istringstream rest(stat.substr(close + 1));
    std::string state;
    pid_t ppid = 0;
    if (!(rest >> state >> ppid)) continue;
    t.comm[pid] = stat.substr(open + 1, close - open - 1);
    t.children[ppid].push_back(pid);
  }
  return t;
}

void Descendants(const ProcessTable& t, pid_t pid, std::vector<pid_t>* out) {
  out->push_back(pid);
  auto it = t.children.find(pid);
  if (it == t.children.end()) return;
  for (pid_t child : it->second) Descendants(t, child, out);
}

struct Memory {
  uint64_t pss_kib = 0;
  uint64_t private_kib = 0;  // Private_Clean + Private_Dirty: what this process alone holds
};

Memory ReadMemory(pid_t pid) {
  Memory m;
  std::ifstream rollup(absl::StrCat("/proc/", pid, "/smaps_rollup"));
  // The first line names the range; then "Key:   value kB" lines.
  for (std::string line; std::getline(rollup, line);) {
    std::istringstream fields(line);
    std::string key;
    uint64_t value = 0;
    if (!(fields >> key >> value)) continue;
    if (key == "Pss:") m.pss_kib += value;
    if (key == "Private_Clean:" || key == "Private_Dirty:") m.private_kib += value;
  }
  return m;
}

struct ZygoteMemory {
  int zygotes = 0;
  Memory total;
  double PssEach() const { return zygotes > 0 ? static_cast<double>(total.pss_kib) / zygotes : NAN; }
  double PrivateEach() const { return zygotes > 0 ? static_cast<double>(total.private_kib) / zygotes : NAN; }
};

// The innermost pid namespace of `pid` (its nsfs inode), or 0.
uint64_t PidNamespace(pid_t pid) {
  struct stat st;
  if (::stat(absl::StrCat("/proc/", pid, "/ns/pid").c_str(), &st) != 0) return 0;
  return st.st_ino;
}

// The daemon's fork servers are its children named cubicle-forksrv; their
// children are the sandboxes' inits, each pid 1 of its own pid namespace.
// A sandbox's processes are those in that namespace: its init and what
// runs under it, and for a zygote made from a warm template, the
// interpreter the template forked into it (the template's child, not
// init's). A python zygote is one with a python process; a template is the
// sandbox whose python has children in other namespaces (the zygotes'
// interpreters), counted on its own.
std::map<std::string, ZygoteMemory> IdleZygoteMemory(pid_t daemon) {
  std::map<std::string, ZygoteMemory> out;
  const ProcessTable t = ReadProcesses();
  auto kids = [&](pid_t p) { return t.children.count(p) != 0 ? t.children.at(p) : std::vector<pid_t>{}; };
  std::vector<pid_t> inits;
  for (pid_t server : kids(daemon)) {
    if (t.comm.at(server) != "cubicle-forksrv") continue;
    for (pid_t init : kids(server)) inits.push_back(init);
  }
  std::map<uint64_t, std::vector<pid_t>> by_namespace;
  for (const auto& [pid, comm] : t.comm) {
    const uint64_t ns = PidNamespace(pid);
    if (ns != 0) by_namespace[ns].push_back(pid);
  }
  for (pid_t init : inits) {
    const uint64_t ns = PidNamespace(init);
    if (ns == 0) continue;
    bool python = false, template_sandbox = false;
    Memory sum;
    for (pid_t p : by_namespace[ns]) {
      if (absl::StartsWith(t.comm.at(p), "python")) {
        python = true;
        for (pid_t child : kids(p)) template_sandbox |= PidNamespace(child) != ns;
      }
      Memory m = ReadMemory(p);
      sum.pss_kib += m.pss_kib;
      sum.private_kib += m.private_kib;
    }
    ZygoteMemory& z = out[template_sandbox ? "python template" : python ? "python" : "shell"];
    ++z.zygotes;
    z.total.pss_kib += sum.pss_kib;
    z.total.private_kib += sum.private_kib;
  }
  return out;
}

// The daemon and everything under it now (its fork servers, their
// zygotes and what runs in them).
std::vector<pid_t> DaemonTree(pid_t daemon) {
  std::vector<pid_t> out;
  Descendants(ReadProcesses(), daemon, &out);
  return out;
}

// What a stopped daemon left: processes of `tree` still alive, and cgroups
// named after them (cubicle-PID-N, PID the process that made the group).
std::vector<std::string> Leftovers(const std::vector<pid_t>& tree) {
  auto alive = [](pid_t p) { return std::filesystem::exists(absl::StrCat("/proc/", p)); };
  // Orphans end on their parent-death signal, a moment after the daemon.
  for (int i = 0; i < 300 && std::any_of(tree.begin(), tree.end(), alive); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::vector<std::string> out;
  for (pid_t p : tree) {
    if (alive(p)) out.push_back(absl::StrCat("process ", p));
  }
  std::error_code ec;
  std::filesystem::recursive_directory_iterator it("/sys/fs/cgroup",
                                                   std::filesystem::directory_options::skip_permission_denied, ec);
  for (int seen = 0; !ec && it != std::filesystem::recursive_directory_iterator() && seen < 500000;
       it.increment(ec), ++seen) {
    if (!it->is_directory(ec)) continue;
    const std::string name = it->path().filename();
    for (pid_t p : tree) {
      if (absl::StartsWith(name, absl::StrCat("cubicle-", p, "-"))) out.push_back(it->path().string());
    }
  }
  return out;
}

// ---- The daemon's config ------------------------------------------------------------

// The built-in profiles, each pool sized for 8 clients.
std::string LoadConfig(const Settings& settings) {
  json::value config = json::parse(rpc::DefaultConfigJson());
  for (auto& [name, profile] : config.at("profiles").as_object()) {
    json::value& pool_value = profile.as_object()["pool"];
    if (!pool_value.is_object()) pool_value.emplace_object();
    json::object& pool = pool_value.as_object();
    pool["min_idle"] = 4;
    pool["max_idle"] = 8;
    if (settings.refill_parallelism > 0) pool["refill_parallelism"] = settings.refill_parallelism;
  }
  return json::serialize(config);
}

// ---- The summary ---------------------------------------------------------------------

std::string Num(double v, int decimals = 2) {
  if (std::isnan(v)) return "–";
  return absl::StrFormat("%.*f", decimals, v);
}

std::string Failures(const Run& r) {
  if (r.errors.empty()) return "0";
  std::string s;
  for (const auto& [why, n] : r.errors) absl::StrAppend(&s, s.empty() ? "" : "; ", n, "× ", why);
  return s;
}

struct Results {
  std::map<std::pair<std::string, int>, Run> load;       // (workload, C)
  std::map<std::pair<std::string, int>, Run> baselines;  // (baseline, C)
  std::map<std::string, Run> quiet;                      // workload
  std::map<std::string, ZygoteMemory> memory;            // profile
  std::map<std::string, int64_t> idle_in_stats;          // profile: pool.stats idle when memory was read
  PoolsSnapshot first, last;                             // pool.stats before the first and after the last run
};

const Run* Find(const std::map<std::pair<std::string, int>, Run>& runs, const std::string& name, int c) {
  auto it = runs.find({name, c});
  return it == runs.end() ? nullptr : &it->second;
}

double Ratio(double a, double b) { return b > 0 ? a / b : NAN; }

void PrintSummary(const Results& r, const std::vector<Workload>& workloads, const std::vector<int>& clients,
                  const std::vector<std::string>& baselines, const std::string& header) {
  std::printf("%s\n", header.c_str());
  std::printf("| through `cubicle serve` | C | executions/s | P50 ms | P90 ms | P99 ms | hit ratio | refills | "
              "refill CPU ms | refill ms | queue wait ms (n) | failed |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
  for (const Workload& w : workloads) {
    for (int c : clients) {
      const Run* run = Find(r.load, w.name, c);
      if (run == nullptr) continue;
      PoolDelta d = run->pool.value_or(PoolDelta{});
      std::printf("| %s | %d | %s | %s | %s | %s | %s | %llu | %s | %s | %s (%llu) | %s |\n", w.name.c_str(), c,
                  Num(run->PerSecond(), 0).c_str(), Num(run->P50()).c_str(), Num(run->P90()).c_str(),
                  Num(run->P99()).c_str(), Num(d.HitRatio()).c_str(), static_cast<unsigned long long>(d.built),
                  Num(Mean(d.refill_cpu)).c_str(), Num(Mean(d.refill), 1).c_str(), Num(Mean(d.queue_wait)).c_str(),
                  static_cast<unsigned long long>(d.queue_wait.count), Failures(*run).c_str());
    }
  }
  std::printf("\n| baseline, C threads back to back | C | executions/s | P50 ms | P99 ms | failed |\n");
  std::printf("|---|---:|---:|---:|---:|---|\n");
  for (const std::string& b : baselines) {
    for (int c : clients) {
      const Run* run = Find(r.baselines, b, c);
      if (run == nullptr) continue;
      std::printf("| %s | %d | %s | %s | %s | %s |\n", b.c_str(), c, Num(run->PerSecond(), 0).c_str(),
                  Num(run->P50()).c_str(), Num(run->P99()).c_str(), Failures(*run).c_str());
    }
  }
  std::printf("\n| one request at a time, quiet warm pool | n | P50 ms | P90 ms | P99 ms | failed |\n");
  std::printf("|---|---:|---:|---:|---:|---|\n");
  for (const Workload& w : workloads) {
    auto it = r.quiet.find(w.name);
    if (it == r.quiet.end()) continue;
    const Run& q = it->second;
    std::printf("| %s | %zu | %s | %s | %s | %s |\n", w.name.c_str(), q.ok, Num(q.P50()).c_str(),
                Num(q.P90()).c_str(), Num(q.P99()).c_str(), Failures(q).c_str());
  }
  std::printf("\n| idle zygote (pools warm and quiet) | zygotes found (pool.stats idle) | PSS KiB each | "
              "unique KiB each |\n");
  std::printf("|---|---:|---:|---:|\n");
  for (const char* profile : {"shell", "python", "python template"}) {
    auto it = r.memory.find(profile);
    const ZygoteMemory z = it == r.memory.end() ? ZygoteMemory{} : it->second;
    auto idle = r.idle_in_stats.find(absl::StartsWith(profile, "python") ? "python" : profile);
    std::printf("| %s | %d (%lld) | %s | %s |\n", profile, z.zygotes,
                static_cast<long long>(idle == r.idle_in_stats.end() ? -1 : idle->second), Num(z.PssEach(), 0).c_str(),
                Num(z.PrivateEach(), 0).c_str());
  }

  // The aims of issue 27.
  auto per_s = [](const Run* run) { return run != nullptr ? run->PerSecond() : NAN; };
  const std::string& true_w = workloads[0].name;
  const std::string& python_w = workloads[1].name;
  const std::string& skill_w = workloads[2].name;
  const Run* quiet_skill = r.quiet.count(skill_w) != 0 ? &r.quiet.at(skill_w) : nullptr;
  std::printf("\n| ratio (issue 27's aims) | C=2 | C=8 | aim |\n|---|---:|---:|---:|\n");
  auto row = [&](const std::string& what, const std::function<double(int)>& f, const char* aim) {
    std::printf("| %s | %s | %s | %s |\n", what.c_str(), Num(f(2)).c_str(), Num(f(8)).c_str(), aim);
  };
  row("`/bin/true`: cubicle ÷ bwrap, executions/s",
      [&](int c) { return Ratio(per_s(Find(r.load, true_w, c)), per_s(Find(r.baselines, baselines[1], c))); },
      "≥ 4");
  row("`/bin/true`: cubicle ÷ posix_spawn, executions/s",
      [&](int c) { return Ratio(per_s(Find(r.load, true_w, c)), per_s(Find(r.baselines, baselines[0], c))); },
      "≥ 0.5");
  row("warm `skill.call` ÷ bwrap python3, executions/s",
      [&](int c) { return Ratio(per_s(Find(r.load, skill_w, c)), per_s(Find(r.baselines, baselines[3], c))); },
      "≥ 10");
  row("warm `skill.call`: P99 under load ÷ quiet P50",
      [&](int c) {
        const Run* run = Find(r.load, skill_w, c);
        return run != nullptr && quiet_skill != nullptr ? Ratio(run->P99(), quiet_skill->P50()) : NAN;
      },
      "≤ 3");
  for (const std::string& w : {true_w, python_w, skill_w}) {
    row(absl::StrCat("hit ratio, ", w),
        [&](int c) {
          const Run* run = Find(r.load, w, c);
          return run != nullptr && run->pool.has_value() ? run->pool->HitRatio() : NAN;
        },
        "≥ 0.95 (C=2)");
  }
  auto whole = [&](const std::string& profile) {
    if (r.first.count(profile) == 0 || r.last.count(profile) == 0) return PoolDelta{};
    return Delta(r.last.at(profile), r.first.at(profile));
  };
  const PoolDelta shell = whole("shell"), python = whole("python");
  auto memory = [&](const char* profile) {
    return r.memory.count(profile) != 0 ? r.memory.at(profile) : ZygoteMemory{};
  };
  std::printf("\n| per zygote | measured | aim |\n|---|---:|---:|\n");
  std::printf("| refill CPU, plain (shell), ms (mean of %llu refills in the runs) | %s | ≤ 2 |\n",
              static_cast<unsigned long long>(shell.refill_cpu.count), Num(Mean(shell.refill_cpu)).c_str());
  std::printf("| refill CPU, warm Python, ms (mean of %llu refills in the runs) | %s | ≤ 3 |\n",
              static_cast<unsigned long long>(python.refill_cpu.count), Num(Mean(python.refill_cpu)).c_str());
  std::printf("| idle PSS, plain, KiB | %s | ≤ 256 |\n", Num(memory("shell").PssEach(), 0).c_str());
  std::printf("| unique memory, warm Python, KiB | %s | ≤ 1024 |\n", Num(memory("python").PrivateEach(), 0).c_str());
}

// ---- The program --------------------------------------------------------------------

void Progress(const Run& run) {
  const std::string rate = run.seconds > 0 ? absl::StrFormat("in %6.2f s %7.1f/s", run.seconds, run.PerSecond())
                                           : "one at a time";
  std::fprintf(stderr, "load_bench: %-50s C=%d %4zu ok %s  P50 %7.2f  P99 %7.2f ms  failed: %s\n", run.label.c_str(),
               run.clients, run.ok, rate.c_str(), run.P50(), run.P99(), Failures(run).c_str());
}

int Main() {
  const Settings settings = FromEnvironment();
  absl::StatusOr<TempDir> dir = TempDir::Make();
  if (!dir.ok()) {
    std::fprintf(stderr, "load_bench: %s\n", std::string(dir.status().message()).c_str());
    return 1;
  }
  std::string config_path = settings.config_file;
  if (config_path.empty()) {
    config_path = dir->Child("config.json");
    std::ofstream(config_path) << LoadConfig(settings);
  }
  const std::string socket_path = dir->Child("cubicle.sock");
  const std::string log_path = dir->Child("serve.log");
  const std::string start_load = LoadAverage();
  const std::string started = Now();

  absl::StatusOr<std::unique_ptr<ServeDaemon>> daemon =
      ServeDaemon::Start(settings.binary, config_path, socket_path, log_path);
  if (!daemon.ok()) {
    std::ifstream log(log_path);
    std::fprintf(stderr, "load_bench: %s\n%s", std::string(daemon.status().message()).c_str(),
                 std::string((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>()).c_str());
    return 1;
  }
  absl::StatusOr<Connection> control = Connection::Open(socket_path);
  if (!control.ok()) {
    std::fprintf(stderr, "load_bench: %s\n", std::string(control.status().message()).c_str());
    return 1;
  }

  const std::vector<Workload> workloads = Workloads();
  const std::vector<int> clients = {1, 2, 8};
  const bool have_bwrap = ::access(kBwrap, X_OK) == 0;
  struct Baseline {
    std::string name;
    std::vector<std::string> argv;
    int count;
  };
  const std::vector<Baseline> baselines = {
      {"posix_spawn `/bin/true`", {"/bin/true"}, settings.Scaled(400)},
      {"bwrap `/bin/true`", BwrapArgs({"/bin/true"}), settings.Scaled(300)},
      {"posix_spawn python3", kHostPython, settings.Scaled(200)},
      {"bwrap python3", BwrapArgs(kHostPython), settings.Scaled(200)},
  };
  const std::vector<int> load_counts = {settings.Scaled(400), settings.Scaled(300), settings.Scaled(300)};
  const int quiet_count = settings.Scaled(100);

  // Untimed: every path once or a few times (page cache, the interpreters'
  // .pyc), then the pools back to warm and quiet.
  for (const Baseline& b : baselines) {
    if (b.name.find("bwrap") == std::string::npos || have_bwrap) (void)SpawnOperation(b.argv)();
  }
  for (const Workload& w : workloads) {
    absl::StatusOr<Operation> op = WorkloadClient(socket_path, w);
    for (int i = 0; op.ok() && i < 8; ++i) {
      Outcome o = (*op)();
      if (!o.error.empty()) std::fprintf(stderr, "load_bench: warm-up %s: %s\n", w.name.c_str(), o.error.c_str());
    }
  }

  Results results;
  auto [first, quiet] = WaitQuiet(*control, std::chrono::seconds(60));
  if (!quiet) std::fprintf(stderr, "load_bench: the pools were not warm and quiet within 60 s\n");
  results.first = first;
  results.memory = IdleZygoteMemory((*daemon)->pid());
  for (const auto& [name, p] : first) results.idle_in_stats[name] = p.idle;

  for (const Workload& w : workloads) {
    results.quiet[w.name] = QuietRun(socket_path, *control, w, quiet_count, settings);
    Progress(results.quiet[w.name]);
  }
  for (int c : clients) {
    for (size_t i = 0; i < workloads.size(); ++i) {
      // Each workload after the baselines it is divided by.
      for (const Baseline& b : baselines) {
        const bool python_baseline = b.name.find("python") != std::string::npos;
        if ((i == 0 && python_baseline) || (i == 1 && !python_baseline) || i == 2) continue;
        if (b.name.find("bwrap") != std::string::npos && !have_bwrap) continue;
        Run run = RunClients(b.name, c, b.count, settings.run_limit,
                             [&]() -> absl::StatusOr<Operation> { return SpawnOperation(b.argv); });
        Progress(run);
        results.baselines[{b.name, c}] = std::move(run);
      }
      Run run = LoadRun(socket_path, *control, workloads[i], c, load_counts[i], settings);
      Progress(run);
      results.load[{workloads[i].name, c}] = std::move(run);
    }
  }
  results.last = WaitQuiet(*control, std::chrono::seconds(30)).first;
  const std::string end_load = LoadAverage();

  const std::vector<pid_t> tree = DaemonTree((*daemon)->pid());
  const std::string stopped = (*daemon)->Stop();
  const std::vector<std::string> left = Leftovers(tree);
  std::fprintf(stderr, "load_bench: left behind by the daemon: %s\n",
               left.empty() ? "nothing" : absl::StrJoin(left, ", ").c_str());
  std::ifstream log(log_path);
  std::vector<std::string> log_lines;
  for (std::string line; std::getline(log, line) && log_lines.size() < 1000;) log_lines.push_back(line);
  std::fprintf(stderr, "load_bench: cubicle serve %s; %zu lines in its log\n", stopped.c_str(), log_lines.size());
  for (size_t i = 0; i < log_lines.size() && i < 10; ++i) std::fprintf(stderr, "  %s\n", log_lines[i].c_str());

  std::string pools;
  for (const auto& [name, p] : results.first) {
    absl::StrAppend(&pools, pools.empty() ? "" : ", ", name, " min_idle ", p.min_idle);
  }
  const std::string header = absl::StrCat(
      "cubicle_load_bench, ", started, ", load average ", start_load, " at the start, ", end_load,
      " at the end; binary ", settings.binary, "; config ",
      settings.config_file.empty() ? "built-in, pools min_idle 4 max_idle 8" : settings.config_file,
      settings.refill_parallelism > 0 ? absl::StrCat(", refill_parallelism ", settings.refill_parallelism) : "",
      " (", pools, "); scale ", settings.scale, "; bwrap ", have_bwrap ? "yes" : "not installed", ".\n");
  std::vector<std::string> baseline_names;
  for (const Baseline& b : baselines) baseline_names.push_back(b.name);
  PrintSummary(results, workloads, clients, baseline_names, header);
  return 0;
}

}  // namespace
}  // namespace cubicle::bench

int main() { return cubicle::bench::Main(); }
