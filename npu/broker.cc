#include "npu/broker.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace cubicle::npu {
namespace {

bool ValidId(absl::string_view id) {
  return !id.empty() && id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '-';
  });
}

bool HasNul(const std::string& s) { return s.find('\0') != std::string::npos; }

}  // namespace

absl::Status ValidateBrokerConfig(const BrokerConfig& config) {
  std::set<std::string> seen;
  for (const BrokerJob& job : config.jobs) {
    if (!ValidId(job.id)) {
      return absl::InvalidArgumentError(absl::StrCat("broker job id \"", absl::CHexEscape(job.id),
                                                     "\": 1 to 64 of [A-Za-z0-9_.-]"));
    }
    if (!seen.insert(job.id).second) return absl::InvalidArgumentError(absl::StrCat("broker job ", job.id, ": defined twice"));
    if (job.argv.empty() || job.argv[0].empty() || job.argv[0][0] != '/') {
      return absl::InvalidArgumentError(absl::StrCat("broker job ", job.id, ": argv[0] must be an absolute path"));
    }
    if (std::any_of(job.argv.begin(), job.argv.end(), HasNul)) {
      return absl::InvalidArgumentError(absl::StrCat("broker job ", job.id, ": argv contains a NUL byte"));
    }
    for (const std::string& e : job.env) {
      size_t eq = e.find('=');
      if (eq == std::string::npos || eq == 0 || HasNul(e)) {
        return absl::InvalidArgumentError(absl::StrCat("broker job ", job.id, ": env entry \"",
                                                       absl::CHexEscape(e), "\" is not NAME=value"));
      }
    }
    if (job.timeout <= absl::ZeroDuration() || job.timeout > absl::Hours(1)) {
      return absl::InvalidArgumentError(absl::StrCat("broker job ", job.id, ": timeout must be in (0, 1h]"));
    }
    if (job.output_budget == 0 || job.output_budget > (uint64_t{64} << 20)) {
      return absl::InvalidArgumentError(absl::StrCat("broker job ", job.id, ": output budget must be 1 byte .. 64 MiB"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<HostCommandResult> RunBrokerJob(const BrokerConfig& config, absl::string_view id) {
  if (!config.enabled) {
    return absl::FailedPreconditionError("the host NPU broker is disabled (npu.broker.enabled in the config)");
  }
  if (absl::Status st = ValidateBrokerConfig(config); !st.ok()) return st;
  auto job = std::find_if(config.jobs.begin(), config.jobs.end(), [&](const BrokerJob& j) { return j.id == id; });
  if (job == config.jobs.end()) {
    return absl::NotFoundError(absl::StrCat("no broker job \"", absl::CHexEscape(id.substr(0, 64)), "\""));
  }
  HostCommandOptions options;
  options.env = job->env;
  options.timeout = job->timeout;
  options.output_budget = job->output_budget;
  return RunHostCommand(job->argv, options);
}

}  // namespace cubicle::npu
