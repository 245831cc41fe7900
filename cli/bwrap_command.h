// bubblewrap compatibility: `cubicle bwrap ARGS...`, and cubicle invoked
// under the name `bwrap`. The argv goes here raw, never through CLI11.
#pragma once

#include <string>
#include <vector>

namespace cubicle::cli {

// Runs bwrap's command line `args` (without the program name); returns the
// process exit status: the payload's, or 1 after a "bwrap: ..." message.
// `argv0` is the name usage messages show.
int RunBwrap(const std::vector<std::string>& args, const std::string& argv0);

}  // namespace cubicle::cli
