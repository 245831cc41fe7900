// Paths inside a session's workspace (DESIGN §6a): every name a client or
// an archive gives is relative to the workspace root and is resolved by the
// kernel strictly beneath it — no "..", no absolute path, no symlink (a
// payload may have planted one anywhere), no magic link, no other mount —
// so nothing a request names can reach outside the workspace, whatever the
// payload left there. Host side; no JSON.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <functional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"

namespace cubicle::sessions {

inline constexpr size_t kMaxPathBytes = 1024;
inline constexpr size_t kMaxPathDepth = 32;

// `path` as its components: relative, each component non-empty and not "."
// or "..", no NUL, at most kMaxPathBytes and kMaxPathDepth components.
// "a/b/" and "./a" are refused rather than normalized: a client that means
// another name gets an error, not a guess. InvalidArgument naming the rule.
absl::StatusOr<std::vector<std::string>> SplitRelativePath(absl::string_view path);

// The components joined with '/'.
std::string JoinPath(const std::vector<std::string>& parts);

// openat2(root, path, how) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV and O_CLOEXEC added to `flags`:
// a symlink anywhere in `path`, the last component included, is ELOOP
// (O_PATH | O_NOFOLLOW in `flags` opens a last-component symlink itself).
// `path` must already be split (SplitRelativePath); "" is the root itself. Errors name the path: "open(outputs/x): ELOOP: ...". A kernel
// without openat2 (before 5.6) is FailedPrecondition saying so.
absl::StatusOr<UniqueFd> OpenBeneath(int root, const std::string& path, int flags, mode_t mode = 0);

// The directory that holds `parts`' last component, opened beneath `root`
// (O_PATH | O_DIRECTORY), with each missing parent made (mode 0755, owned
// by `uid`:`gid` when they are not -1) when `make_parents`.
absl::StatusOr<UniqueFd> OpenParent(int root, const std::vector<std::string>& parts, bool make_parents,
                                    uid_t uid = static_cast<uid_t>(-1), gid_t gid = static_cast<gid_t>(-1));

}  // namespace cubicle::sessions

namespace cubicle::sessions {

// Walks of a tree a payload wrote, the files API's and the workspace
// store's alike: through directory fds opened beneath their parent, never
// following a symlink (one is removed or counted as itself), bounded.

// `dir` and `name` joined, `name` alone under the root ("").
std::string ChildPath(const std::string& dir, absl::string_view name);

// The names in the readable directory `dir`, "." and ".." left out, at
// most max_names + 1 of them: one more than the caller allows says "too
// many" without reading on (a payload can make a directory as large as it
// likes). `what` names it in errors.
absl::StatusOr<std::vector<std::string>> ReadNames(int dir, const std::string& what, size_t max_names);

// A walk over an operator's directory of folders (the skills directory,
// the environments directory), bounded in folders across its calls.
struct FolderWalk {
  std::string root_name;  // "the skills directory": the messages say it
  size_t max_folders;
  size_t visited = 0;
};
// The folders in `dir` (`path`), sorted by name: dot names passed over,
// files left alone, a symlink reported to `fail` (never followed). Past
// walk.max_folders in all, the rest are left out, and `fail` is told once.
// A directory that does not read is reported too (no folders).
std::vector<std::string> ListFolders(int dir, const std::string& path, FolderWalk& walk,
                                     const std::function<void(const std::string& path, const std::string& problem)>& fail);

struct TreeBounds {
  size_t max_depth;    // levels of directories below the start
  size_t max_entries;  // entries in all
};

// `name` in `parent`, named `what` in errors: a file, symlink (never its
// target) or other entry unlinked; a directory removed with everything
// below it. A tree deeper or larger than `bounds` is ResourceExhausted,
// and its deepest directories are left whole.
absl::Status RemoveEntry(int parent, const std::string& name, const std::string& what, const TreeBounds& bounds);

// What the workspace store walks: as many levels as kMaxWalkDepth, any
// number of entries (removing a session's own tree must not stop half
// way for its size).
inline constexpr size_t kMaxWalkDepth = 256;

// Removes everything inside the directory `dir` (not `dir` itself).
absl::Status RemoveTreeContents(int dir, const std::string& what);

// The bytes the regular files under `dir` occupy (st_blocks, so a sparse
// file counts what it holds, not what it claims).
absl::StatusOr<uint64_t> TreeBytes(int dir, const std::string& what);

}  // namespace cubicle::sessions
