#include "environments/catalog.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "sessions/paths.h"

namespace cubicle::environments {
namespace {

// A revision folder's name: a positive whole number without leading zeros.
std::optional<uint64_t> RevisionOf(const std::string& name) {
  uint64_t n = 0;
  const bool digits = !name.empty() && name.size() <= 18 &&
                      std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || name[0] == '0' || !absl::SimpleAtoi(name, &n)) return std::nullopt;
  return n;
}

// One load's walk of the directory.
class Walk {
 public:
  Walk(const LoadOptions& options, std::vector<Environment>* loaded, std::vector<LoadError>* errors)
      : options_(options), loaded_(loaded), errors_(errors) {}

  void Directory(const std::string& dir) {
    UniqueFd root(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root) return Fail(dir, ErrnoStatus(errno, absl::StrCat("open(", dir, ")")).message());
    for (const std::string& name : Folders(root.get(), dir)) {
      const std::string path = absl::StrCat(dir, "/", name);
      if (!skills::IsSkillName(name)) {
        Fail(path, "is not an environment name (1 to 64 of a-z, 0-9, '.', '_', '-', beginning with a letter or "
                   "digit)");
        continue;
      }
      absl::StatusOr<UniqueFd> folder = sessions::OpenBeneath(root.get(), name, O_RDONLY | O_DIRECTORY);
      if (!folder.ok()) {
        Fail(path, folder.status().message());
        continue;
      }
      std::vector<std::string> revisions = Folders(folder->get(), path);
      if (revisions.empty()) Fail(path, "holds no revision (a folder per revision: 1, 2, ...)");
      for (const std::string& revision : revisions) One(folder->get(), name, revision, path);
    }
  }

 private:
  void Fail(const std::string& path, absl::string_view problem) {
    errors_->push_back(LoadError{path, absl::StrCat(path, ": ", problem)});
  }

  void One(int folder, const std::string& name, const std::string& revision, const std::string& folder_path) {
    const std::string path = absl::StrCat(folder_path, "/", revision);
    std::optional<uint64_t> n = RevisionOf(revision);
    if (!n.has_value()) {
      return Fail(path, "is not a revision (a positive whole number without leading zeros: 1, 2, ...)");
    }
    absl::StatusOr<UniqueFd> prefix = sessions::OpenBeneath(folder, revision, O_RDONLY | O_DIRECTORY);
    if (!prefix.ok()) return Fail(path, prefix.status().message());
    absl::StatusOr<Environment> env = LoadEnvironment(prefix->get(), path, name, *n);
    if (!env.ok()) {
      errors_->push_back(LoadError{path, std::string(env.status().message())});
      return;
    }
    loaded_->push_back(*std::move(env));
  }

  // The folders in `dir` (`path`): sessions::ListFolders, bounded across
  // the whole load.
  std::vector<std::string> Folders(int dir, const std::string& path) {
    return sessions::ListFolders(dir, path, walk_,
                                 [&](const std::string& at, const std::string& problem) { Fail(at, problem); });
  }

  const LoadOptions& options_;
  std::vector<Environment>* loaded_;
  std::vector<LoadError>* errors_;
  sessions::FolderWalk walk_{"the environments directory", options_.max_folders};
};

std::string Names(const std::vector<std::string>& names) {
  return names.empty() ? "there are none" : absl::StrCat("there are: ", absl::StrJoin(names, ", "));
}

}  // namespace

Catalog Catalog::Load(const std::string& dir, const LoadOptions& options) {
  Catalog c;
  c.dir_ = dir;
  std::vector<Environment> loaded;
  Walk(options, &loaded, &c.errors_).Directory(dir);
  for (Environment& env : loaded) {
    const std::string name = env.name;
    const uint64_t revision = env.revision;
    c.environments_[name][revision] = std::make_shared<const Environment>(std::move(env));
  }
  std::stable_sort(c.errors_.begin(), c.errors_.end(),
                   [](const LoadError& a, const LoadError& b) { return a.path < b.path; });
  return c;
}

size_t Catalog::revisions() const {
  size_t n = 0;
  for (const auto& [name, revisions] : environments_) n += revisions.size();
  return n;
}

absl::StatusOr<std::shared_ptr<const Environment>> Catalog::Find(const skills::EnvironmentRef& ref) const {
  auto it = environments_.find(ref.name);
  if (it == environments_.end()) {
    std::vector<std::string> names;
    for (const auto& [name, revisions] : environments_) names.push_back(name);
    return absl::NotFoundError(absl::StrCat("no environment named '", ref.name, "' (", Names(names), ")"));
  }
  if (!ref.revision.has_value()) return it->second.rbegin()->second;
  auto revision = it->second.find(*ref.revision);
  if (revision != it->second.end()) return revision->second;
  std::vector<std::string> have;
  for (const auto& [n, env] : it->second) have.push_back(absl::StrCat(n));
  return absl::NotFoundError(absl::StrCat("environment '", ref.name, "' has no revision ", *ref.revision, " (it has ",
                                          absl::StrJoin(have, ", "), ")"));
}

absl::StatusOr<std::shared_ptr<const Environment>> Catalog::Find(absl::string_view reference) const {
  CUBICLE_ASSIGN_OR_RETURN(skills::EnvironmentRef ref, skills::ParseEnvironmentRef(reference));
  return Find(ref);
}

}  // namespace cubicle::environments
