// What R packages a library folder holds, read as R's library() finds
// them (docs/skills.md, "R"): each folder directly in it whose
// DESCRIPTION names it (`Package:`) and says its `Version:`. Read on the
// host, in C++, without running R, as environments/packages.h reads
// Python's; nothing is followed through a symlink and what does not read
// is passed over.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "environments/packages.h"

namespace cubicle::environments {

// The library folders R searches on a Debian or Ubuntu host, in its
// order: R_LIBS_SITE as /usr/lib/R/etc/Renviron sets it, then R's own
// library (.Library). `Rscript --vanilla -e '.libPaths()'` prints them.
// R_LIBS and R_LIBS_USER are left out: a sandbox's R finds none unless a
// request sets them.
std::vector<std::string> HostRLibraryFolders();

// `Package:` and `Version:` of a DESCRIPTION file (Debian control format:
// "Field: value", continuation lines starting with a space or tab; field
// names are case-sensitive, as R's read.dcf reads them; the first record
// only). nullopt without both.
struct RDescription {
  std::string package;
  std::string version;
};
std::optional<RDescription> ParseRDescription(absl::string_view text);

// The packages in the library folder open as `dir`, added to `index` (a
// PackageKind::kR one) as found in `shown_as`. A folder that cannot be
// read is an error naming `shown_as`; a package whose DESCRIPTION does not
// read, or names another package than its folder (library() would refuse
// it), is passed over.
absl::Status ScanRLibrary(int dir, const std::string& shown_as, PackageIndex* index);

// The same for the host path `path` (opened without following a symlink
// at its last component).
absl::Status ScanRLibrary(const std::string& path, const std::string& shown_as, PackageIndex* index);

}  // namespace cubicle::environments
