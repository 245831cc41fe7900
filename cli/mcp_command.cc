// `cubicle mcp`: an MCP server on stdio (docs/cli.md), its tools served by
// a daemon in this process built from the same configuration as `cubicle
// serve`'s.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "cli/commands.h"
#include "cli/log.h"
#include "rpc/config.h"
#include "rpc/daemon.h"
#include "rpc/mcp_stdio.h"
#include "sessions/paths.h"
#include "sessions/workspace_store.h"

namespace cubicle::cli {

namespace {

// A SIGTERM or SIGINT that comes before the daemon takes its signals (while
// its pools are made): noted, and acted on once it serves, so that the
// private state directory is still removed.
volatile sig_atomic_t stop_noted = 0;
void NoteStop(int) { stop_noted = 1; }

// A state directory of this process's own (no --state-dir, none in the
// config), removed at exit with everything in it: each workspace the daemon
// left behind (its tmpfs unmounted), the records, the archives.
class PrivateStateDir {
 public:
  static absl::StatusOr<std::unique_ptr<PrivateStateDir>> Make() {
    const char* tmp = ::getenv("TMPDIR");
    std::string path = absl::StrCat(tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp", "/cubicle-mcp-XXXXXX");
    if (::mkdtemp(path.data()) == nullptr) return ErrnoStatus(errno, absl::StrCat("mkdtemp(", path, ")"));
    return std::unique_ptr<PrivateStateDir>(new PrivateStateDir(std::move(path)));
  }
  ~PrivateStateDir() {
    if (absl::Status removed = Remove(); !removed.ok()) {
      LogWarning(absl::StrCat("removing the private state directory: ", removed.message()));
    }
  }
  const std::string& path() const { return path_; }

 private:
  explicit PrivateStateDir(std::string path) : path_(std::move(path)) {}

  absl::Status Remove() const {
    const std::string workspaces = path_ + "/workspaces";
    if (::access(workspaces.c_str(), F_OK) == 0) {
      CUBICLE_ASSIGN_OR_RETURN(sessions::WorkspaceStore store,
                               sessions::WorkspaceStore::Open(workspaces, /*mount_tmpfs=*/::geteuid() == 0));
      CUBICLE_ASSIGN_OR_RETURN(std::vector<std::string> keys, store.Keys());
      for (const std::string& key : keys) CUBICLE_RETURN_IF_ERROR(store.Remove(key));
    }
    UniqueFd dir(::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir) return ErrnoStatus(errno, absl::StrCat("open(", path_, ")"));
    CUBICLE_RETURN_IF_ERROR(sessions::RemoveTreeContents(dir.get(), path_));
    if (::rmdir(path_.c_str()) != 0) return ErrnoStatus(errno, absl::StrCat("rmdir(", path_, ")"));
    return absl::OkStatus();
  }

  std::string path_;
};

}  // namespace

std::function<int()> AddMcpCommand(CLI::App& root) {
  struct Flags {
    std::string config;
    std::string state_dir;
    std::string profile;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* app = root.add_subcommand("mcp", "Serve MCP (Model Context Protocol) on stdio: sandboxed Python, shell and files");
  app->add_option("--config", f->config, "JSON config file, as for serve (default: the built-in profiles)");
  app->add_option("--state-dir", f->state_dir,
                  "Keep workspaces and records here (default: the config's, else a private directory removed at exit)");
  app->add_option("--profile", f->profile, "The profile the tools run in (default: mcp.profile, else sessions.profile)");
  return [f] {
    absl::StatusOr<rpc::DaemonConfig> config = f->config.empty() ? rpc::DefaultConfig() : rpc::LoadConfig(f->config);
    if (!config.ok()) {
      std::fprintf(stderr, "cubicle mcp: %s\n", std::string(config.status().message()).c_str());
      return kExitUsage;
    }
    const std::string& profile = f->profile;
    if (!profile.empty() && config->profiles.count(profile) == 0) {
      std::fprintf(stderr, "cubicle mcp: --profile: no profile named '%s'\n", profile.c_str());
      return kExitUsage;
    }
    std::unique_ptr<PrivateStateDir> private_dir;
    std::string state_dir = f->state_dir;
    if (state_dir.empty() && !config->sessions.enabled()) {
      absl::StatusOr<std::unique_ptr<PrivateStateDir>> made = PrivateStateDir::Make();
      if (!made.ok()) {
        std::fprintf(stderr, "cubicle mcp: %s\n", std::string(made.status().message()).c_str());
        return kExitSetupFailed;
      }
      private_dir = *std::move(made);
      state_dir = private_dir->path();
    }
    if (!state_dir.empty()) {
      if (absl::Status set = rpc::SetStateDir(&*config, state_dir); !set.ok()) {
        std::fprintf(stderr, "cubicle mcp: --state-dir: %s\n", std::string(set.message()).c_str());
        return kExitUsage;
      }
    }
    const std::string where = config->sessions.state_dir;
    rpc::McpOptions mcp = rpc::McpOptionsFor(*config, profile);
    mcp.archive = private_dir == nullptr;  // a private directory goes at exit, archives too
    rpc::ServeOptions options;
    options.stdio = false;  // stdio speaks MCP: the front below
    options.die_with_parent = true;
    // A write_file carries a whole file, in base64 and JSON-escaped.
    options.max_line_bytes = std::max(options.max_line_bytes, config->sessions.max_file_bytes / 3 * 4 * 2 + (64 << 10));
    options.warn = [](const std::string& message) { LogWarning(message); };
    options.info = [](const std::string& message) { LogInfo(message); };
    const size_t max_line = options.max_line_bytes;
    options.front = [mcp, max_line, warn = options.warn](rpc::Daemon* daemon, std::function<void()> end) {
      auto front = std::make_unique<rpc::McpStdio>(daemon, mcp, max_line, end, warn);
      if (stop_noted) end();
      return front;
    };
    config->fork_server = "/proc/self/exe";
    ::signal(SIGPIPE, SIG_IGN);
    ::signal(SIGTERM, NoteStop);
    ::signal(SIGINT, NoteStop);
    int status;
    {
      absl::StatusOr<std::unique_ptr<rpc::Daemon>> daemon = rpc::Daemon::Create(*std::move(config));
      if (!daemon.ok()) {
        std::fprintf(stderr, "cubicle mcp: %s\n", std::string(daemon.status().message()).c_str());
        return kExitSetupFailed;
      }
      LogInfo(absl::StrCat("serving MCP on stdio; state directory ", where,
                           private_dir != nullptr ? " (private, removed at exit)" : ""));
      status = (*daemon)->Serve(options);
    }  // the daemon goes before its state directory
    return status;
  };
}

}  // namespace cubicle::cli
