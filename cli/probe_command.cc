// `cubicle probe [--json]`: what this host allows, measured (DESIGN §7).
#include <boost/json/serialize.hpp>

#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "rpc/results_json.h"
#include "runtime/probe.h"

namespace cubicle::cli {

std::function<int()> AddProbeCommand(CLI::App& root) {
  auto json = std::make_shared<bool>(false);
  CLI::App* app = root.add_subcommand("probe", "Measure what this host allows, with real sandboxes");
  app->add_flag("--json", *json, "Print the report as one JSON object");
  return [json] {
    runtime::ProbeReport report = runtime::Probe();
    if (*json) {
      std::printf("%s\n", boost::json::serialize(rpc::ProbeToJson(report)).c_str());
    } else {
      std::printf("kernel   %s (%s)\n", report.kernel.c_str(), report.root ? "running as root" : "rootless");
      for (const runtime::ProbeCheck& c : report.checks) {
        std::printf("%-4s %-30s %s\n", c.ok ? "ok" : "FAIL", c.name.c_str(), c.detail.c_str());
      }
      for (const std::string& w : report.warnings) std::printf("warning: %s\n", w.c_str());
    }
    for (const runtime::ProbeCheck& c : report.checks) {
      if (c.name == "sandbox" && !c.ok) return 1;
    }
    return 0;
  };
}

}  // namespace cubicle::cli
