// The network-egress flags of `cubicle run`: --net none|allowlist,
// --allow-domain, --allow-port, --egress-allow-cidr, --egress-resolve and the
// budgets. Kept apart from run_command.cc: one concern, one file.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "absl/status/status.h"
#include "runtime/spec.h"

namespace cubicle::cli {

struct EgressFlags {
  std::string net = "none";
  CLI::Option* allow_domain = nullptr;
  CLI::Option* allow_port = nullptr;
  CLI::Option* allow_cidr = nullptr;
  CLI::Option* resolve = nullptr;
  std::string max_connections, max_bytes, idle_timeout, bridge_port, log;
};

void AddEgressFlags(CLI::App* app, EgressFlags* flags);

// Fills spec->egress. With --net allowlist and no explicit --seccomp, the
// seccomp policy becomes `default` (the bridge needs AF_INET inside).
absl::Status ApplyEgressFlags(const EgressFlags& flags, bool seccomp_given, runtime::SandboxSpec* spec);

}  // namespace cubicle::cli
