// What Python packages a folder holds, read as importlib.metadata reads
// them (docs/skills.md, "Environments"): each `NAME-VERSION.dist-info/
// METADATA` and `NAME-VERSION.egg-info` (a file, or a folder's PKG-INFO)
// directly in a site-packages folder or one made by `pip install
// --target`, its `Name:` and `Version:` headers. Read on the host, in C++,
// without running any interpreter: the same answer whether the
// environment has an interpreter of its own or not, and nothing of the
// environment's runs outside a sandbox. Nothing is followed through a
// symlink; what does not read is passed over.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "skills/requirement.h"

namespace cubicle::environments {

struct InstalledPackage {
  std::string name;     // as its metadata says: "PyYAML"
  std::string version;  // as its metadata says: "6.0.1"
  std::string folder;   // the folder it was found in, as the sandbox sees it
};

// Packages by their PEP 503 name (Python's) or their name as written
// (R's, whose names are case-sensitive). The first one added of a name is
// the one an interpreter imports (sys.path or .libPaths() order), so later
// ones are kept out.
class PackageIndex {
 public:
  PackageIndex() = default;  // Python's
  explicit PackageIndex(skills::PackageKind kind) : kind_(kind) {}

  // False when a package of that name is there already, or the name is
  // not one of `kind`'s.
  bool Add(InstalledPackage package);
  // Every package of `other` whose name is not here yet.
  void AddAll(const PackageIndex& other);
  // Python: `name` normalized (skills::NormalizePackageName). R: exactly.
  const InstalledPackage* Find(absl::string_view name) const;
  const std::map<std::string, InstalledPackage>& packages() const { return packages_; }
  size_t size() const { return packages_.size(); }

 private:
  skills::PackageKind kind_ = skills::PackageKind::kPython;
  std::map<std::string, InstalledPackage> packages_;
};

// Entries looked at in one package folder, at most.
inline constexpr size_t kMaxFolderEntries = 100000;

// The packages whose metadata is directly in the folder open as `dir`,
// added to `index` as found in `shown_as`. A folder that cannot be read is
// an error naming `shown_as`; a package whose metadata does not read is
// passed over.
absl::Status ScanPackageFolder(int dir, const std::string& shown_as, PackageIndex* index);

// The same for the host path `path` (opened without following a symlink
// at its last component).
absl::Status ScanPackageFolder(const std::string& path, const std::string& shown_as, PackageIndex* index);

// The first 64 KiB of the file `name` in `dir`: a regular file reached
// without a symlink, opened so that a FIFO cannot stall a scan. nullopt
// where it cannot be read so.
std::optional<std::string> ReadHead(int dir, const char* name);

// `Name:` and `Version:` of a core metadata file's header block (RFC 822
// style, ending at the first empty line). nullopt without both.
struct MetadataHeaders {
  std::string name;
  std::string version;
};
std::optional<MetadataHeaders> ParseMetadataHeaders(absl::string_view text);

// A requirement `index` does not meet, and why (skills::UnmetMessage).
struct UnmetRequirement {
  skills::Requirement requirement;
  std::optional<std::string> installed;  // the version there is, if any
  std::string message;
};

// Each of `requirements` that `indexes` do not meet, in their order: the
// first index that holds a package of its name decides (sys.path order).
// Versions are compared as `kind`'s (skills::Satisfies).
std::vector<UnmetRequirement> UnmetRequirements(const std::vector<skills::Requirement>& requirements,
                                                const std::vector<const PackageIndex*>& indexes,
                                                skills::PackageKind kind = skills::PackageKind::kPython);

}  // namespace cubicle::environments
