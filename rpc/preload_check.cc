#include "rpc/preload_check.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/json_reader.h"
#include "runtime/capture.h"
#include "runtime/warm.h"
#include "runtime/warm_r.h"
#include "runtime/zygote.h"

namespace cubicle::rpc {
namespace {

// Imports each module named after it and prints "INDEX<TAB>why" for each
// that fails, as the bootstrap's preload would fail on it
// (runtime/warm_bootstrap.py catches BaseException too).
constexpr char kImportEach[] = R"PY(
import importlib, sys
for i, name in enumerate(sys.argv[1:]):
    try:
        importlib.import_module(name)
    except BaseException as e:
        print("%d\t%s: %s" % (i, type(e).__name__, str(e).replace("\n", " ")))
)PY";

// The same for R: loads each package's namespace, as the R bootstrap
// does (runtime/warm_bootstrap.R).
constexpr char kLoadEach[] = R"R(a <- commandArgs(TRUE)
for (i in seq_along(a)) tryCatch(suppressWarnings(suppressMessages(loadNamespace(a[i]))), error = function(e)
  cat(i - 1L, "\t", gsub("\n", " ", conditionMessage(e)), "\n", sep = ""))
)R";

constexpr uint64_t kOutputBudget = 64 << 10;

std::string Tail(const std::string& text) { return text.size() <= 512 ? text : text.substr(text.size() - 512); }

// The modules the check's output names, as errors at their JSON paths.
std::vector<std::string> FailedImports(const std::string& path, const Interpreter& interpreter,
                                       const std::string& out) {
  std::vector<std::string> failed;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> fields = absl::StrSplit(line, absl::MaxSplits('\t', 1));
    size_t index = 0;
    if (!absl::SimpleAtoi(fields.first, &index) || index >= interpreter.preload.size()) continue;
    failed.push_back(absl::StrCat(json_read::Element(json_read::Member(path, "preload"), index), ": '",
                                  interpreter.preload[index], "' cannot be ",
                                  runtime::IsRInterpreter(interpreter) ? "loaded" : "imported", " by ", interpreter.argv[0],
                                  " in the profile's sandbox: ", fields.second));
  }
  return failed;
}

absl::Status CheckProfile(const Profile& profile) {
  const Interpreter& interpreter = *profile.interpreter;
  const std::string path = json_read::Member(json_read::Member("profiles", profile.name), "interpreter");
  runtime::ExecRequest request;
  if (runtime::IsRInterpreter(interpreter)) {
    request.argv = runtime::RProgramCommandLine(interpreter, kLoadEach, interpreter.preload);
  } else {
    request.argv = interpreter.argv;
    request.argv.insert(request.argv.end(), {"-c", kImportEach});
    request.argv.insert(request.argv.end(), interpreter.preload.begin(), interpreter.preload.end());
  }
  request.env = profile.spec.env;  // as a zygote starts its interpreter: the spec's env, cwd "/" (the default)
  // As long as a pool waits for a zygote's interpreter to be ready.
  request.timeout = runtime::ZygoteOptions{}.ready_timeout;
  request.read_stats = false;
  absl::StatusOr<runtime::CapturedRun> run =
      runtime::RunCaptured(runtime::FreshSandboxRunner(profile.spec), request, "", kOutputBudget);
  if (!run.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": checking its preloads: no sandbox of the profile could be made: ", run.status().message()));
  }
  const runtime::ExecResult& r = run->result;
  if (r.reason != runtime::ExitReason::kExited || r.exit_code != 0) {
    const std::string why = r.reason == runtime::ExitReason::kSetupFailed ? std::string(r.setup_error.message())
                                                                           : Tail(run->err);
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", interpreter.argv[0],
                                                   " does not run in the profile's sandbox (",
                                                   runtime::ExitReasonName(r.reason), ", status ", r.ShellStatus(),
                                                   "): ", why));
  }
  std::vector<std::string> failed = FailedImports(path, interpreter, run->out);
  if (!failed.empty()) return absl::InvalidArgumentError(absl::StrJoin(failed, "; "));
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckPreloads(const DaemonConfig& config) {
  for (const auto& [name, profile] : config.profiles) {
    if (!profile.interpreter.has_value()) continue;
    if (absl::Status checked = CheckProfile(profile); !checked.ok()) return checked;
  }
  return absl::OkStatus();
}

}  // namespace cubicle::rpc
