// A fixture that proves a test left the host as it found it: no process of
// ours alive and the host mount table unchanged (DESIGN §8: no process or
// mount outlives its sandbox). Only this process's own descendants and its
// own view of the mount table are compared, so tests running in parallel in
// other processes cannot disturb the verdict.
#pragma once

#include <unistd.h>

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

 private:
  std::vector<std::string> mounts_before_;
};

}  // namespace cubicle::test_support
