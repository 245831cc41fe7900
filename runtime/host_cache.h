// What every cubicle process would otherwise rediscover about its host, kept
// across processes: the cgroup layout, with its parents prepared. A cold
// `cubicle run` is a new process each time, and discovering the layout
// (libcgroup's cgroup_init alone touches ~200 pages, each a page fault)
// cost more than the sandbox's own mounts. The cache is one file under
// /run/cubicle (root) or $XDG_RUNTIME_DIR/cubicle (rootless); anything that
// could make it wrong is part of its key and checked on every use.
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cgroups/layout.h"

namespace cubicle::runtime {

// The directory of the cache: $CUBICLE_HOST_CACHE when set ("off": none),
// else /run/cubicle as root, $XDG_RUNTIME_DIR/cubicle rootless when that is
// an absolute directory of the caller's; "" when there is none.
std::string HostCacheDir();

// What the cached layout depends on, read afresh (three small reads from
// /proc): the caller's euid and mount namespace, its own cgroups
// (/proc/self/cgroup), every cgroup and cgroup2 line of
// /proc/self/mountinfo (as a hash) and the layout options. A different key
// means the cache is not used.
absl::StatusOr<std::string> HostCacheKey(const cgroups::LayoutOptions& options);

// The layout stored under `key` in `dir`, or nullopt: no file, another
// key, a file or directory another user owns or others may write (a root
// cubicle trusts only what root wrote), text that does not parse, or a
// layout whose mounts or parents are gone (cgroups::RevalidateLayout).
std::optional<cgroups::Layout> LoadCachedLayout(const std::string& dir, const std::string& key);

// Stores `layout` under `key`, atomically (a temporary file renamed over
// the old one), making `dir` (0755 as root, 0700 rootless) when missing.
absl::Status StoreCachedLayout(const std::string& dir, const std::string& key, const cgroups::Layout& layout);

// Removes the cache file (`cubicle cleanup`); a missing one is fine.
absl::Status RemoveHostCache(const std::string& dir);

}  // namespace cubicle::runtime
