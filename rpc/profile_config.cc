#include "rpc/profile_config.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <optional>
#include <utility>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/json_reader.h"
#include "base/status.h"
#include "base/units.h"
#include "egress/policy_json.h"
#include "npu/passthrough.h"
#include "rootfs/mount_plan.h"
#include "rootfs/plan_paths.h"
#include "runtime/defaults.h"
#include "seccomp/policy.h"
#include "skills/static_policy.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

using json_read::Element;
using json_read::Error;
using json_read::ForEachElement;
using json_read::Member;
using json_read::Object;

constexpr uint64_t kMaxId = 4294967294u;  // (uid_t)-1 means "no change" to the kernel
const auto kMillis = json_read::MillisIn(1, json_read::kYearMs);

bool IsUnlimited(const json::value& v) { return v.is_string() && v.get_string() == kUnlimited; }

unsigned HostCpus() {
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<unsigned>(n) : 1;
}

absl::StatusOr<rlim_t> RlimValue(const json::value& v, absl::string_view path) {
  if (v.is_string() && v.get_string() == "unlimited") return RLIM_INFINITY;
  if (v.is_string()) return json_read::WrongType(v, path, "a whole number or \"unlimited\"");
  CUBICLE_ASSIGN_OR_RETURN(uint64_t n, json_read::Count(v, path, 0, RLIM_INFINITY - 1));
  return static_cast<rlim_t>(n);
}

// {"nofile": 1024, "core": 0, "stack": {"soft": 8388608, "hard": "unlimited"}}:
// each replaces the default's entry for that resource, or is added.
absl::Status ParseRlimits(const json::value& v, absl::string_view path, runtime::SandboxSpec* spec) {
  if (!v.is_object()) return json_read::WrongType(v, path, "an object");
  for (const json::key_value_pair& kv : v.get_object()) {
    const absl::string_view name(kv.key().data(), kv.key().size());
    std::string at = Member(path, name);
    std::optional<int> known = RlimitByName(name);
    if (!known.has_value()) {
      return Error(at, "unknown resource (expected one of: as, core, cpu, data, fsize, locks, memlock, msgqueue, "
                       "nice, nofile, nproc, rss, rtprio, rttime, sigpending, stack)");
    }
    runtime::RlimitSpec limit{.resource = *known};
    if (kv.value().is_object()) {
      CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(kv.value(), at, {"soft", "hard"}));
      if (o.Find("soft") == nullptr || o.Find("hard") == nullptr) return Error(at, "needs both soft and hard");
      CUBICLE_RETURN_IF_ERROR(o.Read("soft", &limit.soft, RlimValue));
      CUBICLE_RETURN_IF_ERROR(o.Read("hard", &limit.hard, RlimValue));
      if (limit.soft > limit.hard) return Error(at, "the soft limit exceeds the hard limit");
    } else {
      CUBICLE_ASSIGN_OR_RETURN(limit.soft, RlimValue(kv.value(), at));
      limit.hard = limit.soft;
    }
    auto same = std::find_if(spec->rlimits.begin(), spec->rlimits.end(),
                             [&](const runtime::RlimitSpec& r) { return r.resource == limit.resource; });
    if (same != spec->rlimits.end()) {
      *same = limit;
    } else {
      spec->rlimits.push_back(limit);
    }
  }
  return absl::OkStatus();
}

// A mount's "dest": an absolute sandbox path that is not the root itself.
absl::StatusOr<std::string> MountDest(const Object& o, const std::string& dest) {
  absl::StatusOr<std::string> normal = rootfs::NormalizeSandboxPath(dest, o.PathOf("dest"));
  if (normal.ok() && *normal == "/") {
    return Error(o.PathOf("dest"), "'/' is the sandbox root, which cannot be replaced");
  }
  return normal;
}

absl::Status ParseBind(const json::value& v, const std::string& path, rootfs::MountPlan* plan) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, path, {"source", "dest", "readonly", "optional", "owner"}));
  rootfs::MountOp op;
  op.kind = rootfs::MountKind::kBind;
  op.readonly = true;
  if (o.Find("source") == nullptr) return Error(path, "a bind needs a source");
  CUBICLE_RETURN_IF_ERROR(o.Read("source", &op.source, json_read::String));
  if (op.source.empty() || op.source.front() != '/') {
    return Error(o.PathOf("source"), absl::StrCat("'", op.source, "' must be an absolute host path"));
  }
  std::string dest = op.source;  // like bwrap's --ro-bind SRC SRC, the usual case
  CUBICLE_RETURN_IF_ERROR(o.Read("dest", &dest, json_read::String));
  CUBICLE_ASSIGN_OR_RETURN(op.dest, MountDest(o, dest));
  CUBICLE_RETURN_IF_ERROR(o.Read("readonly", &op.readonly, json_read::Bool));
  CUBICLE_RETURN_IF_ERROR(o.Read("optional", &op.optional, json_read::Bool));
  // A string, not a bool: it names whose the files look to be, and a
  // third answer (a named host user) would fit without a new key.
  std::string owner = "host";
  CUBICLE_RETURN_IF_ERROR(o.Read("owner", &owner, json_read::String));
  if (owner == "sandbox") {
    op.idmap_owner = true;
  } else if (owner != "host") {
    return Error(o.PathOf("owner"), absl::StrCat("'", owner, "': expected \"host\" (files keep their host owners) "
                                                 "or \"sandbox\" (the source's owner shows as the sandbox user)"));
  }
  struct stat st;
  if (!op.optional && ::stat(op.source.c_str(), &st) != 0) {
    // A config error, whatever the errno: InvalidArgument like every other.
    return absl::InvalidArgumentError(
        ErrnoStatus(errno, absl::StrCat(o.PathOf("source"), ": ", op.source)).message());
  }
  plan->push_back(std::move(op));
  return absl::OkStatus();
}

absl::Status ParseTmpfs(const json::value& v, const std::string& path, rootfs::MountPlan* plan) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, path, {"dest", "size", "mode"}));
  rootfs::MountOp op;
  op.kind = rootfs::MountKind::kTmpfs;
  op.size_bytes = runtime::kDefaultTmpSize;
  op.mode = 01777;  // like /tmp: the sandbox user must be able to write it
  if (o.Find("dest") == nullptr) return Error(path, "a tmpfs needs a dest");
  std::string dest;
  CUBICLE_RETURN_IF_ERROR(o.Read("dest", &dest, json_read::String));
  CUBICLE_ASSIGN_OR_RETURN(op.dest, MountDest(o, dest));
  CUBICLE_RETURN_IF_ERROR(o.Read("size", &op.size_bytes, json_read::PositiveSize));
  CUBICLE_RETURN_IF_ERROR(o.Read("mode", &op.mode, [](const json::value& m, absl::string_view p) {
    return json_read::Mode(m, p, 07777);
  }));
  plan->push_back(std::move(op));
  return absl::OkStatus();
}

// Checks each profile limit against its ceiling under the config's own names;
// cgroups::ValidateLimits then checks the rest (floors, host CPUs, high <= max).
absl::Status CheckAgainstCeiling(const Object& o, const cgroups::Limits& l, const cgroups::Limits& c) {
  auto bytes = [&](absl::string_view key, const std::optional<uint64_t>& v) -> absl::Status {
    if (v && c.memory_max && *v > *c.memory_max) {
      return Error(o.PathOf(key), absl::StrCat(cgroups::DescribeBytes(*v), " exceeds the ceiling ",
                                               cgroups::DescribeBytes(*c.memory_max), " (ceilings.memory)"));
    }
    return absl::OkStatus();
  };
  CUBICLE_RETURN_IF_ERROR(bytes("memory", l.memory_max));
  CUBICLE_RETURN_IF_ERROR(bytes("memory_high", l.memory_high));
  if (l.pids_max && c.pids_max && *l.pids_max > *c.pids_max) {
    return Error(o.PathOf("pids"),
                 absl::StrCat(*l.pids_max, " exceeds the ceiling ", *c.pids_max, " (ceilings.pids)"));
  }
  if (l.cpus && c.cpus && *l.cpus > *c.cpus) {
    return Error(o.PathOf("cpus"), absl::StrCat(*l.cpus, " exceeds the ceiling ", *c.cpus, " (ceilings.cpus)"));
  }
  return absl::OkStatus();
}

absl::Status ParsePool(const json::value& v, absl::string_view path, runtime::PoolConfig* pool) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, std::string(path),
                                                  {"min_idle", "max_idle", "max_total", "refill_parallelism",
                                                   "max_age_s"}));
  CUBICLE_RETURN_IF_ERROR(o.ReadCount("min_idle", &pool->min_idle, 0, 1 << 16));
  CUBICLE_RETURN_IF_ERROR(o.ReadCount("max_idle", &pool->max_idle, 0, 1 << 16));
  CUBICLE_RETURN_IF_ERROR(o.ReadCount("max_total", &pool->max_total, 1, 1 << 16));
  CUBICLE_RETURN_IF_ERROR(o.ReadCount("refill_parallelism", &pool->refill_parallelism, 1, 64));
  std::optional<double> age;
  CUBICLE_RETURN_IF_ERROR(o.Read("max_age_s", &age, json_read::PositiveNumber));
  if (age) pool->max_age = absl::Seconds(*age);
  absl::Status valid = runtime::ValidatePoolConfig(*pool);
  if (!valid.ok()) {
    absl::string_view message = valid.message();
    absl::ConsumePrefix(&message, "pool ");  // the path already says so
    return Error(path, message);
  }
  return absl::OkStatus();
}

absl::Status ParseInterpreter(const json::value& v, absl::string_view path, Interpreter* interpreter) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, std::string(path), {"argv", "preload", "template"}));
  if (o.Find("argv") == nullptr) return Error(path, "an interpreter needs an argv");
  CUBICLE_RETURN_IF_ERROR(o.Read("argv", &interpreter->argv, json_read::StringArray));
  if (interpreter->argv.empty() || interpreter->argv[0].empty()) {
    return Error(o.PathOf("argv"), "must name the interpreter first, e.g. [\"python3\", \"-I\"]");
  }
  CUBICLE_RETURN_IF_ERROR(o.Read("preload", &interpreter->preload, json_read::StringArray));
  CUBICLE_RETURN_IF_ERROR(o.Read("template", &interpreter->from_template, json_read::Bool));
  for (size_t i = 0; i < interpreter->preload.size(); ++i) {
    // The bootstrap imports these by name: a module path, never code.
    if (!runtime::IsPreloadName(*interpreter, interpreter->preload[i])) {
      return Error(Element(o.PathOf("preload"), i),
                   absl::StrCat("'", interpreter->preload[i],
                                runtime::IsRInterpreter(*interpreter) ? "' is not an R package name like jsonlite"
                                                                      : "' is not a module name like json or os.path"));
    }
  }
  absl::Status valid = runtime::ValidateWarmInterpreter(*interpreter);
  if (!valid.ok()) return Error(o.PathOf("argv"), valid.message());
  return absl::OkStatus();
}

bool IsProfileName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  });
}

// ---------------------------------------------------------------------------
// One profile, step by step, in the order its errors are reported.

// hostname, uid, gid and tmp_size shape the default sandbox the rest edits.
absl::Status ReadSandboxDefaults(const Object& o, Profile* profile) {
  runtime::DefaultsOptions defaults;
  CUBICLE_RETURN_IF_ERROR(o.Read("hostname", &defaults.hostname, json_read::String));
  CUBICLE_RETURN_IF_ERROR(o.ReadCount("uid", &defaults.uid, 0, kMaxId));
  CUBICLE_RETURN_IF_ERROR(o.ReadCount("gid", &defaults.gid, 0, kMaxId));
  CUBICLE_RETURN_IF_ERROR(o.Read("tmp_size", &defaults.tmp_size, json_read::PositiveSize));
  absl::StatusOr<runtime::SandboxSpec> spec = runtime::DefaultSpec(defaults);
  if (!spec.ok()) return Error(o.path(), spec.status().message());
  profile->spec = *std::move(spec);
  return absl::OkStatus();
}

absl::Status ReadSeccompAndNetwork(const Object& o, runtime::SandboxSpec* spec) {
  if (const json::value* s = o.Find("seccomp")) {
    CUBICLE_ASSIGN_OR_RETURN(std::string policy, json_read::String(*s, o.PathOf("seccomp")));
    absl::StatusOr<seccomp::Policy> parsed = seccomp::ParsePolicy(policy);
    if (!parsed.ok()) {
      return Error(o.PathOf("seccomp"), absl::StrCat("'", policy, "' is not a seccomp policy "
                                                                  "(expected none, default, no-network or strict)"));
    }
    spec->seccomp = *parsed;
  }
  if (const json::value* network = o.Find("network")) {
    CUBICLE_ASSIGN_OR_RETURN(spec->egress, egress::PolicyFromJson(*network, o.PathOf("network"), {}));
    // The bridge needs AF_INET inside: unless the profile names a seccomp
    // policy, an allowlist gets "default" (ValidateSpec refuses no-network).
    if (spec->egress.mode == egress::NetMode::kAllowlist && o.Find("seccomp") == nullptr) {
      spec->seccomp = seccomp::Policy::kDefault;
    }
  }
  return absl::OkStatus();
}

absl::Status ReadMountsEnvAndRlimits(const Object& o, runtime::SandboxSpec* spec) {
  if (const json::value* binds = o.Find("binds")) {
    CUBICLE_RETURN_IF_ERROR(ForEachElement(*binds, o.PathOf("binds"), [&](const json::value& b, std::string at) {
      return ParseBind(b, at, &spec->mounts);
    }));
  }
  if (const json::value* tmpfs = o.Find("tmpfs")) {
    CUBICLE_RETURN_IF_ERROR(ForEachElement(*tmpfs, o.PathOf("tmpfs"), [&](const json::value& t, std::string at) {
      return ParseTmpfs(t, at, &spec->mounts);
    }));
  }
  if (const json::value* env = o.Find("env")) CUBICLE_RETURN_IF_ERROR(ParseEnv(*env, o.PathOf("env"), &spec->env));
  if (const json::value* rlimits = o.Find("rlimits")) {
    CUBICLE_RETURN_IF_ERROR(ParseRlimits(*rlimits, o.PathOf("rlimits"), spec));
  }
  return absl::OkStatus();
}

// What the profile leaves unset, the ceiling sets: a ceiling is the most
// any sandbox gets, so a sandbox never runs without it. CPUs are held to
// this host's, which a ceiling (a bound, not an allocation) may exceed.
absl::Status ReadLimits(const Object& o, const cgroups::Limits& ceiling, cgroups::Limits* limits) {
  if (const json::value* v = o.Find("limits")) {
    CUBICLE_RETURN_IF_ERROR(ParseLimits(*v, o.PathOf("limits"), ceiling, limits));
  }
  cgroups::Limits fill = ceiling;
  if (fill.cpus && *fill.cpus > HostCpus()) fill.cpus = static_cast<double>(HostCpus());
  cgroups::FillFromCeiling(limits, fill);
  absl::Status valid = cgroups::ValidateLimits(*limits, &ceiling);
  if (!valid.ok()) return Error(o.PathOf("limits"), valid.message());
  return absl::OkStatus();
}

absl::Status ReadBreakers(const Object& o, runtime::SandboxSpec* spec) {
  const json::value* v = o.Find("breakers");
  if (v == nullptr) return absl::OkStatus();
  CUBICLE_RETURN_IF_ERROR(ParseBreakers(*v, o.PathOf("breakers"), &spec->breakers));
  const std::optional<uint64_t>& mark = spec->breakers.memory_mark;
  const std::optional<uint64_t>& memory = spec->limits.memory_max;
  if (mark && memory && *mark >= *memory) {
    return Error(Member(o.PathOf("breakers"), "memory"),
                 absl::StrCat(cgroups::DescribeBytes(*mark), " must be below the memory limit ",
                              cgroups::DescribeBytes(*memory)));
  }
  return absl::OkStatus();
}

absl::Status ReadTimeouts(const Object& o, const DaemonConfig& config, Profile* profile) {
  profile->max_timeout = config.max_timeout;
  CUBICLE_RETURN_IF_ERROR(o.Read("max_timeout_ms", &profile->max_timeout, kMillis));
  if (profile->max_timeout > config.max_timeout) {
    return Error(o.PathOf("max_timeout_ms"),
                 absl::StrCat(absl::ToInt64Milliseconds(profile->max_timeout), " exceeds the ceiling ",
                              absl::ToInt64Milliseconds(config.max_timeout), " (ceilings.timeout_ms)"));
  }
  profile->default_timeout = std::min(absl::Seconds(30), profile->max_timeout);
  CUBICLE_RETURN_IF_ERROR(o.Read("timeout_ms", &profile->default_timeout, kMillis));
  if (profile->default_timeout > profile->max_timeout) {
    return Error(o.PathOf("timeout_ms"), absl::StrCat(absl::ToInt64Milliseconds(profile->default_timeout),
                                                      " exceeds max_timeout_ms ",
                                                      absl::ToInt64Milliseconds(profile->max_timeout)));
  }
  profile->spec.timeout = profile->default_timeout;
  return absl::OkStatus();
}

absl::Status ReadOutputBudget(const Object& o, const DaemonConfig& config, Profile* profile) {
  profile->output_bytes = std::min<uint64_t>(1 << 20, config.max_output_bytes);
  CUBICLE_RETURN_IF_ERROR(o.Read("output_bytes", &profile->output_bytes, json_read::PositiveSize));
  if (profile->output_bytes > config.max_output_bytes) {
    return Error(o.PathOf("output_bytes"),
                 absl::StrCat(cgroups::DescribeBytes(profile->output_bytes), " exceeds the ceiling ",
                              cgroups::DescribeBytes(config.max_output_bytes), " (ceilings.output_bytes)"));
  }
  return absl::OkStatus();
}

absl::Status ReadPoolAndInterpreter(const Object& o, Profile* profile) {
  if (const json::value* pool = o.Find("pool")) {
    CUBICLE_RETURN_IF_ERROR(ParsePool(*pool, o.PathOf("pool"), &profile->pool));
  }
  if (const json::value* interpreter = o.Find("interpreter")) {
    profile->interpreter.emplace();
    CUBICLE_RETURN_IF_ERROR(ParseInterpreter(*interpreter, o.PathOf("interpreter"), &*profile->interpreter));
    // Rscript starts R through bin/R, a shell script: two more execs,
    // which strict refuses (docs/security.md).
    if (runtime::IsRInterpreter(*profile->interpreter) && profile->spec.seccomp == seccomp::Policy::kStrict) {
      return Error(o.PathOf("interpreter"), "R cannot run under the strict seccomp policy: Rscript starts R through "
                                            "a shell script, execs that strict refuses");
    }
    profile->pool.zygote.interpreter = profile->interpreter;
  }
  return absl::OkStatus();
}

absl::Status ReadChips(const Object& o, Profile* profile) {
  for (auto [key, ids] : {std::pair{"npu", &profile->npus}, {"gpu", &profile->gpus}}) {
    const json::value* chips = o.Find(key);
    if (chips == nullptr) continue;
    CUBICLE_ASSIGN_OR_RETURN(std::string text, json_read::String(*chips, o.PathOf(key)));
    absl::StatusOr<std::vector<int>> parsed = npu::ParseChipList(text, o.PathOf(key));
    if (!parsed.ok()) return Error(o.PathOf(key), parsed.status().message());
    *ids = *std::move(parsed);
  }
  if (!profile->npus.empty() || !profile->gpus.empty()) {
    // Its executions run cold, after their probe: keep no zygotes warm.
    profile->pool.min_idle = 0;
    profile->pool.max_idle = 0;
  }
  return absl::OkStatus();
}

// Off unless given; checked by the skills' load (rpc/skill_static_policy.h).
absl::Status ReadStaticPolicy(const Object& o, Profile* profile) {
  const json::value* v = o.Find("static_policy");
  if (v == nullptr) return absl::OkStatus();
  CUBICLE_ASSIGN_OR_RETURN(profile->static_policy, skills::ParseStaticPolicy(*v, o.PathOf("static_policy")));
  return absl::OkStatus();
}

// python_path: absolute sandbox paths, each a folder one of the profile's
// binds shows (nothing else would hold packages before the run).
absl::Status ReadPythonPath(const Object& o, Profile* profile) {
  const json::value* v = o.Find("python_path");
  if (v == nullptr) return absl::OkStatus();
  std::vector<std::string> folders;
  CUBICLE_RETURN_IF_ERROR(o.Read("python_path", &folders, json_read::StringArray));
  if (folders.size() > 64) return Error(o.PathOf("python_path"), "more than 64 folders");
  for (size_t i = 0; i < folders.size(); ++i) {
    const std::string at = Element(o.PathOf("python_path"), i);
    absl::StatusOr<std::string> folder = rootfs::NormalizeSandboxPath(folders[i], at);
    if (!folder.ok()) return folder.status();
    if (folder->find(':') != std::string::npos) {
      return Error(at, absl::StrCat("'", *folder, "' holds ':', which separates sys.path's folders"));
    }
    std::optional<std::string> source = rootfs::HostPathOf(profile->spec.mounts, *folder);
    if (!source.has_value()) {
      return Error(at, absl::StrCat("'", *folder, "' is shown by none of the profile's binds"));
    }
    struct stat st;
    if (::stat(source->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return Error(at, absl::StrCat("'", *folder, "' shows ", *source, " of the host, which is not a directory"));
    }
    if (std::find(profile->python_path.begin(), profile->python_path.end(), *folder) == profile->python_path.end()) {
      profile->python_path.push_back(*folder);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Profile> ParseProfile(const std::string& name, const json::value& v, const DaemonConfig& config) {
  CUBICLE_ASSIGN_OR_RETURN(
      Object o, Object::Open(v, Member("profiles", name),
                             {"hostname", "uid", "gid", "seccomp", "tmp_size", "binds", "tmpfs", "env", "rlimits",
                              "limits", "breakers", "timeout_ms", "max_timeout_ms", "output_bytes", "pool",
                              "interpreter", "npu", "gpu", "network", "static_policy", "python_path"}));
  Profile profile;
  profile.name = name;
  CUBICLE_RETURN_IF_ERROR(ReadSandboxDefaults(o, &profile));
  CUBICLE_RETURN_IF_ERROR(ReadSeccompAndNetwork(o, &profile.spec));
  CUBICLE_RETURN_IF_ERROR(ReadMountsEnvAndRlimits(o, &profile.spec));
  CUBICLE_RETURN_IF_ERROR(ReadLimits(o, config.ceiling, &profile.spec.limits));
  CUBICLE_RETURN_IF_ERROR(ReadBreakers(o, &profile.spec));
  CUBICLE_RETURN_IF_ERROR(ReadTimeouts(o, config, &profile));
  CUBICLE_RETURN_IF_ERROR(ReadOutputBudget(o, config, &profile));
  CUBICLE_RETURN_IF_ERROR(ReadPoolAndInterpreter(o, &profile));
  CUBICLE_RETURN_IF_ERROR(ReadChips(o, &profile));
  CUBICLE_RETURN_IF_ERROR(ReadStaticPolicy(o, &profile));
  CUBICLE_RETURN_IF_ERROR(ReadPythonPath(o, &profile));
  // Everything together, as a launch would see it; argv comes per request.
  runtime::SandboxSpec check = profile.spec;
  check.argv = {"/bin/true"};
  absl::Status valid = runtime::ValidateSpec(check);
  if (!valid.ok()) return Error(o.path(), valid.message());
  return profile;
}

}  // namespace

absl::Status ParseBreakers(const json::value& v, absl::string_view path, runtime::BreakerSpec* b) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, std::string(path),
                                                  {"cpu", "cpu_window_ms", "cpu_grace_ms", "memory",
                                                   "memory_grace_ms", "io", "io_window_ms"}));
  CUBICLE_RETURN_IF_ERROR(o.Read("cpu", &b->cpu_share, json_read::PositiveNumber));
  CUBICLE_RETURN_IF_ERROR(o.Read("cpu_window_ms", &b->cpu_window, kMillis));
  CUBICLE_RETURN_IF_ERROR(o.Read("cpu_grace_ms", &b->cpu_grace, kMillis));
  CUBICLE_RETURN_IF_ERROR(o.Read("memory", &b->memory_mark, json_read::PositiveSize));
  CUBICLE_RETURN_IF_ERROR(o.Read("memory_grace_ms", &b->memory_grace, kMillis));
  CUBICLE_RETURN_IF_ERROR(o.Read("io", &b->io_bytes_per_sec, json_read::PositiveSize));
  return o.Read("io_window_ms", &b->io_window, kMillis);
}


absl::Status ParseEnv(const json::value& v, absl::string_view path, std::vector<std::string>* env) {
  if (!v.is_object()) return json_read::WrongType(v, path, "an object of NAME: value strings");
  for (const json::key_value_pair& kv : v.get_object()) {
    const absl::string_view name(kv.key().data(), kv.key().size());
    std::string at = Member(path, name);
    if (name.empty() || name.find_first_of(absl::string_view("=\0", 2)) != absl::string_view::npos) {
      return Error(at, "an environment name is not empty and has no '=' or NUL");
    }
    CUBICLE_ASSIGN_OR_RETURN(std::string value, json_read::String(kv.value(), at));
    std::string entry = absl::StrCat(name, "=", value);
    auto same = std::find_if(env->begin(), env->end(), [&](const std::string& e) {
      return absl::StartsWith(e, name) && e.size() > name.size() && e[name.size()] == '=';
    });
    if (same != env->end()) {
      *same = std::move(entry);
    } else {
      env->push_back(std::move(entry));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<uint64_t>> SizeOrUnlimited(const json::value& v, absl::string_view path) {
  if (IsUnlimited(v)) return std::optional<uint64_t>();
  absl::StatusOr<uint64_t> size = json_read::PositiveSize(v, path);
  if (!size.ok() && v.is_string()) {
    return Error(path, absl::StrCat(json_read::Describe(v), " is not a size (expected 256M, bytes or \"",
                                    kUnlimited, "\")"));
  }
  if (!size.ok()) return size.status();
  return std::optional<uint64_t>(*size);
}

absl::StatusOr<std::optional<uint64_t>> PidsOrUnlimited(const json::value& v, absl::string_view path) {
  if (IsUnlimited(v)) return std::optional<uint64_t>();
  if (v.is_string()) {
    return json_read::WrongType(v, path, absl::StrCat("a whole number or \"", kUnlimited, "\""));
  }
  CUBICLE_ASSIGN_OR_RETURN(uint64_t n, json_read::Count(v, path, 1, cgroups::kMaxPids));
  return std::optional<uint64_t>(n);
}

absl::Status ParseLimits(const json::value& v, absl::string_view path, const cgroups::Limits& ceiling,
                         cgroups::Limits* limits, std::vector<std::string>* unlimited) {
  CUBICLE_ASSIGN_OR_RETURN(
      Object o, Object::Open(v, std::string(path), {"memory", "memory_high", "pids", "cpus", "cpu_weight"}));
  CUBICLE_RETURN_IF_ERROR(o.Read("memory", &limits->memory_max, SizeOrUnlimited));
  CUBICLE_RETURN_IF_ERROR(o.Read("memory_high", &limits->memory_high, SizeOrUnlimited));
  CUBICLE_RETURN_IF_ERROR(o.Read("pids", &limits->pids_max, PidsOrUnlimited));
  CUBICLE_RETURN_IF_ERROR(o.Read("cpus", &limits->cpus, json_read::PositiveNumber));
  CUBICLE_RETURN_IF_ERROR(o.ReadCount("cpu_weight", &limits->cpu_weight, cgroups::kMinCpuWeight,
                                      cgroups::kMaxCpuWeight));
  // "No limit" is above any ceiling: only a ceiling that says "unlimited"
  // itself allows it. memory_high has no ceiling of its own.
  struct Spelt {
    const char* key;
    std::optional<uint64_t> ceiling;
    std::string ceiling_text;
  };
  const Spelt keys[] = {
      {"memory", ceiling.memory_max,
       ceiling.memory_max ? absl::StrCat(cgroups::DescribeBytes(*ceiling.memory_max), " (ceilings.memory)") : ""},
      {"memory_high", std::nullopt, ""},
      {"pids", ceiling.pids_max, ceiling.pids_max ? absl::StrCat(*ceiling.pids_max, " (ceilings.pids)") : ""}};
  for (const Spelt& k : keys) {
    const json::value* given = o.Find(k.key);
    if (given == nullptr || !IsUnlimited(*given)) continue;
    if (k.ceiling.has_value()) {
      return Error(o.PathOf(k.key), absl::StrCat(kUnlimited, " exceeds the ceiling ", k.ceiling_text));
    }
    if (unlimited != nullptr) unlimited->push_back(k.key);
  }
  return CheckAgainstCeiling(o, *limits, ceiling);
}

absl::Status ParseProfiles(const json::value& v, DaemonConfig* config) {
  if (!v.is_object()) return json_read::WrongType(v, "profiles", "an object of NAME: profile");
  if (v.get_object().empty()) return Error("profiles", "at least one profile is needed");
  for (const json::key_value_pair& kv : v.get_object()) {
    std::string name(kv.key().data(), kv.key().size());
    if (!IsProfileName(name)) {
      return Error(Member("profiles", name), "a profile name is 1 to 64 letters, digits, '-' or '_'");
    }
    CUBICLE_ASSIGN_OR_RETURN(Profile profile, ParseProfile(name, kv.value(), *config));
    config->profiles.emplace(name, std::move(profile));
  }
  return absl::OkStatus();
}

}  // namespace cubicle::rpc
