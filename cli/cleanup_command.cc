// `cubicle cleanup`: what a cubicle killed with SIGKILL could not remove.
// Sweeps sandbox cgroups whose owner is gone, then removes the empty
// `cubicle` parents and the host cache (runtime/host_cache.h). Sandboxes of live cubicle processes are left alone.
#include <cstdio>
#include <string>

#include "cgroups/devices.h"
#include "cgroups/layout.h"
#include "cli/commands.h"
#include "runtime/cgroup_host.h"
#include "runtime/host_cache.h"

namespace cubicle::cli {

std::function<int()> AddCleanupCommand(CLI::App& root) {
  root.add_subcommand("cleanup", "Remove stale sandbox cgroups and empty cubicle parents");
  return [] {
    const runtime::CgroupHost& host = runtime::SharedCgroupHost();  // discovers and sweeps
    if (host.misconfigured) {
      std::fprintf(stderr, "cubicle cleanup: %s\n", std::string(host.layout.status().message()).c_str());
      return 2;
    }
    if (!host.layout.ok()) {
      std::printf("no cgroups to clean: %s\n", std::string(host.layout.status().message()).c_str());
      return 0;
    }
    for (const std::string& name : host.swept) std::printf("removed stale group %s\n", name.c_str());
    if (!host.prepare_error.empty()) std::printf("no parents to clean where they cannot be made: %s\n", host.prepare_error.c_str());
    int status = 0;
    for (const std::string& err : host.sweep_errors) {
      std::fprintf(stderr, "cubicle cleanup: %s\n", err.c_str());
      status = 1;
    }
    // The device groups of accelerator passthrough (v1 devices hierarchy).
    absl::StatusOr<cgroups::DeviceSweep> devices = cgroups::SweepStaleDeviceGroups();
    if (devices.ok()) {
      for (const std::string& name : devices->removed) std::printf("removed stale device group %s\n", name.c_str());
      for (const std::string& err : devices->failed) {
        std::fprintf(stderr, "cubicle cleanup: %s\n", err.c_str());
        status = 1;
      }
    } else if (!absl::IsPermissionDenied(devices.status())) {
      std::fprintf(stderr, "cubicle cleanup: %s\n", std::string(devices.status().message()).c_str());
      status = 1;
    }
    // A parent another user made (root's, seen by a rootless caller) is not
    // ours to remove.
    if (absl::Status st = cgroups::RemoveParents(*host.layout); !st.ok() && !absl::IsPermissionDenied(st)) {
      std::fprintf(stderr, "cubicle cleanup: %s\n", std::string(st.message()).c_str());
      status = 1;
    }
    // The next cubicle discovers the layout afresh (and remakes the parents).
    if (absl::Status st = runtime::RemoveHostCache(runtime::HostCacheDir()); !st.ok()) {
      std::fprintf(stderr, "cubicle cleanup: %s\n", std::string(st.message()).c_str());
      status = 1;
    }
    return status;
  };
}

}  // namespace cubicle::cli
