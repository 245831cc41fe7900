#include "sessions/paths.h"

#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <dirent.h>

#include <cerrno>
#include <memory>

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

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};

// `each(dir_fd, name, st)` for every entry of `dir` but "." and "..";
// `dir` stays open and owned by the caller.
template <typename Each>
absl::Status ForEachEntry(int dir, const std::string& what, Each each) {
  int copy = ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (copy < 0) return ErrnoStatus(errno, absl::StrCat("open(", what, ")"));
  std::unique_ptr<DIR, DirCloser> d(::fdopendir(copy));
  if (!d) {
    int err = errno;
    ::close(copy);
    return ErrnoStatus(err, absl::StrCat("fdopendir(", what, ")"));
  }
  while (struct dirent* e = ::readdir(d.get())) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // gone meanwhile
      return ErrnoStatus(errno, absl::StrCat("stat(", what, "/", name, ")"));
    }
    CUBICLE_RETURN_IF_ERROR(each(name, st));
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> OpenSubdir(int dir, const std::string& name, const std::string& what) {
  UniqueFd sub(::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!sub) return ErrnoStatus(errno, absl::StrCat("open(", what, ")"));
  return sub;
}

absl::Status RemoveContentsAt(int dir, const std::string& what, int depth) {
  if (depth > kMaxWalkDepth) {
    return absl::FailedPreconditionError(absl::StrCat(what, " is more than ", kMaxWalkDepth, " levels deep"));
  }
  return ForEachEntry(dir, what, [&](const std::string& name, const struct stat& st) -> absl::Status {
    const std::string sub_what = absl::StrCat(what, "/", name);
    if (S_ISDIR(st.st_mode)) {
      CUBICLE_ASSIGN_OR_RETURN(UniqueFd sub, OpenSubdir(dir, name, sub_what));
      CUBICLE_RETURN_IF_ERROR(RemoveContentsAt(sub.get(), sub_what, depth + 1));
    }
    if (::unlinkat(dir, name.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, absl::StrCat("remove(", sub_what, ")"));
    }
    return absl::OkStatus();
  });
}

absl::Status SumBytesAt(int dir, const std::string& what, int depth, uint64_t* total) {
  if (depth > kMaxWalkDepth) {
    return absl::FailedPreconditionError(absl::StrCat(what, " is more than ", kMaxWalkDepth, " levels deep"));
  }
  return ForEachEntry(dir, what, [&](const std::string& name, const struct stat& st) -> absl::Status {
    *total += static_cast<uint64_t>(st.st_blocks) * 512;
    if (!S_ISDIR(st.st_mode)) return absl::OkStatus();
    const std::string sub_what = absl::StrCat(what, "/", name);
    CUBICLE_ASSIGN_OR_RETURN(UniqueFd sub, OpenSubdir(dir, name, sub_what));
    return SumBytesAt(sub.get(), sub_what, depth + 1, total);
  });
}

}  // namespace

absl::Status RemoveTreeContents(int dir, const std::string& what) { return RemoveContentsAt(dir, what, 0); }

absl::StatusOr<uint64_t> TreeBytes(int dir, const std::string& what) {
  uint64_t total = 0;
  CUBICLE_RETURN_IF_ERROR(SumBytesAt(dir, what, 0, &total));
  return total;
}

}  // namespace cubicle::sessions
