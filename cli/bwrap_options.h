// The first half of the bubblewrap front end (cli/bwrap_args.h): bwrap's
// options read one by one into a value, with no view of how they combine.
// What they mean together — the conflicts bwrap rejects up front, the
// SandboxSpec — is cli/bwrap_args.cc's. Internal to cli/.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cli/bwrap_args.h"
#include "rootfs/mount_plan.h"

namespace cubicle::cli::bwrap {

// Everything the argv says, before the host decides what it means.
struct Options {
  bool unshare_user = false, unshare_user_try = false, unshare_pid = false, unshare_net = false,
       unshare_ipc = false, unshare_uts = false, unshare_cgroup = false, unshare_cgroup_try = false;
  bool disable_userns = false, assert_userns_disabled = false;
  bool new_session = false, die_with_parent = false, as_pid_1 = false;
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  std::optional<std::string> hostname, chdir, argv0, exec_label, file_label;
  std::vector<std::string> lock_files;
  std::optional<int> userns_fd, userns2_fd, pidns_fd;
  bool seccomp_given = false, add_seccomp_given = false;
  std::optional<int> seccomp_fd;  // the last --seccomp's: read last (ReadSetupFds)
  std::vector<std::string> seccomp_programs;
  bool caps_used = false;
  uint64_t caps = 0;  // root's effective set, or none, as --cap-add/--cap-drop leave it
  std::vector<rootfs::MountOp> mounts;
  std::vector<std::string> overlay_sources;  // pending --overlay-src
  std::optional<uint32_t> next_perms;
  std::optional<uint64_t> next_size;
  std::vector<std::string> env;  // the caller's, as --clearenv/--setenv/--unsetenv leave it
  std::vector<std::string> command;
  // The fds read to their end so far: bwrap closes each once read, so a
  // second read of one is its "Bad file descriptor".
  std::set<int> read_fds;
  // --file, --bind-data, --ro-bind-data: the data of mounts[op], read
  // when bwrap reads it, as it makes the file (ReadSetupFds).
  struct PendingData {
    size_t op;
    int fd;
    std::string what;  // bwrap's message for a failed read
  };
  std::vector<PendingData> pending_data;
};

// Reads `args` (and the --args files they name) into `options`; stops at the
// command, or at --help/--version (out->action). What bwrap does outside the
// sandbox (its fds, warnings, --level-prefix) goes straight into `out`.
// Fails with bwrap's message for the first option that is wrong on its own.
absl::Status ReadOptions(const std::vector<std::string>& args, const BwrapHost& host, BwrapInvocation* out,
                         Options* options);

// Reads the fds bwrap reads only once the argv is accepted, in bwrap's
// order: the data of --file, --bind-data and --ro-bind-data (as it makes
// each file), then the last --seccomp's program (just before its exec).
// Then every program is checked as the kernel will (bwrap's EINVAL from
// prctl). Call after the conflicts are rejected.
absl::Status ReadSetupFds(const BwrapHost& host, BwrapInvocation* out, Options* options);

// Whether `arg` is the name of one of bwrap 0.11's options.
bool IsOption(const std::string& arg);

// How many capabilities bwrap knows by name (CAP_CHOWN .. CAP_CHECKPOINT_RESTORE).
inline constexpr size_t kKnownCapCount = 41;

// An error in bwrap's words (InvalidArgument; printed as "bwrap: MESSAGE").
absl::Status Die(absl::string_view message);

// A sandbox path as bwrap reads it: relative paths are taken from the new
// root (bwrap strips leading slashes), and cubicle's normal form.
absl::StatusOr<std::string> SandboxPath(const std::string& path, absl::string_view option);

// "NAME=value" lists.
void SetEnv(std::vector<std::string>* env, const std::string& name, const std::string& value);
std::optional<std::string> GetEnv(const std::vector<std::string>& env, const std::string& name);

}  // namespace cubicle::cli::bwrap
