#include "npu/probe.h"

#include "absl/strings/str_cat.h"
#include "npu/passthrough.h"
#include "npu/smi_parser.h"
#include "runtime/capture.h"
#include "runtime/zygote.h"

namespace cubicle::npu {

absl::Status ProbeChip(const HostLayout& host, Vendor vendor, int id, const ProbeOptions& options) {
  const std::string who = absl::StrCat(ChipWord(vendor), " ", id);
  std::optional<std::string> tool = host.FindToolInSandbox(vendor);
  if (!tool.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        who, " cannot be probed: no ", vendor == Vendor::kAscend ? "npu-smi" : "nvidia-smi", " under ",
        host.root().empty() ? "/" : host.root()));
  }
  runtime::SandboxSpec spec = options.base;
  spec.devices.clear();  // the probe holds exactly one chip
  absl::StatusOr<Passthrough> plan = PlanPassthrough(host, vendor, {id});
  if (!plan.ok()) return plan.status();
  if (absl::Status st = ApplyPassthrough(*plan, &spec); !st.ok()) return st;
  runtime::ExecRequest request;
  request.argv = {*tool, vendor == Vendor::kAscend ? "info" : "-L"};
  request.env = spec.env;
  request.timeout = options.timeout;
  absl::StatusOr<runtime::CapturedRun> run =
      runtime::RunCaptured(runtime::FreshSandboxRunner(std::move(spec)), request, "", 64 << 10);
  if (!run.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, " cannot be probed: the probe sandbox failed: ", run.status().message()));
  }
  const runtime::ExecResult& r = run->result;
  if (r.reason == runtime::ExitReason::kSetupFailed) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, " cannot be probed: the probe sandbox failed: ", r.setup_error.message()));
  }
  if (r.reason == runtime::ExitReason::kExited && r.exit_code == 0) return absl::OkStatus();
  std::string why = DriverExplanation(run->err, run->out);
  if (why.empty()) {
    why = r.reason == runtime::ExitReason::kTimeout
              ? absl::StrCat("the driver's tool did not answer within ", absl::FormatDuration(options.timeout))
              : absl::StrCat("the driver's tool ended (", runtime::ExitReasonName(r.reason), ", status ",
                             r.ShellStatus(), ") without a word");
  }
  return absl::FailedPreconditionError(absl::StrCat(who, " cannot be opened inside the sandbox: ", why));
}

}  // namespace cubicle::npu
