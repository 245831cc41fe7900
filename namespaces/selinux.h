// SELinux, for bubblewrap's --exec-label and --file-label, without
// libselinux: the three kernel interfaces those options need are small.
//   - enabled: a selinuxfs is mounted (what libselinux's is_selinux_enabled
//     checks first);
//   - a label is valid when the kernel accepts it on selinuxfs's `context`
//     node (security_check_context);
//   - the exec label is written to /proc/thread-self/attr/exec just before
//     execve (setexeccon; runtime/zygote.cc); a file label is a tmpfs
//     mount's `context=` option (rootfs/builder.cc).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cubicle::namespaces {

// The mount point of the first selinuxfs in a mountinfo text ("" if none).
std::string SelinuxFsFromMountinfo(absl::string_view mountinfo);

// This process's selinuxfs mount point, "" when SELinux is off here.
std::string SelinuxFsMountPoint();

// Asks the kernel whether `label` is a valid context: writes it (with its
// NUL) to `selinuxfs`/context. Error: "LABEL: <strerror>" (the cause is
// the kernel's: EINVAL for an unknown context).
absl::Status CheckSelinuxContext(const std::string& selinuxfs, const std::string& label);

}  // namespace cubicle::namespaces
