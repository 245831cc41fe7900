// A Layout as text, and back, for the host cache (runtime/host_cache.h):
// what one cubicle process discovered, the next one reuses instead of
// asking libcgroup and mountinfo again.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cgroups/layout.h"

namespace cubicle::cgroups {

// One record per line, fields tab-separated and C-escaped, so any path
// survives. Not emulated layouts: they describe a test's fake tree.
std::string SerializeLayout(const Layout& layout);

// The inverse. Anything malformed (an unknown record, a bad number, a
// relative path or a ".." in one, an index out of range) is
// InvalidArgument: a cache that does not parse is not used.
absl::StatusOr<Layout> ParseLayout(absl::string_view text);

// Whether a layout read back from outside this process still holds: each
// hierarchy's mount point is a cgroup filesystem of its version and each
// parent directory exists (PrepareParents made it). FailedPrecondition
// naming the first that does not.
absl::Status RevalidateLayout(const Layout& layout);

}  // namespace cubicle::cgroups
