#include "runtime/teardown.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <utility>

#include "namespaces/clone.h"
#include "namespaces/init.h"

namespace cubicle::runtime {
namespace {

// Init's namespaces, held by the cleaner: init's exit then drops a
// reference instead of tearing them down, and the mount namespace's RCU
// grace period, most of init's exit, passes in the cleaner.
constexpr const char* kHeldNamespaces[] = {"mnt", "net", "ipc", "uts", "cgroup", "pid", "user"};
constexpr size_t kCleanerStackBytes = 256 * 1024;
// How long the cleaner waits for init's exit before leaving the groups to
// the next start's sweep (init was SIGKILLed: only a kernel stuck in a
// D-state wait takes this long).
constexpr int kCleanerWaitMs = 60'000;

// Closes every fd without FD_CLOEXEC: cubicle opens all of its own with
// it, so these are what this process's caller handed it (stdio, pipes,
// --json-status /dev/fd/N). Holding none of them, the cleaner does not
// keep a caller's read from reaching EOF. Stdio becomes /dev/null rather
// than closed, so that no file the cleaner opens takes fd 2, where a log
// line would go.
void CloseCallersFds() {
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0 && null <= 2) {  // a caller that closed some of stdio
    const int high = ::fcntl(null, F_DUPFD_CLOEXEC, 3);
    ::close(null);
    null = high;
  }
  for (int fd = 0; fd <= 2; ++fd) {
    if (null < 0 || ::dup3(null, fd, O_CLOEXEC) < 0) ::close(fd);
  }
  if (null >= 0) ::close(null);
  const int dir = ::open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;  // no /proc: stdio at least is done
  alignas(struct dirent64) char buf[2048];
  for (;;) {
    const ssize_t n = ::getdents64(dir, buf, sizeof(buf));
    if (n <= 0) break;
    for (ssize_t off = 0; off < n;) {
      const auto* entry = reinterpret_cast<const struct dirent64*>(buf + off);
      off += entry->d_reclen;
      int fd = 0;
      bool number = entry->d_name[0] != '\0';
      for (const char* c = entry->d_name; *c != '\0' && number; ++c) {
        number = *c >= '0' && *c <= '9';
        fd = fd * 10 + (*c - '0');
      }
      if (!number || fd == dir) continue;
      const int flags = ::fcntl(fd, F_GETFD);
      if (flags >= 0 && (flags & FD_CLOEXEC) == 0) ::close(fd);
    }
  }
  ::close(dir);
}

bool SingleThreaded() {
  struct stat st;  // procfs counts a task directory's links as 2 + its threads
  return ::stat("/proc/self/task", &st) == 0 && st.st_nlink == 3;
}

}  // namespace

SandboxRemains::SandboxRemains(pid_t init_pid, UniqueFd init_pidfd,
                               std::unique_ptr<cgroups::SandboxCgroup> cgroup,
                               std::unique_ptr<cgroups::DeviceCgroup> devices)
    : init_pid_(init_pid),
      init_pidfd_(std::move(init_pidfd)),
      cgroup_(std::move(cgroup)),
      devices_(std::move(devices)) {}

SandboxRemains::SandboxRemains(SandboxRemains&& other) noexcept
    : init_pid_(std::exchange(other.init_pid_, -1)),
      init_pidfd_(std::move(other.init_pidfd_)),
      init_reaped_(other.init_reaped_),
      cgroup_(std::move(other.cgroup_)),
      devices_(std::move(other.devices_)) {}

SandboxRemains::~SandboxRemains() { TearDownNow(); }

void SandboxRemains::TearDownNow() {
  KillAndReapInit();
  RemoveGroups();
}

void SandboxRemains::KillAndReapInit() {
  if (init_reaped_ || init_pid_ <= 0) return;
  namespaces::SignalProcess(init_pidfd_.get(), init_pid_, SIGKILL);
  while (::waitpid(init_pid_, nullptr, __WALL) < 0 && errno == EINTR) {
  }
  init_reaped_ = true;
}

void SandboxRemains::RemoveGroups() {
  // With its own pid namespace the sandbox's processes died with init, so
  // the groups are empty: RemoveOrKill removes them, killing only what that
  // shows is left.
  if (cgroup_ != nullptr) (void)cgroup_->RemoveOrKill();
  cgroup_.reset();
  if (devices_ != nullptr) (void)devices_->Remove();
  devices_.reset();
}

int SandboxRemains::Cleaner(void* arg) {
  auto* remains = static_cast<SandboxRemains*>(arg);
  // Nothing but SIGKILL ends it half way: a Ctrl-C to the launcher's
  // process group is not meant for it.
  sigset_t all;
  ::sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, nullptr);
  namespaces::NameProcess("cubicle-cleanup");
  struct pollfd exited = {remains->init_pidfd_.get(), POLLIN, 0};
  int n;
  do {
    n = ::poll(&exited, 1, kCleanerWaitMs);
  } while (n < 0 && errno == EINTR);
  if (n == 1) remains->RemoveGroups();
  // The held namespaces go with this process's fds, the shared address
  // space with its exit.
  ::_exit(0);
}

void ExitAfterSandbox(SandboxRemains remains, int status) {
  std::fflush(nullptr);
  void* stack = MAP_FAILED;
  // As PID 1 of a pid namespace (a container's entry point), this
  // process's exit would kill the cleaner with the rest of the namespace.
  if (remains.init_pid_ > 0 && remains.init_pidfd_ && ::getpid() != 1 && SingleThreaded()) {
    stack = ::mmap(nullptr, kCleanerStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
                   -1, 0);
  }
  if (stack == MAP_FAILED) {
    remains.TearDownNow();
    ::_exit(status);
  }
  // Opened while init lingers, before it is killed.
  UniqueFd ns_dir(::open(("/proc/" + std::to_string(remains.init_pid_) + "/ns").c_str(),
                         O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (ns_dir) {
    for (const char* ns : kHeldNamespaces) (void)::openat(ns_dir.get(), ns, O_RDONLY | O_CLOEXEC);
  }
  ns_dir.reset();
  const pid_t init_pid = remains.init_pid_;
  const int init_pidfd = remains.init_pidfd_.get();
  namespaces::SignalProcess(init_pidfd, init_pid, SIGKILL);
  CloseCallersFds();
  // The cleaner owns the remains from here; this process touches neither
  // them nor the heap again.
  auto* owned = new SandboxRemains(std::move(remains));
  const pid_t cleaner =
      ::clone(&SandboxRemains::Cleaner, static_cast<char*>(stack) + kCleanerStackBytes, CLONE_VM | SIGCHLD, owned);
  if (cleaner < 0) {
    owned->TearDownNow();
    ::_exit(status);
  }
  (void)namespaces::SpinUntilExited(init_pidfd, namespaces::kInitExitSpinNs);
  while (::waitpid(init_pid, nullptr, __WALL) < 0 && errno == EINTR) {
  }
  ::_exit(status);
}

}  // namespace cubicle::runtime
