// One sandbox's cgroups: a group named "cubicle-<owner pid>-<seq>" under the
// layout's parent in each hierarchy the sandbox needs, with its limits
// written, and the means to place processes in it, read what they used,
// learn of OOM kills, kill them all and remove the groups.
//
// How the launcher uses it:
//   auto cg = SandboxCgroup::Create(layout, limits);      // before clone
//   clone3(... CLONE_INTO_CGROUP, cgroup = cg->v2_dir_fd())   // v2: placed at birth
//   cg->Attach(pid, kV1Only or kAll)                       // before releasing the child
//   poll(cg->OomEventFd(), ...)                             // while it runs
//   cg->ReadStats(); cg->Kill(); cg->Remove();              // at the end (or ~SandboxCgroup)
//
// Not thread-safe: one owner drives one SandboxCgroup. Create is safe to
// call from several threads.
#pragma once

#include <sys/types.h>

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/unique_fd.h"
#include "cgroups/layout.h"
#include "cgroups/limits.h"
#include "cgroups/stats.h"

namespace cubicle::cgroups {

struct LimitWrite;  // cgroups/plan.h

class SandboxCgroup {
 public:
  // Which groups Attach writes the pid to.
  enum class Placement {
    kAll,     // every group: the child was not placed by CLONE_INTO_CGROUP
    kV1Only,  // the v1 groups: clone3(CLONE_INTO_CGROUP, v2_dir_fd()) placed it on v2
    kV2Only,  // the v2 group: the child joins its v1 groups itself (V1TaskFiles)
  };

  // Makes the groups PlanGroups names and writes the limits (swap held at
  // 0). `limits` should have passed ValidateLimits; what the kernel would
  // refuse is refused here too, before anything is made. On any failure
  // nothing is left behind. A name left over by an earlier process with our
  // pid is skipped (SweepStale removes it).
  static absl::StatusOr<std::unique_ptr<SandboxCgroup>> Create(const Layout& layout,
                                                               const Limits& limits);

  // Create in two steps, for a launcher that makes the v1 groups while its
  // sandbox builds its root: now the v2 group with its limits (what
  // clone3(CLONE_INTO_CGROUP) needs), CreateV1() the v1 groups and theirs.
  // The name is checked free in every hierarchy now. Until CreateV1()
  // succeeds the v1 groups do not exist: V1TaskFiles() lists none and
  // Attach() writes to v2 only. Failures leave nothing of what was made
  // once the object is gone. On a host without v1 groups to make,
  // CreateV1() has nothing to do.
  static absl::StatusOr<std::unique_ptr<SandboxCgroup>> CreateV2First(const Layout& layout,
                                                                      const Limits& limits);
  absl::Status CreateV1(const Layout& layout);
  // Whether CreateV1() still has groups to make.
  bool v1_pending() const { return !pending_hierarchies_.empty(); }

  // Takes charge of the existing groups called `name` (in every hierarchy of
  // `layout` that has one), to kill and remove them: SweepStale's tool.
  static absl::StatusOr<std::unique_ptr<SandboxCgroup>> Adopt(const Layout& layout,
                                                              absl::string_view name);

  SandboxCgroup(const SandboxCgroup&) = delete;
  SandboxCgroup& operator=(const SandboxCgroup&) = delete;
  // Kill() and Remove(), best effort, when Remove() has not succeeded.
  ~SandboxCgroup();

  const std::string& name() const { return name_; }

  // An O_RDONLY|O_DIRECTORY fd of the v2 group, for clone3's
  // CLONE_INTO_CGROUP; -1 when the host mounts no cgroup2. Owned here.
  int v2_dir_fd() const;

  // Writes `pid` to cgroup.procs of the groups `placement` names, with
  // direct cgroupfs writes (libcgroup writes v1 "tasks", moving one thread
  // only, and costs more: bench/cgroup_bench.cc). On v1 the first migration
  // after an idle spell waits for an RCU grace period (milliseconds): keep
  // attaches off request paths.
  absl::Status Attach(pid_t pid, Placement placement = Placement::kAll);

  // The "tasks" file of each v1 group, opened for writing here, so that a
  // child can join its v1 groups itself by writing "0" to each: the kernel
  // moves the calling thread then without write-locking the global
  // threadgroup rwsem, so without the RCU grace period a cgroup.procs write
  // waits for after an idle spell (microseconds instead of milliseconds).
  // The permission check uses the opener's
  // credentials: the child may write with its own ids already switched.
  // Moving only the calling thread moves the whole child while it has one
  // thread. Empty without v1 groups.
  struct TaskFile {
    UniqueFd fd;
    std::string path;  // the group's, for errors
  };
  absl::StatusOr<std::vector<TaskFile>> V1TaskFiles() const;

  // Rewrites the limits of the existing groups to `limits` (a pooled
  // sandbox's per-request tightening, applied at hand-off). Every
  // hierarchy `limits` needs must already have a group of this sandbox:
  // FailedPrecondition otherwise, before anything is written. Whether the
  // new limits are tighter is the caller's check (rpc::TightenLimits).
  absl::Status Rewrite(const Layout& layout, const Limits& limits);
  // Whether Rewrite(layout, limits) finds every group it needs.
  bool CanRewrite(const Layout& layout, const Limits& limits) const;

  // What the group's processes used so far. Fields the host does not offer
  // stay unset; an unreadable file that should be there is an error.
  absl::StatusOr<Stats> ReadStats() const;

  // From now on ReadStats and ReadUsage keep each file they read open and
  // read it again from its start: a pool's sandbox, which reads its stats
  // once while it waits for its request, then pays one pread per file on
  // the reply path instead of an open, two reads and a close (cgroupfs
  // opens are the slow part). The fds go at Remove().
  void KeepStatFilesOpen() { keep_open_ = true; }

  // What the group uses now, for the runtime breakers: resident memory
  // (v2 memory.current, v1 memory.usage_in_bytes), CPU time so far, and
  // block IO bytes so far (v2 io.stat rbytes+wbytes, v1
  // blkio.throttle.io_service_bytes Total). Unset where the host lacks it.
  struct Usage {
    std::optional<uint64_t> memory_bytes;
    std::optional<uint64_t> cpu_ns;
    std::optional<uint64_t> io_bytes;
  };
  absl::StatusOr<Usage> ReadUsage() const;

  // The CPU time the groups' processes used so far, in nanoseconds: from
  // the v2 group's cpu.stat where there is one (cgroup v2 counts CPU time
  // whether or not the cpu controller is enabled, and a child cloned into
  // its group is counted from its first instruction), else v1 cpuacct.
  // Unset where neither is there.
  absl::StatusOr<std::optional<uint64_t>> CpuUsageNs() const;

  // v1: an eventfd the kernel signals when memory usage crosses `bytes`
  // (cgroup.event_control on memory.usage_in_bytes). v2 has no usage
  // threshold event: Unimplemented, and callers poll ReadUsage().
  absl::StatusOr<UniqueFd> MemoryThresholdFd(uint64_t bytes) const;

  // An fd that becomes readable (POLLIN) when the memory controller
  // reports an event: v1, an eventfd registered on memory.oom_control (an
  // OOM, or the group's removal); v2, an inotify watch on memory.events
  // (any change: high, max, oom, oom_kill). Readable means "look": confirm
  // with ReadStats().oom_killed(). FailedPrecondition without a memory group.
  absl::StatusOr<UniqueFd> OomEventFd() const;

  // Kills every process in the groups and waits until they are empty:
  // cgroup.kill on v2; on v1 freeze (freezer.state), SIGKILL every pid of
  // cgroup.procs, thaw, until empty; bounded in rounds and time (an error
  // lists the pids left). Processes it kills are only those in the groups.
  absl::Status Kill();

  // Waits (bounded) until the groups are empty, then removes them. Does not
  // kill: a group that does not empty is an error and stays for SweepStale.
  // Idempotent.
  absl::Status Remove();

  // Kill() then Remove(), for groups that are mostly empty already (their
  // sandbox's pid namespace died with its init): each group is first simply
  // removed, which the kernel allows only when it is empty, and only when
  // one is refused do Kill() and Remove() take the rest. One rmdir per
  // group instead of the kill and a read of each cgroup.procs.
  absl::Status RemoveOrKill();

  // Lets go of the groups without removing them: another process has taken
  // charge (Adopt, by name), so that this object's destruction neither
  // kills nor removes anything. Closes every fd it holds.
  void Disown();

  // The group directories, for logs and tests.
  std::vector<std::string> paths() const;
  // Degradations applied at Create ("swap not strictly held at 0").
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  struct Group {
    int version = 1;
    std::string path;
    UniqueFd dir;
    bool removed = false;
  };

  SandboxCgroup() = default;
  static absl::StatusOr<std::unique_ptr<SandboxCgroup>> Make(const Layout& layout, const Limits& limits,
                                                             bool v1_later);
  absl::Status AddGroup(const Layout& layout, int hierarchy, bool create);
  absl::Status ApplyWrite(const Layout& layout, const LimitWrite& w);
  absl::StatusOr<std::vector<pid_t>> Pids(const Group& g) const;
  absl::StatusOr<std::vector<pid_t>> AllPids() const;
  absl::Status WaitEmpty(const Group& g, int64_t deadline_ns) const;
  absl::Status FreezeKillThaw(int64_t deadline_ns);
  const Group* GroupFor(Controller c) const;
  // `file` of `g`, nullopt when the group has none; through a kept fd after
  // KeepStatFilesOpen.
  absl::StatusOr<std::optional<std::string>> ReadFile(const Group& g, const char* file) const;
  absl::Status ReadSingle(const Group& g, const char* file, std::optional<uint64_t>* out) const;

  struct OpenFile {
    size_t group;  // into groups_
    std::string file;
    UniqueFd fd;   // none: the group has no such file
  };
  bool keep_open_ = false;
  mutable std::vector<OpenFile> open_files_;

  std::string name_;
  std::vector<Group> groups_;
  std::array<int, kControllerCount> group_of_ = {-1, -1, -1, -1, -1, -1};  // into groups_
  int v2_ = -1;                                                            // into groups_
  bool emulated_ = false;
  std::vector<std::string> notes_;
  // CreateV2First's v1 part, for CreateV1: hierarchies and their writes.
  std::vector<int> pending_hierarchies_;
  std::vector<LimitWrite> pending_writes_;
};

// The owner pid in a sandbox group's name ("cubicle-<pid>-<seq>"); 0 when
// `name` is not one.
pid_t GroupOwner(absl::string_view name);

// Whether the process that made a group whose directory was born at
// `birth_realtime_ns` may still be alive as `pid` (a pid reused by a later
// process is not). Doubt says alive.
bool GroupOwnerAlive(pid_t pid, int64_t birth_realtime_ns);

struct SweepReport {
  std::vector<std::string> removed;  // group names
  std::vector<std::string> failed;   // "name: why"
};

// Removes the groups named "cubicle-<pid>-<seq>" whose owner is gone, in
// every hierarchy of `layout`, killing their processes first. The owner is
// gone when no process has that pid, or when the process that has it
// started after the group was made (the pid was reused). Run it at start-
// up: the groups of a cubicle that was SIGKILLed go away. Assumes one pid
// namespace per parent (the default parent is per cgroup of the caller),
// and does nothing outside the initial pid namespace, where the pids in the
// names cannot be told from others' (a cubicle in a container with its own
// pid namespace but the host's cgroup tree would kill live sandboxes).
// Not root, it leaves groups another user owns (root's stale groups, seen
// by a rootless cubicle): they are neither removed nor reported.
absl::StatusOr<SweepReport> SweepStale(const Layout& layout);

}  // namespace cubicle::cgroups
