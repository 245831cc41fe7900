#include "namespaces/init.h"

#include "namespaces/process.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cubicle::namespaces {
namespace {

constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

void Ignore(int) {}

char* argv_begin = nullptr;
size_t argv_size = 0;

// AfterExit::linger. The launcher sends nothing more: a recv that returns
// is its hang-up (0), or an error on a socket that is as good as gone.
void Linger(int control_fd, bool own_pid_namespace) {
  if (own_pid_namespace) ::kill(-1, SIGKILL);  // PID 1: every other process of the namespace
  char byte;
  ssize_t n;
  do {
    n = ::recv(control_fd, &byte, 1, 0);
  } while (n > 0 || (n < 0 && errno == EINTR));
}

}  // namespace

void NameProcess(const char* name) {
  if (argv_begin != nullptr && argv_size > 0) {
    std::memset(argv_begin, 0, argv_size);
    child::CopyString(argv_begin, argv_size, name);
  }
  ::prctl(PR_SET_NAME, name, 0, 0, 0);
}

void SetArgvArea(int argc, char** argv) {
  if (argc <= 0 || argv == nullptr || argv[0] == nullptr) return;
  char* end = argv[argc - 1] + std::strlen(argv[argc - 1]) + 1;
  argv_begin = argv[0];
  argv_size = static_cast<size_t>(end - argv[0]);
}

bool BecomeInit(bool stay_dumpable, ChildError* error) {
  // Init's memory is a copy of the launcher's (its heap, its environment):
  // not dumpable, so nothing in the sandbox can read it through /proc/1.
  // The payload's execve makes the payload dumpable again. Init that would
  // stay readable goes no further, unless asked to stay so.
  if (::prctl(PR_SET_DUMPABLE, stay_dumpable ? 1 : 0, 0, 0, 0) != 0) {
    return child::Fail(error, "prctl(PR_SET_DUMPABLE)", "init", errno);
  }
  NameProcess("cubicle-init");  // the launcher's command line is not the sandbox's to read
  // Every disposition the launcher had goes back to its default, so that
  // a process init makes inherits a fresh process's signal state but for
  // the forwarded ones (RestoreSignalsForPayload). Those get a handler: a
  // PID 1 only receives signals it has a handler for; the handler never
  // runs (everything is blocked and taken with sigwaitinfo) but makes the
  // kernel deliver them.
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &sa, nullptr);  // libc's reserved ones fail harmlessly
  }
  sa.sa_handler = Ignore;
  for (int sig : kForwarded) ::sigaction(sig, &sa, nullptr);
  sigset_t all;
  sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, nullptr);  // the payload unblocks its own copy
  return true;
}

void RestoreSignalsForPayload() {
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig : kForwarded) ::sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

namespace {

// The wait(2) status word of an exited child, from waitid's siginfo.
int WaitStatusOf(const siginfo_t& info) {
  switch (info.si_code) {
    case CLD_EXITED:
      return (info.si_status & 0xff) << 8;
    case CLD_DUMPED:
      return (info.si_status & 0x7f) | 0x80;
    default:  // CLD_KILLED
      return info.si_status & 0x7f;
  }
}

}  // namespace

void Supervise(int control_fd, ControlMessage* report, long pid, const InitService* service, AfterExit after) {
  // From here init needs only its control socket (and the service's two
  // sockets); the payload has its own copies of the stdio fds.
  const bool serving = service != nullptr && service->fd >= 0;
  const int keep[4] = {control_fd, after.adopted_pidfd, serving ? service->fd : -1,
                       serving ? service->partner_fd : -1};
  CloseAllFdsExcept(keep, serving ? 4 : 2, &report->error);
  report->payload_pid = static_cast<int32_t>(pid);
  const bool adopted = after.adopted_pidfd >= 0;
  const bool polling = serving || adopted;

  sigset_t wanted;
  sigemptyset(&wanted);
  sigaddset(&wanted, SIGCHLD);
  for (int sig : kForwarded) sigaddset(&wanted, sig);
  // With a service or an adopted payload, signals arrive on a signalfd
  // polled with their fds; otherwise through sigwaitinfo.
  const int sigfd = polling ? ::signalfd(-1, &wanted, SFD_CLOEXEC | SFD_NONBLOCK) : -1;
  for (;;) {
    int sig;
    if (polling) {
      // Without a signalfd (ENOMEM), signals are polled for every 50 ms
      // rather than the service left unserved.
      struct pollfd fds[3] = {{sigfd, POLLIN, 0},
                              {serving ? service->fd : -1, POLLIN, 0},
                              {after.adopted_pidfd, POLLIN, 0}};
      // EINTR, or ENOMEM, which passes: init has nothing better to do
      // than to wait again.
      if (::poll(fds, 3, sigfd >= 0 ? -1 : 50) < 0) continue;
      if (fds[1].revents & POLLIN) service->on_readable(service->fd, service->partner_fd);
      if (fds[2].revents & POLLIN) {
        // The adopted payload ended; its parent reports how.
        if (after.linger) Linger(control_fd, after.own_pid_namespace);
        ::_exit(0);
      }
      if (sigfd >= 0) {
        struct signalfd_siginfo si;
        if (!(fds[0].revents & POLLIN) || ::read(sigfd, &si, sizeof(si)) != sizeof(si)) continue;
        sig = static_cast<int>(si.ssi_signo);
      } else {
        siginfo_t info;
        const struct timespec now = {0, 0};
        sig = ::sigtimedwait(&wanted, &info, &now);
        if (sig < 0) continue;  // EAGAIN: none pending
      }
    } else {
      siginfo_t info;
      sig = ::sigwaitinfo(&wanted, &info);
      if (sig < 0) continue;  // EINTR
    }
    if (sig != SIGCHLD) {
      ::kill(static_cast<pid_t>(pid), sig);
      continue;
    }
    // Each exited child, seen before it is reaped (WNOWAIT): the payload's
    // status and rusage go out first, and its reap (the task's release,
    // tens of µs) comes after the report, off the request's path. Orphans
    // reparented to init are reaped, nothing to report.
    for (;;) {
      siginfo_t info;
      std::memset(&info, 0, sizeof(info));
      struct rusage usage;
      if (::syscall(SYS_waitid, P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT, &usage) != 0 || info.si_pid == 0) {
        break;
      }
      if (info.si_pid != pid) {
        ::waitpid(info.si_pid, nullptr, WNOHANG);
        continue;
      }
      report->type = ControlType::kPayloadExited;
      report->wait_status = WaitStatusOf(info);
      report->rusage = usage;
      SendControl(control_fd, *report);
      ::waitpid(static_cast<pid_t>(pid), nullptr, 0);
      if (after.linger) Linger(control_fd, after.own_pid_namespace);
      ::_exit(0);
    }
  }
}

}  // namespace cubicle::namespaces
