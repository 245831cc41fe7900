// libarchive handles as RAII values, and its errors as absl::Status, for
// sessions/archive*.cc only. Only the tar format and the zstd filter are
// referenced, so a static link pulls in little of libarchive (see the
// cubicle_libarchive target in the root CMakeLists.txt).
#pragma once

#include <archive.h>
#include <archive_entry.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cubicle::sessions::internal {

struct ArchiveWriteFree {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
struct ArchiveReadFree {
  void operator()(struct archive* a) const { archive_read_free(a); }
};
struct ArchiveEntryFree {
  void operator()(struct archive_entry* e) const { archive_entry_free(e); }
};
using ArchiveWriter = std::unique_ptr<struct archive, ArchiveWriteFree>;
using ArchiveReader = std::unique_ptr<struct archive, ArchiveReadFree>;
using ArchiveEntry = std::unique_ptr<struct archive_entry, ArchiveEntryFree>;

// "step: <libarchive's message>", with the errno when libarchive recorded a
// real one (a write to a full disk), else `code`.
absl::Status ArchiveStatus(struct archive* a, absl::string_view step, absl::StatusCode code);

}  // namespace cubicle::sessions::internal
