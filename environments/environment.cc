// One revision's folder (environments/catalog.h LoadEnvironment): its
// environment.json, its interpreter, its site-packages and its packages.
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include <boost/json/value.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/json_reader.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "environments/catalog.h"
#include "sessions/paths.h"

namespace cubicle::environments {
namespace json = boost::json;

namespace {

constexpr size_t kMaxDescriptionBytes = 4096;
constexpr size_t kMaxPyvenvBytes = 4096;

// What a path's open failed with, as an operator would read it.
std::string OpenProblem(const absl::Status& st, absl::string_view name) {
  if (absl::StrContains(st.message(), ": ENOENT")) {
    return absl::StrCat("'", name, "' does not exist in the environment's folder");
  }
  if (absl::StrContains(st.message(), ": ELOOP")) {
    return absl::StrCat("'", name, "' is a symlink or passes through one, and symlinks are not followed");
  }
  if (absl::StrContains(st.message(), ": ENOTDIR")) return absl::StrCat("'", name, "' is not a folder");
  if (absl::StrContains(st.message(), ": EXDEV")) return absl::StrCat("'", name, "' leaves the environment's folder");
  return std::string(st.message());
}

// The regular file `name` in `dir` whole, at most `max` bytes; nullopt
// when there is none. Reached without a symlink; a FIFO cannot stall it.
absl::StatusOr<std::optional<std::string>> ReadOptionalFile(int dir, const std::string& name, size_t max) {
  absl::StatusOr<UniqueFd> fd = sessions::OpenBeneath(dir, name, O_RDONLY | O_NONBLOCK | O_NOCTTY);
  if (!fd.ok() && absl::IsNotFound(fd.status())) return std::optional<std::string>();
  if (!fd.ok()) return absl::InvalidArgumentError(OpenProblem(fd.status(), name));
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat(", name, ")"));
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a regular file"));
  std::string text;
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd->get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("read(", name, ")"));
    if (n == 0) return std::optional<std::string>(std::move(text));
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > max) {
      return absl::InvalidArgumentError(absl::StrCat("is larger than ", max, " bytes, the most it may be"));
    }
  }
}

// One python_path entry: a relative path to a folder beneath the prefix,
// with no symlink on the way.
absl::Status CheckPythonPathEntry(int prefix_fd, const std::string& entry, const std::string& path) {
  if (!entry.empty() && entry[0] == '/') {
    return json_read::Error(path, absl::StrCat("'", entry, "' is absolute; python_path's folders are relative to the "
                                               "environment's folder"));
  }
  absl::StatusOr<std::vector<std::string>> parts = sessions::SplitRelativePath(entry);
  if (!parts.ok()) return json_read::Error(path, parts.status().message());
  absl::StatusOr<UniqueFd> dir = sessions::OpenBeneath(prefix_fd, entry, O_RDONLY | O_DIRECTORY);
  if (!dir.ok()) return json_read::Error(path, OpenProblem(dir.status(), entry));
  return absl::OkStatus();
}

// environment.json: {"description": "...", "python_path": ["site", ...]}.
absl::Status ReadDescriptionFile(int prefix_fd, Environment* env) {
  CUBICLE_ASSIGN_OR_RETURN(std::optional<std::string> text,
                           ReadOptionalFile(prefix_fd, kDescriptionFile, kMaxDescriptionFileBytes));
  if (!text.has_value()) return absl::OkStatus();
  CUBICLE_ASSIGN_OR_RETURN(json::value document, json_read::ParseDocument(*text, /*comments=*/true));
  CUBICLE_ASSIGN_OR_RETURN(json_read::Object o, json_read::Object::Open(document, "", {"description", "python_path"}));
  CUBICLE_RETURN_IF_ERROR(o.Read("description", &env->description, json_read::String));
  if (env->description.size() > kMaxDescriptionBytes) {
    return json_read::Error(o.PathOf("description"), absl::StrCat("is longer than ", kMaxDescriptionBytes, " bytes"));
  }
  CUBICLE_RETURN_IF_ERROR(o.Read("python_path", &env->python_path, json_read::StringArray));
  if (env->python_path.size() > kMaxPythonPath) {
    return json_read::Error(o.PathOf("python_path"), absl::StrCat("more than ", kMaxPythonPath, " folders"));
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < env->python_path.size(); ++i) {
    const std::string at = json_read::Element(o.PathOf("python_path"), i);
    CUBICLE_RETURN_IF_ERROR(CheckPythonPathEntry(prefix_fd, env->python_path[i], at));
    if (!seen.insert(env->python_path[i]).second) {
      return json_read::Error(at, absl::StrCat("'", env->python_path[i], "' is listed twice"));
    }
  }
  return absl::OkStatus();
}

// bin/python3, resolved beneath the prefix (a relative symlink inside it
// is what venvs and conda make) to a regular executable file.
void FindInterpreter(int prefix_fd, Environment* env) {
  struct stat st;
  env->has_bin = ::fstatat(prefix_fd, "bin", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
  if (!env->has_bin) return;
  struct open_how how;
  std::memset(&how, 0, sizeof(how));
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  UniqueFd fd(static_cast<int>(::syscall(SYS_openat2, prefix_fd, "bin/python3", &how, sizeof(how))));
  if (!fd) {
    if (errno == EXDEV || errno == ELOOP) {
      env->notes.push_back(
          "bin/python3 leaves the environment's folder (a symlink to the host's python, as `python3 -m venv` "
          "makes): the environment is a package set for the host's interpreter, whose binaries are not masked");
    }
    return;
  }
  env->own_interpreter = ::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111) != 0;
  if (!env->own_interpreter) env->notes.push_back("bin/python3 is not an executable file: it is not used");
}

// lib/pythonX.Y/site-packages, each a folder with no symlink on the way.
void FindSitePackages(int prefix_fd, Environment* env) {
  absl::StatusOr<UniqueFd> lib = sessions::OpenBeneath(prefix_fd, "lib", O_RDONLY | O_DIRECTORY);
  if (!lib.ok()) return;
  absl::StatusOr<std::vector<std::string>> names = sessions::ReadNames(lib->get(), "lib", 1000);
  if (!names.ok()) return;
  for (const std::string& name : *names) {
    absl::string_view version = name;
    if (!absl::ConsumePrefix(&version, "python")) continue;
    std::vector<absl::string_view> numbers = absl::StrSplit(version, '.');
    const bool x_y = numbers.size() == 2 && std::all_of(numbers.begin(), numbers.end(), [](absl::string_view n) {
                       return !n.empty() && std::all_of(n.begin(), n.end(), absl::ascii_isdigit);
                     });
    if (!x_y) continue;
    const std::string folder = absl::StrCat("lib/", name, "/site-packages");
    if (sessions::OpenBeneath(prefix_fd, folder, O_RDONLY | O_DIRECTORY).ok()) env->site_packages.push_back(folder);
  }
  std::sort(env->site_packages.begin(), env->site_packages.end());
}

// pyvenv.cfg's include-system-site-packages.
void ReadPyvenv(int prefix_fd, Environment* env) {
  absl::StatusOr<std::optional<std::string>> text = ReadOptionalFile(prefix_fd, "pyvenv.cfg", kMaxPyvenvBytes);
  if (!text.ok() || !text->has_value()) return;
  for (absl::string_view line : absl::StrSplit(**text, '\n')) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, absl::MaxSplits('=', 1));
    if (absl::StripAsciiWhitespace(kv.first) == "include-system-site-packages") {
      env->system_site_packages = absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(kv.second), "true");
    }
  }
}

absl::Status IndexPackages(int prefix_fd, Environment* env) {
  std::vector<std::string> folders = env->python_path;
  folders.insert(folders.end(), env->site_packages.begin(), env->site_packages.end());
  for (const std::string& folder : folders) {
    absl::StatusOr<UniqueFd> dir = sessions::OpenBeneath(prefix_fd, folder, O_RDONLY | O_DIRECTORY);
    if (!dir.ok()) return absl::InvalidArgumentError(OpenProblem(dir.status(), folder));
    CUBICLE_RETURN_IF_ERROR(ScanPackageFolder(dir->get(), absl::StrCat(kMountPoint, "/", folder), &env->packages));
  }
  return absl::OkStatus();
}

}  // namespace

std::string Environment::Reference() const { return absl::StrCat(name, "@", revision); }

std::vector<std::string> Environment::SandboxPythonPath() const {
  std::vector<std::string> out;
  for (const std::string& folder : python_path) out.push_back(absl::StrCat(kMountPoint, "/", folder));
  if (!own_interpreter) {
    for (const std::string& folder : site_packages) out.push_back(absl::StrCat(kMountPoint, "/", folder));
  }
  return out;
}

absl::StatusOr<Environment> LoadEnvironment(int prefix_fd, const std::string& prefix, const std::string& name,
                                            uint64_t revision) {
  Environment env;
  env.name = name;
  env.revision = revision;
  env.prefix = prefix;
  if (absl::Status st = ReadDescriptionFile(prefix_fd, &env); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "/", kDescriptionFile, ": ", st.message()));
  }
  FindInterpreter(prefix_fd, &env);
  FindSitePackages(prefix_fd, &env);
  ReadPyvenv(prefix_fd, &env);
  if (absl::Status st = IndexPackages(prefix_fd, &env); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, ": ", st.message()));
  }
  return env;
}

}  // namespace cubicle::environments
