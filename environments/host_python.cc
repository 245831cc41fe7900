#include "environments/host_python.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace cubicle::environments {
namespace {

// "", "3", "3.11": digits, optionally '.' and digits.
bool IsVersionSuffix(absl::string_view s) {
  if (s.empty()) return true;
  const size_t dot = s.find('.');
  auto digits = [](absl::string_view d) { return !d.empty() && std::all_of(d.begin(), d.end(), absl::ascii_isdigit); };
  if (dot == absl::string_view::npos) return digits(s);
  return digits(s.substr(0, dot)) && digits(s.substr(dot + 1));
}

std::optional<std::string> RealPath(const std::string& path) {
  char real[PATH_MAX];
  if (::realpath(path.c_str(), real) == nullptr) return std::nullopt;
  return std::string(real);
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The names in `folder`, sorted (a folder that does not read: none).
std::vector<std::string> Names(const std::string& folder) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(folder.c_str());
  if (dir == nullptr) return names;
  while (struct dirent* e = ::readdir(dir)) names.emplace_back(e->d_name);
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

bool IsInterpreterName(const std::string& name) {
  if (name == "R" || name == "Rscript") return true;
  absl::string_view rest = name;
  if (absl::ConsumePrefix(&rest, "pip")) return IsVersionSuffix(rest);
  if (!absl::ConsumePrefix(&rest, "python")) return false;
  absl::ConsumeSuffix(&rest, "-config");
  return IsVersionSuffix(rest);
}

HostPython FindHostPython(const std::vector<std::string>& folders, const std::vector<std::string>& prefixes) {
  HostPython host;
  std::set<std::string> seen;
  for (const std::string& folder : folders) {
    for (const std::string& name : Names(folder)) {
      if (!IsInterpreterName(name)) continue;
      std::optional<std::string> real = RealPath(absl::StrCat(folder, "/", name));
      struct stat st;
      if (!real.has_value() || ::stat(real->c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (seen.insert(*real).second) host.interpreter_files.push_back(*real);
      if (name == "python3" && host.python_version.empty()) {
        // python3 -> python3.11: the version its site folders are named by.
        absl::string_view base = *real;
        base = base.substr(base.rfind('/') + 1);
        if (absl::ConsumePrefix(&base, "python") && IsVersionSuffix(base) && absl::StrContains(base, ".")) {
          host.python_version = std::string(base);
        }
      }
    }
  }
  if (host.python_version.empty()) return host;
  std::vector<std::string> candidates;
  for (const std::string& prefix : prefixes) {
    // Debian's order, then everyone else's site-packages.
    const std::string lib = absl::StrCat(prefix, "/lib/python", host.python_version);
    candidates.push_back(prefix + "/lib/python3/dist-packages");
    candidates.push_back(lib + "/dist-packages");
    candidates.push_back(lib + "/site-packages");
  }
  std::set<std::string> added;
  for (const std::string& candidate : candidates) {
    std::optional<std::string> real = RealPath(candidate);
    if (real.has_value() && IsDirectory(*real) && added.insert(*real).second) host.site_folders.push_back(*real);
  }
  return host;
}

}  // namespace cubicle::environments
