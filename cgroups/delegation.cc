#include "cgroups/delegation.h"

#include <algorithm>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status.h"
#include "cgroups/cgroupfs.h"

namespace cubicle::cgroups {
namespace {

std::vector<std::string> Words(const std::string& text) {
  return absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty());
}

bool Has(const std::vector<std::string>& words, absl::string_view word) {
  return std::find(words.begin(), words.end(), word) != words.end();
}

}  // namespace

absl::StatusOr<std::optional<LeafMove>> MoveIntoLeaf(const Layout& layout, pid_t pid, absl::string_view leaf_name) {
  const Hierarchy* h = layout.Unified();
  if (layout.version != Version::kV2 || h == nullptr || h->own == "/" || h->own.empty() || h->own_dir.empty()) {
    return std::nullopt;
  }
  if (!Has(h->controllers, "memory") || !Has(h->controllers, "pids")) return std::nullopt;
  CUBICLE_ASSIGN_OR_RETURN(std::string enabled, cgroupfs::Read(cgroupfs::Join(h->own_dir, "cgroup.subtree_control")));
  const std::vector<std::string> delegated = Words(enabled);
  if (Has(delegated, "memory") && Has(delegated, "pids")) return std::nullopt;
  CUBICLE_ASSIGN_OR_RETURN(std::string procs, cgroupfs::Read(cgroupfs::Join(h->own_dir, "cgroup.procs")));
  for (const std::string& word : Words(procs)) {
    pid_t other = 0;
    if (!absl::SimpleAtoi(word, &other) || other != pid) return std::nullopt;
  }
  const std::string leaf = cgroupfs::Join(h->own_dir, leaf_name);
  if (absl::Status made = cgroupfs::MakeGroupDir(leaf, layout.emulated); !made.ok() && !absl::IsAlreadyExists(made)) {
    return made;
  }
  const std::string procs_path = cgroupfs::Join(leaf, "cgroup.procs");
  if (int err = cgroupfs::WriteRaw(-1, procs_path.c_str(), absl::StrCat(pid), cgroupfs::WriteMode::kReplace);
      err != 0) {
    return ErrnoStatus(err, absl::StrCat("moving process ", pid, " into ", leaf, ": write(", procs_path, ")"));
  }
  return LeafMove{leaf, absl::StrCat(h->own, "/cubicle")};
}

}  // namespace cubicle::cgroups
