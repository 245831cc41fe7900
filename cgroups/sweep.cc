// Start-up cleanup: the groups of sandbox owners that are gone.
#include "cgroups/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status.h"
#include "cgroups/cgroupfs.h"

namespace cubicle::cgroups {
namespace {

constexpr int64_t kMs = 1'000'000;

int64_t NowNs(clockid_t clock) {
  timespec ts;
  ::clock_gettime(clock, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// The start of `pid` in CLOCK_REALTIME nanoseconds, from /proc/<pid>/stat
// (field 22, clock ticks since boot); nullopt when it cannot be read.
std::optional<int64_t> ProcessStartRealtimeNs(pid_t pid) {
  auto stat = cgroupfs::Read(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat.ok()) return std::nullopt;
  size_t paren = stat->rfind(')');  // the command name may hold spaces and parens
  if (paren == std::string::npos) return std::nullopt;
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(*stat).substr(paren + 1), ' ', absl::SkipEmpty());
  uint64_t ticks = 0;
  if (fields.size() < 20 || !absl::SimpleAtoi(fields[19], &ticks)) return std::nullopt;
  long hz = ::sysconf(_SC_CLK_TCK);
  if (hz <= 0) return std::nullopt;
  int64_t since_boot = static_cast<int64_t>(ticks) * (1'000'000'000 / hz);
  return NowNs(CLOCK_REALTIME) - NowNs(CLOCK_BOOTTIME) + since_boot;
}

// Whether the process that made a group born at `birth_ns` (CLOCK_REALTIME)
// may still be alive as `pid`. Doubt keeps the group.
bool OwnerAlive(pid_t pid, int64_t birth_ns) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::optional<int64_t> start = ProcessStartRealtimeNs(pid);
  if (!start.has_value()) return true;
  // A process that started after the group was made did not make it: the
  // pid was reused. The slack covers clock-tick rounding.
  return *start <= birth_ns + 2000 * kMs;
}

bool AnyGroupNamed(const Layout& layout, const std::string& name) {
  return std::any_of(layout.hierarchies.begin(), layout.hierarchies.end(), [&](const Hierarchy& h) {
    return ::access(cgroupfs::Join(h.parent, name).c_str(), F_OK) == 0;
  });
}

}  // namespace

bool GroupOwnerAlive(pid_t pid, int64_t birth_realtime_ns) { return OwnerAlive(pid, birth_realtime_ns); }

bool InInitialPidNamespace() {
  constexpr ino_t kInitialPidNamespaceInode = 0xEFFFFFFC;  // PROC_PID_INIT_INO, fixed since Linux 3.8
  struct stat ns;
  return ::stat("/proc/self/ns/pid", &ns) == 0 && ns.st_ino == kInitialPidNamespaceInode;
}

absl::StatusOr<SweepReport> SweepStale(const Layout& layout) {
  // A group's name carries its owner's pid as the owner saw it. From
  // another pid namespace (a container sharing the host's cgroup tree)
  // those pids mean other processes, or none: every owner would look dead,
  // live sandboxes included. Only the initial pid namespace sweeps.
  if (!InInitialPidNamespace()) return SweepReport{};
  // name -> the earliest birth of its directories (CLOCK_REALTIME ns).
  std::vector<std::pair<std::string, int64_t>> found;
  const uid_t euid = ::geteuid();
  for (const Hierarchy& h : layout.hierarchies) {
    // cgroupfs (kernfs) counts a directory's links as 2 + its
    // subdirectories: a parent with 2 holds no group, and one stat tells so
    // where reading it costs five syscalls (seven hierarchies on a hybrid
    // host, on every start). A fake tree's filesystem may count otherwise.
    struct stat parent;
    if (!layout.emulated && ::stat(h.parent.c_str(), &parent) == 0 && S_ISDIR(parent.st_mode) &&
        parent.st_nlink == 2) {
      continue;
    }
    DIR* d = ::opendir(h.parent.c_str());
    if (d == nullptr) {
      if (errno == ENOENT) continue;
      return ErrnoStatus(errno, absl::StrCat("opendir(", h.parent, ")"));
    }
    while (dirent* e = ::readdir(d)) {
      if (e->d_type != DT_DIR || GroupOwner(e->d_name) == 0) continue;
      struct stat st;
      if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      // Another user's groups (root's, seen by a rootless cubicle) are not
      // ours to kill or remove: their owner's next start sweeps them.
      if (euid != 0 && st.st_uid != euid) continue;
      int64_t birth = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
      auto it = std::find_if(found.begin(), found.end(),
                             [&](const auto& f) { return f.first == e->d_name; });
      if (it == found.end()) {
        found.emplace_back(e->d_name, birth);
      } else {
        it->second = std::min(it->second, birth);
      }
    }
    ::closedir(d);
  }
  SweepReport report;
  for (const auto& [name, birth] : found) {
    if (OwnerAlive(GroupOwner(name), birth)) continue;
    auto cg = SandboxCgroup::Adopt(layout, name);
    absl::Status st = cg.status();
    if (st.ok()) st = (*cg)->Kill();
    if (st.ok()) st = (*cg)->Remove();
    if (st.ok()) {
      report.removed.push_back(name);
    } else if (!AnyGroupNamed(layout, name)) {
      // Removed under us: a cold launcher's cleaner (runtime/teardown.h)
      // outlives its owner by a moment to do just that.
      continue;
    } else {
      report.failed.push_back(absl::StrCat(name, ": ", st.message()));
    }
  }
  return report;
}

}  // namespace cubicle::cgroups
