#include "runtime/spec.h"

#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/defaults.h"
#include "runtime/result.h"

namespace cubicle::runtime {
namespace {

SandboxSpec Valid() {
  absl::StatusOr<SandboxSpec> spec = DefaultSpec({});
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->argv = {"/bin/true"};
  return *spec;
}

TEST(ValidateSpec, DefaultSpecIsValid) { EXPECT_TRUE(ValidateSpec(Valid()).ok()); }

TEST(ValidateSpec, RejectsEachBadField) {
  SandboxSpec s = Valid();
  s.argv.clear();
  EXPECT_NE(ValidateSpec(s).message().find("argv is empty"), std::string::npos);
  s = Valid();
  s.cwd = "relative";
  EXPECT_NE(ValidateSpec(s).message().find("working directory"), std::string::npos);
  s = Valid();
  s.hostname = "has space";
  EXPECT_NE(ValidateSpec(s).message().find("hostname"), std::string::npos);
  s = Valid();
  s.timeout = absl::ZeroDuration();
  EXPECT_NE(ValidateSpec(s).message().find("timeout"), std::string::npos);
  s = Valid();
  s.env.push_back("NOEQUALS");
  EXPECT_NE(ValidateSpec(s).message().find("NAME=value"), std::string::npos);
  s = Valid();
  s.rlimits.push_back({RLIMIT_NOFILE, 10, 5});
  EXPECT_NE(ValidateSpec(s).message().find("soft limit"), std::string::npos);
  s = Valid();
  s.namespaces.user = false;
  EXPECT_FALSE(ValidateSpec(s).ok());
}

TEST(ValidateSpec, JoinedNamespacesNeedTheirRules) {
  SandboxSpec s = Valid();
  s.join_userns = 5;
  EXPECT_NE(ValidateSpec(s).message().find("not both"), std::string::npos) << "a new user namespace too";
  s.namespaces.user = false;
  EXPECT_TRUE(ValidateSpec(s).ok()) << ValidateSpec(s);
  s.join_pidns = 6;
  s.join_userns_after_setup = 7;
  EXPECT_TRUE(ValidateSpec(s).ok()) << ValidateSpec(s);
  s.join_pidns = -1;
  EXPECT_NE(ValidateSpec(s).message().find("namespace fd -1"), std::string::npos);
  s.join_pidns = 6;
  // After the launcher joined, it has no host privilege for these.
  SandboxSpec limited = s;
  limited.limits.pids_max = 10;
  EXPECT_NE(ValidateSpec(limited).message().find("cannot be combined with cgroup limits"), std::string::npos);
  SandboxSpec mapped = s;
  mapped.host_uid = 0;
  EXPECT_NE(ValidateSpec(mapped).message().find("own id maps"), std::string::npos);
  mapped = s;
  mapped.map_all_host_ids = true;
  EXPECT_FALSE(ValidateSpec(mapped).ok());
  // Without one to join, the sandbox's own is required.
  s = Valid();
  s.namespaces.user = false;
  EXPECT_NE(ValidateSpec(s).message().find("cannot share the caller's"), std::string::npos);
  // Unless it says so: the host's user namespace (bwrap's exact root, an
  // opt-in), which then makes, joins and maps nothing.
  s.host_user_namespace = true;
  EXPECT_TRUE(ValidateSpec(s).ok()) << ValidateSpec(s);
  for (auto edit : std::vector<std::function<void(SandboxSpec&)>>{
           [](SandboxSpec& x) { x.namespaces.user = true; }, [](SandboxSpec& x) { x.join_userns = 3; },
           [](SandboxSpec& x) { x.map_all_host_ids = true; }, [](SandboxSpec& x) { x.host_uid = 0; }}) {
    SandboxSpec bad = s;
    edit(bad);
    EXPECT_NE(ValidateSpec(bad).message().find("host's user namespace"), std::string::npos);
  }
}

TEST(ValidateSpec, RejectsBadBubblewrapFields) {
  SandboxSpec s = Valid();
  s.seccomp_programs = {std::string(7, 'x')};
  EXPECT_NE(ValidateSpec(s).message().find("seccomp program of 7 bytes"), std::string::npos);
  s.seccomp_programs = {std::string()};
  EXPECT_FALSE(ValidateSpec(s).ok());
  s.seccomp_programs = {std::string(8 * 4097, 'x')};
  EXPECT_FALSE(ValidateSpec(s).ok());
  s.seccomp_programs = {std::string(16, 'x')};
  EXPECT_TRUE(ValidateSpec(s).ok());
  s = Valid();
  s.cwd_fallbacks = {"relative"};
  EXPECT_NE(ValidateSpec(s).message().find("working directory fallback"), std::string::npos);
  s = Valid();
  s.namespaces.pid = false;
  s.as_pid_1 = true;
  EXPECT_NE(ValidateSpec(s).message().find("PID 1"), std::string::npos);
  s.namespaces.pid = true;
  EXPECT_TRUE(ValidateSpec(s).ok());
  s = Valid();
  s.inherited_fds = {3, 7};
  EXPECT_TRUE(ValidateSpec(s).ok());
  s.inherited_fds = {2};
  EXPECT_NE(ValidateSpec(s).message().find("inherited fd 2"), std::string::npos);
  s.inherited_fds = {5, 5};
  EXPECT_NE(ValidateSpec(s).message().find("listed once"), std::string::npos);
}

TEST(DefaultSpec, BaselineShape) {
  SandboxSpec s = Valid();
  EXPECT_TRUE(s.readonly_root);
  EXPECT_EQ(s.seccomp, seccomp::Policy::kNoNetwork);
  EXPECT_TRUE(s.namespaces.net);
  ASSERT_FALSE(s.mounts.empty());
  EXPECT_EQ(s.mounts.front().dest, "/usr");
  EXPECT_TRUE(s.mounts.front().readonly);
  bool has_proc = false, has_tmp = false, has_passwd = false;
  for (const rootfs::MountOp& op : s.mounts) {
    has_proc |= op.kind == rootfs::MountKind::kProc;
    if (op.kind == rootfs::MountKind::kTmpfs && op.dest == "/tmp") {
      has_tmp = true;
      EXPECT_EQ(op.size_bytes, kDefaultTmpSize);
    }
    if (op.dest == "/etc/passwd") {
      has_passwd = true;
      EXPECT_NE(op.data.find("sandbox:x:1000:1000"), std::string::npos);
    }
    // Nothing of the host's /etc but the two derived, read-only entries.
    if (op.kind == rootfs::MountKind::kBind && op.source.rfind("/etc", 0) == 0) {
      EXPECT_TRUE(op.readonly);
      EXPECT_TRUE(op.source == "/etc/ld.so.cache" || op.source == "/etc/alternatives") << op.source;
    }
  }
  EXPECT_TRUE(has_proc && has_tmp && has_passwd);
  // The environment is rebuilt, never inherited.
  EXPECT_EQ(s.env.size(), 3u);
}

TEST(DefaultSpec, WorkspaceBecomesCwdAndHome) {
  DefaultsOptions o;
  o.workspace = "/tmp";
  absl::StatusOr<SandboxSpec> s = DefaultSpec(o);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->cwd, "/workspace");
  EXPECT_EQ(s->mounts.back().dest, "/workspace");
  EXPECT_TRUE(s->mounts.back().idmap_owner);
  EXPECT_FALSE(s->mounts.back().readonly);
  o.workspace = "/nonexistent/cubicle-ws";
  absl::StatusOr<SandboxSpec> missing = DefaultSpec(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("ENOENT"), std::string::npos);
}

TEST(ExecResult, ShellStatusConvention) {
  ExecResult r;
  r.reason = ExitReason::kExited;
  r.exit_code = 3;
  EXPECT_EQ(r.ShellStatus(), 3);
  r.reason = ExitReason::kSignaled;
  r.signal = 9;
  EXPECT_EQ(r.ShellStatus(), 137);
  r.reason = ExitReason::kTimeout;
  EXPECT_EQ(r.ShellStatus(), 124);
  r.reason = ExitReason::kSetupFailed;
  EXPECT_EQ(r.ShellStatus(), 125);
}

}  // namespace
}  // namespace cubicle::runtime
