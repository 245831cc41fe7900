// The cold path: Zygote::Create and Zygote::Run back to back, so that a
// pooled and a cold execution cannot drift apart. The request goes out
// without waiting for "ready": the sandbox reads it when it gets there.
#include "runtime/launcher.h"

#include <memory>

#include "base/status.h"
#include "runtime/zygote.h"
#include "runtime/zygote_state.h"

namespace cubicle::runtime {

absl::StatusOr<ExecResult> Launch(const SandboxSpec& spec, const LaunchOptions& options) {
  CUBICLE_RETURN_IF_ERROR(ValidateSpec(spec));
  ZygoteOptions zopts;
  zopts.allow_proc_fallback = options.allow_proc_fallback;
  zopts.features = options.features;
  zopts.wait_until_ready = false;
  zopts.cold = true;
  absl::StatusOr<std::unique_ptr<Zygote>> zygote = Zygote::Create(spec, zopts);
  if (!zygote.ok()) {
    if (absl::IsInvalidArgument(zygote.status())) return zygote.status();
    return SetupFailure(zygote.status());
  }
  ExecRequest request;
  request.argv = spec.argv;
  request.env = spec.env;
  request.cwd = spec.cwd;
  request.timeout = spec.timeout;
  request.stdin_fd = options.stdin_fd;
  request.stdout_fd = options.stdout_fd;
  request.stderr_fd = options.stderr_fd;
  request.signal_fd = options.signal_fd;
  request.read_stats = options.read_stats;
  request.return_at_exit = options.remains != nullptr;
  absl::StatusOr<ExecResult> result = (*zygote)->Run(request);
  if (options.remains != nullptr && result.ok()) {
    // Left standing only when Run() returned at the exit report; otherwise
    // (a timeout, a payload that was PID 1) it is all gone already.
    absl::StatusOr<SandboxRemains> remains = (*zygote)->TakeRemains();
    if (remains.ok()) options.remains->emplace(*std::move(remains));
  }
  return result;
}

}  // namespace cubicle::runtime
