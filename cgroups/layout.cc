#include "cgroups/layout.h"

#include <fcntl.h>
#include <libcgroup.h>
#include <linux/magic.h>
#include <sys/utsname.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdarg>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "cgroups/cgroupfs.h"

namespace cubicle::cgroups {
namespace {

// The v1 controllers the kernel knows; anything else in a cgroup mount's
// super options ("rw", "name=systemd", "clone_children", ...) is an option.
constexpr absl::string_view kV1ControllerNames[] = {
    "cpuset",  "cpu",        "cpuacct",  "blkio",   "memory", "devices", "freezer",
    "net_cls", "perf_event", "net_prio", "hugetlb", "pids",   "rdma",    "misc"};

// The v2 controllers cubicle enables in the parents' cgroup.subtree_control.
constexpr Controller kV2Delegated[] = {Controller::kMemory, Controller::kPids, Controller::kCpu,
                                       Controller::kIo};

bool IsV1Controller(absl::string_view name) {
  return std::find(std::begin(kV1ControllerNames), std::end(kV1ControllerNames), name) !=
         std::end(kV1ControllerNames);
}

bool Contains(const std::vector<std::string>& list, absl::string_view item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && absl::ascii_isdigit(s[i + 1]) &&
        absl::ascii_isdigit(s[i + 2]) && absl::ascii_isdigit(s[i + 3])) {
      out.push_back(
          static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// `path` (from a hierarchy's root) as a directory under a mount of `root`
// at `mount_point`; nullopt when the mount does not show that path.
std::optional<std::string> DirUnderMount(absl::string_view mount_point, absl::string_view root,
                                         absl::string_view path) {
  if (root == "/") return cgroupfs::Join(mount_point, path == "/" ? "" : path);
  if (path == root) return std::string(mount_point);
  if (!absl::StartsWith(path, root) || path[root.size()] != '/') return std::nullopt;
  return cgroupfs::Join(mount_point, path.substr(root.size()));
}

// /proc/self/cgroup: "hierarchy-id:controller,list:path"; the v2 line is "0::path".
struct OwnCgroups {
  std::map<std::string, std::string, std::less<>> v1;  // controller -> path
  std::optional<std::string> v2;
};

absl::StatusOr<OwnCgroups> ParseProcSelfCgroup(absl::string_view text) {
  OwnCgroups own;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3 || parts[2].empty() || parts[2].front() != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("/proc/self/cgroup: unexpected line '", line, "'"));
    }
    if (parts[0] == "0" && parts[1].empty()) {
      own.v2 = std::string(parts[2]);
      continue;
    }
    for (absl::string_view c : absl::StrSplit(parts[1], ','))
      own.v1[std::string(c)] = std::string(parts[2]);
  }
  return own;
}

}  // namespace

absl::Status CheckParentOption(absl::string_view parent) {
  std::vector<absl::string_view> parts = absl::StrSplit(parent, '/', absl::SkipEmpty());
  if (parts.empty()) {
    return absl::InvalidArgumentError("cgroup parent: must name a directory below the hierarchy root");
  }
  for (char c : parent) {
    // /proc/self/cgroup is line- and colon-separated: a name with a control
    // character or a colon could not be read back unambiguously.
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == ':') {
      return absl::InvalidArgumentError(absl::StrCat(
          "cgroup parent '", absl::CHexEscape(parent), "': control characters and ':' are not allowed"));
    }
  }
  for (absl::string_view part : parts) {
    if (part == "." || part == "..") {
      return absl::InvalidArgumentError(absl::StrCat("cgroup parent '", parent, "': '.' and '..' are not allowed"));
    }
    if (part.size() > 255) {
      return absl::InvalidArgumentError(
          absl::StrCat("cgroup parent: a component is longer than 255 bytes (", part.substr(0, 32), "...)"));
    }
  }
  return absl::OkStatus();
}

namespace {

// Picks the mount of one hierarchy among several (bind mounts, nested
// containers): the one libcgroup named, else one that shows the whole
// hierarchy, else one that shows our own cgroup.
const CgroupMount* PickMount(const std::vector<const CgroupMount*>& candidates,
                             const std::vector<std::string>& libcgroup_paths,
                             absl::string_view own) {
  for (const CgroupMount* m : candidates) {
    if (Contains(libcgroup_paths, m->mount_point)) return m;
  }
  for (const CgroupMount* m : candidates) {
    if (m->root == "/") return m;
  }
  for (const CgroupMount* m : candidates) {
    if (DirUnderMount(m->mount_point, m->root, own).has_value()) return m;
  }
  return candidates.empty() ? nullptr : candidates.front();
}

// Fills in `h.own` and `h.parent`; false (with a note) when the mount does
// not show our cgroup or the parent.
bool PlaceParent(const CgroupMount& m, const std::string& own, const LayoutOptions& options,
                 Hierarchy* h, std::vector<std::string>* notes) {
  // "a//b/" -> "a/b": one spelling for the same directory.
  std::string parent = absl::StrJoin(absl::StrSplit(options.parent, '/', absl::SkipEmpty()), "/");
  std::string parent_path =
      options.parent.front() == '/' ? absl::StrCat("/", parent) : cgroupfs::Join(own, parent);
  std::optional<std::string> parent_dir = DirUnderMount(m.mount_point, m.root, parent_path);
  if (!parent_dir.has_value()) {
    notes->push_back(absl::StrCat(m.mount_point, ": the mount shows ", m.root,
                                  " of its hierarchy, not the parent ", parent_path,
                                  "; hierarchy skipped"));
    return false;
  }
  h->own = own;
  h->own_dir = DirUnderMount(m.mount_point, m.root, own).value_or("");
  h->parent = *parent_dir;
  return true;
}

// The mount points libcgroup gave for `name`, or for any controller when
// `name` is empty.
std::vector<std::string> LibcgroupPaths(
    const std::vector<std::pair<std::string, std::string>>& mounts, absl::string_view name) {
  std::vector<std::string> paths;
  for (const auto& [controller, path] : mounts) {
    if (name.empty() || controller == name) paths.push_back(path);
  }
  return paths;
}

void Place(Layout* layout) {
  bool any_v1 = false;
  for (int idx : layout->placement) {
    if (idx >= 0 && layout->hierarchies[idx].version == 1) any_v1 = true;
  }
  if (layout->unified >= 0) {
    layout->version = any_v1 ? Version::kHybrid : Version::kV2;
  } else {
    layout->version = any_v1 ? Version::kV1 : Version::kNone;
  }
}

// The directory from which PrepareParents starts creating: our own cgroup
// for a relative parent, the mount point for an absolute one.
std::string CreationBase(const Hierarchy& h) {
  if (!h.own_dir.empty() && absl::StartsWith(h.parent, h.own_dir + "/")) return h.own_dir;
  return h.mount_point;
}

absl::Status EnableControllers(const std::string& dir, const std::vector<std::string>& wanted) {
  if (wanted.empty()) return absl::OkStatus();
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return ErrnoStatus(errno, absl::StrCat("open(", dir, ")"));
  CUBICLE_ASSIGN_OR_RETURN(std::string enabled,
                           cgroupfs::Read(fd.get(), dir, "cgroup.subtree_control"));
  std::vector<std::string> present =
      absl::StrSplit(enabled, absl::ByAnyChar(" \n"), absl::SkipEmpty());
  std::string request;
  for (const std::string& c : wanted) {
    if (!Contains(present, c)) absl::StrAppend(&request, request.empty() ? "" : " ", "+", c);
  }
  if (request.empty()) return absl::OkStatus();
  int err = cgroupfs::WriteRaw(fd.get(), "cgroup.subtree_control", request,
                               cgroupfs::WriteMode::kReplace);
  if (err == 0) return absl::OkStatus();
  absl::Status st =
      ErrnoStatus(err, absl::StrCat("write(", dir, "/cgroup.subtree_control, \"", request, "\")"));
  if (err == EBUSY) {
    return absl::FailedPreconditionError(absl::StrCat(
        st.message(), ": ", dir,
        " holds processes, and cgroup v2 delegates controllers only from "
        "a cgroup without processes; run cubicle in a cgroup of its own (e.g. a systemd scope with "
        "Delegate=yes) and use a relative parent, or give an absolute one (CUBICLE_CGROUP_PARENT=/cubicle.slice)"));
  }
  return st;
}

absl::Status PrepareOne(const Hierarchy& h, bool emulated) {
  std::vector<std::string> wanted;
  if (h.version == 2) {
    for (Controller c : kV2Delegated) {
      if (Contains(h.controllers, V2Name(c))) wanted.emplace_back(V2Name(c));
    }
  }
  std::string dir = CreationBase(h);
  if (h.version == 2) CUBICLE_RETURN_IF_ERROR(EnableControllers(dir, wanted));
  absl::string_view rest = absl::string_view(h.parent).substr(dir.size());
  for (absl::string_view part : absl::StrSplit(rest, '/', absl::SkipEmpty())) {
    dir = cgroupfs::Join(dir, part);
    absl::Status st = cgroupfs::MakeGroupDir(dir, emulated);
    if (!st.ok() && !absl::IsAlreadyExists(st)) return st;
    if (h.version == 2) CUBICLE_RETURN_IF_ERROR(EnableControllers(dir, wanted));
  }
  return absl::OkStatus();
}

bool ServesAnything(const Layout& layout, int index) {
  return std::find(layout.placement.begin(), layout.placement.end(), index) !=
         layout.placement.end();
}

void DropHierarchy(Layout* layout, int index) {
  layout->hierarchies.erase(layout->hierarchies.begin() + index);
  for (int& p : layout->placement) {
    if (p > index) --p;
  }
  if (layout->unified == index) {
    layout->unified = -1;
  } else if (layout->unified > index) {
    --layout->unified;
  }
  Place(layout);
}

// libcgroup keeps its mount table in process-wide state.
absl::Mutex libcgroup_mutex;

void DiscardLibcgroupLog(void*, int, const char*, va_list) {}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> LibcgroupMounts() {
  absl::MutexLock lock(&libcgroup_mutex);
  // Its default logger writes to stdout, which the daemon's protocol owns.
  cgroup_set_logger(DiscardLibcgroupLog, CGROUP_LOG_ERROR, nullptr);
  int rc = cgroup_init();
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("libcgroup: cgroup_init: ", cgroup_strerror(rc)));
  }
  std::vector<std::pair<std::string, std::string>> mounts;
  void* handle = nullptr;
  cgroup_mount_point info;
  for (rc = cgroup_get_controller_begin(&handle, &info); rc == 0;
       rc = cgroup_get_controller_next(&handle, &info)) {
    mounts.emplace_back(info.name, info.path);
  }
  cgroup_get_controller_end(&handle);
  if (rc != ECGEOF) {
    return absl::UnavailableError(
        absl::StrCat("libcgroup: listing mounted controllers: ", cgroup_strerror(rc)));
  }
  return mounts;
}

// Keeps the libcgroup answers that mountinfo confirms; notes the others.
std::vector<std::pair<std::string, std::string>> VerifyLibcgroup(
    const std::vector<std::pair<std::string, std::string>>& reported,
    const std::vector<CgroupMount>& mounts, std::vector<std::string>* notes) {
  std::vector<std::pair<std::string, std::string>> confirmed;
  for (const auto& [controller, path] : reported) {
    bool ok = std::any_of(mounts.begin(), mounts.end(), [&](const CgroupMount& m) {
      return m.mount_point == path && (m.version == 2 || Contains(m.controllers, controller));
    });
    if (ok) {
      confirmed.emplace_back(controller, path);
    } else {
      notes->push_back(absl::StrCat("libcgroup reports ", controller, " at ", path,
                                    ", which /proc/self/mountinfo does not confirm; ignored"));
    }
  }
  return confirmed;
}

}  // namespace

absl::string_view V2Name(Controller c) {
  switch (c) {
    case Controller::kMemory: return "memory";
    case Controller::kPids: return "pids";
    case Controller::kCpu: return "cpu";
    case Controller::kCpuacct: return "cpuacct";
    case Controller::kIo: return "io";
    case Controller::kFreezer: return "freezer";
  }
  return "unknown";
}

absl::string_view V1Name(Controller c) { return c == Controller::kIo ? "blkio" : V2Name(c); }

absl::Status CheckHierarchyFilesystem(const Hierarchy& h) {
  struct statfs fs;
  if (::statfs(h.mount_point.c_str(), &fs) != 0) {
    return ErrnoStatus(errno, absl::StrCat("statfs(", h.mount_point, ")"));
  }
  auto magic = static_cast<unsigned long>(fs.f_type);
  unsigned long want = h.version == 2 ? CGROUP2_SUPER_MAGIC : CGROUP_SUPER_MAGIC;
  if (magic != want) {
    return absl::FailedPreconditionError(
        absl::StrCat(h.mount_point, ": not a cgroup", h.version == 2 ? "2" : "",
                     " filesystem (magic 0x", absl::Hex(magic), ")"));
  }
  return absl::OkStatus();
}

absl::string_view VersionName(Version v) {
  switch (v) {
    case Version::kNone: return "none";
    case Version::kV1: return "v1";
    case Version::kV2: return "v2";
    case Version::kHybrid: return "hybrid";
  }
  return "unknown";
}

const Hierarchy* Layout::Find(Controller c) const {
  int index = placement[static_cast<int>(c)];
  return index < 0 ? nullptr : &hierarchies[index];
}

std::string Layout::Describe() const {
  std::vector<std::string> lines;
  lines.push_back(absl::StrCat("cgroups ", VersionName(version), " (found by ", source, ")"));
  for (size_t i = 0; i < hierarchies.size(); ++i) {
    const Hierarchy& h = hierarchies[i];
    std::vector<std::string> serves;
    for (Controller c : kAllControllers) {
      if (placement[static_cast<int>(c)] == static_cast<int>(i)) {
        serves.emplace_back(h.version == 2 ? V2Name(c) : V1Name(c));
      }
    }
    lines.push_back(absl::StrCat("  v", h.version, " ", h.mount_point, ": ",
                                 serves.empty() ? (h.version == 2 ? "(placement only)" : "(unused: swept only)")
                                                : absl::StrJoin(serves, ","),
                                 "; own ", h.own, "; sandboxes under ", h.parent));
  }
  for (const std::string& note : notes) lines.push_back(absl::StrCat("  note: ", note));
  return absl::StrJoin(lines, "\n");
}

absl::StatusOr<std::vector<CgroupMount>> ParseMountinfo(absl::string_view mountinfo) {
  std::vector<CgroupMount> mounts;
  for (absl::string_view line : absl::StrSplit(mountinfo, '\n', absl::SkipWhitespace())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 10 || dash == f.end() || f.end() - dash < 4 || dash - f.begin() < 6) {
      return absl::InvalidArgumentError(absl::StrCat("mountinfo: unexpected line '", line, "'"));
    }
    absl::string_view fstype = dash[1];
    if (fstype != "cgroup" && fstype != "cgroup2") continue;
    CgroupMount m;
    m.version = fstype == "cgroup2" ? 2 : 1;
    m.root = Unescape(f[3]);
    m.mount_point = Unescape(f[4]);
    if (m.version == 1) {
      for (absl::string_view opt : absl::StrSplit(dash[3], ',')) {
        if (IsV1Controller(opt)) m.controllers.emplace_back(opt);
      }
      if (m.controllers.empty()) continue;  // a named hierarchy ("name=systemd")
    }
    mounts.push_back(std::move(m));
  }
  return mounts;
}

namespace {

bool KernelAtLeast(int major, int minor) {
  struct utsname uts;
  int have_major = 0, have_minor = 0;
  if (::uname(&uts) != 0 || std::sscanf(uts.release, "%d.%d", &have_major, &have_minor) != 2) return false;
  return have_major > major || (have_major == major && have_minor >= minor);
}

}  // namespace

absl::StatusOr<Layout> LayoutFromProc(
    absl::string_view mountinfo, absl::string_view proc_self_cgroup, const LayoutOptions& options,
    const std::vector<std::pair<std::string, std::string>>& libcgroup_mounts) {
  CUBICLE_RETURN_IF_ERROR(CheckParentOption(options.parent));
  CUBICLE_ASSIGN_OR_RETURN(std::vector<CgroupMount> mounts, ParseMountinfo(mountinfo));
  CUBICLE_ASSIGN_OR_RETURN(OwnCgroups own, ParseProcSelfCgroup(proc_self_cgroup));
  Layout layout;
  layout.emulated = options.emulated;
  layout.source = libcgroup_mounts.empty() ? "mountinfo" : "libcgroup";

  // The unified hierarchy first: on a v2 or hybrid host it is where the
  // sandbox is placed (CLONE_INTO_CGROUP), whatever it holds.
  std::vector<const CgroupMount*> v2;
  for (const CgroupMount& m : mounts) {
    if (m.version == 2) v2.push_back(&m);
  }
  if (!v2.empty() && own.v2.has_value()) {
    const CgroupMount* m = PickMount(v2, LibcgroupPaths(libcgroup_mounts, ""), *own.v2);
    Hierarchy h;
    h.version = 2;
    h.mount_point = m->mount_point;
    if (PlaceParent(*m, *own.v2, options, &h, &layout.notes)) {
      // Our own cgroup's list says what we may enable below it; the mount
      // point's (the root's) when the mount hides our cgroup.
      std::string dir = h.own_dir.empty() ? h.mount_point : h.own_dir;
      auto controllers = cgroupfs::Read(cgroupfs::Join(dir, "cgroup.controllers"));
      if (controllers.ok()) {
        h.controllers = absl::StrSplit(*controllers, absl::ByAnyChar(" \n"), absl::SkipEmpty());
      } else {
        layout.notes.push_back(
            absl::StrCat("cgroup v2 controllers unknown: ", controllers.status().message()));
      }
      layout.unified = static_cast<int>(layout.hierarchies.size());
      layout.hierarchies.push_back(std::move(h));
    }
  }

  // CPU time and kill come from the unified group every sandbox is cloned
  // into whenever it offers them as core files (cpu.stat; cgroup.kill,
  // Linux 5.14), even on a host that also mounts v1 cpuacct or freezer: a
  // v1 group for them would cost a mkdir, an attach and an rmdir per
  // sandbox and tell nothing more. Our own v2 cgroup may be the root, which
  // has cpu.stat but never cgroup.kill: the kernel's version says whether
  // a group below it has one (a fake tree's own files say it in tests).
  bool unified_cpu_stat = false;
  bool unified_kill = false;
  if (layout.unified >= 0) {
    const Hierarchy& u = layout.hierarchies[layout.unified];
    const std::string dir = u.own_dir.empty() ? u.mount_point : u.own_dir;
    auto has = [&](const char* file) { return ::access(cgroupfs::Join(dir, file).c_str(), F_OK) == 0; };
    unified_cpu_stat = has("cpu.stat");
    unified_kill = has("cgroup.kill") || (!options.emulated && KernelAtLeast(5, 14));
  }
  for (Controller c : kAllControllers) {
    // A v1 hierarchy of a controller served by the unified group stays in
    // the list, serving nothing: `cubicle cleanup` still sweeps what an
    // older cubicle left there.
    const bool on_unified = (c == Controller::kCpuacct && unified_cpu_stat) ||
                            (c == Controller::kFreezer && unified_kill);
    auto place = [&](int hierarchy) {
      layout.placement[static_cast<int>(c)] = on_unified ? layout.unified : hierarchy;
    };
    absl::string_view name = V1Name(c);
    std::vector<const CgroupMount*> candidates;
    for (const CgroupMount& m : mounts) {
      if (m.version == 1 && Contains(m.controllers, name)) candidates.push_back(&m);
    }
    auto own_path = own.v1.find(name);
    if (!candidates.empty() && own_path != own.v1.end()) {
      const CgroupMount* m =
          PickMount(candidates, LibcgroupPaths(libcgroup_mounts, name), own_path->second);
      auto same = std::find_if(layout.hierarchies.begin(), layout.hierarchies.end(),
                               [&](const Hierarchy& h) { return h.mount_point == m->mount_point; });
      if (same != layout.hierarchies.end()) {
        place(static_cast<int>(same - layout.hierarchies.begin()));
        continue;
      }
      Hierarchy h;
      h.version = 1;
      h.mount_point = m->mount_point;
      h.controllers = m->controllers;
      if (!PlaceParent(*m, own_path->second, options, &h, &layout.notes)) {
        if (on_unified) place(layout.unified);
        continue;
      }
      place(static_cast<int>(layout.hierarchies.size()));
      layout.hierarchies.push_back(std::move(h));
      continue;
    }
    if (!candidates.empty()) {
      layout.notes.push_back(
          absl::StrCat(name, " is mounted but /proc/self/cgroup has no line for it"));
    }
    if (layout.unified < 0) continue;
    // Not on v1: on v2, where cpu.stat and cgroup.freeze/kill are core files.
    const Hierarchy& u = layout.hierarchies[layout.unified];
    if (c == Controller::kCpuacct || c == Controller::kFreezer ||
        Contains(u.controllers, V2Name(c))) {
      layout.placement[static_cast<int>(c)] = layout.unified;
    }
  }

  if (const Hierarchy* mem = layout.Find(Controller::kMemory);
      mem != nullptr && mem->version == 1) {
    // memsw files exist in every group or in none (swapaccount=, CONFIG_MEMCG_SWAP).
    std::string dir = mem->own_dir.empty() ? mem->mount_point : mem->own_dir;
    layout.v1_swap_accounting =
        ::access(cgroupfs::Join(dir, "memory.memsw.limit_in_bytes").c_str(), F_OK) == 0;
  }
  Place(&layout);
  return layout;
}

absl::StatusOr<Layout> DiscoverLayout(const LayoutOptions& options) {
  CUBICLE_ASSIGN_OR_RETURN(std::string mountinfo, cgroupfs::Read("/proc/self/mountinfo"));
  CUBICLE_ASSIGN_OR_RETURN(std::string own, cgroupfs::Read("/proc/self/cgroup"));
  std::vector<std::string> notes;
  std::vector<std::pair<std::string, std::string>> reported;
  std::string source = "mountinfo";
  if (options.use_libcgroup) {
    auto lib = LibcgroupMounts();
    if (lib.ok()) {
      CUBICLE_ASSIGN_OR_RETURN(std::vector<CgroupMount> mounts, ParseMountinfo(mountinfo));
      reported = VerifyLibcgroup(*lib, mounts, &notes);
      source = "libcgroup, checked against /proc/self/mountinfo";
    } else {
      notes.push_back(absl::StrCat(lib.status().message(), "; using /proc/self/mountinfo"));
    }
  }
  CUBICLE_ASSIGN_OR_RETURN(Layout layout, LayoutFromProc(mountinfo, own, options, reported));
  layout.source = source;
  layout.notes.insert(layout.notes.begin(), notes.begin(), notes.end());
  if (!options.emulated) {
    for (const Hierarchy& h : layout.hierarchies) CUBICLE_RETURN_IF_ERROR(CheckHierarchyFilesystem(h));
  }
  return layout;
}

absl::Status PrepareParents(Layout* layout) {
  for (int i = 0; i < static_cast<int>(layout->hierarchies.size()); ++i) {
    absl::Status st = PrepareOne(layout->hierarchies[i], layout->emulated);
    if (st.ok()) continue;
    // A hybrid host's cgroup2 mount that serves none of our controllers is
    // only a convenience (CLONE_INTO_CGROUP, cgroup.kill); v1 does without.
    if (i == layout->unified && !ServesAnything(*layout, i) && absl::IsPermissionDenied(st)) {
      layout->notes.push_back(
          absl::StrCat("cgroup v2 unusable, placing with v1 only: ", st.message()));
      DropHierarchy(layout, i);
      --i;
      continue;
    }
    return st;
  }
  return absl::OkStatus();
}

absl::Status RemoveParents(const Layout& layout) {
  // Every hierarchy is tried; the first failure is reported.
  absl::Status first;
  for (const Hierarchy& h : layout.hierarchies) {
    if (cgroupfs::HasSubdirectories(h.parent)) continue;  // groups still live there
    absl::Status st = cgroupfs::RemoveGroupDir(h.parent, layout.emulated);
    if (first.ok()) first = st;
  }
  return first;
}

}  // namespace cubicle::cgroups
