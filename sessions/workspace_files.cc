#include "sessions/workspace_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "sessions/digest.h"
#include "sessions/paths.h"

namespace cubicle::sessions {
namespace {

constexpr size_t kReadChunk = 64 << 10;
// A random temporary name collides only with a name a payload guessed;
// a few fresh draws settle that.
constexpr int kTempNameTries = 4;

// ---- Entries and their types -------------------------------------------

// A path's last component and the directory holding it, opened beneath the
// root, so that the component itself is only ever acted on by name through
// that fd: never followed.
struct Entry {
  UniqueFd parent;
  std::string name;
  std::string path;
};

absl::StatusOr<Entry> LocateEntry(int root, absl::string_view path, bool make_parents, Owner owner) {
  CUBICLE_ASSIGN_OR_RETURN(std::vector<std::string> parts, SplitRelativePath(path));
  CUBICLE_ASSIGN_OR_RETURN(UniqueFd parent, OpenParent(root, parts, make_parents, owner.uid, owner.gid));
  return Entry{std::move(parent), parts.back(), JoinPath(parts)};
}

absl::StatusOr<struct stat> StatEntry(const Entry& entry) {
  struct stat st;
  if (::fstatat(entry.parent.get(), entry.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return st;
  if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(entry.path, " does not exist"));
  return ErrnoStatus(errno, absl::StrCat("stat(", entry.path, ")"));
}

absl::string_view TypeName(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFLNK: return "a symlink";
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR:
    case S_IFBLK: return "a device";
    default: return "a special file";
  }
}

FileInfo::Type InfoType(mode_t mode) {
  if (S_ISREG(mode)) return FileInfo::Type::kFile;
  if (S_ISDIR(mode)) return FileInfo::Type::kDirectory;
  if (S_ISLNK(mode)) return FileInfo::Type::kSymlink;
  return FileInfo::Type::kOther;
}

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

FileInfo ToInfo(std::string path, const struct stat& st) {
  FileInfo info;
  info.path = std::move(path);
  info.type = InfoType(st.st_mode);
  info.size = static_cast<uint64_t>(st.st_size);
  info.mode = st.st_mode & 07777;
  info.mtime_ns = MtimeNs(st);
  return info;
}

absl::Status WorkspaceFull(int err, absl::string_view step) {
  return absl::ResourceExhaustedError(absl::StrCat("workspace is full: ", ErrnoStatus(err, step).message()));
}

// ---- Reading regular files ---------------------------------------------

struct OpenFile {
  UniqueFd fd;
  struct stat st;
};

// O_NONBLOCK: a FIFO a payload planted opens at once instead of waiting for
// a writer, and is refused by its type; nothing is read before that.
absl::StatusOr<OpenFile> OpenRegular(int root, const std::string& path) {
  CUBICLE_ASSIGN_OR_RETURN(UniqueFd fd, OpenBeneath(root, path, O_RDONLY | O_NONBLOCK | O_NOCTTY));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat(", path, ")"));
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is ", TypeName(st.st_mode), ", not a regular file"));
  }
  return OpenFile{std::move(fd), st};
}

absl::Status RefuseOver(const std::string& path, uint64_t size, uint64_t limit) {
  if (size <= limit) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(path, " is ", size, " bytes, over the limit of ", limit, " bytes"));
}

// Until EOF, but never more than limit + 1 bytes: one past the limit is
// enough to tell that the file grew beyond it after it was sized.
absl::StatusOr<std::string> ReadAtMost(int fd, const std::string& path, uint64_t limit) {
  const uint64_t cap = std::min<uint64_t>(limit, std::numeric_limits<uint64_t>::max() - 1) + 1;
  std::string data;
  while (data.size() < cap) {
    const size_t old = data.size();
    data.resize(old + std::min<uint64_t>(kReadChunk, cap - old));
    ssize_t n = ::read(fd, data.data() + old, data.size() - old);
    if (n < 0 && errno == EINTR) n = 0;
    else if (n < 0) return ErrnoStatus(errno, absl::StrCat("read(", path, ")"));
    data.resize(old + static_cast<size_t>(n));
    if (n == 0) break;
  }
  if (data.size() > limit) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, " grew past the limit of ", limit, " bytes while it was read"));
  }
  return data;
}

// The first `size` bytes (fewer if it shrank): what was sized is what is
// hashed, so a file that grows cannot keep the daemon reading.
absl::StatusOr<std::string> HashOpenFile(int fd, const std::string& path, uint64_t size) {
  auto buffer = std::make_unique<char[]>(kReadChunk);
  Sha256 sha;
  for (uint64_t done = 0; done < size;) {
    ssize_t n = ::read(fd, buffer.get(), std::min<uint64_t>(kReadChunk, size - done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("read(", path, ")"));
    if (n == 0) break;
    sha.Update(absl::string_view(buffer.get(), static_cast<size_t>(n)));
    done += static_cast<uint64_t>(n);
  }
  std::string hex = sha.FinishHex();
  if (hex.empty()) return absl::InternalError(absl::StrCat("sha256(", path, "): OpenSSL failed"));
  return hex;
}

// ---- Writing: Put's steps ----------------------------------------------

absl::Status CheckPut(absl::string_view path, absl::string_view data, const PutOptions& options) {
  CUBICLE_RETURN_IF_ERROR(SplitRelativePath(path).status());
  if (options.mode & ~0777u) {
    return absl::InvalidArgumentError(
        absl::StrFormat("put %s: mode 0%o has bits beyond 0777", path, options.mode));
  }
  if (data.size() > options.max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("put ", path, ": ", data.size(), " bytes, over the limit of ", options.max_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, const std::string& path, absl::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == ENOSPC || errno == EDQUOT)) return WorkspaceFull(errno, absl::StrCat("write(", path, ")"));
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("write(", path, ")"));
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// The data in a file with no name (O_TMPFILE), owned and moded as it will
// be: a failure at any step leaves nothing, since closing it frees it. It
// is made in the root, which is on the target's mount (paths.h: no mount
// is crossed), so it can be linked anywhere beneath.
absl::StatusOr<UniqueFd> WriteUnnamed(int root, const std::string& path, absl::string_view data, uint32_t mode,
                                      Owner owner) {
  auto fd = OpenBeneath(root, "", O_TMPFILE | O_WRONLY, 0600);
  if (!fd.ok()) {
    return absl::Status(fd.status().code(), absl::StrCat("put ", path, ": ", fd.status().message()));
  }
  CUBICLE_RETURN_IF_ERROR(WriteAll(fd->get(), path, data));
  if ((owner.uid != static_cast<uid_t>(-1) || owner.gid != static_cast<gid_t>(-1)) &&
      ::fchown(fd->get(), owner.uid, owner.gid) != 0) {
    return ErrnoStatus(errno, absl::StrCat("chown(", path, ")"));
  }
  // After the chown, which may clear mode bits; and not through the umask.
  if (::fchmod(fd->get(), mode) != 0) return ErrnoStatus(errno, absl::StrCat("chmod(", path, ")"));
  return std::move(*fd);
}

absl::Status RefuseDirectory(const Entry& target) {
  auto st = StatEntry(target);
  if (absl::IsNotFound(st.status())) return absl::OkStatus();
  if (!st.ok()) return st.status();
  if (S_ISDIR(st->st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(target.path, " is a directory; a file cannot be put over it"));
  }
  return absl::OkStatus();
}

// linkat(AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH; the /proc/self/fd form
// does the same for any caller that can see its own fds.
int LinkUnnamed(int fd, int dir, const std::string& name) {
  if (::linkat(fd, "", dir, name.c_str(), AT_EMPTY_PATH) == 0) return 0;
  if (errno != ENOENT && errno != EPERM) return -1;
  const std::string proc = absl::StrCat("/proc/self/fd/", fd);
  return ::linkat(AT_FDCWD, proc.c_str(), dir, name.c_str(), AT_SYMLINK_FOLLOW);
}

absl::Status LinkFailure(int err, const Entry& target) {
  if (err == EEXIST) return absl::AlreadyExistsError(absl::StrCat(target.path, " exists and overwrite is off"));
  if (err == EISDIR) {
    return absl::FailedPreconditionError(absl::StrCat(target.path, " is a directory; a file cannot be put over it"));
  }
  if (err == ENOSPC || err == EDQUOT) return WorkspaceFull(err, absl::StrCat("link(", target.path, ")"));
  return ErrnoStatus(err, absl::StrCat("link(", target.path, ")"));
}

absl::StatusOr<std::string> RandomTempName() {
  uint64_t bits = 0;
  if (::getrandom(&bits, sizeof(bits), 0) != sizeof(bits)) return ErrnoStatus(errno, "getrandom");
  return absl::StrCat(".cubicle-put-", absl::Hex(bits, absl::kZeroPad16));
}

// Without overwrite: link() never replaces, so an existing entry of any
// kind is AlreadyExists and stays as it was.
absl::Status LinkNew(int fd, const Entry& target) {
  if (LinkUnnamed(fd, target.parent.get(), target.name) == 0) return absl::OkStatus();
  return LinkFailure(errno, target);
}

// With overwrite: linked under a random name beside the target, then
// renamed over it; rename replaces the entry itself (a planted symlink
// included) and never follows it. The temporary name is removed on failure.
absl::Status LinkReplacing(int fd, const Entry& target) {
  std::string temp;
  for (int tries = 0; temp.empty(); ++tries) {
    CUBICLE_ASSIGN_OR_RETURN(std::string name, RandomTempName());
    if (LinkUnnamed(fd, target.parent.get(), name) == 0) {
      temp = std::move(name);
    } else if (errno != EEXIST || tries + 1 == kTempNameTries) {
      return LinkFailure(errno == EEXIST ? EBUSY : errno, target);
    }
  }
  if (::renameat(target.parent.get(), temp.c_str(), target.parent.get(), target.name.c_str()) == 0) {
    return absl::OkStatus();
  }
  const int err = errno;
  ::unlinkat(target.parent.get(), temp.c_str(), 0);
  return LinkFailure(err, target);
}

// ---- Walking trees -----------------------------------------------------

struct WalkedEntry {
  std::string path;
  struct stat st;
};

struct Walk {
  std::vector<WalkedEntry> entries;  // sorted by path once walked
  // Directories whose contents no API path could name (deeper than
  // kMaxPathDepth): not descended, with why.
  std::vector<std::pair<std::string, std::string>> unreachable;
};

struct WalkBounds {
  std::string top;  // the walk's start, for messages
  bool recursive;
  size_t max_entries;
};

absl::Status TooManyEntries(const WalkBounds& bounds) {
  return absl::ResourceExhaustedError(absl::StrCat("more than ", bounds.max_entries, " entries under ",
                                                   bounds.top.empty() ? "the workspace" : bounds.top));
}

// Opened as a path first so that something other than a directory is named
// by its type, and nothing else (a FIFO, a device) is ever opened for reading.
absl::StatusOr<UniqueFd> OpenDirectory(int root, const std::string& path) {
  CUBICLE_ASSIGN_OR_RETURN(UniqueFd handle, OpenBeneath(root, path, O_PATH));
  struct stat st;
  if (::fstat(handle.get(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat(", path, ")"));
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is ", TypeName(st.st_mode), ", not a directory"));
  }
  return OpenBeneath(handle.get(), "", O_RDONLY | O_DIRECTORY);
}

absl::Status WalkInto(int dir, const std::string& path, size_t depth, const WalkBounds& bounds, Walk& walk) {
  CUBICLE_ASSIGN_OR_RETURN(std::vector<std::string> names,
                           ReadNames(dir, path, bounds.max_entries - walk.entries.size()));
  if (walk.entries.size() + names.size() > bounds.max_entries) return TooManyEntries(bounds);
  if (depth == kMaxPathDepth && !names.empty()) {
    walk.unreachable.emplace_back(path, absl::StrCat("deeper than ", kMaxPathDepth, " levels; not walked"));
    return absl::OkStatus();
  }
  for (const std::string& name : names) {
    // Again per entry: a subtree walked before this sibling took its share.
    if (walk.entries.size() == bounds.max_entries) return TooManyEntries(bounds);
    WalkedEntry entry{ChildPath(path, name), {}};
    if (::fstatat(dir, name.c_str(), &entry.st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed since it was read
      return ErrnoStatus(errno, absl::StrCat("stat(", entry.path, ")"));
    }
    const bool descend = bounds.recursive && S_ISDIR(entry.st.st_mode);
    std::string child = entry.path;
    walk.entries.push_back(std::move(entry));
    if (!descend) continue;
    // Beneath `dir` with no symlink: a directory swapped for one is ELOOP.
    CUBICLE_ASSIGN_OR_RETURN(UniqueFd sub, OpenBeneath(dir, name, O_RDONLY | O_DIRECTORY));
    CUBICLE_RETURN_IF_ERROR(WalkInto(sub.get(), child, depth + 1, bounds, walk));
  }
  return absl::OkStatus();
}

// `dir` is already split and joined ("" for the root).
absl::StatusOr<Walk> WalkTree(int root, const std::vector<std::string>& dir, bool recursive, size_t max_entries) {
  const std::string path = JoinPath(dir);
  const WalkBounds bounds{path, recursive, max_entries};
  CUBICLE_ASSIGN_OR_RETURN(UniqueFd fd, OpenDirectory(root, path));
  Walk walk;
  CUBICLE_RETURN_IF_ERROR(WalkInto(fd.get(), path, dir.size(), bounds, walk));
  std::sort(walk.entries.begin(), walk.entries.end(),
            [](const WalkedEntry& a, const WalkedEntry& b) { return a.path < b.path; });
  std::sort(walk.unreachable.begin(), walk.unreachable.end());
  return walk;
}

absl::StatusOr<std::vector<std::string>> SplitDir(absl::string_view dir) {
  if (dir.empty()) return std::vector<std::string>{};
  return SplitRelativePath(dir);
}

// ---- Collecting outputs ------------------------------------------------

bool Unchanged(const TreeSnapshot& before, const WalkedEntry& entry) {
  auto it = before.files.find(entry.path);
  return it != before.files.end() &&
         it->second == std::make_tuple(static_cast<uint64_t>(entry.st.st_size), MtimeNs(entry.st),
                                       static_cast<uint64_t>(entry.st.st_ino));
}

// The limits, applied in path order. Once the count or the total would be
// exceeded, every later file is refused with the same reason, so which
// files are collected does not depend on their sizes after that point.
class ArtifactBudget {
 public:
  explicit ArtifactBudget(const ArtifactLimits& limits) : limits_(limits) {}

  // Why `st` is not collected, or "" when it fits.
  std::string Refusal(const struct stat& st) {
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (!S_ISREG(st.st_mode)) return absl::StrCat(TypeName(st.st_mode), ", not a regular file; not collected");
    if (size > limits_.max_file_bytes) {
      return absl::StrCat(size, " bytes, over the per-file limit of ", limits_.max_file_bytes, " bytes");
    }
    if (stopped_.empty() && files_ == limits_.max_files) {
      stopped_ = absl::StrCat("over the limit of ", limits_.max_files, " files");
    }
    if (stopped_.empty() && size > limits_.max_total_bytes - bytes_) {
      stopped_ = absl::StrCat("over the limit of ", limits_.max_total_bytes, " bytes in all");
    }
    return stopped_;
  }

  void Take(uint64_t size) {
    ++files_;
    bytes_ += size;
  }

 private:
  ArtifactLimits limits_;
  size_t files_ = 0;
  uint64_t bytes_ = 0;
  std::string stopped_;
};

// The walked file, opened without blocking or following, must still be the
// one that was sized (same inode and size): a payload racing a rename gets
// its file refused rather than a bigger one read.
absl::StatusOr<FileInfo> HashWalkedFile(int root, const WalkedEntry& entry) {
  CUBICLE_ASSIGN_OR_RETURN(OpenFile file, OpenRegular(root, entry.path));
  if (file.st.st_ino != entry.st.st_ino || file.st.st_size != entry.st.st_size) {
    return absl::AbortedError("changed while it was collected");
  }
  FileInfo info = ToInfo(entry.path, file.st);
  CUBICLE_ASSIGN_OR_RETURN(info.sha256, HashOpenFile(file.fd.get(), entry.path, info.size));
  return info;
}

void CollectOne(int root, const WalkedEntry& entry, ArtifactBudget& budget, Outputs& out) {
  std::string refusal = budget.Refusal(entry.st);
  if (refusal.empty()) {
    auto info = HashWalkedFile(root, entry);
    if (info.ok()) {
      budget.Take(info->size);
      out.files.push_back(*std::move(info));
      return;
    }
    refusal = std::string(info.status().message());
  }
  out.refused.emplace_back(entry.path, std::move(refusal));
}

}  // namespace

// ---- WorkspaceFiles ----------------------------------------------------

WorkspaceFiles::WorkspaceFiles(int root, Owner owner) : root_(root), owner_(owner) {}

absl::Status WorkspaceFiles::Put(absl::string_view path, absl::string_view data, const PutOptions& options) {
  CUBICLE_RETURN_IF_ERROR(CheckPut(path, data, options));
  const std::string name(path);
  CUBICLE_ASSIGN_OR_RETURN(UniqueFd file, WriteUnnamed(root_, name, data, options.mode, owner_));
  CUBICLE_ASSIGN_OR_RETURN(Entry target, LocateEntry(root_, path, options.make_parents, owner_));
  CUBICLE_RETURN_IF_ERROR(RefuseDirectory(target));
  return options.overwrite ? LinkReplacing(file.get(), target) : LinkNew(file.get(), target);
}

absl::StatusOr<std::string> WorkspaceFiles::Get(absl::string_view path, uint64_t max_bytes) {
  CUBICLE_ASSIGN_OR_RETURN(std::vector<std::string> parts, SplitRelativePath(path));
  const std::string name = JoinPath(parts);
  CUBICLE_ASSIGN_OR_RETURN(OpenFile file, OpenRegular(root_, name));
  CUBICLE_RETURN_IF_ERROR(RefuseOver(name, static_cast<uint64_t>(file.st.st_size), max_bytes));
  return ReadAtMost(file.fd.get(), name, max_bytes);
}

absl::StatusOr<FileInfo> WorkspaceFiles::Stat(absl::string_view path, bool with_sha256) {
  if (path.empty()) {
    struct stat st;
    if (::fstat(root_, &st) != 0) return ErrnoStatus(errno, "fstat(workspace root)");
    return ToInfo("", st);
  }
  CUBICLE_ASSIGN_OR_RETURN(Entry entry, LocateEntry(root_, path, /*make_parents=*/false, {}));
  CUBICLE_ASSIGN_OR_RETURN(struct stat st, StatEntry(entry));
  if (!with_sha256 || !S_ISREG(st.st_mode)) return ToInfo(entry.path, st);
  CUBICLE_ASSIGN_OR_RETURN(OpenFile file, OpenRegular(root_, entry.path));
  CUBICLE_RETURN_IF_ERROR(RefuseOver(entry.path, static_cast<uint64_t>(file.st.st_size), kMaxSha256Bytes));
  FileInfo info = ToInfo(entry.path, file.st);
  CUBICLE_ASSIGN_OR_RETURN(info.sha256, HashOpenFile(file.fd.get(), entry.path, info.size));
  return info;
}

absl::StatusOr<std::vector<FileInfo>> WorkspaceFiles::List(absl::string_view dir, bool recursive,
                                                           size_t max_entries) {
  CUBICLE_ASSIGN_OR_RETURN(std::vector<std::string> parts, SplitDir(dir));
  CUBICLE_ASSIGN_OR_RETURN(Walk walk, WalkTree(root_, parts, recursive, max_entries));
  if (!walk.unreachable.empty()) {
    const auto& [path, why] = walk.unreachable.front();
    return absl::ResourceExhaustedError(absl::StrCat("list(", dir, "): ", path, " is ", why));
  }
  std::vector<FileInfo> infos;
  infos.reserve(walk.entries.size());
  for (WalkedEntry& entry : walk.entries) infos.push_back(ToInfo(std::move(entry.path), entry.st));
  return infos;
}

absl::Status WorkspaceFiles::Delete(absl::string_view path, bool recursive) {
  if (path.empty()) return absl::InvalidArgumentError("refusing to delete the workspace root");
  CUBICLE_ASSIGN_OR_RETURN(Entry entry, LocateEntry(root_, path, /*make_parents=*/false, {}));
  CUBICLE_ASSIGN_OR_RETURN(struct stat st, StatEntry(entry));
  if (S_ISDIR(st.st_mode) && !recursive) {
    return absl::FailedPreconditionError(absl::StrCat(entry.path, " is a directory; delete it with recursive"));
  }
  return RemoveEntry(entry.parent.get(), entry.name, entry.path, {kMaxDeleteDepth, kMaxDeleteEntries});
}

// ---- Outputs -----------------------------------------------------------

absl::StatusOr<TreeSnapshot> SnapshotTree(int root, absl::string_view dir, size_t max_entries) {
  CUBICLE_ASSIGN_OR_RETURN(std::vector<std::string> parts, SplitDir(dir));
  auto walk = WalkTree(root, parts, /*recursive=*/true, max_entries);
  if (absl::IsNotFound(walk.status())) return TreeSnapshot{};
  if (!walk.ok()) return walk.status();
  TreeSnapshot snapshot;
  for (const WalkedEntry& entry : walk->entries) {
    if (S_ISDIR(entry.st.st_mode)) continue;
    snapshot.files.emplace(entry.path, std::make_tuple(static_cast<uint64_t>(entry.st.st_size), MtimeNs(entry.st),
                                                       static_cast<uint64_t>(entry.st.st_ino)));
  }
  return snapshot;
}

absl::StatusOr<Outputs> CollectOutputs(int root, absl::string_view dir, const TreeSnapshot& before,
                                       const ArtifactLimits& limits) {
  Outputs out;
  auto top = LocateEntry(root, dir, /*make_parents=*/false, {});
  auto st = top.ok() ? StatEntry(*top) : top.status();
  if (absl::IsNotFound(st.status())) return out;
  if (!st.ok()) return st.status();
  if (!S_ISDIR(st->st_mode)) {
    out.refused.emplace_back(top->path, absl::StrCat(TypeName(st->st_mode), ", not a directory; not collected"));
    return out;
  }
  CUBICLE_ASSIGN_OR_RETURN(std::vector<std::string> parts, SplitRelativePath(dir));
  CUBICLE_ASSIGN_OR_RETURN(Walk walk, WalkTree(root, parts, /*recursive=*/true, limits.max_entries));
  ArtifactBudget budget(limits);
  for (const WalkedEntry& entry : walk.entries) {
    if (!S_ISDIR(entry.st.st_mode) && !Unchanged(before, entry)) CollectOne(root, entry, budget, out);
  }
  out.refused.insert(out.refused.end(), walk.unreachable.begin(), walk.unreachable.end());
  std::sort(out.refused.begin(), out.refused.end());
  return out;
}

}  // namespace cubicle::sessions
