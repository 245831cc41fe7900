#include "runtime/warm.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/warm_r.h"

namespace cubicle::runtime {
namespace {

// runtime/warm_bootstrap.py, embedded at build time (CMake).
constexpr char kBootstrap[] =
#include "runtime/warm_bootstrap.inc"
    ;

bool IsPythonName(const std::string& path) {
  std::string base = path.substr(path.rfind('/') + 1);
  if (!absl::StartsWith(base, "python")) return false;
  return std::all_of(base.begin() + 6, base.end(), [](char c) { return absl::ascii_isdigit(c) || c == '.'; });
}

}  // namespace

bool IsPythonModuleName(const std::string& name) {
  if (name.empty() || name.front() == '.' || name.back() == '.' || absl::StrContains(name, "..")) return false;
  bool start = true;
  for (char c : name) {
    if (c == '.') {
      start = true;
      continue;
    }
    if (!(absl::ascii_isalpha(c) || c == '_' || (!start && absl::ascii_isdigit(c)))) return false;
    start = false;
  }
  return true;
}

bool IsRInterpreter(const WarmInterpreter& interpreter) {
  if (interpreter.argv.empty()) return false;
  const std::string& path = interpreter.argv[0];
  const std::string base = path.substr(path.rfind('/') + 1);
  return base == "Rscript" || base == "R";
}

bool IsPreloadName(const WarmInterpreter& interpreter, const std::string& name) {
  return IsRInterpreter(interpreter) ? IsRPackageName(name) : IsPythonModuleName(name);
}

absl::Status ValidateWarmInterpreter(const WarmInterpreter& interpreter) {
  if (interpreter.argv.empty() || interpreter.argv[0].empty()) {
    return absl::InvalidArgumentError("a warm interpreter needs an argv naming the interpreter");
  }
  if (IsRInterpreter(interpreter)) return ValidateRInterpreter(interpreter);
  if (!IsPythonName(interpreter.argv[0])) {
    return absl::InvalidArgumentError(absl::StrCat("'", interpreter.argv[0],
                                                   "': only Python (python3, python3.11, a path to one) and R "
                                                   "(Rscript, R) interpreters can be kept warm"));
  }
  for (size_t i = 1; i < interpreter.argv.size(); ++i) {
    const std::string& flag = interpreter.argv[i];
    if (flag == "-c" || flag == "-m" || flag == "-" || flag.empty() || flag[0] != '-') {
      if (i > 1 && interpreter.argv[i - 1] == "-X") continue;  // -X utf8, -X dev
      if (i > 1 && interpreter.argv[i - 1] == "-W") continue;  // -W error
      return absl::InvalidArgumentError(absl::StrCat(
          "interpreter argument '", flag,
          "': only interpreter options may follow the interpreter (the script comes with each request)"));
    }
  }
  for (const std::string& module : interpreter.preload) {
    if (!IsPythonModuleName(module)) {
      return absl::InvalidArgumentError(absl::StrCat("'", module, "' is not a module name like json or os.path"));
    }
  }
  return absl::OkStatus();
}

std::optional<WarmInvocation> MatchWarmInvocation(const WarmInterpreter& interpreter,
                                                  const std::vector<std::string>& argv) {
  if (IsRInterpreter(interpreter)) return MatchRInvocation(interpreter, argv);
  const size_t flags = interpreter.argv.size();
  if (argv.size() < flags || !std::equal(interpreter.argv.begin(), interpreter.argv.end(), argv.begin())) {
    return std::nullopt;
  }
  const uint32_t next = static_cast<uint32_t>(flags);
  if (argv.size() == flags) return WarmInvocation{WarmMode::kStdin, next};
  const std::string& arg = argv[next];
  if (arg == "-") return WarmInvocation{WarmMode::kStdin, next};
  if (arg == "-c" || arg == "-m") {
    if (argv.size() == flags + 1) return std::nullopt;  // the interpreter's own usage error
    return WarmInvocation{arg == "-c" ? WarmMode::kCode : WarmMode::kModule, next + 1};
  }
  if (arg.empty() || arg[0] == '-') return std::nullopt;  // another option: exec it
  return WarmInvocation{WarmMode::kScript, next};
}

std::vector<std::string> WarmCommandLine(const WarmInterpreter& interpreter, int socket_fd) {
  if (IsRInterpreter(interpreter)) return RWarmCommandLine(interpreter, socket_fd);
  std::vector<std::string> argv = interpreter.argv;
  argv.push_back("-c");
  argv.push_back(kBootstrap);
  argv.push_back(absl::StrCat(socket_fd));
  argv.insert(argv.end(), interpreter.preload.begin(), interpreter.preload.end());
  return argv;
}

std::vector<std::string> TemplateCommandLine(const WarmInterpreter& interpreter, int socket_fd, int owner_fd) {
  if (IsRInterpreter(interpreter)) return RTemplateCommandLine(interpreter, socket_fd, owner_fd);
  std::vector<std::string> argv = interpreter.argv;
  argv.push_back("-c");
  argv.push_back(kBootstrap);
  argv.push_back("template");
  argv.push_back(absl::StrCat(socket_fd));
  argv.push_back(absl::StrCat(owner_fd));
  argv.insert(argv.end(), interpreter.preload.begin(), interpreter.preload.end());
  return argv;
}

}  // namespace cubicle::runtime
