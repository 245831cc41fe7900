#include "sessions/paths.h"

#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status.h"

namespace cubicle::sessions {

absl::StatusOr<std::vector<std::string>> SplitRelativePath(absl::string_view path) {
  if (path.empty()) return absl::InvalidArgumentError("path is empty");
  if (path.size() > kMaxPathBytes) {
    return absl::InvalidArgumentError(absl::StrCat("path is ", path.size(), " bytes, over ", kMaxPathBytes));
  }
  if (path.find('\0') != absl::string_view::npos) return absl::InvalidArgumentError("path holds a NUL byte");
  if (path.front() == '/') {
    return absl::InvalidArgumentError(absl::StrCat("path '", path, "' is absolute; paths are relative to the workspace"));
  }
  std::vector<std::string> parts = absl::StrSplit(path, '/');
  if (parts.size() > kMaxPathDepth) {
    return absl::InvalidArgumentError(absl::StrCat("path '", path, "' is ", parts.size(), " levels deep, over ",
                                                   kMaxPathDepth));
  }
  for (const std::string& part : parts) {
    if (part.empty() || part == "." || part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("path '", path, "' has an empty, '.' or '..' component; name the file plainly"));
    }
  }
  return parts;
}

std::string JoinPath(const std::vector<std::string>& parts) { return absl::StrJoin(parts, "/"); }

absl::StatusOr<UniqueFd> OpenBeneath(int root, const std::string& path, int flags, mode_t mode) {
  struct open_how how = {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  const char* name = path.empty() ? "." : path.c_str();
  for (;;) {
    long fd = ::syscall(SYS_openat2, root, name, &how, sizeof(how));
    if (fd >= 0) return UniqueFd(static_cast<int>(fd));
    if (errno == EINTR || errno == EAGAIN) continue;  // EAGAIN: a rename raced the lookup
    if (errno == ENOSYS) {
      return absl::FailedPreconditionError("openat2: ENOSYS: this kernel (before 5.6) cannot resolve paths "
                                           "beneath a directory; sessions need it");
    }
    return ErrnoStatus(errno, absl::StrCat("open(", path.empty() ? "." : path, ")"));
  }
}

absl::StatusOr<UniqueFd> OpenParent(int root, const std::vector<std::string>& parts, bool make_parents, uid_t uid,
                                    gid_t gid) {
  CUBICLE_ASSIGN_OR_RETURN(UniqueFd dir, OpenBeneath(root, "", O_PATH | O_DIRECTORY));
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const std::string& name = parts[i];
    auto next = OpenBeneath(dir.get(), name, O_PATH | O_DIRECTORY);
    if (!next.ok() && make_parents && absl::IsNotFound(next.status())) {
      if (::mkdirat(dir.get(), name.c_str(), 0755) != 0 && errno != EEXIST) {
        return ErrnoStatus(errno, absl::StrCat("mkdir(", JoinPath({parts.begin(), parts.begin() + i + 1}), ")"));
      }
      next = OpenBeneath(dir.get(), name, O_PATH | O_DIRECTORY);
      if (next.ok() && (uid != static_cast<uid_t>(-1) || gid != static_cast<gid_t>(-1)) &&
          ::fchownat(next->get(), "", uid, gid, AT_EMPTY_PATH) != 0) {
        return ErrnoStatus(errno, absl::StrCat("chown(", JoinPath({parts.begin(), parts.begin() + i + 1}), ")"));
      }
    }
    if (!next.ok()) {
      return absl::Status(next.status().code(),
                          absl::StrCat("in '", JoinPath(parts), "': ", next.status().message()));
    }
    dir = std::move(*next);
  }
  return dir;
}

namespace {

constexpr size_t kDirentBufferBytes = 32 << 10;

absl::Status UnlinkAt(int dir, const std::string& name, const std::string& what, int flags) {
  if (::unlinkat(dir, name.c_str(), flags) == 0 || errno == ENOENT) return absl::OkStatus();
  return ErrnoStatus(errno, absl::StrCat(flags & AT_REMOVEDIR ? "rmdir(" : "unlink(", what, ")"));
}

// The entry `name` of `dir` as itself (lstat); nullopt when it is gone.
absl::StatusOr<std::optional<struct stat>> StatChild(int dir, const std::string& name, const std::string& what) {
  struct stat st;
  if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return st;
  if (errno == ENOENT) return std::nullopt;  // removed since it was read
  return ErrnoStatus(errno, absl::StrCat("stat(", what, ")"));
}

absl::Status RemoveTreeAt(int parent, const std::string& name, const std::string& what, size_t depth,
                          const TreeBounds& bounds, size_t& budget);

// Everything in `dir`; `budget` counts the entries still allowed.
absl::Status RemoveChildren(int dir, const std::string& what, size_t depth, const TreeBounds& bounds,
                            size_t& budget) {
  CUBICLE_ASSIGN_OR_RETURN(std::vector<std::string> names, ReadNames(dir, what, budget));
  if (names.size() > budget) {
    return absl::ResourceExhaustedError(
        absl::StrCat("more than ", bounds.max_entries, " entries to delete; stopped at ", what));
  }
  budget -= names.size();
  for (const std::string& child : names) {
    const std::string child_what = ChildPath(what, child);
    CUBICLE_ASSIGN_OR_RETURN(std::optional<struct stat> st, StatChild(dir, child, child_what));
    if (!st.has_value()) continue;
    if (S_ISDIR(st->st_mode)) {
      CUBICLE_RETURN_IF_ERROR(RemoveTreeAt(dir, child, child_what, depth + 1, bounds, budget));
    } else {
      CUBICLE_RETURN_IF_ERROR(UnlinkAt(dir, child, child_what, 0));
    }
  }
  return absl::OkStatus();
}

// The directory `name` in `parent` and its tree. Beneath `parent` with no
// symlink: a directory swapped for one mid-walk is ELOOP, never a way out.
absl::Status RemoveTreeAt(int parent, const std::string& name, const std::string& what, size_t depth,
                          const TreeBounds& bounds, size_t& budget) {
  if (depth == bounds.max_depth) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " is deeper than ", bounds.max_depth, " levels; its tree was not deleted"));
  }
  CUBICLE_ASSIGN_OR_RETURN(UniqueFd dir, OpenBeneath(parent, name, O_RDONLY | O_DIRECTORY));
  CUBICLE_RETURN_IF_ERROR(RemoveChildren(dir.get(), what, depth, bounds, budget));
  return UnlinkAt(parent, name, what, AT_REMOVEDIR);
}

absl::Status SumBytesAt(int dir, const std::string& what, size_t depth, uint64_t* total) {
  if (depth > kMaxWalkDepth) {
    return absl::ResourceExhaustedError(absl::StrCat(what, " is more than ", kMaxWalkDepth, " levels deep"));
  }
  CUBICLE_ASSIGN_OR_RETURN(std::vector<std::string> names,
                           ReadNames(dir, what, std::numeric_limits<size_t>::max() - 1));
  for (const std::string& child : names) {
    const std::string child_what = ChildPath(what, child);
    CUBICLE_ASSIGN_OR_RETURN(std::optional<struct stat> st, StatChild(dir, child, child_what));
    if (!st.has_value()) continue;
    *total += static_cast<uint64_t>(st->st_blocks) * 512;
    if (!S_ISDIR(st->st_mode)) continue;
    CUBICLE_ASSIGN_OR_RETURN(UniqueFd sub, OpenBeneath(dir, child, O_RDONLY | O_DIRECTORY));
    CUBICLE_RETURN_IF_ERROR(SumBytesAt(sub.get(), child_what, depth + 1, total));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ChildPath(const std::string& dir, absl::string_view name) {
  return dir.empty() ? std::string(name) : absl::StrCat(dir, "/", name);
}

absl::StatusOr<std::vector<std::string>> ReadNames(int dir, const std::string& what, size_t max_names) {
  auto buffer = std::make_unique<char[]>(kDirentBufferBytes);
  std::vector<std::string> names;
  for (;;) {
    ssize_t n = ::getdents64(dir, buffer.get(), kDirentBufferBytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("getdents(", what.empty() ? "." : what, ")"));
    if (n == 0) return names;
    for (ssize_t offset = 0; offset < n;) {
      const auto* entry = reinterpret_cast<const struct dirent64*>(buffer.get() + offset);
      offset += entry->d_reclen;
      const absl::string_view name = entry->d_name;
      if (name == "." || name == "..") continue;
      names.emplace_back(name);
      if (names.size() > max_names) return names;
    }
  }
}

absl::Status RemoveEntry(int parent, const std::string& name, const std::string& what, const TreeBounds& bounds) {
  CUBICLE_ASSIGN_OR_RETURN(std::optional<struct stat> st, StatChild(parent, name, what));
  if (!st.has_value()) return absl::OkStatus();
  if (!S_ISDIR(st->st_mode)) return UnlinkAt(parent, name, what, 0);
  size_t budget = bounds.max_entries;
  return RemoveTreeAt(parent, name, what, 0, bounds, budget);
}

absl::Status RemoveTreeContents(int dir, const std::string& what) {
  // The store's own bound: as deep as kMaxWalkDepth below `dir`.
  const TreeBounds bounds{kMaxWalkDepth + 1, std::numeric_limits<size_t>::max() - 1};
  size_t budget = bounds.max_entries;
  return RemoveChildren(dir, what, 0, bounds, budget);
}

absl::StatusOr<uint64_t> TreeBytes(int dir, const std::string& what) {
  uint64_t total = 0;
  CUBICLE_RETURN_IF_ERROR(SumBytesAt(dir, what, 0, &total));
  return total;
}

std::vector<std::string> ListFolders(int dir, const std::string& path, FolderWalk& walk,
                                     const std::function<void(const std::string&, const std::string&)>& fail) {
  std::vector<std::string> folders;
  absl::StatusOr<std::vector<std::string>> names = ReadNames(dir, path, walk.max_folders);
  if (!names.ok()) {
    fail(path, std::string(names.status().message()));
    return folders;
  }
  std::sort(names->begin(), names->end());
  for (const std::string& name : *names) {
    if (name.empty() || name[0] == '.') continue;
    struct stat st;
    if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
    if (S_ISLNK(st.st_mode)) {
      fail(absl::StrCat(path, "/", name),
           absl::StrCat("is a symlink; nothing below ", walk.root_name, " is reached through one"));
      continue;
    }
    if (!S_ISDIR(st.st_mode)) continue;
    if (++walk.visited > walk.max_folders) {
      if (walk.visited == walk.max_folders + 1) {
        fail(path, absl::StrCat("more than ", walk.max_folders, " folders under ", walk.root_name,
                                "; the rest were not looked at"));
      }
      break;
    }
    folders.push_back(name);
  }
  return folders;
}

}  // namespace cubicle::sessions
