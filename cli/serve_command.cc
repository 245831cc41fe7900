// `cubicle serve`: the JSON-RPC daemon on stdio and/or a Unix socket.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/log.h"
#include "rpc/config.h"
#include "rpc/daemon.h"

namespace cubicle::cli {

std::function<int()> AddServeCommand(CLI::App& root) {
  struct Flags {
    std::string config;
    std::string socket;
    bool stdio = false;
    std::string metrics;
    std::string state_dir;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* app = root.add_subcommand("serve", "Serve JSON-RPC 2.0 on stdio (default) or a Unix socket");
  app->add_option("--config", f->config, "JSON config file (default: the built-in shell and python profiles)");
  app->add_option("--socket", f->socket, "Serve on this Unix socket (mode 0600) instead of stdio");
  app->add_flag("--stdio", f->stdio, "With --socket, serve stdio too");
  app->add_option("--metrics", f->metrics,
                  "Prometheus metrics: unix:PATH (a socket answering HTTP) or PATH (a file rewritten every 5 s)");
  app->add_option("--state-dir", f->state_dir,
                  "Sessions and durable execution records live here (overrides sessions.state_dir)");
  return [f] {
    absl::StatusOr<rpc::DaemonConfig> config =
        f->config.empty() ? rpc::DefaultConfig() : rpc::LoadConfig(f->config);
    if (!config.ok()) {
      std::fprintf(stderr, "cubicle serve: %s\n", std::string(config.status().message()).c_str());
      return kExitUsage;
    }
    if (!f->state_dir.empty()) {
      if (absl::Status set = rpc::SetStateDir(&*config, f->state_dir); !set.ok()) {
        std::fprintf(stderr, "cubicle serve: --state-dir: %s\n", std::string(set.message()).c_str());
        return kExitUsage;
      }
    }
    rpc::ServeOptions options;
    // A files.put line carries a whole file in base64: the line limit must
    // hold the largest one sessions.max_file_bytes allows.
    const size_t max_file_line = config->sessions.max_file_bytes / 3 * 4 + (64 << 10);
    if (config->sessions.enabled()) options.max_line_bytes = std::max(options.max_line_bytes, max_file_line);
    options.socket_path = f->socket.empty() ? config->socket_path : f->socket;
    options.socket_mode = config->socket_mode;
    options.stdio = options.socket_path.empty() || f->stdio;
    // Serving its spawner's stdio, the daemon must not outlive it.
    options.die_with_parent = options.stdio;
    if (!f->metrics.empty()) {
      absl::StatusOr<rpc::MetricsTarget> target = rpc::ParseMetricsTarget(f->metrics);
      if (!target.ok()) {
        std::fprintf(stderr, "cubicle serve: %s\n", std::string(target.status().message()).c_str());
        return kExitUsage;
      }
      options.metrics = *target;
    }
    options.warn = [](const std::string& message) { LogWarning(message); };
    // Zygotes are made by fork servers of this very executable.
    config->fork_server = "/proc/self/exe";
    // Signals are taken by the daemon (drain, then clean up); a closed
    // stdout must not kill it.
    ::signal(SIGPIPE, SIG_IGN);
    absl::StatusOr<std::unique_ptr<rpc::Daemon>> daemon = rpc::Daemon::Create(*std::move(config));
    if (!daemon.ok()) {
      std::fprintf(stderr, "cubicle serve: %s\n", std::string(daemon.status().message()).c_str());
      return kExitSetupFailed;
    }
    LogInfo(options.socket_path.empty() ? "serving JSON-RPC on stdio"
                                        : "serving JSON-RPC on " + options.socket_path);
    return (*daemon)->Serve(options);
  };
}

}  // namespace cubicle::cli
