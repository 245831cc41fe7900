// The daemon config's accelerator keys: "npu" at the top (driver root,
// cache window, the host broker) and "npu"/"gpu" in a profile.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "rpc/config.h"

namespace cubicle::rpc {
namespace {

std::string Config(const std::string& profile_extra, const std::string& top = "") {
  return absl::StrCat("{", top, top.empty() ? "" : ",", R"("profiles": {"x": {)", profile_extra, "}}}");
}

std::string ErrorOf(const std::string& json) {
  absl::StatusOr<DaemonConfig> config = ParseConfig(json);
  return config.ok() ? "(parsed)" : std::string(config.status().message());
}

TEST(NpuConfig, DefaultsWhenAbsent) {
  absl::StatusOr<DaemonConfig> c = ParseConfig(Config(""));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->npu.root, "/");
  EXPECT_EQ(c->npu.cache_window, absl::Seconds(30));
  EXPECT_FALSE(c->npu.broker.enabled);
  EXPECT_TRUE(c->npu.broker.jobs.empty());
  EXPECT_TRUE(c->profiles.at("x").npus.empty());
}

TEST(NpuConfig, RootWindowAndBrokerJobs) {
  absl::StatusOr<DaemonConfig> c = ParseConfig(Config("", R"("npu": {"root": "/tmp", "cache_window_ms": 5000,
      "broker": {"enabled": true, "jobs": {"firmware": {"argv": ["/usr/local/bin/npu-smi", "info", "-t", "board"],
      "env": {"LANG": "C"}, "timeout_ms": 10000, "output_bytes": "64K"}}}})"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->npu.root, "/tmp");
  EXPECT_EQ(c->npu.cache_window, absl::Seconds(5));
  EXPECT_TRUE(c->npu.broker.enabled);
  ASSERT_EQ(c->npu.broker.jobs.size(), 1u);
  const npu::BrokerJob& job = c->npu.broker.jobs[0];
  EXPECT_EQ(job.id, "firmware");
  EXPECT_EQ(job.argv, (std::vector<std::string>{"/usr/local/bin/npu-smi", "info", "-t", "board"}));
  EXPECT_EQ(job.env, (std::vector<std::string>{"LANG=C"}));
  EXPECT_EQ(job.timeout, absl::Seconds(10));
  EXPECT_EQ(job.output_budget, 64u << 10);
}

TEST(NpuConfig, ProfileChipsAreAscendingDistinctAndRunCold) {
  absl::StatusOr<DaemonConfig> c = ParseConfig(Config(R"("npu": "6,4,6", "gpu": "1")"));
  ASSERT_TRUE(c.ok()) << c.status();
  const Profile& p = c->profiles.at("x");
  EXPECT_EQ(p.npus, (std::vector<int>{4, 6}));
  EXPECT_EQ(p.gpus, (std::vector<int>{1}));
  EXPECT_EQ(p.pool.min_idle, 0u) << "no zygote can have been probed for an execution: keep none warm";
}

TEST(NpuConfig, BadValuesNameTheirPath) {
  EXPECT_NE(ErrorOf(Config(R"("npu": "4,x")")).find("profiles.x.npu"), std::string::npos);
  EXPECT_NE(ErrorOf(Config(R"("npu": [4, 6])")).find("profiles.x.npu"), std::string::npos);
  EXPECT_NE(ErrorOf(Config(R"("gpu": "")")).find("profiles.x.gpu"), std::string::npos);
  EXPECT_NE(ErrorOf(Config("", R"("npu": {"root": "relative"})")).find("npu.root"), std::string::npos);
  EXPECT_NE(ErrorOf(Config("", R"("npu": {"root": "/nonexistent-npu-root"})")).find("npu.root"), std::string::npos);
  EXPECT_NE(ErrorOf(Config("", R"("npu": {"cache_window": 5})")).find("npu.cache_window"), std::string::npos);
  EXPECT_NE(ErrorOf(Config("", R"("npu": {"broker": {"enabled": true, "jobs": {"x": {"argv": ["sh"]}}}})"))
                .find("argv[0] must be an absolute path"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Config("", R"("npu": {"broker": {"jobs": {"bad id": {"argv": ["/bin/true"]}}}})"))
                .find("broker job id"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Config("", R"("npu": {"broker": {"jobs": {"x": {"argv": ["/bin/true"], "shell": true}}}})"))
                .find("npu.broker.jobs.x.shell"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Config("", R"("npu": {"broker": {"jobs": {"x": {}}}})")).find("argv is required"),
            std::string::npos);
}

}  // namespace
}  // namespace cubicle::rpc
