// The subcommands. Each registers its flags on a CLI11 app and returns the
// process exit status when run.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace cubicle::cli {

// Exit statuses of cubicle itself (the payload's own status otherwise).
inline constexpr int kExitUsage = 2;
inline constexpr int kExitTimeout = 124;
inline constexpr int kExitSetupFailed = 125;

// Registers `run` on `app`; the returned function runs it after parsing.
std::function<int()> AddRunCommand(CLI::App& app);
std::function<int()> AddProbeCommand(CLI::App& app);
std::function<int()> AddCleanupCommand(CLI::App& app);
std::function<int()> AddServeCommand(CLI::App& app);
std::function<int()> AddNpuCommand(CLI::App& app);
std::function<int()> AddMcpCommand(CLI::App& app);

}  // namespace cubicle::cli
