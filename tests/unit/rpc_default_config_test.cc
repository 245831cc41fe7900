// The built-in configuration (rpc/default_config.cc, docs/config.md "The
// built-in configuration"): the profiles it documents, the r profile
// exactly where the host has R, and that the text parses to the same.
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rpc/config.h"
#include "runtime/defaults.h"

namespace cubicle::rpc {
namespace {

using ::cubicle::rootfs::MountOp;

TEST(DefaultConfig, HasTheDocumentedShellAndPythonProfiles) {
  absl::StatusOr<DaemonConfig> parsed = ParseConfig(DefaultConfigJson());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const DaemonConfig& config = *parsed;
  EXPECT_EQ(config.socket_path, "");
  EXPECT_EQ(config.socket_mode, 0600u);
  EXPECT_EQ(config.max_concurrent, 8u);
  EXPECT_EQ(config.max_queue, 64u);
  EXPECT_EQ(config.ceiling.memory_max, 2ull << 30);
  EXPECT_EQ(config.ceiling.pids_max, 4096u);
  EXPECT_EQ(config.max_timeout, absl::Minutes(10));
  EXPECT_EQ(config.max_output_bytes, 16u << 20);
  const bool host_has_r = ::access("/usr/bin/Rscript", X_OK) == 0 && ::access("/etc/R", R_OK) == 0;
  ASSERT_EQ(config.profiles.size(), host_has_r ? 3u : 2u);

  const Profile& shell = config.profiles.at("shell");
  EXPECT_EQ(shell.name, "shell");
  EXPECT_EQ(shell.spec.seccomp, seccomp::Policy::kNoNetwork);
  EXPECT_TRUE(shell.spec.namespaces.net);
  EXPECT_EQ(shell.spec.limits.memory_max, 256u << 20);
  EXPECT_EQ(shell.spec.limits.pids_max, 64u);
  EXPECT_EQ(shell.default_timeout, absl::Seconds(30));
  EXPECT_EQ(shell.max_timeout, absl::Seconds(300));
  EXPECT_EQ(shell.spec.timeout, absl::Seconds(30));
  EXPECT_EQ(shell.output_bytes, 1u << 20);
  EXPECT_EQ(shell.pool.min_idle, 2u);
  EXPECT_EQ(shell.pool.max_idle, 4u);
  EXPECT_EQ(shell.pool.max_total, 16u);
  EXPECT_TRUE(shell.spec.argv.empty());
  EXPECT_FALSE(shell.interpreter.has_value());
  // The rest is runtime::DefaultSpec's baseline.
  runtime::SandboxSpec baseline = *runtime::DefaultSpec({});
  EXPECT_EQ(shell.spec.mounts, baseline.mounts);
  EXPECT_EQ(shell.spec.env, baseline.env);
  EXPECT_EQ(shell.spec.rlimits, baseline.rlimits);

  const Profile& python = config.profiles.at("python");
  EXPECT_EQ(python.spec.limits.memory_max, 512u << 20);
  EXPECT_EQ(python.spec.limits.pids_max, 128u);
  EXPECT_EQ(python.default_timeout, absl::Seconds(30));
  EXPECT_EQ(python.max_timeout, absl::Seconds(300));
  EXPECT_EQ(python.pool.max_total, 16u);
  ASSERT_TRUE(python.interpreter.has_value());
  EXPECT_EQ(python.interpreter->argv, (std::vector<std::string>{"python3", "-I"}));
  EXPECT_EQ(python.interpreter->preload, (std::vector<std::string>{"json"}));
}

// "r" only where the host has R; the notes say why it is missing.
TEST(DefaultConfig, HasAnRProfileExactlyWhereTheHostHasR) {
  absl::StatusOr<DaemonConfig> config = DefaultConfig();
  ASSERT_TRUE(config.ok()) << config.status();
  if (::access("/usr/bin/Rscript", X_OK) != 0 || ::access("/etc/R", R_OK) != 0) {
    EXPECT_FALSE(config->profiles.contains("r"));
    ASSERT_EQ(DefaultConfigNotes().size(), 1u);
    EXPECT_EQ(DefaultConfigNotes()[0], "no R on this host: the r profile is left out (apt-get install r-base-core)");
    return;
  }
  EXPECT_TRUE(DefaultConfigNotes().empty());
  const Profile& r = config->profiles.at("r");
  EXPECT_EQ(r.spec.seccomp, seccomp::Policy::kNoNetwork);
  EXPECT_TRUE(r.spec.namespaces.net);
  EXPECT_EQ(r.spec.limits.memory_max, 512u << 20);
  EXPECT_EQ(r.spec.limits.pids_max, 128u);
  ASSERT_TRUE(r.interpreter.has_value()) << "R is kept warm (bench/README.md)";
  EXPECT_EQ(r.interpreter->argv, (std::vector<std::string>{"Rscript", "--vanilla"}));
  const bool jsonlite = ::access("/usr/lib/R/site-library/jsonlite/DESCRIPTION", R_OK) == 0;
  EXPECT_EQ(r.interpreter->preload, jsonlite ? std::vector<std::string>{"jsonlite"} : std::vector<std::string>{});
  bool etc_r = false;
  for (const MountOp& op : r.spec.mounts) etc_r |= op.dest == "/etc/R" && op.readonly;
  EXPECT_TRUE(etc_r) << "R_HOME/etc links into /etc/R";
}

TEST(DefaultConfig, DefaultConfigIsTheParsedJson) {
  absl::StatusOr<DaemonConfig> config = DefaultConfig();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->profiles.at("python").spec, ParseConfig(DefaultConfigJson())->profiles.at("python").spec);
}

}  // namespace
}  // namespace cubicle::rpc
