#include "cgroups/cgroup.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status.h"
#include "cgroups/cgroupfs.h"
#include "cgroups/plan.h"

namespace cubicle::cgroups {
namespace {

constexpr int64_t kMs = 1'000'000;
// Kill: SIGKILL takes effect at once, but a large process may need a while
// to release its memory, and a task in uninterruptible sleep cannot be
// frozen or killed until it wakes.
constexpr int64_t kKillTimeoutNs = 5000 * kMs;
constexpr int64_t kKillV2WaitNs = 1000 * kMs;  // before falling back to freeze-and-kill
constexpr int kKillRounds = 16;
constexpr int64_t kFreezeWaitNs = 200 * kMs;
constexpr int64_t kRemoveTimeoutNs = 2000 * kMs;
constexpr int kCreateAttempts = 8;

std::atomic<uint64_t> next_sequence{0};

int64_t NowNs(clockid_t clock = CLOCK_MONOTONIC) {
  timespec ts;
  ::clock_gettime(clock, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Polls `done` with an exponential backoff (50 us .. 10 ms) until it holds
// or `deadline_ns` passes. Used only for short teardown waits; v1 offers no
// event for "empty" outside the release agent.
template <typename Done>
bool WaitUntil(Done done, int64_t deadline_ns) {
  int64_t pause = 50'000;
  for (;;) {
    if (done()) return true;
    int64_t now = NowNs();
    if (now >= deadline_ns) return false;
    int64_t step = std::min(pause, deadline_ns - now);
    timespec ts{static_cast<time_t>(step / 1'000'000'000), static_cast<long>(step % 1'000'000'000)};
    ::nanosleep(&ts, nullptr);
    pause = std::min<int64_t>(pause * 2, 10 * kMs);
  }
}

std::string PidList(const std::vector<pid_t>& pids) {
  constexpr size_t kShown = 16;
  std::string out = absl::StrJoin(pids.begin(), pids.begin() + std::min(pids.size(), kShown), " ");
  if (pids.size() > kShown) absl::StrAppend(&out, " ...");
  return out;
}

}  // namespace

pid_t GroupOwner(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "cubicle-")) return 0;
  size_t dash = name.find('-');
  if (dash == absl::string_view::npos) return 0;
  absl::string_view pid_text = name.substr(0, dash);
  absl::string_view seq_text = name.substr(dash + 1);
  auto digits = [](absl::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), absl::ascii_isdigit);
  };
  int pid = 0;
  if (!digits(pid_text) || !digits(seq_text) || !absl::SimpleAtoi(pid_text, &pid) || pid <= 0) {
    return 0;
  }
  return pid;
}

absl::Status SandboxCgroup::AddGroup(const Layout& layout, int hierarchy, bool create) {
  const Hierarchy& h = layout.hierarchies[hierarchy];
  std::string path = cgroupfs::Join(h.parent, name_);
  if (create) {
    absl::Status made = cgroupfs::MakeGroupDir(path, layout.emulated);
    if (absl::IsNotFound(made)) {
      // The parent went away since start-up (an operator's rmdir): make it again.
      Layout copy = layout;
      CUBICLE_RETURN_IF_ERROR(PrepareParents(&copy));
      made = cgroupfs::MakeGroupDir(path, layout.emulated);
    }
    CUBICLE_RETURN_IF_ERROR(made);
  }
  Group g;
  g.version = h.version;
  g.path = path;
  int index = static_cast<int>(groups_.size());
  groups_.push_back(std::move(g));  // from here on Remove() takes it away
  for (Controller c : kAllControllers) {
    if (layout.placement[static_cast<int>(c)] == hierarchy) group_of_[static_cast<int>(c)] = index;
  }
  if (h.version == 2) v2_ = index;
  CUBICLE_ASSIGN_OR_RETURN(int fd, cgroupfs::OpenDir(path));
  groups_[index].dir.reset(fd);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SandboxCgroup>> SandboxCgroup::Create(const Layout& layout,
                                                                     const Limits& limits) {
  return Make(layout, limits, /*v1_later=*/false);
}

absl::StatusOr<std::unique_ptr<SandboxCgroup>> SandboxCgroup::CreateV2First(const Layout& layout,
                                                                            const Limits& limits) {
  return Make(layout, limits, /*v1_later=*/true);
}

absl::StatusOr<std::unique_ptr<SandboxCgroup>> SandboxCgroup::Make(const Layout& layout, const Limits& limits,
                                                                   bool v1_later) {
  // The host's CPU count is the caller's check (it reads sysfs); the rest of
  // what the kernel would refuse is refused before anything is made.
  CUBICLE_RETURN_IF_ERROR(ValidateLimits(limits, nullptr, std::numeric_limits<unsigned>::max()));
  CUBICLE_ASSIGN_OR_RETURN(GroupPlan plan, PlanGroups(layout, limits));
  auto later = [&](int h) { return v1_later && layout.hierarchies[h].version == 1; };
  for (int attempt = 1;; ++attempt) {
    std::unique_ptr<SandboxCgroup> cg(new SandboxCgroup());
    cg->emulated_ = layout.emulated;
    cg->notes_ = plan.notes;
    cg->name_ = absl::StrCat("cubicle-", ::getpid(), "-", next_sequence.fetch_add(1));
    absl::Status st;
    for (int h : plan.hierarchies) {
      if (later(h)) {
        // Made by CreateV1: the name must be free there too.
        const std::string path = cgroupfs::Join(layout.hierarchies[h].parent, cg->name_);
        if (::access(path.c_str(), F_OK) == 0) {
          st = absl::AlreadyExistsError(absl::StrCat(path, " exists"));
          break;
        }
        cg->pending_hierarchies_.push_back(h);
        continue;
      }
      st = cg->AddGroup(layout, h, /*create=*/true);
      if (!st.ok()) break;
    }
    // An existing name belongs to an earlier process that had our pid; the
    // next sequence number avoids it (and `cg` removes what it made).
    if (absl::IsAlreadyExists(st) && attempt < kCreateAttempts) continue;
    CUBICLE_RETURN_IF_ERROR(st);
    for (const LimitWrite& w : plan.writes) {
      if (later(w.hierarchy)) {
        cg->pending_writes_.push_back(w);
        continue;
      }
      CUBICLE_RETURN_IF_ERROR(cg->ApplyWrite(layout, w));
    }
    return cg;
  }
}

absl::Status SandboxCgroup::CreateV1(const Layout& layout) {
  std::vector<int> hierarchies = std::move(pending_hierarchies_);
  std::vector<LimitWrite> writes = std::move(pending_writes_);
  pending_hierarchies_.clear();
  pending_writes_.clear();
  for (int h : hierarchies) CUBICLE_RETURN_IF_ERROR(AddGroup(layout, h, /*create=*/true));
  for (const LimitWrite& w : writes) CUBICLE_RETURN_IF_ERROR(ApplyWrite(layout, w));
  return absl::OkStatus();
}

namespace {

// The index into `groups` of the group in `hierarchy`, or -1.
template <typename Groups>
int GroupIn(const Groups& groups, const Layout& layout, int hierarchy, const std::string& name) {
  const std::string path = cgroupfs::Join(layout.hierarchies[hierarchy].parent, name);
  for (size_t i = 0; i < groups.size(); ++i) {
    if (groups[i].path == path && !groups[i].removed) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

absl::Status SandboxCgroup::ApplyWrite(const Layout& layout, const LimitWrite& w) {
  const int index = GroupIn(groups_, layout, w.hierarchy, name_);
  if (index < 0) return absl::InternalError(absl::StrCat("no group of ", name_, " for ", w.file));
  const Group& g = groups_[index];
  if (!w.if_missing.empty() && !cgroupfs::Exists(g.dir.get(), w.file.c_str())) {
    notes_.push_back(w.if_missing);
    return absl::OkStatus();
  }
  return cgroupfs::Write(g.dir.get(), g.path, w.file.c_str(), w.value, w.mode);
}

bool SandboxCgroup::CanRewrite(const Layout& layout, const Limits& limits) const {
  absl::StatusOr<GroupPlan> plan = PlanGroups(layout, limits);
  if (!plan.ok()) return false;
  return std::all_of(plan->hierarchies.begin(), plan->hierarchies.end(),
                     [&](int h) { return GroupIn(groups_, layout, h, name_) >= 0; });
}

absl::Status SandboxCgroup::Rewrite(const Layout& layout, const Limits& limits) {
  CUBICLE_RETURN_IF_ERROR(ValidateLimits(limits, nullptr, std::numeric_limits<unsigned>::max()));
  CUBICLE_ASSIGN_OR_RETURN(GroupPlan plan, PlanGroups(layout, limits));
  for (int h : plan.hierarchies) {
    if (GroupIn(groups_, layout, h, name_) < 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cgroup ", name_, " has no group in ", layout.hierarchies[h].mount_point,
          ": these limits need a sandbox made with them"));
    }
  }
  for (const LimitWrite& w : plan.writes) {
    const Group& g = groups_[GroupIn(groups_, layout, w.hierarchy, name_)];
    if (!w.if_missing.empty() && !cgroupfs::Exists(g.dir.get(), w.file.c_str())) continue;
    CUBICLE_RETURN_IF_ERROR(cgroupfs::Write(g.dir.get(), g.path, w.file.c_str(), w.value, w.mode));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SandboxCgroup>> SandboxCgroup::Adopt(const Layout& layout,
                                                                    absl::string_view name) {
  if (GroupOwner(name) == 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a sandbox group name"));
  }
  std::unique_ptr<SandboxCgroup> cg(new SandboxCgroup());
  cg->emulated_ = layout.emulated;
  cg->name_ = std::string(name);
  for (int h = 0; h < static_cast<int>(layout.hierarchies.size()); ++h) {
    std::string path = cgroupfs::Join(layout.hierarchies[h].parent, name);
    if (::access(path.c_str(), F_OK) != 0) continue;
    CUBICLE_RETURN_IF_ERROR(cg->AddGroup(layout, h, /*create=*/false));
  }
  if (cg->groups_.empty()) {
    return absl::NotFoundError(absl::StrCat("no group named ", name, " in any hierarchy"));
  }
  return cg;
}

SandboxCgroup::~SandboxCgroup() {
  bool left =
      std::any_of(groups_.begin(), groups_.end(), [](const Group& g) { return !g.removed; });
  if (!left) return;
  (void)Kill();
  (void)Remove();
}

int SandboxCgroup::v2_dir_fd() const { return v2_ < 0 ? -1 : groups_[v2_].dir.get(); }

const SandboxCgroup::Group* SandboxCgroup::GroupFor(Controller c) const {
  int index = group_of_[static_cast<int>(c)];
  return index < 0 || groups_[index].removed ? nullptr : &groups_[index];
}

absl::Status SandboxCgroup::Attach(pid_t pid, Placement placement) {
  std::string value = absl::StrCat(pid, "\n");
  for (const Group& g : groups_) {
    if (placement == Placement::kV1Only && g.version == 2) continue;
    if (placement == Placement::kV2Only && g.version == 1) continue;
    if (g.removed) {
      return absl::FailedPreconditionError(
          absl::StrCat("attach to ", g.path, ": the group was removed"));
    }
    CUBICLE_RETURN_IF_ERROR(cgroupfs::Write(g.dir.get(), g.path, "cgroup.procs", value));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SandboxCgroup::TaskFile>> SandboxCgroup::V1TaskFiles() const {
  std::vector<TaskFile> out;
  for (const Group& g : groups_) {
    if (g.version != 1) continue;
    if (g.removed) return absl::FailedPreconditionError(absl::StrCat("open ", g.path, "/tasks: the group was removed"));
    UniqueFd fd(::openat(g.dir.get(), "tasks", O_WRONLY | O_CLOEXEC));
    if (!fd) return ErrnoStatus(errno, absl::StrCat("open ", g.path, "/tasks"));
    out.push_back({std::move(fd), g.path});
  }
  return out;
}

namespace {

// The contents of a file some kernels lack: nullopt when it is missing.
absl::StatusOr<std::optional<std::string>> ReadIfPresent(int dirfd, const std::string& dir,
                                                         const char* file) {
  auto text = cgroupfs::Read(dirfd, dir, file);
  if (absl::IsNotFound(text.status())) return std::nullopt;
  if (!text.ok()) return text.status();
  return std::move(*text);
}

// Sets `out` from a key of a flat-keyed file's text; a missing key leaves it unset.
absl::Status ReadKey(const std::string& dir, const char* file,
                     const std::optional<std::string>& text, absl::string_view key,
                     std::optional<uint64_t>* out, uint64_t scale = 1) {
  if (!text.has_value()) return absl::OkStatus();
  auto value = KeyedValue(*text, key);
  if (absl::IsNotFound(value.status())) return absl::OkStatus();
  if (!value.ok())
    return absl::InternalError(absl::StrCat(dir, "/", file, ": ", value.status().message()));
  *out = *value * scale;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::optional<std::string>> SandboxCgroup::ReadFile(const Group& g, const char* file) const {
  if (!keep_open_) return ReadIfPresent(g.dir.get(), g.path, file);
  const size_t index = static_cast<size_t>(&g - groups_.data());
  auto kept = std::find_if(open_files_.begin(), open_files_.end(),
                           [&](const OpenFile& f) { return f.group == index && f.file == file; });
  if (kept == open_files_.end()) {
    UniqueFd fd(::openat(g.dir.get(), file, O_RDONLY | O_CLOEXEC));
    if (!fd && errno != ENOENT) return ErrnoStatus(errno, absl::StrCat("open(", cgroupfs::Join(g.path, file), ")"));
    open_files_.push_back({index, file, std::move(fd)});
    kept = open_files_.end() - 1;
  }
  if (!kept->fd) return std::nullopt;
  return cgroupfs::ReadFromStart(kept->fd.get(), cgroupfs::Join(g.path, file));
}

// Sets `out` from a single-number file; leaves it unset when the file is missing.
absl::Status SandboxCgroup::ReadSingle(const Group& g, const char* file, std::optional<uint64_t>* out) const {
  CUBICLE_ASSIGN_OR_RETURN(std::optional<std::string> text, ReadFile(g, file));
  if (!text.has_value()) return absl::OkStatus();
  auto value = SingleValue(*text);
  if (!value.ok()) return absl::InternalError(absl::StrCat(g.path, "/", file, ": ", value.status().message()));
  *out = *value;
  return absl::OkStatus();
}

absl::StatusOr<Stats> SandboxCgroup::ReadStats() const {
  Stats s;
  if (const Group* g = GroupFor(Controller::kMemory); g != nullptr) {
    if (g->version == 2) {
      CUBICLE_RETURN_IF_ERROR(ReadSingle(*g, "memory.peak", &s.memory_peak_bytes));
      CUBICLE_ASSIGN_OR_RETURN(auto events, ReadFile(*g, "memory.events"));
      CUBICLE_RETURN_IF_ERROR(ReadKey(g->path, "memory.events", events, "oom_kill", &s.oom_kills));
      CUBICLE_RETURN_IF_ERROR(
          ReadKey(g->path, "memory.events", events, "max", &s.memory_limit_hits));
    } else {
      CUBICLE_RETURN_IF_ERROR(
          ReadSingle(*g, "memory.max_usage_in_bytes", &s.memory_peak_bytes));
      CUBICLE_ASSIGN_OR_RETURN(auto oom, ReadFile(*g, "memory.oom_control"));
      CUBICLE_RETURN_IF_ERROR(
          ReadKey(g->path, "memory.oom_control", oom, "oom_kill", &s.oom_kills));
      // With swap accounting the memory+swap counter is charged first, so a
      // sandbox at its limit mostly trips memsw's failcnt: count both.
      std::optional<uint64_t> memsw_hits;
      CUBICLE_RETURN_IF_ERROR(ReadSingle(*g, "memory.failcnt", &s.memory_limit_hits));
      CUBICLE_RETURN_IF_ERROR(ReadSingle(*g, "memory.memsw.failcnt", &memsw_hits));
      if (memsw_hits.has_value())
        s.memory_limit_hits = s.memory_limit_hits.value_or(0) + *memsw_hits;
    }
  }
  if (const Group* g = GroupFor(Controller::kCpuacct); g != nullptr) {
    if (g->version == 2) {
      CUBICLE_ASSIGN_OR_RETURN(auto stat, ReadFile(*g, "cpu.stat"));
      CUBICLE_RETURN_IF_ERROR(
          ReadKey(g->path, "cpu.stat", stat, "usage_usec", &s.cpu_usage_ns, 1000));
    } else {
      CUBICLE_RETURN_IF_ERROR(ReadSingle(*g, "cpuacct.usage", &s.cpu_usage_ns));
    }
  }
  if (const Group* g = GroupFor(Controller::kPids); g != nullptr) {
    CUBICLE_RETURN_IF_ERROR(ReadSingle(*g, "pids.peak", &s.pids_peak));
  }
  return s;
}

absl::StatusOr<std::optional<uint64_t>> SandboxCgroup::CpuUsageNs() const {
  std::optional<uint64_t> ns;
  if (v2_ >= 0) {
    const Group& g = groups_[v2_];
    CUBICLE_ASSIGN_OR_RETURN(auto stat, ReadFile(g, "cpu.stat"));
    CUBICLE_RETURN_IF_ERROR(ReadKey(g.path, "cpu.stat", stat, "usage_usec", &ns, 1000));
    return ns;
  }
  if (const Group* g = GroupFor(Controller::kCpuacct); g != nullptr) {
    CUBICLE_RETURN_IF_ERROR(ReadSingle(*g, "cpuacct.usage", &ns));
  }
  return ns;
}

absl::StatusOr<SandboxCgroup::Usage> SandboxCgroup::ReadUsage() const {
  Usage u;
  if (const Group* g = GroupFor(Controller::kMemory); g != nullptr) {
    CUBICLE_RETURN_IF_ERROR(ReadSingle(*g, g->version == 2 ? "memory.current" : "memory.usage_in_bytes",
                                       &u.memory_bytes));
  }
  if (const Group* g = GroupFor(Controller::kCpuacct); g != nullptr) {
    if (g->version == 2) {
      CUBICLE_ASSIGN_OR_RETURN(auto stat, ReadFile(*g, "cpu.stat"));
      CUBICLE_RETURN_IF_ERROR(ReadKey(g->path, "cpu.stat", stat, "usage_usec", &u.cpu_ns, 1000));
    } else {
      CUBICLE_RETURN_IF_ERROR(ReadSingle(*g, "cpuacct.usage", &u.cpu_ns));
    }
  }
  if (const Group* g = GroupFor(Controller::kIo); g != nullptr) {
    if (g->version == 2) {
      // "8:0 rbytes=1 wbytes=2 rios=3 ..." per device.
      CUBICLE_ASSIGN_OR_RETURN(auto stat, ReadFile(*g, "io.stat"));
      if (stat.has_value()) {
        uint64_t total = 0;
        for (absl::string_view line : absl::StrSplit(*stat, '\n', absl::SkipEmpty())) {
          for (absl::string_view field : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
            uint64_t v;
            if ((absl::ConsumePrefix(&field, "rbytes=") || absl::ConsumePrefix(&field, "wbytes=")) &&
                absl::SimpleAtoi(field, &v)) {
              total += v;
            }
          }
        }
        u.io_bytes = total;
      }
    } else {
      // "8:0 Read 4096" ... and a last line "Total 8192".
      CUBICLE_ASSIGN_OR_RETURN(auto text, ReadFile(*g, "blkio.throttle.io_service_bytes"));
      if (text.has_value()) {
        uint64_t total = 0;
        for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
          if (absl::ConsumePrefix(&line, "Total ")) (void)absl::SimpleAtoi(line, &total);
        }
        u.io_bytes = total;
      }
    }
  }
  return u;
}

absl::StatusOr<UniqueFd> SandboxCgroup::MemoryThresholdFd(uint64_t bytes) const {
  const Group* g = GroupFor(Controller::kMemory);
  if (g == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(name_, ": no memory group to watch"));
  }
  if (g->version == 2) {
    return absl::UnimplementedError("cgroup v2 has no memory usage threshold event");
  }
  // Documentation/admin-guide/cgroup-v1/memory.rst §9: "<event_fd> <fd of
  // memory.usage_in_bytes> <threshold>" fires when usage crosses it.
  UniqueFd efd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!efd) return ErrnoStatus(errno, "eventfd");
  UniqueFd usage(::openat(g->dir.get(), "memory.usage_in_bytes", O_RDONLY | O_CLOEXEC));
  if (!usage) return ErrnoStatus(errno, absl::StrCat("open(", g->path, "/memory.usage_in_bytes)"));
  CUBICLE_RETURN_IF_ERROR(cgroupfs::Write(g->dir.get(), g->path, "cgroup.event_control",
                                          absl::StrCat(efd.get(), " ", usage.get(), " ", bytes, "\n")));
  return efd;
}

absl::StatusOr<UniqueFd> SandboxCgroup::OomEventFd() const {
  const Group* g = GroupFor(Controller::kMemory);
  if (g == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(name_, ": no memory group to watch"));
  }
  if (g->version == 2) {
    // "A value change in this file generates a file modified event"
    // (Documentation/admin-guide/cgroup-v2.rst, memory.events).
    UniqueFd fd(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    if (!fd) return ErrnoStatus(errno, "inotify_init1");
    std::string events = cgroupfs::Join(g->path, "memory.events");
    if (::inotify_add_watch(fd.get(), events.c_str(), IN_MODIFY) < 0) {
      return ErrnoStatus(errno, absl::StrCat("inotify_add_watch(", events, ")"));
    }
    return fd;
  }
  // v1: an eventfd registered through cgroup.event_control for
  // memory.oom_control (Documentation/admin-guide/cgroup-v1/memory.rst §10).
  UniqueFd efd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!efd) return ErrnoStatus(errno, "eventfd");
  UniqueFd control(::openat(g->dir.get(), "memory.oom_control", O_RDONLY | O_CLOEXEC));
  if (!control) return ErrnoStatus(errno, absl::StrCat("open(", g->path, "/memory.oom_control)"));
  CUBICLE_RETURN_IF_ERROR(cgroupfs::Write(g->dir.get(), g->path, "cgroup.event_control",
                                          absl::StrCat(efd.get(), " ", control.get(), "\n")));
  return efd;
}

absl::StatusOr<std::vector<pid_t>> SandboxCgroup::Pids(const Group& g) const {
  auto text = g.dir.valid() ? cgroupfs::Read(g.dir.get(), g.path, "cgroup.procs")
                            : cgroupfs::Read(cgroupfs::Join(g.path, "cgroup.procs"));
  if (!text.ok()) return text.status();
  return cgroupfs::ParsePids(*text);
}

absl::StatusOr<std::vector<pid_t>> SandboxCgroup::AllPids() const {
  std::vector<pid_t> all;
  for (const Group& g : groups_) {
    if (g.removed) continue;
    CUBICLE_ASSIGN_OR_RETURN(std::vector<pid_t> pids, Pids(g));
    all.insert(all.end(), pids.begin(), pids.end());
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all;
}

absl::Status SandboxCgroup::WaitEmpty(const Group& g, int64_t deadline_ns) const {
  absl::Status error;
  std::vector<pid_t> left;
  bool empty = WaitUntil(
      [&] {
        auto pids = Pids(g);
        if (!pids.ok()) {
          error = pids.status();
          return true;
        }
        left = *pids;
        return left.empty();
      },
      deadline_ns);
  if (!error.ok()) return error;
  if (empty) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat(g.path, ": ", left.size(), " processes remain (", PidList(left), ")"));
}

// v1 (or a v2 kernel without cgroup.kill): freeze, so that nothing forks
// while we read the pids, SIGKILL each, thaw (frozen tasks act on the signal
// only when thawed), repeat until empty. Without a freezer the loop still
// ends once the pids limit stops the forks.
absl::Status SandboxCgroup::FreezeKillThaw(int64_t deadline_ns) {
  const Group* freezer = GroupFor(Controller::kFreezer);
  bool v1 = freezer != nullptr && freezer->version == 1;
  const char* state_file = v1 ? "freezer.state" : "cgroup.freeze";
  auto frozen = [&] {
    if (v1) {
      auto state = cgroupfs::Read(freezer->dir.get(), freezer->path, "freezer.state");
      return state.ok() && absl::StripAsciiWhitespace(*state) == "FROZEN";
    }
    auto events = cgroupfs::Read(freezer->dir.get(), freezer->path, "cgroup.events");
    return events.ok() && KeyedValue(*events, "frozen").value_or(0) == 1;
  };
  int rounds = 0;
  for (; rounds < kKillRounds && NowNs() < deadline_ns; ++rounds) {
    CUBICLE_ASSIGN_OR_RETURN(std::vector<pid_t> pids, AllPids());
    if (pids.empty()) return absl::OkStatus();
    if (freezer != nullptr) {
      CUBICLE_RETURN_IF_ERROR(
          cgroupfs::Write(freezer->dir.get(), freezer->path, state_file, v1 ? "FROZEN\n" : "1\n"));
      // A task in uninterruptible sleep delays FROZEN; kill what we can anyway.
      WaitUntil(frozen, std::min(deadline_ns, NowNs() + kFreezeWaitNs));
      auto again = AllPids();
      if (again.ok()) pids = *again;
    }
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
    if (freezer != nullptr) {
      CUBICLE_RETURN_IF_ERROR(
          cgroupfs::Write(freezer->dir.get(), freezer->path, state_file, v1 ? "THAWED\n" : "0\n"));
    }
    WaitUntil(
        [&] {
          auto left = AllPids();
          return !left.ok() || left->empty();
        },
        std::min(deadline_ns, NowNs() + (rounds + 1) * 20 * kMs));
  }
  CUBICLE_ASSIGN_OR_RETURN(std::vector<pid_t> left, AllPids());
  if (left.empty()) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat("kill ", name_, ": ", left.size(),
                                                  " processes remain after ", rounds, " rounds (",
                                                  PidList(left), ")"));
}

absl::Status SandboxCgroup::Kill() {
  int64_t deadline = NowNs() + kKillTimeoutNs;
  if (v2_ >= 0 && !groups_[v2_].removed &&
      cgroupfs::Exists(groups_[v2_].dir.get(), "cgroup.kill")) {
    const Group& g = groups_[v2_];
    // One write kills every process of the group and of any it forks meanwhile.
    CUBICLE_RETURN_IF_ERROR(cgroupfs::Write(g.dir.get(), g.path, "cgroup.kill", "1\n"));
    absl::Status unreadable;
    bool empty = WaitUntil(
        [&] {
          auto left = AllPids();
          if (!left.ok()) unreadable = left.status();
          return !left.ok() || left->empty();
        },
        NowNs() + kKillV2WaitNs);
    CUBICLE_RETURN_IF_ERROR(unreadable);
    if (empty) return absl::OkStatus();
    // Something escaped the v2 group (placed on v1 only): the v1 way.
  }
  return FreezeKillThaw(deadline);
}

void SandboxCgroup::Disown() {
  open_files_.clear();
  for (Group& g : groups_) {
    g.dir.reset();
    g.removed = true;
  }
}

absl::Status SandboxCgroup::Remove() {
  open_files_.clear();  // KeepStatFilesOpen's fds: nothing holds a group's files from here
  int64_t deadline = NowNs() + kRemoveTimeoutNs;
  absl::Status result;
  // Reverse order: the v2 group, made first, goes last.
  for (auto it = groups_.rbegin(); it != groups_.rend(); ++it) {
    Group& g = *it;
    if (g.removed) continue;
    // The kernel refuses to remove a group that still has processes, so a
    // real group is simply removed when it can be (mostly it is empty by
    // now: one rmdir, no read of cgroup.procs); a fake tree (tests) has no
    // such check and is always waited for.
    if (!emulated_ && cgroupfs::RemoveGroupDirRaw(g.path, false) == 0) {
      g.dir.reset();
      g.removed = true;
      continue;
    }
    absl::Status empty = WaitEmpty(g, deadline);
    if (absl::IsNotFound(empty)) {  // someone removed it already
      g.dir.reset();
      g.removed = true;
      continue;
    }
    if (!empty.ok()) {
      result.Update(empty);
      continue;
    }
    int err = 0;
    // v1 can answer EBUSY for a moment after the last task left.
    WaitUntil([&] { return (err = cgroupfs::RemoveGroupDirRaw(g.path, emulated_)) != EBUSY; },
              deadline);
    if (err != 0) {
      result.Update(ErrnoStatus(err, absl::StrCat("rmdir(", g.path, ")")));
      continue;
    }
    g.dir.reset();
    g.removed = true;
  }
  return result;
}

absl::Status SandboxCgroup::RemoveOrKill() {
  if (!emulated_) {  // a fake tree's rmdir does not check for processes
    open_files_.clear();
    // Reverse order, as Remove(): the v2 group, which Kill() uses, goes last.
    for (auto it = groups_.rbegin(); it != groups_.rend(); ++it) {
      if (it->removed) continue;
      if (cgroupfs::RemoveGroupDirRaw(it->path, false) != 0) break;  // not empty (or EBUSY a moment)
      it->dir.reset();
      it->removed = true;
    }
    if (std::all_of(groups_.begin(), groups_.end(), [](const Group& g) { return g.removed; })) {
      return absl::OkStatus();
    }
  }
  absl::Status result = Kill();
  result.Update(Remove());  // also after a failed kill: what emptied goes
  return result;
}

std::vector<std::string> SandboxCgroup::paths() const {
  std::vector<std::string> out;
  for (const Group& g : groups_) out.push_back(g.path);
  return out;
}

}  // namespace cubicle::cgroups
