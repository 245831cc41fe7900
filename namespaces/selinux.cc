#include "namespaces/selinux.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/unique_fd.h"

namespace cubicle::namespaces {

std::string SelinuxFsFromMountinfo(absl::string_view mountinfo) {
  for (absl::string_view line : absl::StrSplit(mountinfo, '\n')) {
    // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS"
    size_t dash = line.find(" - ");
    if (dash == absl::string_view::npos) continue;
    std::vector<absl::string_view> after = absl::StrSplit(line.substr(dash + 3), ' ');
    if (after.empty() || after[0] != "selinuxfs") continue;
    std::vector<absl::string_view> before = absl::StrSplit(line.substr(0, dash), ' ');
    if (before.size() < 5) continue;
    return std::string(before[4]);  // mountinfo escapes spaces as \040; selinuxfs paths have none
  }
  return "";
}

std::string SelinuxFsMountPoint() {
  std::ifstream in("/proc/self/mountinfo");
  std::stringstream text;
  text << in.rdbuf();
  return SelinuxFsFromMountinfo(text.str());
}

absl::Status CheckSelinuxContext(const std::string& selinuxfs, const std::string& label) {
  const std::string node = absl::StrCat(selinuxfs, "/context");
  UniqueFd fd(::open(node.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd) return absl::InvalidArgumentError(absl::StrCat(label, ": ", std::strerror(errno)));
  // The kernel wants the terminating NUL as part of the context.
  if (::write(fd.get(), label.c_str(), label.size() + 1) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace cubicle::namespaces
