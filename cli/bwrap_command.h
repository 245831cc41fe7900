// bubblewrap compatibility: `cubicle bwrap ARGS...`, and cubicle invoked
// under the name `bwrap`. The argv goes here raw, never through CLI11.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/spec.h"

namespace cubicle::cli {

// Runs bwrap's command line `args` (without the program name); returns the
// process exit status: the payload's, or 1 after a "bwrap: ..." message.
// `argv0` is the name usage messages show.
int RunBwrap(const std::vector<std::string>& args, const std::string& argv0);

// A launcher error ("step(detail): ENAME: strerror", or for a filesystem
// mount "mount(fs)(detail): ...") in bwrap's words, without the "bwrap: "
// prefix: "execvp foo: No such file or directory", "Can't mount proc on
// /newroot/proc: Operation not permitted". Other messages pass unchanged.
// With the sandbox's `spec`, a failed overlay mount is named by its mount
// options, as bwrap 0.11 names it.
std::string BwrapMessage(const absl::Status& status, const runtime::SandboxSpec* spec = nullptr);

}  // namespace cubicle::cli
