// The host cache (runtime/host_cache.h) and the layout's text form
// (cgroups/layout_cache.h): what one cubicle process discovered, the next
// reuses, and only when nothing could have made it wrong.
#include "runtime/host_cache.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cgroups/layout_cache.h"

namespace cubicle {
namespace {

using cgroups::Hierarchy;
using cgroups::Layout;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/host-cache-test-XXXXXX";
    path_ = ::mkdtemp(tmpl.data()) != nullptr ? tmpl : "";
  }
  ~TempDir() {
    if (!path_.empty()) std::system(absl::StrCat("rm -rf '", path_, "'").c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void Spit(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

Layout OddLayout() {
  Layout l;
  l.version = cgroups::Version::kHybrid;
  l.unified = 0;
  l.v1_swap_accounting = true;
  l.source = "libcgroup, checked against /proc/self/mountinfo";
  Hierarchy v2;
  v2.version = 2;
  v2.mount_point = "/sys/fs/cgroup/unified";
  v2.own = "/";
  v2.own_dir = "/sys/fs/cgroup/unified/";
  v2.parent = "/sys/fs/cgroup/unified/cubicle";
  v2.controllers = {"hugetlb", "misc"};
  Hierarchy mem;
  mem.version = 1;
  mem.mount_point = "/sys/fs/cgroup/memory";
  mem.own = "/a b\tc/d\ne";  // every path survives: spaces, tabs, newlines
  mem.own_dir = "/sys/fs/cgroup/memory/a b\tc/d\ne";
  mem.parent = "/sys/fs/cgroup/memory/a b\tc/d\ne/cubicle";
  mem.controllers = {"memory"};
  l.hierarchies = {v2, mem};
  l.placement = {1, -1, 0, 0, -1, 0};
  l.notes = {"a note, with\ta tab"};
  return l;
}

TEST(LayoutCache, TextRoundTripsEveryField) {
  const Layout l = OddLayout();
  absl::StatusOr<Layout> back = cgroups::ParseLayout(cgroups::SerializeLayout(l));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->version, l.version);
  EXPECT_EQ(back->unified, l.unified);
  EXPECT_EQ(back->v1_swap_accounting, l.v1_swap_accounting);
  EXPECT_EQ(back->source, l.source);
  EXPECT_EQ(back->placement, l.placement);
  EXPECT_EQ(back->hierarchies, l.hierarchies);
  EXPECT_EQ(back->notes, l.notes);
}

TEST(LayoutCache, MalformedTextIsRefused) {
  const std::string good = cgroups::SerializeLayout(OddLayout());
  struct Case {
    std::string text;
    std::string says;
  } cases[] = {
      {"", "no version"},
      {good + "surprise\t1\n", "unknown record"},
      {"version\t9\n", "unknown record"},
      {"version\t1\nunified\t5\n", "unified index"},
      {"version\t1\nplacement\t0\t0\t0\t0\t0\t0\n", "placement is out of range"},
      {"version\t1\nplacement\t0\t0\n", "unknown record"},
      {"version\t1\nhierarchy\t1\tmem\t/\t\t/p\tmemory\n", "not absolute"},
      {"version\t1\nhierarchy\t1\t/m\t/\t\t/m/../etc\tmemory\n", "not absolute and clean"},
      {"version\t1\nhierarchy\t3\t/m\t/\t\t/m/p\tmemory\n", "hierarchy version"},
      {"version\t1\nsource\tbad\\escape\\\n", "bad escape"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Layout> l = cgroups::ParseLayout(c.text);
    EXPECT_FALSE(l.ok()) << c.text;
    EXPECT_TRUE(absl::StrContains(l.status().message(), c.says)) << l.status() << " for: " << c.text;
  }
}

TEST(LayoutCache, RevalidationNeedsCgroupMountsAndTheirParents) {
  Layout l;
  l.version = cgroups::Version::kV1;
  Hierarchy h;
  h.version = 1;
  h.mount_point = "/tmp";  // not a cgroup filesystem
  h.own = "/";
  h.parent = "/tmp";
  l.hierarchies = {h};
  absl::Status st = cgroups::RevalidateLayout(l);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "/tmp")) << st;
  EXPECT_TRUE(cgroups::RevalidateLayout(Layout{}).ok());
}

// A layout with no hierarchy revalidates anywhere: the file mechanics alone.
Layout EmptyLayout() {
  Layout l;
  l.source = "test";
  l.notes = {"stored by a test"};
  return l;
}

TEST(HostCache, StoredLayoutIsLoadedUnderItsKeyOnly) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/cache";
  ASSERT_TRUE(runtime::StoreCachedLayout(dir, "key one", EmptyLayout()).ok());
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077, ::geteuid() == 0 ? 0055u : 0u) << std::oct << st.st_mode;
  std::optional<Layout> back = runtime::LoadCachedLayout(dir, "key one");
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->notes, EmptyLayout().notes);
  EXPECT_FALSE(runtime::LoadCachedLayout(dir, "key two").has_value());
  EXPECT_FALSE(runtime::LoadCachedLayout(dir, "key on").has_value());
  EXPECT_FALSE(runtime::LoadCachedLayout(tmp.path() + "/elsewhere", "key one").has_value());
  EXPECT_FALSE(runtime::LoadCachedLayout("", "key one").has_value());
  // A second store replaces the first, leaving no temporary file behind.
  ASSERT_TRUE(runtime::StoreCachedLayout(dir, "key two", EmptyLayout()).ok());
  EXPECT_TRUE(runtime::LoadCachedLayout(dir, "key two").has_value());
  EXPECT_FALSE(runtime::LoadCachedLayout(dir, "key one").has_value());
  ASSERT_TRUE(runtime::RemoveHostCache(dir).ok());
  EXPECT_FALSE(runtime::LoadCachedLayout(dir, "key two").has_value());
  EXPECT_TRUE(runtime::RemoveHostCache(dir).ok()) << "a missing cache is fine";
  EXPECT_EQ(::rmdir(dir.c_str()), 0) << "the directory held something else";
}

// The modes are the cache's own under any umask (CI's may be 077).
TEST(HostCache, TheModesDoNotFollowTheUmask) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/cache";
  const mode_t old = ::umask(077);
  const absl::Status stored = runtime::StoreCachedLayout(dir, "k", EmptyLayout());
  ::umask(old);
  ASSERT_TRUE(stored.ok()) << stored;
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, ::geteuid() == 0 ? 0755u : 0700u) << std::oct << st.st_mode;
  ASSERT_EQ(::stat((dir + "/host-cache").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u) << std::oct << st.st_mode;
  EXPECT_TRUE(runtime::LoadCachedLayout(dir, "k").has_value());
}

TEST(HostCache, AFileOthersMayWriteOrAForeignOneIsNotTrusted) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/cache";
  const std::string file = dir + "/host-cache";
  ASSERT_TRUE(runtime::StoreCachedLayout(dir, "k", EmptyLayout()).ok());
  ASSERT_TRUE(runtime::LoadCachedLayout(dir, "k").has_value());
  ::chmod(file.c_str(), 0666);
  EXPECT_FALSE(runtime::LoadCachedLayout(dir, "k").has_value()) << "world-writable file";
  ::chmod(file.c_str(), 0644);
  ::chmod(dir.c_str(), 0777);
  EXPECT_FALSE(runtime::LoadCachedLayout(dir, "k").has_value()) << "world-writable directory";
  EXPECT_FALSE(runtime::StoreCachedLayout(dir, "k", EmptyLayout()).ok());
  ::chmod(dir.c_str(), 0755);
  // A symlink in the file's place is not followed.
  ASSERT_EQ(::rename(file.c_str(), (tmp.path() + "/real").c_str()), 0);
  ASSERT_EQ(::symlink((tmp.path() + "/real").c_str(), file.c_str()), 0);
  EXPECT_FALSE(runtime::LoadCachedLayout(dir, "k").has_value()) << "symlinked file";
  // Nor a symlinked directory.
  ::unlink(file.c_str());
  ASSERT_EQ(::symlink(dir.c_str(), (tmp.path() + "/link").c_str()), 0);
  ASSERT_TRUE(runtime::StoreCachedLayout(dir, "k", EmptyLayout()).ok());
  EXPECT_FALSE(runtime::LoadCachedLayout(tmp.path() + "/link", "k").has_value()) << "symlinked directory";
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(file.c_str(), 4242, 4242), 0);
    EXPECT_FALSE(runtime::LoadCachedLayout(dir, "k").has_value()) << "a file another user owns";
  }
}

TEST(HostCache, GarbageOrAnEmulatedLayoutIsNeverUsed) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/cache";
  ASSERT_TRUE(runtime::StoreCachedLayout(dir, "k", EmptyLayout()).ok());
  const std::string file = dir + "/host-cache";
  const std::string text = Slurp(file);
  Spit(file, text + "hierarchy\tnonsense\n");
  EXPECT_FALSE(runtime::LoadCachedLayout(dir, "k").has_value());
  Spit(file, "not a cache at all\n");
  EXPECT_FALSE(runtime::LoadCachedLayout(dir, "k").has_value());
  Layout emulated = EmptyLayout();
  emulated.emulated = true;
  EXPECT_TRUE(absl::IsInvalidArgument(runtime::StoreCachedLayout(dir, "k", emulated)));
}

TEST(HostCache, TheKeyNamesWhatTheLayoutDependsOn) {
  cgroups::LayoutOptions options;
  absl::StatusOr<std::string> a = runtime::HostCacheKey(options);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*runtime::HostCacheKey(options), *a) << "the same process, the same key";
  EXPECT_TRUE(absl::StrContains(*a, absl::StrCat("euid=", ::geteuid()))) << *a;
  EXPECT_TRUE(absl::StrContains(*a, "mntns=")) << *a;
  EXPECT_TRUE(absl::StrContains(*a, "cgroup=")) << *a;
  options.parent = "elsewhere";
  EXPECT_NE(*runtime::HostCacheKey(options), *a);
  options = {};
  options.use_libcgroup = false;
  EXPECT_NE(*runtime::HostCacheKey(options), *a);
}

TEST(HostCache, TheDirectoryFollowsTheEnvironmentAndTheCaller) {
  const char* saved = std::getenv("CUBICLE_HOST_CACHE");
  const std::string keep = saved != nullptr ? saved : "";
  ::setenv("CUBICLE_HOST_CACHE", "off", 1);
  EXPECT_EQ(runtime::HostCacheDir(), "");
  ::setenv("CUBICLE_HOST_CACHE", "relative/dir", 1);
  EXPECT_EQ(runtime::HostCacheDir(), "") << "only an absolute directory";
  ::setenv("CUBICLE_HOST_CACHE", "/some/where", 1);
  EXPECT_EQ(runtime::HostCacheDir(), "/some/where");
  ::unsetenv("CUBICLE_HOST_CACHE");
  if (::geteuid() == 0) {
    EXPECT_EQ(runtime::HostCacheDir(), "/run/cubicle");
  }
  if (saved != nullptr) ::setenv("CUBICLE_HOST_CACHE", keep.c_str(), 1);
}

}  // namespace
}  // namespace cubicle
