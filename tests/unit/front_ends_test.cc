// DESIGN §3: every front end produces a SandboxSpec, and a bwrap argv and a
// JSON profile that mean the same thing yield equal specs.
//
// The two front ends share a vocabulary: the namespaces, the ids inside,
// the hostname, binds (read-only, read-write, optional), tmpfs mounts with
// a size and a mode, and the environment. Each also has words the other
// lacks, and those mean different sandboxes on purpose: bwrap's own /proc
// and /dev, kept capabilities, a writable root, supplied seccomp programs
// and bwrap's PWD; a profile's base root (cubicle's masked /proc, generated
// /etc files), limits, breakers and pools. This test spells one sandbox in
// the shared vocabulary both ways and requires the shared fields of the
// two specs to be equal, field by field, so that neither front end can
// drift from the other's meaning of a shared word.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "cli/bwrap_args.h"
#include "rpc/config.h"
#include "runtime/defaults.h"
#include "runtime/spec.h"

namespace cubicle {
namespace {

// What both front ends say about a sandbox, without the one field that only
// records which front end spoke: bwrap_style, on the kinds where it changes
// nothing that is made (rootfs/mount_plan.h). On a bind it only allows a
// bind over "/" and has cubicle bwrap resolve the source with realpath at
// launch; the builder binds both the same way. On a tmpfs it is unused.
struct Shared {
  namespaces::NamespaceSet namespaces;
  uid_t uid;
  gid_t gid;
  std::string hostname;
  rootfs::MountPlan mounts;
  std::vector<std::string> env;
  bool operator==(const Shared&) const = default;
};

void PrintTo(const Shared& s, std::ostream* os) {
  const namespaces::NamespaceSet& n = s.namespaces;
  *os << "namespaces user " << n.user << " mount " << n.mount << " pid " << n.pid << " net " << n.net << " uts "
      << n.uts << " ipc " << n.ipc << " cgroup " << n.cgroup << "; uid " << s.uid << " gid " << s.gid
      << " hostname " << s.hostname << "\n";
  for (const rootfs::MountOp& op : s.mounts) {
    *os << "  " << rootfs::MountKindName(op.kind) << " " << op.source << " -> " << op.dest << " ro=" << op.readonly
        << " optional=" << op.optional << " devices=" << op.devices << " idmap=" << op.idmap_owner
        << " bwrap_style=" << op.bwrap_style << " size=" << op.size_bytes << " mode=" << std::oct << op.mode
        << " parent_mode=" << op.parent_mode << std::dec << " data=" << op.data.size() << " label=" << op.selinux_context << "\n";
  }
  for (const std::string& e : s.env) *os << "  env " << e << "\n";
}

Shared SharedPart(const runtime::SandboxSpec& spec, size_t first_mount) {
  Shared s{spec.namespaces, spec.uid, spec.gid, spec.hostname, {}, {}};
  s.mounts.assign(spec.mounts.begin() + static_cast<std::ptrdiff_t>(first_mount), spec.mounts.end());
  for (rootfs::MountOp& op : s.mounts) {
    if (op.kind == rootfs::MountKind::kBind || op.kind == rootfs::MountKind::kTmpfs) op.bwrap_style = false;
    // bwrap's own rule, and a difference on purpose: it makes the missing
    // parents of a bind 0700 (rootfs/mount_plan.h), a profile 0755. No
    // profile word says it, so it is not part of the shared vocabulary.
    op.parent_mode = 0755;
  }
  for (const std::string& e : spec.env) {
    if (!absl::StartsWith(e, "PWD=")) s.env.push_back(e);  // bwrap's own: it sets PWD for the command
  }
  return s;
}

TEST(FrontEnds, ABwrapArgvAndAProfileThatMeanTheSameYieldTheSameSharedSpec) {
  const std::string profile_json = R"({
    "profiles": {"same": {
      "hostname": "box", "uid": 1000, "gid": 1000,
      "binds": [{"source": "/usr/share", "dest": "/opt/share"},
                {"source": "/etc", "dest": "/data", "readonly": false},
                {"source": "/nonexistent-cubicle-source", "dest": "/maybe", "optional": true}],
      "tmpfs": [{"dest": "/scratch", "size": "16M", "mode": "0700"}],
      "env": {"A": "1"}
    }}})";
  absl::StatusOr<rpc::DaemonConfig> config = rpc::ParseConfig(profile_json);
  ASSERT_TRUE(config.ok()) << config.status();
  const runtime::SandboxSpec& from_profile = config->profiles.at("same").spec;
  absl::StatusOr<runtime::SandboxSpec> base = runtime::DefaultSpec({});
  ASSERT_TRUE(base.ok()) << base.status();

  // The same in bwrap's words: the profile's default environment spelled
  // out, since bwrap inherits the caller's unless told otherwise.
  cli::BwrapHost host;
  host.uid = 0;
  host.gid = 0;
  host.environ = {"TERM=xterm"};
  absl::StatusOr<cli::BwrapInvocation> from_bwrap = cli::ParseBwrapArgs(
      {"--unshare-all", "--unshare-user", "--uid", "1000", "--gid", "1000", "--hostname", "box",
       "--ro-bind", "/usr/share", "/opt/share", "--bind", "/etc", "/data",
       "--ro-bind-try", "/nonexistent-cubicle-source", "/maybe",
       "--size", "16777216", "--perms", "0700", "--tmpfs", "/scratch",
       "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/tmp",
       "--setenv", "LANG", "C.UTF-8", "--setenv", "A", "1", "true"},
      host);
  ASSERT_TRUE(from_bwrap.ok()) << from_bwrap.status();

  EXPECT_EQ(SharedPart(from_bwrap->spec, 0), SharedPart(from_profile, base->mounts.size()));
}

TEST(FrontEnds, TheComparisonSeesADifferenceInAnySharedWord) {
  // The same pair with one word changed on the bwrap side each time: the
  // shared parts must differ, or the test above could not fail.
  const std::string profile_json =
      R"({"profiles": {"p": {"hostname": "box", "binds": [{"source": "/usr/share", "dest": "/opt/share"}],
                            "env": {"A": "1"}}}})";
  absl::StatusOr<rpc::DaemonConfig> config = rpc::ParseConfig(profile_json);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<runtime::SandboxSpec> base = runtime::DefaultSpec({});
  ASSERT_TRUE(base.ok());
  const Shared want = SharedPart(config->profiles.at("p").spec, base->mounts.size());
  const std::vector<std::string> same = {
      "--unshare-all", "--unshare-user", "--uid", "1000", "--gid", "1000", "--hostname", "box",
      "--ro-bind", "/usr/share", "/opt/share", "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin",
      "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8", "--setenv", "A", "1", "true"};
  cli::BwrapHost host;
  absl::StatusOr<cli::BwrapInvocation> got = cli::ParseBwrapArgs(same, host);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(SharedPart(got->spec, 0), want);
  for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"--ro-bind", "--bind"}, {"box", "other"}, {"C.UTF-8", "C"}, {"1000", "1001"}, {"--unshare-all", "--unshare-uts"}}) {
    std::vector<std::string> changed = same;
    for (std::string& a : changed) {
      if (a == from) {
        a = to;
        break;
      }
    }
    got = cli::ParseBwrapArgs(changed, host);
    ASSERT_TRUE(got.ok()) << from << " -> " << to << ": " << got.status();
    EXPECT_NE(SharedPart(got->spec, 0), want) << from << " -> " << to;
  }
}

}  // namespace
}  // namespace cubicle
