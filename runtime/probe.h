// `cubicle probe` (DESIGN §7): what this host allows, measured by starting
// real minimal sandboxes. Each check says what it found and, when it failed,
// what cubicle loses.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cubicle::runtime {

struct ProbeCheck {
  std::string name;    // "user_namespaces", "fresh_procfs", ...
  bool ok = false;
  std::string detail;  // what was seen: "ok", or the step and errno
  std::string impact;  // when !ok: what is degraded, and how
};

struct CgroupInfo {
  std::string version;  // "v2", "v1", "hybrid" or "none"
  std::string v2_mount;
  std::vector<std::string> v2_controllers;
  std::vector<std::string> v1_controllers;
};

struct ProbeReport {
  bool root = false;
  std::string kernel;
  std::vector<ProbeCheck> checks;
  CgroupInfo cgroups;
  std::vector<std::string> warnings;  // one line per degradation
};

// Runs every check. Takes a few milliseconds; the result is cached for the
// life of the process (`refresh` forces a new run).
ProbeReport Probe(bool refresh = false);

// Reads the cgroup layout from /proc/self/mountinfo (no sandbox needed).
CgroupInfo DetectCgroups();

}  // namespace cubicle::runtime
