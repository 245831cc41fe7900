#include "namespaces/init.h"

#include "namespaces/process.h"

#include <signal.h>
#include <sys/prctl.h>
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

void HideLauncherCommandLine() {
  if (argv_begin != nullptr && argv_size > 0) {
    std::memset(argv_begin, 0, argv_size);
    child::CopyString(argv_begin, argv_size, "cubicle-init");
  }
  ::prctl(PR_SET_NAME, "cubicle-init", 0, 0, 0);
}

}  // namespace

void SetArgvArea(int argc, char** argv) {
  if (argc <= 0 || argv == nullptr || argv[0] == nullptr) return;
  char* end = argv[argc - 1] + std::strlen(argv[argc - 1]) + 1;
  argv_begin = argv[0];
  argv_size = static_cast<size_t>(end - argv[0]);
}

void BecomeInit() {
  // Init's memory is a copy of the launcher's (its heap, its environment):
  // not dumpable, so nothing in the sandbox can read it through /proc/1.
  // The payload's execve makes the payload dumpable again.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  HideLauncherCommandLine();
  // A PID 1 only receives signals it has a handler for; the handler never
  // runs (everything is blocked and taken with sigwaitinfo) but makes the
  // kernel deliver them.
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = Ignore;
  for (int sig : kForwarded) ::sigaction(sig, &sa, nullptr);
  sigset_t all;
  sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, nullptr);  // the payload unblocks its own copy
}

void Supervise(int control_fd, ControlMessage* report, long pid) {
  // From here init needs only its control socket; the payload has its own
  // copies of the stdio fds.
  CloseAllFdsExcept(&control_fd, 1, &report->error);
  report->payload_pid = static_cast<int32_t>(pid);

  sigset_t wanted;
  sigemptyset(&wanted);
  sigaddset(&wanted, SIGCHLD);
  for (int sig : kForwarded) sigaddset(&wanted, sig);
  for (;;) {
    siginfo_t info;
    int sig = ::sigwaitinfo(&wanted, &info);
    if (sig < 0) continue;  // EINTR
    if (sig != SIGCHLD) {
      ::kill(static_cast<pid_t>(pid), sig);
      continue;
    }
    for (;;) {
      int status = 0;
      struct rusage usage;
      pid_t reaped = ::wait4(-1, &status, WNOHANG, &usage);
      if (reaped <= 0) break;
      if (reaped != pid) continue;  // an orphan reparented to us: reaped, nothing to report
      report->type = ControlType::kPayloadExited;
      report->wait_status = status;
      report->rusage = usage;
      SendControl(control_fd, *report);
      ::_exit(0);
    }
  }
}

}  // namespace cubicle::namespaces
