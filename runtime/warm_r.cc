#include "runtime/warm_r.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

// The library, embedded at build time (CMake: CUBICLE_R_LIBRARY names the
// built file, and this object depends on it).
asm(".section .rodata\n"
    ".balign 64\n"
    "cubicle_r_library_start:\n"
    ".incbin \"" CUBICLE_R_LIBRARY "\"\n"
    "cubicle_r_library_end:\n"
    ".previous\n");
extern "C" const char cubicle_r_library_start[];
extern "C" const char cubicle_r_library_end[];

namespace cubicle::runtime {
namespace {

// runtime/warm_bootstrap.R, embedded at build time (CMake).
constexpr char kBootstrap[] =
#include "runtime/warm_bootstrap_r.inc"
    ;

// `Rscript -e` keeps at most this much of its expressions.
static_assert(sizeof(kBootstrap) < 10000, "R drops -e programs past 10000 bytes");

constexpr char kLauncher[] =
    "f=\"${TMPDIR:-/tmp}/.cubicle-skill-$$.R\" && printf '%s' \"$1\" >\"$f\" && exec Rscript --vanilla \"$f\"";

std::string BaseName(const std::string& path) { return path.substr(path.rfind('/') + 1); }

bool IsRscript(const WarmInterpreter& interpreter) { return BaseName(interpreter.argv[0]) == "Rscript"; }

// The options R and Rscript pass through that change nothing a request
// could tell from its commandArgs() alone; others (--file, -e, --args,
// --default-packages, --version) belong to a request or change R's start.
bool IsRFlag(const std::string& flag) {
  static const char* const kFlags[] = {"--vanilla",      "--no-environ", "--no-site-file", "--no-init-file",
                                       "--no-restore",   "--no-save",    "--quiet",        "--silent",
                                       "--slave",        "--no-echo",    "--no-restore-data"};
  return std::any_of(std::begin(kFlags), std::end(kFlags), [&](const char* f) { return flag == f; });
}

}  // namespace

const char* RSkillLauncher() { return kLauncher; }

bool IsRPackageName(const std::string& name) {
  if (name.empty() || !absl::ascii_isalpha(name[0]) || name.back() == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_isalnum(c) || c == '.'; });
}

absl::Status ValidateRInterpreter(const WarmInterpreter& interpreter) {
  for (size_t i = 1; i < interpreter.argv.size(); ++i) {
    if (!IsRFlag(interpreter.argv[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "interpreter argument '", interpreter.argv[i],
          "': an R interpreter takes only start-up options such as --vanilla, --no-environ or --slave (the program "
          "comes with each request)"));
    }
  }
  for (const std::string& package : interpreter.preload) {
    if (!IsRPackageName(package)) {
      return absl::InvalidArgumentError(absl::StrCat("'", package, "' is not an R package name like jsonlite"));
    }
  }
  return absl::OkStatus();
}

std::optional<WarmInvocation> MatchRInvocation(const WarmInterpreter& interpreter,
                                               const std::vector<std::string>& argv) {
  if (IsRscript(interpreter) && interpreter.argv == std::vector<std::string>{"Rscript", "--vanilla"} &&
      argv.size() == 5 && argv[0] == "/bin/sh" && argv[1] == "-c" && argv[2] == kLauncher) {
    return WarmInvocation{WarmMode::kRSkill, 4};
  }
  const size_t flags = interpreter.argv.size();
  if (argv.size() < flags || !std::equal(interpreter.argv.begin(), interpreter.argv.end(), argv.begin())) {
    return std::nullopt;
  }
  const uint32_t next = static_cast<uint32_t>(flags);
  if (!IsRscript(interpreter)) {
    // R reads its program on stdin; with anything more, exec it.
    if (argv.size() == flags) return WarmInvocation{WarmMode::kStdin, next};
    return std::nullopt;
  }
  if (argv.size() == flags) return std::nullopt;  // Rscript's own usage message
  const std::string& arg = argv[next];
  if (arg == "-") return WarmInvocation{WarmMode::kStdin, next};
  if (arg == "-e") {
    if (argv.size() == flags + 1) return std::nullopt;
    return WarmInvocation{WarmMode::kCode, next};
  }
  if (arg.empty() || arg[0] == '-') return std::nullopt;  // another option: exec it
  return WarmInvocation{WarmMode::kScript, next};
}

std::vector<std::string> RProgramCommandLine(const WarmInterpreter& interpreter, const std::string& program,
                                             const std::vector<std::string>& args) {
  std::vector<std::string> argv = interpreter.argv;
  argv.push_back("-e");
  argv.push_back(program);
  // Rscript passes what follows its -e programs on after --args itself.
  if (!IsRscript(interpreter)) argv.push_back("--args");
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

std::vector<std::string> RWarmCommandLine(const WarmInterpreter& interpreter, int socket_fd) {
  std::vector<std::string> args = {absl::StrCat(socket_fd)};
  args.insert(args.end(), interpreter.preload.begin(), interpreter.preload.end());
  return RProgramCommandLine(interpreter, kBootstrap, args);
}

std::vector<std::string> RTemplateCommandLine(const WarmInterpreter& interpreter, int socket_fd, int owner_fd) {
  std::vector<std::string> args = {"template", absl::StrCat(socket_fd), absl::StrCat(owner_fd)};
  args.insert(args.end(), interpreter.preload.begin(), interpreter.preload.end());
  return RProgramCommandLine(interpreter, kBootstrap, args);
}

std::string_view RLibrary() {
  return std::string_view(cubicle_r_library_start, cubicle_r_library_end - cubicle_r_library_start);
}

int RLibraryMemfd() {
  const int fd = ::memfd_create("cubicle-r", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -errno;
  const std::string_view bytes = RLibrary();
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      return -err;
    }
    done += static_cast<size_t>(n);
  }
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    const int err = errno;
    ::close(fd);
    return -err;
  }
  return fd;
}

}  // namespace cubicle::runtime
