// Where each controller lives on this host, and where sandbox groups go.
//
// A host mounts cgroups one of three ways: v2 only (one unified hierarchy),
// v1 only (one hierarchy per controller or per co-mounted set), or hybrid
// (v1 controllers plus a cgroup2 mount that holds whatever v1 does not). A
// Layout records, for each controller cubicle uses, the hierarchy that holds
// it, our own cgroup in that hierarchy, and the parent directory under which
// sandbox groups are made. It is a plain value: discovered once at start-up
// (DiscoverLayout), or built from text by tests (LayoutFromProc) against a
// fake directory tree.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubicle::cgroups {

// The controllers cubicle uses. kIo is "io" on v2 and "blkio" on v1. On v2,
// kCpuacct (cpu.stat usage) and kFreezer (cgroup.freeze, cgroup.kill) are
// core files of every group, so they live wherever the unified mount is.
enum class Controller : uint8_t { kMemory, kPids, kCpu, kCpuacct, kIo, kFreezer };
inline constexpr int kControllerCount = 6;
inline constexpr std::array<Controller, kControllerCount> kAllControllers = {
    Controller::kMemory,  Controller::kPids, Controller::kCpu,
    Controller::kCpuacct, Controller::kIo,   Controller::kFreezer};

// The kernel's name for `c` on v2 ("io") and on v1 ("blkio").
absl::string_view V2Name(Controller c);
absl::string_view V1Name(Controller c);

enum class Version { kNone, kV1, kV2, kHybrid };
absl::string_view VersionName(Version v);  // "none" | "v1" | "v2" | "hybrid"

// One mounted hierarchy that serves at least one Controller (or the unified
// one, which always serves: it is where a v2 host places the sandbox).
struct Hierarchy {
  int version = 1;                       // 1 or 2
  std::string mount_point;               // "/sys/fs/cgroup/memory"
  std::vector<std::string> controllers;  // v1: as mounted ("cpu", "cpuacct");
                                         // v2: those our cgroup may enable
  std::string own;                       // our cgroup, from the hierarchy's root: "/a/b"
  std::string own_dir;                   // its directory; empty when the mount hides it
  std::string parent;                    // absolute directory of the sandbox groups

  bool operator==(const Hierarchy&) const = default;
};

struct Layout {
  Version version = Version::kNone;
  std::vector<Hierarchy> hierarchies;
  // Index into `hierarchies` per Controller (by enum value); -1: not on this host.
  std::array<int, kControllerCount> placement = {-1, -1, -1, -1, -1, -1};
  int unified = -1;  // index of the cgroup2 hierarchy, -1 when none is mounted
  // v1 only: memory.memsw.* exist (swap accounting on), so swap can be held
  // at exactly 0; without them the backend sets memory.swappiness=0 instead.
  bool v1_swap_accounting = false;
  // The hierarchies are plain directories that mimic cgroupfs (tests): a
  // new group gets empty copies of its parent's files, as the kernel would
  // give it interface files, and a group's files are unlinked before rmdir.
  bool emulated = false;
  std::string source;              // how it was found: "libcgroup" or "mountinfo"
  std::vector<std::string> notes;  // what discovery had to work around

  const Hierarchy* Find(Controller c) const;
  const Hierarchy* Unified() const { return unified < 0 ? nullptr : &hierarchies[unified]; }
  bool Has(Controller c) const { return Find(c) != nullptr; }
  // One line per hierarchy, for `cubicle probe` and logs.
  std::string Describe() const;
};

struct LayoutOptions {
  // Where sandbox groups go in every hierarchy. Relative: under our own
  // cgroup ("cubicle" -> <own>/cubicle). Absolute: from each hierarchy's
  // root ("/cubicle.slice"). No "." or ".." components.
  std::string parent = "cubicle";
  // Ask libcgroup first (its answers are checked against mountinfo);
  // mountinfo alone when false or when libcgroup fails.
  bool use_libcgroup = true;
  bool emulated = false;  // see Layout::emulated
};

// One cgroup mount from /proc/self/mountinfo.
struct CgroupMount {
  int version = 1;
  std::string mount_point;               // unescaped
  std::string root;                      // the hierarchy path mounted there, usually "/"
  std::vector<std::string> controllers;  // v1 only, from the super options
  bool operator==(const CgroupMount&) const = default;
};

// The cgroup and cgroup2 mounts in a mountinfo text; other lines are skipped.
absl::StatusOr<std::vector<CgroupMount>> ParseMountinfo(absl::string_view mountinfo);

// Whether `parent` may be LayoutOptions::parent: at least one component, no
// "." or "..", no control characters or ':', components of at most 255
// bytes. InvalidArgument says which rule it breaks.
absl::Status CheckParentOption(absl::string_view parent);

// Builds a layout from the texts of /proc/self/mountinfo and
// /proc/self/cgroup. Reads <unified own dir>/cgroup.controllers (v2) and
// probes for memory.memsw.limit_in_bytes (v1), so mount points may lie in a
// fake tree. `libcgroup_mounts` (controller -> mount point, from libcgroup)
// picks among several mounts of one hierarchy; pass {} when there is none.
absl::StatusOr<Layout> LayoutFromProc(
    absl::string_view mountinfo, absl::string_view proc_self_cgroup, const LayoutOptions& options,
    const std::vector<std::pair<std::string, std::string>>& libcgroup_mounts = {});

// This process's layout: libcgroup (cgroup_init, the mounted-controller
// iterator) verified against /proc/self/mountinfo, which also supplies what
// libcgroup does not report (a cgroup2 mount with no controllers, mount
// roots); mountinfo alone when libcgroup fails. Reads only.
absl::StatusOr<Layout> DiscoverLayout(const LayoutOptions& options = {});

// Whether `h.mount_point` is a cgroup filesystem of `h.version` (statfs).
absl::Status CheckHierarchyFilesystem(const Hierarchy& h);

// Makes the parent directory in every hierarchy (mkdir -p) and, on v2,
// enables our controllers in cgroup.subtree_control from our own cgroup
// down to the parent, so each sandbox group can use them. The parent holds
// no processes, so v2's no-internal-process rule is kept below it. If our
// own cgroup holds processes and is not the root, the kernel refuses to
// delegate (EBUSY) and the error says how to fix it. On a hybrid host whose
// cgroup2 mount serves no controller of ours and cannot be written, the
// unified hierarchy is dropped from `layout` with a note. Idempotent.
absl::Status PrepareParents(Layout* layout);

// Removes the parent directories that are empty; leaves the others.
absl::Status RemoveParents(const Layout& layout);

}  // namespace cubicle::cgroups
