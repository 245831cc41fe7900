// The SELinux helpers behind bwrap's --exec-label and --file-label: where
// selinuxfs is mounted, and asking the kernel about a context. (This host
// has no SELinux; the kernel's side is exercised by the launcher tests.)
#include "namespaces/selinux.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace cubicle::namespaces {
namespace {

TEST(SelinuxFs, FoundByFilesystemTypeNotByPath) {
  const char* with =
      "22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
      "23 20 0:22 / /sys/fs/selinux rw,relatime shared:7 - selinuxfs selinuxfs rw\n";
  EXPECT_EQ(SelinuxFsFromMountinfo(with), "/sys/fs/selinux");
  const char* elsewhere = "40 1 0:30 / /selinux rw - selinuxfs none rw\n";
  EXPECT_EQ(SelinuxFsFromMountinfo(elsewhere), "/selinux");
  // A path that merely looks like it is not one; no " - " is no entry.
  const char* without =
      "24 20 0:23 / /sys/fs/selinux rw - tmpfs tmpfs rw\n"
      "garbage line\n";
  EXPECT_EQ(SelinuxFsFromMountinfo(without), "");
  EXPECT_EQ(SelinuxFsFromMountinfo(""), "");
}

TEST(SelinuxFs, ThisHostsAnswerMatchesItsMountTable) {
  // Whatever this host is, the answer is its mount table's.
  std::string found = SelinuxFsMountPoint();
  struct stat st;
  if (found.empty()) {
    EXPECT_NE(::stat("/sys/fs/selinux/enforce", &st), 0) << "selinuxfs is there but was not found";
  } else {
    EXPECT_EQ(::stat(absl::StrCat(found, "/context").c_str(), &st), 0) << found;
  }
}

TEST(SelinuxContext, WritesTheLabelWithItsNulAndReportsFailures) {
  char dir[] = "/tmp/cubicle-selinux-test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string node = absl::StrCat(dir, "/context");
  // A stand-in for selinuxfs: a plain file takes whatever is written.
  std::ofstream(node).close();
  EXPECT_TRUE(CheckSelinuxContext(dir, "u:r:sandbox_t:s0").ok());
  std::stringstream written;
  written << std::ifstream(node).rdbuf();
  EXPECT_EQ(written.str(), std::string("u:r:sandbox_t:s0") + '\0');
  // No such node: the label and the cause.
  absl::Status missing = CheckSelinuxContext(absl::StrCat(dir, "/absent"), "u:r:x_t:s0");
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(missing.message(), "u:r:x_t:s0: No such file or directory");
  ::unlink(node.c_str());
  ::rmdir(dir);
}

}  // namespace
}  // namespace cubicle::namespaces
