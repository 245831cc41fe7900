// Differential test of `cubicle bwrap` against the system's bubblewrap
// (/usr/bin/bwrap; Debian 12 ships 0.8). Each case runs one argv through
// both, with a probe command inside that prints what a sandbox is made of:
// ids and id maps, capabilities, no_new_privs, seccomp mode, namespaces
// (new or the host's), hostname, the visible mount table, cwd, environment,
// /dev, whether a nested user namespace can be made, and stat of chosen
// paths. Compared: exit status, the probe's stdout, and for a failing argv
// the first line of stderr (bwrap's message). cubicle runs through a
// symlink named `bwrap`, as a launcher would run it.
//
// Where 0.8 lacks a 0.11 option (--argv0, --level-prefix, the overlays),
// the case checks cubicle against bwrap 0.11's documented behaviour
// instead, and says so.
#include <fcntl.h>
#include <linux/audit.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "tests/support/host_probes.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle {
namespace {

using test_support::TempDir;

constexpr char kSystemBwrap[] = "/usr/bin/bwrap";

// The probe: POSIX sh, run as `sh -c PROBE probe NS=LINK... -- PATH...`.
// The mount table is the visible one: of mounts stacked on one mount point
// only the last (the one a path lookup reaches) is printed. bwrap 0.8
// leaves mounts it cannot reach (covered ones of a recursive bind) in their
// host state where cubicle's recursive mount_setattr reaches them all;
// nothing in the sandbox can reach a covered mount, so only the visible
// table is the sandbox's behaviour.
constexpr char kProbe[] = R"PROBE(
echo "probe: start"
if [ -r /proc/self/status ]; then
  grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp|Seccomp_filters):' /proc/self/status
  echo "uid_map: $(tr -s ' ' < /proc/self/uid_map)"
  echo "gid_map: $(tr -s ' ' < /proc/self/gid_map)"
  echo "setgroups: $(cat /proc/self/setgroups)"
  for pair in "$@"; do
    [ "$pair" = "--" ] && break
    ns=${pair%%=*}; host=${pair#*=}
    if [ "$(readlink /proc/self/ns/$ns)" = "$host" ]; then echo "ns $ns: host"; else echo "ns $ns: new"; fi
  done
  echo "hostname: $(cat /proc/sys/kernel/hostname)"
  seen=" "
  tac /proc/self/mountinfo | while read -r a b c d mp opts rest; do
    case "$seen" in *" $mp "*) continue ;; esac
    seen="$seen$mp "
    fs=${rest#*- }; fs=${fs%% *}
    echo "mount $mp $opts $fs"
  done | LC_ALL=C sort
else
  echo "no /proc; uid $(id -u) gid $(id -g)"
fi
echo "cwd: $(pwd)"
env | LC_ALL=C sort
[ -d /dev ] && echo "dev: $(ls -A /dev | tr '\n' ' ')"
unshare -U true 2>/dev/null; echo "nested userns: $?"
mkdir /tmp/probe-dir 2>/dev/null; echo "mkdir: $?"
while [ $# -gt 0 ] && [ "$1" != "--" ]; do shift; done; [ $# -gt 0 ] && shift
for p in "$@"; do stat -c "stat %n %F %a %s" "$p" 2>&1; [ -f "$p" ] && [ -r "$p" ] && echo "content $p: $(cat "$p")"; done
echo "probe: end"
)PROBE";

// What an fd given to both bwraps holds.
enum class FdKind {
  kNone,
  kSeccomp,      // a BPF program: mkdir/mkdirat fail with EACCES
  kSeccomp2,     // another: chroot fails with EPERM
  // A first program of a stack that refuses seccomp(2), sendto and sendmsg
  // (ENOSYS), as an allowlist without them would: the next program loads
  // only through prctl (which bwrap's manual asks the programs to allow),
  // and a report sent from under it is lost.
  kSeccompPrctlOnly,
  kSeccompNoPrctl,  // refuses prctl too, and seccomp(2), sendto, sendmsg (EPERM)
  kSeccompNoExec,   // refuses execve and execveat, sendto, sendmsg (EPERM)
  kSeccompInvalid,  // 8 bytes that are no BPF program
  kEmpty,           // an empty file
  kData,         // "hello from fd\n"
  kArgs,         // NUL-separated bwrap arguments (the case's args_file)
  kWorkspaceDir, // an O_PATH fd of the workspace directory
  kOutput,       // an empty memfd whose contents are compared after the run
  kByte,         // a pipe with one byte ready (for --block-fd)
  kHostPidNs,    // the test's own pid namespace
  // --userns-block-fd as its callers use it (bwrap's demos): kInfoPipe is
  // a pipe for --info-fd; the test reads child-pid from it, writes the
  // child's setgroups/uid_map/gid_map (0 0 1; errors ignored: cubicle has
  // written them already), then the byte to the kUsernsBlock pipe.
  kInfoPipe,
  kUsernsBlock,
  // The NamespaceHolder's (for --userns, --pidns, --userns2):
  kUserNs,       // its user namespace U1
  kPidNs,        // its pid namespace, owned by U1, whose PID 1 lives on
  kUserNs2,      // U2, nested in U1
  kHostUserNs,   // the test's own user namespace (not below U1)
  kDeadUserNs,   // the user namespace of a second holder, which is gone
  kDeadPidNs,    // that holder's pid namespace: its PID 1 has exited
};

bool IsNamespaceFd(FdKind k) {
  return k == FdKind::kUserNs || k == FdKind::kPidNs || k == FdKind::kUserNs2 || k == FdKind::kHostUserNs ||
         k == FdKind::kDeadUserNs || k == FdKind::kDeadPidNs;
}

enum class Expect {
  kSame,        // exit status, stdout, first stderr line, fd outputs equal
  kSameStatus,  // exit status equal (the output legitimately differs; see case)
  kDocumented,  // 0.8 lacks the option: cubicle checked against 0.11's docs
};

struct Case {
  std::string name;
  // bwrap options; @WS@, @PREFIX@, @LAYERS@ (the layers' directory),
  // @LOWER1@, @LOWER2@, @UPPER@, @WORK@, @ODDLOWER@, @ODDUPPER@, @ODDWORK@
  std::vector<std::string> args;
  std::vector<std::string> command;  // empty: the probe
  // Non-empty: the command is the launcher itself again, re-executed
  // through /proc/self/exe with these options (as bwrap's own tests nest
  // it), then the probe or `command`.
  std::vector<std::string> nested;
  std::vector<std::string> paths;    // stat'ed by the probe
  FdKind fd3 = FdKind::kNone;
  FdKind fd4 = FdKind::kNone;
  FdKind fd5 = FdKind::kNone;
  Expect expect = Expect::kSame;
  int documented_status = 0;                   // kDocumented
  std::vector<std::string> documented_output;  // kDocumented: substrings of stdout (or stderr)
  std::vector<std::string> args_file;          // kArgs
  // kSame: substrings both sides' stdout must have (so that a case whose
  // command fails the same way on both cannot pass unnoticed).
  std::vector<std::string> both_output;
  // The launcher's working directory (@WS@ expands); bwrap keeps it when
  // the sandbox has it.
  std::string cwd = "/";
  // A documented difference by default (docs/bwrap.md), compared only with
  // the host-root opt-in (CUBICLE_BWRAP_HOST_ROOT=1).
  bool host_root_only = false;
};

// gtest prints a failing case by name, not as bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name << ": " << absl::StrJoin(c.args, " "); }

std::vector<std::string> Sys() {
  return {"--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
          "--symlink", "usr/lib64", "/lib64", "--ro-bind", "/etc", "/etc"};
}

std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<std::string> Base(const std::vector<std::string>& extra = {}) {
  return With(With(Sys(), {"--proc", "/proc", "--tmpfs", "/tmp"}), extra);
}

// The runner's argv from the issue, with a real seccomp program on fd 3.
std::vector<std::string> RunnerArgs() {
  return {"--die-with-parent", "--new-session", "--unshare-all", "--unshare-user", "--disable-userns",
          "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink",
          "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--dev", "/dev", "--tmpfs", "/tmp",
          "--proc", "/proc", "--ro-bind", "/dev/null", "/usr/bin/python3", "--ro-bind", "@PREFIX@",
          "/opt/science-env", "--bind", "@WS@", "/workspace", "--chdir", "/workspace", "--clearenv",
          "--setenv", "HOME", "/tmp", "--setenv", "PATH", "/opt/science-env/bin:/usr/bin:/bin", "--seccomp",
          "3"};
}

std::vector<Case> Cases() {
  std::vector<Case> c;
  auto add = [&](std::string name, std::vector<std::string> args) -> Case& {
    c.push_back(Case{.name = std::move(name), .args = std::move(args)});
    return c.back();
  };
  // --- namespaces and ids
  add("minimal", Base());
  add("ro_bind_root", {"--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"});
  add("unshare_all", Base({"--unshare-all", "--dev", "/dev"}));
  add("unshare_all_share_net", Base({"--unshare-all", "--share-net"}));
  add("unshare_user", Base({"--unshare-user"}));
  add("unshare_user_ids", Base({"--unshare-user", "--uid", "1000", "--gid", "1000"}));
  add("unshare_user_uid0", Base({"--unshare-user", "--uid", "0", "--gid", "0"}));
  add("unshare_user_try", Base({"--unshare-user-try"}));
  add("unshare_pid", Base({"--unshare-pid"}));
  add("unshare_net", Base({"--unshare-net"}));
  add("unshare_ipc", Base({"--unshare-ipc"}));
  add("unshare_uts", Base({"--unshare-uts"}));
  add("hostname", Base({"--unshare-uts", "--hostname", "sandboxhost"}));
  add("unshare_cgroup", Base({"--unshare-cgroup"}));
  add("unshare_cgroup_try", Base({"--unshare-cgroup-try"}));
  add("user_pid_net", Base({"--unshare-user", "--unshare-pid", "--unshare-net", "--uid", "4242"}));
  // --- capabilities
  add("cap_drop_all", Base({"--cap-drop", "ALL"}));
  add("userns_cap_drop_all", Base({"--unshare-user", "--cap-drop", "ALL"}));
  add("cap_drop_all_add_chown", Base({"--cap-drop", "ALL", "--cap-add", "CAP_CHOWN"}));
  add("userns_uid_cap_add", Base({"--unshare-user", "--uid", "5", "--cap-add", "CAP_NET_RAW"}));
  add("userns_cap_drop_one", Base({"--unshare-user", "--cap-drop", "CAP_SYS_ADMIN"}));
  add("cap_add_all", Base({"--cap-add", "ALL"}));
  add("userns_cap_add_all", Base({"--unshare-user", "--cap-add", "ALL"}));
  add("cap_names_lowercase", Base({"--unshare-user", "--cap-drop", "ALL", "--cap-add", "cap_kill"}));
  // --- environment and cwd
  add("clearenv", Base({"--clearenv"}));
  add("setenv", Base({"--clearenv", "--setenv", "A", "b c", "--setenv", "HOME", "/tmp"}));
  add("unsetenv", Base({"--unsetenv", "HOME"}));
  add("setenv_overrides", Base({"--setenv", "PATH", "/usr/bin", "--setenv", "PATH", "/bin"}));
  add("chdir", Base({"--chdir", "/usr"}));
  add("chdir_relative", Base({"--chdir", "etc"}));
  add("chdir_missing", Base({"--chdir", "/nonexistent"}));
  // --- mounts, in argv order
  add("dev", Base({"--dev", "/dev"}));
  add("dev_elsewhere", Base({"--dev", "/mydev"}));
  add("tmpfs_size", With(Sys(), {"--proc", "/proc", "--size", "1048576", "--tmpfs", "/tmp"}));
  add("tmpfs_perms", With(Sys(), {"--proc", "/proc", "--perms", "0700", "--tmpfs", "/tmp"})).paths = {"/tmp"};
  add("dir", Base({"--dir", "/a/b/c"})).paths = {"/a", "/a/b/c"};
  add("dir_perms", Base({"--perms", "0750", "--dir", "/newdir"})).paths = {"/newdir"};
  // The missing parents of a destination: 0755 less the group/other bits
  // the op's --perms lacks (bwrap 0.11's manual says as much), and 0700 for
  // ops that take no mode (binds, symlinks, --dev, --proc; bwrap's code,
  // 0.8 and 0.11 alike, where the manual says "normally 0755").
  add("dir_perms_parents", Base({"--perms", "0700", "--dir", "/a/b/c"})).paths = {"/a", "/a/b", "/a/b/c"};
  add("parents_of_each_op", Base({"--bind", "@WS@", "/x/y", "--symlink", "a", "/s/l", "--dev", "/d/e",
                                  "--ro-bind-data", "3", "/r/s", "--tmpfs", "/t/u", "--dir", "/p/q",
                                  "--perms", "0750", "--tmpfs", "/v/w", "--unshare-ipc", "--mqueue", "/m/q",
                                  "--proc", "/o/p"}))
      .paths = {"/x", "/s", "/d", "/r", "/t", "/p", "/v", "/m", "/o"};
  c.back().fd3 = FdKind::kData;
  // The launcher's cwd kept: the bind that shows it makes /tmp (no --tmpfs
  // there), 0700 under bwrap.
  Case& cwd_kept = add("cwd_kept_parents", With(Sys(), {"--proc", "/proc", "--bind", "@WS@", "@WS@"}));
  cwd_kept.paths = {"/tmp", "@WS@"};
  cwd_kept.cwd = "@WS@";
  // A --perms or --size left before the command modifies nothing; bwrap
  // runs the command.
  add("perms_before_command", Base({"--perms", "0750"})).command = {"sh", "-c", "echo ran"};
  c.back().both_output = {"ran\n"};
  add("size_before_command", Base({"--size", "4096", "--"})).command = {"sh", "-c", "echo ran"};
  c.back().both_output = {"ran\n"};
  add("symlink", Base({"--symlink", "/usr/bin", "/ubin"})).paths = {"/ubin", "/ubin/"};
  // bwrap 0.8 refuses a --symlink whose link already exists; 0.11's NEWS
  // (0.9.0: "--symlink succeeds if the symlink already exists with the
  // same target") accepts it: documented behaviour.
  Case& same_link = add("doc_symlink_exists", Base({"--symlink", "usr/bin", "/bin"}));
  same_link.command = {"sh", "-c", "echo linked"};
  same_link.expect = Expect::kDocumented;
  same_link.documented_output = {"linked"};
  add("file", Base({"--file", "3", "/hello"})).paths = {"/hello"};
  c.back().fd3 = FdKind::kData;
  add("file_perms", Base({"--perms", "0640", "--file", "3", "/sub/hello"})).paths = {"/sub", "/sub/hello"};
  c.back().fd3 = FdKind::kData;
  add("bind_data", Base({"--bind-data", "3", "/data"})).paths = {"/data"};
  c.back().fd3 = FdKind::kData;
  add("ro_bind_data", Base({"--ro-bind-data", "3", "/etc2/rodata"})).paths = {"/etc2/rodata"};
  c.back().fd3 = FdKind::kData;
  add("bind", Base({"--bind", "@WS@", "/workspace"})).paths = {"/workspace/input.txt"};
  add("ro_bind", Base({"--ro-bind", "@WS@", "/workspace"})).paths = {"/workspace/input.txt"};
  add("bind_over_ro", Base({"--ro-bind", "@WS@", "/w", "--bind", "@WS@", "/w/inner"}));
  add("bind_try_missing", Base({"--bind-try", "/nonexistent", "/x"})).paths = {"/x"};
  add("ro_bind_try_present", Base({"--ro-bind-try", "@WS@", "/x"})).paths = {"/x/input.txt"};
  add("dev_bind", Base({"--dev-bind", "/dev", "/dev"}));
  add("dev_bind_try_missing", Base({"--dev-bind-try", "/nonexistent", "/x"}));
  add("bind_fd", Base({"--bind-fd", "3", "/ws"})).paths = {"/ws/input.txt"};
  c.back().fd3 = FdKind::kWorkspaceDir;
  add("ro_bind_fd", Base({"--ro-bind-fd", "3", "/ws"})).paths = {"/ws/input.txt"};
  c.back().fd3 = FdKind::kWorkspaceDir;
  add("remount_ro", Base({"--tmpfs", "/t", "--remount-ro", "/t"}));
  add("mqueue", Base({"--unshare-ipc", "--mqueue", "/mq"}));
  add("chmod", Base({"--tmpfs", "/t", "--chmod", "0700", "/t"})).paths = {"/t"};
  add("masked_file", Base({"--ro-bind", "/dev/null", "/usr/bin/python3"})).paths = {"/usr/bin/python3"};
  add("proc_shared_pid", With(Sys(), {"--proc", "/proc"}));
  add("proc_new_pid", With(Sys(), {"--unshare-pid", "--proc", "/proc"}));
  // --- seccomp
  add("seccomp", Base({"--seccomp", "3"})).fd3 = FdKind::kSeccomp;
  add("add_seccomp_fd", Base({"--add-seccomp-fd", "3", "--add-seccomp-fd", "4"}));
  c.back().fd3 = FdKind::kSeccomp;
  c.back().fd4 = FdKind::kSeccomp2;
  // A stack as bwrap's manual says: the first program lets the second
  // load by prctl(PR_SET_SECCOMP), and allows nothing else of the kind.
  add("add_seccomp_fd_stack_by_prctl", Base({"--add-seccomp-fd", "3", "--add-seccomp-fd", "4"}));
  c.back().fd3 = FdKind::kSeccompPrctlOnly;
  c.back().fd4 = FdKind::kSeccomp2;
  c.back().both_output = {"Seccomp_filters:\t2"};
  // What fails once the first program is in place reaches the caller in
  // bwrap's words, though the program refuses sendto and sendmsg.
  add("err_add_seccomp_fd_prctl_refused", Base({"--add-seccomp-fd", "3", "--add-seccomp-fd", "4"}));
  c.back().fd3 = FdKind::kSeccompNoPrctl;
  c.back().fd4 = FdKind::kSeccomp2;
  add("err_add_seccomp_fd_exec_refused", Base({"--add-seccomp-fd", "3", "--add-seccomp-fd", "4"}));
  c.back().fd3 = FdKind::kSeccompNoExec;
  c.back().fd4 = FdKind::kSeccomp2;
  add("err_add_seccomp_fd_exec_refused_as_pid_1",
      Base({"--unshare-pid", "--as-pid-1", "--add-seccomp-fd", "3", "--add-seccomp-fd", "4"}));
  c.back().fd3 = FdKind::kSeccompNoExec;
  c.back().fd4 = FdKind::kSeccomp2;
  // Programs the kernel refuses: bwrap's EINVAL hint.
  add("err_seccomp_empty_program", Base({"--seccomp", "3"})).fd3 = FdKind::kEmpty;
  add("err_seccomp_invalid_program", Base({"--add-seccomp-fd", "3"})).fd3 = FdKind::kSeccompInvalid;
  // bwrap closes an fd once it has read it: a second read of the same fd
  // is "Bad file descriptor"; only the last --seccomp is read at all.
  add("err_add_seccomp_fd_same_fd_twice", Base({"--add-seccomp-fd", "3", "--add-seccomp-fd", "3"})).fd3 =
      FdKind::kSeccomp;
  add("seccomp_same_fd_twice", Base({"--seccomp", "3", "--seccomp", "3"})).fd3 = FdKind::kSeccomp;
  c.back().both_output = {"Seccomp:\t2"};
  add("err_file_same_fd_twice", Base({"--file", "3", "/a", "--file", "3", "/b"})).fd3 = FdKind::kData;
  // --- process
  add("args_fd", {"--args", "3"});
  c.back().fd3 = FdKind::kArgs;
  c.back().args_file = With(Base(), {"--unshare-uts", "--hostname", "fromargs"});
  // bwrap stops reading an --args file at its first non-option and drops
  // the rest of the file; the command comes from argv.
  add("args_fd_stops_at_command", {"--args", "3"}).fd3 = FdKind::kArgs;
  c.back().args_file = With(Base(), {"--unshare-uts", "--hostname", "x", "ignored-command", "--unshare-pid"});
  add("new_session", Base({"--new-session"}));
  add("die_with_parent", Base({"--die-with-parent", "--unshare-pid"}));
  add("info_fd", Base({"--unshare-all", "--info-fd", "3"})).fd3 = FdKind::kOutput;
  add("json_status_fd", Base({"--unshare-pid", "--unshare-net", "--json-status-fd", "3"})).fd3 = FdKind::kOutput;
  add("block_fd", Base({"--block-fd", "3"})).fd3 = FdKind::kByte;
  add("sync_fd", Base({"--sync-fd", "3"})).fd3 = FdKind::kByte;
  add("exit_status", Base()).command = {"sh", "-c", "exit 7"};
  add("signal_status", Base({"--unshare-pid"})).command = {"sh", "-c", "kill -9 $$"};
  // An fd no option names is the command's, at the same number.
  add("inherited_fd", Base()).command = {"sh", "-c", "cat <&3; cat <&4"};
  c.back().fd3 = FdKind::kData;
  c.back().fd4 = FdKind::kData;
  add("option_fd_not_inherited", Base({"--sync-fd", "3"})).command = {"sh", "-c", "cat <&3 || echo closed"};
  c.back().fd3 = FdKind::kByte;
  add("payload_pid", Base({"--unshare-pid"})).command = {"sh", "-c", "echo pid=$$; exit 3"};
  add("as_pid_1", Base({"--unshare-pid", "--as-pid-1"})).command = {"sh", "-c", "echo pid=$$; exit 3"};
  add("as_pid_1_signal", Base({"--unshare-pid", "--as-pid-1"})).command = {"sh", "-c", "kill -KILL $$; echo alive"};
  // The lock is held by someone other than the command: a write lock from
  // inside fails while the sandbox runs.
  constexpr char kTryLock[] =
      "import fcntl, os\n"
      "fd = os.open('/lockme', os.O_RDWR)\n"
      "try:\n"
      "    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
      "    print('not locked')\n"
      "except OSError as e:\n"
      "    print('locked', e.errno)\n";
  add("lock_file", Base({"--perms", "0666", "--file", "3", "/lockme", "--lock-file", "/lockme"})).command = {
      "/usr/bin/python3", "-I", "-c", kTryLock};
  c.back().fd3 = FdKind::kData;
  add("lock_file_unlocked", Base({"--perms", "0666", "--file", "3", "/lockme"})).command = {
      "/usr/bin/python3", "-I", "-c", kTryLock};
  c.back().fd3 = FdKind::kData;
  // bwrap's PID 1 takes the lock while the command already runs: a pid
  // namespace makes its failure end the command, and a command that is
  // still running then makes the status deterministic (1).
  add("err_lock_file_missing", Base({"--unshare-pid", "--lock-file", "/nonexistent"})).command = {"sleep", "2"};
  add("err_as_pid_1_with_lock", Base({"--unshare-pid", "--as-pid-1", "--lock-file", "/x"}));
  add("disable_userns", Base({"--unshare-all", "--unshare-user", "--disable-userns"}));
  // --- joining namespaces (a NamespaceHolder made by the test): the ids,
  //     namespaces and mounts through the probe, pid namespaces by inode.
  add("join_userns", Base({"--userns", "3"})).fd3 = FdKind::kUserNs;
  add("join_userns_unshare_some", Base({"--userns", "3", "--unshare-pid", "--unshare-net", "--unshare-ipc",
                                   "--unshare-uts", "--unshare-cgroup", "--hostname", "joined"}))
      .fd3 = FdKind::kUserNs;
  add("join_userns_cap_drop_all", Base({"--userns", "3", "--cap-drop", "ALL"})).fd3 = FdKind::kUserNs;
  add("join_userns_cap_add", Base({"--userns", "3", "--cap-drop", "ALL", "--cap-add", "CAP_NET_RAW"}))
      .fd3 = FdKind::kUserNs;
  add("join_pidns", Base({"--userns", "3", "--pidns", "4"})).command = {
      "sh", "-c", "[ \"$(readlink /proc/self/ns/pid)\" = @PIDNS@ ] && echo joined; [ $$ -gt 1 ] && echo not-pid-1"};
  c.back().fd3 = FdKind::kUserNs;
  c.back().fd4 = FdKind::kPidNs;
  c.back().both_output = {"joined\nnot-pid-1\n"};
  add("join_pidns_unshare_pid", Base({"--userns", "3", "--pidns", "4", "--unshare-pid", "--info-fd", "5"})).command = {
      "sh", "-c",
      "[ \"$(readlink /proc/self/ns/pid)\" = @PIDNS@ ] && echo joined || echo nested; echo pid=$$; "
      "grep NSpid /proc/self/status | wc -w"};
  c.back().fd3 = FdKind::kUserNs;
  c.back().fd4 = FdKind::kPidNs;
  c.back().fd5 = FdKind::kOutput;
  c.back().both_output = {"nested\npid=2\n2\n"};  // NSpid: only the new namespace's level is visible
  add("join_userns2", Base({"--userns", "3", "--userns2", "4", "--unshare-uts", "--hostname", "two"})).command = {
      "sh", "-c",
      "id; [ \"$(readlink /proc/self/ns/user)\" = @USERNS2@ ] && echo in-userns2; cat /proc/self/uid_map; "
      "cat /proc/sys/kernel/hostname; unshare -U true; echo nested=$?"};
  c.back().fd3 = FdKind::kUserNs;
  c.back().fd4 = FdKind::kUserNs2;
  c.back().both_output = {"uid=0(root)", "in-userns2", "two\nnested=0"};
  add("err_join_userns_unshare_all", Base({"--userns", "3", "--unshare-all"})).fd3 = FdKind::kUserNs;
  add("err_join_userns_uid", Base({"--userns", "3", "--uid", "5"})).fd3 = FdKind::kUserNs;
  add("err_join_userns_bad_fd", Base({"--userns", "9"}));
  add("err_join_userns_not_a_namespace", Base({"--userns", "3"})).fd3 = FdKind::kData;
  add("err_join_pidns_bad_fd", Base({"--userns", "3", "--pidns", "9"})).fd3 = FdKind::kUserNs;
  add("err_join_pidns_not_a_namespace", Base({"--userns", "3", "--pidns", "4"})).fd3 = FdKind::kUserNs;
  c.back().fd4 = FdKind::kData;
  add("err_join_userns2_not_below", Base({"--userns", "3", "--userns2", "4"})).fd3 = FdKind::kUserNs;
  c.back().fd4 = FdKind::kHostUserNs;
  // A pid namespace whose PID 1 is gone: no process can be made in it.
  add("err_join_dead_pidns", Base({"--userns", "3", "--pidns", "4"})).fd3 = FdKind::kDeadUserNs;
  c.back().fd4 = FdKind::kDeadPidNs;
  add("err_join_dead_pidns_unshare_pid", Base({"--userns", "3", "--pidns", "4", "--unshare-pid"})).fd3 =
      FdKind::kDeadUserNs;
  c.back().fd4 = FdKind::kDeadPidNs;
  // --pidns naming the test's own pid namespace: no join at all (bwrap,
  // with no user namespace, mounts a procfs of it; cubicle binds the
  // host's, the same namespace's).
  add("pidns_own", Base({"--pidns", "3"})).fd3 = FdKind::kHostPidNs;
  add("pidns_own_unshare_pid", Base({"--pidns", "3", "--unshare-pid"})).fd3 = FdKind::kHostPidNs;
  // Which option fds the command still has: bwrap leaves the namespace
  // fds, --userns-block-fd and (with --as-pid-1) --sync-fd open.
  constexpr char kOpenFds[] = "for f in 3 4 5; do [ -e /proc/self/fd/$f ] && printf 'fd%s ' $f; done; echo";
  add("join_fds_reach_the_command", Base({"--userns", "3", "--pidns", "4", "--userns2", "5"})).command = {
      "sh", "-c", kOpenFds};
  c.back().fd3 = FdKind::kUserNs;
  c.back().fd4 = FdKind::kPidNs;
  c.back().fd5 = FdKind::kUserNs2;
  c.back().both_output = {"fd3 fd4 fd5 \n"};
  add("sync_fd_as_pid_1", Base({"--unshare-pid", "--as-pid-1", "--sync-fd", "3"})).command = {"sh", "-c", kOpenFds};
  c.back().fd3 = FdKind::kByte;
  c.back().both_output = {"fd3 \n"};
  add("sync_fd_not_as_pid_1", Base({"--unshare-pid", "--sync-fd", "3", "--block-fd", "4", "--info-fd", "5"}))
      .command = {"sh", "-c", kOpenFds};
  c.back().fd3 = FdKind::kByte;
  c.back().fd4 = FdKind::kByte;
  c.back().fd5 = FdKind::kOutput;
  // --userns-block-fd as bwrap's demo uses it: the caller writes the maps
  // once it has the child's pid, then the byte (cubicle wrote them already;
  // the caller's writes fail and are ignored).
  Case& ublock = add("userns_block_fd", Base({"--unshare-user", "--userns-block-fd", "3", "--info-fd", "4"}));
  ublock.fd3 = FdKind::kUsernsBlock;
  ublock.fd4 = FdKind::kInfoPipe;
  Case& ublock_fds =
      add("userns_block_fd_reaches_the_command", Base({"--unshare-user", "--userns-block-fd", "3", "--info-fd", "4"}));
  ublock_fds.command = {"sh", "-c", kOpenFds};
  ublock_fds.fd3 = FdKind::kUsernsBlock;
  ublock_fds.fd4 = FdKind::kInfoPipe;
  ublock_fds.both_output = {"fd3 \n"};
  // The command's session and process group, relative to itself and its
  // parent (bwrap's PID 1, or cubicle's init), else as numbers: the
  // launcher's (the test's, the same for both), or 0 for ids outside a new
  // pid namespace. bwrap calls setsid only for --new-session, and then in
  // the process that forks its PID 1 where it has one.
  constexpr char kSession[] =
      "read -r l < /proc/self/stat; set -- ${l##*) }; "
      "rel() { if [ \"$1\" = $$ ]; then echo own; elif [ \"$1\" = \"$PPID\" ]; then echo parent; "
      "else echo \"$1\"; fi; }; echo \"pgrp=$(rel $3) sid=$(rel $4)\"";
  for (auto [name, extra] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"session_default", {}},
           {"session_unshare_pid", {"--unshare-pid"}},
           {"session_sync_fd", {"--sync-fd", "3"}},
           {"session_new", {"--new-session"}},
           {"session_new_unshare_pid", {"--new-session", "--unshare-pid"}},
           {"session_new_sync_fd", {"--new-session", "--sync-fd", "3"}},
           {"session_new_as_pid_1", {"--new-session", "--unshare-pid", "--as-pid-1"}}}) {
    add(name, Base(extra)).command = {"sh", "-c", kSession};
    c.back().fd3 = FdKind::kByte;
    c.back().both_output = {"pgrp="};
  }
  // --pidns of a pid namespace owned by another user namespace, with
  // --proc: bwrap as root (no user namespace) mounts its procfs; cubicle's
  // own user namespace may not (docs/bwrap.md), unless the host-root opt-in
  // leaves it out.
  add("host_root_pidns_joined_proc", Base({"--pidns", "3"})).fd3 = FdKind::kPidNs;
  c.back().host_root_only = true;
  // --- nesting: the command re-executes its launcher through
  //     /proc/self/exe, as bwrap's own tests do (test-run.sh: "can mount
  //     /proc recursively", "can pivot to new rootfs recursively"); the
  //     inner launcher is uid 0 with every capability of the outer user
  //     namespace, whose setgroups reads "deny" and which maps one id.
  const std::vector<std::string> outer = {"--unshare-user", "--uid", "0", "--gid", "0", "--cap-add", "ALL",
                                          "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--bind", "/proc",
                                          "/proc", "--tmpfs", "/tmp"};
  add("nested_unshare_all", outer).nested = {"--unshare-all", "--ro-bind", "/", "/", "--bind", "/proc", "/proc",
                                             "--dev", "/dev", "--tmpfs", "/tmp"};
  // The inner bwrap, uid 0 without --unshare-user, makes no user namespace.
  add("nested_same_userns", outer).nested = {"--ro-bind", "/", "/", "--dev", "/dev", "--tmpfs", "/tmp"};
  // A devpts instance's root directory belongs to the root of the user
  // namespace that mounts it: bwrap maps 0 first where the sandbox's ids
  // are others, so /dev/pts is the sandbox user's.
  add("dev_pts_owner", Base({"--unshare-user", "--uid", "1000", "--gid", "1000", "--dev", "/dev"})).command = {
      "sh", "-c", "stat -c '%n %u:%g %a' /dev/pts /dev/pts/ptmx; cat /proc/self/uid_map /proc/self/gid_map"};
  c.back().both_output = {"/dev/pts 1000:1000 755\n/dev/pts/ptmx 1000:1000 666\n"};
  add("runner_argv", RunnerArgs()).paths = {"/workspace/input.txt", "/opt/science-env/marker", "/usr/bin/python3"};
  c.back().fd3 = FdKind::kSeccomp;
  // --- bad argv and failed setup: exit 1 and bwrap's message
  add("err_unknown_option", {"--bogus"});
  add("err_no_command", Base());
  c.back().command = {"--"};
  add("err_uid_without_userns", Base({"--uid", "5"}));
  add("err_hostname_without_uts", Base({"--hostname", "x"}));
  add("err_as_pid_1_without_pid", Base({"--as-pid-1"}));
  add("err_perms_not_octal", Base({"--perms", "9", "--dir", "/x"}));
  add("err_perms_dangling", Base({"--perms", "0755", "--proc", "/p"}));
  add("err_size_not_tmpfs", Base({"--size", "10", "--dir", "/x"}));
  add("err_size_zero", Base({"--size", "0", "--tmpfs", "/x"}));
  add("err_seccomp_and_add", Base({"--seccomp", "3", "--add-seccomp-fd", "4"}));
  c.back().fd3 = FdKind::kSeccomp;
  c.back().fd4 = FdKind::kSeccomp;
  add("err_disable_userns_alone", Base({"--disable-userns"}));
  add("err_disable_userns_unshare_all", Base({"--unshare-all", "--disable-userns"}));
  add("err_userns_block_fd", Base({"--userns-block-fd", "3"})).fd3 = FdKind::kByte;
  add("err_unknown_cap", Base({"--cap-drop", "chown"}));
  add("err_bind_missing", Base({"--bind", "/nonexistent", "/x"}));
  add("err_bad_fd", Base({"--info-fd", "x"}));
  add("err_negative_fd", Base({"--sync-fd", "-1"}));
  add("err_bad_uid", Base({"--unshare-user", "--uid", "abc"}));
  add("err_exec_label", Base({"--exec-label", "system_u:system_r:container_t:s0"}));
  add("err_file_label", Base({"--file-label", "system_u:object_r:container_file_t:s0"}));
  add("err_command_missing", Base()).command = {"/nonexistent/command"};
  add("err_symlink_over_dir", Base({"--symlink", "a", "/usr"}));
  // The table's base makes /bin -> usr/bin; a second --symlink there with
  // another target fails in bwrap's (0.8) words. (0.11 says "existing
  // destination is usr/bin" instead; the table's reference is 0.8.)
  add("err_symlink_twice_other_target", Base({"--symlink", "usr/sbin", "/bin"}));
  add("err_symlink_twice_other_target_spelled", Base({"--symlink", "/usr/bin", "/bin"}));
  add("err_file_on_ro", {"--ro-bind", "/", "/", "--file", "3", "/hello-ro"});
  c.back().fd3 = FdKind::kData;
  add("err_seccomp_bad_fd", Base({"--seccomp", "99"}));
  add("err_assert_userns_disabled", Base({"--assert-userns-disabled"}));
  add("err_assert_userns_disabled_userns", Base({"--unshare-user", "--assert-userns-disabled"}));
  add("assert_userns_disabled", Base({"--unshare-user", "--disable-userns", "--assert-userns-disabled"}));
  add("err_bind_takes_two", {"--bind", "/usr"});
  // --help and --version succeed; their text names the version (0.8 here,
  // 0.11 for cubicle), so only the status is compared.
  add("help", {"--help"}).expect = Expect::kSameStatus;
  add("version", {"--version"}).expect = Expect::kSameStatus;

  // --- bwrap 0.11 options that Debian's 0.8 does not have: checked against
  //     bwrap 0.11's manual instead.
  // "--argv0 VALUE: Set argv[0] to the value VALUE before running the program"
  Case& argv0 = add("doc_argv0", Base({"--argv0", "renamed"}));
  argv0.command = {"sh", "-c", "echo \"argv0=$0\""};
  argv0.expect = Expect::kDocumented;
  argv0.documented_output = {"argv0=renamed"};
  // "--level-prefix: Prepend e.g. <3> to diagnostic messages" (stderr).
  Case& level = add("doc_level_prefix", {"--level-prefix", "--bogus"});
  level.expect = Expect::kDocumented;
  level.documented_status = 1;
  level.documented_output = {"<3>bwrap: Unknown option --bogus"};
  // "--tmp-overlay DEST: ... writes go to an invisible tmpfs": the lower
  // layer is unchanged on the host, the write is visible inside.
  Case& tmp_overlay = add("doc_tmp_overlay", Base({"--overlay-src", "@LOWER1@", "--tmp-overlay", "/ov"}));
  tmp_overlay.command = {"sh", "-c", "echo new > /ov/written && cat /ov/lower1.txt /ov/written"};
  tmp_overlay.expect = Expect::kDocumented;
  tmp_overlay.documented_output = {"lower1\nnew\n"};
  // "--ro-overlay DEST: read-only overlay": layers merged, later on top.
  Case& ro_overlay =
      add("doc_ro_overlay", Base({"--overlay-src", "@LOWER1@", "--overlay-src", "@LOWER2@", "--ro-overlay", "/ov"}));
  ro_overlay.command = {"sh", "-c", "cat /ov/lower1.txt /ov/lower2.txt /ov/shared.txt; touch /ov/x 2>/dev/null || echo read-only"};
  ro_overlay.expect = Expect::kDocumented;
  ro_overlay.documented_output = {"lower1\nlower2\nfrom-lower2\nread-only\n"};
  // "--overlay RWSRC WORKDIR DEST": writes land in RWSRC on the host.
  Case& rw_overlay = add("doc_overlay", Base({"--overlay-src", "@LOWER1@", "--overlay", "@UPPER@", "@WORK@", "/ov"}));
  rw_overlay.command = {"sh", "-c", "echo persisted > /ov/out.txt && cat /ov/lower1.txt"};
  rw_overlay.expect = Expect::kDocumented;
  rw_overlay.documented_output = {"lower1\n"};
  // bwrap 0.11 resolves each source on the host first (realpath): a
  // relative one from its working directory, ...
  Case& relative = add("doc_overlay_src_relative", Base({"--overlay-src", "lower1", "--tmp-overlay", "/ov"}));
  relative.cwd = "@LAYERS@";
  relative.command = {"sh", "-c", "cat /ov/lower1.txt"};
  relative.expect = Expect::kDocumented;
  relative.documented_output = {"lower1\n"};
  // ... and a missing one is "Can't find source path".
  Case& missing =
      add("doc_err_overlay_src_missing", Base({"--overlay-src", "/nonexistent-layer", "--tmp-overlay", "/ov"}));
  missing.expect = Expect::kDocumented;
  missing.documented_status = 1;
  missing.documented_output = {"bwrap: Can't find source path /nonexistent-layer: No such file or directory"};
  // bwrap 0.11 escapes ',', ':' and '\\' in the mount options: layers
  // (lower, upper and work) may have any name.
  Case& odd = add("doc_overlay_odd_names", Base({"--overlay-src", "@ODDLOWER@", "--overlay-src", "@LOWER1@",
                                                 "--overlay", "@ODDUPPER@", "@ODDWORK@", "/ov"}));
  odd.command = {"sh", "-c", "cat /ov/odd.txt /ov/lower1.txt && echo written > /ov/new.txt && cat /ov/new.txt"};
  odd.expect = Expect::kDocumented;
  odd.documented_output = {"odd\nlower1\nwritten\n"};
  // A failed overlay mount is named by its options; ELOOP is "Overlay
  // directories may not overlap" (bwrap 0.11's source: here the upper
  // layer is a lower one too).
  Case& overlap =
      add("doc_err_overlay_overlap", Base({"--overlay-src", "@UPPER@", "--overlay", "@UPPER@", "@WORK@", "/ov"}));
  overlap.expect = Expect::kDocumented;
  overlap.documented_status = 1;
  overlap.documented_output = {"bwrap: Can't make overlay mount on /newroot/ov with options upperdir=/oldroot/",
                               "/upper,workdir=/oldroot/", "/work,lowerdir=/oldroot/", "/upper,userxattr",
                               ",userxattr: Overlay directories may not overlap\n"};
  // bwrap 0.11's source mounts overlays with no flags (MS_MGC_VAL alone):
  // neither nosuid nor nodev, and a --ro-overlay is read-only for want of
  // an upper layer, not by a read-only mount.
  Case& flags = add("doc_overlay_mount_flags", Base({"--overlay-src", "@LOWER1@", "--tmp-overlay", "/ov",
                                                     "--overlay-src", "@LOWER1@", "--overlay-src", "@LOWER2@",
                                                     "--ro-overlay", "/ro"}));
  flags.command = {"sh", "-c",
                   "while read -r a b c d mp opts rest; do case $mp in /ov|/ro) echo \"$mp $opts\";; esac; "
                   "done < /proc/self/mountinfo; touch /ro/x 2>/dev/null || echo ro-refuses"};
  flags.expect = Expect::kDocumented;
  flags.documented_output = {"/ov rw,relatime\n/ro rw,relatime\nro-refuses\n"};
  // "--overlay-src must be followed by ... --overlay, --tmp-overlay, or --ro-overlay"
  Case& dangling = add("doc_overlay_src_dangling", Base({"--overlay-src", "@LOWER1@", "--dir", "/x"}));
  dangling.expect = Expect::kDocumented;
  dangling.documented_status = 1;
  dangling.documented_output = {"bwrap: --overlay-src must be followed by"};
  return c;
}

// ---- running one side -------------------------------------------------------

struct Outcome {
  int status = -1;  // exit status, 128+signal, or -1 (timed out)
  std::string out, err;
  std::map<int, std::string> fd_outputs;
};

int MemfdWith(const std::string& data) {
  int fd = ::memfd_create("bwrap-diff", MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (!data.empty() && ::write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size())) return -1;
  ::lseek(fd, 0, SEEK_SET);
  return fd;
}

std::string ReadMemfd(int fd) {
  std::string data;
  ::lseek(fd, 0, SEEK_SET);
  char buf[8192];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) data.append(buf, static_cast<size_t>(n));
  return data;
}

// A BPF program from libseccomp: allow all, fail `syscalls` with `err`.
std::string SeccompProgram(const std::vector<int>& syscalls, int err) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  for (int nr : syscalls) seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), nr, 0);
  int fd = ::memfd_create("bpf", MFD_CLOEXEC);
  seccomp_export_bpf(ctx, fd);
  seccomp_release(ctx);
  std::string program = ReadMemfd(fd);
  ::close(fd);
  return program;
}

// Namespaces to join, held for one test by processes of its own:
// `unshare --user --map-root-user --pid --fork` (user namespace U1, a pid
// namespace owned by it) whose forked child, PID 1 of that pid namespace,
// execs `unshare --user --map-root-user sleep` (U2, nested in U1). Killing
// that PID 1 ends the pid namespace and everything left in it. A second
// holder of the same shape is killed at once: its pid namespace, kept by
// an fd, takes no new process.
class NamespaceHolder {
 public:
  NamespaceHolder() : marker_(absl::StrCat("1000.", ::getpid(), "7")) {
    outer_ = std::make_unique<test_support::RunningProcess>(std::vector<std::string>{
        "/usr/bin/unshare", "--user", "--map-root-user", "--pid", "--fork", "/usr/bin/unshare", "--user",
        "--map-root-user", "/bin/sleep", marker_});
    if (!outer_->started()) return;
    inner_ = FindSleep(marker_);
    if (inner_ <= 0) return;
    userns_ = ::open(absl::StrCat("/proc/", outer_->pid(), "/ns/user").c_str(), O_RDONLY | O_CLOEXEC);
    pidns_ = ::open(absl::StrCat("/proc/", inner_, "/ns/pid").c_str(), O_RDONLY | O_CLOEXEC);
    userns2_ = ::open(absl::StrCat("/proc/", inner_, "/ns/user").c_str(), O_RDONLY | O_CLOEXEC);
    host_userns_ = ::open("/proc/self/ns/user", O_RDONLY | O_CLOEXEC);
    const std::string dead_marker = marker_ + "1";
    test_support::RunningProcess dead({"/usr/bin/unshare", "--user", "--map-root-user", "--pid", "--fork",
                                       "/bin/sleep", dead_marker});
    const pid_t dead_sleep = dead.started() ? FindSleep(dead_marker) : -1;
    if (dead_sleep <= 0) return;
    dead_userns_ = ::open(absl::StrCat("/proc/", dead_sleep, "/ns/user").c_str(), O_RDONLY | O_CLOEXEC);
    dead_pidns_ = ::open(absl::StrCat("/proc/", dead_sleep, "/ns/pid").c_str(), O_RDONLY | O_CLOEXEC);
    ::kill(dead_sleep, SIGKILL);  // ours, by pid
    dead.Wait();
  }
  ~NamespaceHolder() {
    for (int fd : {userns_, pidns_, userns2_, host_userns_, dead_userns_, dead_pidns_}) {
      if (fd >= 0) ::close(fd);
    }
    if (inner_ > 0) ::kill(inner_, SIGKILL);  // ours, by pid: PID 1 of the held pid namespace
    if (outer_ != nullptr && outer_->started()) outer_->Wait();
  }
  bool ok() const {
    return userns_ >= 0 && pidns_ >= 0 && userns2_ >= 0 && host_userns_ >= 0 && dead_userns_ >= 0 &&
           dead_pidns_ >= 0;
  }
  int fd(FdKind kind) const {
    switch (kind) {
      case FdKind::kUserNs: return userns_;
      case FdKind::kPidNs: return pidns_;
      case FdKind::kUserNs2: return userns2_;
      case FdKind::kDeadUserNs: return dead_userns_;
      case FdKind::kDeadPidNs: return dead_pidns_;
      default: return host_userns_;
    }
  }
  // readlink of the held namespaces ("pid:[4026532180]").
  std::string Link(const std::string& ns) const {
    char link[128] = {};
    std::string path = absl::StrCat("/proc/", inner_, "/ns/", ns);
    ssize_t n = ::readlink(path.c_str(), link, sizeof(link) - 1);
    return n > 0 ? std::string(link, static_cast<size_t>(n)) : "?";
  }

 private:
  // The pid of the `sleep MARKER` that unshare runs; bounded: at most 10 s.
  static pid_t FindSleep(const std::string& marker) {
    for (int i = 0; i < 1000; ++i) {
      for (pid_t pid : test_support::ProcessesWithArgument(marker)) {
        if (test_support::ReadFile(absl::StrCat("/proc/", pid, "/comm")) == "sleep\n") return pid;
      }
      ::usleep(10'000);
    }
    return -1;
  }

  std::string marker_;
  std::unique_ptr<test_support::RunningProcess> outer_;
  pid_t inner_ = -1;
  int userns_ = -1, pidns_ = -1, userns2_ = -1, host_userns_ = -1, dead_userns_ = -1, dead_pidns_ = -1;
};

// Layers named with what overlayfs's mount options split on.
constexpr char kOddLower[] = "odd,lo:wer\\1";
constexpr char kOddUpper[] = "odd,up:per\\";
constexpr char kOddWork[] = "odd,wo:rk\\";

class Fixture {
 public:
  Fixture() {
    test_support::WriteFile(ws_.Join("input.txt"), "workspace file\n");
    test_support::WriteFile(prefix_.Join("marker"), "science env\n");
    ::mkdir(layers_.Join("lower1").c_str(), 0755);
    ::mkdir(layers_.Join("lower2").c_str(), 0755);
    ::mkdir(layers_.Join("upper").c_str(), 0755);
    ::mkdir(layers_.Join("work").c_str(), 0755);
    test_support::WriteFile(layers_.Join("lower1/lower1.txt"), "lower1\n");
    test_support::WriteFile(layers_.Join("lower1/shared.txt"), "from-lower1\n");
    test_support::WriteFile(layers_.Join("lower2/lower2.txt"), "lower2\n");
    test_support::WriteFile(layers_.Join("lower2/shared.txt"), "from-lower2\n");
    for (const char* dir : {kOddLower, kOddUpper, kOddWork}) ::mkdir(layers_.Join(dir).c_str(), 0755);
    test_support::WriteFile(layers_.Join(kOddLower) + "/odd.txt", "odd\n");
    // cubicle under the name a launcher uses.
    ::symlink(test_support::CubicleBinary().c_str(), bin_.Join("bwrap").c_str());
    for (const char* ns : {"cgroup", "ipc", "mnt", "net", "pid", "uts"}) {
      char link[256] = {};
      std::string path = absl::StrCat("/proc/self/ns/", ns);
      ssize_t n = ::readlink(path.c_str(), link, sizeof(link) - 1);
      if (n > 0) host_ns_.push_back(absl::StrCat(ns, "=", std::string(link, static_cast<size_t>(n))));
    }
  }

  std::string cubicle_bwrap() const { return bin_.Join("bwrap"); }
  const TempDir& layers() const { return layers_; }

  std::vector<std::string> Expand(const std::vector<std::string>& args,
                                  const NamespaceHolder* holder = nullptr) const {
    std::vector<std::string> out;
    for (const std::string& a : args) {
      out.push_back(absl::StrReplaceAll(a, {{"@WS@", ws_.path()},
                                            {"@PREFIX@", prefix_.path()},
                                            {"@LOWER1@", layers_.Join("lower1")},
                                            {"@LOWER2@", layers_.Join("lower2")},
                                            {"@UPPER@", layers_.Join("upper")},
                                            {"@WORK@", layers_.Join("work")},
                                            {"@LAYERS@", layers_.path()},
                                            {"@ODDLOWER@", layers_.Join(kOddLower)},
                                            {"@ODDUPPER@", layers_.Join(kOddUpper)},
                                            {"@ODDWORK@", layers_.Join(kOddWork)},
                                            {"@PIDNS@", holder ? holder->Link("pid") : "?"},
                                            {"@USERNS2@", holder ? holder->Link("user") : "?"}}));
    }
    return out;
  }

  std::vector<std::string> Argv(const std::string& program, const Case& c,
                                const NamespaceHolder* holder = nullptr) const {
    std::vector<std::string> argv = {program};
    for (const std::string& a : Expand(c.args)) argv.push_back(a);
    if (!c.nested.empty()) {
      argv.push_back("/proc/self/exe");
      for (const std::string& a : Expand(c.nested)) argv.push_back(a);
    }
    if (c.command.empty()) {
      argv.insert(argv.end(), {"sh", "-c", kProbe, "probe"});
      argv.insert(argv.end(), host_ns_.begin(), host_ns_.end());
      argv.push_back("--");
      for (const std::string& p : Expand(c.paths)) argv.push_back(p);
    } else {
      for (const std::string& a : Expand(c.command, holder)) argv.push_back(a);
    }
    return argv;
  }

  // Runs argv with fds 3/4/5 made per the case; at most 60 s.
  Outcome Run(const std::vector<std::string>& argv, const Case& c, const NamespaceHolder* holder = nullptr,
              const std::vector<std::string>& extra_env = {}) const {
    Outcome outcome;
    int out_fd = MemfdWith(""), err_fd = MemfdWith("");
    std::map<int, int> given;  // target fd -> our fd
    std::vector<int> to_close = {out_fd, err_fd};
    int info_read = -1, info_write = -1, block_write = -1;
    for (auto [target, kind] : {std::pair{3, c.fd3}, std::pair{4, c.fd4}, std::pair{5, c.fd5}}) {
      int fd = -1;
      switch (kind) {
        case FdKind::kNone: continue;
        case FdKind::kUserNs:
        case FdKind::kPidNs:
        case FdKind::kUserNs2:
        case FdKind::kHostUserNs:
        case FdKind::kDeadUserNs:
        case FdKind::kDeadPidNs:
          if (holder != nullptr) fd = ::fcntl(holder->fd(kind), F_DUPFD_CLOEXEC, 10);
          break;
        case FdKind::kSeccomp: fd = MemfdWith(SeccompProgram({SCMP_SYS(mkdir), SCMP_SYS(mkdirat)}, EACCES)); break;
        case FdKind::kSeccomp2: fd = MemfdWith(SeccompProgram({SCMP_SYS(chroot)}, EPERM)); break;
        case FdKind::kSeccompPrctlOnly:
          fd = MemfdWith(SeccompProgram({SCMP_SYS(seccomp), SCMP_SYS(sendto), SCMP_SYS(sendmsg)}, ENOSYS));
          break;
        case FdKind::kSeccompNoPrctl:
          fd = MemfdWith(
              SeccompProgram({SCMP_SYS(prctl), SCMP_SYS(seccomp), SCMP_SYS(sendto), SCMP_SYS(sendmsg)}, EPERM));
          break;
        case FdKind::kSeccompNoExec:
          fd = MemfdWith(
              SeccompProgram({SCMP_SYS(execve), SCMP_SYS(execveat), SCMP_SYS(sendto), SCMP_SYS(sendmsg)}, EPERM));
          break;
        case FdKind::kSeccompInvalid: fd = MemfdWith(std::string(8, '\xff')); break;
        case FdKind::kEmpty: fd = MemfdWith(""); break;
        case FdKind::kData: fd = MemfdWith("hello from fd\n"); break;
        case FdKind::kArgs: {
          std::string data;
          for (const std::string& a : Expand(c.args_file)) absl::StrAppend(&data, a, std::string(1, '\0'));
          fd = MemfdWith(data);
          break;
        }
        case FdKind::kWorkspaceDir: fd = ::open(ws_.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC); break;
        case FdKind::kOutput: fd = MemfdWith(""); break;
        case FdKind::kByte: {
          int p[2];
          if (::pipe2(p, O_CLOEXEC) != 0) break;
          (void)!::write(p[1], "x", 1);
          to_close.push_back(p[1]);  // kept open (a --sync-fd must not see EOF early)
          fd = p[0];
          break;
        }
        case FdKind::kHostPidNs: fd = ::open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC); break;
        case FdKind::kInfoPipe: {
          int p[2];
          if (::pipe2(p, O_CLOEXEC) != 0) break;
          info_read = p[0];
          info_write = fd = p[1];
          to_close.push_back(p[0]);
          break;
        }
        case FdKind::kUsernsBlock: {
          int p[2];
          if (::pipe2(p, O_CLOEXEC) != 0) break;
          block_write = p[1];
          to_close.push_back(p[1]);
          fd = p[0];
          break;
        }
      }
      given[target] = fd;
      to_close.push_back(fd);
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
    posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
    for (auto [target, fd] : given) posix_spawn_file_actions_adddup2(&actions, fd, target);
    const std::string cwd = Expand({c.cwd})[0];
    posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
    std::vector<char*> cargv;
    for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    // A fixed environment: both bwraps start from the same one.
    std::vector<std::string> env = {"PATH=/usr/bin:/bin", "HOME=/root", "LANG=C", "DIFF_TEST=1"};
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> cenv;
    for (const std::string& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
    cenv.push_back(nullptr);
    pid_t pid = -1;
    int rc = ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, cargv.data(), cenv.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc == 0 && info_read >= 0) {
      // Our copy of the write end goes, so that the pipe ends with theirs.
      ::close(info_write);
      std::erase(to_close, info_write);
      for (auto& [target, fd] : given) {
        if (fd == info_write) fd = -1;
      }
      std::string info = ReadInfoPipe(info_read);
      outcome.fd_outputs[-1] = info;
      if (block_write >= 0) {
        size_t at = info.find("\"child-pid\": ");
        const std::string child = at == std::string::npos ? "" : std::to_string(std::atoi(info.c_str() + at + 13));
        for (auto [file, text] : {std::pair{"setgroups", "deny"}, std::pair{"uid_map", "0 0 1"},
                                  std::pair{"gid_map", "0 0 1"}}) {
          test_support::WriteFile(absl::StrCat("/proc/", child, "/", file), text);
        }
        (void)!::write(block_write, "x", 1);
      }
    }
    if (rc == 0) {
      int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
      struct pollfd p = {pidfd, POLLIN, 0};
      int ready = ::poll(&p, 1, 60'000);
      if (ready <= 0) ::kill(pid, SIGKILL);  // ours, by pid
      int status = 0;
      ::waitpid(pid, &status, 0);
      ::close(pidfd);
      outcome.status = ready <= 0 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    outcome.out = ReadMemfd(out_fd);
    outcome.err = ReadMemfd(err_fd);
    for (auto [target, fd] : given) {
      FdKind kind = target == 3 ? c.fd3 : target == 4 ? c.fd4 : c.fd5;
      if (kind == FdKind::kOutput) outcome.fd_outputs[target] = ReadMemfd(fd);
    }
    for (int fd : to_close) {
      if (fd >= 0) ::close(fd);
    }
    return outcome;
  }

  // The --info-fd JSON from a pipe, up to its closing brace or EOF; at
  // most 20 s in all.
  static std::string ReadInfoPipe(int fd) {
    std::string text;
    for (int i = 0; i < 200 && text.find('}') == std::string::npos; ++i) {
      struct pollfd p = {fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[512];
      ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
    }
    return text;
  }

 private:
  TempDir ws_, prefix_, layers_, bin_;
  std::vector<std::string> host_ns_;
};

// Lines that legitimately differ, normalised with the reason:
//  - "ns user": cubicle always makes a user namespace; where bwrap (as
//    root, without --unshare-user) has none, cubicle maps every host id to
//    itself instead, so the ids and uid_map/gid_map lines (compared) are the
//    host's while the capabilities stay a user namespace's, never the host's.
//  - "_=": set by the shell to the program it ran, i.e. the bwrap path.
//  - numbers in --info-fd/--json-status-fd JSON: pids and namespace inodes.
std::string NormalizeProbe(const std::string& out, bool keep_user_ns = false) {
  std::vector<std::string> kept;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if ((!keep_user_ns && absl::StartsWith(line, "ns user:")) || absl::StartsWith(line, "_=")) continue;
    kept.emplace_back(line);
  }
  return absl::StrJoin(kept, "\n");
}

std::string NormalizeJson(const std::string& json) {
  std::string out;
  for (char ch : json) {
    if (ch >= '0' && ch <= '9') {
      if (out.empty() || out.back() != 'N') out.push_back('N');
    } else {
      out.push_back(ch);
    }
  }
  return out;
}

// The error class: bwrap's first stderr line. A usage error prints bwrap's
// usage, whose first line names the program path; normalised to "usage".
std::string ErrorClass(const std::string& err) {
  std::string first(err.substr(0, err.find('\n')));
  if (absl::StartsWith(first, "usage: ")) return "usage";
  return first;
}

class BwrapDiffTest : public test_support::HostHygieneTest,
                      public ::testing::WithParamInterface<Case> {
 protected:
  static void SetUpTestSuite() { fixture_ = new Fixture(); }
  static void TearDownTestSuite() {
    delete fixture_;
    fixture_ = nullptr;
  }
  static Fixture* fixture_;
};
Fixture* BwrapDiffTest::fixture_ = nullptr;

TEST(BwrapDiffTable, HasAtLeastSixtyCasesAndTheRunnerArgv) {
  std::vector<Case> cases = Cases();
  EXPECT_GE(cases.size(), 60u);
  bool runner = false;
  for (const Case& c : cases) runner |= c.name == "runner_argv";
  EXPECT_TRUE(runner);
}

// Runs case `c` through cubicle (with `cubicle_env` added) and bwrap and
// compares them; `keep_user_ns` compares the "ns user" line too.
void CompareWithBubblewrap(const Fixture& fixture, const Case& c, const std::vector<std::string>& cubicle_env,
                           bool keep_user_ns) {
  const bool mounts_an_overlay = std::any_of(c.args.begin(), c.args.end(), [](const std::string& a) {
    return a == "--overlay" || a == "--tmp-overlay" || a == "--ro-overlay";
  });
  if (mounts_an_overlay) REQUIRE_HOST(test_support::OverlayfsInUserNamespace());
  // Namespaces to join: held for this test only (gone before TearDown).
  std::unique_ptr<NamespaceHolder> holder;
  if (IsNamespaceFd(c.fd3) || IsNamespaceFd(c.fd4) || IsNamespaceFd(c.fd5)) {
    holder = std::make_unique<NamespaceHolder>();
    ASSERT_TRUE(holder->ok()) << "could not make the namespaces to join";
  }
  Outcome ours = fixture.Run(fixture.Argv(fixture.cubicle_bwrap(), c, holder.get()), c, holder.get(), cubicle_env);
  ASSERT_NE(ours.status, -1) << "cubicle bwrap timed out";
  if (c.expect == Expect::kDocumented) {
    EXPECT_EQ(ours.status, c.documented_status) << ours.err;
    for (const std::string& want : c.documented_output) {
      EXPECT_TRUE(absl::StrContains(ours.out, want) || absl::StrContains(ours.err, want))
          << "missing '" << want << "' in stdout:\n" << ours.out << "\nstderr:\n" << ours.err;
    }
    return;
  }
  if (::access(kSystemBwrap, X_OK) != 0) GTEST_SKIP() << kSystemBwrap << " is not installed";
  Outcome theirs = fixture.Run(fixture.Argv(kSystemBwrap, c, holder.get()), c, holder.get());
  ASSERT_NE(theirs.status, -1) << "bwrap timed out";
  EXPECT_EQ(ours.status, theirs.status) << "cubicle stderr: " << ours.err << "\nbwrap stderr: " << theirs.err;
  if (c.expect == Expect::kSameStatus) return;
  EXPECT_EQ(NormalizeProbe(ours.out, keep_user_ns), NormalizeProbe(theirs.out, keep_user_ns));
  EXPECT_EQ(ErrorClass(ours.err), ErrorClass(theirs.err));
  for (auto& [fd, text] : theirs.fd_outputs) {
    EXPECT_EQ(NormalizeJson(ours.fd_outputs[fd]), NormalizeJson(text)) << "fd " << fd;
  }
  for (const std::string& want : c.both_output) {
    EXPECT_TRUE(absl::StrContains(theirs.out, want)) << "bwrap's stdout lacks '" << want << "':\n" << theirs.out;
    EXPECT_TRUE(absl::StrContains(ours.out, want)) << "cubicle's stdout lacks '" << want << "':\n" << ours.out;
  }
  if (c.command.empty() && theirs.status == 0) {
    // The probe ran to its end on both sides: the comparison saw it all.
    EXPECT_TRUE(absl::StrContains(ours.out, "probe: end")) << ours.out;
  }
}

// Whether bwrap, as root, runs the case in a user namespace (a new or a
// joined one): the host-root opt-in changes nothing there.
bool BwrapMakesAUserNamespace(const Case& c) {
  for (const std::vector<std::string>* args : {&c.args, &c.args_file}) {
    for (const std::string& a : *args) {
      if (a == "--unshare-user" || a == "--unshare-user-try" || a == "--unshare-all" || a == "--userns") return true;
    }
  }
  return false;
}

TEST_P(BwrapDiffTest, SameAsBubblewrap) {
  if (!IsRoot()) GTEST_SKIP() << "the table's expectations are bwrap's as root";
  const Case& c = GetParam();
  if (c.host_root_only) GTEST_SKIP() << "a documented difference without the host-root opt-in";
  CompareWithBubblewrap(*fixture_, c, {}, /*keep_user_ns=*/false);
}

// With the opt-in to bwrap's exact root behaviour, cubicle as root without
// --unshare-user makes no user namespace either: the same comparison, now
// including which user namespace the command is in.
TEST_P(BwrapDiffTest, SameAsBubblewrapWithTheHostRootOptIn) {
  if (!IsRoot()) GTEST_SKIP() << "the opt-in is root's";
  const Case& c = GetParam();
  if (BwrapMakesAUserNamespace(c)) GTEST_SKIP() << "bwrap makes a user namespace here: the opt-in changes nothing";
  CompareWithBubblewrap(*fixture_, c, {"CUBICLE_BWRAP_HOST_ROOT=1"}, /*keep_user_ns=*/true);
}

INSTANTIATE_TEST_SUITE_P(Table, BwrapDiffTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// --die-with-parent: when the launcher dies, the command dies with it,
// through cubicle (bwrap's own process dies with its parent too).
TEST(BwrapLifetime, DieWithParentEndsTheCommandWhenTheLauncherDies) {
  if (::geteuid() != 0) GTEST_SKIP() << "root only";
  const std::string marker = absl::StrCat("4", ::getpid(), "17");  // a unique sleep argument
  // The launcher: a shell that starts cubicle bwrap and waits; killed below.
  test_support::RunningProcess launcher(
      {"/bin/sh", "-c",
       absl::StrCat("'", test_support::CubicleBinary(),
                    "' bwrap --die-with-parent --unshare-pid --ro-bind /usr /usr --symlink usr/bin /bin "
                    "--symlink usr/lib /lib --symlink usr/lib64 /lib64 sleep ",
                    marker, " & echo started; wait")});
  ASSERT_TRUE(launcher.started());
  ASSERT_TRUE(launcher.WaitForStdout("started"));
  // The sandbox's sleep exists (bounded wait: at most 10 s, polled).
  bool seen = false;
  for (int i = 0; i < 1000 && !seen; ++i) {
    for (pid_t pid : test_support::ProcessesWithArgument(marker)) {
      seen |= test_support::ReadFile(absl::StrCat("/proc/", pid, "/comm")) == "sleep\n";
    }
    if (!seen) ::usleep(10'000);
  }
  ASSERT_TRUE(seen) << "the sandboxed sleep never started";
  launcher.Signal(SIGKILL);
  launcher.Wait();
  EXPECT_EQ(test_support::WaitUntilGone(marker), std::vector<pid_t>{}) << "the command outlived its launcher";
}

// The subcommand and the symlink are the same front end.
TEST(BwrapEntryPoints, SubcommandEqualsSymlink) {
  if (::geteuid() != 0) GTEST_SKIP() << "root only";
  test_support::ProcessRun sub = test_support::RunCubicle(
      {"bwrap", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
       "--symlink", "usr/lib64", "/lib64", "--unshare-uts", "--hostname", "viasub", "sh", "-c",
       "cat /proc/sys/kernel/hostname 2>/dev/null || uname -n; exit 3"});
  EXPECT_EQ(sub.exit_code, 3) << sub.err;
  EXPECT_EQ(sub.out, "viasub\n");
}

// ---- bubblewrap's own tests, as an unprivileged caller ---------------------
//
// bubblewrap 0.11's test suite, run against cubicle installed as `bwrap`
// by an unprivileged user, found what the table (root's) cannot see. Each
// test runs one script through /usr/bin/bwrap and through cubicle, as an
// unprivileged caller, and expects the same output of both. As root, the
// script runs as uid 4242 (tests/rootless.sh's) with one supplementary
// group, as a user's shell has one; unprivileged (tests/rootless.sh), as
// the caller itself. Without /usr/bin/bwrap, cubicle is checked against
// the output alone (the behaviour bwrap 0.11's tests expect).
constexpr uid_t kUnprivilegedUid = 4242;
constexpr gid_t kUnprivilegedGid = 4242;

class CoreBwrapUnprivileged : public test_support::HostHygieneTest {
 protected:
  void SetUp() override {
    HostHygieneTest::SetUp();
    if (IsRoot() && ::access("/usr/bin/setpriv", X_OK) != 0) {
      GTEST_SKIP() << "/usr/bin/setpriv (util-linux) is needed to run as uid " << kUnprivilegedUid;
    }
    // cubicle as `bwrap` where the unprivileged uid can run it (the build
    // tree may sit under a directory it cannot enter).
    ASSERT_EQ(::chmod(bin_.path().c_str(), 0755), 0);
    ASSERT_EQ(::chmod(scratch_.path().c_str(), 0711), 0);
    std::error_code error;
    std::filesystem::copy_file(test_support::CubicleBinary(), bin_.Join("bwrap"), error);
    ASSERT_FALSE(error) << "copy " << test_support::CubicleBinary() << ": " << error.message();
    ASSERT_EQ(::chmod(bin_.Join("bwrap").c_str(), 0755), 0);
    test_support::ProcessRun probe = RunAsCaller("unshare --user --map-root-user --mount true", "probe");
    if (probe.exit_code != 0) {
      GTEST_SKIP() << "uid " << CallerUid() << " cannot make a user namespace here: " << probe.err;
    }
  }

  uid_t CallerUid() const { return IsRoot() ? kUnprivilegedUid : ::getuid(); }
  gid_t CallerGid() const { return IsRoot() ? kUnprivilegedGid : ::getgid(); }
  std::string cubicle_bwrap() const { return bin_.Join("bwrap"); }

  // Runs `script` with sh as the unprivileged caller, in a fresh directory
  // of its own named `run` ($1 is `bwrap`, $2 that directory). At most 60 s.
  test_support::ProcessRun RunAsCaller(const std::string& script, const std::string& run,
                                       const std::string& bwrap = "") const {
    const std::string dir = scratch_.Join(run);
    ::mkdir(dir.c_str(), 0700);
    std::vector<std::string> argv;
    if (IsRoot()) {
      if (::chown(dir.c_str(), kUnprivilegedUid, kUnprivilegedGid) != 0) return {};
      argv = {"/usr/bin/setpriv", absl::StrCat("--reuid=", kUnprivilegedUid),
              absl::StrCat("--regid=", kUnprivilegedGid), absl::StrCat("--groups=", kUnprivilegedGid + 1),
              "--inh-caps=-all"};
    }
    argv.insert(argv.end(), {"/bin/sh", "-c", absl::StrCat("cd \"$2\" || exit 99\n", script), "script", bwrap, dir});
    return test_support::RunProcess(argv, "", {}, absl::Seconds(60));
  }

  // The script through cubicle, and through /usr/bin/bwrap where it is
  // installed: both print `want` and exit 0.
  void ExpectBothPrint(const std::string& script, const std::string& want) const {
    test_support::ProcessRun ours = RunAsCaller(script, "cubicle", cubicle_bwrap());
    EXPECT_FALSE(ours.timed_out);
    EXPECT_EQ(ours.exit_code, 0) << ours.err;
    EXPECT_EQ(ours.out, want) << "cubicle's stderr:\n" << ours.err;
    if (::access(kSystemBwrap, X_OK) != 0) return;
    test_support::ProcessRun theirs = RunAsCaller(script, "bwrap", kSystemBwrap);
    EXPECT_EQ(theirs.exit_code, 0) << theirs.err;
    EXPECT_EQ(theirs.out, want) << "bwrap's stderr:\n" << theirs.err;
  }

 private:
  TempDir bin_, scratch_;
};

// bwrap's test-run.sh ("can mount /proc recursively", "can pivot to new
// rootfs recursively"): a sandboxed command re-executes its launcher
// through /proc/self/exe. The inner launcher is uid 0 of a user namespace
// that maps one id and whose setgroups reads "deny"; as root this test's
// caller has a supplementary group, which the inner launcher cannot drop.
TEST_F(CoreBwrapUnprivileged, NestsThroughProcSelfExe) {
  ExpectBothPrint(
      "outer='--unshare-user --uid 0 --gid 0 --cap-add ALL --ro-bind / / --bind /proc /proc --tmpfs /tmp'\n"
      "$1 $outer -- /proc/self/exe --unshare-all --ro-bind / / --bind /proc /proc --tmpfs /tmp \\\n"
      "  sh -c 'echo \"new userns: $(id -u):$(id -g)\"'\n"
      "echo \"status $?\"\n"
      "$1 $outer -- /proc/self/exe --ro-bind / / --tmpfs /tmp sh -c 'echo \"same userns: $(id -u):$(id -g)\"'\n"
      "echo \"status $?\"\n",
      "new userns: 0:0\nstatus 0\nsame userns: 0:0\nstatus 0\n");
}

// bwrap's test-specifying-userns.sh and test-specifying-pidns.sh: the
// caller opens the namespaces of --info-fd's child-pid and joins them with
// --userns and --pidns (as nsenter users do).
TEST_F(CoreBwrapUnprivileged, InfoFdChildPidNamesNamespacesTheCallerCanJoin) {
  ExpectBothPrint(
      "d=$2\n"
      "$1 --ro-bind / / --bind \"$d\" \"$d\" --unshare-user --unshare-pid --info-fd 3 sh -c '\n"
      "  readlink /proc/self/ns/user /proc/self/ns/pid > \"$0/in.tmp\" && mv \"$0/in.tmp\" \"$0/in\"\n"
      "  i=0; while [ ! -e \"$0/done\" ] && [ $i -lt 1000 ]; do sleep 0.02; i=$((i+1)); done' \"$d\" 3> \"$d/info.json\" &\n"
      "sandbox=$!\n"
      "i=0; while [ ! -e \"$d/in\" ] && [ $i -lt 1000 ]; do sleep 0.02; i=$((i+1)); done\n"
      "pid=$(sed -n 's/.*\"child-pid\": *\\([0-9]*\\).*/\\1/p' \"$d/info.json\")\n"
      "{ $1 --ro-bind / / --userns 5 readlink /proc/self/ns/user 5< \"/proc/$pid/ns/user\"; } > \"$d/joined\"\n"
      "echo \"userns: $?\"\n"
      "{ $1 --ro-bind / / --userns 5 --pidns 6 readlink /proc/self/ns/pid 5< \"/proc/$pid/ns/user\" \\\n"
      "  6< \"/proc/$pid/ns/pid\"; } >> \"$d/joined\"\n"
      "echo \"pidns: $?\"\n"
      "touch \"$d/done\"; wait $sandbox; echo \"sandbox: $?\"\n"
      "cmp \"$d/in\" \"$d/joined\" >&2 && echo 'same namespaces'\n",
      "userns: 0\npidns: 0\nsandbox: 0\nsame namespaces\n");
}

// The other side of the dumpable init the test above opens
// (docs/security.md): the command, which holds fewer capabilities than
// init, may neither read init's environment (nor its memory) nor open its
// namespaces; one given every capability may, the exposure that document
// argues. (bwrap's PID 1 has no capabilities left: any command of its uid
// may read it.)
TEST_F(CoreBwrapUnprivileged, TheCommandCannotReadAnInspectableInit) {
  test_support::ProcessRun run = RunAsCaller(
      "for caps in '' '--cap-add ALL'; do\n"
      "  $1 --ro-bind / / --dev /dev --unshare-user --unshare-pid --proc /proc --info-fd 3 $caps sh -c '\n"
      "    cat /proc/1/environ > /dev/null 2>&1; echo \"environ: $?\"\n"
      "    readlink /proc/1/ns/user > /dev/null 2>&1; echo \"namespace: $?\"' 3> /dev/null\n"
      "done\n",
      "cubicle", cubicle_bwrap());
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "environ: 1\nnamespace: 1\nenviron: 0\nnamespace: 0\n") << run.err;
}

// /dev/pts (a devpts instance's root, owned by the root of the user
// namespace that mounts it) and its ptmx are the sandbox user's, with the
// caller's ids and with others.
TEST_F(CoreBwrapUnprivileged, DevPtsBelongsToTheSandboxUser) {
  const std::string caller = absl::StrCat(CallerUid(), ":", CallerGid());
  ExpectBothPrint(
      "$1 --ro-bind / / --dev /dev stat -c '%n %u:%g %a' /dev/pts /dev/pts/ptmx\n"
      "$1 --ro-bind / / --unshare-user --uid 1000 --gid 1000 --dev /dev stat -c '%n %u:%g %a' /dev/pts /dev/pts/ptmx\n",
      absl::StrCat("/dev/pts ", caller, " 755\n/dev/pts/ptmx ", caller,
                   " 666\n/dev/pts 1000:1000 755\n/dev/pts/ptmx 1000:1000 666\n"));
}

}  // namespace
}  // namespace cubicle
