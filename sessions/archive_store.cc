// LocalArchiveStore: one file per key in an operator-set directory, replaced
// atomically by rename.
#include "sessions/archive.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"

namespace cubicle::sessions {
namespace {

constexpr size_t kMaxKeyBytes = 128;
constexpr absl::string_view kSuffix = ".tar.zst";
constexpr absl::string_view kTempMarker = ".tmp-";
constexpr int kTempNameTries = 16;
// A temporary untouched this long belongs to a save that died: a live save
// writes its temporary without pause. Younger ones are left alone, since on
// a directory several daemons share they may be another daemon's save in
// progress.
constexpr time_t kStaleTempSeconds = 3600;

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};

std::string ArchiveName(absl::string_view key) { return absl::StrCat(key, kSuffix); }

// A temporary that is unlinked unless Keep() is called.
class TempFile {
 public:
  TempFile(int dir_fd, std::string name, UniqueFd fd) : dir_fd_(dir_fd), name_(std::move(name)), fd_(std::move(fd)) {}
  TempFile(TempFile&&) = default;
  ~TempFile() {
    if (!name_.empty()) ::unlinkat(dir_fd_, name_.c_str(), 0);
  }
  int fd() const { return fd_.get(); }
  const std::string& name() const { return name_; }
  void Keep() { name_.clear(); }

 private:
  int dir_fd_;
  std::string name_;
  UniqueFd fd_;
};

// DIR/.<key>.tmp-XXXXXX, made with O_EXCL (there is no mkstempat).
absl::StatusOr<TempFile> MakeTemp(int dir_fd, absl::string_view key) {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  for (int attempt = 0; attempt < kTempNameTries; ++attempt) {
    unsigned char random[6];
    if (::getrandom(random, sizeof(random), 0) != static_cast<ssize_t>(sizeof(random))) {
      return ErrnoStatus(errno, "getrandom");
    }
    std::string name = absl::StrCat(".", key, kTempMarker);
    for (unsigned char c : random) name.push_back(kAlphabet[c % (sizeof(kAlphabet) - 1)]);
    int fd = ::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) return TempFile(dir_fd, std::move(name), UniqueFd(fd));
    if (errno != EEXIST) return ErrnoStatus(errno, absl::StrCat("create(", name, ")"));
  }
  return absl::AlreadyExistsError(
      absl::StrCat("create(.", key, kTempMarker, "*): ", kTempNameTries, " random names were all taken"));
}

absl::Status SyncDirectory(int dir_fd, const std::string& dir) {
  if (::fsync(dir_fd) != 0) return ErrnoStatus(errno, absl::StrCat("fsync(", dir, ")"));
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> OpenStoreDirectory(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("archive directory is empty");
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus(errno, absl::StrCat("mkdir(", dir, ")"));
  // O_NOFOLLOW: a symlink here could point archives anywhere.
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    int err = errno;
    if (err == ELOOP || err == ENOTDIR) {
      return absl::FailedPreconditionError(
          absl::StrCat("archive directory ", dir, " is a symlink or not a directory; refused"));
    }
    return ErrnoStatus(err, absl::StrCat("open(", dir, ")"));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat(", dir, ")"));
  // Whoever owns the directory can swap the archives in it.
  if (st.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("archive directory %s is owned by uid %d, not by us (%d); refused", dir, st.st_uid, ::geteuid()));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "archive directory %s is writable by group or others (mode %04o); refused", dir, st.st_mode & 07777));
  }
  return fd;
}

// The temporaries a Save that crashed left behind: ".<key>.tmp-*" not
// modified for kStaleTempSeconds.
absl::Status RemoveStaleTemps(int dir_fd, const std::string& dir) {
  const time_t now = ::time(nullptr);
  int dup_fd = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return ErrnoStatus(errno, absl::StrCat("dup(", dir, ")"));
  std::unique_ptr<DIR, DirCloser> stream(::fdopendir(dup_fd));
  if (stream == nullptr) {
    int err = errno;
    ::close(dup_fd);
    return ErrnoStatus(err, absl::StrCat("fdopendir(", dir, ")"));
  }
  std::vector<std::string> stale;
  for (struct dirent* d = ::readdir(stream.get()); d != nullptr;
       d = ::readdir(stream.get())) {  // ends at the listing's end
    absl::string_view name = d->d_name;
    if (!absl::StartsWith(name, ".") || !absl::StrContains(name, kTempMarker)) continue;
    struct stat st;
    if (::fstatat(dir_fd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
    if (now - st.st_mtime >= kStaleTempSeconds) stale.emplace_back(name);
  }
  stream.reset();
  for (const std::string& name : stale) {
    if (::unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, absl::StrCat("unlink(", dir, "/", name, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateArchiveKey(absl::string_view key) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("archive key is ", key.size(), " bytes; keys are 1 to ", kMaxKeyBytes));
  }
  if (key.front() == '.') return absl::InvalidArgumentError(absl::StrCat("archive key '", key, "' starts with '.'"));
  for (char c : key) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("archive key '", absl::CHexEscape(key), "' holds a character outside [A-Za-z0-9._-]"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LocalArchiveStore>> LocalArchiveStore::Create(const std::string& dir) {
  CUBICLE_ASSIGN_OR_RETURN(UniqueFd fd, OpenStoreDirectory(dir));
  CUBICLE_RETURN_IF_ERROR(RemoveStaleTemps(fd.get(), dir));
  return std::unique_ptr<LocalArchiveStore>(new LocalArchiveStore(dir, std::move(fd)));
}

absl::StatusOr<ArchiveStats> LocalArchiveStore::Save(absl::string_view key, int root, const ArchiveOptions& options) {
  CUBICLE_RETURN_IF_ERROR(ValidateArchiveKey(key));
  CUBICLE_ASSIGN_OR_RETURN(TempFile temp, MakeTemp(dir_fd_.get(), key));
  CUBICLE_ASSIGN_OR_RETURN(ArchiveStats stats, WriteArchive(root, temp.fd(), options));
  if (::fsync(temp.fd()) != 0) return ErrnoStatus(errno, absl::StrCat("fsync(", dir_, "/", temp.name(), ")"));
  std::string name = ArchiveName(key);
  if (::renameat(dir_fd_.get(), temp.name().c_str(), dir_fd_.get(), name.c_str()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("rename(", temp.name(), ", ", dir_, "/", name, ")"));
  }
  temp.Keep();
  CUBICLE_RETURN_IF_ERROR(SyncDirectory(dir_fd_.get(), dir_));
  return stats;
}

absl::StatusOr<std::optional<ArchiveStats>> LocalArchiveStore::Restore(absl::string_view key, int root,
                                                                       const ExtractOptions& options) {
  CUBICLE_RETURN_IF_ERROR(ValidateArchiveKey(key));
  std::string name = ArchiveName(key);
  UniqueFd fd(::openat(dir_fd_.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid() && errno == ENOENT) return std::nullopt;
  if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat("open(", dir_, "/", name, ")"));
  auto stats = ExtractArchive(fd.get(), root, options);
  if (!stats.ok()) {
    return absl::Status(stats.status().code(),
                        absl::StrCat("restore ", dir_, "/", name, ": ", stats.status().message()));
  }
  return std::optional<ArchiveStats>(*stats);
}

absl::Status LocalArchiveStore::Remove(absl::string_view key) {
  CUBICLE_RETURN_IF_ERROR(ValidateArchiveKey(key));
  std::string name = ArchiveName(key);
  if (::unlinkat(dir_fd_.get(), name.c_str(), 0) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(errno, absl::StrCat("unlink(", dir_, "/", name, ")"));
  }
  return SyncDirectory(dir_fd_.get(), dir_);
}

std::string LocalArchiveStore::Describe() const { return absl::StrCat("local archives in ", dir_); }

}  // namespace cubicle::sessions
