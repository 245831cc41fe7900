// cubicle: a native Linux sandbox runtime.
#include <cstdio>
#include <functional>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/log.h"
#include "namespaces/init.h"

int main(int argc, char** argv) {
  cubicle::namespaces::SetArgvArea(argc, argv);
  cubicle::cli::InitLogging();
  CLI::App app{"cubicle: run untrusted code in fresh, isolated Linux sandboxes"};
  app.set_version_flag("--version", "cubicle 0.1.0");
  app.require_subcommand(1);
  std::function<int()> run = cubicle::cli::AddRunCommand(app);
  std::function<int()> probe = cubicle::cli::AddProbeCommand(app);
  std::function<int()> cleanup = cubicle::cli::AddCleanupCommand(app);
  std::function<int()> serve = cubicle::cli::AddServeCommand(app);
  std::function<int()> npu = cubicle::cli::AddNpuCommand(app);
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
  if (app.got_subcommand("run")) return run();
  if (app.got_subcommand("probe")) return probe();
  if (app.got_subcommand("cleanup")) return cleanup();
  if (app.got_subcommand("serve")) return serve();
  if (app.got_subcommand("npu")) return npu();
  return cubicle::cli::kExitUsage;
}
