// The HTTP front of `cubicle serve --listen` (issue 30) against the Unix
// socket it stands beside: the same JSON-RPC requests to one daemon over
// both, so that the difference is the front's (Beast's parsing and
// writing, the bearer check, TCP against AF_UNIX) and nothing else.
//
// One daemon: `$CUBICLE_BINARY serve --socket DIR/cubicle.sock --stdio
// --config DIR/config.json --listen 127.0.0.1:0 --listen-port-file
// DIR/port --keys-file DIR/keys.json` (the built-in config; one key of 48
// characters, the file 0600), its shell pool raised with `pool.warm` to
// `CUBICLE_HTTP_WARM` idle zygotes (default 8, one per load client). Then,
// each phase interleaved round by round with the order alternated, so
// that the machine's drift hits both transports alike:
//
//   1. one client, one request at a time, the pools warm and quiet before
//      each (a hand-off, not a refill): `sandbox.run /bin/true` over one
//      socket connection against `POST /rpc` on one keep-alive HTTP
//      connection with the bearer key;
//   2. the front alone, no sandbox: `health` over both, and `GET /healthz`
//      (answered by the front itself, never reaching the daemon), in
//      bursts of ten per contender per round;
//   3. sustained: 8 clients, each with its own connection (socket or
//      keep-alive HTTP), back to back for a fixed count of requests each:
//      `sandbox.run /bin/true`, then `health`.
//
// Latency is the client's: the request's bytes sent to the reply's last
// byte read (the reply is checked after the clock stops). Beside the
// percentiles of each, phases 1 and 2 give the difference HTTP − socket of
// the requests paired within a round, its median with a 95% interval: on
// a busy machine a sandbox's run varies by milliseconds between rounds,
// which the front's microseconds would drown in otherwise. Both clients are
// the same code on raw sockets — one send per request, a poll and recv
// loop for the reply — with TCP_NODELAY on the TCP one; they differ only
// in framing (a line; an HTTP/1.1 message with Content-Length).
//
// A plain driver, not Google Benchmark (session_bench.cc says why: the
// contenders share one daemon, are interleaved request by request, and the
// summary divides one by another). It ends with a Markdown summary for
// bench/README.md.
//
// `CUBICLE_BENCH_REPS` (default 200): rounds of phases 1 and 2.
// `CUBICLE_HTTP_LOAD_RUNS` (default 3): runs of each transport in phase 3,
// alternated. `CUBICLE_HTTP_LOAD_N` (default 50): `sandbox.run` requests
// per client per run (health: ten times as many). SIGINT or SIGTERM ends
// the measuring early and still stops the daemon and removes its files.
// Run as root (sandboxes make cgroups).
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_stats.h"
#include "bench/serve_daemon.h"
#include "rpc/config.h"

namespace cubicle::bench {
namespace {
namespace json = boost::json;

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

constexpr auto kCallTimeout = std::chrono::seconds(60);

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  int n = 0;
  return v != nullptr && absl::SimpleAtoi(v, &n) && n > 0 ? n : fallback;
}

// ---- The clients -----------------------------------------------------------------

// One connection, socket or TCP, one request in flight: the request's bytes
// out in one send, then reads until the framing says the reply is whole.
class Wire {
 public:
  enum class Kind { kLine, kHttp };

  static absl::StatusOr<Wire> Unix(const std::string& path) {
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return Errno("socket(AF_UNIX)");
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof(addr.sun_path)) return absl::InvalidArgumentError("socket path too long");
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return Errno(absl::StrCat("connect(", path, ")"));
    }
    return Wire(std::move(fd), Kind::kLine);
  }

  static absl::StatusOr<Wire> Tcp(uint16_t port) {
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return Errno("socket(AF_INET)");
    // A request is one send; without this a reply's ACK could still be
    // delayed behind Nagle on a connection that wrote last.
    const int one = 1;
    if (::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) return Errno("TCP_NODELAY");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return Errno(absl::StrCat("connect(127.0.0.1:", port, ")"));
    }
    return Wire(std::move(fd), Kind::kHttp);
  }

  // `wire`: a whole request (a line with its "\n", or an HTTP message).
  // The reply's body (the line without "\n"), or why there is none; an
  // HTTP status other than 200 is an error naming it.
  absl::StatusOr<std::string> Exchange(const std::string& wire, std::chrono::milliseconds timeout) {
    const Clock::time_point deadline = Clock::now() + timeout;
    for (size_t off = 0; off < wire.size();) {
      const ssize_t n = ::send(fd_.get(), wire.data() + off, wire.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Errno("send(request)");
      off += static_cast<size_t>(n);
    }
    for (int reads = 0; reads < 1000000; ++reads) {
      absl::StatusOr<std::optional<std::string>> whole = kind_ == Kind::kLine ? TakeLine() : TakeHttp();
      if (!whole.ok()) return whole.status();
      if (whole->has_value()) return **std::move(whole);
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return absl::DeadlineExceededError("no reply in time");
      pollfd p{fd_.get(), POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(left));
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) return Errno("poll(reply)");
      if (ready == 0) continue;
      char buf[16384];
      const ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Errno("recv(reply)");
      if (n == 0) return absl::UnavailableError("the daemon closed the connection");
      pending_.append(buf, static_cast<size_t>(n));
    }
    return absl::DeadlineExceededError("no whole reply in a million reads");
  }

 private:
  Wire(Fd fd, Kind kind) : fd_(std::move(fd)), kind_(kind) {}

  absl::StatusOr<std::optional<std::string>> TakeLine() {
    const size_t nl = pending_.find('\n');
    if (nl == std::string::npos) return std::nullopt;
    std::string line = pending_.substr(0, nl);
    pending_.erase(0, nl + 1);
    return line;
  }

  // A response with a Content-Length (the front always sets one).
  absl::StatusOr<std::optional<std::string>> TakeHttp() {
    const size_t end = pending_.find("\r\n\r\n");
    if (end == std::string::npos) return std::nullopt;
    const absl::string_view head(pending_.data(), end);
    size_t length = 0;
    bool has_length = false;
    for (size_t at = head.find("\r\n"); at != absl::string_view::npos;) {
      const size_t next = head.find("\r\n", at + 2);
      const absl::string_view field = head.substr(at + 2, next == absl::string_view::npos ? absl::string_view::npos
                                                                                            : next - at - 2);
      if (absl::StartsWithIgnoreCase(field, "content-length:")) {
        has_length = absl::SimpleAtoi(absl::StripAsciiWhitespace(field.substr(15)), &length);
      }
      at = next;
    }
    if (!has_length) return absl::InternalError("an HTTP response without Content-Length");
    if (pending_.size() < end + 4 + length) return std::nullopt;
    std::string body = pending_.substr(end + 4, length);
    const bool ok = absl::StartsWith(head, "HTTP/1.1 200 ");
    const std::string status_line(head.substr(0, head.find("\r\n")));
    pending_.erase(0, end + 4 + length);
    if (!ok) return absl::InternalError(absl::StrCat(status_line, ": ", body));
    return body;
  }

  Fd fd_;
  Kind kind_;
  std::string pending_;
};

std::string HttpPost(const std::string& key, const std::string& body) {
  return absl::StrCat("POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ", key,
                      "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(), "\r\n\r\n", body);
}

// ---- Requests and their outcomes -------------------------------------------------------

constexpr char kRunTrue[] =
    R"({"jsonrpc":"2.0","id":1,"method":"sandbox.run","params":{"argv":["/bin/true"]}})";
constexpr char kHealth[] = R"({"jsonrpc":"2.0","id":1,"method":"health"})";

// What a reply must say for its request to count.
enum class Expect { kExited0, kHealthy, kHealthz };

// One request's wire form on both transports and what its reply must be.
struct Call {
  std::string label;
  std::string wire;
  Expect expect;
};

// Why the reply does not count ("" when it does); `wall_ms` gets an
// execution's own wall time.
std::string Check(const std::string& body, Expect expect, double* wall_ms) {
  try {
    const json::value v = json::parse(body);
    const json::object& o = v.as_object();
    if (expect == Expect::kHealthz) return o.at("status").as_string() == "ok" ? "" : "healthz: not ok";
    if (const json::value* e = o.if_contains("error")) return absl::StrCat("error ", json::serialize(*e));
    const json::object& r = o.at("result").as_object();
    if (expect == Expect::kHealthy) return r.at("status").as_string() == "ok" ? "" : "health: not ok";
    if (r.at("reason").as_string() != "exited" || r.at("exit_code").to_number<int64_t>() != 0) {
      return absl::StrCat("ended ", json::serialize(r.at("reason")));
    }
    *wall_ms = r.at("wall_ms").to_number<double>();
    return "";
  } catch (const std::exception& e) {
    return absl::StrCat("unexpected reply (", e.what(), ")");
  }
}

struct Series {
  std::vector<double> ms;
  std::vector<double> outside;  // executions: ms − the run's own wall_ms
  std::map<std::string, int> errors;
  void Add(absl::StatusOr<std::string> reply, double ms_taken, Expect expect) {
    double wall_ms = NAN;
    const std::string why = reply.ok() ? Check(*reply, expect, &wall_ms) : std::string(reply.status().message());
    if (!why.empty()) {
      ++errors[why];
      return;
    }
    ms.push_back(ms_taken);
    if (!std::isnan(wall_ms)) outside.push_back(ms_taken - wall_ms);
  }
  void Merge(const Series& o) {
    ms.insert(ms.end(), o.ms.begin(), o.ms.end());
    outside.insert(outside.end(), o.outside.begin(), o.outside.end());
    for (const auto& [why, n] : o.errors) errors[why] += n;
  }
  double Mean() const {
    double sum = 0;
    for (double v : ms) sum += v;
    return ms.empty() ? NAN : sum / static_cast<double>(ms.size());
  }
};

// The request's latency, when its reply says what it should.
std::optional<double> Sample(Wire& wire, const Call& call, Series& into) {
  const Clock::time_point t0 = Clock::now();
  absl::StatusOr<std::string> reply = wire.Exchange(call.wire, kCallTimeout);
  const double ms = MsBetween(t0, Clock::now());
  const size_t before = into.ms.size();
  into.Add(std::move(reply), ms, call.expect);
  return into.ms.size() > before ? std::optional<double>(ms) : std::nullopt;
}

std::string Failures(const std::map<std::string, int>& errors) {
  if (errors.empty()) return "0";
  std::string s;
  for (const auto& [why, n] : errors) absl::StrAppend(&s, s.empty() ? "" : "; ", n, "× ", why);
  return s;
}

// ---- Sustained load ---------------------------------------------------------------

struct LoadRun {
  double seconds = 0;
  Series series;
  double hit_ratio = NAN;
  double PerSecond() const { return seconds > 0 ? static_cast<double>(series.ms.size()) / seconds : 0; }
};

// `clients` connections made by `open`, each sending `call` `count` times
// back to back; one untimed request each first, so that every connection
// is warm (the front's session and buffers made) before the clock starts.
LoadRun RunLoad(const std::function<absl::StatusOr<Wire>()>& open, const Call& call, int clients, int count,
                Connection& control) {
  LoadRun run;
  std::vector<std::unique_ptr<Wire>> wires;
  for (int i = 0; i < clients; ++i) {
    absl::StatusOr<Wire> w = open();
    if (!w.ok()) {
      ++run.series.errors[std::string(w.status().message())];
      return run;
    }
    wires.push_back(std::make_unique<Wire>(*std::move(w)));
    Series ignored;
    Sample(*wires.back(), call, ignored);
  }
  WaitQuiet(control, std::chrono::seconds(60));
  absl::StatusOr<PoolsSnapshot> before = ReadPoolStats(control);
  std::mutex mu;
  std::latch start(clients + 1);
  std::vector<std::thread> threads;
  for (auto& wire : wires) {
    threads.emplace_back([&, w = wire.get()] {
      Series mine;
      mine.ms.reserve(static_cast<size_t>(count));
      start.arrive_and_wait();
      for (int i = 0; i < count && !g_stop.load(); ++i) Sample(*w, call, mine);
      std::lock_guard lock(mu);
      run.series.Merge(mine);
    });
  }
  start.arrive_and_wait();
  const Clock::time_point begin = Clock::now();
  for (std::thread& t : threads) t.join();
  run.seconds = MsBetween(begin, Clock::now()) / 1000;
  absl::StatusOr<PoolsSnapshot> after = ReadPoolStats(control);
  if (before.ok() && after.ok() && before->count("shell") != 0 && after->count("shell") != 0) {
    run.hit_ratio = Delta(after->at("shell"), before->at("shell")).HitRatio();
  }
  return run;
}

// ---- Set-up ----------------------------------------------------------------------

// A 0600 keys file with one unrestricted key; the key.
absl::StatusOr<std::string> WriteKeys(const std::string& path) {
  std::random_device rd;
  std::string key;
  for (int i = 0; i < 48; ++i) key += "0123456789abcdef"[rd() % 16];
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd) return Errno(absl::StrCat("open(", path, ")"));
  const std::string text = absl::StrCat(R"({"keys": [{"name": "bench", "key": ")", key, "\"}]}\n");
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    return Errno(absl::StrCat("write(", path, ")"));
  }
  return key;
}

// The daemon writes the port file after it listens; waited for (10 s).
absl::StatusOr<uint16_t> ReadPort(const std::string& path) {
  for (int i = 0; i < 1000; ++i) {
    std::ifstream in(path);
    int port = 0;
    if (in >> port && port > 0 && port < 65536) return static_cast<uint16_t>(port);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::DeadlineExceededError(absl::StrCat(path, ": no port within 10 s"));
}

// ---- The summary -------------------------------------------------------------------

std::string Num(double v, int decimals = 3) {
  if (std::isnan(v)) return "–";
  return absl::StrFormat("%.*f", decimals, v);
}

double Ratio(double a, double b) { return b > 0 ? a / b : NAN; }

// The ratio of the P50s in each quarter of the interleaved rounds: how
// much the ratio itself moved during the run. "min–max".
std::string QuarterSpread(const Series& http, const Series& sock) {
  double lo = INFINITY, hi = -INFINITY;
  const size_t n = std::min(http.ms.size(), sock.ms.size());
  if (n < 8) return "–";
  for (size_t q = 0; q < 4; ++q) {
    const std::vector<double> h(http.ms.begin() + static_cast<ptrdiff_t>(q * n / 4),
                                http.ms.begin() + static_cast<ptrdiff_t>((q + 1) * n / 4));
    const std::vector<double> s(sock.ms.begin() + static_cast<ptrdiff_t>(q * n / 4),
                                sock.ms.begin() + static_cast<ptrdiff_t>((q + 1) * n / 4));
    const double r = Ratio(Percentile<50>(h), Percentile<50>(s));
    lo = std::min(lo, r);
    hi = std::max(hi, r);
  }
  return absl::StrCat(Num(lo, 2), "–", Num(hi, 2));
}

// The median of `d` and a 95% confidence interval for it (the sign test's
// order statistics: distribution-free).
std::tuple<double, double, double> MedianWithInterval(std::vector<double> d) {
  if (d.size() < 10) return {Percentile<50>(d), NAN, NAN};
  std::sort(d.begin(), d.end());
  const double n = static_cast<double>(d.size());
  const size_t k = static_cast<size_t>(std::floor((n - 1.96 * std::sqrt(n)) / 2));
  return {Percentile<50>(d), d[k], d[d.size() - 1 - k]};
}

void PrintSummary(const std::map<std::string, Series>& one, const std::map<std::string, std::vector<LoadRun>>& load,
                  const std::map<std::string, std::vector<double>>& paired, int rounds) {
  static const Series kNone;
  auto s = [&](const char* k) -> const Series& {
    auto it = one.find(k);
    return it == one.end() ? kNone : it->second;
  };
  std::printf("| one client, one request at a time, ms | n | P50 | P90 | P99 | mean | round trip − the run's "
              "`wall_ms`, P50 | failed |\n|---|---:|---:|---:|---:|---:|---:|---|\n");
  const std::vector<std::pair<const char*, const char*>> rows = {
      {"sock_run", "socket: `sandbox.run /bin/true` (quiet warm pool)"},
      {"http_run", "HTTP `POST /rpc`: the same"},
      {"sock_health", "socket: `health`"},
      {"http_health", "HTTP `POST /rpc`: `health`"},
      {"http_healthz", "HTTP `GET /healthz` (the front alone)"},
  };
  for (const auto& [key, label] : rows) {
    const Series& x = s(key);
    std::printf("| %s | %zu | %s | %s | %s | %s | %s | %s |\n", label, x.ms.size(), Num(Percentile<50>(x.ms)).c_str(),
                Num(Percentile<90>(x.ms)).c_str(), Num(Percentile<99>(x.ms)).c_str(), Num(x.Mean()).c_str(),
                x.outside.empty() ? "" : Num(Percentile<50>(x.outside)).c_str(), Failures(x.errors).c_str());
  }

  std::printf("\n| 8 clients back to back | runs | requests | requests/s (runs' median, min–max) | P50 ms | P99 ms | "
              "shell hit ratio | failed |\n|---|---:|---:|---:|---:|---:|---:|---|\n");
  const std::vector<std::pair<const char*, const char*>> load_rows = {
      {"sock_run", "socket: `sandbox.run /bin/true`"},
      {"http_run", "HTTP: `sandbox.run /bin/true`"},
      {"sock_health", "socket: `health`"},
      {"http_health", "HTTP: `health`"},
  };
  std::map<std::string, double> median_rate;
  std::map<std::string, Series> pooled;
  for (const auto& [key, label] : load_rows) {
    auto it = load.find(key);
    if (it == load.end() || it->second.empty()) continue;
    std::vector<double> rates, hits;
    Series all;
    for (const LoadRun& r : it->second) {
      rates.push_back(r.PerSecond());
      if (!std::isnan(r.hit_ratio)) hits.push_back(r.hit_ratio);
      all.Merge(r.series);
    }
    median_rate[key] = Percentile<50>(rates);
    pooled[key] = all;
    std::printf("| %s | %zu | %zu | %s (%s–%s) | %s | %s | %s | %s |\n", label, rates.size(), all.ms.size(),
                Num(median_rate[key], 0).c_str(), Num(*std::min_element(rates.begin(), rates.end()), 0).c_str(),
                Num(*std::max_element(rates.begin(), rates.end()), 0).c_str(), Num(Percentile<50>(all.ms)).c_str(),
                Num(Percentile<99>(all.ms)).c_str(), hits.empty() ? "–" : Num(Percentile<50>(hits), 2).c_str(),
                Failures(all.errors).c_str());
  }

  std::printf("\n| HTTP ÷ socket | P50 | mean | P90 | P99 | P50 ratio in each quarter of the %d rounds |\n"
              "|---|---:|---:|---:|---:|---|\n",
              rounds);
  auto ratio_row = [&](const char* what, const char* h, const char* k) {
    const Series& a = s(h);
    const Series& b = s(k);
    std::printf("| %s | %s | %s | %s | %s | %s |\n", what, Num(Ratio(Percentile<50>(a.ms), Percentile<50>(b.ms)), 2).c_str(),
                Num(Ratio(a.Mean(), b.Mean()), 2).c_str(), Num(Ratio(Percentile<90>(a.ms), Percentile<90>(b.ms)), 2).c_str(),
                Num(Ratio(Percentile<99>(a.ms), Percentile<99>(b.ms)), 2).c_str(), QuarterSpread(a, b).c_str());
  };
  ratio_row("`sandbox.run /bin/true`, one client (aim ≤ 1.15 at P50)", "http_run", "sock_run");
  ratio_row("`health`, one client", "http_health", "sock_health");
  std::printf("\n| HTTP − socket, one client, each HTTP request paired with its round's socket one | pairs | "
              "median µs | 95%% interval µs | 1 + median ÷ socket P50 |\n|---|---:|---:|---:|---:|\n");
  for (const auto& [what, key, base] : std::vector<std::tuple<const char*, const char*, const char*>>{
           {"`sandbox.run /bin/true`", "run", "sock_run"},
           {"the same, less the run's own `wall_ms`", "run_outside", "sock_run"},
           {"`health`", "health", "sock_health"}}) {
    auto it = paired.find(key);
    if (it == paired.end()) continue;
    const auto [median, lo, hi] = MedianWithInterval(it->second);
    std::printf("| %s | %zu | %s | %s – %s | %s |\n", what, it->second.size(), Num(1000 * median, 0).c_str(),
                Num(1000 * lo, 0).c_str(), Num(1000 * hi, 0).c_str(),
                Num(1 + Ratio(median, Percentile<50>(s(base).ms)), 3).c_str());
  }
  std::printf("\n| 8 clients, HTTP ÷ socket | requests/s | P50 | P99 |\n|---|---:|---:|---:|\n");
  for (const auto& [what, h, k] : std::vector<std::tuple<const char*, const char*, const char*>>{
           {"`sandbox.run /bin/true`", "http_run", "sock_run"}, {"`health`", "http_health", "sock_health"}}) {
    if (pooled.count(h) == 0 || pooled.count(k) == 0) continue;
    std::printf("| %s | %s | %s | %s |\n", what, Num(Ratio(median_rate[h], median_rate[k]), 2).c_str(),
                Num(Ratio(Percentile<50>(pooled[h].ms), Percentile<50>(pooled[k].ms)), 2).c_str(),
                Num(Ratio(Percentile<99>(pooled[h].ms), Percentile<99>(pooled[k].ms)), 2).c_str());
  }
}

// ---- The program -----------------------------------------------------------------

int Run() {
  const char* binary_env = std::getenv("CUBICLE_BINARY");
  const std::string binary = binary_env != nullptr && *binary_env != '\0' ? binary_env : CUBICLE_BINARY_PATH;
  const int rounds = Repetitions(200);
  const int load_runs = EnvInt("CUBICLE_HTTP_LOAD_RUNS", 3);
  const int load_n = EnvInt("CUBICLE_HTTP_LOAD_N", 50);
  const int warm = EnvInt("CUBICLE_HTTP_WARM", 8);
  constexpr int kClients = 8;
  constexpr int kBurst = 10;
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  absl::StatusOr<TempDir> dir = TempDir::Make("/tmp/cubicle-http-bench-");
  if (!dir.ok()) {
    std::fprintf(stderr, "http_bench: %s\n", std::string(dir.status().message()).c_str());
    return 1;
  }
  const std::string config_path = dir->Child("config.json");
  std::ofstream(config_path) << rpc::DefaultConfigJson();
  absl::StatusOr<std::string> key = WriteKeys(dir->Child("keys.json"));
  if (!key.ok()) {
    std::fprintf(stderr, "http_bench: %s\n", std::string(key.status().message()).c_str());
    return 1;
  }
  const std::string socket_path = dir->Child("cubicle.sock");
  const std::string log_path = dir->Child("serve.log");
  const std::string port_path = dir->Child("port");
  const std::string started = Now();
  const std::string start_load = LoadAverage();

  absl::StatusOr<std::unique_ptr<ServeDaemon>> daemon = ServeDaemon::Start(
      binary, config_path, socket_path, log_path,
      {"--listen", "127.0.0.1:0", "--listen-port-file", port_path, "--keys-file", dir->Child("keys.json")});
  if (!daemon.ok()) {
    std::ifstream log(log_path);
    std::fprintf(stderr, "http_bench: %s\n%s", std::string(daemon.status().message()).c_str(),
                 std::string((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>()).c_str());
    return 1;
  }
  absl::StatusOr<uint16_t> port = ReadPort(port_path);
  absl::StatusOr<Connection> control = Connection::Open(socket_path);
  if (!port.ok() || !control.ok()) {
    std::fprintf(stderr, "http_bench: %s\n",
                 std::string((port.ok() ? control.status() : port.status()).message()).c_str());
    return 1;
  }

  int status = 0;
  std::map<std::string, Series> one;
  std::map<std::string, std::vector<LoadRun>> load;
  std::map<std::string, std::vector<double>> paired;  // HTTP − socket, ms
  const std::string warm_line = absl::StrCat(
      R"({"jsonrpc":"2.0","id":1,"method":"pool.warm","params":{"profile":"shell","count":)", warm,
      R"(,"timeout_ms":60000}})");
  absl::StatusOr<std::string> warmed = control->Call(warm_line, std::chrono::seconds(90));
  if (!warmed.ok() || !absl::StrContains(*warmed, R"("warm":true)")) {
    std::fprintf(stderr, "http_bench: pool.warm: %s\n",
                 warmed.ok() ? warmed->c_str() : std::string(warmed.status().message()).c_str());
    status = 1;
  }

  const std::string run_line = absl::StrCat(kRunTrue, "\n");
  const std::string health_line = absl::StrCat(kHealth, "\n");
  const Call sock_run{"sock_run", run_line, Expect::kExited0};
  const Call http_run{"http_run", HttpPost(*key, kRunTrue), Expect::kExited0};
  const Call sock_health{"sock_health", health_line, Expect::kHealthy};
  const Call http_health{"http_health", HttpPost(*key, kHealth), Expect::kHealthy};
  const Call http_healthz{"http_healthz", "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", Expect::kHealthz};
  auto open_sock = [&] { return Wire::Unix(socket_path); };
  auto open_http = [&] { return Wire::Tcp(*port); };

  if (status == 0) {
    absl::StatusOr<Wire> sock = open_sock();
    absl::StatusOr<Wire> http = open_http();
    if (!sock.ok() || !http.ok()) {
      std::fprintf(stderr, "http_bench: %s\n", std::string((sock.ok() ? http.status() : sock.status()).message()).c_str());
      return 1;
    }
    // Untimed: each path a few times (the front's session, page cache).
    for (int i = 0; i < 10; ++i) {
      for (const Call* c : {&sock_run, &sock_health}) Sample(*sock, *c, one["warm-up"]);
      for (const Call* c : {&http_run, &http_health, &http_healthz}) Sample(*http, *c, one["warm-up"]);
    }
    if (!one["warm-up"].errors.empty()) {
      std::fprintf(stderr, "http_bench: warm-up: %s\n", Failures(one["warm-up"].errors).c_str());
      status = 1;
    }
    one.erase("warm-up");

    // Phases 1 and 2, interleaved: in each round one sandbox.run on each
    // transport, then a burst of each of the three cheap calls, the order
    // of the transports swapped every round.
    // Each round's HTTP sample is also paired with its socket sample (the
    // health bursts element by element): the pairs' differences give the
    // front's cost with the drift between rounds taken out.
    const Clock::time_point t0 = Clock::now();
    for (int r = 0; r < rounds && status == 0 && !g_stop.load(); ++r) {
      const bool http_first = r % 2 == 1;
      std::optional<double> run_ms[2];  // socket, HTTP
      for (int i = 0; i < 2; ++i) {
        const bool use_http = (i == 0) == http_first;
        WaitQuiet(*control, std::chrono::seconds(10));
        run_ms[use_http] = use_http ? Sample(*http, http_run, one["http_run"]) : Sample(*sock, sock_run, one["sock_run"]);
      }
      if (run_ms[0] && run_ms[1]) {
        paired["run"].push_back(*run_ms[1] - *run_ms[0]);
        paired["run_outside"].push_back(one["http_run"].outside.back() - one["sock_run"].outside.back());
      }
      WaitQuiet(*control, std::chrono::seconds(10));
      std::vector<std::optional<double>> health_ms[2];
      for (int i = 0; i < 2; ++i) {
        const bool use_http = (i == 0) == http_first;
        for (int b = 0; b < kBurst; ++b) {
          if (use_http) {
            health_ms[1].push_back(Sample(*http, http_health, one["http_health"]));
            Sample(*http, http_healthz, one["http_healthz"]);
          } else {
            health_ms[0].push_back(Sample(*sock, sock_health, one["sock_health"]));
          }
        }
      }
      for (int b = 0; b < kBurst; ++b) {
        if (health_ms[0][b] && health_ms[1][b]) paired["health"].push_back(*health_ms[1][b] - *health_ms[0][b]);
      }
      if ((r + 1) % 50 == 0) {
        std::fprintf(stderr, "http_bench: round %d of %d, %.0f s\n", r + 1, rounds, MsBetween(t0, Clock::now()) / 1000);
      }
    }

    // Phase 3: 8 clients, the transports alternated run by run.
    for (int r = 0; r < load_runs && status == 0 && !g_stop.load(); ++r) {
      for (int i = 0; i < 2; ++i) {
        const bool use_http = (i == 0) == (r % 2 == 1);
        const auto& open = use_http ? std::function<absl::StatusOr<Wire>()>(open_http)
                                    : std::function<absl::StatusOr<Wire>()>(open_sock);
        load[use_http ? "http_run" : "sock_run"].push_back(
            RunLoad(open, use_http ? http_run : sock_run, kClients, load_n, *control));
        load[use_http ? "http_health" : "sock_health"].push_back(
            RunLoad(open, use_http ? http_health : sock_health, kClients, 10 * load_n, *control));
      }
      std::fprintf(stderr, "http_bench: load run %d of %d done\n", r + 1, load_runs);
    }
  }
  const std::string end_load = LoadAverage();
  const std::string stopped = (*daemon)->Stop();
  std::ifstream log(log_path);
  std::vector<std::string> log_lines;
  for (std::string line; std::getline(log, line) && log_lines.size() < 1000;) log_lines.push_back(line);
  std::fprintf(stderr, "http_bench: cubicle serve %s; %zu lines in its log\n", stopped.c_str(), log_lines.size());
  for (size_t i = 0; i < log_lines.size() && i < 10; ++i) std::fprintf(stderr, "  %s\n", log_lines[i].c_str());
  if (status != 0 || one.count("http_run") == 0) return status != 0 ? status : 1;

  std::printf("cubicle_http_bench, %s, load average %s at the start, %s at the end; binary %s; built-in config, "
              "shell pool warmed to %d; %d rounds; 8 clients × %d requests (health × %d) per run, %d runs each.\n\n",
              started.c_str(), start_load.c_str(), end_load.c_str(), binary.c_str(), warm, rounds, load_n,
              10 * load_n, load_runs);
  PrintSummary(one, load, paired, rounds);
  return 0;
}

}  // namespace
}  // namespace cubicle::bench

int main() { return cubicle::bench::Run(); }
