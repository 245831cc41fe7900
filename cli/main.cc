// cubicle: a native Linux sandbox runtime.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/bwrap_args.h"
#include "cli/bwrap_command.h"
#include "cli/commands.h"
#include "egress/gateway_process.h"
#include "namespaces/init.h"
#include "rpc/fork_server_main.h"
#include "runtime/fork_server.h"

namespace {

// The one-shot commands end here: every sandbox is gone by now, so only
// stdio needs flushing. Skipping the static destructors and the freeing of
// the command-line parser's tree saves a cold run ~20 page faults.
[[noreturn]] void ExitNow(int status) {
  std::fflush(nullptr);
  std::_Exit(status);
}

}  // namespace

int main(int argc, char** argv) {
  // The egress gateway of one policy revision, started by a launcher
  // (egress/gateway_process.h); never a user-facing command.
  if (argc == 2 && std::strcmp(argv[1], cubicle::egress::kGatewayCommand) == 0) {
    return cubicle::egress::GatewayProcessMain(3);
  }
  // Every sandbox's init renames itself in this area: the launcher's
  // command line is not the sandbox's to read.
  cubicle::namespaces::SetArgvArea(argc, argv);
  // A daemon's fork server (runtime/fork_server.h); never a user-facing
  // command either.
  if (argc == 2 && std::strcmp(argv[1], cubicle::runtime::kForkServerCommand) == 0) {
    return cubicle::rpc::ForkServerMain(cubicle::runtime::kForkServerFd);
  }
  // bubblewrap's command line goes to its own parser untouched: as `bwrap`
  // (a symlink to cubicle), as `cubicle bwrap ...`, or under any other name
  // when it starts with one of bwrap's own options (a sandboxed command
  // re-executing its launcher as /proc/self/exe). Decided by the argv
  // alone: a marker left in the environment would show in the command's
  // (bwrap leaves none) and be lost to --clearenv.
  const char* slash = argv[0] != nullptr ? std::strrchr(argv[0], '/') : nullptr;
  const char* name = slash != nullptr ? slash + 1 : (argv[0] != nullptr ? argv[0] : "");
  if (std::strcmp(name, "bwrap") == 0 || (argc >= 2 && cubicle::cli::IsBwrapCommandLine(argv[1]))) {
    ExitNow(cubicle::cli::RunBwrap(std::vector<std::string>(argv + 1, argv + argc), argv[0]));
  }
  if (argc >= 2 && std::strcmp(argv[1], "bwrap") == 0) {
    ExitNow(cubicle::cli::RunBwrap(std::vector<std::string>(argv + 2, argv + argc), "cubicle bwrap"));
  }
  CLI::App app{"cubicle: run untrusted code in fresh, isolated Linux sandboxes"};
  // project()'s version (cli/CMakeLists.txt), which the packages carry too.
  app.set_version_flag("--version", "cubicle " CUBICLE_VERSION);
  app.require_subcommand(1);
  // Only the subcommand named builds its options: CLI11 allocates each one,
  // and a cold `cubicle run` pays for every page it touches. Anything else
  // (--help, --version, a typo) gets them all, so help and errors are whole.
  const std::string named = argc >= 2 ? argv[1] : "";
  const bool all = named != "run" && named != "probe" && named != "cleanup" && named != "serve" && named != "npu";
  std::function<int()> run, probe, cleanup, serve, npu;
  if (all || named == "run") run = cubicle::cli::AddRunCommand(app);
  if (all || named == "probe") probe = cubicle::cli::AddProbeCommand(app);
  if (all || named == "cleanup") cleanup = cubicle::cli::AddCleanupCommand(app);
  if (all || named == "serve") serve = cubicle::cli::AddServeCommand(app);
  if (all || named == "npu") npu = cubicle::cli::AddNpuCommand(app);
  if (all) {
    // Listed for --help only: main() hands `bwrap` argv to RunBwrap above.
    app.add_subcommand("bwrap", "Run a bubblewrap 0.11 command line (bwrap ARGS...) in a sandbox")
        ->allow_extras()
        ->prefix_command();
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "cubicle: %s\n", e.what());
    return cubicle::cli::kExitUsage;
  }
  if (run && app.got_subcommand("run")) ExitNow(run());
  if (probe && app.got_subcommand("probe")) return probe();
  if (cleanup && app.got_subcommand("cleanup")) return cleanup();
  if (serve && app.got_subcommand("serve")) return serve();
  if (npu && app.got_subcommand("npu")) return npu();
  return cubicle::cli::kExitUsage;
}
