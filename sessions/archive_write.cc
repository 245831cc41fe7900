// WriteArchive: list the tree, check it against the caps, then write it.
// Listing first means an over-cap workspace costs a walk, never a read,
// and leaves `out_fd` untouched.
#include "sessions/archive.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "sessions/archive_libarchive.h"
#include "sessions/paths.h"

namespace cubicle::sessions {
namespace internal {

absl::Status ArchiveStatus(struct archive* a, absl::string_view step, absl::StatusCode code) {
  const char* what = archive_error_string(a);
  std::string detail = absl::StrCat(step, " (", what != nullptr ? what : "no detail", ")");
  int err = archive_errno(a);
  // libarchive's own codes (its private ARCHIVE_ERRNO_FILE_FORMAT is EILSEQ
  // on Linux, _PROGRAMMER EINVAL, _MISC -1) say nothing an errno name would
  // add; a real errno does.
  if (err > 0 && err != EILSEQ && err != EINVAL) {
    return ErrnoStatus(err, detail);
  }
  return absl::Status(code, detail);
}

}  // namespace internal

namespace {

using internal::ArchiveEntry;
using internal::ArchiveStatus;
using internal::ArchiveWriter;

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};
using DirStream = std::unique_ptr<DIR, DirCloser>;

// One thing to store, as listed.
struct PlannedEntry {
  std::string path;
  mode_t mode = 0;  // type and permission bits
  uint64_t size = 0;
  time_t mtime = 0;
  std::string link_target;
};

struct TreePlan {
  std::vector<PlannedEntry> entries;
  uint64_t file_bytes = 0;
  size_t skipped = 0;
};

std::string ChildPath(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : absl::StrCat(dir, "/", name);
}

// The names in the directory `path` beneath `root`, sorted so that an
// archive of the same tree is the same archive.
absl::StatusOr<std::vector<std::string>> ListDirectory(int dir_fd, const std::string& path) {
  int dup_fd = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return ErrnoStatus(errno, absl::StrCat("dup(", path, ")"));
  DirStream dir(::fdopendir(dup_fd));
  if (dir == nullptr) {
    int err = errno;
    ::close(dup_fd);
    return ErrnoStatus(err, absl::StrCat("fdopendir(", path, ")"));
  }
  std::vector<std::string> names;
  for (;;) {  // ends at the directory's end: the kernel lists each name once
    errno = 0;
    struct dirent* d = ::readdir(dir.get());
    if (d == nullptr) break;
    std::string name = d->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  if (errno != 0) return ErrnoStatus(errno, absl::StrCat("readdir(", path, ")"));
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::string> ReadLinkTarget(int dir_fd, const std::string& name, const std::string& path) {
  char buf[PATH_MAX];
  ssize_t n = ::readlinkat(dir_fd, name.c_str(), buf, sizeof(buf));
  if (n < 0) return ErrnoStatus(errno, absl::StrCat("readlink(", path, ")"));
  if (static_cast<size_t>(n) == sizeof(buf)) {
    return absl::InvalidArgumentError(absl::StrCat("readlink(", path, "): target longer than ", PATH_MAX));
  }
  return std::string(buf, static_cast<size_t>(n));
}

// Adds `name` in `dir` (listed as `dir_path`, at `depth` components) to
// the plan; a directory is also pushed on `pending` to be listed.
absl::Status PlanEntry(int dir_fd, const std::string& dir_path, size_t depth, const std::string& name, TreePlan& plan,
                       std::vector<std::pair<std::string, size_t>>& pending) {
  std::string path = ChildPath(dir_path, name);
  struct stat st;
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return ErrnoStatus(errno, absl::StrCat("stat(", path, ")"));
  }
  bool storable = S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode);
  // What ExtractArchive would refuse is not stored: it would make the
  // whole archive unrestorable.
  if (!storable || depth + 1 > kMaxPathDepth || path.size() > kMaxPathBytes) {
    ++plan.skipped;
    return absl::OkStatus();
  }
  PlannedEntry entry{path, st.st_mode, 0, st.st_mtim.tv_sec, ""};
  if (S_ISREG(st.st_mode)) {
    entry.size = static_cast<uint64_t>(st.st_size);
    plan.file_bytes += entry.size;
  } else if (S_ISLNK(st.st_mode)) {
    CUBICLE_ASSIGN_OR_RETURN(entry.link_target, ReadLinkTarget(dir_fd, name, path));
  } else {
    pending.emplace_back(path, depth + 1);
  }
  plan.entries.push_back(std::move(entry));
  return absl::OkStatus();
}

// Every entry under `root`, parents before children, without reading a
// file. Directories are opened beneath `root`, so a directory swapped for
// a symlink while listed is an error, never followed.
absl::StatusOr<TreePlan> PlanTree(int root, const ArchiveOptions& options) {
  TreePlan plan;
  std::vector<std::pair<std::string, size_t>> pending = {{"", 0}};  // (path, depth)
  size_t seen = 0;
  while (!pending.empty()) {  // bounded: each name is seen once, and at most max_entries are
    auto [dir_path, depth] = std::move(pending.back());
    pending.pop_back();
    CUBICLE_ASSIGN_OR_RETURN(UniqueFd dir, OpenBeneath(root, dir_path, O_RDONLY | O_DIRECTORY));
    CUBICLE_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDirectory(dir.get(), dir_path));
    for (const std::string& name : names) {
      if (++seen > options.max_entries) {
        return absl::ResourceExhaustedError(
            absl::StrCat("workspace holds over ", options.max_entries, " entries, the archive's cap; not archived"));
      }
      CUBICLE_RETURN_IF_ERROR(PlanEntry(dir.get(), dir_path, depth, name, plan, pending));
    }
  }
  if (plan.file_bytes > options.max_workspace_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("workspace holds ", plan.file_bytes,
                                                     " bytes, over the archive cap ", options.max_workspace_bytes,
                                                     "; not archived"));
  }
  return plan;
}

absl::StatusOr<ArchiveWriter> OpenWriter(int out_fd, int zstd_level) {
  if (zstd_level < 1 || zstd_level > 19) {
    return absl::InvalidArgumentError(absl::StrCat("zstd level ", zstd_level, " is outside 1..19"));
  }
  ArchiveWriter a(archive_write_new());
  if (a == nullptr) return absl::ResourceExhaustedError("archive_write_new: out of memory");
  // pax_restricted: plain ustar headers unless a name, size or link needs
  // a pax record, which every tar since 2001 reads.
  std::string level = std::to_string(zstd_level);
  if (archive_write_set_format_pax_restricted(a.get()) != ARCHIVE_OK ||
      archive_write_add_filter_zstd(a.get()) != ARCHIVE_OK ||
      archive_write_set_filter_option(a.get(), "zstd", "compression-level", level.c_str()) != ARCHIVE_OK ||
      archive_write_set_bytes_in_last_block(a.get(), 1) != ARCHIVE_OK ||  // no padding to 10 KiB
      archive_write_open_fd(a.get(), out_fd) != ARCHIVE_OK) {
    return ArchiveStatus(a.get(), "open archive writer", absl::StatusCode::kInternal);
  }
  return a;
}

ArchiveEntry HeaderFor(const PlannedEntry& planned, uint64_t size) {
  ArchiveEntry e(archive_entry_new());
  if (e == nullptr) return e;
  archive_entry_copy_pathname(e.get(), planned.path.c_str());
  archive_entry_set_filetype(e.get(), planned.mode & S_IFMT);
  archive_entry_set_perm(e.get(), planned.mode & 07777);
  archive_entry_set_mtime(e.get(), planned.mtime, 0);
  archive_entry_set_size(e.get(), static_cast<la_int64_t>(size));
  if (S_ISLNK(planned.mode)) archive_entry_copy_symlink(e.get(), planned.link_target.c_str());
  return e;
}

absl::Status WriteHeader(struct archive* a, const PlannedEntry& planned, uint64_t size) {
  ArchiveEntry e = HeaderFor(planned, size);
  if (e == nullptr) return absl::ResourceExhaustedError("archive_entry_new: out of memory");
  // ARCHIVE_WARN: a name that is not valid in this locale, stored as raw
  // bytes (pax hdrcharset=BINARY), which is what we want.
  if (archive_write_header(a, e.get()) < ARCHIVE_WARN) {
    return ArchiveStatus(a, absl::StrCat("write header of ", planned.path), absl::StatusCode::kInternal);
  }
  return absl::OkStatus();
}

// Copies `size` bytes of `fd` into the archive's current entry.
absl::Status CopyFileData(struct archive* a, int fd, const std::string& path, uint64_t size) {
  std::vector<char> buf(256 << 10);
  uint64_t done = 0;
  while (done < size) {  // bounded: each pass reads at least one byte or returns
    size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - done));
    ssize_t n = ::read(fd, buf.data(), want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("read(", path, ")"));
    if (n == 0) {
      return absl::AbortedError(
          absl::StrCat("read(", path, "): the file shrank from ", size, " to ", done, " bytes while it was archived"));
    }
    if (archive_write_data(a, buf.data(), static_cast<size_t>(n)) != n) {
      return ArchiveStatus(a, absl::StrCat("write data of ", path), absl::StatusCode::kInternal);
    }
    done += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

// A regular file, as its size is when opened: a file that grows later is
// stored up to that size. Anything else found there now is skipped.
absl::Status WriteFile(struct archive* a, int root, const PlannedEntry& planned, const ArchiveOptions& options,
                       ArchiveStats& stats) {
  // O_NONBLOCK: a FIFO swapped in since the listing opens without a writer.
  CUBICLE_ASSIGN_OR_RETURN(UniqueFd fd, OpenBeneath(root, planned.path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat(", planned.path, ")"));
  if (!S_ISREG(st.st_mode)) {
    ++stats.skipped;
    return absl::OkStatus();
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (stats.file_bytes + size > options.max_workspace_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("workspace grew past the archive cap ",
                                                     options.max_workspace_bytes, " while archived (at ", planned.path,
                                                     "); not archived"));
  }
  CUBICLE_RETURN_IF_ERROR(WriteHeader(a, planned, size));
  CUBICLE_RETURN_IF_ERROR(CopyFileData(a, fd.get(), planned.path, size));
  stats.file_bytes += size;
  ++stats.entries;
  return absl::OkStatus();
}

absl::Status WriteEntry(struct archive* a, int root, const PlannedEntry& planned, const ArchiveOptions& options,
                        ArchiveStats& stats) {
  if (S_ISREG(planned.mode)) return WriteFile(a, root, planned, options, stats);
  CUBICLE_RETURN_IF_ERROR(WriteHeader(a, planned, 0));
  ++stats.entries;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ArchiveStats> WriteArchive(int root, int out_fd, const ArchiveOptions& options) {
  CUBICLE_ASSIGN_OR_RETURN(TreePlan plan, PlanTree(root, options));
  CUBICLE_ASSIGN_OR_RETURN(ArchiveWriter a, OpenWriter(out_fd, options.zstd_level));
  ArchiveStats stats;
  stats.skipped = plan.skipped;
  for (const PlannedEntry& planned : plan.entries) {
    CUBICLE_RETURN_IF_ERROR(WriteEntry(a.get(), root, planned, options, stats));
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) {
    return ArchiveStatus(a.get(), "finish archive", absl::StatusCode::kInternal);
  }
  stats.archive_bytes = static_cast<uint64_t>(archive_filter_bytes(a.get(), -1));
  return stats;
}

}  // namespace cubicle::sessions

#ifdef CUBICLE_LIBARCHIVE_STATIC
// Statically linked, libarchive's tar writers reference this one helper
// from archive_write_set_format.o, whose table of every format would pull
// in all of them and their libraries (nettle, lzma, bz2, zlib, libxml2 and
// ICU). It only words the error for an entry of a type the format cannot
// store, which WriteArchive never gives it. Defined here, in the object
// that calls the writers, so the linker never needs that member; if a
// libarchive release needs it for something else, the link fails with a
// duplicate symbol rather than misbehaving.
extern "C" void __archive_write_entry_filetype_unsupported(struct archive* a, struct archive_entry* entry,
                                                           const char* format) {
  archive_set_error(a, EILSEQ, "%s: %s format cannot archive this file type", archive_entry_pathname(entry), format);
}
#endif
