// Small, exact cgroupfs I/O: one write(2) per value (cgroupfs parses each
// write on its own), whole-file reads, group directories made and removed.
// Every error names the full path and the errno. Used by the backends and
// by SweepStale; not part of the public interface of cgroups/.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubicle::cgroups::cgroupfs {

enum class WriteMode {
  kReplace,  // O_TRUNC: a single-value file ("memory.max")
  kAppend,   // O_APPEND: a keyed file written one key per write ("io.max");
             // cgroupfs ignores the offset, a plain file keeps every line
};

// Writes `value` to `file` under `dirfd` with one write(2): 0 or an errno.
int WriteRaw(int dirfd, const char* file, absl::string_view value, WriteMode mode);

// Writes `value` to `dir`/`file` through `dirfd` (an fd of `dir`, which only
// names the path in errors): "write(/sys/fs/cgroup/x/memory.max, 64M): EINVAL: ...".
absl::Status Write(int dirfd, absl::string_view dir, const char* file, absl::string_view value,
                   WriteMode mode = WriteMode::kReplace);

// The whole contents of `dir`/`file` (a group's file, read as ReadFromStart
// does), or of any file at `path` (read to its end: /proc files too). A
// missing file is NotFound.
absl::StatusOr<std::string> Read(int dirfd, absl::string_view dir, const char* file);
absl::StatusOr<std::string> Read(const std::string& path);

// The whole contents of an open cgroup file, read again from its start
// (pread at 0: a cgroup file regenerates its text at offset 0). A read
// shorter than the buffer is taken as the end, which saves the final
// empty read. `path` only names the file in errors.
absl::StatusOr<std::string> ReadFromStart(int fd, const std::string& path);

// Whether `dir`/`file` exists (faccessat; errors read as "no").
bool Exists(int dirfd, const char* file);

// Opens a group (or parent) directory: O_RDONLY|O_DIRECTORY|O_CLOEXEC, the
// form CLONE_INTO_CGROUP takes. Returns the fd or an error naming `path`.
absl::StatusOr<int> OpenDir(const std::string& path);

// mkdir(path). On an emulated tree (see Layout::emulated) the new directory
// also gets an empty copy of each regular file of its parent. An existing
// directory is AlreadyExists.
absl::Status MakeGroupDir(const std::string& path, bool emulated);

// Whether `path` has a subdirectory (a child group). Errors read as "no".
bool HasSubdirectories(const std::string& path);

// rmdir(path): 0, or an errno (a missing directory is 0). On an emulated
// tree the directory's regular files are unlinked first, unless it has a
// subdirectory (ENOTEMPTY, as cgroupfs would answer EBUSY).
int RemoveGroupDirRaw(const std::string& path, bool emulated);
absl::Status RemoveGroupDir(const std::string& path, bool emulated);

// The pids in a cgroup.procs text, one per line.
absl::StatusOr<std::vector<pid_t>> ParsePids(absl::string_view text);

// "a/b" joined with "c" as "a/b/c" (one slash).
std::string Join(absl::string_view dir, absl::string_view name);

}  // namespace cubicle::cgroups::cgroupfs
