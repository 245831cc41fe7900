#include "cgroups/devices.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/status.h"
#include "cgroups/cgroup.h"
#include "cgroups/layout.h"

namespace cubicle::cgroups {
namespace {

std::atomic<uint64_t> next_sequence{0};

absl::StatusOr<std::string> ReadText(const char* path) {
  std::ifstream in(path);
  if (!in) return ErrnoStatus(errno, absl::StrCat("open(", path, ")"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status WriteFile(const std::string& path, absl::string_view text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open(", path, ")"));
  ssize_t n = ::write(fd, text.data(), text.size());
  int saved = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return ErrnoStatus(n < 0 ? saved : EIO, absl::StrCat("write(", path, ", \"", text, "\")"));
  }
  return absl::OkStatus();
}

// <devices mount>/<our own devices cgroup>/cubicle: where groups go.
absl::StatusOr<std::string> DevicesParent() {
  CUBICLE_ASSIGN_OR_RETURN(std::string mountinfo, ReadText("/proc/self/mountinfo"));
  CUBICLE_ASSIGN_OR_RETURN(std::vector<CgroupMount> mounts, ParseMountinfo(mountinfo));
  const CgroupMount* devices = nullptr;
  bool any_v2 = false;
  for (const CgroupMount& m : mounts) {
    if (m.version == 2) any_v2 = true;
    if (m.version == 1 && devices == nullptr &&
        std::find(m.controllers.begin(), m.controllers.end(), "devices") != m.controllers.end()) {
      devices = &m;
    }
  }
  if (devices == nullptr) {
    return absl::UnimplementedError(any_v2 ? "device cgroup: no v1 devices controller (cgroup v2: use the device program)"
                                           : "device cgroup: no devices controller is mounted");
  }
  CUBICLE_ASSIGN_OR_RETURN(std::string self, ReadText("/proc/self/cgroup"));
  std::string own;
  bool found = false;
  for (absl::string_view line : absl::StrSplit(self, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    for (absl::string_view c : absl::StrSplit(f[1], ',')) {
      if (c == "devices") {
        own = std::string(f[2]);
        found = true;
      }
    }
  }
  if (!found) return absl::FailedPreconditionError("device cgroup: /proc/self/cgroup names no devices group");
  // The mount shows the hierarchy from `root`; our group is below it.
  absl::string_view rel = own;
  if (devices->root != "/" && !absl::ConsumePrefix(&rel, devices->root)) {
    return absl::FailedPreconditionError(
        absl::StrCat("device cgroup: our group ", own, " is outside the mounted ", devices->root));
  }
  std::string dir = devices->mount_point;
  for (absl::string_view part : absl::StrSplit(rel, '/', absl::SkipEmpty())) absl::StrAppend(&dir, "/", part);
  return absl::StrCat(dir, "/cubicle");
}

}  // namespace

std::string DeviceRuleLine(const DeviceRule& rule) {
  return absl::StrCat(std::string(1, rule.type), " ", rule.major, ":",
                      rule.minor < 0 ? std::string("*") : absl::StrCat(rule.minor), " ", rule.access);
}

absl::Status ValidateDeviceRules(const std::vector<DeviceRule>& rules) {
  for (const DeviceRule& r : rules) {
    if (r.type != 'c' && r.type != 'b') {
      return absl::InvalidArgumentError(absl::StrCat("device rule: type must be 'c' or 'b', got '",
                                                     std::string(1, r.type), "'"));
    }
    if (r.access.empty() || r.access.size() > 3 ||
        r.access.find_first_not_of("rwm") != std::string::npos ||
        std::count(r.access.begin(), r.access.end(), 'r') > 1 ||
        std::count(r.access.begin(), r.access.end(), 'w') > 1 ||
        std::count(r.access.begin(), r.access.end(), 'm') > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("device rule ", DeviceRuleLine(r), ": access must be a subset of \"rwm\""));
    }
    if (r.minor < -1 || r.minor > 0xfffff || r.major > 0xfff) {
      return absl::InvalidArgumentError(absl::StrCat("device rule ", DeviceRuleLine(r), ": number out of range"));
    }
  }
  return absl::OkStatus();
}

std::vector<DeviceRule> MinimalDevRules() {
  return {
      {'c', 1, 3, "rwm"},    // null
      {'c', 1, 5, "rwm"},    // zero
      {'c', 1, 7, "rwm"},    // full
      {'c', 1, 8, "rwm"},    // random
      {'c', 1, 9, "rwm"},    // urandom
      {'c', 5, 0, "rwm"},    // tty
      {'c', 5, 2, "rwm"},    // ptmx (the devpts instance's, through /dev/ptmx -> pts/ptmx)
      {'c', 136, -1, "rwm"}, // the pts of the sandbox's own devpts
  };
}

absl::StatusOr<std::unique_ptr<DeviceCgroup>> DeviceCgroup::Create(const std::vector<DeviceRule>& allow,
                                                                    int v2_dir_fd) {
  CUBICLE_RETURN_IF_ERROR(ValidateDeviceRules(allow));
  absl::StatusOr<std::string> v1_parent = DevicesParent();
  auto cg = std::unique_ptr<DeviceCgroup>(new DeviceCgroup());
  if (!v1_parent.ok()) {
    if (!absl::IsUnimplemented(v1_parent.status())) return v1_parent.status();
    if (v2_dir_fd < 0) {
      return absl::FailedPreconditionError(absl::StrCat(v1_parent.status().message(),
                                                        ", and the sandbox has no cgroup v2 group to attach one to"));
    }
    CUBICLE_RETURN_IF_ERROR(AttachDeviceProgram(v2_dir_fd, allow));
    cg->removed_ = true;  // the program goes with the sandbox's v2 group
    return cg;
  }
  const std::string& parent = *v1_parent;
  // Once per process, before its first group: those of a cubicle killed
  // with SIGKILL (runs without accelerators never pay for this).
  static std::once_flag swept;
  std::call_once(swept, [] { SweepStaleDeviceGroups().IgnoreError(); });
  cg->path_ = absl::StrCat(parent, "/cubicle-", ::getpid(), "-dev-", next_sequence.fetch_add(1));
  // Another sandbox's Remove() may take the (empty) parent away between the
  // two mkdirs: one retry makes it again.
  for (int attempt = 0;; ++attempt) {
    if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus(errno, absl::StrCat("mkdir(", parent, ")"));
    if (::mkdir(cg->path_.c_str(), 0755) == 0) break;
    if (errno != ENOENT || attempt >= 1) {
      cg->removed_ = true;
      return ErrnoStatus(errno, absl::StrCat("mkdir(", cg->path_, ")"));
    }
  }
  CUBICLE_RETURN_IF_ERROR(WriteFile(absl::StrCat(cg->path_, "/devices.deny"), "a"));
  for (const DeviceRule& r : allow) {
    CUBICLE_RETURN_IF_ERROR(WriteFile(absl::StrCat(cg->path_, "/devices.allow"), DeviceRuleLine(r)));
  }
  return cg;
}

DeviceCgroup::~DeviceCgroup() { Remove().IgnoreError(); }

absl::Status DeviceCgroup::Attach(pid_t pid) {
  if (v2()) return absl::OkStatus();
  return WriteFile(absl::StrCat(path_, "/cgroup.procs"), absl::StrCat(pid));
}

absl::Status DeviceCgroup::Remove() {
  if (removed_) return absl::OkStatus();
  // The sandbox's processes are gone by now (its init was reaped), but the
  // kernel may take a moment to let go of the group: bounded retries.
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  while (::rmdir(path_.c_str()) != 0) {
    if (errno == ENOENT) break;
    if (errno != EBUSY || absl::Now() >= deadline) return ErrnoStatus(errno, absl::StrCat("rmdir(", path_, ")"));
    ::usleep(2000);
  }
  removed_ = true;
  // The shared parent goes when it is empty; another sandbox's group keeps it.
  std::string parent = path_.substr(0, path_.rfind('/'));
  ::rmdir(parent.c_str());
  return absl::OkStatus();
}

absl::StatusOr<DeviceSweep> SweepStaleDeviceGroups() {
  DeviceSweep sweep;
  absl::StatusOr<std::string> parent = DevicesParent();
  if (!parent.ok()) {
    if (absl::IsUnimplemented(parent.status())) return sweep;
    return parent.status();
  }
  DIR* d = ::opendir(parent->c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return sweep;
    return ErrnoStatus(errno, absl::StrCat("opendir(", *parent, ")"));
  }
  std::vector<std::pair<std::string, int64_t>> stale;
  while (dirent* e = ::readdir(d)) {
    // "cubicle-<pid>-dev-<seq>"
    absl::string_view name = e->d_name;
    if (e->d_type != DT_DIR || !absl::ConsumePrefix(&name, "cubicle-")) continue;
    size_t dash = name.find("-dev-");
    pid_t pid = 0;
    uint64_t seq = 0;
    if (dash == absl::string_view::npos || !absl::SimpleAtoi(name.substr(0, dash), &pid) || pid <= 0 ||
        !absl::SimpleAtoi(name.substr(dash + 5), &seq)) {
      continue;
    }
    struct stat st;
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    const int64_t birth = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
    if (!GroupOwnerAlive(pid, birth)) stale.emplace_back(e->d_name, birth);
  }
  ::closedir(d);
  for (const auto& [name, birth] : stale) {
    std::string path = absl::StrCat(*parent, "/", name);
    if (::rmdir(path.c_str()) == 0 || errno == ENOENT) {
      sweep.removed.push_back(name);
    } else {
      sweep.failed.push_back(absl::StrCat(name, ": ", ErrnoStatus(errno, absl::StrCat("rmdir(", path, ")")).message()));
    }
  }
  ::rmdir(parent->c_str());  // only when empty: other sandboxes' groups keep it
  return sweep;
}

namespace {

bpf_insn Insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  bpf_insn i;
  std::memset(&i, 0, sizeof(i));
  i.code = code;
  i.dst_reg = dst & 0xf;
  i.src_reg = src & 0xf;
  i.off = off;
  i.imm = imm;
  return i;
}

bpf_insn LoadCtxWord(uint8_t dst, int16_t offset) { return Insn(BPF_LDX | BPF_MEM | BPF_W, dst, BPF_REG_1, offset, 0); }
bpf_insn JumpIfNotEqual(uint8_t reg, int32_t imm, int16_t skip) { return Insn(BPF_JMP | BPF_JNE | BPF_K, reg, 0, skip, imm); }
bpf_insn Mov64Imm(uint8_t dst, int32_t imm) { return Insn(BPF_ALU64 | BPF_MOV | BPF_K, dst, 0, 0, imm); }
bpf_insn Exit() { return Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0); }

int32_t AccessBits(const std::string& access) {
  int32_t bits = 0;
  if (access.find('r') != std::string::npos) bits |= BPF_DEVCG_ACC_READ;
  if (access.find('w') != std::string::npos) bits |= BPF_DEVCG_ACC_WRITE;
  if (access.find('m') != std::string::npos) bits |= BPF_DEVCG_ACC_MKNOD;
  return bits;
}

std::vector<bpf_insn> Assemble(const std::vector<DeviceRule>& allow) {
  std::vector<bpf_insn> p;
  // r2 = type, r3 = access, r4 = major, r5 = minor (struct bpf_cgroup_dev_ctx).
  p.push_back(LoadCtxWord(BPF_REG_2, offsetof(bpf_cgroup_dev_ctx, access_type)));
  p.push_back(Insn(BPF_ALU | BPF_AND | BPF_K, BPF_REG_2, 0, 0, 0xffff));
  p.push_back(LoadCtxWord(BPF_REG_3, offsetof(bpf_cgroup_dev_ctx, access_type)));
  p.push_back(Insn(BPF_ALU | BPF_RSH | BPF_K, BPF_REG_3, 0, 0, 16));
  p.push_back(LoadCtxWord(BPF_REG_4, offsetof(bpf_cgroup_dev_ctx, major)));
  p.push_back(LoadCtxWord(BPF_REG_5, offsetof(bpf_cgroup_dev_ctx, minor)));
  for (const DeviceRule& r : allow) {
    // One block per rule; every failed test jumps past the block's end.
    const int16_t len = r.minor < 0 ? 7 : 8;
    int16_t at = 0;
    auto skip = [&] { return static_cast<int16_t>(len - at - 1); };
    p.push_back(JumpIfNotEqual(BPF_REG_2, r.type == 'c' ? BPF_DEVCG_DEV_CHAR : BPF_DEVCG_DEV_BLOCK, skip()));
    ++at;
    p.push_back(Insn(BPF_ALU | BPF_MOV | BPF_X, BPF_REG_0, BPF_REG_3, 0, 0));  // w0 = access
    ++at;
    p.push_back(Insn(BPF_ALU | BPF_AND | BPF_K, BPF_REG_0, 0, 0, ~AccessBits(r.access) & 7));  // bits not allowed
    ++at;
    p.push_back(JumpIfNotEqual(BPF_REG_0, 0, skip()));
    ++at;
    p.push_back(JumpIfNotEqual(BPF_REG_4, static_cast<int32_t>(r.major), skip()));
    ++at;
    if (r.minor >= 0) {
      p.push_back(JumpIfNotEqual(BPF_REG_5, static_cast<int32_t>(r.minor), skip()));
      ++at;
    }
    p.push_back(Mov64Imm(BPF_REG_0, 1));
    p.push_back(Exit());
  }
  p.push_back(Mov64Imm(BPF_REG_0, 0));
  p.push_back(Exit());
  return p;
}

long Bpf(int cmd, bpf_attr* attr) { return ::syscall(SYS_bpf, cmd, attr, sizeof(*attr)); }

}  // namespace

DeviceProgram AssembleDeviceProgram(const std::vector<DeviceRule>& allow) {
  std::vector<bpf_insn> insns = Assemble(allow);
  DeviceProgram out;
  out.raw.resize(insns.size());
  std::memcpy(out.raw.data(), insns.data(), insns.size() * sizeof(bpf_insn));
  return out;
}

absl::Status AttachDeviceProgram(int cgroup_fd, const std::vector<DeviceRule>& allow) {
  CUBICLE_RETURN_IF_ERROR(ValidateDeviceRules(allow));
  std::vector<bpf_insn> insns = Assemble(allow);
  static const char kLicense[] = "GPL";
  char log[4096] = {0};
  bpf_attr load;
  std::memset(&load, 0, sizeof(load));
  load.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
  load.insns = reinterpret_cast<uint64_t>(insns.data());
  load.insn_cnt = static_cast<uint32_t>(insns.size());
  load.license = reinterpret_cast<uint64_t>(kLicense);
  load.log_buf = reinterpret_cast<uint64_t>(log);
  load.log_size = sizeof(log);
  load.log_level = 1;
  long prog = Bpf(BPF_PROG_LOAD, &load);
  if (prog < 0) {
    int saved = errno;
    std::string why(log, strnlen(log, sizeof(log)));
    if (why.size() > 300) why = why.substr(why.size() - 300);
    return ErrnoStatus(saved, absl::StrCat("bpf(BPF_PROG_LOAD, cgroup device program of ", insns.size(),
                                           " instructions)", why.empty() ? "" : ": ", why));
  }
  bpf_attr attach;
  std::memset(&attach, 0, sizeof(attach));
  attach.target_fd = static_cast<uint32_t>(cgroup_fd);
  attach.attach_bpf_fd = static_cast<uint32_t>(prog);
  attach.attach_type = BPF_CGROUP_DEVICE;
  long rc = Bpf(BPF_PROG_ATTACH, &attach);
  int saved = errno;
  ::close(static_cast<int>(prog));
  if (rc != 0) return ErrnoStatus(saved, "bpf(BPF_PROG_ATTACH, BPF_CGROUP_DEVICE)");
  return absl::OkStatus();
}

}  // namespace cubicle::cgroups
