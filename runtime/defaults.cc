#include "runtime/defaults.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace cubicle::runtime {
namespace {

using rootfs::MountKind;
using rootfs::MountOp;

MountOp Bind(std::string source, std::string dest, bool readonly) {
  MountOp op;
  op.kind = MountKind::kBind;
  op.source = std::move(source);
  op.dest = std::move(dest);
  op.readonly = readonly;
  return op;
}

MountOp File(std::string dest, std::string data) {
  MountOp op;
  op.kind = MountKind::kFile;
  op.dest = std::move(dest);
  op.data = std::move(data);
  op.mode = 0644;
  return op;
}

MountOp Simple(MountKind kind, std::string dest) {
  MountOp op;
  op.kind = kind;
  op.dest = std::move(dest);
  return op;
}

// /bin, /lib... are symlinks into /usr on merged-usr hosts and real
// directories elsewhere; mirror whichever this host has.
void AddTopLevel(const char* path, rootfs::MountPlan* plan) {
  struct stat st;
  if (::lstat(path, &st) != 0) return;
  if (S_ISLNK(st.st_mode)) {
    char target[4096];
    ssize_t n = ::readlink(path, target, sizeof(target) - 1);
    if (n <= 0) return;
    MountOp op = Simple(MountKind::kSymlink, path);
    op.source.assign(target, static_cast<size_t>(n));
    plan->push_back(std::move(op));
  } else if (S_ISDIR(st.st_mode)) {
    plan->push_back(Bind(path, path, true));
  }
}

std::string PasswdFile(uid_t uid, gid_t gid) {
  std::string out = "root:x:0:0:root:/root:/usr/sbin/nologin\n";
  if (uid != 0) absl::StrAppend(&out, "sandbox:x:", uid, ":", gid, ":sandbox:/workspace:/bin/sh\n");
  absl::StrAppend(&out, "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
  return out;
}

std::string GroupFile(gid_t gid) {
  std::string out = "root:x:0:\n";
  if (gid != 0) absl::StrAppend(&out, "sandbox:x:", gid, ":\n");
  absl::StrAppend(&out, "nogroup:x:65534:\n");
  return out;
}

}  // namespace

absl::StatusOr<SandboxSpec> DefaultSpec(const DefaultsOptions& options) {
  SandboxSpec spec;
  spec.uid = options.uid;
  spec.gid = options.gid;
  spec.hostname = options.hostname;
  rootfs::MountPlan& plan = spec.mounts;

  plan.push_back(Bind("/usr", "/usr", true));
  for (const char* top : {"/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"}) {
    AddTopLevel(top, &plan);
  }

  plan.push_back(File("/etc/passwd", PasswdFile(options.uid, options.gid)));
  plan.push_back(File("/etc/group", GroupFile(options.gid)));
  plan.push_back(File("/etc/hosts", absl::StrCat("127.0.0.1\tlocalhost ", options.hostname,
                                                 "\n::1\tlocalhost ip6-localhost ip6-loopback\n")));
  plan.push_back(File("/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files\n"));
  // Not configuration: the dynamic loader's cache (without it every exec
  // searches the default paths, and multiarch libraries may not be found)
  // and Debian's alternatives links (awk, which, ...). Both read-only.
  for (const char* derived : {"/etc/ld.so.cache", "/etc/alternatives"}) {
    struct stat st;
    if (::stat(derived, &st) == 0) plan.push_back(Bind(derived, derived, true));
  }

  plan.push_back(Simple(MountKind::kDev, "/dev"));
  plan.push_back(Simple(MountKind::kProc, "/proc"));
  MountOp tmp = Simple(MountKind::kTmpfs, "/tmp");
  tmp.mode = 01777;
  tmp.size_bytes = options.tmp_size;
  plan.push_back(std::move(tmp));

  std::string home = "/tmp";
  if (options.workspace.has_value()) {
    char resolved[4096];
    if (::realpath(options.workspace->c_str(), resolved) == nullptr) {
      return ErrnoStatus(errno, absl::StrCat("workspace ", *options.workspace));
    }
    struct stat st;
    if (::stat(resolved, &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat("workspace ", *options.workspace, ": not a directory"));
    }
    MountOp ws = Bind(resolved, kWorkspaceDir, false);
    ws.idmap_owner = true;
    plan.push_back(std::move(ws));
    spec.cwd = kWorkspaceDir;
    home = kWorkspaceDir;
  }

  spec.env = {"PATH=/usr/local/bin:/usr/bin:/bin", absl::StrCat("HOME=", home), "LANG=C.UTF-8"};
  // Raising a hard limit needs privilege the sandbox lacks: stay within ours.
  struct rlimit nofile;
  rlim_t files = 4096;
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_max < files) files = nofile.rlim_max;
  spec.rlimits = {{RLIMIT_CORE, 0, 0}, {RLIMIT_NOFILE, files, files}};
  return spec;
}

}  // namespace cubicle::runtime
