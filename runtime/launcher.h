// The cold launcher: makes one sandbox from a SandboxSpec, runs its payload
// to the end and returns what happened (DESIGN §4).
#pragma once

#include <optional>

#include "absl/status/statusor.h"
#include "runtime/host_features.h"
#include "runtime/result.h"
#include "runtime/spec.h"
#include "runtime/teardown.h"

namespace cubicle::runtime {

struct LaunchOptions {
  // The payload's stdio; the caller keeps ownership.
  int stdin_fd = 0;
  int stdout_fd = 1;
  int stderr_fd = 2;
  // Optional signalfd (or -1): each signal read from it is forwarded to the
  // sandbox's init, which forwards it to the payload.
  int signal_fd = -1;
  // Allow the read-only host /proc fallback when a new procfs is refused.
  bool allow_proc_fallback = true;
  // Replaces what the host offers (runtime::Features()), to exercise the
  // fallbacks of older kernels on this one. A feature the host lacks cannot
  // be turned on.
  std::optional<HostFeatures> features;
  // ExecRequest::read_stats: the cgroup counters in ExecResult::cgroup.
  bool read_stats = true;
  // Set: Launch() returns as soon as init reports the payload's exit, and
  // what is left standing (init, lingering; the groups) is moved here for
  // the caller to end with ExitAfterSandbox() — `cubicle run`, whose exit
  // then waits for the sandbox's processes only. Nothing is moved when
  // nothing is left (a timeout, a payload that was PID 1, an egress
  // allowlist): Launch() has torn it all down as without this.
  std::optional<SandboxRemains>* remains = nullptr;
};

// Validates `spec` (InvalidArgument on bad input; nothing is created), then
// creates the sandbox and waits for it. Every failure after validation is an
// ExecResult with reason kSetupFailed naming the step and errno. When this
// returns, no process, mount or fd of the sandbox remains (but what
// `options.remains` holds).
absl::StatusOr<ExecResult> Launch(const SandboxSpec& spec, const LaunchOptions& options = {});

}  // namespace cubicle::runtime
