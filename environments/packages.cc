#include "environments/packages.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "sessions/paths.h"
#include "skills/package_version.h"

namespace cubicle::environments {
namespace {

// The headers come first; a long description after them is not read.
constexpr size_t kMaxHeaderBytes = 64 << 10;

// The metadata of the folder entry `entry` in `dir`, if it is one.
std::optional<MetadataHeaders> ReadEntry(int dir, const std::string& entry) {
  const bool dist_info = absl::EndsWith(entry, ".dist-info");
  const bool egg_info = absl::EndsWith(entry, ".egg-info");
  if (!dist_info && !egg_info) return std::nullopt;
  struct stat st;
  if (::fstatat(dir, entry.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return std::nullopt;
  std::optional<std::string> text;
  if (S_ISREG(st.st_mode) && egg_info) {
    text = ReadHead(dir, entry.c_str());  // an egg-info file is the metadata itself
  } else if (S_ISDIR(st.st_mode)) {
    UniqueFd folder(::openat(dir, entry.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (folder) text = ReadHead(folder.get(), dist_info ? "METADATA" : "PKG-INFO");
  }
  if (!text.has_value()) return std::nullopt;
  return ParseMetadataHeaders(*text);
}

}  // namespace

std::optional<std::string> ReadHead(int dir, const char* name) {
  UniqueFd fd(::openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  std::string text(kMaxHeaderBytes, '\0');
  size_t have = 0;
  while (have < text.size()) {
    ssize_t n = ::read(fd.get(), text.data() + have, text.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += static_cast<size_t>(n);
  }
  text.resize(have);
  return text;
}

bool PackageIndex::Add(InstalledPackage package) {
  std::optional<std::string> key;
  if (kind_ == skills::PackageKind::kR) {
    if (skills::IsRPackageName(package.name)) key = package.name;
  } else {
    key = skills::NormalizePackageName(package.name);
  }
  if (!key.has_value()) return false;
  return packages_.emplace(*std::move(key), std::move(package)).second;
}

void PackageIndex::AddAll(const PackageIndex& other) {
  for (const auto& [key, package] : other.packages_) packages_.emplace(key, package);
}

const InstalledPackage* PackageIndex::Find(absl::string_view name) const {
  auto it = packages_.find(std::string(name));
  return it == packages_.end() ? nullptr : &it->second;
}

std::optional<MetadataHeaders> ParseMetadataHeaders(absl::string_view text) {
  MetadataHeaders out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    absl::ConsumeSuffix(&line, "\r");
    if (line.empty()) break;  // the end of the headers
    if (line[0] == ' ' || line[0] == '\t') continue;  // a continuation
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    absl::string_view key = line.substr(0, colon);
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    // The first of each, as email.parser's Message.get() gives.
    if (absl::EqualsIgnoreCase(key, "Name") && out.name.empty()) out.name = std::string(value);
    if (absl::EqualsIgnoreCase(key, "Version") && out.version.empty()) out.version = std::string(value);
  }
  if (out.name.empty() || out.version.empty()) return std::nullopt;
  return out;
}

absl::Status ScanPackageFolder(int dir, const std::string& shown_as, PackageIndex* index) {
  CUBICLE_ASSIGN_OR_RETURN(std::vector<std::string> names, sessions::ReadNames(dir, shown_as, kMaxFolderEntries));
  if (names.size() > kMaxFolderEntries) {
    return absl::ResourceExhaustedError(
        absl::StrCat(shown_as, ": more than ", kMaxFolderEntries, " entries; its packages were not read"));
  }
  // In name order, so that every load reads alike; a package twice in one
  // folder (two versions' metadata left behind) keeps the first.
  std::sort(names.begin(), names.end());
  for (const std::string& entry : names) {
    std::optional<MetadataHeaders> headers = ReadEntry(dir, entry);
    if (headers.has_value()) index->Add(InstalledPackage{headers->name, headers->version, shown_as});
  }
  return absl::OkStatus();
}

absl::Status ScanPackageFolder(const std::string& path, const std::string& shown_as, PackageIndex* index) {
  UniqueFd dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return ErrnoStatus(errno, absl::StrCat("open(", path, ")"));
  return ScanPackageFolder(dir.get(), shown_as, index);
}

std::vector<UnmetRequirement> UnmetRequirements(const std::vector<skills::Requirement>& requirements,
                                                const std::vector<const PackageIndex*>& indexes,
                                                skills::PackageKind kind) {
  std::vector<UnmetRequirement> unmet;
  for (const skills::Requirement& r : requirements) {
    const InstalledPackage* found = nullptr;
    for (const PackageIndex* index : indexes) {
      found = index->Find(r.name);
      if (found != nullptr) break;
    }
    if (found != nullptr && skills::Satisfies(r, found->version, kind)) continue;
    std::optional<std::string> installed;
    if (found != nullptr) installed = found->version;
    unmet.push_back(UnmetRequirement{r, installed, skills::UnmetMessage(r, installed, kind)});
  }
  return unmet;
}

}  // namespace cubicle::environments
