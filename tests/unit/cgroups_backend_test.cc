// SandboxCgroup against fake cgroupfs trees (cgroups/fake_tree.h): the same
// cases under the v2 and the v1 backend (TEST_P), asserting the exact bytes
// written for given limits, stats parsed from the kernel's formats, the OOM
// event source, rollback, RAII cleanup and the sweep. No root, no cgroups.
#include "cgroups/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cgroups/cgroupfs.h"
#include "cgroups/fake_tree.h"
#include "cgroups/stats.h"

namespace cubicle::cgroups {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using Kind = FakeCgroupTree::Kind;

constexpr uint64_t kMiB = uint64_t{1} << 20;

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// The sandbox groups in `dir`.
std::vector<std::string> Groups(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = ::readdir(d)) {
    if (std::string(e->d_name).rfind("cubicle-", 0) == 0) names.emplace_back(e->d_name);
  }
  ::closedir(d);
  return names;
}

// A child of ours that waits until destroyed: a real pid to attach to a
// fake tree, which nothing acts on, and the only process a mistaken Kill
// could reach.
class WaitingChild {
 public:
  WaitingChild() {
    int fds[2];
    if (::pipe(fds) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[1]);
      char c;
      (void)!::read(fds[0], &c, 1);
      ::_exit(0);
    }
    ::close(fds[0]);
    release_ = fds[1];
  }
  ~WaitingChild() {
    ::close(release_);
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int release_ = -1;
};

// Where each backend keeps a group, relative to the tree's root, for a
// controller's directory: "<mount>/<parent>/<name>".
struct Backend {
  Kind kind;
  const char* label;
  std::map<std::string, std::string> group_dirs;  // role -> parent dir, relative
};

const Backend kV2{Kind::kV2, "v2", {{"all", "unified/user.slice/cubicle.service/cubicle"}}};
const Backend kV1{Kind::kV1,
                  "v1",
                  {{"memory", "memory/process_api/abc/cubicle"},
                   {"cpu", "cpu,cpuacct/cubicle"},
                   {"pids", "pids/cubicle"},
                   {"blkio", "blkio/cubicle"},
                   {"freezer", "freezer/cubicle"}}};

// A fake tree of `kind`, its layout discovered and its parents made.
void MakePreparedTree(Kind kind, std::unique_ptr<FakeCgroupTree>* tree, Layout* layout) {
  auto made = FakeCgroupTree::Make(kind);
  ASSERT_TRUE(made.ok()) << made.status();
  *tree = std::move(*made);
  auto discovered = (*tree)->Discover();
  ASSERT_TRUE(discovered.ok()) << discovered.status();
  *layout = std::move(*discovered);
  ASSERT_TRUE(PrepareParents(layout).ok());
}

class BackendTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override { MakePreparedTree(GetParam().kind, &tree_, &layout_); }

  bool v2() const { return GetParam().kind == Kind::kV2; }

  // The group directory (relative) holding `role`'s files on this backend.
  std::string Dir(const SandboxCgroup& cg, const std::string& role) const {
    const auto& dirs = GetParam().group_dirs;
    auto it = dirs.find(v2() ? "all" : role);
    return absl::StrCat(it->second, "/", cg.name());
  }

  std::string File(const SandboxCgroup& cg, const std::string& role,
                   const std::string& file) const {
    auto text = tree_->Read(Dir(cg, role) + "/" + file);
    return text.ok() ? *text : absl::StrCat("<", text.status().message(), ">");
  }

  std::unique_ptr<SandboxCgroup> MustCreate(const Limits& limits) {
    auto cg = SandboxCgroup::Create(layout_, limits);
    EXPECT_TRUE(cg.ok()) << cg.status();
    return cg.ok() ? std::move(*cg) : nullptr;
  }

  std::unique_ptr<FakeCgroupTree> tree_;
  Layout layout_;
};

TEST_P(BackendTest, WritesTheExactLimitFiles) {
  Limits l;
  l.memory_max = 64 * kMiB;
  l.memory_high = 48 * kMiB;
  l.pids_max = 16;
  l.cpus = 0.2;
  l.cpu_weight = 200;
  l.io.push_back(IoLimit{8, 0, 1 * kMiB, 2 * kMiB});
  l.io.push_back(IoLimit{8, 16, std::nullopt, std::nullopt, 100, 50});
  auto cg = MustCreate(l);
  ASSERT_NE(cg, nullptr);
  EXPECT_THAT(cg->notes(), IsEmpty());
  if (v2()) {
    EXPECT_EQ(File(*cg, "memory", "memory.max"), "67108864\n");
    EXPECT_EQ(File(*cg, "memory", "memory.high"), "50331648\n");
    EXPECT_EQ(File(*cg, "memory", "memory.swap.max"), "0\n");
    EXPECT_EQ(File(*cg, "pids", "pids.max"), "16\n");
    EXPECT_EQ(File(*cg, "cpu", "cpu.max"), "20000 100000\n");
    EXPECT_EQ(File(*cg, "cpu", "cpu.weight"), "200\n");
    EXPECT_EQ(File(*cg, "blkio", "io.max"),
              "8:0 rbps=1048576 wbps=2097152\n8:16 riops=100 wiops=50\n");
  } else {
    EXPECT_EQ(File(*cg, "memory", "memory.limit_in_bytes"), "67108864\n");
    EXPECT_EQ(File(*cg, "memory", "memory.memsw.limit_in_bytes"), "67108864\n");
    EXPECT_EQ(File(*cg, "memory", "memory.soft_limit_in_bytes"), "50331648\n");
    EXPECT_EQ(File(*cg, "memory", "memory.swappiness"), "");  // memsw holds swap at 0
    EXPECT_EQ(File(*cg, "pids", "pids.max"), "16\n");
    EXPECT_EQ(File(*cg, "cpu", "cpu.cfs_period_us"), "100000\n");
    EXPECT_EQ(File(*cg, "cpu", "cpu.cfs_quota_us"), "20000\n");
    EXPECT_EQ(File(*cg, "cpu", "cpu.shares"), "2048\n");
    EXPECT_EQ(File(*cg, "blkio", "blkio.throttle.read_bps_device"), "8:0 1048576\n");
    EXPECT_EQ(File(*cg, "blkio", "blkio.throttle.write_bps_device"), "8:0 2097152\n");
    EXPECT_EQ(File(*cg, "blkio", "blkio.throttle.read_iops_device"), "8:16 100\n");
    EXPECT_EQ(File(*cg, "blkio", "blkio.throttle.write_iops_device"), "8:16 50\n");
    // The freezer group exists for Kill even though no limit needs it.
    EXPECT_TRUE(Exists(tree_->Path(Dir(*cg, "freezer"))));
  }
}

TEST_P(BackendTest, RewriteTightensTheLimitsOfExistingGroups) {
  Limits profile;
  profile.memory_max = 256 * kMiB;
  profile.pids_max = 64;
  auto cg = MustCreate(profile);
  ASSERT_NE(cg, nullptr);
  // A request's tighter limits (and a CPU limit the profile had none of),
  // written over the same groups at hand-off.
  Limits request = profile;
  request.memory_max = 64 * kMiB;
  request.pids_max = 8;
  request.cpus = 0.5;
  ASSERT_TRUE(cg->CanRewrite(layout_, request));
  ASSERT_TRUE(cg->Rewrite(layout_, request).ok());
  if (v2()) {
    EXPECT_EQ(File(*cg, "memory", "memory.max"), "67108864\n");
    EXPECT_EQ(File(*cg, "cpu", "cpu.max"), "50000 100000\n");
  } else {
    EXPECT_EQ(File(*cg, "memory", "memory.limit_in_bytes"), "67108864\n");
    EXPECT_EQ(File(*cg, "memory", "memory.memsw.limit_in_bytes"), "67108864\n");
    EXPECT_EQ(File(*cg, "cpu", "cpu.cfs_quota_us"), "50000\n");
  }
  EXPECT_EQ(File(*cg, "pids", "pids.max"), "8\n");
  // What the kernel would refuse is refused before anything is written.
  Limits bad = request;
  bad.memory_max = 1;
  EXPECT_FALSE(cg->Rewrite(layout_, bad).ok());
  EXPECT_EQ(File(*cg, "pids", "pids.max"), "8\n");
}

TEST_P(BackendTest, NamesGroupsAfterOwnerAndSequence) {
  auto a = MustCreate(Limits{});
  auto b = MustCreate(Limits{});
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::string prefix = absl::StrCat("cubicle-", ::getpid(), "-");
  EXPECT_THAT(a->name(), ::testing::StartsWith(prefix));
  EXPECT_NE(a->name(), b->name());
  EXPECT_EQ(a->v2_dir_fd() >= 0, v2());
  // Without limits a group is still made for placement, accounting and kill.
  EXPECT_EQ(a->paths().size(), v2() ? 1u : 4u);  // v1: memory, pids, cpu+cpuacct, freezer
}

TEST_P(BackendTest, RemoveAndDestructorLeaveNoDirectory) {
  std::vector<std::string> paths;
  {
    auto cg = MustCreate(Limits{.memory_max = 32 * kMiB});
    ASSERT_NE(cg, nullptr);
    paths = cg->paths();
    for (const std::string& p : paths) EXPECT_TRUE(Exists(p)) << p;
    ASSERT_TRUE(cg->Remove().ok());
    for (const std::string& p : paths) EXPECT_FALSE(Exists(p)) << p;
    EXPECT_TRUE(cg->Remove().ok());  // idempotent
  }
  {
    auto cg = MustCreate(Limits{.pids_max = 5});
    ASSERT_NE(cg, nullptr);
    paths = cg->paths();
  }  // RAII
  for (const std::string& p : paths) EXPECT_FALSE(Exists(p)) << p;
}

TEST_P(BackendTest, AFailedWriteLeavesNothingBehind) {
  // A kernel without the CPU quota file refuses the limit; nothing stays.
  std::string quota_file = v2() ? "unified/user.slice/cubicle.service/cubicle/cpu.max"
                                : "cpu,cpuacct/cubicle/cpu.cfs_quota_us";
  ASSERT_EQ(::unlink(tree_->Path(quota_file).c_str()), 0);
  auto cg = SandboxCgroup::Create(layout_, Limits{.cpus = 0.5});
  ASSERT_FALSE(cg.ok());
  EXPECT_THAT(cg.status().message(), HasSubstr(v2() ? "/cpu.max, \"50000 100000\"): ENOENT"
                                                    : "/cpu.cfs_quota_us, \"50000\"): ENOENT"));
  for (const auto& [role, dir] : GetParam().group_dirs) {
    EXPECT_THAT(Groups(tree_->Path(dir)), IsEmpty()) << dir;
  }
}

TEST_P(BackendTest, RefusesWhatTheKernelWouldBeforeMakingAnything) {
  auto cg = SandboxCgroup::Create(layout_, Limits{.pids_max = 0});
  ASSERT_FALSE(cg.ok());
  EXPECT_EQ(cg.status().message(), "pids_max: 0 is outside [1, 4194304]");
}

TEST_P(BackendTest, SkipsANameLeftByAnEarlierProcessWithOurPid) {
  auto probe = MustCreate(Limits{});
  ASSERT_NE(probe, nullptr);
  uint64_t seq = 0;
  ASSERT_TRUE(absl::SimpleAtoi(probe->name().substr(probe->name().rfind('-') + 1), &seq));
  ASSERT_TRUE(probe->Remove().ok());
  std::string taken = absl::StrCat("cubicle-", ::getpid(), "-", seq + 1);
  for (const auto& [role, dir] : GetParam().group_dirs) {
    ASSERT_EQ(::mkdir(tree_->Path(dir + "/" + taken).c_str(), 0755), 0);
  }
  auto cg = MustCreate(Limits{});
  ASSERT_NE(cg, nullptr);
  EXPECT_EQ(cg->name(), absl::StrCat("cubicle-", ::getpid(), "-", seq + 2));
  for (const auto& [role, dir] : GetParam().group_dirs) {
    EXPECT_TRUE(Exists(tree_->Path(dir + "/" + taken))) << "the old group is the sweep's to remove";
    ASSERT_EQ(::rmdir(tree_->Path(dir + "/" + taken).c_str()), 0);
  }
}

TEST_P(BackendTest, AttachWritesThePidToEachGroupItNames) {
  WaitingChild child;
  ASSERT_GT(child.pid(), 0);
  auto cg = MustCreate(Limits{.memory_max = 32 * kMiB, .pids_max = 8});
  ASSERT_NE(cg, nullptr);
  pid_t pid = child.pid();
  ASSERT_TRUE(cg->Attach(pid, SandboxCgroup::Placement::kV1Only).ok());
  std::string expected = absl::StrCat(pid, "\n");
  EXPECT_EQ(File(*cg, "memory", "cgroup.procs"), v2() ? "" : expected);  // v2: clone placed it
  ASSERT_TRUE(cg->Attach(pid).ok());
  for (const char* role : {"memory", "pids", "cpu", "freezer"}) {
    EXPECT_EQ(File(*cg, role, "cgroup.procs"), expected) << role;
  }
  // Empty the fake groups again, as the kernel would once the process left,
  // so that Kill and Remove find nothing to kill.
  for (const std::string& p : cg->paths())
    ASSERT_TRUE(tree_->Write(p.substr(tree_->root().size() + 1) + "/cgroup.procs", "").ok());
  EXPECT_TRUE(cg->Kill().ok());
  EXPECT_TRUE(cg->Remove().ok());
}

TEST_P(BackendTest, KillOfAnEmptyGroupUsesTheBackendsMechanism) {
  auto cg = MustCreate(Limits{});
  ASSERT_NE(cg, nullptr);
  ASSERT_TRUE(cg->Kill().ok());
  if (v2()) {
    EXPECT_EQ(File(*cg, "all", "cgroup.kill"), "1\n");
  } else {
    EXPECT_EQ(File(*cg, "freezer", "freezer.state"), "");  // empty: nothing to freeze
  }
}

TEST_P(BackendTest, ReadStatsParsesTheKernelsFormats) {
  auto cg = MustCreate(Limits{.memory_max = 32 * kMiB});
  ASSERT_NE(cg, nullptr);
  if (v2()) {
    ASSERT_TRUE(tree_->Write(Dir(*cg, "") + "/memory.peak", "33554432\n").ok());
    ASSERT_TRUE(tree_
                    ->Write(Dir(*cg, "") + "/memory.events",
                            "low 0\nhigh 0\nmax 17\noom 1\noom_kill 1\noom_group_kill 0\n")
                    .ok());
    ASSERT_TRUE(
        tree_
            ->Write(Dir(*cg, "") + "/cpu.stat",
                    "usage_usec 204331\nuser_usec 200000\nsystem_usec 4331\nnr_periods 20\n")
            .ok());
    ASSERT_TRUE(tree_->Write(Dir(*cg, "") + "/pids.peak", "7\n").ok());
  } else {
    ASSERT_TRUE(tree_->Write(Dir(*cg, "memory") + "/memory.max_usage_in_bytes", "33554432\n").ok());
    ASSERT_TRUE(tree_
                    ->Write(Dir(*cg, "memory") + "/memory.oom_control",
                            "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
                    .ok());
    ASSERT_TRUE(tree_->Write(Dir(*cg, "memory") + "/memory.failcnt", "17\n").ok());
    ASSERT_TRUE(tree_->Write(Dir(*cg, "cpu") + "/cpuacct.usage", "204331000\n").ok());
    ASSERT_TRUE(tree_->Write(Dir(*cg, "pids") + "/pids.peak", "7\n").ok());
  }
  auto stats = cg->ReadStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(*stats, (Stats{33554432, 204331000, 7, 1, 17}));
  EXPECT_TRUE(stats->oom_killed());
}

TEST_P(BackendTest, ReadStatsLeavesOutWhatTheKernelDoesNotOffer) {
  auto cg = MustCreate(Limits{});
  ASSERT_NE(cg, nullptr);
  // Older kernels: no memory.peak (v2 < 5.19), no pids.peak, no oom_kill line (v1 < 4.13).
  std::string peak =
      v2() ? Dir(*cg, "") + "/memory.peak" : Dir(*cg, "memory") + "/memory.max_usage_in_bytes";
  ASSERT_EQ(::unlink(tree_->Path(peak).c_str()), 0);
  ASSERT_EQ(::unlink(tree_->Path(Dir(*cg, "pids") + "/pids.peak").c_str()), 0);
  if (!v2()) {
    ASSERT_TRUE(
        tree_
            ->Write(Dir(*cg, "memory") + "/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\n")
            .ok());
    ASSERT_TRUE(tree_->Write(Dir(*cg, "memory") + "/memory.failcnt", "0\n").ok());
    ASSERT_TRUE(tree_->Write(Dir(*cg, "cpu") + "/cpuacct.usage", "0\n").ok());
  } else {
    ASSERT_TRUE(tree_->Write(Dir(*cg, "") + "/cpu.stat", "usage_usec 0\n").ok());
  }
  auto stats = cg->ReadStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_FALSE(stats->memory_peak_bytes.has_value());
  EXPECT_FALSE(stats->pids_peak.has_value());
  EXPECT_FALSE(stats->oom_kills.has_value());
  EXPECT_EQ(stats->cpu_usage_ns, 0u);
  EXPECT_FALSE(stats->oom_killed());
}

// KeepStatFilesOpen (a pool's sandbox): each file is opened once and read
// again from its start, so a rewritten value (longer or shorter) is read
// whole; the fds are held until Remove, which closes them.
TEST_P(BackendTest, KeptStatFilesAreReadAgainFromTheirStartUntilRemove) {
  // Our fds open on a pids.peak file.
  auto open_fds = [] {
    int n = 0;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
      n += absl::EndsWith(std::filesystem::read_symlink(entry.path(), ec).string(), "/pids.peak") ? 1 : 0;
    }
    return n;
  };
  auto cg = MustCreate(Limits{.memory_max = 32 * kMiB});
  ASSERT_NE(cg, nullptr);
  if (v2()) {
    ASSERT_TRUE(tree_->Write(Dir(*cg, "") + "/memory.peak", "0\n").ok());
    ASSERT_TRUE(tree_->Write(Dir(*cg, "") + "/memory.events", "max 0\noom_kill 0\n").ok());
    ASSERT_TRUE(tree_->Write(Dir(*cg, "") + "/cpu.stat", "usage_usec 0\n").ok());
  } else {
    ASSERT_TRUE(tree_->Write(Dir(*cg, "memory") + "/memory.max_usage_in_bytes", "0\n").ok());
    ASSERT_TRUE(tree_->Write(Dir(*cg, "memory") + "/memory.oom_control", "oom_kill 0\n").ok());
    ASSERT_TRUE(tree_->Write(Dir(*cg, "memory") + "/memory.failcnt", "0\n").ok());
    ASSERT_TRUE(tree_->Write(Dir(*cg, "cpu") + "/cpuacct.usage", "0\n").ok());
  }
  const int before = open_fds();
  cg->KeepStatFilesOpen();
  const std::string peak = Dir(*cg, "pids") + "/pids.peak";
  for (const char* value : {"3", "12345", "7"}) {
    ASSERT_TRUE(tree_->Write(peak, absl::StrCat(value, "\n")).ok());
    auto stats = cg->ReadStats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    uint64_t expected = 0;
    ASSERT_TRUE(absl::SimpleAtoi(value, &expected));
    EXPECT_EQ(stats->pids_peak, expected) << "after writing " << value;
  }
  EXPECT_EQ(open_fds(), before + 1) << "pids.peak is not kept open, once";
  ASSERT_TRUE(cg->Remove().ok());
  EXPECT_EQ(open_fds(), before) << "Remove left stat files open";
}

TEST_P(BackendTest, ReadStatsNamesAFileItCannotParse) {
  auto cg = MustCreate(Limits{});
  ASSERT_NE(cg, nullptr);
  std::string file = v2() ? "/cpu.stat" : "/cpuacct.usage";
  ASSERT_TRUE(tree_->Write(Dir(*cg, "cpu") + file, v2() ? "usage_usec lots\n" : "lots\n").ok());
  if (v2()) {
    ASSERT_TRUE(tree_->Write(Dir(*cg, "") + "/memory.peak", "1\n").ok());
  } else {
    ASSERT_TRUE(tree_->Write(Dir(*cg, "memory") + "/memory.max_usage_in_bytes", "1\n").ok());
    ASSERT_TRUE(tree_->Write(Dir(*cg, "memory") + "/memory.failcnt", "0\n").ok());
  }
  auto stats = cg->ReadStats();
  ASSERT_FALSE(stats.ok());
  EXPECT_THAT(stats.status().message(), HasSubstr(cg->name() + file + ": "));
  EXPECT_THAT(stats.status().message(), HasSubstr("not a number: 'lots'"));
}

TEST_P(BackendTest, OomEventFdSignalsOnTheKernelsEvent) {
  auto cg = MustCreate(Limits{.memory_max = 32 * kMiB});
  ASSERT_NE(cg, nullptr);
  auto fd = cg->OomEventFd();
  ASSERT_TRUE(fd.ok()) << fd.status();
  pollfd p{fd->get(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "readable before any event";
  if (v2()) {
    // The kernel's "file modified" event on memory.events, as inotify sees it.
    ASSERT_TRUE(tree_->Write(Dir(*cg, "") + "/memory.events", "oom 1\noom_kill 1\n").ok());
    EXPECT_EQ(::poll(&p, 1, 1000), 1);
  } else {
    // The registration: "<eventfd> <fd of memory.oom_control>".
    std::string reg = File(*cg, "memory", "cgroup.event_control");
    EXPECT_THAT(reg, ::testing::StartsWith(absl::StrCat(fd->get(), " ")));
    EXPECT_THAT(reg, ::testing::EndsWith("\n"));
  }
}

TEST_P(BackendTest, ARootlessSweepLeavesAnotherUsersGroupsAlone) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a group another user cannot remove";
  pid_t dead = ::fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  const std::string stale = absl::StrCat("cubicle-", dead, "-7");
  for (const auto& [role, dir] : GetParam().group_dirs) {
    ASSERT_TRUE(cgroupfs::MakeGroupDir(tree_->Path(dir + "/" + stale), /*emulated=*/true).ok());
  }
  // The tree readable by anyone, as /sys/fs/cgroup is.
  ASSERT_EQ(std::system(absl::StrCat("chmod -R a+rX '", tree_->root(), "'").c_str()), 0);
  // A rootless cubicle's sweep: root's stale group is neither removed nor
  // an error.
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setresgid(4242, 4242, 4242) != 0 || ::setresuid(4242, 4242, 4242) != 0) ::_exit(2);
    absl::StatusOr<SweepReport> report = SweepStale(layout_);
    if (!report.ok()) ::_exit(3);
    ::_exit(report->removed.empty() && report->failed.empty() ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: the sweep failed; 4: it touched or reported root's group";
  for (const auto& [role, dir] : GetParam().group_dirs) EXPECT_TRUE(Exists(tree_->Path(dir + "/" + stale)));
  // Root's own sweep removes it.
  absl::StatusOr<SweepReport> report = SweepStale(layout_);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(report->removed, ::testing::ElementsAre(stale));
}

TEST_P(BackendTest, SweepRemovesGroupsOfDeadOrReplacedOwnersOnly) {
  pid_t dead = ::fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  auto live = MustCreate(Limits{});
  ASSERT_NE(live, nullptr);
  std::string stale = absl::StrCat("cubicle-", dead, "-3");
  // Our pid, but made long before this process started: an earlier owner's.
  std::string reused = absl::StrCat("cubicle-", ::getpid(), "-999999");
  for (const auto& [role, dir] : GetParam().group_dirs) {
    for (const std::string& name : {stale, reused}) {
      ASSERT_TRUE(cgroupfs::MakeGroupDir(tree_->Path(dir + "/" + name), /*emulated=*/true).ok());
    }
    ASSERT_EQ(::mkdir(tree_->Path(dir + "/not-a-sandbox").c_str(), 0755), 0);
    timespec long_ago[2] = {{1000, 0}, {1000, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, tree_->Path(dir + "/" + reused).c_str(), long_ago, 0), 0);
  }
  auto report = SweepStale(layout_);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(report->removed, ::testing::UnorderedElementsAre(stale, reused));
  EXPECT_THAT(report->failed, IsEmpty());
  for (const auto& [role, dir] : GetParam().group_dirs) {
    EXPECT_FALSE(Exists(tree_->Path(dir + "/" + stale)));
    EXPECT_FALSE(Exists(tree_->Path(dir + "/" + reused)));
    EXPECT_TRUE(Exists(tree_->Path(dir + "/not-a-sandbox")));
  }
  for (const std::string& p : live->paths()) EXPECT_TRUE(Exists(p)) << "a live owner's group stays";
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendTest, ::testing::Values(kV2, kV1),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return info.param.label;
                         });

// Cases that exist on one backend only.

TEST(V1Backend, WithoutSwapAccountingSetsSwappinessAndSaysSo) {
  auto tree = FakeCgroupTree::Make(Kind::kV1);
  ASSERT_TRUE(tree.ok());
  auto layout = (*tree)->Discover();
  ASSERT_TRUE(layout.ok());
  layout->v1_swap_accounting = false;
  ASSERT_TRUE(PrepareParents(&*layout).ok());
  auto cg = SandboxCgroup::Create(*layout, Limits{.memory_max = 64 * kMiB});
  ASSERT_TRUE(cg.ok()) << cg.status();
  std::string dir = "memory/process_api/abc/cubicle/" + (*cg)->name();
  EXPECT_EQ(*(*tree)->Read(dir + "/memory.limit_in_bytes"), "67108864\n");
  EXPECT_EQ(*(*tree)->Read(dir + "/memory.memsw.limit_in_bytes"), "");
  EXPECT_EQ(*(*tree)->Read(dir + "/memory.swappiness"), "0\n");
  ASSERT_EQ((*cg)->notes().size(), 1u);
  EXPECT_THAT((*cg)->notes()[0], HasSubstr("swap is not strictly held at 0"));
}

TEST(V2Backend, WithoutSwapFilesTheLimitStillAppliesAndANoteSaysSo) {
  auto tree = FakeCgroupTree::Make(Kind::kV2);
  ASSERT_TRUE(tree.ok());
  auto layout = (*tree)->Discover();
  ASSERT_TRUE(layout.ok());
  ASSERT_TRUE(PrepareParents(&*layout).ok());
  ASSERT_EQ(
      ::unlink((*tree)->Path("unified/user.slice/cubicle.service/cubicle/memory.swap.max").c_str()),
      0);
  auto cg = SandboxCgroup::Create(*layout, Limits{.memory_max = 64 * kMiB});
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_EQ(
      *(*tree)->Read("unified/user.slice/cubicle.service/cubicle/" + (*cg)->name() + "/memory.max"),
      "67108864\n");
  ASSERT_EQ((*cg)->notes().size(), 1u);
  EXPECT_THAT((*cg)->notes()[0], HasSubstr("memory.swap.max is missing"));
}

class HybridBackend : public ::testing::Test {
 protected:
  void SetUp() override { MakePreparedTree(Kind::kHybrid, &tree_, &layout_); }
  std::unique_ptr<FakeCgroupTree> tree_;
  Layout layout_;
};

TEST_F(HybridBackend, PlacesOnV2AndLimitsOnV1) {
  auto cg = SandboxCgroup::Create(layout_, Limits{.memory_max = 64 * kMiB, .pids_max = 16});
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_GE((*cg)->v2_dir_fd(), 0);
  EXPECT_EQ(
      *tree_->Read("memory/process_api/abc/cubicle/" + (*cg)->name() + "/memory.limit_in_bytes"),
      "67108864\n");
  EXPECT_EQ(*tree_->Read("pids/cubicle/" + (*cg)->name() + "/pids.max"), "16\n");
  WaitingChild child;
  ASSERT_GT(child.pid(), 0);
  ASSERT_TRUE((*cg)->Attach(child.pid(), SandboxCgroup::Placement::kV1Only).ok());
  EXPECT_EQ(*tree_->Read("unified/cubicle/" + (*cg)->name() + "/cgroup.procs"), "");
  EXPECT_EQ(*tree_->Read("pids/cubicle/" + (*cg)->name() + "/cgroup.procs"),
            absl::StrCat(child.pid(), "\n"));
  for (const std::string& p : (*cg)->paths()) {
    ASSERT_TRUE(tree_->Write(p.substr(tree_->root().size() + 1) + "/cgroup.procs", "").ok());
  }
}

// A hybrid host whose unified group gives CPU time and the kill makes no
// v1 freezer group; one an older cubicle left there is still swept.
TEST_F(HybridBackend, NoFreezerGroupIsMadeButAStaleOneIsSwept) {
  auto cg = SandboxCgroup::Create(layout_, Limits{.memory_max = 64 * kMiB});
  ASSERT_TRUE(cg.ok()) << cg.status();
  for (const std::string& p : (*cg)->paths()) EXPECT_THAT(p, Not(HasSubstr("/freezer/"))) << p;
  ASSERT_TRUE((*cg)->Remove().ok());
  pid_t dead = ::fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  const std::string stale = absl::StrCat("cubicle-", dead, "-1");
  ASSERT_TRUE(cgroupfs::MakeGroupDir(tree_->Path("freezer/cubicle/" + stale), /*emulated=*/true).ok());
  auto report = SweepStale(layout_);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(report->removed, ::testing::ElementsAre(stale));
  EXPECT_FALSE(Exists(tree_->Path("freezer/cubicle/" + stale)));
}

TEST(Stats, KeyedAndSingleValues) {
  EXPECT_EQ(*KeyedValue("low 0\nhigh 3\nmax 5\n", "max"), 5u);
  EXPECT_EQ(*KeyedValue("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", "oom_kill"), 2u);
  EXPECT_TRUE(absl::IsNotFound(KeyedValue("oom 1\n", "oom_kill").status()));
  EXPECT_FALSE(KeyedValue("max lots\n", "max").ok());
  EXPECT_EQ(*SingleValue("4096\n"), 4096u);
  EXPECT_FALSE(SingleValue("max\n").ok());
}

}  // namespace
}  // namespace cubicle::cgroups
