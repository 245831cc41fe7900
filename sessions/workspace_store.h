// Where sessions' workspaces live on the host (DESIGN §6a): one directory
// per session key under the state directory, STATE/workspaces/KEY. As root
// each is a tmpfs of its own, mounted there with the session's byte cap
// and owned by the operator's workspace owner, so a payload that fills its
// workspace gets ENOSPC and never fills the host's disk; the mount outlives
// the daemon (a restart finds it again) and is removed with the session.
// Without the privilege to mount (rootless), a workspace is a plain
// directory and its cap is not enforced by the kernel: `capped` says so.
// Host side; no JSON.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/unique_fd.h"

namespace cubicle::sessions {

// Session keys, as clients choose them (a conversation id): 1 to 128 of
// [A-Za-z0-9._-], not starting with '.', so that a key is always one plain
// file name. InvalidArgument saying so otherwise.
absl::Status ValidateSessionKey(absl::string_view key);

struct WorkspaceShape {
  uint64_t size_bytes = 512ull << 20;
  uid_t uid = 0;  // the host owner of the workspace's root
  gid_t gid = 0;
};

struct Workspace {
  std::string path;  // STATE/workspaces/KEY
  UniqueFd root;     // O_PATH | O_DIRECTORY on the workspace's root
  bool capped = false;  // a tmpfs of its own: the kernel enforces size_bytes
};

struct WorkspaceUsage {
  uint64_t used_bytes = 0;
  uint64_t size_bytes = 0;  // 0: not capped
};

class WorkspaceStore {
 public:
  // `dir` (STATE/workspaces) is made 0711 if missing: the daemon's own,
  // traversable so that an idmapped clone of a workspace can be made,
  // listable by nobody else. `mount_tmpfs`: mount a tmpfs per workspace
  // (needs CAP_SYS_ADMIN over the daemon's mount namespace).
  static absl::StatusOr<WorkspaceStore> Open(const std::string& dir, bool mount_tmpfs);

  // The workspace of `key`, made with `shape` if it does not exist, or
  // found as it is (a restart: the tmpfs is still mounted) — then its cap
  // and owner are what they were made with.
  absl::StatusOr<Workspace> Attach(absl::string_view key, const WorkspaceShape& shape) const;
  // Unmounts (lazily: an execution still holding a clone keeps its view
  // until it ends) and removes the directory. A workspace that does not
  // exist is OK.
  absl::Status Remove(absl::string_view key) const;
  absl::StatusOr<WorkspaceUsage> Usage(absl::string_view key) const;
  // The keys that have a workspace directory: what a restart compares with
  // its records to remove orphans.
  absl::StatusOr<std::vector<std::string>> Keys() const;

  const std::string& dir() const { return dir_; }
  bool mounts_tmpfs() const { return mount_tmpfs_; }

 private:
  WorkspaceStore(std::string dir, bool mount_tmpfs) : dir_(std::move(dir)), mount_tmpfs_(mount_tmpfs) {}
  std::string PathOf(absl::string_view key) const;
  std::string dir_;
  bool mount_tmpfs_ = false;
};

}  // namespace cubicle::sessions
