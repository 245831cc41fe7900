// Whether each warm profile's interpreter can import its preload modules
// (docs/config.md, "interpreter"), checked before a daemon serves the
// configuration — at `cubicle serve --check-config`, at start and at each
// reload — rather than met by every zygote build failing the same way.
#pragma once

#include "absl/status/status.h"
#include "rpc/config.h"

namespace cubicle::rpc {

// Runs the interpreter of each warm profile once, in a fresh sandbox of
// that profile (its root, environment, limits and seccomp policy: where a
// zygote runs it), importing each preload module in turn. InvalidArgument
// naming the profile and each module that cannot be imported, with
// Python's reason; the same when the interpreter does not run there at all.
absl::Status CheckPreloads(const DaemonConfig& config);

}  // namespace cubicle::rpc
