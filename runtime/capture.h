// Runs an execution with its stdout and stderr captured up to a budget per
// stream, and its stdin fed from memory: what a daemon needs to return an
// execution's output in a reply while its own memory stays bounded.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/result.h"
#include "runtime/zygote.h"

namespace cubicle::runtime {

struct CapturedRun {
  ExecResult result;
  std::string out;
  std::string err;
  bool out_truncated = false;  // the stream went on past the budget; the rest was read and dropped
  bool err_truncated = false;
  uint64_t out_total = 0;      // bytes the payload wrote, kept or not
  uint64_t err_total = 0;
};

using Runner = std::function<absl::StatusOr<ExecResult>(const ExecRequest&)>;

// A Runner on a sandbox made for the request from `spec` (no pool):
// Zygote::Create with `options`, without waiting for "ready", then Run.
Runner FreshSandboxRunner(SandboxSpec spec, ZygoteOptions options = {});

// Called for each complete stdout line (without its "\n"; a last line
// without one counts at EOF), and with `overlong` set for a line that grew
// past the line limit (its text then holds the first bytes). Returning true
// cancels the execution (reason `killed`): through the request's cancel_fd
// when the caller gave one (it must then be an eventfd of this execution
// alone), else through one made for the hook.
using LineHook = std::function<bool(absl::string_view line, bool overlong)>;

struct CaptureOptions {
  uint64_t budget = 1 << 20;     // bytes kept per stream
  LineHook on_stdout_line;       // optional
  size_t max_line = 1 << 20;     // for on_stdout_line
  // Optional: each piece of output as it is kept (stream 0 stdout, 1
  // stderr), for a caller that shows output so far (exec.status).
  std::function<void(int stream, absl::string_view kept)> on_kept;
  // Optional: every piece read, kept or not (a caller keeping its own
  // window of a long-lived execution's output: a skill session's).
  std::function<void(int stream, absl::string_view data)> on_read;
  // A stdin of the caller's own (a pipe it writes to while the execution
  // runs: a skill session's requests), used instead of `stdin_data`; -1:
  // none. It stays the caller's.
  int stdin_fd = -1;
};

// stdin is a memfd holding `stdin_data` (the payload never blocks on it);
// stdout and stderr are pipes read while it runs, keeping the first
// `budget` bytes of each and discarding the rest, so a payload that writes
// without end neither blocks nor grows the caller's memory. They are read
// in Zygote::Run's own wait (ExecRequest::output_fds): `run` must hand the
// request to Zygote::Run or Pool::Run as it is, as every Runner here does.
absl::StatusOr<CapturedRun> RunCaptured(const Runner& run, ExecRequest request, absl::string_view stdin_data,
                                        uint64_t budget);
absl::StatusOr<CapturedRun> RunCaptured(const Runner& run, ExecRequest request, absl::string_view stdin_data,
                                        const CaptureOptions& options);

}  // namespace cubicle::runtime
