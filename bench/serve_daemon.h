// A `cubicle serve` child process for the bench programs, and its clients:
// the daemon started on a Unix socket in a temporary directory and stopped
// with SIGTERM; a connection with one request in flight; pool.stats read
// into numbers, waited on until the pools are warm and quiet, and the
// difference of two readings.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace cubicle::bench {

using Clock = std::chrono::steady_clock;

inline double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

inline absl::Status Errno(const std::string& step) { return absl::ErrnoToStatus(errno, step); }

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    reset(std::exchange(o.fd_, -1));
    return *this;
  }
  ~Fd() { reset(); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

inline int DevNull() {
  static const int fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  return fd;
}

// A directory for the daemon's socket, config and log; removed with all it
// holds.
class TempDir {
 public:
  // `prefix`: an absolute path to which mkdtemp adds six characters.
  static absl::StatusOr<TempDir> Make(const std::string& prefix = "/tmp/cubicle-load-") {
    std::string path = prefix + "XXXXXX";
    if (::mkdtemp(path.data()) == nullptr) return Errno(absl::StrCat("mkdtemp(", path, ")"));
    TempDir dir;
    dir.path_ = path;
    return dir;
  }
  TempDir(TempDir&& o) noexcept : path_(std::exchange(o.path_, "")) {}
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  std::string Child(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  TempDir() = default;
  std::string path_;
};

// One connection to the daemon's socket, one request in flight at a time.
class Connection {
 public:
  static absl::StatusOr<Connection> Open(const std::string& socket_path) {
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return Errno("socket(AF_UNIX)");
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (socket_path.size() >= sizeof(addr.sun_path)) return absl::InvalidArgumentError("socket path too long");
    std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return Errno(absl::StrCat("connect(", socket_path, ")"));
    }
    Connection c;
    c.fd_ = std::move(fd);
    return c;
  }

  // One request line out, its reply line back, within `timeout`.
  absl::StatusOr<std::string> Call(const std::string& line, std::chrono::milliseconds timeout) {
    const Clock::time_point deadline = Clock::now() + timeout;
    const std::string out = line + "\n";
    for (size_t off = 0; off < out.size();) {
      const ssize_t n = ::send(fd_.get(), out.data() + off, out.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Errno("send(request)");
      off += static_cast<size_t>(n);
    }
    // Only what arrived since the last look is searched: a reply of tens
    // of MiB (files.get) comes in many reads.
    size_t searched = 0;
    for (;;) {
      const size_t nl = pending_.find('\n', searched);
      if (nl != std::string::npos) {
        std::string reply = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        return reply;
      }
      searched = pending_.size();
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return absl::DeadlineExceededError("no reply in time");
      pollfd p{fd_.get(), POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(left));
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) return Errno("poll(reply)");
      if (ready == 0) continue;
      char buf[65536];
      const ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Errno("recv(reply)");
      if (n == 0) return absl::UnavailableError("the daemon closed the connection");
      pending_.append(buf, static_cast<size_t>(n));
    }
  }

 private:
  Connection() = default;
  Fd fd_;
  std::string pending_;
};

// `cubicle serve` as a child: started with its socket, stopped with
// SIGTERM (then, bounded, SIGKILL) and reaped.
class ServeDaemon {
 public:
  // `extra`: more arguments of `serve` (`--state-dir DIR`).
  static absl::StatusOr<std::unique_ptr<ServeDaemon>> Start(const std::string& binary, const std::string& config,
                                                            const std::string& socket_path, const std::string& log,
                                                            const std::vector<std::string>& extra = {}) {
    Fd log_fd(::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!log_fd) return Errno(absl::StrCat("open(", log, ")"));
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return Errno("pipe2");
    Fd stdin_read(pipe_fds[0]);
    auto daemon = std::unique_ptr<ServeDaemon>(new ServeDaemon());
    daemon->stdin_ = Fd(pipe_fds[1]);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, stdin_read.get(), 0);
    posix_spawn_file_actions_adddup2(&actions, DevNull(), 1);
    posix_spawn_file_actions_adddup2(&actions, log_fd.get(), 2);
    std::vector<std::string> args = {binary, "serve", "--socket", socket_path, "--stdio", "--config", config};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int err = ::posix_spawn(&daemon->pid_, binary.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (err != 0) {
      daemon->pid_ = -1;
      return absl::ErrnoToStatus(err, absl::StrCat("posix_spawn(", binary, ")"));
    }
    // Ready once the socket answers (bounded: 60 s).
    for (int i = 0; i < 6000; ++i) {
      if (absl::StatusOr<Connection> c = Connection::Open(socket_path); c.ok()) return daemon;
      int status;
      if (::waitpid(daemon->pid_, &status, WNOHANG) == daemon->pid_) {
        daemon->pid_ = -1;
        return absl::UnavailableError(absl::StrCat("cubicle serve exited (status ", status, "); see its log"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return absl::DeadlineExceededError("cubicle serve did not listen within 60 s");
  }

  ~ServeDaemon() { Stop(); }

  pid_t pid() const { return pid_; }

  // SIGTERM: the daemon drains, removes every zygote and cgroup and its
  // socket, and exits. Bounded: 30 s, then SIGKILL. The exit status, or "".
  std::string Stop() {
    if (pid_ <= 0) return "";
    ::kill(pid_, SIGTERM);
    int status = 0;
    bool ended = false;
    for (int i = 0; i < 3000 && !ended; ++i) {
      ended = ::waitpid(pid_, &status, WNOHANG) == pid_;
      if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::string how;
    if (!ended) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      how = "did not end within 30 s of SIGTERM: killed";
    } else {
      how = WIFEXITED(status) ? absl::StrCat("exited ", WEXITSTATUS(status))
                              : absl::StrCat("killed by signal ", WTERMSIG(status));
    }
    stdin_.reset();
    pid_ = -1;
    return how;
  }

 private:
  ServeDaemon() = default;
  pid_t pid_ = -1;
  Fd stdin_;  // held open: EOF would end the daemon
};

// pool.stats: what the pools did, as numbers.

struct Histogram {
  uint64_t count = 0;
  double sum_ms = 0;
};

struct PoolSnapshot {
  int64_t idle = 0, building = 0, in_use = 0, waiting = 0, tearing_down = 0, min_idle = 0;
  uint64_t hits = 0, misses = 0, busy = 0, built = 0, build_failures = 0, died = 0;
  Histogram refill, refill_cpu, queue_wait;
  std::string last_error;
};
using PoolsSnapshot = std::map<std::string, PoolSnapshot>;

inline Histogram ReadHistogram(const boost::json::object& o) {
  Histogram h;
  h.count = static_cast<uint64_t>(o.at("count").to_number<double>());
  h.sum_ms = o.at("mean_ms").to_number<double>() * static_cast<double>(h.count);
  return h;
}

inline constexpr char kPoolStats[] = R"({"jsonrpc":"2.0","id":0,"method":"pool.stats"})";

inline absl::StatusOr<PoolsSnapshot> ReadPoolStats(Connection& control) {
  absl::StatusOr<std::string> reply = control.Call(kPoolStats, std::chrono::seconds(10));
  if (!reply.ok()) return reply.status();
  try {
    PoolsSnapshot out;
    boost::json::value v = boost::json::parse(*reply);
    for (const auto& [name, p] : v.at("result").at("pools").as_object()) {
      const boost::json::object& o = p.as_object();
      PoolSnapshot s;
      auto num = [&](const char* key) { return o.at(key).to_number<int64_t>(); };
      s.idle = num("idle");
      s.building = num("building");
      s.in_use = num("in_use");
      s.waiting = num("waiting");
      s.tearing_down = num("tearing_down");
      s.min_idle = num("min_idle");
      s.hits = static_cast<uint64_t>(num("hits"));
      s.misses = static_cast<uint64_t>(num("misses"));
      s.busy = static_cast<uint64_t>(num("busy"));
      s.built = static_cast<uint64_t>(num("built"));
      s.build_failures = static_cast<uint64_t>(num("build_failures"));
      s.died = static_cast<uint64_t>(num("died"));
      s.refill = ReadHistogram(o.at("refill_ms").as_object());
      s.refill_cpu = ReadHistogram(o.at("refill_cpu_ms").as_object());
      s.queue_wait = ReadHistogram(o.at("queue_wait_ms").as_object());
      if (const boost::json::value* e = o.if_contains("last_error"); e != nullptr && e->is_string()) {
        s.last_error = std::string(e->as_string());
      }
      out[std::string(name)] = s;
    }
    return out;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("pool.stats: unexpected reply (", e.what(), "): ", *reply));
  }
}

inline bool Quiet(const PoolsSnapshot& pools) {
  return std::all_of(pools.begin(), pools.end(), [](const auto& entry) {
    const PoolSnapshot& p = entry.second;
    return p.building == 0 && p.tearing_down == 0 && p.in_use == 0 && p.waiting == 0 && p.idle >= p.min_idle;
  });
}

// Waits (at most `limit`) until every pool is warm (min_idle ready) and
// nothing is built, run or torn down. The last snapshot, and whether it
// was quiet.
inline std::pair<PoolsSnapshot, bool> WaitQuiet(Connection& control, std::chrono::milliseconds limit) {
  const Clock::time_point deadline = Clock::now() + limit;
  PoolsSnapshot last;
  for (int i = 0; i < 100000; ++i) {
    absl::StatusOr<PoolsSnapshot> s = ReadPoolStats(control);
    if (!s.ok()) {
      std::fprintf(stderr, "load_bench: %s\n", std::string(s.status().message()).c_str());
      return {last, false};
    }
    last = *std::move(s);
    if (Quiet(last)) return {last, true};
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return {last, false};
}

// What one run did to one pool: the difference of two snapshots.
struct PoolDelta {
  uint64_t hits = 0, misses = 0, busy = 0, built = 0, build_failures = 0, died = 0;
  Histogram refill, refill_cpu, queue_wait;
  double HitRatio() const {
    return hits + misses > 0 ? static_cast<double>(hits) / static_cast<double>(hits + misses) : NAN;
  }
};

inline Histogram Minus(const Histogram& a, const Histogram& b) { return {a.count - b.count, a.sum_ms - b.sum_ms}; }
inline double Mean(const Histogram& h) { return h.count > 0 ? h.sum_ms / static_cast<double>(h.count) : NAN; }

inline PoolDelta Delta(const PoolSnapshot& after, const PoolSnapshot& before) {
  PoolDelta d;
  d.hits = after.hits - before.hits;
  d.misses = after.misses - before.misses;
  d.busy = after.busy - before.busy;
  d.built = after.built - before.built;
  d.build_failures = after.build_failures - before.build_failures;
  d.died = after.died - before.died;
  d.refill = Minus(after.refill, before.refill);
  d.refill_cpu = Minus(after.refill_cpu, before.refill_cpu);
  d.queue_wait = Minus(after.queue_wait, before.queue_wait);
  return d;
}

// For a driver's report: the time now ("2026-12-07 01:29 UTC") and the
// one-minute load average, which says how quiet the machine was.
inline std::string Now() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

inline std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  in >> one;
  return one;
}

}  // namespace cubicle::bench
