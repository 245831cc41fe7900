#include "skills/catalog.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "sessions/paths.h"

namespace cubicle::skills {
namespace {

// One load's walk of the directory: the skills that read, the errors of
// those that did not.
class Walk {
 public:
  Walk(const LoadOptions& options, std::vector<Skill>* loaded, std::vector<LoadError>* errors)
      : options_(options), loaded_(loaded), errors_(errors) {}

  void Directory(const std::string& dir) {
    UniqueFd root(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root) return Fail(dir, ErrnoStatus(errno, absl::StrCat("open(", dir, ")")).message());
    for (const std::string& name : Folders(root.get(), dir)) {
      const std::string path = absl::StrCat(dir, "/", name);
      absl::StatusOr<UniqueFd> folder = sessions::OpenBeneath(root.get(), name, O_RDONLY | O_DIRECTORY);
      if (!folder.ok()) {
        Fail(path, folder.status().message());
        continue;
      }
      if (HoldsManifest(folder->get())) {
        One(folder->get(), path);
        continue;
      }
      std::vector<std::string> versions = Folders(folder->get(), path);
      if (versions.empty()) Fail(path, "holds neither skill.yaml nor skill.json, nor a folder per version");
      for (const std::string& version : versions) {
        const std::string version_path = absl::StrCat(path, "/", version);
        absl::StatusOr<UniqueFd> sub = sessions::OpenBeneath(folder->get(), version, O_RDONLY | O_DIRECTORY);
        if (!sub.ok()) {
          Fail(version_path, sub.status().message());
          continue;
        }
        One(sub->get(), version_path);
      }
    }
  }

 private:
  void Fail(const std::string& path, absl::string_view problem) {
    errors_->push_back(LoadError{path, absl::StrCat(path, ": ", problem)});
  }

  // The folders in `dir` (`path`): sessions::ListFolders, bounded across
  // the whole load.
  std::vector<std::string> Folders(int dir, const std::string& path) {
    return sessions::ListFolders(dir, path, walk_,
                                 [&](const std::string& at, const std::string& problem) { Fail(at, problem); });
  }

  static bool HoldsManifest(int folder) {
    struct stat st;
    return std::any_of(std::begin(kManifestNames), std::end(kManifestNames),
                       [&](const char* name) { return ::fstatat(folder, name, &st, AT_SYMLINK_NOFOLLOW) == 0; });
  }

  void One(int folder, const std::string& path) {
    std::string at = path;
    absl::StatusOr<Skill> skill = LoadSkill(folder, path, &at);
    if (!skill.ok()) {
      errors_->push_back(LoadError{at, std::string(skill.status().message())});
      return;
    }
    loaded_->push_back(*std::move(skill));
  }

  const LoadOptions& options_;
  std::vector<Skill>* loaded_;
  std::vector<LoadError>* errors_;
  sessions::FolderWalk walk_{"the skills directory", options_.max_folders};
};

}  // namespace

Catalog Catalog::Load(const std::string& dir, const LoadOptions& options) {
  Catalog c;
  c.dir_ = dir;
  std::vector<Skill> loaded;
  Walk(options, &loaded, &c.errors_).Directory(dir);
  // Two manifests claiming one name and version: neither is served, since
  // which one a call meant cannot be known.
  std::map<std::string, std::vector<size_t>> by_reference;
  for (size_t i = 0; i < loaded.size(); ++i) by_reference[loaded[i].Reference()].push_back(i);
  std::vector<bool> dropped(loaded.size(), false);
  for (const auto& [reference, indexes] : by_reference) {
    if (indexes.size() < 2) continue;
    for (size_t i : indexes) {
      dropped[i] = true;
      const std::string& path = loaded[i].manifest_path;
      std::vector<std::string> others;
      for (size_t j : indexes) {
        if (j != i) others.push_back(loaded[j].manifest_path);
      }
      c.errors_.push_back(LoadError{path, absl::StrCat(path, ": ", reference, " is also the name and version of ",
                                                       absl::StrJoin(others, ", "), "; none of them is served")});
    }
  }
  auto leave_out = [&](size_t i, const absl::Status& st) {
    dropped[i] = true;
    const std::string& path = loaded[i].manifest_path;
    c.errors_.push_back(LoadError{path, absl::StrCat(path, ": ", st.message())});
  };
  std::vector<Skill*> passed;
  std::vector<size_t> passed_index;
  for (size_t i = 0; i < loaded.size(); ++i) {
    if (dropped[i]) continue;
    if (options.check) {
      if (absl::Status st = options.check(loaded[i]); !st.ok()) {
        leave_out(i, st);
        continue;
      }
    }
    passed.push_back(&loaded[i]);
    passed_index.push_back(i);
  }
  if (options.check_all && !passed.empty()) {
    std::vector<absl::Status> checked = options.check_all(passed);
    for (size_t k = 0; k < passed_index.size(); ++k) {
      // A check that answers for fewer skills than it was given has not
      // checked the rest.
      absl::Status st = k < checked.size() ? checked[k] : absl::InternalError("not checked");
      if (!st.ok()) leave_out(passed_index[k], st);
    }
  }
  for (size_t i = 0; i < loaded.size(); ++i) {
    if (dropped[i]) continue;
    Skill& skill = loaded[i];
    const std::string name = skill.manifest.name;
    const Version version = skill.manifest.version;
    c.skills_[name][version] = std::make_shared<const Skill>(std::move(skill));
  }
  std::stable_sort(c.errors_.begin(), c.errors_.end(),
                   [](const LoadError& a, const LoadError& b) { return a.path < b.path; });
  return c;
}

size_t Catalog::versions() const {
  size_t n = 0;
  for (const auto& [name, versions] : skills_) n += versions.size();
  return n;
}

absl::StatusOr<std::shared_ptr<const Skill>> Catalog::Find(absl::string_view name,
                                                           const VersionSelector& selector) const {
  auto it = skills_.find(std::string(name));
  if (it == skills_.end()) return absl::NotFoundError(absl::StrCat("no skill named '", name, "'"));
  for (auto v = it->second.rbegin(); v != it->second.rend(); ++v) {
    if (selector.Matches(v->first)) return v->second;
  }
  std::vector<std::string> have;
  for (const auto& [version, skill] : it->second) have.push_back(version.ToString());
  if (selector.text().empty()) {
    return absl::NotFoundError(absl::StrCat("skill '", name, "' has prereleases only (", absl::StrJoin(have, ", "),
                                            "): name one exactly, as ", name, "@", have.back()));
  }
  return absl::NotFoundError(absl::StrCat("skill '", name, "' has no version matching '", selector.text(),
                                          "' (it has ", absl::StrJoin(have, ", "), ")"));
}

absl::StatusOr<std::shared_ptr<const Skill>> Catalog::Find(absl::string_view reference) const {
  absl::StatusOr<SkillReference> r = ParseSkillReference(reference);
  if (!r.ok()) return r.status();
  return Find(r->name, r->selector);
}

}  // namespace cubicle::skills
