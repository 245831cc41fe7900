// bwrap's options, one table entry each: its name, how many values follow
// it, and a small handler that records them. A handler sees one option
// alone; what options mean together is checked once the whole argv is read
// (cli/bwrap_args.cc), before anything is made, as bwrap does.
#include "cli/bwrap_options.h"

#include <linux/filter.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <iterator>
#include <set>
#include <span>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace cubicle::cli::bwrap {
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
static_assert(std::size(kCapNames) == kKnownCapCount);

constexpr char kOverlaySrcPending[] =
    "--overlay-src must be followed by another --overlay-src or one of --overlay, --tmp-overlay, or --ro-overlay";

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

void UnsetEnv(std::vector<std::string>* env, const std::string& name) {
  std::string prefix = name + "=";
  env->erase(std::remove_if(env->begin(), env->end(),
                            [&](const std::string& kv) { return absl::StartsWith(kv, prefix); }),
             env->end());
}

// What the handlers share while one argv (and its --args files) is read.
struct ReadState {
  const BwrapHost& host;
  BwrapInvocation* out;
  Options& o;
  std::set<std::string> seen;  // the options that warn when repeated
  size_t total = 0;            // arguments so far, across --args files (bwrap's limit)
};

using Values = std::span<const std::string>;
using Handler = absl::Status (*)(ReadState& s, const std::string& option, Values values);

// An option's place in the loop beyond its own values.
enum OptionFlag : unsigned {
  kWarnIfRepeated = 1u << 0,   // one value: a repeat warns, and the last wins
  kModifier = 1u << 1,         // --perms/--size: binds to the next option
  kTakesOverlaySrc = 1u << 2,  // may follow a pending --overlay-src
  kNotInArgsFile = 1u << 3,    // --args
};

// How many values follow an option, and how bwrap's error says so.
struct Arity {
  size_t count;
  const char* words;
};
constexpr Arity kNoValue{0, ""};
constexpr Arity kAnArgument{1, "an argument"};
constexpr Arity kOneArgument{1, "one argument"};
constexpr Arity kTwoArguments{2, "two arguments"};
constexpr Arity kThreeArguments{3, "three arguments"};

struct OptionEntry {
  const char* name;
  Arity arity;
  Handler handle;
  unsigned flags = 0;
  const char* name_in_errors = nullptr;  // when bwrap's messages name another option
};

// An fd argument. Those bwrap closes before the command are the option's
// alone; the others reach the command at their number, as in bwrap.
enum class FdFate { kClosed, kPassedOn };
absl::StatusOr<int> OptionFd(ReadState& s, const std::string& text, FdFate fate = FdFate::kClosed) {
  absl::StatusOr<int> fd = ParseFd(text);
  if (fd.ok() && fate == FdFate::kClosed) s.out->option_fds.push_back(*fd);
  return fd;
}

// Reads an fd to its end, once: bwrap closes what it has read.
absl::StatusOr<std::string> ReadFdOnce(const BwrapHost& host, Options& o, int fd, absl::string_view what) {
  if (!host.read_fd || o.read_fds.count(fd) != 0) return Die(absl::StrCat(what, ": Bad file descriptor"));
  absl::StatusOr<std::string> data = host.read_fd(fd);
  if (!data.ok()) return Die(absl::StrCat(what, ": ", data.status().message()));
  o.read_fds.insert(fd);
  return data;
}

absl::StatusOr<std::string> ReadFd(ReadState& s, int fd, absl::string_view what) {
  return ReadFdOnce(s.host, s.o, fd, what);
}

// --perms and --size bind to the very next option that is not the other
// modifier (they may come in either order). As in bwrap, the options that
// create a file take them, and an option that leaves one pending is an
// error once it is done; the command (or "--") ends the options first, so
// a pending one before it is ignored and the command runs (bwrap 0.8 and
// 0.11 alike).
std::optional<uint32_t> TakePerms(ReadState& s) { return std::exchange(s.o.next_perms, std::nullopt); }
std::optional<uint64_t> TakeSize(ReadState& s) { return std::exchange(s.o.next_size, std::nullopt); }

absl::Status RejectPendingModifier(const Options& o) {
  if (o.next_perms.has_value()) return Die("--perms must be followed by an option that creates a file");
  if (o.next_size.has_value()) return Die("--size must be followed by --tmpfs");
  return absl::OkStatus();
}

// A bwrap-style op at `dest`; its missing parents as bwrap's zero-filled
// op has them (see BwrapParentMode).
absl::StatusOr<MountOp> NewOp(MountKind kind, const std::string& dest, const std::string& option) {
  MountOp op;
  op.kind = kind;
  CUBICLE_ASSIGN_OR_RETURN(op.dest, SandboxPath(dest, option));
  op.parent_mode = BwrapParentMode(0);
  op.bwrap_style = true;
  return op;
}

absl::Status AddOp(ReadState& s, absl::StatusOr<MountOp> op) {
  if (!op.ok()) return op.status();
  s.o.mounts.push_back(*std::move(op));
  return absl::OkStatus();
}

absl::Status ReadArgv(ReadState& s, const std::vector<std::string>& argv, bool in_file);

// --- The handlers, in the order of bwrap's usage text.

absl::Status Help(ReadState& s, const std::string&, Values) {
  s.out->action = BwrapInvocation::Action::kHelp;
  return absl::OkStatus();
}

absl::Status Version(ReadState& s, const std::string&, Values) {
  s.out->action = BwrapInvocation::Action::kVersion;
  return absl::OkStatus();
}

// NUL-separated arguments, read in place of the option.
absl::Status Args(ReadState& s, const std::string&, Values v) {
  CUBICLE_ASSIGN_OR_RETURN(int fd, OptionFd(s, v[0]));
  CUBICLE_ASSIGN_OR_RETURN(std::string data, ReadFd(s, fd, "Can't read --args data"));
  s.out->consumed_fds.push_back(fd);
  std::vector<std::string> inner;
  size_t start = 0;
  while (start < data.size()) {
    size_t nul = data.find('\0', start);
    if (nul == std::string::npos) nul = data.size();
    inner.push_back(data.substr(start, nul - start));
    if (++s.total > kMaxArgs) return Die(absl::StrCat("Exceeded maximum number of arguments ", kMaxArgs));
    start = nul + 1;
  }
  return ReadArgv(s, inner, /*in_file=*/true);
}

absl::Status Argv0(ReadState& s, const std::string&, Values v) {
  // An empty argv[0] is legal for execve, but cubicle's spec uses "" for
  // "unset": refused rather than silently dropped.
  if (v[0].empty()) return Die("--argv0 requires a non-empty argument");
  if (s.o.argv0.has_value()) return Die("--argv0 used multiple times");
  s.o.argv0 = v[0];
  return absl::OkStatus();
}

absl::Status LevelPrefix(ReadState& s, const std::string&, Values) {
  s.out->level_prefix = true;
  return absl::OkStatus();
}

absl::Status UnshareAll(ReadState& s, const std::string&, Values) {
  // The -try variants: a host without user or cgroup namespaces still runs.
  s.o.unshare_user_try = s.o.unshare_ipc = s.o.unshare_pid = s.o.unshare_uts = s.o.unshare_cgroup_try =
      s.o.unshare_net = true;
  return absl::OkStatus();
}

// --unshare-*, --share-net, --new-session and the other switches.
template <bool Options::*kField, bool kValue>
absl::Status Switch(ReadState& s, const std::string&, Values) {
  s.o.*kField = kValue;
  return absl::OkStatus();
}

// --userns, --userns2, --pidns: bwrap never closes these, the command has
// them too.
template <std::optional<int> Options::*kField>
absl::Status NamespaceFd(ReadState& s, const std::string&, Values v) {
  CUBICLE_ASSIGN_OR_RETURN(s.o.*kField, OptionFd(s, v[0], FdFate::kPassedOn));
  return absl::OkStatus();
}

// --uid, --gid. A missing value bwrap takes from the next word (usually
// the command), which then fails as a number.
absl::Status Id(ReadState& s, const std::string& option, Values v) {
  const bool uid = option == "--uid";
  int id = 0;
  if (!absl::SimpleAtoi(v[0], &id) || id < 0 || v[0].find_first_not_of("0123456789") != std::string::npos) {
    return Die(absl::StrCat(uid ? "Invalid uid: " : "Invalid gid: ", v[0]));
  }
  (uid ? s.o.uid : s.o.gid) = static_cast<uid_t>(id);
  return absl::OkStatus();
}

// --hostname, --chdir.
template <std::optional<std::string> Options::*kField>
absl::Status Text(ReadState& s, const std::string&, Values v) {
  s.o.*kField = v[0];
  return absl::OkStatus();
}

absl::Status ClearEnv(ReadState& s, const std::string&, Values) {
  s.o.env.clear();
  return absl::OkStatus();
}

absl::Status SetEnvOption(ReadState& s, const std::string&, Values v) {
  if (v[0].empty() || v[0].find('=') != std::string::npos) return Die("setenv failed: Invalid argument");
  SetEnv(&s.o.env, v[0], v[1]);
  return absl::OkStatus();
}

absl::Status UnsetEnvOption(ReadState& s, const std::string&, Values v) {
  UnsetEnv(&s.o.env, v[0]);
  return absl::OkStatus();
}

absl::Status LockFile(ReadState& s, const std::string&, Values v) {
  s.o.lock_files.push_back(v[0]);
  return absl::OkStatus();
}

// --sync-fd, --block-fd, --userns-block-fd, --info-fd, --json-status-fd.
// bwrap closes --block-fd, --info-fd and --json-status-fd before the
// command and leaves --userns-block-fd open; --sync-fd is the command's
// only with --as-pid-1 (decided once the argv is read).
template <std::optional<int> BwrapInvocation::*kSlot, FdFate kFate>
absl::Status StatusFd(ReadState& s, const std::string&, Values v) {
  CUBICLE_ASSIGN_OR_RETURN(s.out->*kSlot, OptionFd(s, v[0], kFate));
  return absl::OkStatus();
}

// --bind, --dev-bind, --ro-bind and their -try forms.
absl::Status Bind(ReadState& s, const std::string& option, Values v) {
  CUBICLE_ASSIGN_OR_RETURN(MountOp op, NewOp(MountKind::kBind, v[1], option));
  op.source = v[0];
  op.readonly = absl::StartsWith(option, "--ro-");
  op.devices = absl::StartsWith(option, "--dev-");
  op.optional = absl::EndsWith(option, "-try");
  return AddOp(s, std::move(op));
}

// --bind-fd, --ro-bind-fd. The fd is kept open until the launch resolves
// the path it names.
absl::Status BindFd(ReadState& s, const std::string& option, Values v) {
  CUBICLE_ASSIGN_OR_RETURN(int fd, OptionFd(s, v[0]));
  CUBICLE_ASSIGN_OR_RETURN(MountOp op, NewOp(MountKind::kBind, v[1], option));
  op.source = absl::StrCat("/proc/self/fd/", fd);
  op.readonly = option == "--ro-bind-fd";
  return AddOp(s, std::move(op));
}

// --remount-ro, --proc, --dev, --mqueue: a destination and nothing else.
template <MountKind kKind>
absl::Status MountAt(ReadState& s, const std::string& option, Values v) {
  return AddOp(s, NewOp(kKind, v[0], option));
}

absl::Status Tmpfs(ReadState& s, const std::string& option, Values v) {
  CUBICLE_ASSIGN_OR_RETURN(MountOp op, NewOp(MountKind::kTmpfs, v[0], option));
  op.size_bytes = TakeSize(s).value_or(0);
  op.mode = TakePerms(s).value_or(0755);
  op.parent_mode = BwrapParentMode(op.mode);
  return AddOp(s, std::move(op));
}

absl::Status Dir(ReadState& s, const std::string& option, Values v) {
  CUBICLE_ASSIGN_OR_RETURN(MountOp op, NewOp(MountKind::kDir, v[0], option));
  op.mode = TakePerms(s).value_or(0755);
  op.parent_mode = BwrapParentMode(op.mode);
  return AddOp(s, std::move(op));
}

// --file, --bind-data, --ro-bind-data: the fd's contents, read once the
// argv is accepted (ReadSetupFds).
absl::Status Data(ReadState& s, const std::string& option, Values v) {
  const bool file = option == "--file";
  CUBICLE_ASSIGN_OR_RETURN(int fd, OptionFd(s, v[0]));
  CUBICLE_ASSIGN_OR_RETURN(MountOp op, NewOp(file ? MountKind::kFile : MountKind::kBindData, v[1], option));
  op.readonly = option == "--ro-bind-data";
  op.mode = TakePerms(s).value_or(file ? 0666 : 0600);
  op.parent_mode = BwrapParentMode(op.mode);
  s.o.pending_data.push_back({s.o.mounts.size(), fd, absl::StrCat("Can't write data to file ", v[1])});
  return AddOp(s, std::move(op));
}

absl::Status Symlink(ReadState& s, const std::string& option, Values v) {
  CUBICLE_ASSIGN_OR_RETURN(MountOp op, NewOp(MountKind::kSymlink, v[1], option));
  op.source = v[0];
  return AddOp(s, std::move(op));
}

// Creates nothing, so its missing parents keep MountOp's default mode.
absl::Status Chmod(ReadState& s, const std::string& option, Values v) {
  std::optional<uint32_t> mode = ParseOctal(v[0]);
  if (!mode.has_value()) return Die("--chmod takes an octal argument <= 07777");
  MountOp op;
  op.kind = MountKind::kChmod;
  op.mode = *mode;
  CUBICLE_ASSIGN_OR_RETURN(op.dest, SandboxPath(v[1], option));
  op.bwrap_style = true;
  return AddOp(s, std::move(op));
}

absl::Status Perms(ReadState& s, const std::string&, Values v) {
  if (s.o.next_perms.has_value()) return Die("--perms given twice for the same action");
  std::optional<uint32_t> mode = ParseOctal(v[0]);
  if (!mode.has_value()) return Die("--perms takes an octal argument <= 07777");
  s.o.next_perms = mode;
  return absl::OkStatus();
}

absl::Status Size(ReadState& s, const std::string&, Values v) {
  if (s.o.next_size.has_value()) return Die("--size given twice for the same action");
  // bwrap: strtoull base 0 (so 0x and 0 prefixes count), a leading digit,
  // nothing after the number, not zero.
  const std::string& text = v[0];
  errno = 0;
  char* end = nullptr;
  unsigned long long bytes = std::strtoull(text.c_str(), &end, 0);
  if (errno != 0 || text.empty() || text[0] < '0' || text[0] > '9' || *end != '\0' || bytes == 0) {
    return Die("--size takes a non-zero number of bytes");
  }
  constexpr uint64_t kMaxTmpfsBytes = SIZE_MAX >> 1;
  if (bytes > kMaxTmpfsBytes) return Die(absl::StrCat("--size (for tmpfs) is limited to ", kMaxTmpfsBytes));
  s.o.next_size = bytes;
  return absl::OkStatus();
}

absl::Status OverlaySrc(ReadState& s, const std::string&, Values v) {
  s.o.overlay_sources.push_back(v[0]);
  return absl::OkStatus();
}

// --overlay RWSRC WORKDIR DEST, --tmp-overlay DEST, --ro-overlay DEST: the
// pending --overlay-src list is theirs.
absl::Status Overlay(ReadState& s, const std::string& option, Values v) {
  const size_t min_sources = option == "--ro-overlay" ? 2 : 1;
  if (s.o.overlay_sources.size() < min_sources) {
    return Die(absl::StrCat(option, " requires at least ", min_sources == 2 ? "two" : "one", " --overlay-src"));
  }
  CUBICLE_ASSIGN_OR_RETURN(MountOp op, NewOp(MountKind::kOverlay, v.back(), option));
  op.lower = std::exchange(s.o.overlay_sources, {});
  if (option == "--overlay") {
    op.upper = v[0];
    op.work = v[1];
  }
  op.readonly = option == "--ro-overlay";
  return AddOp(s, std::move(op));
}

// --exec-label, --file-label. As bwrap, checked at once: is SELinux here,
// and does its policy know the context?
absl::Status Label(ReadState& s, const std::string& option, Values v) {
  if (!s.host.check_selinux_label) return Die("labeling not supported on this system");
  if (absl::Status valid = s.host.check_selinux_label(v[0]); !valid.ok()) {
    return Die(absl::StrCat("invalid label ", valid.message()));
  }
  (option == "--exec-label" ? s.o.exec_label : s.o.file_label) = v[0];
  return absl::OkStatus();
}

// A compiled BPF program's size, as bwrap checks it when it reads one.
absl::Status CheckSeccompData(const std::string& program) {
  if (program.size() % sizeof(struct sock_filter) != 0) return Die("Invalid seccomp data, must be multiple of 8");
  return absl::OkStatus();
}

// --add-seccomp-fd: a compiled BPF program, read now, as bwrap does.
// --seccomp: only the last one counts, and bwrap reads it last of all
// (ReadSetupFds); the fds of earlier ones are left to the command.
absl::Status Seccomp(ReadState& s, const std::string& option, Values v) {
  const bool add = option == "--add-seccomp-fd";
  CUBICLE_ASSIGN_OR_RETURN(int fd, add ? OptionFd(s, v[0]) : ParseFd(v[0]));
  if (add && s.o.seccomp_given) return Die("--add-seccomp-fd cannot be combined with --seccomp");
  if (!add && s.o.add_seccomp_given) return Die("--seccomp cannot be combined with --add-seccomp-fd");
  (add ? s.o.add_seccomp_given : s.o.seccomp_given) = true;
  if (!add) {
    s.o.seccomp_fd = fd;
    return absl::OkStatus();
  }
  CUBICLE_ASSIGN_OR_RETURN(std::string program, ReadFd(s, fd, "Can't read seccomp data"));
  CUBICLE_RETURN_IF_ERROR(CheckSeccompData(program));
  s.out->consumed_fds.push_back(fd);
  s.o.seccomp_programs.push_back(std::move(program));
  return absl::OkStatus();
}

// --cap-add, --cap-drop: a name, a number or ALL.
absl::Status Cap(ReadState& s, const std::string& option, Values v) {
  const std::string& name = v[0];
  const bool add = option == "--cap-add";
  s.o.caps_used = true;
  if (absl::EqualsIgnoreCase(name, "ALL")) {
    s.o.caps = add ? ~uint64_t{0} : 0;
    return absl::OkStatus();
  }
  std::optional<int> cap = ParseCap(name);
  if (!cap.has_value()) return Die(absl::StrCat("unknown cap: ", name));
  if (add) {
    s.o.caps |= uint64_t{1} << *cap;
  } else {
    s.o.caps &= ~(uint64_t{1} << *cap);
  }
  return absl::OkStatus();
}

using O = Options;
using I = BwrapInvocation;

// Every option bwrap 0.11 knows.
constexpr OptionEntry kOptions[] = {
    {"--help", kNoValue, Help},
    {"--version", kNoValue, Version},
    {"--args", kAnArgument, Args, kNotInArgsFile},
    {"--argv0", kOneArgument, Argv0},
    {"--level-prefix", kNoValue, LevelPrefix},
    {"--unshare-all", kNoValue, UnshareAll},
    {"--unshare-user", kNoValue, Switch<&O::unshare_user, true>},
    {"--unshare-user-try", kNoValue, Switch<&O::unshare_user_try, true>},
    {"--unshare-ipc", kNoValue, Switch<&O::unshare_ipc, true>},
    {"--unshare-pid", kNoValue, Switch<&O::unshare_pid, true>},
    {"--unshare-net", kNoValue, Switch<&O::unshare_net, true>},
    {"--unshare-uts", kNoValue, Switch<&O::unshare_uts, true>},
    {"--unshare-cgroup", kNoValue, Switch<&O::unshare_cgroup, true>},
    {"--unshare-cgroup-try", kNoValue, Switch<&O::unshare_cgroup_try, true>},
    {"--share-net", kNoValue, Switch<&O::unshare_net, false>},
    {"--disable-userns", kNoValue, Switch<&O::disable_userns, true>},
    {"--assert-userns-disabled", kNoValue, Switch<&O::assert_userns_disabled, true>},
    {"--userns", kAnArgument, NamespaceFd<&O::userns_fd>, kWarnIfRepeated},
    {"--userns2", kAnArgument, NamespaceFd<&O::userns2_fd>, kWarnIfRepeated},
    {"--pidns", kAnArgument, NamespaceFd<&O::pidns_fd>, kWarnIfRepeated},
    {"--uid", kAnArgument, Id, kWarnIfRepeated},
    {"--gid", kAnArgument, Id, kWarnIfRepeated},
    {"--hostname", kAnArgument, Text<&O::hostname>, kWarnIfRepeated},
    {"--chdir", kOneArgument, Text<&O::chdir>, kWarnIfRepeated},
    {"--clearenv", kNoValue, ClearEnv},
    {"--setenv", kTwoArguments, SetEnvOption},
    {"--unsetenv", kAnArgument, UnsetEnvOption},
    {"--lock-file", kAnArgument, LockFile},
    {"--sync-fd", kAnArgument, StatusFd<&I::sync_fd, FdFate::kPassedOn>, kWarnIfRepeated},
    {"--block-fd", kAnArgument, StatusFd<&I::block_fd, FdFate::kClosed>, kWarnIfRepeated},
    {"--userns-block-fd", kAnArgument, StatusFd<&I::userns_block_fd, FdFate::kPassedOn>, kWarnIfRepeated},
    {"--info-fd", kAnArgument, StatusFd<&I::info_fd, FdFate::kClosed>, kWarnIfRepeated},
    {"--json-status-fd", kAnArgument, StatusFd<&I::json_status_fd, FdFate::kClosed>, kWarnIfRepeated},
    {"--bind", kTwoArguments, Bind},
    {"--bind-try", kTwoArguments, Bind},
    {"--dev-bind", kTwoArguments, Bind},
    {"--dev-bind-try", kTwoArguments, Bind},
    {"--ro-bind", kTwoArguments, Bind},
    {"--ro-bind-try", kTwoArguments, Bind},
    {"--bind-fd", kTwoArguments, BindFd},
    {"--ro-bind-fd", kTwoArguments, BindFd, 0, "--bind-fd"},  // bwrap's wording for both
    {"--remount-ro", kOneArgument, MountAt<MountKind::kRemountRo>},
    {"--overlay-src", kAnArgument, OverlaySrc, kTakesOverlaySrc},
    {"--overlay", kThreeArguments, Overlay, kTakesOverlaySrc},
    {"--tmp-overlay", kAnArgument, Overlay, kTakesOverlaySrc},
    {"--ro-overlay", kAnArgument, Overlay, kTakesOverlaySrc},
    {"--exec-label", kAnArgument, Label, kWarnIfRepeated},
    {"--file-label", kAnArgument, Label, kWarnIfRepeated},
    {"--proc", kAnArgument, MountAt<MountKind::kProc>},
    {"--dev", kAnArgument, MountAt<MountKind::kDev>},
    {"--tmpfs", kAnArgument, Tmpfs},
    {"--mqueue", kAnArgument, MountAt<MountKind::kMqueue>},
    {"--dir", kAnArgument, Dir},
    {"--file", kTwoArguments, Data},
    {"--bind-data", kTwoArguments, Data},
    {"--ro-bind-data", kTwoArguments, Data},
    {"--symlink", kTwoArguments, Symlink},
    {"--seccomp", kAnArgument, Seccomp, kWarnIfRepeated},
    {"--add-seccomp-fd", kAnArgument, Seccomp},
    {"--new-session", kNoValue, Switch<&O::new_session, true>},
    {"--die-with-parent", kNoValue, Switch<&O::die_with_parent, true>},
    {"--as-pid-1", kNoValue, Switch<&O::as_pid_1, true>},
    {"--cap-add", kAnArgument, Cap},
    {"--cap-drop", kAnArgument, Cap},
    {"--perms", kAnArgument, Perms, kModifier},
    {"--size", kAnArgument, Size, kModifier},
    {"--chmod", kTwoArguments, Chmod},
};

const OptionEntry* FindOption(const std::string& arg) {
  for (const OptionEntry& entry : kOptions) {
    if (arg == entry.name) return &entry;
  }
  return nullptr;
}

// The option at argv[i] and its values.
absl::Status ReadOption(ReadState& s, const OptionEntry& option, const std::vector<std::string>& argv, size_t i,
                        bool in_file) {
  const std::string& arg = argv[i];
  if ((option.flags & kWarnIfRepeated) != 0 && !s.seen.insert(arg).second) {
    s.out->warnings.push_back(absl::StrCat("Only the last ", arg, " option will take effect"));
  }
  if (in_file && (option.flags & kNotInArgsFile) != 0) return Die(absl::StrCat(arg, " not supported in arguments file"));
  if (argv.size() - i < option.arity.count + 1) {
    return Die(absl::StrCat(option.name_in_errors != nullptr ? option.name_in_errors : arg, " takes ",
                            option.arity.words));
  }
  return option.handle(s, arg, Values(argv).subspan(i + 1, option.arity.count));
}

// The first word that is no option. bwrap stops reading an --args file
// there and drops the rest of the file (the command comes from argv); on
// the command line, "--" or the word itself begins the command.
absl::Status ReadCommand(ReadState& s, const std::vector<std::string>& argv, size_t i, bool in_file) {
  const std::string& arg = argv[i];
  const bool dashes = arg == "--";
  const bool option = !arg.empty() && arg[0] == '-';
  if (in_file && (dashes || !option)) return absl::OkStatus();
  if (!dashes && option) return Die(absl::StrCat("Unknown option ", arg));
  s.o.command.assign(argv.begin() + static_cast<long>(i + (dashes ? 1 : 0)), argv.end());
  return absl::OkStatus();
}

// Reads `argv` (the command line, or an --args file when `in_file`) up to
// the command, or to --help/--version.
absl::Status ReadArgv(ReadState& s, const std::vector<std::string>& argv, bool in_file) {
  size_t i = 0;
  while (i < argv.size()) {
    const OptionEntry* option = FindOption(argv[i]);
    if (!s.o.overlay_sources.empty() && (option == nullptr || (option->flags & kTakesOverlaySrc) == 0)) {
      return Die(kOverlaySrcPending);
    }
    if (option == nullptr) return ReadCommand(s, argv, i, in_file);
    CUBICLE_RETURN_IF_ERROR(ReadOption(s, *option, argv, i, in_file));
    if (s.out->action != BwrapInvocation::Action::kRun) return absl::OkStatus();  // --help, even in a file
    if ((option->flags & kModifier) == 0) CUBICLE_RETURN_IF_ERROR(RejectPendingModifier(s.o));
    i += option->arity.count + 1;
  }
  // An --args file may end with --overlay-src: the option after --args
  // must take it.
  if (!s.o.overlay_sources.empty() && !in_file) return Die(kOverlaySrcPending);
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadOptions(const std::vector<std::string>& args, const BwrapHost& host, BwrapInvocation* out,
                         Options* options) {
  if (args.size() > kMaxArgs) return Die(absl::StrCat("Exceeded maximum number of arguments ", kMaxArgs));
  // --cap-add/--cap-drop edit root's own effective set; others start empty.
  options->caps = host.uid == 0 ? host.effective_caps : 0;
  options->env = host.environ;
  UnsetEnv(&options->env, kHostRootEnv);  // cubicle's switch, not the command's (--setenv may still set it)
  ReadState state{host, out, *options, {}, args.size()};
  return ReadArgv(state, args, /*in_file=*/false);
}

absl::Status ReadSetupFds(const BwrapHost& host, BwrapInvocation* out, Options* options) {
  Options& o = *options;
  for (const Options::PendingData& pending : o.pending_data) {
    CUBICLE_ASSIGN_OR_RETURN(o.mounts[pending.op].data, ReadFdOnce(host, o, pending.fd, pending.what));
    out->consumed_fds.push_back(pending.fd);
  }
  if (o.seccomp_fd.has_value()) {
    out->option_fds.push_back(*o.seccomp_fd);
    CUBICLE_ASSIGN_OR_RETURN(std::string program, ReadFdOnce(host, o, *o.seccomp_fd, "Can't read seccomp data"));
    CUBICLE_RETURN_IF_ERROR(CheckSeccompData(program));
    out->consumed_fds.push_back(*o.seccomp_fd);
    o.seccomp_programs.push_back(std::move(program));
  }
  // bwrap hands each program to prctl as it is; the kernel refuses an empty
  // one, or one longer than it takes, with EINVAL, which bwrap words so.
  for (const std::string& program : o.seccomp_programs) {
    if (program.empty() || program.size() / sizeof(struct sock_filter) > BPF_MAXINSNS) return Die(kBwrapSeccompEinval);
  }
  return absl::OkStatus();
}

bool IsOption(const std::string& arg) { return FindOption(arg) != nullptr; }

absl::Status Die(absl::string_view message) { return absl::InvalidArgumentError(message); }

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

std::optional<std::string> GetEnv(const std::vector<std::string>& env, const std::string& name) {
  std::string prefix = name + "=";
  for (const std::string& kv : env) {
    if (absl::StartsWith(kv, prefix)) return kv.substr(prefix.size());
  }
  return std::nullopt;
}

}  // namespace cubicle::cli::bwrap
