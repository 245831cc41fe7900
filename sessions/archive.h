// Workspace archives (DESIGN §6a): when a session is reaped or destroyed its
// workspace is saved as a zstd-compressed pax tar, and restored on the next
// use of its key. The workspace was written by a hostile payload and the
// archive may have been tampered with on disk, so writing never follows a
// link or reads a device or FIFO, and extraction is our own code: every
// name is checked and every file is created beneath the target root, so no
// entry can write outside it, whatever it says. Failures never fail an
// execution — the caller logs them — so each error names the step, the
// entry and the errno. Host side; no JSON.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/unique_fd.h"

namespace cubicle::sessions {

struct ArchiveStats {
  uint64_t file_bytes = 0;     // regular files' contents
  uint64_t archive_bytes = 0;  // the compressed archive
  size_t entries = 0;          // files, directories and symlinks stored or restored
  // Entries of any other kind (FIFO, device, socket, hard link), or named
  // deeper or longer than SplitRelativePath accepts.
  size_t skipped = 0;
};

struct ArchiveOptions {
  uint64_t max_workspace_bytes = 200ull << 20;
  int zstd_level = 3;  // 1..19
  size_t max_entries = 100000;
};

// Writes a zstd-compressed pax tar of the tree under `root` (a directory
// fd) to `out_fd`. Regular files, directories and symlinks (stored as
// links, never followed); anything else is skipped and counted, as is a
// name ExtractArchive would refuse (deeper than kMaxPathDepth, longer than
// kMaxPathBytes). The whole tree is listed and its sizes summed before
// anything is written: over `max_workspace_bytes` is ResourceExhausted
// ("workspace holds N bytes, over the archive cap M; not archived") with
// nothing written, as is a tree of more than `max_entries`; a sparse file
// counts by its size and over the cap is never read. Files are opened
// beneath `root` (O_NONBLOCK, so a FIFO swapped in cannot block) and read
// through the fd: a file that grows while read is archived up to its size
// when opened; one that shrinks is Aborted, naming it. On error, `out_fd`
// may hold part of an archive: the caller discards it (LocalArchiveStore
// writes to a temporary file).
absl::StatusOr<ArchiveStats> WriteArchive(int root, int out_fd, const ArchiveOptions& options);

struct ExtractOptions {
  uid_t uid = static_cast<uid_t>(-1);  // owner of everything made; -1 leaves it ours
  gid_t gid = static_cast<gid_t>(-1);
  uint64_t max_bytes = 512ull << 20;  // sum of the regular files' declared sizes
  size_t max_entries = 100000;        // every entry read, skipped ones included
};

// Extracts the archive read from `in_fd` into `root`, a directory fd that
// is expected to be empty. Each name must pass SplitRelativePath (a
// directory's one trailing '/' aside): an absolute name, "..", an empty
// component refuses the archive as corrupt (DataLoss, naming the entry).
// Parents are opened with OpenParent, files created with O_EXCL beneath
// root (a name seen twice is an error, never an overwrite), symlinks
// recreated as symlinks (they are inert: nothing here follows one, so an
// entry beneath a symlink fails); hard links, devices, FIFOs and sockets
// are skipped and counted. Ownership is set to `uid`:`gid`, modes are
// masked to 0777 (no setuid, setgid or sticky bit), directories get their
// modes after every entry is in. Over `max_entries` or `max_bytes` is
// ResourceExhausted before the entry that crosses the cap is written.
//
// On error, `root` holds the entries extracted before the failing one and
// possibly part of that one (a file short of its data, directories with
// mode 0700): never anything outside `root`. The caller wipes it.
absl::StatusOr<ArchiveStats> ExtractArchive(int in_fd, int root, const ExtractOptions& options);

// OK when `key` can name an archive: [A-Za-z0-9._-]{1,128}, not starting
// with '.'; else InvalidArgument. So a key can never name a path.
absl::Status ValidateArchiveKey(absl::string_view key);

// Where archives live, by session key (ValidateArchiveKey; other keys are
// InvalidArgument). LocalArchiveStore keeps them in a directory; an
// S3-compatible object store is the intended next implementation of this
// same interface (Save uploads the archive, Restore downloads it into a
// temporary file before extracting), not built yet.
class ArchiveStore {
 public:
  virtual ~ArchiveStore() = default;

  // Archives the tree under `root` as `key`'s archive, replacing any
  // previous one only once the new one is complete.
  virtual absl::StatusOr<ArchiveStats> Save(absl::string_view key, int root, const ArchiveOptions& options) = 0;
  // Extracts `key`'s archive into `root` (ExtractArchive); nullopt when
  // there is none.
  virtual absl::StatusOr<std::optional<ArchiveStats>> Restore(absl::string_view key, int root,
                                                              const ExtractOptions& options) = 0;
  // Deletes `key`'s archive; none is OK.
  virtual absl::Status Remove(absl::string_view key) = 0;
  // For logs: "local archives in /var/lib/cubicle/archives".
  virtual std::string Describe() const = 0;
};

// Archives as DIR/<key>.tar.zst. Save writes DIR/.<key>.tmp-XXXXXX, then
// fsync, rename over DIR/<key>.tar.zst and fsync(DIR): a crash leaves the
// previous archive or the new one, never part of one.
class LocalArchiveStore : public ArchiveStore {
 public:
  // Makes `dir` (0700) if missing; refuses it if it is a symlink, not a
  // directory, owned by another uid, or writable by group or others.
  // Removes the temporaries a crashed Save left, once they are an hour
  // old: younger ones may be the saves of another daemon sharing `dir`.
  static absl::StatusOr<std::unique_ptr<LocalArchiveStore>> Create(const std::string& dir);

  absl::StatusOr<ArchiveStats> Save(absl::string_view key, int root, const ArchiveOptions& options) override;
  absl::StatusOr<std::optional<ArchiveStats>> Restore(absl::string_view key, int root,
                                                      const ExtractOptions& options) override;
  absl::Status Remove(absl::string_view key) override;
  std::string Describe() const override;

 private:
  LocalArchiveStore(std::string dir, UniqueFd dir_fd) : dir_(std::move(dir)), dir_fd_(std::move(dir_fd)) {}

  std::string dir_;
  UniqueFd dir_fd_;  // O_RDONLY | O_DIRECTORY: names are resolved in it, and fsync needs a readable fd
};

}  // namespace cubicle::sessions
