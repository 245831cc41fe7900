#include "environments/r_library.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "sessions/paths.h"

namespace cubicle::environments {
namespace {

// The package in the folder `entry` of the library `dir`, if it is one.
std::optional<RDescription> ReadPackage(int dir, const std::string& entry) {
  if (entry.empty() || entry[0] == '.') return std::nullopt;
  UniqueFd folder(::openat(dir, entry.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!folder) return std::nullopt;
  std::optional<std::string> text = ReadHead(folder.get(), "DESCRIPTION");
  if (!text.has_value()) return std::nullopt;
  std::optional<RDescription> description = ParseRDescription(*text);
  // library(name) opens the folder of that name; R refuses a DESCRIPTION
  // that names another package there.
  if (!description.has_value() || description->package != entry) return std::nullopt;
  return description;
}

}  // namespace

std::vector<std::string> HostRLibraryFolders() {
  return {"/usr/local/lib/R/site-library", "/usr/lib/R/site-library", "/usr/lib/R/library"};
}

std::optional<RDescription> ParseRDescription(absl::string_view text) {
  RDescription out;
  bool any = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    absl::ConsumeSuffix(&line, "\r");
    if (absl::StripAsciiWhitespace(line).empty()) {
      if (any) break;  // the end of the first record
      continue;
    }
    any = true;
    if (line[0] == ' ' || line[0] == '\t') continue;  // a continuation
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    absl::string_view key = line.substr(0, colon);
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (key == "Package" && out.package.empty()) out.package = std::string(value);
    if (key == "Version" && out.version.empty()) out.version = std::string(value);
  }
  if (out.package.empty() || out.version.empty()) return std::nullopt;
  return out;
}

absl::Status ScanRLibrary(int dir, const std::string& shown_as, PackageIndex* index) {
  CUBICLE_ASSIGN_OR_RETURN(std::vector<std::string> names, sessions::ReadNames(dir, shown_as, kMaxFolderEntries));
  if (names.size() > kMaxFolderEntries) {
    return absl::ResourceExhaustedError(
        absl::StrCat(shown_as, ": more than ", kMaxFolderEntries, " entries; its packages were not read"));
  }
  std::sort(names.begin(), names.end());  // every load reads alike
  for (const std::string& entry : names) {
    std::optional<RDescription> description = ReadPackage(dir, entry);
    if (description.has_value()) {
      index->Add(InstalledPackage{description->package, description->version, shown_as});
    }
  }
  return absl::OkStatus();
}

absl::Status ScanRLibrary(const std::string& path, const std::string& shown_as, PackageIndex* index) {
  UniqueFd dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return ErrnoStatus(errno, absl::StrCat("open(", path, ")"));
  return ScanRLibrary(dir.get(), shown_as, index);
}

}  // namespace cubicle::environments
