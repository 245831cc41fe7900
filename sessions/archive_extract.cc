// ExtractArchive: our own extraction, entry by entry, because the archive
// may have been tampered with. libarchive only parses; every name passes
// SplitRelativePath and every file is made beneath the root by openat2, so
// nothing an entry says can place a byte outside it.
#include "sessions/archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "sessions/archive_libarchive.h"
#include "sessions/paths.h"

namespace cubicle::sessions {
namespace {

using internal::ArchiveReader;
using internal::ArchiveStatus;

// A directory whose mode is set once every entry is in, so a directory
// that is not writable by its owner still receives its contents.
struct DeferredMode {
  std::string path;
  mode_t mode;
};

struct Extraction {
  int root;
  const ExtractOptions& options;
  ArchiveStats stats;
  std::vector<DeferredMode> directories;
};

bool ChangesOwner(const ExtractOptions& o) {
  return o.uid != static_cast<uid_t>(-1) || o.gid != static_cast<gid_t>(-1);
}

absl::Status Corrupt(size_t index, absl::string_view name, absl::string_view why) {
  return absl::DataLossError(absl::StrCat("archive is corrupt: entry ", index, " '", name, "': ", why));
}

absl::StatusOr<ArchiveReader> OpenReader(int in_fd) {
  ArchiveReader a(archive_read_new());
  if (a == nullptr) return absl::ResourceExhaustedError("archive_read_new: out of memory");
  if (archive_read_support_format_tar(a.get()) != ARCHIVE_OK ||
      archive_read_support_filter_zstd(a.get()) != ARCHIVE_OK ||
      archive_read_open_fd(a.get(), in_fd, 128 << 10) != ARCHIVE_OK) {
    return ArchiveStatus(a.get(), "archive is corrupt: open", absl::StatusCode::kDataLoss);
  }
  return a;
}

// The entry's name as components; a directory's one trailing '/' (tar
// writes one) is dropped first.
absl::StatusOr<std::vector<std::string>> EntryParts(struct archive_entry* e, size_t index) {
  const char* raw = archive_entry_pathname(e);
  if (raw == nullptr) return Corrupt(index, "", "no name");
  std::string name = raw;
  if (archive_entry_filetype(e) == AE_IFDIR && name.size() > 1 && name.back() == '/') name.pop_back();
  auto parts = SplitRelativePath(name);
  if (!parts.ok()) return Corrupt(index, name, parts.status().message());
  return parts;
}

absl::Status SetOwner(int fd, const std::string& path, const ExtractOptions& o) {
  if (ChangesOwner(o) && ::fchown(fd, o.uid, o.gid) != 0) {
    return ErrnoStatus(errno, absl::StrCat("chown(", path, ")"));
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, const char* data, size_t len, int64_t offset, const std::string& path) {
  while (len > 0) {  // bounded: each pass writes at least one byte or returns
    ssize_t n = ::pwrite(fd, data, len, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("write(", path, ")"));
    if (n == 0) return absl::InternalError(absl::StrCat("write(", path, "): wrote nothing"));
    data += n;
    len -= static_cast<size_t>(n);
    offset += n;
  }
  return absl::OkStatus();
}

// The entry's data, block by block at its offsets: holes of a sparse entry
// stay holes, and nothing lands past the declared size.
absl::Status CopyEntryData(struct archive* a, int fd, const std::string& path, size_t index, int64_t size) {
  // Bounded: a block that is not the last carries at least one byte.
  for (int64_t blocks = 0; blocks <= size + 1; ++blocks) {
    const void* buf;
    size_t len;
    la_int64_t offset;
    int r = archive_read_data_block(a, &buf, &len, &offset);
    if (r == ARCHIVE_EOF) return absl::OkStatus();
    if (r < ARCHIVE_WARN)
      return ArchiveStatus(a, absl::StrCat("archive is corrupt: data of ", path), absl::StatusCode::kDataLoss);
    if (offset < 0 || static_cast<uint64_t>(offset) + len > static_cast<uint64_t>(size)) {
      return Corrupt(index, path, "data beyond the entry's declared size");
    }
    CUBICLE_RETURN_IF_ERROR(WriteAll(fd, static_cast<const char*>(buf), len, offset, path));
  }
  return Corrupt(index, path, "data that never ends");
}

absl::Status ExtractFile(struct archive* a, struct archive_entry* e, const std::vector<std::string>& parts,
                         size_t index, Extraction& x) {
  std::string path = JoinPath(parts);
  int64_t size = archive_entry_size(e);
  if (size < 0) return Corrupt(index, path, "negative size");
  if (x.stats.file_bytes + static_cast<uint64_t>(size) > x.options.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("archive holds over ", x.options.max_bytes, " bytes of files (",
                                                     x.stats.file_bytes + static_cast<uint64_t>(size),
                                                     " with this entry); not extracted further"));
  }
  CUBICLE_ASSIGN_OR_RETURN(UniqueFd parent, OpenParent(x.root, parts, true, x.options.uid, x.options.gid));
  CUBICLE_ASSIGN_OR_RETURN(UniqueFd fd, OpenBeneath(parent.get(), parts.back(), O_WRONLY | O_CREAT | O_EXCL, 0600));
  CUBICLE_RETURN_IF_ERROR(CopyEntryData(a, fd.get(), path, index, size));
  if (::ftruncate(fd.get(), size) != 0) return ErrnoStatus(errno, absl::StrCat("truncate(", path, ")"));
  CUBICLE_RETURN_IF_ERROR(SetOwner(fd.get(), path, x.options));
  // After chown, which would clear setuid anyway; the mask drops it here.
  if (::fchmod(fd.get(), archive_entry_perm(e) & 0777) != 0) {
    return ErrnoStatus(errno, absl::StrCat("chmod(", path, ")"));
  }
  struct timespec times[2] = {{archive_entry_mtime(e), 0}, {archive_entry_mtime(e), 0}};
  if (::futimens(fd.get(), times) != 0) return ErrnoStatus(errno, absl::StrCat("utimens(", path, ")"));
  x.stats.file_bytes += static_cast<uint64_t>(size);
  return absl::OkStatus();
}

absl::Status ExtractDirectory(struct archive_entry* e, const std::vector<std::string>& parts, Extraction& x) {
  std::string path = JoinPath(parts);
  CUBICLE_ASSIGN_OR_RETURN(UniqueFd parent, OpenParent(x.root, parts, true, x.options.uid, x.options.gid));
  // EEXIST: made already as a parent of an earlier entry. The open below
  // then refuses it if it is a file or a symlink.
  if (::mkdirat(parent.get(), parts.back().c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, absl::StrCat("mkdir(", path, ")"));
  }
  CUBICLE_ASSIGN_OR_RETURN(UniqueFd dir, OpenBeneath(parent.get(), parts.back(), O_RDONLY | O_DIRECTORY));
  CUBICLE_RETURN_IF_ERROR(SetOwner(dir.get(), path, x.options));
  x.directories.push_back({path, static_cast<mode_t>(archive_entry_perm(e) & 0777)});
  return absl::OkStatus();
}

// The link itself, never its target: nothing in extraction follows a
// symlink, so where it points does not matter here.
absl::Status ExtractSymlink(struct archive_entry* e, const std::vector<std::string>& parts, size_t index,
                            Extraction& x) {
  std::string path = JoinPath(parts);
  const char* target = archive_entry_symlink(e);
  if (target == nullptr || *target == '\0') return Corrupt(index, path, "symlink without a target");
  CUBICLE_ASSIGN_OR_RETURN(UniqueFd parent, OpenParent(x.root, parts, true, x.options.uid, x.options.gid));
  if (::symlinkat(target, parent.get(), parts.back().c_str()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("symlink(", path, ")"));
  }
  if (ChangesOwner(x.options) &&
      ::fchownat(parent.get(), parts.back().c_str(), x.options.uid, x.options.gid, AT_SYMLINK_NOFOLLOW) != 0) {
    return ErrnoStatus(errno, absl::StrCat("chown(", path, ")"));
  }
  return absl::OkStatus();
}

absl::Status ExtractEntry(struct archive* a, struct archive_entry* e, size_t index, Extraction& x) {
  CUBICLE_ASSIGN_OR_RETURN(std::vector<std::string> parts, EntryParts(e, index));
  // A hard link's target may be any earlier entry; linking would share an
  // inode the session could change through either name. Skipped.
  bool hard_link = archive_entry_hardlink(e) != nullptr;
  absl::Status status = absl::OkStatus();
  switch (hard_link ? 0 : archive_entry_filetype(e)) {
    case AE_IFREG:
      status = ExtractFile(a, e, parts, index, x);
      break;
    case AE_IFDIR:
      status = ExtractDirectory(e, parts, x);
      break;
    case AE_IFLNK:
      status = ExtractSymlink(e, parts, index, x);
      break;
    default:  // hard links, devices, FIFOs, sockets
      ++x.stats.skipped;
      return absl::OkStatus();
  }
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("entry ", index, " '", JoinPath(parts), "': ", status.message()));
  }
  ++x.stats.entries;
  return absl::OkStatus();
}

// Children were listed after their parents; the reverse order sets a
// child's mode while its parent can still be searched.
absl::Status ApplyDirectoryModes(Extraction& x) {
  for (auto it = x.directories.rbegin(); it != x.directories.rend(); ++it) {
    CUBICLE_ASSIGN_OR_RETURN(UniqueFd dir, OpenBeneath(x.root, it->path, O_RDONLY | O_DIRECTORY));
    if (::fchmod(dir.get(), it->mode) != 0) return ErrnoStatus(errno, absl::StrCat("chmod(", it->path, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ArchiveStats> ExtractArchive(int in_fd, int root, const ExtractOptions& options) {
  CUBICLE_ASSIGN_OR_RETURN(ArchiveReader a, OpenReader(in_fd));
  Extraction x{root, options, {}, {}};
  for (size_t index = 0;; ++index) {  // bounded: max_entries
    struct archive_entry* e;
    int r = archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      return ArchiveStatus(a.get(), absl::StrCat("archive is corrupt: header of entry ", index),
                           absl::StatusCode::kDataLoss);
    }
    if (index >= options.max_entries) {
      return absl::ResourceExhaustedError(
          absl::StrCat("archive holds over ", options.max_entries, " entries, the cap; not extracted further"));
    }
    CUBICLE_RETURN_IF_ERROR(ExtractEntry(a.get(), e, index, x));
  }
  CUBICLE_RETURN_IF_ERROR(ApplyDirectoryModes(x));
  x.stats.archive_bytes = static_cast<uint64_t>(archive_filter_bytes(a.get(), -1));
  return x.stats;
}

}  // namespace cubicle::sessions
