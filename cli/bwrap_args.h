// The bubblewrap front end: bwrap 0.11's command line, parsed into a
// SandboxSpec (DESIGN §3) plus what bwrap does outside the sandbox (status
// fds, blocking fds, the exit-status JSON). Pure: no syscalls; whatever the
// parse needs from the host (ids, capabilities, environment, the contents
// of --args/--file/--seccomp fds) comes in a BwrapHost.
//
// Errors carry bubblewrap's own message ("Unknown option --foo"); the
// command prints them as "bwrap: MESSAGE" and exits 1, as bwrap does.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/spec.h"

namespace cubicle::cli {

// What the parse may learn from the host.
struct BwrapHost {
  uid_t uid = 0;  // the caller's real ids
  gid_t gid = 0;
  uint64_t effective_caps = 0;             // capget() of the caller
  uint64_t inheritable_caps = 0;
  uint64_t ambient_caps = 0;               // PR_CAP_AMBIENT_IS_SET
  std::vector<std::string> environ;        // "NAME=value", the caller's
  std::string cwd = "/";                   // the caller's working directory
  bool user_namespaces_enabled = true;     // user.max_user_namespaces != 0
  // The out-of-band opt-in to bwrap's exact root behaviour (kHostRootEnv
  // set to "1"): as root without --unshare-user/--userns, no user namespace
  // at all (SandboxSpec::host_user_namespace). Off: cubicle's safer one.
  bool host_root_opt_in = false;
  // Checks an SELinux context with the kernel (namespaces/selinux.h); its
  // error message is "LABEL: reason". Unset: SELinux is not enabled here.
  std::function<absl::Status(const std::string& label)> check_selinux_label;
  // Whether an fd names the caller's own pid namespace. Unset: never.
  std::function<bool(int fd)> is_own_pid_namespace;
  // Reads an fd to its end (--args, --file, --bind-data, --seccomp). The
  // error message is bwrap's strerror part, e.g. "Bad file descriptor".
  std::function<absl::StatusOr<std::string>(int fd)> read_fd;
};

struct BwrapInvocation {
  enum class Action { kRun, kHelp, kVersion, kUsage };
  Action action = Action::kRun;
  runtime::SandboxSpec spec;

  // Outside the sandbox (file descriptors of the caller).
  std::optional<int> info_fd;
  std::optional<int> json_status_fd;
  std::optional<int> sync_fd;
  std::optional<int> block_fd;
  std::optional<int> userns_block_fd;
  // Closed once their data is read (bwrap closes them too).
  std::vector<int> consumed_fds;
  // The fds options name that bwrap closes before the command: never
  // passed on (--userns, --userns2, --pidns, --userns-block-fd, and
  // --sync-fd with --as-pid-1, are the command's too, as in bwrap).
  std::vector<int> option_fds;
  bool level_prefix = false;  // "<3>bwrap: ..." (syslog levels, for journald)
  // bwrap's warnings ("Only the last --chdir option will take effect"),
  // printed as "bwrap: ..." (level <4>); the run goes on.
  std::vector<std::string> warnings;
  // Sandbox paths to hold a read lock (F_RDLCK) on while the sandbox runs.
  std::vector<std::string> lock_files;
  // Which namespaces bwrap would list in --info-fd ("mnt" always).
  std::vector<std::string> info_namespaces;
};

// argv without the program name. The error of a bad argv is
// InvalidArgument with bwrap's message (no "bwrap: " prefix).
absl::StatusOr<BwrapInvocation> ParseBwrapArgs(const std::vector<std::string>& args, const BwrapHost& host);

// Whether a command line whose first argument is `arg` is bwrap's, run
// under a name that is neither `bwrap` nor `cubicle bwrap`: cubicle's own
// command lines start with a subcommand, so one that starts with an option
// only bwrap has (any but --help and --version) can be no one else's. A
// sandboxed command that re-executes its launcher through /proc/self/exe
// (bwrap's own tests do) runs the binary under that path's name.
bool IsBwrapCommandLine(const std::string& arg);

// bwrap's usage text (to stdout for --help, stderr for a usage error).
std::string BwrapUsage(const std::string& argv0);

inline constexpr char kBwrapVersion[] = "bubblewrap 0.11.0";

// bwrap's words for prctl(PR_SET_SECCOMP)'s EINVAL: a program the kernel
// will not take (empty, too long, not valid BPF).
inline constexpr char kBwrapSeccompEinval[] =
    "Unable to set up system call filtering as requested: prctl(PR_SET_SECCOMP) reported EINVAL. (Hint: this "
    "requires a kernel configured with CONFIG_SECCOMP and CONFIG_SECCOMP_FILTER.)";

// The environment variable of the opt-in above; never passed on to the
// command. Outside the argv on purpose: the argv stays bwrap's.
inline constexpr char kHostRootEnv[] = "CUBICLE_BWRAP_HOST_ROOT";

}  // namespace cubicle::cli
