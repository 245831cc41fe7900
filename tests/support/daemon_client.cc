#include "tests/support/daemon_client.h"

#include <dirent.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <fstream>

#include <boost/json/parse.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace cubicle::test_support {

bool SendAll(int fd, absl::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool ReadSome(int fd, absl::Duration limit, std::string* into, bool* eof) {
  const absl::Time deadline = absl::Now() + limit;
  for (;;) {
    const int64_t left = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
    struct pollfd p = {fd, POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    char buf[65536];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *eof = true;
      return false;
    }
    into->append(buf, static_cast<size_t>(n));
    return true;
  }
}

DaemonClient::DaemonClient(const std::string& path) {
  fd_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  connected_ = ::connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
}

bool DaemonClient::Send(const std::string& line) { return SendRaw(line + "\n"); }

void DaemonClient::ShutdownWrite() { ::shutdown(fd_.get(), SHUT_WR); }

bool DaemonClient::SendRaw(absl::string_view bytes) { return SendAll(fd_.get(), bytes); }

// Reads what is there within `limit` into buffered_; false at EOF or when
// nothing came.
bool DaemonClient::Fill(absl::Duration limit) {
  if (eof_ || !fd_) return false;
  return ReadSome(fd_.get(), limit, &buffered_, &eof_);
}

std::optional<std::string> DaemonClient::ReadLine(absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  for (;;) {
    size_t nl = buffered_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration() || !Fill(left)) {
      if (eof_ || absl::Now() >= deadline) return std::nullopt;
    }
  }
}

bool DaemonClient::HasReply() {
  while (Fill(absl::ZeroDuration())) {
  }
  return buffered_.find('\n') != std::string::npos || eof_;
}

bool DaemonClient::ClosedByPeer(absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  while (!eof_ && absl::Now() < deadline) Fill(deadline - absl::Now());
  return eof_;
}

std::string DaemonClient::Call(const std::string& line) {
  if (!Send(line)) return "";
  return ReadLine().value_or("");
}

boost::json::value DaemonClient::CallJson(const std::string& line) { return ParseJson(Call(line)); }

boost::json::value ParseJson(absl::string_view line) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(boost::json::string_view(line.data(), line.size()), ec);
  return ec ? boost::json::value(nullptr) : v;
}

std::string RequestLine(int64_t id, absl::string_view method, absl::string_view params) {
  return absl::StrCat(R"({"jsonrpc":"2.0","id":)", id, R"(,"method":")", method, "\"",
                      params.empty() ? "" : absl::StrCat(R"(,"params":)", params), "}");
}

SocketDaemon::SocketDaemon(Options options) : socket_(dir_.Join("rpc.sock")) {
  std::vector<std::string> args = {"serve", "--socket", socket_};
  args.insert(args.end(), options.flags.begin(), options.flags.end());
  std::vector<std::string> argv = CubicleArgv(args);
  if (options.nofile.has_value()) {
    // The shell sets the limit, then becomes the daemon (same pid).
    std::vector<std::string> wrapped = {"/bin/sh", "-c",
                                        absl::StrCat("ulimit -Sn ", *options.nofile, " && ulimit -Hn ",
                                                     *options.nofile, R"( && exec "$0" "$@")")};
    wrapped.insert(wrapped.end(), argv.begin(), argv.end());
    argv = std::move(wrapped);
  }
  process_ = std::make_unique<RunningProcess>(argv, "", options.env);
  for (int i = 0; i < 1000 && !up_ && process_->started(); ++i) {  // at most 10 s
    up_ = DaemonClient(socket_).connected();
    if (up_) break;
    siginfo_t info = {};
    if (::waitid(P_PID, process_->pid(), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

boost::json::value SocketDaemon::Call(const std::string& line) {
  DaemonClient client(socket_);
  if (!client.Send(line)) return nullptr;
  // The reply, past the notifications the request may bring first
  // (a skill's skill.progress): those have a method and no id.
  for (int i = 0; i < 10000; ++i) {
    std::optional<std::string> got = client.ReadLine();
    if (!got.has_value()) return nullptr;
    boost::json::value v = ParseJson(*got);
    const boost::json::object* o = v.if_object();
    if (o == nullptr || !o->contains("method") || o->contains("id")) return v;
  }
  return nullptr;
}

ProcessRun SocketDaemon::Stop() {
  process_->Signal(SIGTERM);
  return process_->Wait(absl::Seconds(60));
}

std::string AsUser(const std::string& socket, uid_t uid, const std::vector<std::string>& lines) {
  int out[2];
  if (::pipe(out) != 0) return "pipe failed";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(out[0]);
    if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 || ::setresuid(uid, uid, uid) != 0) _exit(2);
    DaemonClient c(socket);
    std::string got = c.connected() ? "" : "not connected";
    for (const std::string& line : lines) {
      // A refused client may be closed before it sends: what the daemon
      // said before closing is still there to read.
      (void)c.Send(line);
      std::optional<std::string> reply = c.ReadLine(absl::Seconds(30));
      if (!reply.has_value()) break;
      absl::StrAppend(&got, *reply, "\n");
    }
    if (c.ClosedByPeer(absl::Seconds(2))) absl::StrAppend(&got, "EOF");
    (void)!::write(out[1], got.data(), got.size());
    _exit(0);
  }
  ::close(out[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof(buf))) > 0;) got.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return got;
}

std::vector<std::string> CgroupsMadeBy(pid_t pid) {
  const std::string prefix = absl::StrCat("cubicle-", pid, "-");
  std::vector<std::string> found;
  std::vector<std::pair<std::string, int>> pending = {{"/sys/fs/cgroup", 0}};
  while (!pending.empty()) {
    auto [dir, depth] = pending.back();
    pending.pop_back();
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) continue;  // removed meanwhile, or not ours to read
    while (struct dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (e->d_type != DT_DIR || name == "." || name == "..") continue;
      const std::string path = absl::StrCat(dir, "/", name);
      if (absl::StartsWith(name, prefix)) found.push_back(path);
      if (depth < 32) pending.push_back({path, depth + 1});
    }
    ::closedir(d);
  }
  return found;
}

std::vector<std::string> CgroupsMadeBy(const std::vector<pid_t>& makers) {
  std::vector<std::string> all;
  for (pid_t pid : makers) {
    for (std::string& path : CgroupsMadeBy(pid)) all.push_back(std::move(path));
  }
  return all;
}

std::string WriteConfig(const TempDir& dir, const std::string& text) {
  const std::string config = dir.Join("config.json");
  std::ofstream(config) << text;
  return config;
}

}  // namespace cubicle::test_support
