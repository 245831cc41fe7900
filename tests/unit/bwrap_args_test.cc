// The bubblewrap parser: argv (plus what it reads from the host) to a
// SandboxSpec and bwrap's outside-the-sandbox duties. No syscalls: the
// host is a value, and fds are read through a fake.
#include "cli/bwrap_args.h"

#include <linux/capability.h>

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "runtime/spec.h"

namespace cubicle::cli {
namespace {

using rootfs::MountKind;
using Action = BwrapInvocation::Action;

constexpr uint64_t kHostCaps = 0x000001fffeffffffULL;  // a root without CAP_SYS_RESOURCE
constexpr uint64_t kAllCaps = 0x000001ffffffffffULL;    // CAP_CHOWN .. CAP_CHECKPOINT_RESTORE
constexpr uint64_t Bit(int cap) { return uint64_t{1} << cap; }

struct FakeHost {
  std::map<int, std::string> fds;
  BwrapHost host;
  explicit FakeHost(uid_t uid = 0) {
    host.uid = uid;
    host.gid = uid;
    host.effective_caps = uid == 0 ? kHostCaps : 0;
    host.environ = {"PATH=/usr/bin:/bin", "HOME=/home/me", "TERM=xterm"};
    host.cwd = "/home/me/project";
    host.read_fd = [this](int fd) -> absl::StatusOr<std::string> {
      auto it = fds.find(fd);
      if (it == fds.end()) return absl::InvalidArgumentError("Bad file descriptor");
      return it->second;
    };
  }
};

absl::StatusOr<BwrapInvocation> Parse(std::vector<std::string> args, const FakeHost& fake = FakeHost()) {
  return ParseBwrapArgs(args, fake.host);
}

// The parse must fail with exactly bwrap's message.
void ExpectDie(std::vector<std::string> args, const std::string& message, const FakeHost& fake = FakeHost()) {
  absl::StatusOr<BwrapInvocation> got = ParseBwrapArgs(args, fake.host);
  ASSERT_FALSE(got.ok()) << "accepted: " << ::testing::PrintToString(args);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(got.status().message(), message);
}

std::string EnvValue(const runtime::SandboxSpec& spec, const std::string& name) {
  for (const std::string& kv : spec.env) {
    if (kv.rfind(name + "=", 0) == 0) return kv.substr(name.size() + 1);
  }
  return "<unset>";
}

TEST(BwrapArgs, NoArgumentsIsAUsageError) {
  absl::StatusOr<BwrapInvocation> got = Parse({});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->action, Action::kUsage);
}

TEST(BwrapArgs, OptionsWithoutACommandIsAUsageError) {
  absl::StatusOr<BwrapInvocation> got = Parse({"--unshare-pid"});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->action, Action::kUsage);
  got = Parse({"--unshare-pid", "--"});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->action, Action::kUsage);
}

TEST(BwrapArgs, HelpAndVersionStopTheParse) {
  EXPECT_EQ(Parse({"--help", "--bogus"})->action, Action::kHelp);
  EXPECT_EQ(Parse({"--version"})->action, Action::kVersion);
  EXPECT_TRUE(absl::StrContains(BwrapUsage("bwrap"), "usage: bwrap [OPTIONS...] [--] COMMAND [ARGS...]"));
  EXPECT_TRUE(absl::StrContains(BwrapUsage("bwrap"), "--tmp-overlay"));
}

TEST(BwrapArgs, CommandStartsAtTheFirstNonOptionOrAfterDoubleDash) {
  EXPECT_EQ(Parse({"true", "--unshare-pid"})->spec.argv, (std::vector<std::string>{"true", "--unshare-pid"}));
  EXPECT_EQ(Parse({"--", "--weird-name", "x"})->spec.argv, (std::vector<std::string>{"--weird-name", "x"}));
}

TEST(BwrapArgs, UnknownOptionsAndMissingValues) {
  ExpectDie({"--bogus", "true"}, "Unknown option --bogus");
  ExpectDie({"--bind", "/usr"}, "--bind takes two arguments");
  ExpectDie({"--chdir"}, "--chdir takes one argument");
  ExpectDie({"--tmpfs"}, "--tmpfs takes an argument");
  ExpectDie({"--setenv", "A"}, "--setenv takes two arguments");
}

TEST(BwrapArgs, FdArgumentsAreNonNegativeDecimals) {
  ExpectDie({"--info-fd", "x", "true"}, "Invalid fd: x");
  ExpectDie({"--sync-fd", "-1", "true"}, "Invalid fd: -1");
  ExpectDie({"--block-fd", "", "true"}, "Invalid fd: ");
  ExpectDie({"--json-status-fd", "3x", "true"}, "Invalid fd: 3x");
  absl::StatusOr<BwrapInvocation> got = Parse({"--info-fd", "7", "--json-status-fd", "8", "--sync-fd", "9",
                                               "--block-fd", "10", "true"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->info_fd, 7);
  EXPECT_EQ(got->json_status_fd, 8);
  EXPECT_EQ(got->sync_fd, 9);
  EXPECT_EQ(got->block_fd, 10);
  // Closed before the command, as bwrap closes them (--sync-fd by its PID 1).
  EXPECT_EQ(got->option_fds, (std::vector<int>{7, 8, 10, 9}));
}

// bwrap leaves some option fds open for the command: the namespace fds, the
// --userns-block-fd, and --sync-fd with --as-pid-1. Failed before: every fd
// an option named was closed.
TEST(BwrapArgs, TheFdsBwrapLeavesOpenReachTheCommand) {
  absl::StatusOr<BwrapInvocation> got = Parse({"--unshare-user", "--info-fd", "4", "--userns-block-fd", "5", "true"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->option_fds, std::vector<int>{4});
  got = Parse({"--userns", "3", "--userns2", "6", "--pidns", "7", "true"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->option_fds, std::vector<int>{});
  got = Parse({"--unshare-pid", "--as-pid-1", "--sync-fd", "8", "--block-fd", "9", "true"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->option_fds, std::vector<int>{9});
  EXPECT_EQ(got->sync_fd, 8);
}

// --pidns naming the caller's own pid namespace is no join at all, and its
// --proc is the host's (bwrap, as root without a user namespace, mounts a
// procfs of that same namespace). Failed before: joined, and --proc failed.
TEST(BwrapArgs, PidnsNamingTheCallersOwnIsNoJoin) {
  FakeHost fake;
  fake.host.is_own_pid_namespace = [](int fd) { return fd == 3; };
  absl::StatusOr<BwrapInvocation> got = Parse({"--pidns", "3", "--proc", "/proc", "true"}, fake);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->spec.join_pidns.has_value());
  ASSERT_EQ(got->spec.mounts.size(), 1u);
  EXPECT_EQ(got->spec.mounts[0].source, "/proc");
  EXPECT_TRUE(got->spec.mounts[0].noexec) << "as bwrap's new procfs";
  EXPECT_FALSE(Parse({"--proc", "/proc", "true"}, fake)->spec.mounts[0].noexec) << "bwrap binds the host's as is";
  got = Parse({"--pidns", "3", "--unshare-pid", "--proc", "/proc", "true"}, fake);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->spec.join_pidns.has_value());
  EXPECT_TRUE(got->spec.namespaces.pid);
  EXPECT_EQ(got->spec.mounts[0].source, "");  // a new procfs of the new namespace
  // Another pid namespace is joined; so is the own one with --userns (the
  // kernel refuses it there, in bwrap's words).
  EXPECT_EQ(Parse({"--pidns", "4", "true"}, fake)->spec.join_pidns, 4);
  EXPECT_EQ(Parse({"--userns", "5", "--pidns", "3", "true"}, fake)->spec.join_pidns, 3);
}

// The out-of-band opt-in to bwrap's exact root behaviour: as root without
// --unshare-user or --userns, no user namespace at all; otherwise, and by
// default, nothing changes. The switch never reaches the command.
TEST(BwrapArgs, TheHostRootOptInDropsTheUserNamespaceOnlyWhereBwrapHasNone) {
  FakeHost fake;
  fake.host.environ.push_back("CUBICLE_BWRAP_HOST_ROOT=1");
  absl::StatusOr<BwrapInvocation> plain = Parse({"true"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->spec.host_user_namespace);
  EXPECT_TRUE(plain->spec.map_all_host_ids) << "the default stays the safer user namespace";
  EXPECT_EQ(Parse({"true"}, fake)->spec.host_user_namespace, false) << "the environment alone is not the opt-in";
  fake.host.host_root_opt_in = true;
  absl::StatusOr<BwrapInvocation> got = Parse({"--proc", "/proc", "true"}, fake);
  ASSERT_TRUE(got.ok()) << got.status();
  const runtime::SandboxSpec& s = got->spec;
  EXPECT_TRUE(s.host_user_namespace);
  EXPECT_FALSE(s.namespaces.user);
  EXPECT_FALSE(s.map_all_host_ids);
  EXPECT_FALSE(s.host_uid.has_value());
  EXPECT_EQ(EnvValue(s, "CUBICLE_BWRAP_HOST_ROOT"), "<unset>");
  EXPECT_TRUE(runtime::ValidateSpec(s).ok()) << runtime::ValidateSpec(s);
  // Where bwrap makes or joins a user namespace, the opt-in changes nothing.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--unshare-user", "true"}, {"--unshare-all", "true"}, {"--userns", "3", "true"}}) {
    got = Parse(args, fake);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_FALSE(got->spec.host_user_namespace) << ::testing::PrintToString(args);
  }
  // Rootless bwrap always has a user namespace.
  FakeHost user(1000);
  user.host.host_root_opt_in = true;
  EXPECT_FALSE(Parse({"true"}, user)->spec.host_user_namespace);
}

// bwrap calls setsid only for --new-session, in the process that then forks
// its PID 1 where it has one: the command is that PID 1's session member,
// not its leader. cubicle's init calls it then. Failed before: the payload
// always made itself the leader.
TEST(BwrapArgs, NewSessionIsInitsWhereBwrapHasAPid1) {
  struct Want {
    std::vector<std::string> args;
    bool payload, init;
  };
  for (const Want& w : std::vector<Want>{
           {{"true"}, false, false},
           {{"--unshare-pid", "true"}, false, false},
           {{"--new-session", "true"}, true, false},
           {{"--new-session", "--unshare-pid", "true"}, false, true},
           {{"--new-session", "--sync-fd", "3", "true"}, false, true},
           {{"--new-session", "--lock-file", "/x", "true"}, false, true},
           {{"--new-session", "--unshare-pid", "--as-pid-1", "true"}, true, false}}) {
    absl::StatusOr<BwrapInvocation> got = Parse(w.args);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->spec.new_session, w.payload) << ::testing::PrintToString(w.args);
    EXPECT_EQ(got->spec.init_new_session, w.init) << ::testing::PrintToString(w.args);
  }
}

TEST(BwrapArgs, DefaultsAreBubblewrapsNotCubicles) {
  absl::StatusOr<BwrapInvocation> got = Parse({"true"});
  ASSERT_TRUE(got.ok()) << got.status();
  const runtime::SandboxSpec& spec = got->spec;
  // Only a mount namespace (and cubicle's user namespace, see below).
  EXPECT_FALSE(spec.namespaces.pid);
  EXPECT_FALSE(spec.namespaces.net);
  EXPECT_FALSE(spec.namespaces.ipc);
  EXPECT_FALSE(spec.namespaces.uts);
  EXPECT_FALSE(spec.namespaces.cgroup);
  EXPECT_TRUE(spec.namespaces.mount);
  EXPECT_TRUE(spec.namespaces.user);
  EXPECT_TRUE(spec.map_all_host_ids);  // root without --unshare-user: ids as the host's
  EXPECT_FALSE(spec.readonly_root);
  EXPECT_FALSE(spec.set_hostname);
  EXPECT_FALSE(spec.new_session);
  EXPECT_FALSE(spec.die_with_parent);
  EXPECT_EQ(spec.seccomp, seccomp::Policy::kNone);
  EXPECT_TRUE(spec.mounts.empty());
  // The environment is inherited, PWD is the sandbox's cwd.
  EXPECT_EQ(EnvValue(spec, "TERM"), "xterm");
  EXPECT_EQ(spec.cwd, "/home/me/project");
  EXPECT_EQ(EnvValue(spec, "PWD"), "/home/me/project");
  EXPECT_EQ(spec.cwd_fallbacks, (std::vector<std::string>{"/home/me", "/"}));
  EXPECT_EQ(got->info_namespaces, (std::vector<std::string>{"mnt"}));
}

TEST(BwrapArgs, UnshareAllAndShareNet) {
  absl::StatusOr<BwrapInvocation> got = Parse({"--unshare-all", "true"});
  ASSERT_TRUE(got.ok());
  const auto& ns = got->spec.namespaces;
  EXPECT_TRUE(ns.pid && ns.net && ns.ipc && ns.uts && ns.cgroup);
  EXPECT_FALSE(got->spec.map_all_host_ids);  // user-try: a real user namespace
  EXPECT_EQ(got->info_namespaces, (std::vector<std::string>{"cgroup", "ipc", "mnt", "net", "pid", "uts"}));
  got = Parse({"--unshare-all", "--share-net", "true"});
  EXPECT_FALSE(got->spec.namespaces.net);
  // --share-net before --unshare-all is overridden by it, as in bwrap.
  got = Parse({"--share-net", "--unshare-all", "true"});
  EXPECT_TRUE(got->spec.namespaces.net);
}

TEST(BwrapArgs, UnshareUserTryFallsBackWhenUserNamespacesAreOff) {
  FakeHost off;
  off.host.user_namespaces_enabled = false;
  EXPECT_TRUE(Parse({"--unshare-user-try", "true"}, off)->spec.map_all_host_ids);
  EXPECT_FALSE(Parse({"--unshare-user-try", "true"})->spec.map_all_host_ids);
}

TEST(BwrapArgs, IdsNeedAUserNamespace) {
  ExpectDie({"--uid", "5", "true"}, "Specifying --uid requires --unshare-user or --userns");
  ExpectDie({"--gid", "5", "true"}, "Specifying --gid requires --unshare-user or --userns");
  ExpectDie({"--unshare-user", "--uid", "abc", "true"}, "Invalid uid: abc");
  ExpectDie({"--unshare-user", "--gid", "-3", "true"}, "Invalid gid: -3");
  // bwrap reads the next word as the value, whatever it is.
  ExpectDie({"--uid", "true"}, "Invalid uid: true");
  absl::StatusOr<BwrapInvocation> got = Parse({"--unshare-user", "--uid", "1000", "--gid", "1001", "true"});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->spec.uid, 1000u);
  EXPECT_EQ(got->spec.gid, 1001u);
  EXPECT_EQ(got->spec.host_uid, 0u);  // bwrap maps the sandbox id to the caller's
  EXPECT_EQ(got->spec.host_gid, 0u);
  EXPECT_FALSE(got->spec.map_all_host_ids);
  // The caller's own ids need no user namespace.
  EXPECT_TRUE(Parse({"--uid", "0", "--gid", "0", "true"}).ok());
}

TEST(BwrapArgs, RootlessImpliesAUserNamespace) {
  FakeHost user(1000);
  absl::StatusOr<BwrapInvocation> got = Parse({"--uid", "7", "true"}, user);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->spec.map_all_host_ids);
  EXPECT_EQ(got->spec.uid, 7u);
  EXPECT_EQ(got->spec.host_uid, 1000u);
  // Nothing to keep: an unprivileged caller starts with no capabilities.
  EXPECT_EQ(got->spec.capabilities->keep, 0u);
  EXPECT_EQ(got->spec.capabilities->bounding, 0u);
}

TEST(BwrapArgs, ConflictsBwrapRejects) {
  ExpectDie({"--hostname", "x", "true"}, "Specifying --hostname requires --unshare-uts");
  ExpectDie({"--as-pid-1", "true"}, "Specifying --as-pid-1 requires --unshare-pid");
  ExpectDie({"--unshare-pid", "--as-pid-1", "--lock-file", "/x", "true"},
            "Specifying --as-pid-1 and --lock-file is not permitted");
  ExpectDie({"--userns-block-fd", "3", "true"}, "--userns-block-fd requires --unshare-user");
  ExpectDie({"--unshare-user", "--userns-block-fd", "3", "true"}, "--userns-block-fd requires --info-fd");
  ExpectDie({"--disable-userns", "true"}, "--disable-userns requires --unshare-user");
  // --unshare-all's user namespace is only "try": bwrap still refuses.
  ExpectDie({"--unshare-all", "--disable-userns", "true"}, "--disable-userns requires --unshare-user");
  ExpectDie({"--userns", "3", "--unshare-user", "true"}, "--userns not compatible --unshare-user");
  ExpectDie({"--userns", "3", "--unshare-user-try", "true"}, "--userns not compatible --unshare-user-try");
  ExpectDie({"--unshare-user", "--disable-userns", "--info-fd", "4", "--userns-block-fd", "3", "true"},
            "--disable-userns is not compatible with  --userns-block-fd");
  ExpectDie({"--bind-fd", "3"}, "--bind-fd takes two arguments");
  ExpectDie({"--ro-bind-fd", "3"}, "--bind-fd takes two arguments");
}

TEST(BwrapArgs, JoinedNamespacesReplaceNewOnes) {
  // --userns: no new user namespace, no maps of cubicle's; the capabilities
  // are computed as in a new one (root's own set bounds them).
  absl::StatusOr<BwrapInvocation> got = Parse({"--userns", "3", "--proc", "/proc", "true"});
  ASSERT_TRUE(got.ok()) << got.status();
  const runtime::SandboxSpec& s = got->spec;
  EXPECT_FALSE(s.namespaces.user);
  EXPECT_EQ(s.join_userns, 3);
  EXPECT_FALSE(s.join_pidns.has_value());
  EXPECT_FALSE(s.map_all_host_ids);
  EXPECT_FALSE(s.host_uid.has_value());
  ASSERT_TRUE(s.capabilities.has_value());
  EXPECT_EQ(s.capabilities->bounding, kHostCaps);
  EXPECT_EQ(s.capabilities->keep, kHostCaps);
  EXPECT_EQ(got->option_fds, std::vector<int>{}) << "bwrap leaves the namespace fd to the command";
  // Without --unshare-pid the host's procfs is bound, as before.
  ASSERT_EQ(s.mounts.size(), 1u);
  EXPECT_EQ(s.mounts[0].source, "/proc");
  EXPECT_TRUE(runtime::ValidateSpec(s).ok()) << runtime::ValidateSpec(s);

  // --uid/--gid need --unshare-user or --userns; with --userns they pass.
  got = Parse({"--userns", "3", "--uid", "5", "--gid", "6", "true"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->spec.uid, 5u);
  EXPECT_EQ(got->spec.gid, 6u);

  // A rootless caller with --userns makes no user namespace of its own.
  got = Parse({"--userns", "3", "true"}, FakeHost(1000));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->spec.namespaces.user);
  EXPECT_EQ(got->spec.capabilities->keep, 0u);

  // --pidns: joined, a new one under it only with --unshare-pid; a joined
  // pid namespace gets a procfs of its own.
  got = Parse({"--userns", "3", "--pidns", "4", "--proc", "/proc", "true"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->spec.join_pidns, 4);
  EXPECT_FALSE(got->spec.namespaces.pid);
  ASSERT_EQ(got->spec.mounts.size(), 1u);
  EXPECT_EQ(got->spec.mounts[0].kind, MountKind::kProc);
  EXPECT_NE(got->spec.mounts[0].source, "/proc");
  EXPECT_EQ(got->info_namespaces, (std::vector<std::string>{"mnt"})) << "bwrap lists only the new ones";
  got = Parse({"--userns", "3", "--pidns", "4", "--unshare-pid", "true"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->spec.namespaces.pid);
  EXPECT_EQ(got->info_namespaces, (std::vector<std::string>{"mnt", "pid"}));

  // --userns2: entered after the setup, with a new or a joined namespace.
  got = Parse({"--unshare-user", "--userns2", "5", "true"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->spec.namespaces.user);
  EXPECT_EQ(got->spec.join_userns_after_setup, 5);
  EXPECT_TRUE(runtime::ValidateSpec(got->spec).ok()) << runtime::ValidateSpec(got->spec);
}

TEST(BwrapArgs, JoinedNamespaceFdsMustBeNumbers) {
  ExpectDie({"--userns", "x", "true"}, "Invalid fd: x");
  ExpectDie({"--pidns", "-1", "true"}, "Invalid fd: -1");
  ExpectDie({"--userns2"}, "--userns2 takes an argument");
  ExpectDie({"--userns", "3", "--disable-userns", "--unshare-user", "true"}, "--userns not compatible --unshare-user");
}

TEST(BwrapArgs, LabelsWithoutSelinuxGetBwrapsAnswer) {
  // SELinux labels: bwrap's own answer on a host without SELinux, at once
  // (before a later bad option is seen).
  ExpectDie({"--exec-label", "x", "true"}, "labeling not supported on this system");
  ExpectDie({"--file-label", "x", "--bogus", "true"}, "labeling not supported on this system");
}

// A host whose SELinux policy knows the contexts ending in "_t:s0".
FakeHost SelinuxHost() {
  FakeHost fake;
  fake.host.check_selinux_label = [](const std::string& label) {
    if (absl::EndsWith(label, "_t:s0")) return absl::OkStatus();
    return absl::InvalidArgumentError(label + ": Invalid argument");
  };
  return fake;
}

TEST(BwrapArgs, LabelsWithSelinuxAreCheckedThenApplied) {
  FakeHost fake = SelinuxHost();
  absl::StatusOr<BwrapInvocation> got = ParseBwrapArgs(
      {"--exec-label", "u:r:sandbox_t:s0", "--file-label", "u:object_r:sandbox_file_t:s0", "--tmpfs", "/tmp",
       "--dev", "/dev", "--dir", "/d", "--ro-bind", "/usr", "/usr", "true"},
      fake.host);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->spec.exec_label, "u:r:sandbox_t:s0");
  // The file label goes on the tmpfs mounts bwrap makes (--tmpfs, --dev),
  // not on binds or directories.
  ASSERT_EQ(got->spec.mounts.size(), 4u);
  EXPECT_EQ(got->spec.mounts[0].selinux_context, "u:object_r:sandbox_file_t:s0");
  EXPECT_EQ(got->spec.mounts[1].selinux_context, "u:object_r:sandbox_file_t:s0");
  EXPECT_EQ(got->spec.mounts[2].selinux_context, "");
  EXPECT_EQ(got->spec.mounts[3].selinux_context, "");
  // A context the policy does not know: bwrap's "invalid label".
  ExpectDie({"--exec-label", "u:r:nonsense", "true"}, "invalid label u:r:nonsense: Invalid argument", fake);
  ExpectDie({"--file-label", "bad", "true"}, "invalid label bad: Invalid argument", fake);
  // Without the options nothing is labelled.
  got = ParseBwrapArgs({"--tmpfs", "/tmp", "true"}, fake.host);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->spec.exec_label, "");
  EXPECT_EQ(got->spec.mounts[0].selinux_context, "");
}

TEST(BwrapArgs, MountsKeepArgvOrderAndBwrapFlags) {
  FakeHost fake;
  fake.fds[5] = "payload";
  absl::StatusOr<BwrapInvocation> got =
      Parse({"--ro-bind", "/usr", "/usr", "--bind", "/src", "work", "--dev-bind-try", "/dev", "/dev",
             "--tmpfs", "/tmp", "--symlink", "usr/bin", "/bin", "--dir", "/a//b/", "--remount-ro", "/usr",
             "--mqueue", "/dev/mqueue", "--file", "5", "/etc/x", "--bind-fd", "6", "/fdws", "true"},
            fake);
  ASSERT_TRUE(got.ok()) << got.status();
  const rootfs::MountPlan& m = got->spec.mounts;
  ASSERT_EQ(m.size(), 10u);
  EXPECT_EQ(m[0].kind, MountKind::kBind);
  EXPECT_TRUE(m[0].readonly);
  EXPECT_FALSE(m[0].devices);
  EXPECT_EQ(m[1].dest, "/work");  // relative: from the new root, as bwrap
  EXPECT_FALSE(m[1].readonly);
  EXPECT_TRUE(m[2].devices);
  EXPECT_TRUE(m[2].optional);
  EXPECT_EQ(m[3].kind, MountKind::kTmpfs);
  EXPECT_EQ(m[3].mode, 0755u);
  EXPECT_EQ(m[4].kind, MountKind::kSymlink);
  EXPECT_EQ(m[4].source, "usr/bin");
  EXPECT_EQ(m[5].dest, "/a/b");
  EXPECT_EQ(m[6].kind, MountKind::kRemountRo);
  EXPECT_EQ(m[7].kind, MountKind::kMqueue);
  EXPECT_EQ(m[8].kind, MountKind::kFile);
  EXPECT_EQ(m[8].data, "payload");
  EXPECT_EQ(m[8].mode, 0666u);
  EXPECT_EQ(m[9].source, "/proc/self/fd/6");
  for (const rootfs::MountOp& op : m) EXPECT_TRUE(op.bwrap_style);
  // Data fds are closed once read; a --bind-fd fd stays for the sandbox.
  EXPECT_EQ(got->consumed_fds, std::vector<int>{5});
}

TEST(BwrapArgs, DotDotInADestinationIsRefused) {
  absl::StatusOr<BwrapInvocation> got = Parse({"--bind", "/usr", "/a/../etc", "true"});
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::StrContains(got.status().message(), "'..'")) << got.status();
}

TEST(BwrapArgs, ProcIsNewWithAPidNamespaceElseTheHosts) {
  EXPECT_EQ(Parse({"--proc", "/proc", "true"})->spec.mounts[0].source, "/proc");
  EXPECT_EQ(Parse({"--proc", "/proc", "--unshare-pid", "true"})->spec.mounts[0].source, "");
}

TEST(BwrapArgs, PermsAndSizeApplyToTheNextOptionOnly) {
  FakeHost fake;
  fake.fds[3] = "d";
  fake.fds[4] = "e";
  absl::StatusOr<BwrapInvocation> got =
      Parse({"--perms", "0700", "--dir", "/d", "--dir", "/e", "--size", "4096", "--perms", "1777", "--tmpfs", "/t",
             "--bind-data", "3", "/b", "--perms", "0444", "--ro-bind-data", "4", "/r", "true"},
            fake);
  ASSERT_TRUE(got.ok()) << got.status();
  const rootfs::MountPlan& m = got->spec.mounts;
  EXPECT_EQ(m[0].mode, 0700u);
  EXPECT_EQ(m[1].mode, 0755u);
  EXPECT_EQ(m[2].mode, 01777u);
  EXPECT_EQ(m[2].size_bytes, 4096u);
  EXPECT_EQ(m[3].kind, MountKind::kBindData);
  EXPECT_EQ(m[3].mode, 0600u);  // bwrap's default for bind-data
  EXPECT_FALSE(m[3].readonly);
  EXPECT_EQ(m[4].mode, 0444u);
  EXPECT_TRUE(m[4].readonly);
}

TEST(BwrapArgs, PermsAndSizeErrors) {
  ExpectDie({"--perms", "9", "--dir", "/x", "true"}, "--perms takes an octal argument <= 07777");
  ExpectDie({"--perms", "10000", "--dir", "/x", "true"}, "--perms takes an octal argument <= 07777");
  ExpectDie({"--perms"}, "--perms takes an argument");
  ExpectDie({"--perms", "0700", "--perms", "0700", "--dir", "/x", "true"}, "--perms given twice for the same action");
  ExpectDie({"--size", "1", "--size", "2", "--tmpfs", "/x", "true"}, "--size given twice for the same action");
  ExpectDie({"--size", "-1", "--tmpfs", "/x", "true"}, "--size takes a non-zero number of bytes");
  EXPECT_EQ(Parse({"--size", "0x1000", "--tmpfs", "/x", "true"})->spec.mounts[0].size_bytes, 4096u);
  ExpectDie({"--perms", "0755", "--proc", "/proc", "true"}, "--perms must be followed by an option that creates a file");
  ExpectDie({"--size", "10", "--dir", "/x", "true"}, "--size must be followed by --tmpfs");
  ExpectDie({"--size", "0", "--tmpfs", "/x", "true"}, "--size takes a non-zero number of bytes");
  ExpectDie({"--size", "1k", "--tmpfs", "/x", "true"}, "--size takes a non-zero number of bytes");
  ExpectDie({"--chmod", "999", "/x", "true"}, "--chmod takes an octal argument <= 07777");
}

// bwrap checks a pending --perms/--size after each option is done, and the
// command (or "--") ends the options before that check: one left before
// the command is ignored and the command runs (0.8 and 0.11's source
// alike). Failed before: cubicle refused it.
TEST(BwrapArgs, APendingPermsOrSizeBeforeTheCommandIsIgnored) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--perms", "0750", "true"},
           {"--size", "4096", "--", "true"},
           {"--perms", "0700", "--size", "1", "true"},
           {"--dir", "/d", "--perms", "0700", "--", "true"}}) {
    absl::StatusOr<BwrapInvocation> got = Parse(args);
    ASSERT_TRUE(got.ok()) << ::testing::PrintToString(args) << ": " << got.status();
    EXPECT_EQ(got->action, Action::kRun);
    EXPECT_EQ(got->spec.argv, std::vector<std::string>{"true"});
  }
  // Nothing after it at all is bwrap's usage error, as with no command.
  EXPECT_EQ(Parse({"--perms", "0700"})->action, Action::kUsage);
  // An --args file that ends with --perms leaves it pending for the
  // option after --args, which must take it.
  FakeHost fake;
  fake.fds[3] = std::string("--perms\0" "0700", 12);
  ExpectDie({"--args", "3", "--dir", "/d", "true"}, "--perms must be followed by an option that creates a file",
            fake);
}

// The missing parents of a destination get bwrap's parent mode: 0755 less
// the group/other bits the op's mode lacks, and 0700 for ops without a mode
// (bwrap's zero-filled op). Failed before: every parent was 0755.
TEST(BwrapArgs, MissingParentsGetBwrapsParentMode) {
  FakeHost fake;
  // Filled in one go: assigning "f" to fds[3] and "g" to fds[4] makes g++ 12
  // at -O3 warn of an overlapping memcpy in std::string (a false -Wrestrict).
  fake.fds = {{3, "f"}, {4, "g"}};
  absl::StatusOr<BwrapInvocation> got = Parse(
      {"--perms", "0700", "--dir", "/a/b", "--perms", "0750", "--dir", "/c/d", "--perms", "0640", "--file", "3",
       "/e/f", "--dir", "/g/h", "--tmpfs", "/i/j", "--bind-data", "4", "/k/l", "--bind", "/usr", "/m/n",
       "--symlink", "x", "/o/p", "--dev", "/q/r", "--proc", "/s/t", "--chmod", "0700", "/a", "true"},
      fake);
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<uint32_t> parents;
  for (const rootfs::MountOp& op : got->spec.mounts) parents.push_back(op.parent_mode);
  EXPECT_EQ(parents, (std::vector<uint32_t>{0700, 0750, 0750, 0755, 0755, 0700, 0700, 0700, 0700, 0700, 0755}));
}

TEST(BwrapArgs, RepeatedSingleValueOptionsWarnAndTheLastWins) {
  absl::StatusOr<BwrapInvocation> got = Parse({"--chdir", "/a", "--chdir", "/b", "true"});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->spec.cwd, "/b");
  EXPECT_EQ(got->warnings, std::vector<std::string>{"Only the last --chdir option will take effect"});
  EXPECT_TRUE(Parse({"--chdir", "/a", "true"})->warnings.empty());
}

TEST(BwrapArgs, AsPid1AndLockFiles) {
  absl::StatusOr<BwrapInvocation> got = Parse({"--unshare-pid", "--as-pid-1", "true"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->spec.as_pid_1);
  got = Parse({"--lock-file", "run/lock", "--lock-file", "/a//b", "true"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->lock_files, (std::vector<std::string>{"/run/lock", "/a/b"}));
  EXPECT_FALSE(got->spec.as_pid_1);
}

TEST(BwrapArgs, Chmod) {
  absl::StatusOr<BwrapInvocation> got = Parse({"--tmpfs", "/t", "--chmod", "0700", "/t", "true"});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->spec.mounts[1].kind, MountKind::kChmod);
  EXPECT_EQ(got->spec.mounts[1].mode, 0700u);
}

TEST(BwrapArgs, Environment) {
  absl::StatusOr<BwrapInvocation> got =
      Parse({"--setenv", "A", "1", "--setenv", "A", "2", "--unsetenv", "TERM", "--chdir", "/w", "true"});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(EnvValue(got->spec, "A"), "2");
  EXPECT_EQ(EnvValue(got->spec, "TERM"), "<unset>");
  EXPECT_EQ(EnvValue(got->spec, "PWD"), "/w");
  EXPECT_EQ(got->spec.cwd, "/w");
  EXPECT_TRUE(got->spec.cwd_fallbacks.empty());  // an explicit --chdir must work or fail
  got = Parse({"--clearenv", "--setenv", "HOME", "/tmp", "true"});
  EXPECT_EQ(got->spec.env, (std::vector<std::string>{"HOME=/tmp", "PWD=/home/me/project"}));
  EXPECT_EQ(got->spec.cwd_fallbacks, (std::vector<std::string>{"/tmp", "/"}));
  ExpectDie({"--setenv", "A=B", "c", "true"}, "setenv failed: Invalid argument");
}

TEST(BwrapArgs, Capabilities) {
  // Root without flags keeps its own set, as bwrap does.
  auto caps = [](std::vector<std::string> args) { return *Parse(args)->spec.capabilities; };
  runtime::CapabilitySpec c = caps({"true"});
  EXPECT_EQ(c.keep, kHostCaps);
  EXPECT_EQ(c.bounding, kHostCaps);
  EXPECT_FALSE(c.exact);
  c = caps({"--cap-drop", "ALL", "true"});
  EXPECT_EQ(c.keep, 0u);
  EXPECT_EQ(c.bounding, kHostCaps);  // no new user namespace: bounding set untouched
  EXPECT_TRUE(c.exact);
  c = caps({"--unshare-user", "--cap-drop", "ALL", "true"});
  EXPECT_EQ(c.bounding, 0u);
  c = caps({"--cap-drop", "ALL", "--cap-add", "CAP_CHOWN", "--cap-add", "cap_kill", "--cap-add", "12", "true"});
  EXPECT_EQ(c.keep, Bit(CAP_CHOWN) | Bit(CAP_KILL) | Bit(12));
  c = caps({"--unshare-user", "--cap-drop", "CAP_SYS_ADMIN", "true"});
  EXPECT_EQ(c.keep, kHostCaps & ~Bit(CAP_SYS_ADMIN));
  // A new user namespace offers every capability.
  c = caps({"--unshare-user", "--cap-add", "ALL", "true"});
  EXPECT_EQ(c.keep, kAllCaps);
  EXPECT_EQ(c.bounding, kAllCaps);
  // Without one, asking beyond the host's set changes nothing (bwrap's
  // capset fails and, for root, is ignored).
  c = caps({"--cap-add", "CAP_SYS_RESOURCE", "true"});
  EXPECT_EQ(c.keep, kHostCaps);
  EXPECT_FALSE(c.exact);
  ExpectDie({"--cap-drop", "chown", "true"}, "unknown cap: chown");
  ExpectDie({"--cap-add", "CAP_NOPE", "true"}, "unknown cap: CAP_NOPE");
}

TEST(BwrapArgs, ArgsFdIsReadAsNulSeparatedArguments) {
  FakeHost fake;
  fake.fds[3] = std::string("--unshare-pid\0--setenv\0K\0v w\0", 29);
  absl::StatusOr<BwrapInvocation> got = Parse({"--args", "3", "true"}, fake);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->spec.namespaces.pid);
  EXPECT_EQ(EnvValue(got->spec, "K"), "v w");
  EXPECT_EQ(got->consumed_fds, std::vector<int>{3});
  // The file stops at its first non-option; the command comes from argv.
  fake.fds[4] = std::string("--unshare-net\0ignored\0--unshare-ipc\0", 35);
  got = Parse({"--args", "4", "true"}, fake);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->spec.namespaces.net);
  EXPECT_FALSE(got->spec.namespaces.ipc);
  EXPECT_EQ(got->spec.argv, std::vector<std::string>{"true"});
  fake.fds[6] = std::string("--version\0", 10);
  EXPECT_EQ(Parse({"--args", "6", "--bogus"}, fake)->action, Action::kVersion);
  fake.fds[5] = std::string("--args\0" "3\0", 9);
  ExpectDie({"--args", "5", "true"}, "--args not supported in arguments file", fake);
  ExpectDie({"--args", "9", "true"}, "Can't read --args data: Bad file descriptor", fake);
}

TEST(BwrapArgs, TooManyArguments) {
  std::vector<std::string> args(9001, "--unshare-pid");
  args.push_back("true");
  ExpectDie(args, "Exceeded maximum number of arguments 9000");
}

TEST(BwrapArgs, SeccompPrograms) {
  FakeHost fake;
  fake.fds[3] = std::string(16, 'a');
  fake.fds[4] = std::string(8, 'b');
  fake.fds[5] = std::string(7, 'c');
  absl::StatusOr<BwrapInvocation> got = Parse({"--add-seccomp-fd", "3", "--add-seccomp-fd", "4", "true"}, fake);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->spec.seccomp_programs, (std::vector<std::string>{std::string(16, 'a'), std::string(8, 'b')}));
  // Only the last --seccomp counts.
  got = Parse({"--seccomp", "3", "--seccomp", "4", "true"}, fake);
  EXPECT_EQ(got->spec.seccomp_programs, std::vector<std::string>{std::string(8, 'b')});
  ExpectDie({"--seccomp", "5", "true"}, "Invalid seccomp data, must be multiple of 8", fake);
  ExpectDie({"--seccomp", "9", "true"}, "Can't read seccomp data: Bad file descriptor", fake);
  ExpectDie({"--seccomp", "3", "--add-seccomp-fd", "4", "true"}, "--add-seccomp-fd cannot be combined with --seccomp",
            fake);
  ExpectDie({"--add-seccomp-fd", "4", "--seccomp", "3", "true"}, "--seccomp cannot be combined with --add-seccomp-fd",
            fake);
}

// bwrap closes each fd it reads: the same fd read twice is "Bad file
// descriptor" the second time, whichever options read it, in the order
// bwrap reads them: --args and --add-seccomp-fd as it parses, the data of
// --file, --bind-data, --ro-bind-data as it makes the files, the last
// --seccomp just before its exec (and earlier --seccomp fds not at all).
TEST(BwrapArgs, EachFdIsReadOnceInBubblewrapsOrder) {
  FakeHost fake;
  fake.fds[3] = std::string(16, 'a');
  fake.fds[4] = std::string(8, 'b');
  ExpectDie({"--add-seccomp-fd", "3", "--add-seccomp-fd", "3", "true"}, "Can't read seccomp data: Bad file descriptor",
            fake);
  ExpectDie({"--file", "3", "/a", "--file", "3", "/b", "true"}, "Can't write data to file /b: Bad file descriptor",
            fake);
  ExpectDie({"--file", "3", "/a", "--add-seccomp-fd", "3", "true"}, "Can't write data to file /a: Bad file descriptor",
            fake);
  ExpectDie({"--seccomp", "3", "--ro-bind-data", "3", "/a", "true"}, "Can't read seccomp data: Bad file descriptor",
            fake);
  ExpectDie({"--args", "3", "--args", "3", "true"}, "Can't read --args data: Bad file descriptor", fake);
  absl::StatusOr<BwrapInvocation> got = Parse({"--seccomp", "3", "--seccomp", "3", "true"}, fake);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->spec.seccomp_programs, std::vector<std::string>{std::string(16, 'a')});
  EXPECT_EQ(got->consumed_fds, std::vector<int>{3});
  got = Parse({"--seccomp", "3", "--seccomp", "4", "true"}, fake);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->option_fds, std::vector<int>{4}) << "fd 3 is never read, and the command's";
  got = Parse({"--bind-data", "4", "/b", "--file", "3", "/a", "true"}, fake);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->spec.mounts.size(), 2u);
  EXPECT_EQ(got->spec.mounts[0].data, std::string(8, 'b'));
  EXPECT_EQ(got->spec.mounts[1].data, std::string(16, 'a'));
}

// Programs the kernel's prctl(PR_SET_SECCOMP) refuses with EINVAL (empty,
// more than BPF_MAXINSNS instructions) get bwrap's words for that EINVAL.
TEST(BwrapArgs, SeccompProgramsTheKernelRefuses) {
  FakeHost fake;
  fake.fds[3] = "";
  fake.fds[4] = std::string(8 * 4097, 'x');
  fake.fds[5] = std::string(8 * 4096, 'x');
  ExpectDie({"--seccomp", "3", "true"}, kBwrapSeccompEinval, fake);
  ExpectDie({"--add-seccomp-fd", "5", "--add-seccomp-fd", "4", "true"}, kBwrapSeccompEinval, fake);
  EXPECT_TRUE(Parse({"--add-seccomp-fd", "5", "true"}, fake).ok());
}

TEST(BwrapArgs, Overlays) {
  absl::StatusOr<BwrapInvocation> got =
      Parse({"--overlay-src", "/a", "--overlay-src", "/b", "--ro-overlay", "/ro", "--overlay-src", "/c",
             "--tmp-overlay", "/tmp-ov", "--overlay-src", "/d", "--overlay", "/up", "/wk", "/rw", "true"});
  ASSERT_TRUE(got.ok()) << got.status();
  const rootfs::MountPlan& m = got->spec.mounts;
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].kind, MountKind::kOverlay);
  EXPECT_EQ(m[0].lower, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_TRUE(m[0].readonly);
  EXPECT_EQ(m[1].lower, std::vector<std::string>{"/c"});
  EXPECT_TRUE(m[1].upper.empty());
  EXPECT_FALSE(m[1].readonly);
  EXPECT_EQ(m[2].upper, "/up");
  EXPECT_EQ(m[2].work, "/wk");
  EXPECT_EQ(m[2].dest, "/rw");
  // Sources are host paths as given: relative ones, and any character
  // overlayfs's options would split on, are the runner's to resolve and
  // the builder's to escape.
  got = Parse({"--overlay-src", "rel/dir", "--overlay-src", "/a,b:c\\d", "--ro-overlay", "/ro", "true"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->spec.mounts[0].lower, (std::vector<std::string>{"rel/dir", "/a,b:c\\d"}));
  ExpectDie({"--overlay-src", "/a", "--ro-overlay", "/x", "true"}, "--ro-overlay requires at least two --overlay-src");
  ExpectDie({"--tmp-overlay", "/x", "true"}, "--tmp-overlay requires at least one --overlay-src");
  ExpectDie({"--overlay-src", "/a", "--dir", "/x", "true"},
            "--overlay-src must be followed by another --overlay-src or one of --overlay, --tmp-overlay, or "
            "--ro-overlay");
}

TEST(BwrapArgs, Argv0AndLevelPrefix) {
  absl::StatusOr<BwrapInvocation> got = Parse({"--argv0", "name", "--level-prefix", "/bin/prog", "x"});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->spec.argv0, "name");
  EXPECT_EQ(got->spec.argv, (std::vector<std::string>{"/bin/prog", "x"}));
  EXPECT_TRUE(got->level_prefix);
  ExpectDie({"--argv0", "", "true"}, "--argv0 requires a non-empty argument");
  ExpectDie({"--argv0", "a", "--argv0", "b", "true"}, "--argv0 used multiple times");
}

TEST(BwrapArgs, SessionParentHostnameAndUserns) {
  absl::StatusOr<BwrapInvocation> got =
      Parse({"--new-session", "--die-with-parent", "--unshare-uts", "--hostname", "box", "--unshare-user",
             "--disable-userns", "--assert-userns-disabled", "true"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->spec.new_session);
  EXPECT_TRUE(got->spec.die_with_parent);
  EXPECT_TRUE(got->spec.set_hostname);
  EXPECT_EQ(got->spec.hostname, "box");
  EXPECT_TRUE(got->spec.disable_userns);
  EXPECT_TRUE(got->spec.assert_userns_disabled);
}

TEST(BwrapArgs, TheRunnersArgvYieldsTheSpecItMeans) {
  FakeHost fake;
  fake.fds[3] = std::string(64, 'x');
  absl::StatusOr<BwrapInvocation> got = Parse(
      {"--die-with-parent", "--new-session", "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop",
       "ALL", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--dev", "/dev", "--tmpfs", "/tmp",
       "--proc", "/proc", "--ro-bind", "/dev/null", "/usr/bin/python3", "--bind", "/ws", "/workspace", "--chdir",
       "/workspace", "--clearenv", "--setenv", "HOME", "/tmp", "--setenv", "PATH", "/usr/bin", "--seccomp", "3",
       "python3", "main.py"},
      fake);
  ASSERT_TRUE(got.ok()) << got.status();
  const runtime::SandboxSpec& s = got->spec;
  EXPECT_TRUE(s.namespaces.user && s.namespaces.pid && s.namespaces.net && s.namespaces.ipc && s.namespaces.uts);
  EXPECT_FALSE(s.map_all_host_ids);
  EXPECT_EQ(s.uid, 0u);
  EXPECT_EQ(s.capabilities->keep, 0u);
  EXPECT_EQ(s.capabilities->bounding, 0u);
  EXPECT_TRUE(s.disable_userns);
  EXPECT_EQ(s.mounts.size(), 7u);
  EXPECT_EQ(s.mounts[5].source, "/dev/null");
  EXPECT_TRUE(s.mounts[5].readonly);
  EXPECT_EQ(s.cwd, "/workspace");
  EXPECT_EQ(s.env, (std::vector<std::string>{"HOME=/tmp", "PATH=/usr/bin", "PWD=/workspace"}));
  EXPECT_EQ(s.seccomp_programs.size(), 1u);
  EXPECT_EQ(s.argv, (std::vector<std::string>{"python3", "main.py"}));
}

// --info-fd/--json-status-fd report init as child-pid: init stays dumpable
// only for a caller that could not open it otherwise (no CAP_SYS_PTRACE).
TEST(BwrapArgs, InitIsInspectableOnlyWhereItsPidIsReportedToACallerWithoutPtrace) {
  const std::vector<std::string> cmd = {"--ro-bind", "/", "/", "true"};
  auto inspectable = [&](std::vector<std::string> args, const FakeHost& fake) {
    args.insert(args.end(), cmd.begin(), cmd.end());
    absl::StatusOr<BwrapInvocation> inv = Parse(args, fake);
    EXPECT_TRUE(inv.ok()) << inv.status();
    return inv.ok() && inv->spec.inspectable_init;
  };
  const FakeHost rootless(1000), root;
  EXPECT_TRUE(inspectable({"--info-fd", "3"}, rootless));
  EXPECT_TRUE(inspectable({"--json-status-fd", "3"}, rootless));
  EXPECT_FALSE(inspectable({}, rootless));
  EXPECT_FALSE(inspectable({"--sync-fd", "3"}, rootless));
  EXPECT_FALSE(inspectable({"--info-fd", "3"}, root));
  FakeHost without_ptrace;
  without_ptrace.host.effective_caps &= ~Bit(CAP_SYS_PTRACE);
  EXPECT_TRUE(inspectable({"--info-fd", "3"}, without_ptrace));
}

// Under a name that is neither `bwrap` nor `cubicle bwrap` (a command
// re-executing its launcher as /proc/self/exe), a command line that starts
// with an option only bwrap has is bwrap's; cubicle's own start with a
// subcommand, and --help/--version are cubicle's.
TEST(BwrapArgs, ACommandLineStartingWithABwrapOnlyOptionIsBwraps) {
  for (const char* arg : {"--ro-bind", "--unshare-all", "--args", "--dev", "--die-with-parent"}) {
    EXPECT_TRUE(IsBwrapCommandLine(arg)) << arg;
  }
  for (const char* arg : {"run", "serve", "bwrap", "--help", "--version", "--bogus", "--", "-h", ""}) {
    EXPECT_FALSE(IsBwrapCommandLine(arg)) << arg;
  }
}

}  // namespace
}  // namespace cubicle::cli
