// `cubicle run [flags] -- CMD...`: one sandbox from the default spec plus
// flags named as bubblewrap names the same things.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cgroups/limits.h"
#include "cli/accelerators.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "cli/commands.h"
#include "cli/egress_flags.h"
#include "cli/flag_values.h"
#include "cli/forwarded_signals.h"
#include "cli/parent_death.h"
#include "cli/run_via.h"
#include "rpc/results_json.h"
#include "cli/log.h"
#include "runtime/cgroup_host.h"
#include "runtime/defaults.h"
#include "runtime/launcher.h"

namespace cubicle::cli {
namespace {

struct RunFlags {
  // The option group of the mount and environment flags, kept in argv order
  // through its parse_order().
  CLI::App* ordered = nullptr;
  CLI::Option* ro_bind = nullptr;
  CLI::Option* ro_bind_try = nullptr;
  CLI::Option* bind = nullptr;
  CLI::Option* bind_try = nullptr;
  CLI::Option* dev_bind = nullptr;
  CLI::Option* bind_owner = nullptr;     // --bind SRC's host owner shown as the sandbox user
  CLI::Option* ro_bind_owner = nullptr;  // the same, read-only
  CLI::Option* tmpfs = nullptr;
  CLI::Option* size = nullptr;
  CLI::Option* dir = nullptr;
  CLI::Option* symlink = nullptr;
  CLI::Option* remount_ro = nullptr;
  CLI::Option* setenv = nullptr;
  CLI::Option* unsetenv = nullptr;

  std::string chdir;
  std::string hostname = "cubicle";
  std::string uid, gid, host_uid, host_gid;
  std::string workspace;
  std::string tmp_size;
  std::string timeout;
  std::string seccomp = "no-network";
  CLI::Option* seccomp_flag = nullptr;
  std::string memory, memory_high, pids, cpus, cpu_weight;
  std::string breaker_cpu, breaker_cpu_window, breaker_cpu_grace, breaker_memory, breaker_memory_grace,
      breaker_io, breaker_io_window;
  CLI::Option* io_read_bps = nullptr;
  CLI::Option* io_write_bps = nullptr;
  CLI::Option* io_read_iops = nullptr;
  CLI::Option* io_write_iops = nullptr;
  std::string json_status;
  CLI::Option* rlimit = nullptr;
  AcceleratorFlags accelerators;  // --npu, --gpu, --npu-root
  CLI::Option* npu = nullptr;
  CLI::Option* gpu = nullptr;
  EgressFlags egress;
  std::vector<std::string> command;
  // --via: a running daemon serves the command instead (cli/run_via.h).
  CLI::App* app = nullptr;
  std::string via;
  std::string profile;
};

// Applies the ordered flags (mounts and env) to `spec`.
absl::Status ApplyOrderedFlags(const RunFlags& f, runtime::SandboxSpec* spec) {
  std::map<const CLI::Option*, size_t> cursor;
  auto next = [&](const CLI::Option* opt) -> const std::string& {
    return opt->results()[cursor[opt]++];
  };
  uint64_t pending_size = 0;  // from --size, for the next --tmpfs (0: none)
  // parse_order() lists an option once per value: act once per occurrence,
  // on its last value.
  std::map<const CLI::Option*, int> seen;
  for (const CLI::Option* opt : f.ordered->parse_order()) {
    if (++seen[opt] % std::max(1, opt->get_type_size_max()) != 0) continue;
    rootfs::MountOp op;
    bool is_mount = true;
    if (opt == f.ro_bind || opt == f.ro_bind_try || opt == f.bind || opt == f.bind_try ||
        opt == f.dev_bind || opt == f.bind_owner || opt == f.ro_bind_owner) {
      op.kind = rootfs::MountKind::kBind;
      op.source = next(opt);
      op.dest = next(opt);
      op.readonly = opt == f.ro_bind || opt == f.ro_bind_try || opt == f.ro_bind_owner;
      op.optional = opt == f.ro_bind_try || opt == f.bind_try;
      op.devices = opt == f.dev_bind;
      op.idmap_owner = opt == f.bind_owner || opt == f.ro_bind_owner;
      // Host sources resolve as the host sees them; relative ones against our cwd.
      if (!op.source.empty() && op.source.front() != '/') {
        char cwd[4096];
        if (::getcwd(cwd, sizeof(cwd)) != nullptr) op.source = absl::StrCat(cwd, "/", op.source);
      }
    } else if (opt == f.tmpfs) {
      op.kind = rootfs::MountKind::kTmpfs;
      op.dest = next(opt);
      op.size_bytes = pending_size;
      pending_size = 0;
    } else if (opt == f.size) {
      CUBICLE_ASSIGN_OR_RETURN(pending_size, ParseSize("--size", next(opt)));
      if (pending_size == 0) return absl::InvalidArgumentError("--size '0': must be positive");
      continue;
    } else if (opt == f.dir) {
      op.kind = rootfs::MountKind::kDir;
      op.dest = next(opt);
    } else if (opt == f.symlink) {
      op.kind = rootfs::MountKind::kSymlink;
      op.source = next(opt);
      op.dest = next(opt);
    } else if (opt == f.remount_ro) {
      op.kind = rootfs::MountKind::kRemountRo;
      op.dest = next(opt);
    } else if (opt == f.setenv) {
      const std::string& name = next(opt);
      const std::string& value = next(opt);
      if (name.empty() || name.find('=') != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("--setenv '", name, "': not a variable name"));
      }
      std::erase_if(spec->env, [&](const std::string& kv) { return kv.rfind(name + "=", 0) == 0; });
      spec->env.push_back(absl::StrCat(name, "=", value));
      is_mount = false;
    } else if (opt == f.unsetenv) {
      const std::string& name = next(opt);
      std::erase_if(spec->env, [&](const std::string& kv) { return kv.rfind(name + "=", 0) == 0; });
      is_mount = false;
    } else {
      continue;
    }
    if (!is_mount) continue;
    std::string flag = opt->get_name();
    CUBICLE_ASSIGN_OR_RETURN(op.dest, rootfs::NormalizeSandboxPath(op.dest, flag));
    spec->mounts.push_back(std::move(op));
  }
  if (pending_size != 0) {
    return absl::InvalidArgumentError("--size must come before the --tmpfs it applies to");
  }
  return absl::OkStatus();
}

// The cgroup flags. Defaults come from DefaultSpec; "unlimited" lifts one.
absl::Status ApplyLimitFlags(const RunFlags& f, cgroups::Limits* limits) {
  if (!f.memory.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(limits->memory_max, ParseLimitSize("--memory", f.memory));
  }
  if (!f.memory_high.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(limits->memory_high, ParseLimitSize("--memory-high", f.memory_high));
  }
  if (!f.pids.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(limits->pids_max, ParseLimitCount("--pids", f.pids));
  }
  if (!f.cpus.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(limits->cpus, ParseCpus("--cpus", f.cpus));
  }
  if (!f.cpu_weight.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(std::optional<uint64_t> weight, ParseLimitCount("--cpu-weight", f.cpu_weight));
    if (!weight.has_value() || *weight > cgroups::kMaxCpuWeight) {
      return absl::InvalidArgumentError(absl::StrCat("--cpu-weight '", f.cpu_weight, "': expected 1 to 10000"));
    }
    limits->cpu_weight = static_cast<uint32_t>(*weight);
  }
  struct IoFlag {
    const CLI::Option* opt;
    const char* name;
    std::optional<uint64_t> cgroups::IoLimit::*field;
  };
  const IoFlag io_flags[] = {{f.io_read_bps, "--io-read-bps", &cgroups::IoLimit::read_bps},
                             {f.io_write_bps, "--io-write-bps", &cgroups::IoLimit::write_bps},
                             {f.io_read_iops, "--io-read-iops", &cgroups::IoLimit::read_iops},
                             {f.io_write_iops, "--io-write-iops", &cgroups::IoLimit::write_iops}};
  for (const IoFlag& io : io_flags) {
    for (const std::string& value : io.opt->results()) {
      CUBICLE_ASSIGN_OR_RETURN(DeviceValue dv, ParseDeviceValue(io.name, value));
      auto it = std::find_if(limits->io.begin(), limits->io.end(), [&](const cgroups::IoLimit& l) {
        return l.major == dv.major && l.minor == dv.minor;
      });
      if (it == limits->io.end()) {
        limits->io.push_back(cgroups::IoLimit{.major = dv.major, .minor = dv.minor});
        it = limits->io.end() - 1;
      }
      (*it).*io.field = dv.value;
    }
  }
  // Name the flags, not the fields, in what ValidateLimits says.
  if (absl::Status st = cgroups::ValidateLimits(*limits, nullptr); !st.ok()) {
    std::string msg(st.message());
    for (auto [field, flag] : {std::pair{"memory_max", "--memory"}, {"memory_high", "--memory-high"},
                               {"pids_max", "--pids"}, {"cpu_weight", "--cpu-weight"},
                               {"cpus", "--cpus"}}) {
      msg = absl::StrReplaceAll(msg, {{field, flag}});
    }
    return absl::InvalidArgumentError(msg);
  }
  return absl::OkStatus();
}

absl::Status ApplyBreakerFlags(const RunFlags& f, runtime::BreakerSpec* b) {
  if (!f.breaker_cpu.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(b->cpu_share, ParseCpus("--breaker-cpu", f.breaker_cpu));
  }
  if (!f.breaker_memory.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(b->memory_mark, ParseSize("--breaker-memory", f.breaker_memory));
  }
  if (!f.breaker_io.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(b->io_bytes_per_sec, ParseSize("--breaker-io", f.breaker_io));
  }
  for (auto [flag, value, field] :
       {std::tuple{"--breaker-cpu-window", &f.breaker_cpu_window, &b->cpu_window},
        {"--breaker-cpu-grace", &f.breaker_cpu_grace, &b->cpu_grace},
        {"--breaker-memory-grace", &f.breaker_memory_grace, &b->memory_grace},
        {"--breaker-io-window", &f.breaker_io_window, &b->io_window}}) {
    if (!value->empty()) {
      CUBICLE_ASSIGN_OR_RETURN(*field, ParseSeconds(flag, *value));
    }
  }
  if (b->memory_mark == 0u || b->io_bytes_per_sec == 0u) {
    return absl::InvalidArgumentError("--breaker-memory and --breaker-io must be positive");
  }
  return absl::OkStatus();
}

absl::StatusOr<runtime::SandboxSpec> BuildSpec(const RunFlags& f) {
  runtime::DefaultsOptions defaults;
  defaults.hostname = f.hostname;
  if (!f.uid.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(defaults.uid, ParseId("--uid", f.uid));
  }
  if (!f.gid.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(defaults.gid, ParseId("--gid", f.gid));
  }
  if (!f.tmp_size.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(defaults.tmp_size, ParseSize("--tmp-size", f.tmp_size));
  }
  if (!f.workspace.empty()) defaults.workspace = f.workspace;
  CUBICLE_ASSIGN_OR_RETURN(runtime::SandboxSpec spec, runtime::DefaultSpec(defaults));
  if (!f.host_uid.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(spec.host_uid, ParseId("--host-uid", f.host_uid));
  }
  if (!f.host_gid.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(spec.host_gid, ParseId("--host-gid", f.host_gid));
  }
  if (!f.timeout.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(spec.timeout, ParseSeconds("--timeout", f.timeout));
  }
  absl::StatusOr<seccomp::Policy> policy = seccomp::ParsePolicy(f.seccomp);
  if (!policy.ok()) return absl::InvalidArgumentError(absl::StrCat("--seccomp: ", policy.status().message()));
  spec.seccomp = *policy;
  CUBICLE_RETURN_IF_ERROR(ApplyEgressFlags(f.egress, f.seccomp_flag->count() > 0, &spec));
  // The defaults need the cgroup layout (discovery and the stale-group
  // sweep): skip that when both defaulted limits are given explicitly.
  if (f.memory.empty() || f.pids.empty()) spec.limits = runtime::DefaultLimits();
  CUBICLE_RETURN_IF_ERROR(ApplyLimitFlags(f, &spec.limits));
  CUBICLE_RETURN_IF_ERROR(ApplyBreakerFlags(f, &spec.breakers));
  for (const std::string& r : f.rlimit->results()) {
    CUBICLE_ASSIGN_OR_RETURN(runtime::RlimitSpec limit, ParseRlimit("--rlimit", r));
    std::erase_if(spec.rlimits, [&](const runtime::RlimitSpec& x) { return x.resource == limit.resource; });
    spec.rlimits.push_back(limit);
  }
  CUBICLE_RETURN_IF_ERROR(ApplyOrderedFlags(f, &spec));
  if (!f.chdir.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(spec.cwd, rootfs::NormalizeSandboxPath(f.chdir, "--chdir"));
  }
  spec.argv = f.command;
  return spec;
}

absl::Status WriteJsonStatus(const std::string& path, const runtime::ExecResult& result,
                             const boost::json::object& accelerators) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return ErrnoStatus(errno, absl::StrCat("--json-status: open(", path, ")"));
  boost::json::object json = rpc::ResultToJson(result);
  if (!accelerators.empty()) json["accelerators"] = accelerators;  // host -> sandbox chip ids
  std::string text = boost::json::serialize(json) + "\n";
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = ::write(fd.get(), text.data() + off, text.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat("--json-status: write(", path, ")"));
    }
    off += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// The options given on the command line, by their long names, in `app`
// and its option groups.
void GivenOptions(const CLI::App* app, std::vector<std::string>* out) {
  for (const CLI::Option* o : app->get_options()) {
    if (o->count() > 0 && !o->get_lnames().empty()) out->push_back("--" + o->get_lnames().front());
  }
  for (const CLI::App* group : app->get_subcommands([](const CLI::App*) { return true; })) {
    GivenOptions(group, out);
  }
}

// --via: what sandbox.run can carry goes to the daemon; any other flag
// would be silently dropped there, so it is refused here.
int RunThroughDaemon(const RunFlags& f) {
  static const char* const kCarried[] = {"--via", "--profile", "--setenv", "--chdir", "--timeout", "--workspace",
                                         "--json-status", "--memory", "--memory-high", "--pids", "--cpus",
                                         "--cpu-weight"};
  std::vector<std::string> given;
  GivenOptions(f.app, &given);
  for (const std::string& name : given) {
    if (std::find(std::begin(kCarried), std::end(kCarried), name) == std::end(kCarried)) {
      std::fprintf(stderr, "cubicle run: %s cannot go with --via: the daemon's profile decides it (docs/cli.md)\n",
                   name.c_str());
      return kExitUsage;
    }
  }
  ViaFlags via;
  via.socket = f.via;
  if (!f.profile.empty()) via.profile = f.profile;
  via.command = f.command;
  const std::vector<std::string> env = f.setenv->results();
  for (size_t i = 0; i + 1 < env.size(); i += 2) via.env.emplace_back(env[i], env[i + 1]);
  via.chdir = f.chdir;
  via.timeout = f.timeout;
  via.workspace = f.workspace;
  via.json_status = f.json_status;
  via.memory = f.memory;
  via.memory_high = f.memory_high;
  via.pids = f.pids;
  via.cpus = f.cpus;
  via.cpu_weight = f.cpu_weight;
  return RunVia(via);
}

int Run(const RunFlags& f) {
  if (!f.via.empty()) return RunThroughDaemon(f);
  if (!f.profile.empty()) {
    std::fprintf(stderr, "cubicle run: --profile names a daemon's profile: it needs --via\n");
    return kExitUsage;
  }
  // Everything wrong with the input is a usage error (2), found before
  // anything is created; 125 is kept for what fails while setting up.
  absl::StatusOr<runtime::SandboxSpec> spec = BuildSpec(f);
  if (spec.ok()) {
    if (absl::Status st = runtime::ValidateSpec(*spec); !st.ok()) spec = st;
  }
  AcceleratorFlags accelerator_flags = f.accelerators;
  accelerator_flags.npu_given = f.npu->count() > 0;
  accelerator_flags.gpu_given = f.gpu->count() > 0;
  absl::StatusOr<AcceleratorPlan> accelerators = ParseAcceleratorFlags(accelerator_flags);
  if (spec.ok() && !accelerators.ok()) spec = accelerators.status();
  if (!spec.ok()) {
    std::fprintf(stderr, "cubicle run: %s\n", std::string(spec.status().message()).c_str());
    return kExitUsage;
  }
  // The launcher dies with its parent (the spec's default, as bwrap's
  // --die-with-parent): an orchestrator SIGKILLed takes the sandbox with it.
  if (spec->die_with_parent) {
    if (absl::Status st = DieWithParent(); !st.ok()) {
      std::fprintf(stderr, "cubicle run: %s\n", std::string(st.message()).c_str());
      return kExitSetupFailed;
    }
  }
  absl::StatusOr<runtime::ExecResult> result;
  absl::StatusOr<std::vector<npu::Passthrough>> attached;
  // What the run leaves standing once the payload's exit is known: the
  // exit below waits for the sandbox's processes, not its teardown.
  std::optional<runtime::SandboxRemains> remains;
  {
    // Termination signals go to the sandbox instead of ending cubicle.
    ForwardedSignals signals;
    // The chips named, and only those, are probed in this very spec before
    // the payload may run; any that cannot be used fails the run.
    attached = AttachAccelerators(*accelerators, &*spec);
    if (!attached.ok()) {
      std::fprintf(stderr, "cubicle run: %s\n", std::string(attached.status().message()).c_str());
      return kExitSetupFailed;
    }
    runtime::LaunchOptions options;
    options.signal_fd = signals.fd();
    options.read_stats = !f.json_status.empty();  // nothing else prints them
    options.remains = &remains;
    result = runtime::Launch(*spec, options);
  }
  if (!result.ok()) {
    std::fprintf(stderr, "cubicle run: %s\n", std::string(result.status().message()).c_str());
    return kExitSetupFailed;
  }
  for (const std::string& w : result->warnings) LogWarning(w);
  if (result->reason == runtime::ExitReason::kSetupFailed) {
    std::fprintf(stderr, "cubicle run: setup failed: %s\n",
                 std::string(result->setup_error.message()).c_str());
  } else if (result->reason == runtime::ExitReason::kTimeout) {
    std::fprintf(stderr, "cubicle run: timed out after %s; every process of the sandbox was killed\n",
                 absl::FormatDuration(spec->timeout).c_str());
  }
  if (!f.json_status.empty()) {
    if (absl::Status st = WriteJsonStatus(f.json_status, *result, MappingJson(*attached)); !st.ok()) {
      std::fprintf(stderr, "cubicle run: %s\n", std::string(st.message()).c_str());
      return kExitSetupFailed;
    }
  }
  if (remains.has_value()) runtime::ExitAfterSandbox(*std::move(remains), result->ShellStatus());
  return result->ShellStatus();
}

CLI::Option* Pair(CLI::App* app, const char* name, const char* type, const char* help) {
  return app->add_option(name)
      ->description(help)
      ->type_size(2)
      ->type_name(type)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

CLI::Option* Single(CLI::App* app, const char* name, const char* type, const char* help) {
  return app->add_option(name)
      ->description(help)
      ->type_size(1)
      ->type_name(type)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

}  // namespace

std::function<int()> AddRunCommand(CLI::App& root) {
  auto flags = std::make_shared<RunFlags>();
  RunFlags& f = *flags;
  CLI::App* app = root.add_subcommand("run", "Run a command in a fresh sandbox");
  f.app = app;
  CLI::App* fs = app->add_option_group("Mounts and environment", "Applied in the order given");
  f.ordered = fs;
  f.ro_bind = Pair(fs, "--ro-bind", "SRC DEST", "Bind host SRC read-only at DEST");
  f.ro_bind_try = Pair(fs, "--ro-bind-try", "SRC DEST", "As --ro-bind; skipped if SRC is missing");
  f.bind = Pair(fs, "--bind", "SRC DEST", "Bind host SRC read-write at DEST");
  f.bind_try = Pair(fs, "--bind-try", "SRC DEST", "As --bind; skipped if SRC is missing");
  f.dev_bind = Pair(fs, "--dev-bind", "SRC DEST", "As --bind, device nodes usable");
  f.bind_owner = Pair(fs, "--bind-owner", "SRC DEST", "As --bind; SRC's host owner shows as the sandbox user");
  f.ro_bind_owner =
      Pair(fs, "--ro-bind-owner", "SRC DEST", "As --ro-bind; SRC's host owner shows as the sandbox user");
  f.tmpfs = Single(fs, "--tmpfs", "DEST", "Mount a new tmpfs at DEST");
  f.size = Single(fs, "--size", "BYTES", "Size of the next --tmpfs (64K, 256M, ...)");
  f.dir = Single(fs, "--dir", "DEST", "Create a directory");
  f.symlink = Pair(fs, "--symlink", "TARGET DEST", "Create a symlink at DEST pointing to TARGET");
  f.remount_ro = Single(fs, "--remount-ro", "DEST", "Make the mount at DEST read-only");
  f.setenv = Pair(fs, "--setenv", "VAR VALUE", "Set an environment variable");
  f.unsetenv = Single(fs, "--unsetenv", "VAR", "Unset an environment variable");
  CLI::App* sb = app->add_option_group("Sandbox");
  sb->add_option("--chdir", f.chdir, "Working directory (default: /workspace with --workspace, else /)");
  sb->add_option("--hostname", f.hostname, "Hostname inside the sandbox");
  sb->add_option("--uid", f.uid, "User id inside the sandbox (default 1000)");
  sb->add_option("--gid", f.gid, "Group id inside the sandbox (default 1000)");
  sb->add_option("--host-uid", f.host_uid,
                  "Host uid the sandbox uid maps to (root only; default 1000000+uid)");
  sb->add_option("--host-gid", f.host_gid, "Host gid the sandbox gid maps to (root only)");
  sb->add_option("--workspace", f.workspace, "Host directory bound read-write at /workspace");
  sb->add_option("--tmp-size", f.tmp_size, "Size cap of /tmp (default 64M)");
  sb->add_option("--timeout", f.timeout, "Wall-clock limit in seconds; kills every process");
  f.seccomp_flag = sb->add_option("--seccomp", f.seccomp, "Seccomp policy: no-network (default), default, strict, none");
  sb->add_option("--json-status", f.json_status, "Write the result as JSON to FILE (/dev/fd/N works)");
  CLI::App* lim = app->add_option_group("Limits");
  lim->add_option("--memory", f.memory, "Memory limit (cgroup; swap held at 0), e.g. 256M, or unlimited");
  lim->add_option("--memory-high", f.memory_high, "Memory high mark: reclaim/throttle above it");
  lim->add_option("--pids", f.pids, "Most processes and threads at once, or unlimited");
  lim->add_option("--cpus", f.cpus, "CPU time per wall second, e.g. 0.5");
  lim->add_option("--cpu-weight", f.cpu_weight, "CPU weight 1-10000 (100 is the default share)");
  CLI::App* brk = app->add_option_group("Breakers");
  brk->add_option("--breaker-cpu", f.breaker_cpu, "Breaker: above this many CPUs over the window, SIGUSR1, then SIGKILL after the grace");
  brk->add_option("--breaker-cpu-window", f.breaker_cpu_window, "Seconds the CPU breaker averages over (default 5)");
  brk->add_option("--breaker-cpu-grace", f.breaker_cpu_grace, "Seconds between SIGUSR1 and SIGKILL (default 5)");
  brk->add_option("--breaker-memory", f.breaker_memory, "Breaker: above this memory, SIGTERM, then SIGKILL after the grace");
  brk->add_option("--breaker-memory-grace", f.breaker_memory_grace, "Seconds between SIGTERM and SIGKILL (default 5)");
  brk->add_option("--breaker-io", f.breaker_io, "Breaker: block IO above this many bytes/s over the window kills");
  brk->add_option("--breaker-io-window", f.breaker_io_window, "Seconds the IO breaker averages over (default 2)");
  f.io_read_bps = Single(lim, "--io-read-bps", "MAJ:MIN=RATE", "Read bytes/s cap on a block device");
  f.io_write_bps = Single(lim, "--io-write-bps", "MAJ:MIN=RATE", "Write bytes/s cap on a block device");
  f.io_read_iops = Single(lim, "--io-read-iops", "MAJ:MIN=N", "Read operations/s cap on a block device");
  f.io_write_iops = Single(lim, "--io-write-iops", "MAJ:MIN=N", "Write operations/s cap on a block device");
  // One value per occurrence: a vector option would take `--` as the end of
  // its values and leave the command's own dash arguments to the parser.
  f.rlimit = Single(lim, "--rlimit", "NAME=SOFT[:HARD]", "e.g. nofile=256 (repeatable)");
  CLI::App* acc = app->add_option_group("Accelerators");
  f.npu = acc->add_option("--npu", f.accelerators.npu, "Ascend NPUs by host logic id, e.g. 6,4: each is probed, then shown as /dev/davinci0.. in ascending host id");
  f.gpu = acc->add_option("--gpu", f.accelerators.gpu, "NVIDIA GPUs by host index, e.g. 0,1: probed, then /dev/nvidia0..");
  acc->add_option("--npu-root", f.accelerators.npu_root, "Directory that stands for / when looking for accelerator nodes, tools and driver files");
  AddEgressFlags(app->add_option_group("Network"), &f.egress);
  CLI::App* daemon = app->add_option_group("Daemon");
  daemon->add_option("--via", f.via,
                     "Run it through the `cubicle serve` daemon on this Unix socket, in a sandbox of its profile "
                     "(pooled); only --setenv, --chdir, --timeout, --workspace, --json-status and the limits go with it")
      ->envname("CUBICLE_VIA");
  daemon->add_option("--profile", f.profile, "With --via: the daemon's profile (default shell)");
  app->add_option("command", f.command, "The command and its arguments")->required();
  return [flags] { return Run(*flags); };
}

}  // namespace cubicle::cli
