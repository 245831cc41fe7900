// Paths inside a session's workspace (DESIGN §6a): every name a client or
// an archive gives is relative to the workspace root and is resolved by the
// kernel strictly beneath it — no "..", no absolute path, no symlink (a
// payload may have planted one anywhere), no magic link, no other mount —
// so nothing a request names can reach outside the workspace, whatever the
// payload left there. Host side; no JSON.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

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

// Walks of a tree a payload wrote: through directory fds, never following
// a symlink (one is removed or counted as itself), at most kMaxWalkDepth
// levels (deeper is FailedPrecondition naming where it stopped).
inline constexpr int kMaxWalkDepth = 256;

// Removes everything inside the directory `dir` (not `dir` itself).
// `what` names it in errors.
absl::Status RemoveTreeContents(int dir, const std::string& what);

// The bytes the regular files under `dir` occupy (st_blocks, so a sparse
// file counts what it holds, not what it claims).
absl::StatusOr<uint64_t> TreeBytes(int dir, const std::string& what);

}  // namespace cubicle::sessions
