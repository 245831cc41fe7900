// A fixture that proves a test left the host as it found it: no process of
// ours alive and the host mount table unchanged (DESIGN §8: no process or
// mount outlives its sandbox). Only this process's own descendants and its
// own view of the mount table are compared, so tests running in parallel in
// other processes cannot disturb the verdict.
#pragma once

#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {

class HostHygieneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mounts_before_ = HostMounts();
    ASSERT_TRUE(Descendants().empty()) << "a process of ours was alive before the test started";
  }

  void TearDown() override {
    EXPECT_EQ(Descendants(), std::vector<pid_t>{}) << "processes outlived the sandbox";
    EXPECT_EQ(HostMounts(), mounts_before_) << "the host mount table changed";
  }

  static bool IsRoot() { return ::geteuid() == 0; }

  // For a test that must mount something on the "host" itself: moves this
  // test process into a mount namespace of its own (every mount private),
  // so that what it mounts is never in the mount table the tests running
  // in parallel compare, and takes the snapshot again there. The sandboxes
  // it starts are made from that namespace as from the host's.
  void EnterPrivateMountNamespace() {
    ASSERT_EQ(::unshare(CLONE_NEWNS), 0) << "unshare(CLONE_NEWNS): " << std::strerror(errno);
    ASSERT_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0)
        << "mount(/, MS_REC|MS_PRIVATE): " << std::strerror(errno);
    mounts_before_ = HostMounts();
  }

  // In such a namespace: detaches every mount under `dir` made by others
  // (which they may remove at any time: the kernel then detaches the
  // copies in every namespace, this one's too) and takes the snapshot
  // again, so the table compared holds only what this test mounts.
  void DetachMountsUnder(const std::string& dir) {
    for (const std::string& line : HostMounts()) {
      // "ID PARENT MAJ:MIN ROOT MOUNTPOINT ..."
      std::vector<std::string> fields;
      size_t at = 0;
      for (int i = 0; i < 5 && at != std::string::npos; ++i) {
        const size_t end = line.find(' ', at);
        fields.push_back(line.substr(at, end == std::string::npos ? std::string::npos : end - at));
        at = end == std::string::npos ? end : end + 1;
      }
      if (fields.size() == 5 && fields[4].rfind(dir + "/", 0) == 0) ::umount2(fields[4].c_str(), MNT_DETACH);
    }
    mounts_before_ = HostMounts();
  }

 private:
  std::vector<std::string> mounts_before_;
};

}  // namespace cubicle::test_support
