// Warm interpreters (DESIGN §5): a zygote whose init has already started the
// interpreter — under the sandbox's seccomp policy, capabilities dropped —
// and imported the profile's modules. At hand-off init forwards the request
// to the interpreter's bootstrap (runtime/warm_bootstrap.py), which runs the
// script as __main__ with the request's argv, env, cwd and stdio. Still one
// process per request: the interpreter is never reused.
//
// Python and R (runtime/warm_r.h) are supported. A request is served warm
// when its argv is an
// invocation of this very interpreter with exactly the profile's flags:
// for a Python profile {"argv": ["python3", "-I"]}, `python3 -I script.py ARGS`,
// `python3 -I -c CODE ARGS`, `python3 -I -m MODULE ARGS` and `python3 -I -`
// (or no script: the program on stdin). Any other argv — other flags,
// another program — is exec'd by the bootstrap as usual (still inside the
// sandbox, with the same hygiene): correct, only not warm.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace cubicle::runtime {

struct WarmInterpreter {
  std::vector<std::string> argv;     // e.g. {"python3", "-I"}; argv[0] is looked up in PATH
  std::vector<std::string> preload;  // module names imported before "ready", e.g. {"json"}
  // Under a fork server, each zygote's interpreter is a fork of a template
  // that imported `preload` once (runtime/warm_template.h): a zygote costs
  // a fork, not an interpreter start, but siblings share the template's
  // str hash seed and address-space layout (docs/security.md), and a
  // request pays for a few of the pages it writes being copied. False:
  // every zygote starts its own interpreter.
  bool from_template = true;
  bool operator==(const WarmInterpreter&) const = default;
};

// A dotted Python module name: "json", "os.path", "_io".
bool IsPythonModuleName(const std::string& name);

// An interpreter named Rscript or R (runtime/warm_r.h), not Python.
bool IsRInterpreter(const WarmInterpreter& interpreter);

// Whether `name` can be one of `interpreter`'s preloads: a dotted module
// name for Python, a package name for R.
bool IsPreloadName(const WarmInterpreter& interpreter, const std::string& name);

// argv names a Python interpreter (python, python3, python3.11, a path to
// one) and every preload entry is a dotted module name; or an R one
// (runtime/warm_r.h).
absl::Status ValidateWarmInterpreter(const WarmInterpreter& interpreter);

// kRSkill: R only, the R skill launcher's program (kRSkillLauncher).
enum class WarmMode : uint32_t { kScript = 1, kCode = 2, kModule = 3, kStdin = 4, kRSkill = 5 };

// How the bootstrap runs a request: the mode and the index in argv of the
// script path, the code (after -c), the module (after -m), or of the first
// argument of a stdin program ("-" or argv.size()).
struct WarmInvocation {
  WarmMode mode;
  uint32_t index;
  bool operator==(const WarmInvocation&) const = default;
  // Packed into the execution request's header (namespaces/exec_request.h).
  uint32_t Encode() const { return static_cast<uint32_t>(mode) | (index << 8); }
};

// nullopt: `argv` is not an invocation of `interpreter` the bootstrap can
// run without exec'ing (argv[0] differs, other flags, an option it does not
// model); the request is exec'd instead.
std::optional<WarmInvocation> MatchWarmInvocation(const WarmInterpreter& interpreter,
                                                  const std::vector<std::string>& argv);

// The interpreter's command line: interpreter argv, "-c", the bootstrap,
// then the bootstrap's own arguments (its socket fd, the preload modules).
std::vector<std::string> WarmCommandLine(const WarmInterpreter& interpreter, int socket_fd);

// The fd number the bootstrap's socket has in the interpreter process.
inline constexpr int kWarmSocketFd = 3;

// A warm template's interpreter (runtime/warm_template.h): the bootstrap in
// template mode, its socket to init and its owner's socket, the modules.
std::vector<std::string> TemplateCommandLine(const WarmInterpreter& interpreter, int socket_fd, int owner_fd);

// The fd number of the template's owner socket in the template interpreter.
inline constexpr int kTemplateOwnerFd = 4;

}  // namespace cubicle::runtime
