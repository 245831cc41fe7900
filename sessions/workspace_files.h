// The files API over a session's workspace (DESIGN §6a): put, get, stat,
// list and delete by workspace-relative path, and the collection of what an
// execution left under /workspace/outputs. The workspace is the payload's:
// it may have planted symlinks, FIFOs, sparse files of any apparent size or
// deep trees anywhere, and may rename things while the daemon works. So
// every name is resolved beneath the root (sessions/paths.h), nothing is
// followed, nothing is opened that could block, every size is checked
// before a byte is read, and every walk is bounded. Host side; no JSON.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubicle::sessions {

// Who owns what Put creates (files and the parents it makes): the
// operator's chosen host uid/gid for the workspace. -1: as created (the
// daemon's own).
struct Owner {
  uid_t uid = static_cast<uid_t>(-1);
  gid_t gid = static_cast<gid_t>(-1);
};

struct FileInfo {
  enum class Type { kFile, kDirectory, kSymlink, kOther };
  std::string path;  // workspace-relative; "" for the root
  Type type = Type::kOther;
  uint64_t size = 0;
  uint32_t mode = 0;  // permission bits (07777)
  int64_t mtime_ns = 0;
  std::string sha256;  // lowercase hex; only where asked, for regular files
};

struct PutOptions {
  uint32_t mode = 0644;  // permission bits only (0777); others are refused
  bool make_parents = true;
  bool overwrite = true;
  uint64_t max_bytes = 20 << 20;
};

// Stat's with_sha256 reads the whole file; past this a file (a sparse one
// may claim any size) is refused rather than hashed.
inline constexpr uint64_t kMaxSha256Bytes = uint64_t{1} << 30;

// Recursive Delete's bounds: a payload can make trees deeper than any path
// the API accepts, and the daemon must not walk them without end (one fd
// is held per level). Deeper trees go with the workspace's tmpfs at reap.
inline constexpr size_t kMaxDeleteDepth = 64;
inline constexpr size_t kMaxDeleteEntries = 1'000'000;

// Over a root directory fd it does not own (it must outlive the object);
// thread-compatible. Every path is SplitRelativePath's; errors name it.
class WorkspaceFiles {
 public:
  WorkspaceFiles(int root, Owner owner);

  // Atomic: the data is written to an unnamed file (O_TMPFILE), owned by
  // the owner, and renamed into place, which replaces a planted symlink
  // itself and never follows it. On any failure nothing new is left at
  // `path` and no temporary remains. Over max_bytes and a full workspace
  // (ENOSPC) are ResourceExhausted; onto a directory is FailedPrecondition;
  // onto an existing entry without overwrite is AlreadyExists.
  absl::Status Put(absl::string_view path, absl::string_view data, const PutOptions& options = {});

  // A regular file's bytes. A FIFO, device or socket is FailedPrecondition
  // without blocking; a symlink is refused; a file over max_bytes is
  // ResourceExhausted before a byte is read (and if it grows past it).
  absl::StatusOr<std::string> Get(absl::string_view path, uint64_t max_bytes);

  // The entry itself, never what a symlink points at (kSymlink). "" is the
  // root. with_sha256 hashes a regular file (up to kMaxSha256Bytes).
  absl::StatusOr<FileInfo> Stat(absl::string_view path, bool with_sha256 = false);

  // The entries of a directory ("" is the root), sorted by path; symlinks
  // are reported, not followed. Recursive listings hold every entry below,
  // and are ResourceExhausted past max_entries or past kMaxPathDepth levels.
  absl::StatusOr<std::vector<FileInfo>> List(absl::string_view dir, bool recursive, size_t max_entries);

  // Unlinks a file, symlink (never its target) or other entry; a directory
  // only with `recursive`, its tree removed through fds without following
  // anything (bounded by kMaxDeleteDepth and kMaxDeleteEntries). The root
  // itself is refused.
  absl::Status Delete(absl::string_view path, bool recursive);

 private:
  int root_;
  Owner owner_;
};

// Non-directory entries under a directory, by workspace-relative path, as
// they were before an execution, to tell what it made or changed.
struct TreeSnapshot {
  std::map<std::string, std::tuple<uint64_t /*size*/, int64_t /*mtime_ns*/, uint64_t /*ino*/>> files;
};

// `dir` is workspace-relative ("outputs"); a missing one is an empty
// snapshot. ResourceExhausted past max_entries.
absl::StatusOr<TreeSnapshot> SnapshotTree(int root, absl::string_view dir, size_t max_entries);

struct ArtifactLimits {
  uint64_t max_file_bytes = 20'000'000;
  size_t max_files = 20;
  uint64_t max_total_bytes = 50'000'000;
  size_t max_entries = 10'000;  // walked under the directory; past it collection fails
};

struct Outputs {
  std::vector<FileInfo> files;  // new or changed regular files, with sha256, sorted by path
  std::vector<std::pair<std::string, std::string>> refused;  // path, why; sorted by path
};

// What changed under `dir` since `before`. In path order: a new or changed
// entry that is not a regular file is refused (never followed or opened);
// a file over max_file_bytes is refused; once max_files or max_total_bytes
// would be exceeded, that file and every later one are refused, so the
// same tree always gives the same answer. A missing `dir` gives nothing.
absl::StatusOr<Outputs> CollectOutputs(int root, absl::string_view dir, const TreeSnapshot& before,
                                       const ArtifactLimits& limits);

}  // namespace cubicle::sessions
