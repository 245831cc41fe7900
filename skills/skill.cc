#include "skills/skill.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/json_reader.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "sessions/digest.h"
#include "sessions/paths.h"
#include "skills/yaml_document.h"

namespace cubicle::skills {
namespace {

// What a file's open failed with, as a skill's author would read it.
std::string OpenProblem(const absl::Status& st, absl::string_view name) {
  if (absl::StrContains(st.message(), ": ENOENT")) {
    return absl::StrCat("'", name, "' does not exist in the skill's folder");
  }
  if (absl::StrContains(st.message(), ": ELOOP")) {
    return absl::StrCat("'", name, "' is a symlink or passes through one, and symlinks are not followed");
  }
  if (absl::StrContains(st.message(), ": EXDEV")) return absl::StrCat("'", name, "' leaves the skill's folder");
  return std::string(st.message());
}

// The regular file `fd`, whole, at most `max` bytes; `what` names it.
absl::StatusOr<std::string> ReadBounded(int fd, size_t max, absl::string_view what) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat(", what, ")"));
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat("'", what, "' is not a regular file"));
  std::string text;
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("read(", what, ")"));
    if (n == 0) return text;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > max) {
      return absl::InvalidArgumentError(absl::StrCat("'", what, "' is larger than ", max, " bytes (",
                                                     max >> 10, " KiB), the most it may be"));
    }
  }
}

// The file `name` beneath `folder` (no symlink, no "..": sessions/paths.h),
// opened so that a FIFO planted there cannot block the load.
absl::StatusOr<UniqueFd> OpenInFolder(int folder, const std::string& name) {
  return sessions::OpenBeneath(folder, name, O_RDONLY | O_NONBLOCK | O_NOCTTY);
}

struct ManifestFile {
  std::string name;  // skill.yaml or skill.json
  std::string text;
};

// The folder's one manifest.
absl::StatusOr<ManifestFile> ReadManifestFile(int folder, const std::string& path, std::string* at) {
  std::optional<ManifestFile> found;
  for (const char* name : kManifestNames) {
    absl::StatusOr<UniqueFd> fd = OpenInFolder(folder, name);
    if (!fd.ok() && absl::IsNotFound(fd.status())) continue;
    *at = absl::StrCat(path, "/", name);
    if (!fd.ok()) return absl::InvalidArgumentError(absl::StrCat(*at, ": ", OpenProblem(fd.status(), name)));
    if (found.has_value()) {
      *at = path;
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": holds both ", found->name, " and ", name, "; a skill's folder holds one manifest"));
    }
    absl::StatusOr<std::string> text = ReadBounded(fd->get(), kMaxManifestBytes, name);
    if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat(*at, ": ", text.status().message()));
    found = ManifestFile{name, *std::move(text)};
  }
  if (!found.has_value()) {
    *at = path;
    return absl::NotFoundError(absl::StrCat(path, ": no skill.yaml or skill.json"));
  }
  *at = absl::StrCat(path, "/", found->name);
  return *std::move(found);
}

absl::StatusOr<Manifest> ParseManifestFile(const ManifestFile& file) {
  absl::StatusOr<boost::json::value> document = absl::EndsWith(file.name, ".json")
                                                    ? json_read::ParseDocument(file.text, /*comments=*/false)
                                                    : ParseYamlDocument(file.text);
  if (!document.ok()) return document.status();
  return ParseManifest(*document);
}

// The entry's bytes: beneath the folder, a regular file within
// kMaxScriptBytes, without a NUL (it becomes one argument).
absl::StatusOr<std::string> ReadEntry(int folder, const std::string& entry) {
  auto refuse = [&](absl::string_view problem) {
    return json_read::Error("entry", problem);
  };
  if (entry.front() == '/') return refuse(absl::StrCat("'", entry, "' is absolute; name a file in the skill's folder"));
  absl::StatusOr<std::vector<std::string>> parts = sessions::SplitRelativePath(entry);
  if (!parts.ok()) return refuse(parts.status().message());
  absl::StatusOr<UniqueFd> fd = OpenInFolder(folder, sessions::JoinPath(*parts));
  if (!fd.ok()) return refuse(OpenProblem(fd.status(), entry));
  absl::StatusOr<std::string> script = ReadBounded(fd->get(), kMaxScriptBytes, entry);
  if (!script.ok()) return refuse(script.status().message());
  if (size_t nul = script->find('\0'); nul != std::string::npos) {
    return refuse(absl::StrCat("'", entry, "' holds a NUL byte (at offset ", nul,
                               "); a script is passed as one argument and cannot"));
  }
  return script;
}

}  // namespace

std::string SkillIdInput(absl::string_view script, const std::vector<Requirement>& requirements) {
  std::vector<std::string> canonical;
  for (const Requirement& r : requirements) canonical.push_back(r.Canonical());
  std::sort(canonical.begin(), canonical.end());
  std::string out = absl::StrCat("cubicle-skill-id-v1\nscript ", script.size(), "\n", script, "\nrequires ",
                                 canonical.size(), "\n");
  for (const std::string& c : canonical) absl::StrAppend(&out, c, "\n");
  return out;
}

std::string SkillId(absl::string_view script, const std::vector<Requirement>& requirements) {
  return sessions::Sha256Hex(SkillIdInput(script, requirements));
}

absl::StatusOr<Skill> LoadSkill(int folder_fd, const std::string& folder, std::string* at) {
  CUBICLE_ASSIGN_OR_RETURN(ManifestFile file, ReadManifestFile(folder_fd, folder, at));
  auto located = [&](const absl::Status& st) {
    return absl::Status(st.code(), absl::StrCat(*at, ": ", st.message()));
  };
  absl::StatusOr<Manifest> manifest = ParseManifestFile(file);
  if (!manifest.ok()) return located(manifest.status());
  Skill skill;
  skill.manifest = *std::move(manifest);
  absl::StatusOr<std::string> script = ReadEntry(folder_fd, skill.manifest.entry);
  if (!script.ok()) return located(script.status());
  skill.script = *std::move(script);
  skill.id = SkillId(skill.script, skill.manifest.requirements);
  if (skill.id.empty()) {
    return located(absl::FailedPreconditionError("its id: SHA-256 is unavailable (libcrypto could not be loaded)"));
  }
  skill.folder = folder;
  skill.manifest_path = *at;
  return skill;
}

}  // namespace cubicle::skills
