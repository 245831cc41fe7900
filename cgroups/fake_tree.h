// A fake cgroupfs for tests: plain directories and files in a temporary
// directory that mimic the hierarchies of a v2, v1 or hybrid host, with the
// mountinfo and /proc/self/cgroup texts that describe them. The layout it
// yields is `emulated` (Layout::emulated), so the real backends run against
// it unchanged: tests read back exactly what they wrote. Needs no root and
// no cgroups. Not for production code (library cubicle_cgroups_testing).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cgroups/layout.h"

namespace cubicle::cgroups {

class FakeCgroupTree {
 public:
  enum class Kind {
    kV2,      // one cgroup2 mount; our cgroup /user.slice/cubicle.service
    kV1,      // memory, cpu+cpuacct (co-mounted), pids, blkio, freezer;
              // our memory cgroup /process_api/abc, the others /
    kHybrid,  // the v1 mounts above plus a cgroup2 mount offering only hugetlb
  };

  // A new tree under $TMPDIR (or /tmp); removed with everything in it by
  // the destructor.
  static absl::StatusOr<std::unique_ptr<FakeCgroupTree>> Make(Kind kind);
  ~FakeCgroupTree();

  const std::string& root() const { return root_; }
  const std::string& mountinfo() const { return mountinfo_; }
  const std::string& proc_self_cgroup() const { return proc_self_cgroup_; }

  // LayoutFromProc over this tree with `options.emulated` set.
  absl::StatusOr<Layout> Discover(LayoutOptions options = {}) const;

  // `relative` under root(): "unified/cubicle/memory.max".
  std::string Path(const std::string& relative) const;
  absl::Status Write(const std::string& relative, const std::string& content) const;
  absl::StatusOr<std::string> Read(const std::string& relative) const;

 private:
  FakeCgroupTree() = default;
  absl::Status Build(Kind kind);

  std::string root_;
  std::string mountinfo_;
  std::string proc_self_cgroup_;
};

}  // namespace cubicle::cgroups
