// sessions/archive.h: a workspace survives a round trip as files,
// directories and inert symlinks; caps refuse before anything is written;
// a tampered archive is refused, naming the entry, and never writes
// outside the target root; the local store replaces archives atomically.
#include "sessions/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sessions/paths.h"

namespace cubicle::sessions {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteAll(const std::string& path, const std::string& data, mode_t mode = 0644) {
  {
    std::ofstream out(path, std::ios::binary);
    out << data;
  }
  ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// The names directly in `dir`.
std::set<std::string> Names(const std::string& dir) {
  std::set<std::string> names;
  std::string cmd = "ls -A '" + dir + "'";
  FILE* p = ::popen(cmd.c_str(), "r");
  char line[4096];
  while (p != nullptr && ::fgets(line, sizeof(line), p) != nullptr) {
    std::string name(line);
    if (!name.empty() && name.back() == '\n') name.pop_back();
    names.insert(name);
  }
  if (p != nullptr) ::pclose(p);
  return names;
}

// An entry of a hand-made archive, as a tampering attacker would write it.
struct CraftedEntry {
  std::string name;
  unsigned type = AE_IFREG;
  std::string data;
  std::string symlink;
  std::string hardlink;
  int perm = 0644;
  int64_t declared_size = -1;  // -1: data.size()
};

void Craft(const std::string& path, const std::vector<CraftedEntry>& entries) {
  struct archive* a = archive_write_new();
  ASSERT_EQ(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
  ASSERT_EQ(archive_write_add_filter_zstd(a), ARCHIVE_OK);
  ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK) << archive_error_string(a);
  for (const CraftedEntry& c : entries) {
    struct archive_entry* e = archive_entry_new();
    archive_entry_copy_pathname(e, c.name.c_str());
    archive_entry_set_filetype(e, c.type);
    archive_entry_set_perm(e, c.perm);
    archive_entry_set_size(e, c.declared_size >= 0 ? c.declared_size : static_cast<int64_t>(c.data.size()));
    if (!c.symlink.empty()) archive_entry_copy_symlink(e, c.symlink.c_str());
    if (!c.hardlink.empty()) archive_entry_copy_hardlink(e, c.hardlink.c_str());
    EXPECT_GE(archive_write_header(a, e), ARCHIVE_WARN) << c.name << ": " << archive_error_string(a);
    if (!c.data.empty()) archive_write_data(a, c.data.data(), c.data.size());
    archive_entry_free(e);
  }
  ASSERT_EQ(archive_write_close(a), ARCHIVE_OK) << archive_error_string(a);
  archive_write_free(a);
}

class ArchiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cubicle-archive-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    src_ = dir_ + "/src";
    dst_ = dir_ + "/dst";
    archive_ = dir_ + "/ws.tar.zst";
    ASSERT_EQ(::mkdir(src_.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(dst_.c_str(), 0755), 0);
  }
  void TearDown() override {
    std::string cmd = "chmod -R u+rwX '" + dir_ + "' && rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }

  UniqueFd OpenDir(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    EXPECT_TRUE(fd.valid()) << path;
    return fd;
  }

  absl::StatusOr<ArchiveStats> Archive(const ArchiveOptions& options = {}) {
    UniqueFd out(::open(archive_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    EXPECT_TRUE(out.valid());
    return WriteArchive(OpenDir(src_).get(), out.get(), options);
  }

  absl::StatusOr<ArchiveStats> Extract(const ExtractOptions& options = {}) {
    UniqueFd in(::open(archive_.c_str(), O_RDONLY | O_CLOEXEC));
    EXPECT_TRUE(in.valid());
    return ExtractArchive(in.get(), OpenDir(dst_).get(), options);
  }

  off_t ArchiveSize() {
    struct stat st;
    EXPECT_EQ(::stat(archive_.c_str(), &st), 0);
    return st.st_size;
  }

  std::string dir_, src_, dst_, archive_;
};

TEST_F(ArchiveTest, RoundTripKeepsFilesDirectoriesAndInertSymlinks) {
  struct stat shadow_before;
  bool have_shadow = ::stat("/etc/shadow", &shadow_before) == 0;
  ASSERT_EQ(::mkdir((src_ + "/empty").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((src_ + "/sub").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((src_ + "/sub/deeper").c_str(), 0750), 0);
  ASSERT_EQ(::mkdir((src_ + "/locked").c_str(), 0755), 0);
  WriteAll(src_ + "/hello.txt", "hello\n");
  WriteAll(src_ + "/sub/deeper/data.bin", std::string(300000, '\x7f'), 0600);
  WriteAll(src_ + "/setuid", "#!/bin/sh\n", 04755);
  WriteAll(src_ + "/locked/inside", "x");
  ASSERT_EQ(::chmod((src_ + "/locked").c_str(), 0500), 0);
  const std::string odd = std::string("new\nline \xff\xfe ") + std::string(150, 'n');  // not UTF-8, over ustar's 100
  WriteAll(src_ + "/" + odd, "odd");
  ASSERT_EQ(::symlink("/etc/shadow", (src_ + "/shadow-link").c_str()), 0);
  ASSERT_EQ(::mkfifo((src_ + "/fifo").c_str(), 0644), 0);

  auto written = Archive();
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->entries, 10u);  // 4 dirs, 5 files, 1 symlink
  EXPECT_EQ(written->skipped, 1u);   // the FIFO
  EXPECT_EQ(written->file_bytes, 6u + 300000 + 10 + 1 + 3);
  EXPECT_EQ(written->archive_bytes, static_cast<uint64_t>(ArchiveSize()));

  auto restored = Extract();
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->entries, written->entries);
  EXPECT_EQ(restored->file_bytes, written->file_bytes);
  EXPECT_EQ(restored->archive_bytes, written->archive_bytes);
  EXPECT_EQ(ReadAll(dst_ + "/hello.txt"), "hello\n");
  EXPECT_EQ(ReadAll(dst_ + "/sub/deeper/data.bin"), std::string(300000, '\x7f'));
  EXPECT_EQ(ReadAll(dst_ + "/" + odd), "odd");
  EXPECT_EQ(ReadAll(dst_ + "/locked/inside"), "x");
  struct stat st;
  ASSERT_EQ(::stat((dst_ + "/empty").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  ASSERT_EQ(::stat((dst_ + "/sub/deeper").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  ASSERT_EQ(::stat((dst_ + "/locked").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0500u) << "a directory's mode is set after its contents";
  ASSERT_EQ(::stat((dst_ + "/sub/deeper/data.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(::stat((dst_ + "/setuid").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u) << "setuid is dropped";
  ASSERT_EQ(::lstat((dst_ + "/shadow-link").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  char target[64] = {};
  ASSERT_GT(::readlink((dst_ + "/shadow-link").c_str(), target, sizeof(target) - 1), 0);
  EXPECT_STREQ(target, "/etc/shadow");
  EXPECT_FALSE(Exists(dst_ + "/fifo"));
  if (have_shadow) {
    struct stat shadow_after;
    ASSERT_EQ(::stat("/etc/shadow", &shadow_after), 0);
    EXPECT_EQ(shadow_after.st_size, shadow_before.st_size);
    EXPECT_EQ(shadow_after.st_mtim.tv_sec, shadow_before.st_mtim.tv_sec);
  }
}

// An operator can inspect or restore an archive by hand.
TEST_F(ArchiveTest, GnuTarReadsWhatWriteArchiveWrites) {
  if (std::system("command -v tar >/dev/null && command -v zstd >/dev/null") != 0) {
    GTEST_SKIP() << "tar or zstd is not installed";
  }
  ASSERT_EQ(::mkdir((src_ + "/dir").c_str(), 0755), 0);
  const std::string long_name = std::string(180, 'l');  // needs a pax record
  WriteAll(src_ + "/dir/" + long_name, "long");
  ASSERT_EQ(::symlink("/etc/shadow", (src_ + "/link").c_str()), 0);
  ASSERT_TRUE(Archive().ok());
  std::string cmd = "zstd -dcq '" + archive_ + "' | tar -x -C '" + dst_ + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_EQ(ReadAll(dst_ + "/dir/" + long_name), "long");
  char target[64] = {};
  ASSERT_GT(::readlink((dst_ + "/link").c_str(), target, sizeof(target) - 1), 0);
  EXPECT_STREQ(target, "/etc/shadow");
}

TEST_F(ArchiveTest, ExtractionSetsTheOwnerOfEverythingItMakes) {
  if (::geteuid() != 0) GTEST_SKIP() << "chown to another uid needs root";
  ASSERT_EQ(::mkdir((src_ + "/d").c_str(), 0755), 0);
  WriteAll(src_ + "/d/f", "x");
  ASSERT_EQ(::symlink("f", (src_ + "/d/l").c_str()), 0);
  ASSERT_TRUE(Archive().ok());
  ExtractOptions options;
  options.uid = 12345;
  options.gid = 23456;
  auto restored = Extract(options);
  ASSERT_TRUE(restored.ok()) << restored.status();
  for (const char* name : {"/d", "/d/f", "/d/l"}) {
    struct stat st;
    ASSERT_EQ(::lstat((dst_ + name).c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_uid, 12345u) << name;
    EXPECT_EQ(st.st_gid, 23456u) << name;
  }
}

TEST_F(ArchiveTest, NamesExtractionWouldRefuseAreSkippedAndCounted) {
  std::string deep = src_;
  for (size_t i = 0; i < kMaxPathDepth; ++i) {
    deep += "/d";
    ASSERT_EQ(::mkdir(deep.c_str(), 0755), 0);
  }
  WriteAll(deep + "/too-deep", "x");  // component kMaxPathDepth + 1
  auto written = Archive();
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->entries, kMaxPathDepth);
  EXPECT_EQ(written->skipped, 1u);
  auto restored = Extract();
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->entries, kMaxPathDepth);
}

TEST_F(ArchiveTest, OverTheSizeCapNothingIsWritten) {
  WriteAll(src_ + "/a", std::string(1500, 'a'));
  WriteAll(src_ + "/b", std::string(500, 'b'));
  ArchiveOptions options;
  options.max_workspace_bytes = 1000;
  auto written = Archive(options);
  EXPECT_TRUE(absl::IsResourceExhausted(written.status())) << written.status();
  EXPECT_EQ(written.status().message(), "workspace holds 2000 bytes, over the archive cap 1000; not archived");
  EXPECT_EQ(ArchiveSize(), 0);
}

TEST_F(ArchiveTest, OverTheEntryCapNothingIsWritten) {
  for (int i = 0; i < 5; ++i) WriteAll(src_ + "/f" + std::to_string(i), "x");
  ArchiveOptions options;
  options.max_entries = 4;
  auto written = Archive(options);
  EXPECT_TRUE(absl::IsResourceExhausted(written.status())) << written.status();
  EXPECT_EQ(ArchiveSize(), 0);
}

TEST_F(ArchiveTest, SparseHugeFileCountsByItsSizeAndIsNeverRead) {
  std::string huge = src_ + "/huge";
  UniqueFd fd(::open(huge.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  ASSERT_TRUE(fd.valid());
  if (::ftruncate(fd.get(), off_t{1} << 40) != 0) GTEST_SKIP() << "this filesystem holds no 2^40-byte sparse file";
  auto written = Archive();
  EXPECT_TRUE(absl::IsResourceExhausted(written.status())) << written.status();
  EXPECT_EQ(written.status().message(),
            "workspace holds 1099511627776 bytes, over the archive cap 209715200; not archived");
  EXPECT_EQ(ArchiveSize(), 0);
}

TEST_F(ArchiveTest, BadCompressionLevelIsRefusedBeforeWriting) {
  ArchiveOptions options;
  options.zstd_level = 40;
  auto written = Archive(options);
  EXPECT_TRUE(absl::IsInvalidArgument(written.status())) << written.status();
  EXPECT_EQ(ArchiveSize(), 0);
}

// Each tampered archive is refused as corrupt, naming the entry, and
// leaves nothing beside the target root.
TEST_F(ArchiveTest, NamesThatLeaveTheRootRefuseTheArchive) {
  const std::string absolute = dir_ + "/abs-escape";
  for (const std::string& bad :
       {std::string("../escape"), absolute, std::string("a/../../b"), std::string("a//b"), std::string("./x")}) {
    Craft(archive_, {{"ok", AE_IFREG, "fine"}, {bad, AE_IFREG, "planted"}});
    auto restored = Extract();
    EXPECT_TRUE(absl::IsDataLoss(restored.status())) << bad << ": " << restored.status();
    EXPECT_NE(restored.status().message().find("entry 1 '" + bad + "'"), std::string::npos) << restored.status();
    EXPECT_EQ(Names(dir_), (std::set<std::string>{"src", "dst", "ws.tar.zst"})) << bad;
    EXPECT_FALSE(Exists(absolute));
    ASSERT_EQ(std::system(("rm -rf '" + dst_ + "'/*").c_str()), 0);
  }
}

TEST_F(ArchiveTest, EntriesBeneathAnExtractedSymlinkAreNeverWrittenThroughIt) {
  const std::string passwd = ReadAll("/etc/passwd");
  ASSERT_EQ(::mkdir((dir_ + "/outside").c_str(), 0755), 0);
  for (const std::string& target : {std::string("/etc"), dir_ + "/outside"}) {
    Craft(archive_, {{"link", AE_IFLNK, "", target, "", 0777},
                     {"link/passwd", AE_IFREG, "root::0:0::/:/bin/sh\n"},
                     {"link/planted", AE_IFREG, "x"}});
    auto restored = Extract();
    EXPECT_FALSE(restored.ok());
    EXPECT_NE(restored.status().message().find("'link/passwd'"), std::string::npos) << restored.status();
    EXPECT_NE(restored.status().message().find("ELOOP"), std::string::npos) << restored.status();
    EXPECT_EQ(Names(dir_ + "/outside"), std::set<std::string>{}) << target;
    EXPECT_EQ(Names(dst_), std::set<std::string>{"link"});
    ASSERT_EQ(::unlink((dst_ + "/link").c_str()), 0);
  }
  EXPECT_EQ(ReadAll("/etc/passwd"), passwd);
}

TEST_F(ArchiveTest, HardLinksDevicesAndFifosAreSkipped) {
  Craft(archive_, {{"a", AE_IFREG, "data"},
                   {"b", AE_IFREG, "", "", "a"},
                   {"escape-link", AE_IFREG, "", "", "/etc/passwd"},
                   {"fifo", AE_IFIFO},
                   {"dev", AE_IFCHR},
                   {"sub/setuid", AE_IFREG, "#!", "", "", 06755}});
  auto restored = Extract();
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->skipped, 4u);
  EXPECT_EQ(restored->entries, 2u);
  EXPECT_EQ(Names(dst_), (std::set<std::string>{"a", "sub"}));
  struct stat st;
  ASSERT_EQ(::stat((dst_ + "/sub/setuid").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(::stat((dst_ + "/a").c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 1u);
}

TEST_F(ArchiveTest, ANameSeenTwiceIsAnErrorNotAnOverwrite) {
  Craft(archive_, {{"f", AE_IFREG, "first"}, {"f", AE_IFREG, "second"}});
  auto restored = Extract();
  EXPECT_TRUE(absl::IsAlreadyExists(restored.status())) << restored.status();
  EXPECT_EQ(ReadAll(dst_ + "/f"), "first");
}

TEST_F(ArchiveTest, TooManyEntriesOrBytesStopBeforeTheEntryOverTheCap) {
  Craft(archive_, {{"a", AE_IFREG, "1"}, {"b", AE_IFREG, "2"}, {"c", AE_IFREG, "3"}});
  ExtractOptions few;
  few.max_entries = 2;
  auto restored = Extract(few);
  EXPECT_TRUE(absl::IsResourceExhausted(restored.status())) << restored.status();
  EXPECT_EQ(Names(dst_), (std::set<std::string>{"a", "b"}));
  ASSERT_EQ(std::system(("rm -rf '" + dst_ + "'/*").c_str()), 0);

  Craft(archive_, {{"small", AE_IFREG, "12345"}, {"big", AE_IFREG, std::string(100, 'x')}});
  ExtractOptions small;
  small.max_bytes = 50;
  restored = Extract(small);
  EXPECT_TRUE(absl::IsResourceExhausted(restored.status())) << restored.status();
  EXPECT_NE(restored.status().message().find("'big'"), std::string::npos) << restored.status();
  EXPECT_EQ(Names(dst_), std::set<std::string>{"small"});
}

TEST_F(ArchiveTest, TruncatedOrGarbledArchivesAreCorrupt) {
  std::string noise(400000, '\0');
  uint32_t state = 12345;
  for (char& c : noise) c = static_cast<char>((state = state * 1103515245 + 12345) >> 24);  // incompressible
  WriteAll(src_ + "/noise", noise);
  WriteAll(src_ + "/z-after", "after");
  ASSERT_TRUE(Archive().ok());
  std::string whole = ReadAll(archive_);
  ASSERT_GT(whole.size(), noise.size());
  WriteAll(archive_, whole.substr(0, whole.size() / 2));  // ends inside noise's data
  auto restored = Extract();
  EXPECT_TRUE(absl::IsDataLoss(restored.status())) << restored.status();
  EXPECT_NE(restored.status().message().find("noise"), std::string::npos) << restored.status();
  EXPECT_EQ(Names(dst_), std::set<std::string>{"noise"})
      << "what was extracted before the error stays, for the caller to wipe";

  ASSERT_EQ(std::system(("rm -rf '" + dst_ + "'/*").c_str()), 0);
  WriteAll(archive_, std::string(4096, '\x42'));
  restored = Extract();
  EXPECT_TRUE(absl::IsDataLoss(restored.status())) << restored.status();
  EXPECT_EQ(Names(dst_), std::set<std::string>{});
}

class LocalArchiveStoreTest : public ArchiveTest {
 protected:
  std::string StoreDir() { return dir_ + "/store"; }
};

TEST_F(LocalArchiveStoreTest, KeysThatCouldNameAPathAreRefused) {
  auto store = LocalArchiveStore::Create(StoreDir());
  ASSERT_TRUE(store.ok()) << store.status();
  UniqueFd src = OpenDir(src_);
  UniqueFd dst = OpenDir(dst_);
  for (const std::string& key :
       {std::string(""), std::string(".hidden"), std::string("a/b"), std::string(".."), std::string("../x"),
        std::string("a b"), std::string(129, 'k'), std::string("a\0b", 3)}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ValidateArchiveKey(key))) << key;
    EXPECT_TRUE(absl::IsInvalidArgument((*store)->Save(key, src.get(), {}).status())) << key;
    EXPECT_TRUE(absl::IsInvalidArgument((*store)->Restore(key, dst.get(), {}).status())) << key;
    EXPECT_TRUE(absl::IsInvalidArgument((*store)->Remove(key))) << key;
  }
  EXPECT_TRUE(ValidateArchiveKey(std::string(128, 'k')).ok());
  EXPECT_TRUE(ValidateArchiveKey("Session_1.v2-x").ok());
  EXPECT_EQ(Names(StoreDir()), std::set<std::string>{});
  EXPECT_EQ(Names(dir_), (std::set<std::string>{"src", "dst", "store"}));
}

TEST_F(LocalArchiveStoreTest, SaveRestoreRemove) {
  auto store = LocalArchiveStore::Create(StoreDir());
  ASSERT_TRUE(store.ok()) << store.status();
  struct stat st;
  ASSERT_EQ(::stat(StoreDir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_NE((*store)->Describe().find(StoreDir()), std::string::npos);
  UniqueFd dst = OpenDir(dst_);
  auto none = (*store)->Restore("s1", dst.get(), {});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());

  WriteAll(src_ + "/notes.md", "# notes\n");
  auto saved = (*store)->Save("s1", OpenDir(src_).get(), {});
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(Names(StoreDir()), std::set<std::string>{"s1.tar.zst"});
  auto restored = (*store)->Restore("s1", dst.get(), {});
  ASSERT_TRUE(restored.ok()) << restored.status();
  ASSERT_TRUE(restored->has_value());
  EXPECT_EQ((*restored)->file_bytes, 8u);
  EXPECT_EQ(ReadAll(dst_ + "/notes.md"), "# notes\n");

  ASSERT_TRUE((*store)->Remove("s1").ok());
  EXPECT_EQ(Names(StoreDir()), std::set<std::string>{});
  EXPECT_TRUE((*store)->Remove("s1").ok()) << "removing no archive is OK";
  none = (*store)->Restore("s1", dst.get(), {});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
}

TEST_F(LocalArchiveStoreTest, AFailedSaveKeepsThePreviousArchiveAndNoTemporary) {
  auto store = LocalArchiveStore::Create(StoreDir());
  ASSERT_TRUE(store.ok()) << store.status();
  WriteAll(src_ + "/v", "version 1");
  ASSERT_TRUE((*store)->Save("s1", OpenDir(src_).get(), {}).ok());
  WriteAll(src_ + "/v", std::string(5000, '2'));
  ArchiveOptions small;
  small.max_workspace_bytes = 100;
  EXPECT_TRUE(absl::IsResourceExhausted((*store)->Save("s1", OpenDir(src_).get(), small).status()));
  EXPECT_EQ(Names(StoreDir()), std::set<std::string>{"s1.tar.zst"});
  auto restored = (*store)->Restore("s1", OpenDir(dst_).get(), {});
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(ReadAll(dst_ + "/v"), "version 1");
}

TEST_F(LocalArchiveStoreTest, CreateRemovesTheTemporariesOfACrashedSave) {
  ASSERT_EQ(::mkdir(StoreDir().c_str(), 0700), 0);
  WriteAll(StoreDir() + "/.s1.tmp-abc123", "half an archive");
  WriteAll(StoreDir() + "/.s2.tmp-zzzzzz", "");
  WriteAll(StoreDir() + "/s1.tar.zst", "the previous archive");
  // Untouched for two hours: their saves died.
  const struct timespec old[2] = {{::time(nullptr) - 7200, 0}, {::time(nullptr) - 7200, 0}};
  for (const char* name : {"/.s1.tmp-abc123", "/.s2.tmp-zzzzzz"}) {
    ASSERT_EQ(::utimensat(AT_FDCWD, (StoreDir() + name).c_str(), old, 0), 0);
  }
  auto store = LocalArchiveStore::Create(StoreDir());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(Names(StoreDir()), std::set<std::string>{"s1.tar.zst"});
  EXPECT_EQ(ReadAll(StoreDir() + "/s1.tar.zst"), "the previous archive");
}

// Daemons on several nodes may share one archive directory: one that
// starts must not take away another's save in progress.
TEST_F(LocalArchiveStoreTest, CreateLeavesATemporaryBeingWritten) {
  ASSERT_EQ(::mkdir(StoreDir().c_str(), 0700), 0);
  WriteAll(StoreDir() + "/.s1.tmp-live01", "an archive being written");
  auto store = LocalArchiveStore::Create(StoreDir());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(Names(StoreDir()), std::set<std::string>{".s1.tmp-live01"});
}

TEST_F(LocalArchiveStoreTest, ADirectoryOthersCouldWriteOrRedirectIsRefused) {
  ASSERT_EQ(::mkdir(StoreDir().c_str(), 0770), 0);
  ASSERT_EQ(::chmod(StoreDir().c_str(), 0770), 0);  // past the umask
  auto store = LocalArchiveStore::Create(StoreDir());
  EXPECT_TRUE(absl::IsFailedPrecondition(store.status())) << store.status();
  EXPECT_NE(store.status().message().find("writable by group or others"), std::string::npos);

  if (::geteuid() == 0) {  // only root can give the directory away
    ASSERT_EQ(::chmod(StoreDir().c_str(), 0700), 0);
    ASSERT_EQ(::chown(StoreDir().c_str(), 12345, 12345), 0);
    store = LocalArchiveStore::Create(StoreDir());
    EXPECT_TRUE(absl::IsFailedPrecondition(store.status())) << store.status();
    EXPECT_NE(store.status().message().find("owned by uid 12345"), std::string::npos) << store.status();
  }

  ASSERT_EQ(::symlink(src_.c_str(), (dir_ + "/store-link").c_str()), 0);
  store = LocalArchiveStore::Create(dir_ + "/store-link");
  EXPECT_TRUE(absl::IsFailedPrecondition(store.status())) << store.status();
  EXPECT_EQ(Names(src_), std::set<std::string>{});
}

}  // namespace
}  // namespace cubicle::sessions
