// What a Zygote holds between Create() and Run(), shared by zygote.cc
// (making the sandbox) and zygote_run.cc (one execution in it). Internal
// to runtime/.
#pragma once

#include <poll.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <cerrno>
#include <map>
#include <memory>
#include <string>
#include <optional>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "cgroups/cgroup.h"
#include "cgroups/devices.h"
#include "egress/gateway_process.h"
#include "namespaces/control.h"
#include "namespaces/process.h"
#include "runtime/child_plan.h"
#include "runtime/identity.h"
#include "runtime/result.h"
#include "runtime/spec.h"
#include "runtime/warm.h"

namespace cubicle::runtime {

// Owns the sandbox's init process until it is reaped: an early return
// anywhere in the parent kills and reaps it, so nothing outlives its Zygote.
// An init made by another process (Zygote::TakeOver) is not this one's
// child: it is waited for through its pidfd, and its maker reaps it.
class InitProcess {
 public:
  InitProcess(pid_t pid, int pidfd, bool child = true) : pid_(pid), pidfd_(pidfd), child_(child) {}
  InitProcess(const InitProcess&) = delete;
  InitProcess& operator=(const InitProcess&) = delete;
  ~InitProcess() {
    if (!reaped_) {
      Signal(SIGKILL);
      Reap();
    }
  }
  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_.get(); }
  bool reaped() const { return reaped_; }
  void Signal(int sig) { namespaces::SignalProcess(pidfd_.get(), pid_, sig); }
  // Gives up the process unreaped: its pidfd goes to the caller.
  UniqueFd Release() {
    reaped_ = true;
    return std::move(pidfd_);
  }
  // The wait status, or kUnknownStatus for an init that is not a child.
  int Reap() {
    reaped_ = true;
    if (!child_) {
      struct pollfd p = {pidfd_.get(), POLLIN, 0};
      while (pidfd_ && ::poll(&p, 1, -1) < 0 && errno == EINTR) {
      }
      return kUnknownStatus;
    }
    int status = 0;
    while (::waitpid(pid_, &status, __WALL) < 0 && errno == EINTR) {
    }
    return status;
  }
  static constexpr int kUnknownStatus = -1;

 private:
  pid_t pid_;
  UniqueFd pidfd_;
  bool child_;
  bool reaped_ = false;
};

// The LateReport page, unmapped with the state that holds it.
struct UnmapLateReport {
  void operator()(LateReport* page) const { ::munmap(page, sizeof(LateReport)); }
};

struct ZygoteState {
  SandboxSpec spec;  // breakers and the host ids come from it at Run()
  std::optional<WarmInterpreter> interpreter;
  Identity identity;
  absl::Time start;
  bool cold = false;  // Launch(): times count from Create()
  // What must outlive the sandbox: a warm template, whose sandbox is the
  // ancestor of this one's pid namespace (runtime/warm_template.h).
  // Declared before `init`, so released after init is reaped: a template's
  // init, once killed, waits until every process of its pid namespace is
  // reaped, this sandbox's init among them, and its owner waits for it.
  std::shared_ptr<void> keep_alive;
  // Declared before `init`: destroyed (killed, removed) after init is reaped.
  std::unique_ptr<cgroups::SandboxCgroup> cgroup;
  std::unique_ptr<cgroups::DeviceCgroup> devices;  // spec.devices: removed after init is reaped
  UniqueFd control;
  std::optional<InitProcess> init;
  // The sandbox's hold on its policy's gateway; closes its connections.
  egress::Attachment egress;
  // A template's or its zygote's namespaces (user, mnt, uts, ipc, net,
  // cgroup, pid), opened while init was still dumpable: a process that
  // may not ptrace it cannot open them later.
  std::map<std::string, UniqueFd> namespaces;
  namespaces::ControlMessage last{};  // step stamps and flags gathered so far
  // An armed payload's "executing" (kStamp*): its stamp, read with
  // pread when the execution ends however it ends.
  UniqueFd exec_stamp;
  // The direct channel to an armed payload (ArmedPayload): a request
  // without a workspace goes there, not through init.
  UniqueFd direct;
  // A payload's setup error it may not have been able to send (supplied
  // seccomp programs only; null otherwise, and for a zygote made by
  // another process).
  std::unique_ptr<LateReport, UnmapLateReport> late_report;
  bool ready = false;
  bool used = false;
};

// Names each step of the launcher's side with the time since the last.
class StepClock {
 public:
  explicit StepClock(ExecResult* result) : result_(result), last_(absl::Now()) {}
  void Mark(const char* name) {
    absl::Time now = absl::Now();
    result_->steps.emplace_back(name, now - last_);
    last_ = now;
  }

 private:
  ExecResult* result_;
  absl::Time last_;
};

inline ExecResult SetupFailure(absl::Status status) {
  ExecResult result;
  result.reason = ExitReason::kSetupFailed;
  result.setup_error = std::move(status);
  return result;
}

}  // namespace cubicle::runtime
