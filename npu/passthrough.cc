#include "npu/passthrough.h"

#include <dirent.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status.h"

namespace cubicle::npu {
namespace {

constexpr int kMaxChipId = 1023;

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

void BindReadOnly(const std::string& host_path, const std::string& dest, rootfs::MountPlan* plan) {
  rootfs::MountOp op;
  op.kind = rootfs::MountKind::kBind;
  op.source = host_path;
  op.dest = dest;
  op.readonly = true;
  plan->push_back(op);
}

// The driver's user-space files, where the host has them.
void AscendDriverFiles(const HostLayout& host, Passthrough* p) {
  for (const char* path : {kAscendDriverLib64, kAscendVersionInfo, kAscendInstallInfo, kDcmiDir, kAscendToolkit}) {
    std::string h = host.Host(path);
    if (Exists(h)) BindReadOnly(h, path, &p->mounts);
  }
  // The tool appears where the driver put it, relative to the root.
  std::optional<std::string> smi = host.FindTool(Vendor::kAscend);
  std::optional<std::string> smi_inside = host.FindToolInSandbox(Vendor::kAscend);
  if (smi.has_value() && smi_inside.has_value()) BindReadOnly(*smi, *smi_inside, &p->mounts);
  // The CANN environment, as set_env.sh would make it.
  const std::string toolkit = kAscendToolkitHome;
  p->env = {
      absl::StrCat("ASCEND_TOOLKIT_HOME=", toolkit),
      absl::StrCat("ASCEND_OPP_PATH=", toolkit, "/opp"),
      absl::StrCat("ASCEND_AICPU_PATH=", toolkit),
      absl::StrCat("LD_LIBRARY_PATH=", kAscendDriverLib64, "/common:", kAscendDriverLib64, "/driver:", toolkit,
                   "/lib64"),
      absl::StrCat("PYTHONPATH=", toolkit, "/python/site-packages:", toolkit, "/opp/built-in/op_impl/ai_core/tbe"),
      "PATH=/usr/local/bin",
  };
}

// nvidia-smi and the driver's libraries, bound at their own paths (the
// default sandbox already shows the host's /usr; under --npu-root they come
// from the root).
void NvidiaDriverFiles(const HostLayout& host, Passthrough* p) {
  std::optional<std::string> smi = host.FindTool(Vendor::kNvidia);
  std::optional<std::string> smi_inside = host.FindToolInSandbox(Vendor::kNvidia);
  if (smi.has_value() && smi_inside.has_value()) BindReadOnly(*smi, *smi_inside, &p->mounts);
  // The root is literal text in the pattern: escape what glob would read.
  std::string root;
  for (char c : host.root()) {
    if (c == '*' || c == '?' || c == '[' || c == '\\') root.push_back('\\');
    root.push_back(c);
  }
  for (const char* pattern : {"/usr/lib/x86_64-linux-gnu/libnvidia-*.so*", "/usr/lib/x86_64-linux-gnu/libcuda.so*",
                              "/usr/lib64/libnvidia-*.so*", "/usr/lib64/libcuda.so*"}) {
    glob_t g;
    if (::glob(absl::StrCat(root, pattern).c_str(), 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        const std::string h = g.gl_pathv[i];
        const std::string inside = h.substr(host.root().size());
        struct stat st;
        if (::lstat(h.c_str(), &st) != 0) continue;
        if (S_ISREG(st.st_mode)) {
          BindReadOnly(h, inside, &p->mounts);
        } else if (S_ISLNK(st.st_mode) && !host.root().empty()) {
          // libcuda.so -> libcuda.so.1 -> ...: the same links inside (on the
          // host itself the sandbox's /usr shows them already).
          char target[4096];
          ssize_t n = ::readlink(h.c_str(), target, sizeof(target) - 1);
          if (n <= 0) continue;
          rootfs::MountOp link;
          link.kind = rootfs::MountKind::kSymlink;
          link.source.assign(target, static_cast<size_t>(n));
          link.dest = inside;
          p->mounts.push_back(link);
        }
      }
    }
    ::globfree(&g);
  }
  p->env = {"NVIDIA_VISIBLE_DEVICES=all"};
}

// The host directory the sandbox shows at `dir`, through the spec's
// directory binds ("/usr" bound from the host's "/usr"): its source, or ""
// when `dir` is not inside a bind (the root tmpfs, /etc, /dev: writable
// while the root is built, so mountpoints can simply be made).
const rootfs::MountOp* CoveringBind(const rootfs::MountPlan& plan, const std::string& dir) {
  const rootfs::MountOp* best = nullptr;
  for (const rootfs::MountOp& op : plan) {
    if (op.kind != rootfs::MountKind::kBind) continue;
    if (dir != op.dest && !absl::StartsWith(dir, absl::StrCat(op.dest, "/"))) continue;
    if (best == nullptr || op.dest.size() >= best->dest.size()) best = &op;
  }
  return best;
}

std::string HostDirBehind(const rootfs::MountPlan& plan, const std::string& dir) {
  const rootfs::MountOp* best = CoveringBind(plan, dir);
  if (best == nullptr) return "";
  return absl::StrCat(best->source, dir.substr(best->dest.size()));
}

std::string Parent(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

// A mountpoint inside a read-only host bind cannot be made. Where the host
// lacks `dest` there, the deepest directory that does exist is "shadowed":
// a tmpfs over it, the host's entries of that directory bound back (read-
// only; symlinks recreated), so mountpoints can be made beside them.
// Returns the directory to shadow, or "" when none is needed.
std::string ShadowFor(const rootfs::MountPlan& plan, const std::string& dest) {
  std::string behind = HostDirBehind(plan, dest);
  if (behind.empty() || Exists(behind)) return "";
  std::string dir = Parent(dest);
  while (dir != "/") {
    std::string host_dir = HostDirBehind(plan, dir);
    if (host_dir.empty()) return "";
    if (Exists(host_dir)) return dir;
    dir = Parent(dir);
  }
  return "";
}

// More entries than this and shadowing costs more mounts than it is worth:
// the passthrough is refused with a message naming the directory.
constexpr size_t kMaxShadowEntries = 256;

absl::Status AppendShadow(const rootfs::MountPlan& plan, const std::string& dir, rootfs::MountPlan* out) {
  std::string host_dir = HostDirBehind(plan, dir);
  rootfs::MountOp tmpfs;
  tmpfs.kind = rootfs::MountKind::kTmpfs;
  tmpfs.dest = dir;
  tmpfs.mode = 0755;
  tmpfs.size_bytes = 1 << 20;
  out->push_back(tmpfs);
  DIR* d = ::opendir(host_dir.c_str());
  if (d == nullptr) return ErrnoStatus(errno, absl::StrCat("opendir(", host_dir, ")"));
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  }
  ::closedir(d);
  if (names.size() > kMaxShadowEntries) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the driver's files need mountpoints in ", dir, ", which the host lacks, and ", dir, " has ",
        names.size(), " entries to carry over (at most ", kMaxShadowEntries, "): install the driver at its standard paths"));
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    std::string src = absl::StrCat(host_dir, "/", name);
    std::string dest = absl::StrCat(dir == "/" ? "" : dir, "/", name);
    struct stat st;
    if (::lstat(src.c_str(), &st) != 0) continue;
    rootfs::MountOp op;
    op.dest = dest;
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      ssize_t n = ::readlink(src.c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      op.kind = rootfs::MountKind::kSymlink;
      op.source.assign(target, static_cast<size_t>(n));
    } else if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) {
      op.kind = rootfs::MountKind::kBind;
      op.source = src;
      op.readonly = true;
    } else {
      continue;  // sockets, fifos, device nodes: not in a system directory
    }
    out->push_back(op);
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view ChipWord(Vendor vendor) { return vendor == Vendor::kAscend ? "NPU" : "GPU"; }

absl::StatusOr<std::vector<int>> ParseChipList(absl::string_view text, absl::string_view what) {
  std::set<int> ids;
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": an empty chip list"));
  }
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    int id = -1;
    if (part.empty() || !std::all_of(part.begin(), part.end(), absl::ascii_isdigit) || part.size() > 4 ||
        !absl::SimpleAtoi(part, &id) || id > kMaxChipId) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " \"", text, "\": \"", part, "\" is not a chip id (0..", kMaxChipId, ")"));
    }
    ids.insert(id);
  }
  return std::vector<int>(ids.begin(), ids.end());
}

absl::StatusOr<Passthrough> PlanPassthrough(const HostLayout& host, Vendor vendor, const std::vector<int>& ids) {
  Passthrough p;
  p.vendor = vendor;
  if (ids.empty()) return absl::InvalidArgumentError(absl::StrCat("no ", ChipWord(vendor), " selected"));
  if (!std::is_sorted(ids.begin(), ids.end()) || std::adjacent_find(ids.begin(), ids.end()) != ids.end()) {
    return absl::InvalidArgumentError("chip ids must be ascending and distinct (ParseChipList)");
  }
  int next = 0;
  for (int id : ids) {
    std::string name = ChipNodeName(vendor, id);
    absl::StatusOr<DeviceNode> node = host.Node(name, ChipNodeName(vendor, next));
    if (!node.ok()) {
      return absl::Status(node.status().code(), absl::StrCat(ChipWord(vendor), " ", id, ": ", node.status().message()));
    }
    p.nodes.push_back(*node);
    p.mapping.push_back({id, next});
    ++next;
  }
  auto management = vendor == Vendor::kAscend ? std::vector<const char*>(std::begin(kAscendManagementNodes),
                                                                         std::end(kAscendManagementNodes))
                                              : std::vector<const char*>(std::begin(kNvidiaManagementNodes),
                                                                         std::end(kNvidiaManagementNodes));
  for (const char* name : management) {
    absl::StatusOr<DeviceNode> node = host.Node(name, name);
    if (absl::IsNotFound(node.status())) continue;  // "those management nodes the host has"
    if (!node.ok()) return node.status();
    p.nodes.push_back(*node);
  }
  for (const DeviceNode& n : p.nodes) {
    rootfs::MountOp op;
    op.kind = rootfs::MountKind::kBind;
    op.source = n.host_path;
    op.dest = n.sandbox_path;
    op.devices = true;  // a char device on a nodev mount cannot be opened
    p.mounts.push_back(op);
    p.devices.push_back({'c', n.major, n.minor, "rw"});
  }
  if (vendor == Vendor::kAscend) {
    AscendDriverFiles(host, &p);
  } else {
    NvidiaDriverFiles(host, &p);
  }
  return p;
}

absl::Status ApplyPassthrough(const Passthrough& p, runtime::SandboxSpec* spec) {
  if (std::none_of(spec->mounts.begin(), spec->mounts.end(),
                   [](const rootfs::MountOp& op) { return op.kind == rootfs::MountKind::kDev && op.dest == "/dev"; })) {
    return absl::FailedPreconditionError(
        absl::StrCat(ChipWord(p.vendor), " passthrough needs the sandbox's own /dev (a kDev mount at /dev)"));
  }
  // Shadow what must be (parents first), then the passthrough's own
  // mounts, then make the shadows read-only again.
  std::set<std::string> shadows;
  for (const rootfs::MountOp& op : p.mounts) {
    if (absl::StartsWith(op.dest, "/dev/")) continue;
    std::string dir = ShadowFor(spec->mounts, op.dest);
    if (!dir.empty()) shadows.insert(dir);
  }
  rootfs::MountPlan added;
  for (const std::string& dir : shadows) {
    if (absl::Status st = AppendShadow(spec->mounts, dir, &added); !st.ok()) return st;
  }
  for (const rootfs::MountOp& op : p.mounts) {
    // A driver file the sandbox already shows, read-only, at the same path
    // (the host's /usr is bound whole): no second mount.
    const rootfs::MountOp* covering = CoveringBind(spec->mounts, op.dest);
    if (op.readonly && !absl::StartsWith(op.dest, "/dev/") && covering != nullptr && covering->readonly &&
        HostDirBehind(spec->mounts, op.dest) == op.source) {
      continue;
    }
    added.push_back(op);
  }
  for (const std::string& dir : shadows) {
    rootfs::MountOp ro;
    ro.kind = rootfs::MountKind::kRemountRo;
    ro.dest = dir;
    added.push_back(ro);
  }
  spec->mounts.insert(spec->mounts.end(), added.begin(), added.end());
  for (const cgroups::DeviceRule& r : p.devices) {
    if (std::find(spec->devices.begin(), spec->devices.end(), r) == spec->devices.end()) spec->devices.push_back(r);
  }
  for (const std::string& kv : p.env) {
    absl::string_view name = absl::string_view(kv).substr(0, kv.find('='));
    absl::string_view value = absl::string_view(kv).substr(kv.find('=') + 1);
    auto it = std::find_if(spec->env.begin(), spec->env.end(),
                           [&](const std::string& e) { return absl::StartsWith(e, absl::StrCat(name, "=")); });
    if (it == spec->env.end()) {
      if (name == "PATH") {
        spec->env.push_back("PATH=/usr/local/bin:/usr/bin:/bin");
      } else {
        spec->env.push_back(kv);
      }
      continue;
    }
    absl::string_view old = absl::string_view(*it).substr(name.size() + 1);
    if (name == "PATH") {
      std::vector<absl::string_view> dirs = absl::StrSplit(old, ':');
      if (std::find(dirs.begin(), dirs.end(), "/usr/local/bin") == dirs.end()) {
        *it = absl::StrCat("PATH=/usr/local/bin", old.empty() ? "" : ":", old);
      }
    } else if (name == "LD_LIBRARY_PATH" || name == "PYTHONPATH") {
      *it = old.empty() ? kv : absl::StrCat(name, "=", old, ":", value);
    } else {
      *it = kv;
    }
  }
  return absl::OkStatus();
}

}  // namespace cubicle::npu
