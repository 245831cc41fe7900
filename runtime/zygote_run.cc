// One execution in a built sandbox (DESIGN §4.5, host side): Zygote::Run
// hands the request over, supervises the sandbox until its payload's exit
// is known, and turns what it saw into an ExecResult.
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "egress/gateway_process.h"
#include "namespaces/exec_request.h"
#include "namespaces/init.h"
#include "runtime/breakers.h"
#include "runtime/cgroup_host.h"
#include "runtime/child_plan.h"
#include "runtime/control_channel.h"
#include "runtime/host_features.h"
#include "runtime/identity.h"
#include "runtime/zygote.h"
#include "runtime/zygote_state.h"

namespace cubicle::runtime {
namespace {

using namespaces::ControlMessage;
using namespaces::ControlType;

absl::Duration NanosBetween(int64_t from, int64_t to) {
  return from > 0 && to >= from ? absl::Nanoseconds(to - from) : absl::ZeroDuration();
}

bool Ready(const pollfd& p, short events) { return (p.revents & events) != 0; }
constexpr short kInOrHangUp = POLLIN | POLLHUP | POLLERR;

// How long a warm template's interpreter's end may be reported after its
// sandbox's init has exited (Execution::CollectLateReports).
constexpr absl::Duration kAdoptedReportWait = absl::Seconds(5);

// Egress: the payload finds the bridge through the proxy variables (they
// replace the request's own).
std::vector<std::string> RequestEnvironment(const ExecRequest& request, const egress::Policy& egress) {
  std::vector<std::string> env = request.env;
  for (const std::string& kv : egress::ProxyEnvironment(egress)) {
    const std::string name = kv.substr(0, kv.find('=') + 1);
    std::erase_if(env, [&](const std::string& e) { return e.rfind(name, 0) == 0; });
    env.push_back(kv);
  }
  return env;
}

// The breakers (runtime/breakers.h) watch the cgroup: a v1 memory
// threshold eventfd where the kernel has one, a sampling timer for the rest.
struct BreakerWatch {
  std::optional<BreakerState> state;
  UniqueFd timer, memory_mark;
  bool killed = false;
};

// Zygote::Run's steps, in order.
class Execution {
 public:
  Execution(ZygoteState& z, const ExecRequest& request, ExecResult result)
      : z_(z), request_(request), result_(std::move(result)), clock_(&result_), init_(*z.init) {}

  absl::Status ApplyLimits();
  absl::Status OpenWorkspace();
  absl::Status SendRequest();
  absl::Status StartBreakers();
  absl::Status Supervise();
  void CollectLateReports();
  void Finish();
  ExecResult Verdict();
  // A failure before the payload ran: setup_failed; ~Zygote kills and reaps.
  ExecResult Failed(absl::Status st) const {
    ExecResult failed = SetupFailure(std::move(st));
    failed.warnings = result_.warnings;
    return failed;
  }

 private:
  enum Watched { kControl, kInitExit, kSignals, kBreakerTimer, kMemoryMark, kCancel, kStdout, kStderr, kWatch, kCount };
  enum class Control { kNone, kDrain, kDone };
  void Absorb(const ControlMessage& msg);
  int PollTimeoutMs() const;
  void OnDeadline();
  bool OnCancel();
  void OnBreakers(const pollfd* fds);
  void Act(const BreakerAction& a);
  Control OnControl();
  void ReadExecStamp();
  void ReadLateReport();
  void ReportSteps();
  std::optional<ExitReason> BreakerReason() const;
  void DecideReason();

  ZygoteState& z_;
  const ExecRequest& request_;
  ExecResult result_;
  StepClock clock_;
  InitProcess& init_;
  const absl::Time run_start_ = absl::Now();
  const int64_t run_start_ns_ = namespaces::MonotonicNanos();
  UniqueFd workspace_;
  absl::Status sent_;
  BreakerWatch breakers_;
  // What supervision saw.
  bool have_exit_ = false, have_exec_ = false, timed_out_ = false, init_gone_ = false, cancelled_ = false;
  bool early_ = false;  // returned at the exit report, the sandbox left standing
  absl::Time exec_time_, run_end_;
  int init_status_ = 0;
  absl::Status setup_error_;
  bool output_open_[2] = {false, false};
  bool watching_ = false;
  bool control_open_ = true;
};

// This execution's limits, written over the zygote's groups.
absl::Status Execution::ApplyLimits() {
  if (!request_.limits.has_value() || request_.limits->empty()) return absl::OkStatus();
  if (z_.cgroup == nullptr) {
    result_.warnings.push_back("no cgroup for this sandbox: the request's limits are not enforced");
  } else {
    const CgroupHost& host = SharedCgroupHost();
    CUBICLE_RETURN_IF_ERROR(host.layout.ok() ? z_.cgroup->Rewrite(*host.layout, *request_.limits)
                                             : host.layout.status());
  }
  clock_.Mark("limits");
  return absl::OkStatus();
}

// The workspace tree, idmapped on the host; init moves it in.
absl::Status Execution::OpenWorkspace() {
  if (!request_.workspace.has_value()) return absl::OkStatus();
  CUBICLE_ASSIGN_OR_RETURN(workspace_, OpenWorkspaceTree(*request_.workspace, z_.identity));
  return absl::OkStatus();
}

// The request, to an armed payload directly unless a workspace needs init.
// A sandbox that failed its setup before reading it (an armed payload
// killed while it waited: init says so) has already sent why, or is about
// to: the failure to send is then not the error, and supervision collects
// the report.
absl::Status Execution::SendRequest() {
  const int stdio[3] = {request_.stdin_fd, request_.stdout_fd, request_.stderr_fd};
  uint32_t warm = 0;
  if (z_.interpreter.has_value()) {
    std::optional<WarmInvocation> invocation = MatchWarmInvocation(*z_.interpreter, request_.argv);
    if (invocation.has_value()) warm = invocation->Encode();
    result_.warm = invocation.has_value();
  }
  const std::vector<std::string> env = RequestEnvironment(request_, z_.spec.egress);
  // Before the request: no connection it makes can reach the gateway first.
  if (!request_.request_id.empty()) z_.egress.Tag(request_.request_id);
  const bool direct = z_.direct && !workspace_;
  bool peer_gone = false;
  sent_ = namespaces::SendExecRequest(direct ? z_.direct.get() : z_.control.get(), request_.argv, env, request_.cwd,
                                      SearchPath(env), stdio, workspace_.get(), &peer_gone, warm,
                                      /*linger=*/request_.return_at_exit);
  if (!sent_.ok() && !peer_gone) return sent_;
  workspace_.reset();
  clock_.Mark("handoff");
  return absl::OkStatus();
}

absl::Status Execution::StartBreakers() {
  const BreakerSpec& spec = request_.breakers.has_value() ? *request_.breakers : z_.spec.breakers;
  if (!spec.any()) return absl::OkStatus();
  if (z_.cgroup == nullptr) {
    result_.warnings.push_back("the runtime breakers need a cgroup and are not enforced");
    return absl::OkStatus();
  }
  breakers_.state.emplace(spec);
  if (spec.memory_mark.has_value()) {
    absl::StatusOr<UniqueFd> fd = z_.cgroup->MemoryThresholdFd(*spec.memory_mark);
    if (fd.ok()) breakers_.memory_mark = *std::move(fd);
  }
  breakers_.timer.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  if (!breakers_.timer) return ErrnoStatus(errno, "timerfd_create(breakers)");
  const int64_t ns = absl::ToInt64Nanoseconds(breakers_.state->SampleInterval());
  const struct timespec every = {ns / 1'000'000'000, ns % 1'000'000'000};
  const struct itimerspec timer = {every, every};
  if (::timerfd_settime(breakers_.timer.get(), 0, &timer, nullptr) != 0) {
    return ErrnoStatus(errno, "timerfd_settime(breakers)");
  }
  return absl::OkStatus();
}

void Execution::Act(const BreakerAction& a) {
  if (a.kind == BreakerAction::Kind::kNone) return;
  const bool kill = a.kind == BreakerAction::Kind::kKillSandbox;
  result_.warnings.push_back(absl::StrCat("breaker ", BreakerName(a.breaker), ": ", a.why,
                                          kill ? "; sandbox killed"
                                               : absl::StrCat("; sent ", a.signal == SIGTERM ? "SIGTERM" : "SIGUSR1")));
  if (kill) {
    breakers_.killed = true;
    init_.Signal(SIGKILL);
    z_.cgroup->Kill().IgnoreError();
  } else {
    init_.Signal(a.signal);  // init forwards it to the payload
  }
}

void Execution::OnBreakers(const pollfd* fds) {
  if (!breakers_.state.has_value() || breakers_.killed) return;
  if (Ready(fds[kMemoryMark], POLLIN)) {
    uint64_t count;
    (void)!::read(breakers_.memory_mark.get(), &count, sizeof(count));
    Act(breakers_.state->MemoryMarkCrossed(absl::Now()));
  }
  if (Ready(fds[kBreakerTimer], POLLIN)) {
    uint64_t expirations;
    (void)!::read(breakers_.timer.get(), &expirations, sizeof(expirations));
    absl::StatusOr<cgroups::SandboxCgroup::Usage> usage = z_.cgroup->ReadUsage();
    if (usage.ok()) {
      Act(breakers_.state->Observe(absl::Now(), UsageSample{usage->memory_bytes, usage->cpu_ns, usage->io_bytes}));
    }
  }
}

// Init and the payload each send their own copy of the step stamps.
void Execution::Absorb(const ControlMessage& msg) {
  ControlMessage& last = z_.last;
  for (int i = 0; i < namespaces::kChildStepCount; ++i) {
    if (msg.step_ns[i] > 0) last.step_ns[i] = msg.step_ns[i];
  }
  last.flags |= msg.flags;
  switch (msg.type) {
    case ControlType::kSetupError:
      if (setup_error_.ok()) setup_error_ = ChildErrorStatus(msg.error);
      break;
    case ControlType::kExecuting:
      have_exec_ = true;
      exec_time_ = absl::Now();
      break;
    case ControlType::kPayloadExited:
      have_exit_ = true;
      last.wait_status = msg.wait_status;
      last.rusage = msg.rusage;
      break;
    case ControlType::kReady:
    case ControlType::kAdopt:
      break;
  }
}

int Execution::PollTimeoutMs() const {
  if (timed_out_ || request_.timeout == absl::InfiniteDuration()) return -1;
  const absl::Time deadline = (z_.cold ? z_.start : run_start_) + request_.timeout;
  const absl::Duration left = deadline - absl::Now();
  return left <= absl::ZeroDuration() ? 0
                                      : static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))));
}

// Killing PID 1 makes the kernel kill every process of the pid namespace,
// daemonized grandchildren included.
void Execution::OnDeadline() {
  timed_out_ = true;
  init_.Signal(SIGKILL);
  if (z_.cgroup != nullptr) z_.cgroup->Kill().IgnoreError();  // init's death kills the rest too
}

// Returns whether Run() returns at once: ~Zygote then kills what is left
// and removes the cgroup (a pool does that off the request path).
bool Execution::OnCancel() {
  cancelled_ = true;
  init_.Signal(SIGKILL);
  if (request_.return_at_exit) return true;
  if (z_.cgroup != nullptr) z_.cgroup->Kill().IgnoreError();
  return false;
}

// A report from init or the payload (drain them all before looking at
// init's exit), or the control socket's hang-up: init is exiting.
Execution::Control Execution::OnControl() {
  ControlMessage msg;
  const ssize_t got = ::recv(z_.control.get(), &msg, sizeof(msg), MSG_DONTWAIT);
  if (got == static_cast<ssize_t>(sizeof(msg))) {
    Absorb(msg);
    return have_exit_ && request_.return_at_exit ? Control::kDone : Control::kDrain;
  }
  if (got == 0) {  // every child end closed: init is exiting
    if (init_.pidfd() < 0) init_gone_ = true;
    control_open_ = false;
    // Init's exit (its namespaces' teardown) takes a few hundred µs: look
    // at its pidfd without sleeping for a bounded while first; past the
    // bound, the wait sleeps. An idle CPU's wake-up costs more than that.
    if (!init_gone_ && namespaces::SpinUntilExited(init_.pidfd(), namespaces::kInitExitSpinNs)) init_gone_ = true;
  }
  return Control::kNone;
}

// Messages from init and the payload, init's exit, the deadline, the
// breakers, cancellation, output to capture, and signals to forward.
absl::Status Execution::Supervise() {
  const ExecRequest& r = request_;
  output_open_[0] = r.output_fds[0] >= 0 && r.on_output;
  output_open_[1] = r.output_fds[1] >= 0 && r.on_output;
  watching_ = r.watch_fd >= 0 && r.on_watch;
  while (!init_gone_) {
    struct pollfd fds[kCount] = {{control_open_ ? z_.control.get() : -1, POLLIN, 0},
                                 {init_.pidfd(), POLLIN, 0},
                                 {r.signal_fd, POLLIN, 0},
                                 {breakers_.timer.get(), POLLIN, 0},
                                 {breakers_.memory_mark.get(), POLLIN, 0},
                                 {cancelled_ ? -1 : r.cancel_fd, POLLIN, 0},
                                 {output_open_[0] ? r.output_fds[0] : -1, POLLIN, 0},
                                 {output_open_[1] ? r.output_fds[1] : -1, POLLIN, 0},
                                 {watching_ ? r.watch_fd : -1, POLLIN, 0}};
    const int n = ::poll(fds, kCount, PollTimeoutMs());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "poll(sandbox)");
    }
    if (n == 0) {
      OnDeadline();
      continue;
    }
    for (int i = 0; i < 2; ++i) {
      if (Ready(fds[kStdout + i], kInOrHangUp) && !r.on_output(i)) output_open_[i] = false;
    }
    if (Ready(fds[kWatch], kInOrHangUp)) {
      watching_ = false;
      r.on_watch();
    }
    if (Ready(fds[kCancel], kInOrHangUp) && OnCancel()) break;
    OnBreakers(fds);
    if (Ready(fds[kSignals], POLLIN)) {
      struct signalfd_siginfo si;
      if (::read(r.signal_fd, &si, sizeof(si)) == sizeof(si)) init_.Signal(static_cast<int>(si.ssi_signo));
    }
    if (Ready(fds[kControl], kInOrHangUp)) {
      const Control c = OnControl();
      if (c == Control::kDone) break;  // the result is known
      if (c == Control::kDrain) continue;
    }
    if (Ready(fds[kInitExit], POLLIN)) init_gone_ = true;
  }
  return absl::OkStatus();
}

// An armed payload's "executing" is its stamp in the page, not a message.
void Execution::ReadExecStamp() {
  if (have_exec_ || !z_.exec_stamp) return;
  int64_t ns[kStampCount] = {};
  if (::pread(z_.exec_stamp.get(), ns, sizeof(ns), 0) != sizeof(ns) || ns[kStampExecReady] <= 0) return;
  ControlMessage& last = z_.last;
  have_exec_ = true;
  last.step_ns[namespaces::kStepExecReady] = ns[kStampExecReady];
  if (last.step_ns[namespaces::kStepPayloadForked] == 0) last.step_ns[namespaces::kStepPayloadForked] = ns[kStampHandOff];
  exec_time_ = std::clamp(run_start_ + absl::Nanoseconds(ns[kStampExecReady] - run_start_ns_), run_start_, absl::Now());
}

// Messages sent just before init exited may still be queued. A warm
// template's interpreter (z_.keep_alive: its template) is reported by its
// parent, the template, outside the sandbox: init exits when the
// interpreter does, without waiting for that report, which may come after
// init's exit. It is waited for until it comes or the template's end of
// the control socket closes (the socket hangs up), at most
// kAdoptedReportWait.
void Execution::CollectLateReports() {
  const bool adopted = z_.keep_alive != nullptr && !timed_out_ && !cancelled_ && setup_error_.ok();
  const absl::Time deadline = absl::Now() + kAdoptedReportWait;
  for (;;) {
    ControlMessage msg;
    const ssize_t got = ::recv(z_.control.get(), &msg, sizeof(msg), MSG_DONTWAIT);
    if (got == 1) continue;  // a cold sandbox's 'A' (joined), which Create did not wait for
    if (got == static_cast<ssize_t>(sizeof(msg))) {
      Absorb(msg);
      continue;
    }
    if (got < 0 && errno == EAGAIN && adopted && !have_exit_) {
      struct pollfd p = {z_.control.get(), POLLIN, 0};
      const absl::Duration left = deadline - absl::Now();
      if (left > absl::ZeroDuration() &&
          (::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))))) >= 0 ||
           errno == EINTR)) {
        continue;  // a report, the hang-up, or the bound: the next recv and the deadline tell
      }
    }
    break;
  }
  ReadExecStamp();
  ReadLateReport();
}

// A payload whose supplied seccomp program refused the send of its setup
// error left it in the shared page (LateReport): read once supervision is
// over, when `written` says whether it is whole.
void Execution::ReadLateReport() {
  if (!setup_error_.ok() || z_.late_report == nullptr) return;
  if (__atomic_load_n(&z_.late_report->written, __ATOMIC_ACQUIRE) != 1) return;
  ChildError error = z_.late_report->error;
  error.step[sizeof(error.step) - 1] = '\0';
  error.detail[sizeof(error.detail) - 1] = '\0';
  setup_error_ = ChildErrorStatus(error);
}

// Reaps init (unless it was left standing at the exit report), reads the
// groups' counters and removes the groups. With its own pid namespace,
// init's death took every process of the sandbox with it, so the groups
// are mostly empty already: RemoveOrKill tries the removal first and kills
// only what that shows is left. Returning early, ~Zygote kills and removes.
void Execution::Finish() {
  early_ = (have_exit_ || cancelled_) && request_.return_at_exit && !init_gone_;
  const int init_status = early_ ? 0 : init_.Reap();
  ControlMessage& last = z_.last;
  if (z_.spec.as_pid_1 && have_exec_ && !have_exit_) {
    // No init of cubicle's reported it: the payload was PID 1.
    have_exit_ = true;
    last.wait_status = init_status;
    ::getrusage(RUSAGE_CHILDREN, &last.rusage);
  }
  const absl::Time end = absl::Now();
  if (z_.cgroup != nullptr) {
    const bool sigkilled = have_exit_ && WIFSIGNALED(last.wait_status) && WTERMSIG(last.wait_status) == SIGKILL;
    if (request_.read_stats || sigkilled) {
      absl::StatusOr<cgroups::Stats> stats = z_.cgroup->ReadStats();
      if (stats.ok()) {
        result_.cgroup = *stats;
      } else {
        result_.warnings.push_back(absl::StrCat("cgroup stats: ", stats.status().message()));
      }
    }
    if (!early_) {
      if (absl::Status st = z_.cgroup->RemoveOrKill(); !st.ok()) {
        result_.warnings.push_back(absl::StrCat("cgroup cleanup: ", st.message()));
      }
    }
  }
  const absl::Time origin = z_.cold ? z_.start : run_start_;
  result_.wall = end - origin;
  result_.setup = have_exec_ ? exec_time_ - origin : result_.wall;
  run_end_ = end;
  init_status_ = init_status;
}

// The sandbox side's steps, from its stamps: all of them on the cold path,
// the hand-off's only for a zygote built ahead.
void Execution::ReportSteps() {
  const int64_t* ns = z_.last.step_ns;
  using namespaces::ChildStep;
  auto child_step = [&](const char* name, ChildStep from, ChildStep to) {
    if (ns[from] > 0 && ns[to] > 0) result_.steps.emplace_back(name, NanosBetween(ns[from], ns[to]));
  };
  if (z_.cold) {
    child_step("child_ids", namespaces::kStepChildStart, namespaces::kStepIdsReady);
    child_step("rootfs", namespaces::kStepIdsReady, namespaces::kStepRootfsReady);
    child_step("uts_net", namespaces::kStepRootfsReady, namespaces::kStepInitReady);
    child_step("request_wait", namespaces::kStepInitReady, namespaces::kStepRequestReceived);
  }
  child_step("payload_fork", namespaces::kStepRequestReceived, namespaces::kStepPayloadForked);
  child_step("payload_setup", namespaces::kStepPayloadForked, namespaces::kStepExecReady);
  if (have_exec_) result_.steps.emplace_back("run", run_end_ - exec_time_);
}

// A breaker is the reason when it killed the sandbox, or when the payload
// died of the breaker's own warning signal.
std::optional<ExitReason> Execution::BreakerReason() const {
  if (!breakers_.state.has_value() || !breakers_.state->tripped().has_value()) return std::nullopt;
  const int status = z_.last.wait_status;
  const bool died_of_warning =
      have_exit_ && WIFSIGNALED(status) && WTERMSIG(status) == breakers_.state->warning_signal();
  if (!breakers_.killed && !died_of_warning) return std::nullopt;
  switch (*breakers_.state->tripped()) {
    case Breaker::kCpu: return ExitReason::kBreakerCpu;
    case Breaker::kMemory: return ExitReason::kBreakerMemory;
    case Breaker::kIo: return ExitReason::kBreakerIo;
  }
  return std::nullopt;
}

// The verdict, in precedence order: a setup error, a cancel, a breaker,
// the timeout, then the payload's own exit.
void Execution::DecideReason() {
  const int status = z_.last.wait_status;
  const std::optional<ExitReason> breaker = BreakerReason();
  if (setup_error_.ok() && !sent_.ok()) setup_error_ = sent_;
  if (!setup_error_.ok()) {
    result_.reason = ExitReason::kSetupFailed;
    result_.setup_error = setup_error_;
  } else if (cancelled_ || breaker.has_value()) {
    result_.reason = cancelled_ ? ExitReason::kKilled : *breaker;
    if (have_exit_ && WIFEXITED(status)) result_.exit_code = WEXITSTATUS(status);
    result_.signal = have_exit_ && WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
  } else if (timed_out_) {
    result_.reason = ExitReason::kTimeout;
    result_.signal = SIGKILL;
  } else if (have_exit_ && WIFEXITED(status)) {
    result_.reason = ExitReason::kExited;
    result_.exit_code = WEXITSTATUS(status);
  } else if (have_exit_ && WIFSIGNALED(status)) {
    // A SIGKILL while the cgroup counted an OOM kill is the OOM killer's.
    result_.signal = WTERMSIG(status);
    result_.reason = result_.signal == SIGKILL && result_.cgroup.has_value() && result_.cgroup->oom_killed()
                         ? ExitReason::kOom
                         : ExitReason::kSignaled;
  } else if ((init_status_ == InitProcess::kUnknownStatus ||
              (WIFSIGNALED(init_status_) && WTERMSIG(init_status_) == SIGKILL)) &&
             result_.cgroup.has_value() && result_.cgroup->oom_killed()) {
    // The OOM killer took init itself: what filled the group was no
    // process's (tmpfs pages a payload wrote stay charged to it), so init,
    // the last process standing, went before it could report. (A pooled
    // zygote's init is the fork server's child: its status is unknown
    // here, the group's OOM count is not.)
    result_.reason = ExitReason::kOom;
    result_.signal = SIGKILL;
  } else {
    result_.reason = ExitReason::kSetupFailed;
    std::string how = init_status_ == InitProcess::kUnknownStatus ? ""
                      : WIFSIGNALED(init_status_) ? absl::StrCat(" (signal ", WTERMSIG(init_status_), ")")
                                                  : absl::StrCat(" (exit ", WEXITSTATUS(init_status_), ")");
    result_.setup_error = absl::InternalError(absl::StrCat("sandbox init ended without a report", how));
  }
}

ExecResult Execution::Verdict() {
  ReportSteps();
  if (z_.last.flags & namespaces::kFlagProcFallback) {
    NoteProcfsFallback();
    result_.warnings.push_back(
        "a new procfs was refused; /proc is a read-only bind of the host's, masked (host "
        "processes are visible)");
  }
  DecideReason();
  if (have_exit_) result_.rusage = z_.last.rusage;
  return std::move(result_);
}

}  // namespace

absl::StatusOr<ExecResult> Zygote::Run(const ExecRequest& request) {
  ZygoteState& z = *state_;
  if (z.used) return absl::FailedPreconditionError("a zygote runs one execution only");
  CUBICLE_RETURN_IF_ERROR(ValidateRequest(request));
  z.used = true;
  ExecResult result = created_;
  if (!z.cold) result.steps.clear();
  Execution execution(z, request, std::move(result));
  for (absl::Status (Execution::*step)() : {&Execution::ApplyLimits, &Execution::OpenWorkspace,
                                            &Execution::SendRequest, &Execution::StartBreakers,
                                            &Execution::Supervise}) {
    if (absl::Status st = (execution.*step)(); !st.ok()) return execution.Failed(std::move(st));
  }
  execution.CollectLateReports();
  execution.Finish();
  return execution.Verdict();
}

}  // namespace cubicle::runtime
