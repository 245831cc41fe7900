// `cubicle serve` under systemd's protocols, with the test playing
// systemd: a NOTIFY_SOCKET of its own hears READY=1 only once the pools
// are warm and STOPPING=1 when the drain starts; sockets handed over the
// socket-activation way (LISTEN_FDS, LISTEN_PID, fds from 3) are served
// and left in place at exit; a passed fd that is not a listening socket is
// refused. Skipped where libsystemd.so.0 cannot be loaded.
#include <dlfcn.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/unique_fd.h"
#include "tests/support/daemon_client.h"
#include "tests/support/http_client.h"
#include "tests/support/sandbox_runner.h"
#include "tests/support/session_daemon.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

constexpr char kConfig[] = R"({"profiles": {"shell": {"pool": {"min_idle": 2, "max_idle": 2, "max_total": 4}}}})";

bool HaveLibsystemd() {
  void* lib = ::dlopen("libsystemd.so.0", RTLD_NOW | RTLD_LOCAL);
  if (lib != nullptr) ::dlclose(lib);
  return lib != nullptr;
}

UniqueFd BoundUnix(int type, const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, type, 0));  // no CLOEXEC: handed to the daemon
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  if (!fd || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return UniqueFd();
  if (type == SOCK_STREAM && ::listen(fd.get(), 16) != 0) return UniqueFd();
  return fd;
}

// The next datagram on `fd` within `limit`; "" when none came.
std::string NextDatagram(int fd, absl::Duration limit) {
  struct pollfd p = {fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(limit))) != 1) return "";
  char buf[4096];
  const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

TEST(Systemd, ReadyOnlyOncePoolsAreWarmAndStoppingWhenTheDrainStarts) {
  if (!HaveLibsystemd()) GTEST_SKIP() << "libsystemd.so.0 is not installed";
  TempDir dir;
  const std::string notify_path = dir.Join("notify");
  UniqueFd notify = BoundUnix(SOCK_DGRAM, notify_path);
  ASSERT_TRUE(notify);
  const std::string socket = dir.Join("rpc.sock");
  RunningProcess daemon(CubicleArgv({"serve", "--socket", socket, "--config", WriteConfig(dir, kConfig)}), "",
                        {absl::StrCat("NOTIFY_SOCKET=", notify_path)});
  ASSERT_TRUE(daemon.started());
  std::vector<std::string> heard;
  for (int i = 0; i < 20 && (heard.empty() || !absl::StrContains(heard.back(), "READY=1")); ++i) {
    std::string message = NextDatagram(notify.get(), absl::Seconds(30));
    ASSERT_FALSE(message.empty()) << "no READY=1 within the bound; heard so far: " << heard.size();
    heard.push_back(message);
  }
  ASSERT_TRUE(absl::StrContains(heard.back(), "READY=1"));
  EXPECT_TRUE(absl::StrContains(heard.front(), "STATUS=warming")) << heard.front();
  // Ready means warm: the pool holds its min_idle now.
  DaemonClient c(socket);
  json::value stats = c.CallJson(RequestLine(1, "pool.stats"));
  EXPECT_GE(stats.at("result").at("pools").at("shell").at("idle").as_int64(), 2) << json::serialize(stats);
  daemon.Signal(SIGTERM);
  std::string stopping = NextDatagram(notify.get(), absl::Seconds(30));
  EXPECT_TRUE(absl::StrContains(stopping, "STOPPING=1")) << stopping;
  EXPECT_EQ(daemon.Wait().exit_code, 0);
}

// `cubicle serve ARGS` with `fds` as fds 3, 4, ... and the variables
// systemd sets; its pid.
pid_t SpawnActivated(const std::vector<int>& fds, const std::vector<std::string>& args) {
  std::vector<std::string> argv = CubicleArgv(args);
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  // Moved out of the way first, then into place from 3 on.
  std::vector<int> high;
  for (int fd : fds) high.push_back(::fcntl(fd, F_DUPFD, 100));
  for (size_t i = 0; i < high.size(); ++i) {
    if (::dup2(high[i], 3 + static_cast<int>(i)) < 0) _exit(127);
  }
  ::setenv("LISTEN_FDS", std::to_string(fds.size()).c_str(), 1);
  ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
  std::vector<char*> raw;
  for (std::string& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  ::execv(raw[0], raw.data());
  _exit(127);
}

int WaitExit(pid_t pid) {
  int status = 0;
  for (int i = 0; i < 6000; ++i) {  // at most 60 s
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    absl::SleepFor(absl::Milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -2;
}

TEST(Systemd, ActivatedSocketsAreServedAndLeftInPlace) {
  if (!HaveLibsystemd()) GTEST_SKIP() << "libsystemd.so.0 is not installed";
  TempDir dir;
  const std::string path = dir.Join("activated.sock");
  UniqueFd unix_listener = BoundUnix(SOCK_STREAM, path);
  ASSERT_TRUE(unix_listener);
  UniqueFd tcp(::socket(AF_INET, SOCK_STREAM, 0));
  struct sockaddr_in addr {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(addr);
  ASSERT_EQ(::bind(tcp.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(tcp.get(), 16), 0);
  ASSERT_EQ(::getsockname(tcp.get(), reinterpret_cast<sockaddr*>(&addr), &length), 0);
  const pid_t pid = SpawnActivated({unix_listener.get(), tcp.get()}, {"serve", "--config", WriteConfig(dir, kConfig)});
  ASSERT_GT(pid, 0);
  // A client may connect before the daemon took the sockets over: it
  // waits in the backlog.
  DaemonClient c(path);
  json::value health = c.CallJson(RequestLine(1, "health"));
  EXPECT_TRUE(HasResult(health)) << json::serialize(health);
  HttpClient http(ntohs(addr.sin_port));
  std::optional<HttpReply> healthz = http.Request("GET", "/healthz");
  ASSERT_TRUE(healthz.has_value());
  EXPECT_EQ(healthz->status, 200);
  ::kill(pid, SIGTERM);
  EXPECT_EQ(WaitExit(pid), 0);
  EXPECT_EQ(::access(path.c_str(), F_OK), 0) << "the activated socket is systemd's to remove";
}

TEST(Systemd, APassedFdThatIsNoListeningSocketIsRefused) {
  if (!HaveLibsystemd()) GTEST_SKIP() << "libsystemd.so.0 is not installed";
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  TempDir dir;
  const pid_t pid = SpawnActivated({pipe_fds[0]}, {"serve", "--config", WriteConfig(dir, kConfig)});
  ASSERT_GT(pid, 0);
  EXPECT_EQ(WaitExit(pid), 2);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

}  // namespace
}  // namespace cubicle::test_support
