#include "runtime/cgroup_host.h"

#include <unistd.h>

#include <cstdlib>

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"

#include "base/status.h"
#include "cgroups/cgroup.h"
#include "cgroups/delegation.h"
#include "runtime/host_cache.h"

namespace cubicle::runtime {

namespace {

// The layout with its parents prepared: the host cache's when it still
// holds, else discovered (and stored for the next process).
void FindLayout(CgroupHost* host) {
  absl::StatusOr<cgroups::LayoutOptions> configured = HostLayoutOptions();
  if (!configured.ok()) {
    host->layout = configured.status();
    host->misconfigured = true;
    return;
  }
  const cgroups::LayoutOptions& options = *configured;
  const std::string dir = HostCacheDir();
  absl::StatusOr<std::string> key = dir.empty() ? absl::StatusOr<std::string>(absl::NotFoundError("no cache"))
                                                : HostCacheKey(options);
  if (key.ok()) {
    if (std::optional<cgroups::Layout> cached = LoadCachedLayout(dir, *key); cached.has_value()) {
      host->layout = std::move(*cached);
      host->layout_cached = true;
      return;
    }
  }
  host->layout = cgroups::DiscoverLayout(options);
  if (!host->layout.ok()) return;
  // Creates the parents and enables the v2 controllers down to them once,
  // instead of every Create() finding out.
  if (absl::Status st = cgroups::PrepareParents(&*host->layout); !st.ok()) {
    host->prepare_error = std::string(st.message());
    return;  // not cached: the next process tries again
  }
  // A cache that cannot be written (a read-only /run) only costs speed.
  if (key.ok()) (void)StoreCachedLayout(dir, *key, *host->layout);
}

}  // namespace

absl::StatusOr<std::string> TakeDelegatedLeaf() {
  if (const char* set = std::getenv(kCgroupParentEnv); set != nullptr && set[0] != '\0') return std::string();
  absl::StatusOr<cgroups::Layout> layout = cgroups::DiscoverLayout();
  if (!layout.ok()) return std::string();  // no cgroups to speak of: the sandboxes say so themselves
  CUBICLE_ASSIGN_OR_RETURN(std::optional<cgroups::LeafMove> moved, cgroups::MoveIntoLeaf(*layout, ::getpid()));
  if (!moved.has_value()) return std::string();
  ::setenv(kCgroupParentEnv, moved->parent.c_str(), 1);
  return absl::StrCat("moved into ", moved->leaf, ", so that its parent can delegate controllers to the sandboxes' ",
                      "groups beside it (", kCgroupParentEnv, "=", moved->parent, ")");
}

absl::StatusOr<cgroups::LayoutOptions> HostLayoutOptions() {
  cgroups::LayoutOptions options;
  const char* parent = std::getenv(kCgroupParentEnv);
  if (parent == nullptr || parent[0] == '\0') return options;
  if (absl::Status st = cgroups::CheckParentOption(parent); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(kCgroupParentEnv, ": ", st.message()));
  }
  options.parent = parent;
  return options;
}

const CgroupHost& SharedCgroupHost() {
  static std::once_flag once;
  static CgroupHost* host = nullptr;
  std::call_once(once, [] {
    host = new CgroupHost();  // never destroyed: sandboxes may outlive static destruction order
    FindLayout(host);
    if (!host->layout.ok()) return;
    absl::StatusOr<cgroups::SweepReport> sweep = cgroups::SweepStale(*host->layout);
    if (sweep.ok()) {
      host->swept = sweep->removed;
      host->sweep_errors.insert(host->sweep_errors.end(), sweep->failed.begin(), sweep->failed.end());
    } else {
      host->sweep_errors.push_back(std::string(sweep.status().message()));
    }
  });
  return *host;
}

absl::Status CgroupsUsable() {
  const CgroupHost& host = SharedCgroupHost();
  if (!host.layout.ok()) return host.layout.status();
  for (cgroups::Controller c : {cgroups::Controller::kMemory, cgroups::Controller::kPids}) {
    const cgroups::Hierarchy* h = host.layout->Find(c);
    if (h == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("the ", cgroups::V2Name(c), " controller is not available to cubicle here"));
    }
    // The parent may not exist yet: the nearest existing ancestor decides.
    std::string dir = h->parent;
    while (!dir.empty() && ::access(dir.c_str(), F_OK) != 0) dir = dir.substr(0, dir.rfind('/'));
    if (dir.empty() || ::access(dir.c_str(), W_OK) != 0) {
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot create cgroups under ", h->parent, " (no writable delegated subtree)"));
    }
  }
  return absl::OkStatus();
}

cgroups::Limits HostDefaultLimits() {
  cgroups::Limits limits;
  uint64_t memory = uint64_t{1} << 30;
  long pages = ::sysconf(_SC_PHYS_PAGES);
  long page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) memory = std::min<uint64_t>(memory, uint64_t(pages) * uint64_t(page) / 2);
  limits.memory_max = memory;
  limits.pids_max = 1024;
  return limits;
}

cgroups::Limits DefaultLimits() {
  // A misconfigured parent keeps the limits, so the sandbox fails saying why.
  if (!CgroupsUsable().ok() && !SharedCgroupHost().misconfigured) return cgroups::Limits{};
  return HostDefaultLimits();
}

}  // namespace cubicle::runtime
