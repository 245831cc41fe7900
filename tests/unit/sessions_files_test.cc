// sessions/workspace_files.h: the files API over a workspace a hostile
// payload has filled with symlinks, FIFOs, sparse files and deep trees.
// Each refusal is checked for its error and for what it left: nothing in
// the workspace, nothing outside it. Mutating calls aimed out of the
// workspace are aimed at a decoy beside it, never at a real host file.
#include "sessions/workspace_files.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "base/unique_fd.h"
#include "gtest/gtest.h"
#include "sessions/digest.h"
#include "sessions/paths.h"

namespace cubicle::sessions {
namespace {

namespace fs = std::filesystem;

// The status has `want_code` and its message holds `needle`.
#define EXPECT_STATUS(expr, want_code, needle)                                                     \
  do {                                                                                             \
    const absl::Status _st = (expr);                                                               \
    EXPECT_EQ(_st.code(), absl::StatusCode::want_code) << _st;                                     \
    EXPECT_TRUE(absl::StrContains(_st.message(), needle)) << _st << " lacks '" << (needle) << "'"; \
  } while (0)

void WriteHostFile(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
}

std::string ReadHostFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every name under `dir`, recursively, symlinks not followed: what a
// refused call must leave exactly as it was.
std::set<std::string> Tree(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    names.insert(fs::relative(entry.path(), dir).string());
  }
  return names;
}

bool HasTempName(const std::string& dir) {
  for (const std::string& name : Tree(dir)) {
    if (absl::StrContains(name, ".cubicle-put-")) return true;
  }
  return false;
}

class WorkspaceFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cubicle-files-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ws_ = dir_ + "/ws";
    outside_ = dir_ + "/outside";
    ASSERT_EQ(::mkdir(ws_.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(outside_.c_str(), 0755), 0);
    WriteHostFile(outside_ + "/secret", "host secret");
    OpenRoot(ws_);
  }
  void TearDown() override {
    root_.reset();
    std::string cmd = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  void OpenRoot(const std::string& path) {
    root_.reset(::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(root_.valid());
  }
  std::string Ws(const std::string& rel) const { return ws_ + "/" + rel; }
  void MakeDirs(const std::string& rel) { fs::create_directories(Ws(rel)); }
  void Symlink(const std::string& target, const std::string& rel) {
    ASSERT_EQ(::symlink(target.c_str(), Ws(rel).c_str()), 0) << rel;
  }
  void Fifo(const std::string& rel) { ASSERT_EQ(::mkfifo(Ws(rel).c_str(), 0644), 0) << rel; }
  void Sparse(const std::string& rel, off_t size) {
    UniqueFd fd(::open(Ws(rel).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::ftruncate(fd.get(), size), 0);
  }
  WorkspaceFiles Files(Owner owner = {}) { return WorkspaceFiles(root_.get(), owner); }

  std::string dir_, ws_, outside_;
  UniqueFd root_;
};

// ---- Put and Get ---------------------------------------------------------

TEST_F(WorkspaceFilesTest, PutThenGetRoundTripsMakingParentsForTheOwner) {
  const bool root = ::geteuid() == 0;
  const Owner owner = root ? Owner{1234, 5678} : Owner{};
  WorkspaceFiles files = Files(owner);
  ASSERT_TRUE(files.Put("a/b/c.txt", "hello", {.mode = 0640}).ok());

  auto data = files.Get("a/b/c.txt", 100);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, "hello");
  struct stat st;
  ASSERT_EQ(::stat(Ws("a/b/c.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u) << "the umask must not apply";
  EXPECT_FALSE(HasTempName(ws_));
  if (!root) GTEST_SKIP() << "not root: ownership by another uid cannot be given or checked";
  for (const char* rel : {"a", "a/b", "a/b/c.txt"}) {
    ASSERT_EQ(::stat(Ws(rel).c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 1234u) << rel;
    EXPECT_EQ(st.st_gid, 5678u) << rel;
  }
}

TEST_F(WorkspaceFilesTest, PutReplacesAtomicallyOrRefusesWithoutTouchingTheOld) {
  WorkspaceFiles files = Files();
  ASSERT_TRUE(files.Put("f", "old").ok());
  EXPECT_STATUS(files.Put("f", "new", {.overwrite = false}), kAlreadyExists, "f exists");
  EXPECT_EQ(ReadHostFile(Ws("f")), "old");
  ASSERT_TRUE(files.Put("f", "new").ok());
  EXPECT_EQ(ReadHostFile(Ws("f")), "new");
  EXPECT_EQ(Tree(ws_), (std::set<std::string>{"f"}));
}

TEST_F(WorkspaceFilesTest, PutRefusalsLeaveNothing) {
  WorkspaceFiles files = Files();
  MakeDirs("dir/inside");
  const std::set<std::string> before = Tree(ws_);
  EXPECT_STATUS(files.Put("new/deep/f", std::string(100, 'x'), {.max_bytes = 10}), kResourceExhausted,
                "over the limit of 10 bytes");
  EXPECT_STATUS(files.Put("dir", "x"), kFailedPrecondition, "dir is a directory");
  EXPECT_STATUS(files.Put("missing/f", "x", {.make_parents = false}), kNotFound, "missing");
  EXPECT_STATUS(files.Put("f", "x", {.mode = 04755}), kInvalidArgument, "04755");
  EXPECT_EQ(Tree(ws_), before);
}

TEST_F(WorkspaceFilesTest, GetRefusesWhatIsNotARegularFileWithoutBlocking) {
  WorkspaceFiles files = Files();
  Fifo("pipe");
  MakeDirs("dir");
  // A FIFO with no writer: opened blocking, this would never return.
  EXPECT_STATUS(files.Get("pipe", 100).status(), kFailedPrecondition, "pipe is a FIFO, not a regular file");
  EXPECT_STATUS(files.Get("dir", 100).status(), kFailedPrecondition, "dir is a directory");
  EXPECT_STATUS(files.Get("absent", 100).status(), kNotFound, "absent");
}

// Whether a read of `path` is visible in its atime (relatime updates it
// when it is older than the mtime); false on a noatime mount.
bool SetAtimeOld(const std::string& path) {
  const struct timespec times[2] = {{1, 0}, {0, UTIME_NOW}};
  return ::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0;
}
time_t Atime(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_atim.tv_sec : -1;
}

TEST_F(WorkspaceFilesTest, ASparseTebibyteFileIsRefusedBeforeAByteIsRead) {
  WorkspaceFiles files = Files();
  Sparse("huge", off_t{1} << 40);
  EXPECT_STATUS(files.Get("huge", 1 << 20).status(), kResourceExhausted,
                "huge is 1099511627776 bytes, over the limit of 1048576 bytes");
  EXPECT_STATUS(files.Stat("huge", /*with_sha256=*/true).status(), kResourceExhausted, "1099511627776");

  // Proof that nothing was read: a read would have moved the atime.
  WriteHostFile(Ws("control"), "x");
  ASSERT_TRUE(SetAtimeOld(Ws("control")) && SetAtimeOld(Ws("huge")));
  ASSERT_TRUE(files.Get("control", 10).ok());
  if (Atime(Ws("control")) == 1) GTEST_SKIP() << "this mount does not record reads in atime (noatime)";
  EXPECT_FALSE(files.Get("huge", 1 << 20).ok());
  EXPECT_EQ(Atime(Ws("huge")), 1);
}

// ---- Paths that try to leave the workspace --------------------------------

TEST_F(WorkspaceFilesTest, EveryMethodRefusesPathsOutOfTheWorkspace) {
  WorkspaceFiles files = Files();
  Symlink("/etc", "etc-link");
  Symlink(outside_, "out-link");
  const std::set<std::string> before = Tree(ws_);
  for (const char* bad : {"../outside/secret", "/etc/passwd", "a/../../outside/secret", "etc-link/passwd",
                          "out-link/secret", "out-link/new/f"}) {
    EXPECT_FALSE(files.Put(bad, "pwned").ok()) << bad;
    EXPECT_FALSE(files.Get(bad, 1 << 20).ok()) << bad;
    EXPECT_FALSE(files.Stat(bad).ok()) << bad;
    EXPECT_FALSE(files.List(bad, true, 100).ok()) << bad;
    EXPECT_FALSE(files.Delete(bad, true).ok()) << bad;
  }
  EXPECT_FALSE(files.List("out-link", true, 100).ok()) << "a symlinked directory must not be listed through";
  EXPECT_FALSE(files.Delete("out-link/secret", false).ok());
  EXPECT_EQ(Tree(ws_), before);
  EXPECT_EQ(Tree(outside_), (std::set<std::string>{"secret"}));
  EXPECT_EQ(ReadHostFile(outside_ + "/secret"), "host secret");
}

TEST_F(WorkspaceFilesTest, ASymlinkAsTheLastComponentIsNeverFollowed) {
  WorkspaceFiles files = Files();
  Symlink("/etc/shadow", "shadow");
  Symlink(outside_ + "/secret", "decoy");

  auto got = files.Get("shadow", 1 << 20);
  EXPECT_FALSE(got.ok());
  EXPECT_TRUE(absl::StrContains(got.status().message(), "shadow")) << got.status();
  auto info = files.Stat("shadow", /*with_sha256=*/true);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->type, FileInfo::Type::kSymlink);
  EXPECT_EQ(info->size, std::string("/etc/shadow").size());
  EXPECT_EQ(info->sha256, "");

  // Put replaces the link itself; its target is untouched.
  ASSERT_TRUE(files.Put("decoy", "mine").ok());
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(Ws("decoy"))));
  EXPECT_EQ(ReadHostFile(Ws("decoy")), "mine");
  EXPECT_EQ(ReadHostFile(outside_ + "/secret"), "host secret");

  // Delete removes only the link.
  Symlink(outside_ + "/secret", "decoy2");
  ASSERT_TRUE(files.Delete("decoy2", false).ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(Ws("decoy2"))));
  EXPECT_EQ(ReadHostFile(outside_ + "/secret"), "host secret");
}

// ---- Stat and List ----------------------------------------------------------

TEST_F(WorkspaceFilesTest, StatReportsTheEntryAndItsDigestWhenAsked) {
  WorkspaceFiles files = Files();
  ASSERT_TRUE(files.Put("d/f", "abc", {.mode = 0600}).ok());
  auto info = files.Stat("d/f", /*with_sha256=*/true);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->path, "d/f");
  EXPECT_EQ(info->type, FileInfo::Type::kFile);
  EXPECT_EQ(info->size, 3u);
  EXPECT_EQ(info->mode, 0600u);
  EXPECT_GT(info->mtime_ns, 0);
  EXPECT_EQ(info->sha256, Sha256Hex("abc"));
  auto plain = files.Stat("d/f");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->sha256, "");
  auto dir = files.Stat("d");
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->type, FileInfo::Type::kDirectory);
  EXPECT_STATUS(files.Stat("d/absent").status(), kNotFound, "d/absent does not exist");
}

TEST_F(WorkspaceFilesTest, ListIsSortedReportsLinksAndIsBounded) {
  WorkspaceFiles files = Files();
  MakeDirs("b/sub");
  WriteHostFile(Ws("c"), "1");
  WriteHostFile(Ws("b/sub/x"), "22");
  Symlink("/etc", "a-link");
  Fifo("b/pipe");

  auto top = files.List("", false, 100);
  ASSERT_TRUE(top.ok()) << top.status();
  std::vector<std::string> paths;
  for (const FileInfo& info : *top) paths.push_back(info.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"a-link", "b", "c"}));
  EXPECT_EQ((*top)[0].type, FileInfo::Type::kSymlink);

  auto all = files.List("b", true, 100);
  ASSERT_TRUE(all.ok()) << all.status();
  paths.clear();
  for (const FileInfo& info : *all) paths.push_back(info.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"b/pipe", "b/sub", "b/sub/x"}));
  EXPECT_EQ((*all)[0].type, FileInfo::Type::kOther);
  EXPECT_EQ((*all)[2].size, 2u);

  EXPECT_STATUS(files.List("", true, 4).status(), kResourceExhausted, "more than 4 entries");
  EXPECT_STATUS(files.List("c", false, 100).status(), kFailedPrecondition, "c is a regular file, not a directory");
  EXPECT_STATUS(files.List("absent", false, 100).status(), kNotFound, "absent");
}

TEST_F(WorkspaceFilesTest, ListRefusesATreeDeeperThanAnyPathCanName) {
  WorkspaceFiles files = Files();
  std::string deep = "d";
  for (size_t i = 1; i <= kMaxPathDepth; ++i) deep += "/d";
  MakeDirs(deep);
  EXPECT_STATUS(files.List("", true, 1000).status(), kResourceExhausted, "deeper than");
  EXPECT_TRUE(files.List("", false, 1000).ok());
}

// ---- Delete ---------------------------------------------------------------

TEST_F(WorkspaceFilesTest, DeleteRemovesTreesThroughFdsAndNeverTheRoot) {
  WorkspaceFiles files = Files();
  MakeDirs("tree/a/b");
  WriteHostFile(Ws("tree/a/b/f"), "x");
  Symlink(outside_, "tree/a/out");
  Fifo("tree/pipe");

  EXPECT_STATUS(files.Delete("tree", false), kFailedPrecondition, "tree is a directory");
  EXPECT_TRUE(fs::exists(Ws("tree/a/b/f")));
  ASSERT_TRUE(files.Delete("tree", true).ok());
  EXPECT_TRUE(Tree(ws_).empty());
  EXPECT_EQ(Tree(outside_), (std::set<std::string>{"secret"})) << "the link's target directory was entered";

  EXPECT_STATUS(files.Delete("", true), kInvalidArgument, "workspace root");
  EXPECT_STATUS(files.Delete("absent", true), kNotFound, "absent does not exist");
  EXPECT_TRUE(fs::is_directory(ws_));
}

TEST_F(WorkspaceFilesTest, DeleteStopsAtATreeDeeperThanItsBound) {
  WorkspaceFiles files = Files();
  std::string deep = "deep";
  for (size_t i = 0; i < kMaxDeleteDepth; ++i) deep += "/d";
  MakeDirs(deep);
  EXPECT_STATUS(files.Delete("deep", true), kResourceExhausted, "deeper than");
  EXPECT_TRUE(fs::is_directory(Ws("deep")));
}

// ---- Outputs ----------------------------------------------------------------

TEST_F(WorkspaceFilesTest, CollectOutputsReportsOnlyNewAndChangedFiles) {
  MakeDirs("outputs/sub");
  WriteHostFile(Ws("outputs/keep"), "same");
  WriteHostFile(Ws("outputs/change"), "v1");
  auto before = SnapshotTree(root_.get(), "outputs", 100);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->files.size(), 2u);

  WriteHostFile(Ws("outputs/change"), "version 2");
  WriteHostFile(Ws("outputs/sub/new"), "fresh");
  auto out = CollectOutputs(root_.get(), "outputs", *before, {});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->files.size(), 2u);
  EXPECT_EQ(out->files[0].path, "outputs/change");
  EXPECT_EQ(out->files[0].sha256, Sha256Hex("version 2"));
  EXPECT_EQ(out->files[0].size, 9u);
  EXPECT_EQ(out->files[1].path, "outputs/sub/new");
  EXPECT_EQ(out->files[1].sha256, Sha256Hex("fresh"));
  EXPECT_TRUE(out->refused.empty());
}

TEST_F(WorkspaceFilesTest, AMissingOutputsDirectoryIsEmpty) {
  auto before = SnapshotTree(root_.get(), "outputs", 100);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_TRUE(before->files.empty());
  auto out = CollectOutputs(root_.get(), "outputs", *before, {});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->files.empty());
  EXPECT_TRUE(out->refused.empty());
}

TEST_F(WorkspaceFilesTest, CollectOutputsRefusesLinksFifosAndSparseGiantsWithoutOpeningThem) {
  MakeDirs("outputs");
  Symlink("/etc/shadow", "outputs/shadow");
  Fifo("outputs/pipe");
  Sparse("outputs/huge", off_t{1} << 40);
  ASSERT_TRUE(SetAtimeOld(Ws("outputs/huge")));
  WriteHostFile(Ws("outputs/ok"), "fine");
  auto out = CollectOutputs(root_.get(), "outputs", {}, {});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->files.size(), 1u);
  EXPECT_EQ(out->files[0].path, "outputs/ok");
  ASSERT_EQ(out->refused.size(), 3u);
  EXPECT_EQ(out->refused[0].first, "outputs/huge");
  EXPECT_TRUE(absl::StrContains(out->refused[0].second, "over the per-file limit")) << out->refused[0].second;
  EXPECT_EQ(out->refused[1].first, "outputs/pipe");
  EXPECT_TRUE(absl::StrContains(out->refused[1].second, "a FIFO, not a regular file"));
  EXPECT_EQ(out->refused[2].first, "outputs/shadow");
  EXPECT_TRUE(absl::StrContains(out->refused[2].second, "a symlink, not a regular file"));
  EXPECT_EQ(Atime(Ws("outputs/huge")), 1) << "the sparse file was read";
}

TEST_F(WorkspaceFilesTest, CollectOutputsRefusesAnOutputsDirectoryThatIsALink) {
  Symlink(outside_, "outputs");
  auto out = CollectOutputs(root_.get(), "outputs", {}, {});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->files.empty());
  ASSERT_EQ(out->refused.size(), 1u);
  EXPECT_TRUE(absl::StrContains(out->refused[0].second, "a symlink, not a directory"));
}

TEST_F(WorkspaceFilesTest, OnceTheCountOrTotalIsReachedEveryLaterFileIsRefused) {
  MakeDirs("outputs");
  for (const char* name : {"a", "b", "c"}) WriteHostFile(Ws(std::string("outputs/") + name), "0123456789");
  WriteHostFile(Ws("outputs/d"), "1");

  auto by_count = CollectOutputs(root_.get(), "outputs", {}, {.max_files = 2});
  ASSERT_TRUE(by_count.ok()) << by_count.status();
  ASSERT_EQ(by_count->files.size(), 2u);
  EXPECT_EQ(by_count->files[1].path, "outputs/b");
  ASSERT_EQ(by_count->refused.size(), 2u);
  EXPECT_EQ(by_count->refused[0], std::make_pair(std::string("outputs/c"), std::string("over the limit of 2 files")));
  EXPECT_EQ(by_count->refused[1].first, "outputs/d");

  // "d" alone would fit the total; after "b" overflowed, it is refused too.
  auto by_total = CollectOutputs(root_.get(), "outputs", {}, {.max_total_bytes = 15});
  ASSERT_TRUE(by_total.ok()) << by_total.status();
  ASSERT_EQ(by_total->files.size(), 1u);
  EXPECT_EQ(by_total->files[0].path, "outputs/a");
  ASSERT_EQ(by_total->refused.size(), 3u);
  for (const auto& [path, why] : by_total->refused) EXPECT_EQ(why, "over the limit of 15 bytes in all") << path;

  auto by_file = CollectOutputs(root_.get(), "outputs", {}, {.max_file_bytes = 5});
  ASSERT_TRUE(by_file.ok()) << by_file.status();
  ASSERT_EQ(by_file->files.size(), 1u);
  EXPECT_EQ(by_file->files[0].path, "outputs/d");
  EXPECT_EQ(by_file->refused.size(), 3u);

  EXPECT_STATUS(SnapshotTree(root_.get(), "outputs", 3).status(), kResourceExhausted, "more than 3 entries");
  EXPECT_STATUS(CollectOutputs(root_.get(), "outputs", {}, {.max_entries = 3}).status(), kResourceExhausted,
                "more than 3 entries");
}

TEST_F(WorkspaceFilesTest, CollectOutputsRefusesATreeTooDeepToName) {
  std::string deep = "outputs";
  for (size_t i = 1; i < kMaxPathDepth; ++i) deep += "/d";
  MakeDirs(deep);
  WriteHostFile(Ws(deep + "/beyond"), "x");
  WriteHostFile(Ws("outputs/ok"), "fine");
  auto out = CollectOutputs(root_.get(), "outputs", {}, {.max_entries = 100});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->files.size(), 1u);
  EXPECT_EQ(out->files[0].path, "outputs/ok");
  ASSERT_EQ(out->refused.size(), 1u);
  EXPECT_EQ(out->refused[0].first, deep);
  EXPECT_TRUE(absl::StrContains(out->refused[0].second, "deeper than")) << out->refused[0].second;
}

// ---- A full workspace (a real size-capped tmpfs) ---------------------------

class FullWorkspaceTest : public WorkspaceFilesTest {
 protected:
  void SetUp() override {
    WorkspaceFilesTest::SetUp();
    if (::geteuid() != 0) GTEST_SKIP() << "not root: cannot mount a size-capped tmpfs";
    mnt_ = dir_ + "/tmpfs";
    ASSERT_EQ(::mkdir(mnt_.c_str(), 0755), 0);
    if (::mount("tmpfs", mnt_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755") != 0) {
      GTEST_SKIP() << "mount(tmpfs) failed here (" << ::strerror(errno) << "); needs CAP_SYS_ADMIN";
    }
    mounted_ = true;
    OpenRoot(mnt_);
  }
  void TearDown() override {
    root_.reset();
    if (mounted_) {
      EXPECT_EQ(::umount2(mnt_.c_str(), MNT_DETACH), 0) << ::strerror(errno);
    }
    WorkspaceFilesTest::TearDown();
  }
  uint64_t FreeBlocks() const {
    struct statvfs vfs;
    return ::statvfs(mnt_.c_str(), &vfs) == 0 ? vfs.f_bfree : 0;
  }
  std::string mnt_;
  bool mounted_ = false;
};

TEST_F(FullWorkspaceTest, AFullWorkspaceIsResourceExhaustedAndLeavesNoTemporary) {
  WorkspaceFiles files(root_.get(), {});
  ASSERT_TRUE(files.Put("old", "kept").ok());
  const uint64_t free_before = FreeBlocks();
  EXPECT_STATUS(files.Put("sub/big", std::string(1 << 20, 'x'), {.max_bytes = 2 << 20}), kResourceExhausted,
                "workspace is full");
  EXPECT_STATUS(files.Put("old", std::string(1 << 20, 'y'), {.max_bytes = 2 << 20}), kResourceExhausted,
                "workspace is full");
  EXPECT_EQ(Tree(mnt_), (std::set<std::string>{"old"}));
  EXPECT_EQ(ReadHostFile(mnt_ + "/old"), "kept");
  EXPECT_EQ(FreeBlocks(), free_before) << "the unnamed file's blocks were not freed";
  EXPECT_TRUE(files.Put("sub/small", "fits").ok());
}

}  // namespace
}  // namespace cubicle::sessions
