// The host NPU broker: for trusted operator jobs that cannot run in a
// sandbox (firmware queries, driver maintenance). OUTSIDE THE SANDBOX'S
// GUARANTEES: a job runs in the host's namespaces, as cubicle's own user,
// with the host's devices. What keeps it safe is only that it is off unless
// the operator's config enables it, that a caller names a job by id and
// nothing else — each job is a fixed argv from the config, executed
// without a shell, with no caller-supplied argument, environment or input —
// and that it has a timeout and an output budget.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "npu/host_command.h"

namespace cubicle::npu {

struct BrokerJob {
  std::string id;                 // [A-Za-z0-9_.-]{1,64}
  std::vector<std::string> argv;  // argv[0] absolute; run as is
  std::vector<std::string> env;   // "NAME=value"; nothing else is inherited
  absl::Duration timeout = absl::Seconds(60);
  uint64_t output_budget = 1 << 20;
  bool operator==(const BrokerJob&) const = default;
};

struct BrokerConfig {
  bool enabled = false;
  std::vector<BrokerJob> jobs;
  bool operator==(const BrokerConfig&) const = default;
};

// Ids well-formed and distinct, argv non-empty with an absolute argv[0]
// and no NUL bytes, env entries NAME=value, timeout positive and at most
// an hour, budget 1 byte .. 64 MiB.
absl::Status ValidateBrokerConfig(const BrokerConfig& config);

// Runs job `id`. FailedPrecondition when the broker is disabled, NotFound
// for an unknown id (the message does not echo ids it was not configured
// with beyond the one asked for).
absl::StatusOr<HostCommandResult> RunBrokerJob(const BrokerConfig& config, absl::string_view id);

}  // namespace cubicle::npu
