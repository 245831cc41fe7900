#include "cli/bwrap_args.h"

#include <linux/capability.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"

namespace cubicle::cli {
namespace {

using rootfs::MountKind;
using rootfs::MountOp;

// bwrap's own limit on arguments (including those from --args), against
// the poisoned-NUL-byte class of bugs.
constexpr size_t kMaxArgs = 9000;

// Capability names as libcap's cap_from_name knows them (case-insensitive).
constexpr const char* kCapNames[] = {
    "cap_chown",           "cap_dac_override",    "cap_dac_read_search", "cap_fowner",
    "cap_fsetid",          "cap_kill",            "cap_setgid",          "cap_setuid",
    "cap_setpcap",         "cap_linux_immutable", "cap_net_bind_service", "cap_net_broadcast",
    "cap_net_admin",       "cap_net_raw",         "cap_ipc_lock",        "cap_ipc_owner",
    "cap_sys_module",      "cap_sys_rawio",       "cap_sys_chroot",      "cap_sys_ptrace",
    "cap_sys_pacct",       "cap_sys_admin",       "cap_sys_boot",        "cap_sys_nice",
    "cap_sys_resource",    "cap_sys_time",        "cap_sys_tty_config",  "cap_mknod",
    "cap_lease",           "cap_audit_write",     "cap_audit_control",   "cap_setfcap",
    "cap_mac_override",    "cap_mac_admin",       "cap_syslog",          "cap_wake_alarm",
    "cap_block_suspend",   "cap_audit_read",      "cap_perfmon",         "cap_bpf",
    "cap_checkpoint_restore",
};

absl::Status Die(absl::string_view message) { return absl::InvalidArgumentError(message); }

// bwrap's fd argument: a decimal >= 0, nothing else.
absl::StatusOr<int> ParseFd(const std::string& text) {
  int fd = 0;
  if (text.empty() || !absl::SimpleAtoi(text, &fd) || fd < 0 || text.find_first_not_of("0123456789+") != std::string::npos) {
    return Die(absl::StrCat("Invalid fd: ", text));
  }
  return fd;
}

// bwrap --perms/--chmod: octal, at most 07777.
std::optional<uint32_t> ParseOctal(const std::string& text) {
  if (text.empty() || text.size() > 6 || text.find_first_not_of("01234567") != std::string::npos) {
    return std::nullopt;
  }
  uint32_t mode = static_cast<uint32_t>(std::strtoul(text.c_str(), nullptr, 8));
  if (mode > 07777) return std::nullopt;
  return mode;
}

// The mode bwrap gives the missing parent directories of an op's
// destination, from the op's own mode: 0755, without group or other access
// where the op's mode has none. Ops that take no mode (binds, symlinks,
// --proc, --dev, ...) count as mode 0 in bwrap's code (its zero-filled op),
// so their parents are 0700: bwrap 0.8 does so, and 0.11's source still
// does, although 0.11's manual says "normally 0755". The code is what a
// launcher meets; cubicle follows it.
uint32_t BwrapParentMode(uint32_t mode) {
  uint32_t parent = 0755;
  if ((mode & 0070) == 0) parent &= ~0050u;
  if ((mode & 0007) == 0) parent &= ~0005u;
  return parent;
}

std::optional<int> ParseCap(const std::string& name) {
  std::string lower = absl::AsciiStrToLower(name);
  for (int i = 0; i < static_cast<int>(std::size(kCapNames)); ++i) {
    if (lower == kCapNames[i]) return i;
  }
  int number = 0;
  if (absl::SimpleAtoi(name, &number) && number >= 0 && number < 64 &&
      name.find_first_not_of("0123456789") == std::string::npos) {
    return number;
  }
  return std::nullopt;
}

// A sandbox path as bwrap reads it: relative paths are taken from the new
// root (bwrap strips leading slashes), and cubicle's normal form.
absl::StatusOr<std::string> SandboxPath(const std::string& path, absl::string_view option) {
  if (path.empty()) return Die(absl::StrCat(option, ": empty path"));
  std::string absolute = path.front() == '/' ? path : absl::StrCat("/", path);
  absl::StatusOr<std::string> normal = rootfs::NormalizeSandboxPath(absolute, option);
  if (!normal.ok()) return Die(normal.status().message());
  return *normal;
}

void SetEnv(std::vector<std::string>* env, const std::string& name, const std::string& value) {
  std::string prefix = name + "=";
  for (std::string& kv : *env) {
    if (absl::StartsWith(kv, prefix)) {
      kv = prefix + value;
      return;
    }
  }
  env->push_back(prefix + value);
}

void UnsetEnv(std::vector<std::string>* env, const std::string& name) {
  std::string prefix = name + "=";
  env->erase(std::remove_if(env->begin(), env->end(),
                            [&](const std::string& kv) { return absl::StartsWith(kv, prefix); }),
             env->end());
}

std::optional<std::string> GetEnv(const std::vector<std::string>& env, const std::string& name) {
  std::string prefix = name + "=";
  for (const std::string& kv : env) {
    if (absl::StartsWith(kv, prefix)) return kv.substr(prefix.size());
  }
  return std::nullopt;
}

// Everything the argv says, before the host decides what it means.
struct Options {
  bool unshare_user = false, unshare_user_try = false, unshare_pid = false, unshare_net = false,
       unshare_ipc = false, unshare_uts = false, unshare_cgroup = false, unshare_cgroup_try = false;
  bool disable_userns = false, assert_userns_disabled = false;
  bool new_session = false, die_with_parent = false, as_pid_1 = false;
  bool clearenv = false;
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  std::optional<std::string> hostname, chdir, argv0, exec_label, file_label;
  std::vector<std::string> lock_files;
  std::optional<int> userns_fd, userns2_fd, pidns_fd;
  bool seccomp_given = false, add_seccomp_given = false;
  std::vector<std::string> seccomp_programs;
  bool caps_used = false;
  uint64_t caps = 0;
  std::vector<MountOp> mounts;
  std::vector<std::string> overlay_sources;  // pending --overlay-src
  std::optional<uint32_t> next_perms;
  std::optional<uint64_t> next_size;
  std::vector<std::string> command;
};

class Parser {
 public:
  Parser(const BwrapHost& host, BwrapInvocation* out, Options* o) : host_(host), out_(out), o_(*o) {
    env_ = host.environ;
    UnsetEnv(&env_, kHostRootEnv);  // cubicle's switch, not the command's (--setenv may still set it)
  }
  std::vector<std::string>& env() { return env_; }

  // Parses `argv` (the command line, or an --args file when `in_file`)
  // into the options; stops at the command, or at --help/--version.
  // `total` counts arguments across --args files (bwrap's limit).
  absl::Status Parse(const std::vector<std::string>& argv, bool in_file, size_t* total) {
    size_t i = 0;
    auto need = [&](size_t n, absl::string_view what) -> absl::Status {
      if (argv.size() - i < n + 1) return Die(absl::StrCat(argv[i], " takes ", what));
      return absl::OkStatus();
    };
    while (i < argv.size()) {
      const std::string& arg = argv[i];
      size_t used = 0;  // how many values the option consumed
      // --perms and --size bind to the very next option that is not the
      // other modifier (they may come in either order). As in bwrap, the
      // options that create a file take them, and an option that leaves
      // one pending is an error once it is done; the command (or "--")
      // ends the options first, so a pending one before it is ignored and
      // the command runs (bwrap 0.8 and 0.11 alike).
      const bool modifier = arg == "--perms" || arg == "--size";
      auto take_perms = [&] { return std::exchange(o_.next_perms, std::nullopt); };
      auto take_size = [&] { return std::exchange(o_.next_size, std::nullopt); };
      if (!o_.overlay_sources.empty() && arg != "--overlay-src" && arg != "--overlay" &&
          arg != "--tmp-overlay" && arg != "--ro-overlay") {
        return Die(
            "--overlay-src must be followed by another --overlay-src or one of --overlay, "
            "--tmp-overlay, or --ro-overlay");
      }

      static const char* const kSingle[] = {"--chdir", "--sync-fd", "--block-fd", "--userns-block-fd",
                                            "--info-fd", "--json-status-fd", "--seccomp", "--uid", "--gid",
                                            "--hostname", "--exec-label", "--file-label", "--userns",
                                            "--userns2", "--pidns"};
      if (std::find(std::begin(kSingle), std::end(kSingle), arg) != std::end(kSingle) && !seen_.insert(arg).second) {
        out_->warnings.push_back(absl::StrCat("Only the last ", arg, " option will take effect"));
      }
      if (arg == "--help") {
        out_->action = BwrapInvocation::Action::kHelp;
        return absl::OkStatus();
      } else if (arg == "--version") {
        out_->action = BwrapInvocation::Action::kVersion;
        return absl::OkStatus();
      } else if (arg == "--args") {
        if (in_file) return Die("--args not supported in arguments file");
        CUBICLE_RETURN_IF_ERROR(need(1, "an argument"));
        CUBICLE_ASSIGN_OR_RETURN(int fd, Fd(argv[i + 1]));
        CUBICLE_ASSIGN_OR_RETURN(std::string data, ReadFd(fd, "Can't read --args data"));
        out_->consumed_fds.push_back(fd);
        std::vector<std::string> inner;
        size_t start = 0;
        while (start < data.size()) {
          size_t nul = data.find('\0', start);
          if (nul == std::string::npos) nul = data.size();
          inner.push_back(data.substr(start, nul - start));
          if (++*total > kMaxArgs) return Die(absl::StrCat("Exceeded maximum number of arguments ", kMaxArgs));
          start = nul + 1;
        }
        CUBICLE_RETURN_IF_ERROR(Parse(inner, true, total));
        if (out_->action != BwrapInvocation::Action::kRun) return absl::OkStatus();  // --help in the file
        used = 1;
      } else if (arg == "--argv0") {
        CUBICLE_RETURN_IF_ERROR(need(1, "one argument"));
        // An empty argv[0] is legal for execve, but cubicle's spec uses
        // "" for "unset": refused rather than silently dropped.
        if (argv[i + 1].empty()) return Die("--argv0 requires a non-empty argument");
        if (o_.argv0.has_value()) return Die("--argv0 used multiple times");
        o_.argv0 = argv[i + 1];
        used = 1;
      } else if (arg == "--level-prefix") {
        out_->level_prefix = true;
      } else if (arg == "--unshare-all") {
        // The -try variants: a host without user or cgroup namespaces still runs.
        o_.unshare_user_try = o_.unshare_ipc = o_.unshare_pid = o_.unshare_uts = o_.unshare_cgroup_try =
            o_.unshare_net = true;
      } else if (arg == "--unshare-user") {
        o_.unshare_user = true;
      } else if (arg == "--unshare-user-try") {
        o_.unshare_user_try = true;
      } else if (arg == "--unshare-ipc") {
        o_.unshare_ipc = true;
      } else if (arg == "--unshare-pid") {
        o_.unshare_pid = true;
      } else if (arg == "--unshare-net") {
        o_.unshare_net = true;
      } else if (arg == "--unshare-uts") {
        o_.unshare_uts = true;
      } else if (arg == "--unshare-cgroup") {
        o_.unshare_cgroup = true;
      } else if (arg == "--unshare-cgroup-try") {
        o_.unshare_cgroup_try = true;
      } else if (arg == "--share-net") {
        o_.unshare_net = false;
      } else if (arg == "--disable-userns") {
        o_.disable_userns = true;
      } else if (arg == "--assert-userns-disabled") {
        o_.assert_userns_disabled = true;
      } else if (arg == "--userns" || arg == "--userns2" || arg == "--pidns") {
        CUBICLE_RETURN_IF_ERROR(need(1, "an argument"));
        // bwrap never closes these: the command has them too.
        CUBICLE_ASSIGN_OR_RETURN(int fd, Fd(argv[i + 1], FdFate::kPassedOn));
        (arg == "--userns" ? o_.userns_fd : arg == "--userns2" ? o_.userns2_fd : o_.pidns_fd) = fd;
        used = 1;
      } else if (arg == "--uid" || arg == "--gid") {
        // bwrap parses a missing value as the next word (usually the
        // command), which then fails as a number.
        const std::string value = i + 1 < argv.size() ? argv[i + 1] : "";
        int id = 0;
        if (i + 1 >= argv.size()) return Die(absl::StrCat(arg, " takes an argument"));
        if (!absl::SimpleAtoi(value, &id) || id < 0 || value.find_first_not_of("0123456789") != std::string::npos) {
          return Die(absl::StrCat(arg == "--uid" ? "Invalid uid: " : "Invalid gid: ", value));
        }
        if (arg == "--uid") {
          o_.uid = static_cast<uid_t>(id);
        } else {
          o_.gid = static_cast<gid_t>(id);
        }
        used = 1;
      } else if (arg == "--hostname") {
        CUBICLE_RETURN_IF_ERROR(need(1, "an argument"));
        o_.hostname = argv[i + 1];
        used = 1;
      } else if (arg == "--chdir") {
        CUBICLE_RETURN_IF_ERROR(need(1, "one argument"));
        o_.chdir = argv[i + 1];
        used = 1;
      } else if (arg == "--clearenv") {
        env_.clear();
      } else if (arg == "--setenv") {
        CUBICLE_RETURN_IF_ERROR(need(2, "two arguments"));
        if (argv[i + 1].empty() || argv[i + 1].find('=') != std::string::npos) {
          return Die(absl::StrCat("setenv failed: Invalid argument"));
        }
        SetEnv(&env_, argv[i + 1], argv[i + 2]);
        used = 2;
      } else if (arg == "--unsetenv") {
        CUBICLE_RETURN_IF_ERROR(need(1, "an argument"));
        UnsetEnv(&env_, argv[i + 1]);
        used = 1;
      } else if (arg == "--lock-file") {
        CUBICLE_RETURN_IF_ERROR(need(1, "an argument"));
        o_.lock_files.push_back(argv[i + 1]);
        used = 1;
      } else if (arg == "--sync-fd" || arg == "--block-fd" || arg == "--userns-block-fd" || arg == "--info-fd" ||
                 arg == "--json-status-fd") {
        CUBICLE_RETURN_IF_ERROR(need(1, "an argument"));
        // bwrap closes --block-fd, --info-fd and --json-status-fd before
        // the command and leaves --userns-block-fd open; --sync-fd is the
        // command's only with --as-pid-1 (decided once the argv is read).
        const FdFate fate = arg == "--userns-block-fd" || arg == "--sync-fd" ? FdFate::kPassedOn : FdFate::kClosed;
        CUBICLE_ASSIGN_OR_RETURN(int fd, Fd(argv[i + 1], fate));
        std::optional<int>& slot = arg == "--sync-fd"          ? out_->sync_fd
                                   : arg == "--block-fd"        ? out_->block_fd
                                   : arg == "--userns-block-fd" ? out_->userns_block_fd
                                   : arg == "--info-fd"         ? out_->info_fd
                                                                : out_->json_status_fd;
        slot = fd;
        used = 1;
      } else if (arg == "--bind" || arg == "--bind-try" || arg == "--dev-bind" || arg == "--dev-bind-try" ||
                 arg == "--ro-bind" || arg == "--ro-bind-try") {
        CUBICLE_RETURN_IF_ERROR(need(2, "two arguments"));
        MountOp op;
        op.kind = MountKind::kBind;
        op.source = argv[i + 1];
        CUBICLE_ASSIGN_OR_RETURN(op.dest, SandboxPath(argv[i + 2], arg));
        op.readonly = absl::StartsWith(arg, "--ro-");
        op.devices = absl::StartsWith(arg, "--dev-");
        op.optional = absl::EndsWith(arg, "-try");
        op.parent_mode = BwrapParentMode(0);
        op.bwrap_style = true;
        o_.mounts.push_back(std::move(op));
        used = 2;
      } else if (arg == "--bind-fd" || arg == "--ro-bind-fd") {
        if (argv.size() - i < 3) return Die("--bind-fd takes two arguments");  // bwrap's wording for both
        CUBICLE_ASSIGN_OR_RETURN(int fd, Fd(argv[i + 1]));
        MountOp op;
        op.kind = MountKind::kBind;
        op.source = absl::StrCat("/proc/self/fd/", fd);
        CUBICLE_ASSIGN_OR_RETURN(op.dest, SandboxPath(argv[i + 2], arg));
        op.readonly = arg == "--ro-bind-fd";
        op.parent_mode = BwrapParentMode(0);
        op.bwrap_style = true;
        o_.mounts.push_back(std::move(op));
        // Kept open until the launch resolves the path it names.
        used = 2;
      } else if (arg == "--remount-ro" || arg == "--proc" || arg == "--dev" || arg == "--tmpfs" ||
                 arg == "--mqueue" || arg == "--dir") {
        CUBICLE_RETURN_IF_ERROR(need(1, arg == "--remount-ro" ? "one argument" : "an argument"));
        MountOp op;
        CUBICLE_ASSIGN_OR_RETURN(op.dest, SandboxPath(argv[i + 1], arg));
        op.bwrap_style = true;
        op.parent_mode = BwrapParentMode(0);
        if (arg == "--remount-ro") op.kind = MountKind::kRemountRo;
        if (arg == "--proc") op.kind = MountKind::kProc;
        if (arg == "--dev") op.kind = MountKind::kDev;
        if (arg == "--mqueue") op.kind = MountKind::kMqueue;
        if (arg == "--dir") op.kind = MountKind::kDir;
        if (arg == "--tmpfs") {
          op.kind = MountKind::kTmpfs;
          op.size_bytes = take_size().value_or(0);
        }
        if (arg == "--dir" || arg == "--tmpfs") {
          op.mode = take_perms().value_or(0755);
          op.parent_mode = BwrapParentMode(op.mode);
        }
        o_.mounts.push_back(std::move(op));
        used = 1;
      } else if (arg == "--file" || arg == "--bind-data" || arg == "--ro-bind-data") {
        CUBICLE_RETURN_IF_ERROR(need(2, "two arguments"));
        CUBICLE_ASSIGN_OR_RETURN(int fd, Fd(argv[i + 1]));
        MountOp op;
        CUBICLE_ASSIGN_OR_RETURN(op.dest, SandboxPath(argv[i + 2], arg));
        CUBICLE_ASSIGN_OR_RETURN(op.data, ReadFd(fd, absl::StrCat("Can't write data to file ", argv[i + 2])));
        out_->consumed_fds.push_back(fd);
        op.kind = arg == "--file" ? MountKind::kFile : MountKind::kBindData;
        op.readonly = arg == "--ro-bind-data";
        op.mode = take_perms().value_or(arg == "--file" ? 0666 : 0600);
        op.parent_mode = BwrapParentMode(op.mode);
        op.bwrap_style = true;
        o_.mounts.push_back(std::move(op));
        used = 2;
      } else if (arg == "--symlink") {
        CUBICLE_RETURN_IF_ERROR(need(2, "two arguments"));
        MountOp op;
        op.kind = MountKind::kSymlink;
        op.source = argv[i + 1];
        CUBICLE_ASSIGN_OR_RETURN(op.dest, SandboxPath(argv[i + 2], arg));
        op.parent_mode = BwrapParentMode(0);
        op.bwrap_style = true;
        o_.mounts.push_back(std::move(op));
        used = 2;
      } else if (arg == "--chmod") {
        CUBICLE_RETURN_IF_ERROR(need(2, "two arguments"));
        std::optional<uint32_t> mode = ParseOctal(argv[i + 1]);
        if (!mode.has_value()) return Die("--chmod takes an octal argument <= 07777");
        MountOp op;
        op.kind = MountKind::kChmod;
        op.mode = *mode;
        CUBICLE_ASSIGN_OR_RETURN(op.dest, SandboxPath(argv[i + 2], arg));
        op.bwrap_style = true;
        o_.mounts.push_back(std::move(op));
        used = 2;
      } else if (arg == "--perms") {
        CUBICLE_RETURN_IF_ERROR(need(1, "an argument"));
        if (o_.next_perms.has_value()) return Die("--perms given twice for the same action");
        std::optional<uint32_t> mode = ParseOctal(argv[i + 1]);
        if (!mode.has_value()) return Die("--perms takes an octal argument <= 07777");
        o_.next_perms = mode;
        used = 1;
      } else if (arg == "--size") {
        CUBICLE_RETURN_IF_ERROR(need(1, "an argument"));
        if (o_.next_size.has_value()) return Die("--size given twice for the same action");
        // bwrap: strtoull base 0 (so 0x and 0 prefixes count), a leading
        // digit, nothing after the number, not zero.
        const std::string& text = argv[i + 1];
        errno = 0;
        char* end = nullptr;
        unsigned long long bytes = std::strtoull(text.c_str(), &end, 0);
        if (errno != 0 || text.empty() || text[0] < '0' || text[0] > '9' || *end != '\0' || bytes == 0) {
          return Die("--size takes a non-zero number of bytes");
        }
        constexpr uint64_t kMaxTmpfsBytes = SIZE_MAX >> 1;
        if (bytes > kMaxTmpfsBytes) return Die(absl::StrCat("--size (for tmpfs) is limited to ", kMaxTmpfsBytes));
        o_.next_size = bytes;
        used = 1;
      } else if (arg == "--overlay-src") {
        CUBICLE_RETURN_IF_ERROR(need(1, "an argument"));
        o_.overlay_sources.push_back(argv[i + 1]);
        used = 1;
      } else if (arg == "--overlay" || arg == "--tmp-overlay" || arg == "--ro-overlay") {
        const size_t n = arg == "--overlay" ? 3 : 1;
        CUBICLE_RETURN_IF_ERROR(need(n, n == 3 ? "three arguments" : "an argument"));
        const size_t min_sources = arg == "--ro-overlay" ? 2 : 1;
        if (o_.overlay_sources.size() < min_sources) {
          return Die(absl::StrCat(arg, " requires at least ", min_sources == 2 ? "two" : "one",
                                  " --overlay-src"));
        }
        MountOp op;
        op.kind = MountKind::kOverlay;
        op.source = absl::StrJoin(o_.overlay_sources, "\n");
        o_.overlay_sources.clear();
        if (arg == "--overlay") {
          op.upper = argv[i + 1];
          op.work = argv[i + 2];
        }
        op.readonly = arg == "--ro-overlay";
        CUBICLE_ASSIGN_OR_RETURN(op.dest, SandboxPath(argv[i + n], arg));
        op.parent_mode = BwrapParentMode(0);
        op.bwrap_style = true;
        o_.mounts.push_back(std::move(op));
        used = n;
      } else if (arg == "--exec-label" || arg == "--file-label") {
        CUBICLE_RETURN_IF_ERROR(need(1, "an argument"));
        // As bwrap, checked at once: is SELinux here, and does its policy
        // know the context?
        if (!host_.check_selinux_label) return Die("labeling not supported on this system");
        if (absl::Status valid = host_.check_selinux_label(argv[i + 1]); !valid.ok()) {
          return Die(absl::StrCat("invalid label ", valid.message()));
        }
        (arg == "--exec-label" ? o_.exec_label : o_.file_label) = argv[i + 1];
        used = 1;
      } else if (arg == "--seccomp" || arg == "--add-seccomp-fd") {
        CUBICLE_RETURN_IF_ERROR(need(1, "an argument"));
        CUBICLE_ASSIGN_OR_RETURN(int fd, Fd(argv[i + 1]));
        bool add = arg == "--add-seccomp-fd";
        if (add && o_.seccomp_given) return Die("--add-seccomp-fd cannot be combined with --seccomp");
        if (!add && o_.add_seccomp_given) return Die("--seccomp cannot be combined with --add-seccomp-fd");
        CUBICLE_ASSIGN_OR_RETURN(std::string program, ReadFd(fd, "Can't read seccomp data"));
        if (program.size() % 8 != 0) return Die("Invalid seccomp data, must be multiple of 8");
        out_->consumed_fds.push_back(fd);
        if (!add) o_.seccomp_programs.clear();  // bwrap: only the last --seccomp counts
        o_.seccomp_programs.push_back(std::move(program));
        (add ? o_.add_seccomp_given : o_.seccomp_given) = true;
        used = 1;
      } else if (arg == "--new-session") {
        o_.new_session = true;
      } else if (arg == "--die-with-parent") {
        o_.die_with_parent = true;
      } else if (arg == "--as-pid-1") {
        o_.as_pid_1 = true;
      } else if (arg == "--cap-add" || arg == "--cap-drop") {
        CUBICLE_RETURN_IF_ERROR(need(1, "an argument"));
        const std::string& name = argv[i + 1];
        o_.caps_used = true;
        bool add = arg == "--cap-add";
        if (absl::EqualsIgnoreCase(name, "ALL")) {
          o_.caps = add ? ~uint64_t{0} : 0;
        } else {
          std::optional<int> cap = ParseCap(name);
          if (!cap.has_value()) return Die(absl::StrCat("unknown cap: ", name));
          if (add) {
            o_.caps |= uint64_t{1} << *cap;
          } else {
            o_.caps &= ~(uint64_t{1} << *cap);
          }
        }
        used = 1;
      } else if (in_file && (arg == "--" || arg.empty() || arg[0] != '-')) {
        // bwrap stops reading an --args file at its first non-option and
        // drops the rest of the file; the command comes from argv.
        return absl::OkStatus();
      } else if (arg == "--") {
        o_.command.assign(argv.begin() + static_cast<long>(i) + 1, argv.end());
        return absl::OkStatus();
      } else if (!arg.empty() && arg[0] == '-') {
        return Die(absl::StrCat("Unknown option ", arg));
      } else {
        o_.command.assign(argv.begin() + static_cast<long>(i), argv.end());
        return absl::OkStatus();
      }
      if (!modifier && o_.next_perms.has_value()) {
        return Die("--perms must be followed by an option that creates a file");
      }
      if (!modifier && o_.next_size.has_value()) return Die("--size must be followed by --tmpfs");
      i += used + 1;
    }
    if (!o_.overlay_sources.empty() && !in_file) {
      return Die(
          "--overlay-src must be followed by another --overlay-src or one of --overlay, --tmp-overlay, or "
          "--ro-overlay");
    }
    return absl::OkStatus();
  }

 private:
  // An fd argument. Those bwrap closes before the command are the option's
  // alone; the others reach the command at their number, as in bwrap.
  enum class FdFate { kClosed, kPassedOn };
  absl::StatusOr<int> Fd(const std::string& text, FdFate fate = FdFate::kClosed) {
    absl::StatusOr<int> fd = ParseFd(text);
    if (fd.ok() && fate == FdFate::kClosed) out_->option_fds.push_back(*fd);
    return fd;
  }

  absl::StatusOr<std::string> ReadFd(int fd, absl::string_view what) {
    if (!host_.read_fd) return Die(absl::StrCat(what, ": Bad file descriptor"));
    absl::StatusOr<std::string> data = host_.read_fd(fd);
    if (!data.ok()) return Die(absl::StrCat(what, ": ", data.status().message()));
    return data;
  }

  const BwrapHost& host_;
  BwrapInvocation* out_;
  Options& o_;
  std::vector<std::string> env_;
  std::set<std::string> seen_;
};

}  // namespace

absl::StatusOr<BwrapInvocation> ParseBwrapArgs(const std::vector<std::string>& args, const BwrapHost& host) {
  BwrapInvocation out;
  if (args.empty()) {
    out.action = BwrapInvocation::Action::kUsage;
    return out;
  }
  Options o;
  // --cap-add/--cap-drop edit root's own effective set; others start empty.
  o.caps = host.uid == 0 ? host.effective_caps : 0;
  Parser parser(host, &out, &o);
  size_t total = args.size();
  if (total > kMaxArgs) return Die(absl::StrCat("Exceeded maximum number of arguments ", kMaxArgs));
  CUBICLE_RETURN_IF_ERROR(parser.Parse(args, false, &total));
  if (out.action != BwrapInvocation::Action::kRun) return out;

  // The conflicts bwrap rejects, in bwrap's order, before anything is made.
  if (out.userns_block_fd.has_value() && !o.unshare_user && !o.userns_fd.has_value()) {
    return Die("--userns-block-fd requires --unshare-user");
  }
  if (out.userns_block_fd.has_value() && !out.info_fd.has_value()) {
    return Die("--userns-block-fd requires --info-fd");
  }
  if (o.userns_fd.has_value() && o.unshare_user) return Die("--userns not compatible --unshare-user");
  if (o.userns_fd.has_value() && o.unshare_user_try) return Die("--userns not compatible --unshare-user-try");
  if (o.userns_fd.has_value() && o.disable_userns) return Die("--userns not compatible with --disable-userns");
  if (o.disable_userns && !o.unshare_user) return Die("--disable-userns requires --unshare-user");
  if (o.disable_userns && out.userns_block_fd.has_value()) {
    return Die("--disable-userns is not compatible with  --userns-block-fd");  // sic, bwrap's double space
  }

  // bwrap without setuid and not root always needs a user namespace: a new
  // one, or the one --userns names.
  const bool join_userns = o.userns_fd.has_value();
  bool unshare_user = o.unshare_user || (host.uid != 0 && !join_userns);
  if (o.unshare_user_try && host.user_namespaces_enabled) unshare_user = true;
  const uid_t uid = o.uid.value_or(host.uid);
  const gid_t gid = o.gid.value_or(host.gid);
  if (!unshare_user && !join_userns && uid != host.uid) {
    return Die("Specifying --uid requires --unshare-user or --userns");
  }
  if (!unshare_user && !join_userns && gid != host.gid) {
    return Die("Specifying --gid requires --unshare-user or --userns");
  }
  if (!o.unshare_uts && o.hostname.has_value()) return Die("Specifying --hostname requires --unshare-uts");
  if (o.as_pid_1 && !o.unshare_pid) return Die("Specifying --as-pid-1 requires --unshare-pid");
  if (o.as_pid_1 && !o.lock_files.empty()) return Die("Specifying --as-pid-1 and --lock-file is not permitted");
  if (o.command.empty()) {
    out.action = BwrapInvocation::Action::kUsage;
    return out;
  }
  // bwrap's PID 1 holds --sync-fd and closes it for the command; with
  // --as-pid-1 there is no such process and the command keeps it.
  if (out.sync_fd.has_value() && !o.as_pid_1) out.option_fds.push_back(*out.sync_fd);
  // --pidns naming the pid namespace the launcher is in already: joining it
  // changes nothing, and cubicle's own user namespace could not mount a
  // procfs for it, so it is not joined at all (bwrap, with no user
  // namespace as root, mounts one). With --userns the join itself is
  // refused by the kernel, in bwrap's words: left to it.
  const bool own_pidns = o.pidns_fd.has_value() && !o.userns_fd.has_value() && host.is_own_pid_namespace &&
                         host.is_own_pid_namespace(*o.pidns_fd);
  const std::optional<int> join_pidns = own_pidns ? std::nullopt : o.pidns_fd;


  runtime::SandboxSpec& spec = out.spec;
  // A user namespace always: a new one, the one --userns names, or (root
  // without --unshare-user) a new one mapping every host id to itself;
  // with the opt-in, none there, as bwrap.
  const bool host_root = host.host_root_opt_in && host.uid == 0 && !unshare_user && !join_userns;
  spec.host_user_namespace = host_root;
  spec.namespaces.user = !join_userns && !host_root;
  spec.join_userns = o.userns_fd;
  spec.join_pidns = join_pidns;
  spec.join_userns_after_setup = o.userns2_fd;
  spec.namespaces.mount = true;
  spec.namespaces.pid = o.unshare_pid;
  spec.namespaces.net = o.unshare_net;
  spec.namespaces.ipc = o.unshare_ipc;
  spec.namespaces.uts = o.unshare_uts;
  spec.namespaces.cgroup = o.unshare_cgroup || o.unshare_cgroup_try;
  spec.uid = uid;
  spec.gid = gid;
  if (!join_userns && !host_root) {
    spec.host_uid = host.uid;
    spec.host_gid = host.gid;
    spec.map_all_host_ids = !unshare_user;
  }
  spec.disable_userns = o.disable_userns;
  spec.assert_userns_disabled = o.assert_userns_disabled;

  // Capabilities, as bwrap computes them: root starts from its own
  // effective set, anyone else from nothing; --cap-add/--cap-drop edit it.
  // In a new user namespace every capability is on offer and the bounding
  // set becomes the request; without one (root) the host's set bounds it,
  // and a request beyond it leaves the caps as they were (bwrap's capset
  // fails with EPERM, which it ignores for root).
  const uint64_t all_caps = (uint64_t{1} << std::size(kCapNames)) - 1;
  const uint64_t requested = o.caps & all_caps;
  runtime::CapabilitySpec caps;
  if (unshare_user || join_userns) {
    caps.keep = requested;
    caps.bounding = requested;
    caps.exact = o.caps_used;
  } else {
    caps.bounding = host.effective_caps;
    caps.exact = o.caps_used && (requested & ~host.effective_caps) == 0;
    caps.keep = caps.exact ? requested : host.effective_caps;
  }
  spec.capabilities = caps;

  spec.readonly_root = false;  // bwrap's root tmpfs is writable
  for (MountOp& op : o.mounts) {
    // --file-label: bwrap labels the tmpfs mounts it makes (--tmpfs, --dev).
    if (o.file_label.has_value() && (op.kind == MountKind::kTmpfs || op.kind == MountKind::kDev)) {
      op.selinux_context = *o.file_label;
    }
    // Without a new pid namespace bwrap binds the host's procfs (the pid
    // namespace is shared anyway) and covers it as it covers a new one.
    // A joined pid namespace gets a procfs of its own, as in bwrap.
    if (op.kind == MountKind::kProc && !o.unshare_pid && !join_pidns.has_value()) {
      op.source = "/proc";
      op.noexec = own_pidns;  // bwrap mounts a new procfs of it, noexec
    }
    spec.mounts.push_back(std::move(op));
  }

  spec.set_hostname = o.hostname.has_value();
  if (o.hostname.has_value()) spec.hostname = *o.hostname;
  // bwrap calls setsid only for --new-session, in its first process in the
  // sandbox, before that forks its PID 1 (with --unshare-pid, --lock-file
  // or --sync-fd, unless --as-pid-1): then the command is in PID 1's
  // session, not its leader. cubicle's init stands in for that PID 1.
  const bool bwrap_has_init =
      !o.as_pid_1 && (o.unshare_pid || !o.lock_files.empty() || out.sync_fd.has_value());
  spec.new_session = o.new_session && !bwrap_has_init;
  spec.init_new_session = o.new_session && bwrap_has_init;
  spec.as_pid_1 = o.as_pid_1;
  for (const std::string& path : o.lock_files) {
    CUBICLE_ASSIGN_OR_RETURN(std::string lock, SandboxPath(path, "--lock-file"));
    out.lock_files.push_back(std::move(lock));
  }
  spec.die_with_parent = o.die_with_parent;
  spec.seccomp = seccomp::Policy::kNone;
  spec.seccomp_programs = std::move(o.seccomp_programs);
  spec.argv = o.command;
  if (o.argv0.has_value()) spec.argv0 = *o.argv0;
  if (o.exec_label.has_value()) spec.exec_label = *o.exec_label;

  // The working directory: --chdir; else the caller's, if the sandbox has
  // it; else $HOME; else /. PWD says which (the payload's view).
  std::vector<std::string>& env = parser.env();
  if (o.chdir.has_value()) {
    CUBICLE_ASSIGN_OR_RETURN(spec.cwd, SandboxPath(*o.chdir, "--chdir"));
    SetEnv(&env, "PWD", spec.cwd);
  } else {
    absl::StatusOr<std::string> cwd = rootfs::NormalizeSandboxPath(host.cwd, "cwd");
    spec.cwd = cwd.ok() ? *cwd : "/";
    std::optional<std::string> home = GetEnv(env, "HOME");
    if (home.has_value()) {
      absl::StatusOr<std::string> normal = rootfs::NormalizeSandboxPath(*home, "HOME");
      if (normal.ok() && *normal != spec.cwd) spec.cwd_fallbacks.push_back(*normal);
    }
    if (spec.cwd != "/") spec.cwd_fallbacks.push_back("/");
    SetEnv(&env, "PWD", spec.cwd);
  }
  spec.env = std::move(env);

  out.info_namespaces.clear();
  if (spec.namespaces.cgroup) out.info_namespaces.push_back("cgroup");
  if (spec.namespaces.ipc) out.info_namespaces.push_back("ipc");
  out.info_namespaces.push_back("mnt");
  if (spec.namespaces.net) out.info_namespaces.push_back("net");
  if (spec.namespaces.pid) out.info_namespaces.push_back("pid");
  if (spec.namespaces.uts) out.info_namespaces.push_back("uts");
  return out;
}

std::string BwrapUsage(const std::string& argv0) {
  return absl::StrCat("usage: ", argv0, R"( [OPTIONS...] [--] COMMAND [ARGS...]

    --help                       Print this help
    --version                    Print version
    --args FD                    Parse NUL-separated args from FD
    --argv0 VALUE                Set argv[0] to the value VALUE before running the program
    --level-prefix               Prepend e.g. <3> to diagnostic messages
    --unshare-all                Unshare every namespace we support by default
    --share-net                  Retain the network namespace (can only combine with --unshare-all)
    --unshare-user               Create new user namespace (may be automatically implied if not setuid)
    --unshare-user-try           Create new user namespace if possible else continue by skipping it
    --unshare-ipc                Create new ipc namespace
    --unshare-pid                Create new pid namespace
    --unshare-net                Create new network namespace
    --unshare-uts                Create new uts namespace
    --unshare-cgroup             Create new cgroup namespace
    --unshare-cgroup-try         Create new cgroup namespace if possible else continue by skipping it
    --userns FD                  Use this user namespace (cannot combine with --unshare-user)
    --userns2 FD                 After setup switch to this user namespace, only useful with --userns
    --disable-userns             Disable further use of user namespaces inside sandbox
    --assert-userns-disabled     Fail unless further use of user namespace inside sandbox is disabled
    --pidns FD                   Use this pid namespace (as parent namespace if using --unshare-pid)
    --uid UID                    Custom uid in the sandbox (requires --unshare-user or --userns)
    --gid GID                    Custom gid in the sandbox (requires --unshare-user or --userns)
    --hostname NAME              Custom hostname in the sandbox (requires --unshare-uts)
    --chdir DIR                  Change directory to DIR
    --clearenv                   Unset all environment variables
    --setenv VAR VALUE           Set an environment variable
    --unsetenv VAR               Unset an environment variable
    --lock-file DEST             Take a lock on DEST while sandbox is running
    --sync-fd FD                 Keep this fd open while sandbox is running
    --bind SRC DEST              Bind mount the host path SRC on DEST
    --bind-try SRC DEST          Equal to --bind but ignores non-existent SRC
    --dev-bind SRC DEST          Bind mount the host path SRC on DEST, allowing device access
    --dev-bind-try SRC DEST      Equal to --dev-bind but ignores non-existent SRC
    --ro-bind SRC DEST           Bind mount the host path SRC readonly on DEST
    --ro-bind-try SRC DEST       Equal to --ro-bind but ignores non-existent SRC
    --bind-fd FD DEST            Bind open directory or path fd on DEST
    --ro-bind-fd FD DEST         Bind open directory or path fd read-only on DEST
    --remount-ro DEST            Remount DEST as readonly; does not recursively remount
    --overlay-src SRC            Read files from SRC in the following overlay
    --overlay RWSRC WORKDIR DEST Mount overlayfs on DEST, with RWSRC as the host path for writes and
                                 WORKDIR an empty directory on the same filesystem as RWSRC
    --tmp-overlay DEST           Mount overlayfs on DEST, with writes going to an invisible tmpfs
    --ro-overlay DEST            Mount overlayfs read-only on DEST
    --exec-label LABEL           Exec label for the sandbox
    --file-label LABEL           File label for temporary sandbox content
    --proc DEST                  Mount new procfs on DEST
    --dev DEST                   Mount new dev on DEST
    --tmpfs DEST                 Mount new tmpfs on DEST
    --mqueue DEST                Mount new mqueue on DEST
    --dir DEST                   Create dir at DEST
    --file FD DEST               Copy from FD to destination DEST
    --bind-data FD DEST          Copy from FD to file which is bind-mounted on DEST
    --ro-bind-data FD DEST       Copy from FD to file which is readonly bind-mounted on DEST
    --symlink SRC DEST           Create symlink at DEST with target SRC
    --seccomp FD                 Load and use seccomp rules from FD (not repeatable)
    --add-seccomp-fd FD          Load and use seccomp rules from FD (repeatable)
    --block-fd FD                Block on FD until some data to read is available
    --userns-block-fd FD         Block on FD until the user namespace is ready
    --info-fd FD                 Write information about the running container to FD
    --json-status-fd FD          Write container status to FD as multiple JSON documents
    --new-session                Create a new terminal session
    --die-with-parent            Kills with SIGKILL child process (COMMAND) when bwrap or bwrap's parent dies.
    --as-pid-1                   Do not install a reaper process with PID=1
    --cap-add CAP                Add cap CAP when running as privileged user
    --cap-drop CAP               Drop cap CAP when running as privileged user
    --perms OCTAL                Set permissions of next argument (--bind-data, --file, etc.)
    --size BYTES                 Set size of next argument (only for --tmpfs)
    --chmod OCTAL PATH           Change permissions of PATH (must already exist)
)");
}

}  // namespace cubicle::cli
