// `cubicle run --via SOCKET` (or CUBICLE_VIA): the command runs in a
// sandbox of a running `cubicle serve` daemon (docs/cli.md), which serves
// it from its pool — a shell user gets pooled latency instead of building
// a sandbox in this process. The sandbox is the daemon's profile's: only
// what sandbox.run can say travels (the command, environment, cwd,
// timeout, limits, a workspace, stdin); run_command.cc refuses every other
// flag before anything is sent.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace cubicle::cli {

struct ViaFlags {
  std::string socket;
  std::string profile = "shell";
  std::vector<std::string> command;
  std::vector<std::pair<std::string, std::string>> env;  // --setenv, in order
  std::string chdir, timeout, workspace, json_status;
  std::string memory, memory_high, pids, cpus, cpu_weight;
};

// The exit status `cubicle run` ends with: the payload's as a shell gives
// it (124 on timeout, 125 when it could not start), 2 for flags the daemon
// cannot take, 125 when the daemon is unreachable or refuses the request.
int RunVia(const ViaFlags& flags);

}  // namespace cubicle::cli
