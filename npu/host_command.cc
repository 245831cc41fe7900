#include "npu/host_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status.h"
#include "base/unique_fd.h"

namespace cubicle::npu {
namespace {

void Keep(std::string* into, bool* truncated, const char* data, size_t n, uint64_t budget) {
  size_t room = into->size() < budget ? budget - into->size() : 0;
  if (n > room) *truncated = true;
  into->append(data, n < room ? n : room);
}

}  // namespace

absl::StatusOr<HostCommandResult> RunHostCommand(const std::vector<std::string>& argv,
                                                 const HostCommandOptions& options) {
  if (argv.empty() || argv[0].empty() || argv[0][0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("host command: argv[0] must be an absolute path, got \"", argv.empty() ? "" : argv[0], "\""));
  }
  if (::access(argv[0].c_str(), X_OK) != 0) return ErrnoStatus(errno, absl::StrCat("access(", argv[0], ", X_OK)"));
  // Everything the child needs is made before fork: the daemon has threads,
  // so the child may only make async-signal-safe calls.
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : options.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2(stdout)");
  UniqueFd out_r(out_pipe[0]), out_w(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2(stderr)");
  UniqueFd err_r(err_pipe[0]), err_w(err_pipe[1]);
  UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!null) return ErrnoStatus(errno, "open(/dev/null)");

  pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus(errno, "fork");
  if (pid == 0) {
    ::setpgid(0, 0);
    if (::dup2(null.get(), 0) < 0 || ::dup2(out_w.get(), 1) < 0 || ::dup2(err_w.get(), 2) < 0) ::_exit(126);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from here: no window where a kill(-pid) misses it
  out_w.reset();
  err_w.reset();

  HostCommandResult result;
  const absl::Time deadline = absl::Now() + options.timeout;
  char buf[16384];
  bool out_open = true, err_open = true;
  while (out_open || err_open) {
    struct pollfd fds[2] = {{out_open ? out_r.get() : -1, POLLIN, 0}, {err_open ? err_r.get() : -1, POLLIN, 0}};
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      result.timed_out = true;
      break;
    }
    int n = ::poll(fds, 2, static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)))));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int saved = errno;
      ::kill(-pid, SIGKILL);
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      return ErrnoStatus(saved, "poll(host command)");
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].revents == 0) continue;
      ssize_t got = ::read(fds[i].fd, buf, sizeof(buf));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        (i == 0 ? out_open : err_open) = false;
        continue;
      }
      if (i == 0) Keep(&result.out, &result.out_truncated, buf, static_cast<size_t>(got), options.output_budget);
      if (i == 1) Keep(&result.err, &result.err_truncated, buf, static_cast<size_t>(got), options.output_budget);
    }
  }
  // The program closed its output (or ran out of time): wait for it, up to
  // the deadline, then kill its group.
  if (result.timed_out) ::kill(-pid, SIGKILL);
  int status = 0;
  for (;;) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return ErrnoStatus(errno, "waitpid(host command)");
    if (!result.timed_out && absl::Now() >= deadline) {
      result.timed_out = true;
      ::kill(-pid, SIGKILL);
    }
    ::usleep(1000);  // closed its output but has not exited yet: brief, and bounded by the deadline
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

}  // namespace cubicle::npu
