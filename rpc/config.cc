#include "rpc/config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <utility>

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/json_reader.h"
#include "base/status.h"
#include "npu/host_layout.h"
#include "rpc/profile_config.h"
#include "runtime/cgroup_host.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

using json_read::Error;
using json_read::Object;

constexpr size_t kMaxConfigBytes = 16 << 20;
constexpr size_t kMaxSocketPath = 107;  // sun_path, less its NUL
const auto kMillis = json_read::MillisIn(1, json_read::kYearMs);

absl::Status ParseSocket(const json::value& v, DaemonConfig* config) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, "socket", {"path", "mode"}));
  CUBICLE_RETURN_IF_ERROR(o.Read("path", &config->socket_path, json_read::String));
  if (o.Find("path") != nullptr) {
    const std::string& p = config->socket_path;
    if (p.empty() || p.front() != '/') {
      return Error(o.PathOf("path"), absl::StrCat("'", p, "' must be an absolute path"));
    }
    if (p.size() > kMaxSocketPath) {
      return Error(o.PathOf("path"), absl::StrCat("'", p, "' is longer than the ", kMaxSocketPath,
                                                  " bytes a Unix socket address holds"));
    }
  }
  return o.Read("mode", &config->socket_mode,
                [](const json::value& m, absl::string_view path) { return json_read::Mode(m, path, 0777); });
}

absl::Status ParseConcurrency(const json::value& v, DaemonConfig* config) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, "concurrency", {"max_concurrent", "max_queue"}));
  CUBICLE_RETURN_IF_ERROR(o.ReadCount("max_concurrent", &config->max_concurrent, 1, 4096));
  return o.ReadCount("max_queue", &config->max_queue, 0, 1 << 20);
}

absl::Status ParseConnections(const json::value& v, DaemonConfig* config) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, "connections",
                                                  {"on_disconnect", "line_timeout_ms", "idle_timeout_ms"}));
  if (const json::value* policy = o.Find("on_disconnect")) {
    CUBICLE_ASSIGN_OR_RETURN(std::string name, json_read::String(*policy, o.PathOf("on_disconnect")));
    if (name == "cancel") {
      config->on_disconnect = OnDisconnect::kCancel;
    } else if (name == "finish") {
      config->on_disconnect = OnDisconnect::kFinish;
    } else {
      return Error(o.PathOf("on_disconnect"), absl::StrCat("'", name, "' is not a policy (expected cancel or finish)"));
    }
  }
  CUBICLE_RETURN_IF_ERROR(o.Read("line_timeout_ms", &config->line_timeout, kMillis));
  return o.Read("idle_timeout_ms", &config->idle_timeout, kMillis);
}

absl::Status ParseShutdown(const json::value& v, DaemonConfig* config) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, "shutdown", {"drain_timeout_ms"}));
  return o.Read("drain_timeout_ms", &config->drain_timeout, json_read::MillisIn(0, json_read::kYearMs));
}

absl::Status ParseLog(const json::value& v, LogSettings* log) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, "log", {"level", "destination"}));
  CUBICLE_RETURN_IF_ERROR(o.Read("level", &log->level, json_read::String));
  CUBICLE_RETURN_IF_ERROR(o.Read("destination", &log->destination, json_read::String));
  static constexpr absl::string_view kLevels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  if (o.Find("level") != nullptr && std::find(std::begin(kLevels), std::end(kLevels), log->level) == std::end(kLevels)) {
    return Error(o.PathOf("level"), absl::StrCat("'", log->level,
                                                 "' is not a level (trace, debug, info, warn, error, critical, off)"));
  }
  if (log->destination != "stderr" && (log->destination.empty() || log->destination[0] != '/')) {
    return Error(o.PathOf("destination"),
                 absl::StrCat("'", log->destination, "': expected \"stderr\" or an absolute file path"));
  }
  return absl::OkStatus();
}

absl::Status ParseCeilings(const json::value& v, DaemonConfig* config) {
  CUBICLE_ASSIGN_OR_RETURN(
      Object o, Object::Open(v, "ceilings", {"memory", "pids", "cpus", "timeout_ms", "output_bytes"}));
  cgroups::Limits& c = config->ceiling;
  CUBICLE_RETURN_IF_ERROR(o.Read("memory", &c.memory_max, SizeOrUnlimited));
  CUBICLE_RETURN_IF_ERROR(o.Read("pids", &c.pids_max, PidsOrUnlimited));
  CUBICLE_RETURN_IF_ERROR(o.Read("cpus", &c.cpus, json_read::PositiveNumber));
  CUBICLE_RETURN_IF_ERROR(o.Read("timeout_ms", &config->max_timeout, kMillis));
  CUBICLE_RETURN_IF_ERROR(o.Read("output_bytes", &config->max_output_bytes, json_read::PositiveSize));
  // A ceiling is a bound, not an allocation: more CPUs than this host has
  // is allowed (profiles filled from it get at most the host's).
  absl::Status valid = cgroups::ValidateLimits(c, nullptr, UINT_MAX);
  if (!valid.ok()) return Error("ceilings", valid.message());
  return absl::OkStatus();
}

// Each must be an existing absolute directory; kept as its real path.
absl::Status ResolveWorkspaceRoots(std::vector<std::string>* roots) {
  for (size_t i = 0; i < roots->size(); ++i) {
    std::string& root_dir = (*roots)[i];
    char real[PATH_MAX];
    if (root_dir.empty() || root_dir[0] != '/' || ::realpath(root_dir.c_str(), real) == nullptr) {
      return Error(json_read::Element("workspace_roots", i),
                   absl::StrCat("'", root_dir, "' is not an existing absolute directory"));
    }
    root_dir = real;
  }
  return absl::OkStatus();
}

// "skills.auto_limits": {"window", "min_samples", "headroom", "floor",
// "time_floor_ms"} (rpc/skill_stats.h).
absl::Status ParseAutoLimits(const json::value& v, const std::string& path, DaemonConfig* config) {
  AutoLimitsConfig& out = config->auto_limits;
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, path, {"window", "min_samples", "headroom", "floor", "time_floor_ms"}));
  CUBICLE_RETURN_IF_ERROR(o.ReadCount("window", &out.window, 1, 10000));
  CUBICLE_RETURN_IF_ERROR(o.ReadCount("min_samples", &out.min_samples, 1, 10000));
  CUBICLE_RETURN_IF_ERROR(o.Read("headroom", &out.headroom, json_read::PositiveNumber));
  CUBICLE_RETURN_IF_ERROR(o.Read("floor", &out.floor, json_read::PositiveSize));
  CUBICLE_RETURN_IF_ERROR(o.Read("time_floor_ms", &out.time_floor, json_read::MillisIn(1, json_read::kYearMs)));
  if (out.headroom < 1.0 || out.headroom > 100.0) return Error(o.PathOf("headroom"), "must be from 1 to 100");
  if (out.min_samples > out.window) return Error(o.PathOf("min_samples"), "exceeds window");
  return absl::OkStatus();
}

// "skills": {"dir": "/srv/cubicle/skills", "tz", "sessions", ...}. The
// directory is read by the daemon (rpc/skill_catalog.h); here it must only
// exist. Without one, only skills by argv are served (their sessions too).
absl::Status ParseSkills(const json::value& v, DaemonConfig* config) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, "skills", {"dir", "tz", "sessions", "max_call_depth", "max_calls",
                                                                "auto_limits"}));
  CUBICLE_RETURN_IF_ERROR(o.Read("dir", &config->skills_dir, json_read::String));
  CUBICLE_RETURN_IF_ERROR(o.Read("tz", &config->skills_tz, json_read::String));
  CUBICLE_RETURN_IF_ERROR(o.ReadCount("max_call_depth", &config->skills_max_call_depth, 0, 16));
  CUBICLE_RETURN_IF_ERROR(o.ReadCount("max_calls", &config->skills_max_calls, 0, 1024));
  if (const json::value* a = o.Find("auto_limits")) {
    CUBICLE_RETURN_IF_ERROR(ParseAutoLimits(*a, o.PathOf("auto_limits"), config));
  }
  if (const json::value* s = o.Find("sessions")) {
    DaemonConfig::SkillSessionsConfig& out = config->skill_sessions;
    CUBICLE_ASSIGN_OR_RETURN(Object so, Object::Open(*s, o.PathOf("sessions"),
                                                     {"max_sessions", "idle_timeout_ms", "max_idle_timeout_ms",
                                                      "max_lifetime_ms"}));
    const auto millis = json_read::MillisIn(1000, json_read::kYearMs);
    CUBICLE_RETURN_IF_ERROR(so.ReadCount("max_sessions", &out.max_sessions, 0, 4096));
    CUBICLE_RETURN_IF_ERROR(so.Read("idle_timeout_ms", &out.idle_timeout, millis));
    CUBICLE_RETURN_IF_ERROR(so.Read("max_idle_timeout_ms", &out.max_idle_timeout, millis));
    CUBICLE_RETURN_IF_ERROR(so.Read("max_lifetime_ms", &out.max_lifetime, millis));
    if (so.Find("idle_timeout_ms") == nullptr) out.idle_timeout = std::min(out.idle_timeout, out.max_idle_timeout);
    if (out.idle_timeout > out.max_idle_timeout) {
      return Error(so.PathOf("idle_timeout_ms"), "exceeds max_idle_timeout_ms");
    }
  }
  // A zone name ("Europe/Paris", "UTC", "Etc/GMT+2"): never a path (":/x"
  // or "/x") that would have the C library read a file the operator did
  // not mean.
  const std::string& tz = config->skills_tz;
  const bool zone = !tz.empty() && tz.size() <= 64 && tz[0] != '/' && tz[0] != ':' &&
                    tz.find("..") == std::string::npos &&
                    std::all_of(tz.begin(), tz.end(), [](char c) {
                      return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '/' || c == '_' || c == '+' ||
                             c == '-';
                    });
  if (!zone) return Error(o.PathOf("tz"), absl::StrCat("'", tz, "' is not a time zone name (e.g. \"Europe/Paris\")"));
  struct stat st;
  const std::string& dir = config->skills_dir;
  if (o.Find("dir") == nullptr) return absl::OkStatus();  // sessions of skills by argv only
  if (dir.empty() || dir[0] != '/' || ::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Error(o.PathOf("dir"), absl::StrCat("'", dir, "' is not an existing absolute directory"));
  }
  return absl::OkStatus();
}

// "environments": {"dir": "/srv/cubicle/environments"}. Read by the daemon
// (rpc/environment_catalog.h); here it must only exist.
absl::Status ParseEnvironments(const json::value& v, DaemonConfig* config) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, "environments", {"dir"}));
  if (o.Find("dir") == nullptr) return Error("environments", "dir is required");
  CUBICLE_RETURN_IF_ERROR(o.Read("dir", &config->environments_dir, json_read::String));
  struct stat st;
  const std::string& dir = config->environments_dir;
  if (dir.empty() || dir[0] != '/' || ::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Error(o.PathOf("dir"), absl::StrCat("'", dir, "' is not an existing absolute directory"));
  }
  return absl::OkStatus();
}

// Sessions run in one profile: the one named, else "python" where there is
// one (sessions are mostly code interpreters), else the first by name.
absl::Status ResolveSessionProfile(DaemonConfig* config) {
  std::string& name = config->sessions.default_profile;
  if (!name.empty()) {
    if (config->profiles.count(name) == 0) return Error("sessions.profile", absl::StrCat("no profile named '", name, "'"));
    return absl::OkStatus();
  }
  name = config->profiles.count("python") ? "python" : config->profiles.begin()->first;
  return absl::OkStatus();
}

absl::Status ParseBrokerJob(const std::string& id, const json::value& v, const std::string& path, npu::BrokerJob* job) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, path, {"argv", "env", "timeout_ms", "output_bytes"}));
  job->id = id;
  if (o.Find("argv") == nullptr) return Error(path, "argv is required");
  CUBICLE_RETURN_IF_ERROR(o.Read("argv", &job->argv, json_read::StringArray));
  if (const json::value* env = o.Find("env")) CUBICLE_RETURN_IF_ERROR(ParseEnv(*env, o.PathOf("env"), &job->env));
  CUBICLE_RETURN_IF_ERROR(o.Read("timeout_ms", &job->timeout, kMillis));
  CUBICLE_RETURN_IF_ERROR(o.Read("output_bytes", &job->output_budget, json_read::PositiveSize));
  return absl::OkStatus();
}

// "npu": {"root": "/", "cache_window_ms": 30000,
//         "broker": {"enabled": false, "jobs": {"ID": {"argv": [...], ...}}}}
absl::Status ParseNpu(const json::value& v, NpuConfig* npu_config) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, "npu", {"root", "cache_window_ms", "broker"}));
  CUBICLE_RETURN_IF_ERROR(o.Read("root", &npu_config->root, json_read::String));
  if (absl::StatusOr<npu::HostLayout> host = npu::HostLayout::Open(npu_config->root); !host.ok()) {
    return Error(o.PathOf("root"), host.status().message());
  }
  CUBICLE_RETURN_IF_ERROR(o.Read("cache_window_ms", &npu_config->cache_window, kMillis));
  if (const json::value* broker = o.Find("broker")) {
    CUBICLE_ASSIGN_OR_RETURN(Object b, Object::Open(*broker, o.PathOf("broker"), {"enabled", "jobs"}));
    CUBICLE_RETURN_IF_ERROR(b.Read("enabled", &npu_config->broker.enabled, json_read::Bool));
    if (const json::value* jobs = b.Find("jobs")) {
      if (!jobs->is_object()) return json_read::WrongType(*jobs, b.PathOf("jobs"), "an object of ID: job");
      for (const json::key_value_pair& kv : jobs->get_object()) {
        npu::BrokerJob job;
        std::string id(kv.key().data(), kv.key().size());
        CUBICLE_RETURN_IF_ERROR(ParseBrokerJob(id, kv.value(), json_read::Member(b.PathOf("jobs"), id), &job));
        npu_config->broker.jobs.push_back(std::move(job));
      }
    }
    absl::Status valid = npu::ValidateBrokerConfig(npu_config->broker);
    if (!valid.ok()) return Error(o.PathOf("broker"), valid.message());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DaemonConfig> ParseConfig(absl::string_view json_text) {
  // Boost.JSON throws on allocation failure and on a few misuses; none may
  // cross this API.
  try {
    CUBICLE_ASSIGN_OR_RETURN(json::value root, json_read::ParseDocument(json_text, /*comments=*/true));
    CUBICLE_ASSIGN_OR_RETURN(Object top, Object::Open(root, "", {"socket", "concurrency", "connections", "shutdown",
                                                                 "ceilings", "profiles", "workspace_roots", "sessions",
                                                                 "npu", "mcp", "log", "skills",
                                                                 "environments"}));
    DaemonConfig config;
    // Unset, the memory and pids ceilings are the built-in defaults: no
    // sandbox runs without such limits unless the file says "unlimited".
    config.ceiling = runtime::HostDefaultLimits();
    if (const json::value* v = top.Find("socket")) CUBICLE_RETURN_IF_ERROR(ParseSocket(*v, &config));
    if (const json::value* v = top.Find("concurrency")) CUBICLE_RETURN_IF_ERROR(ParseConcurrency(*v, &config));
    if (const json::value* v = top.Find("connections")) CUBICLE_RETURN_IF_ERROR(ParseConnections(*v, &config));
    if (const json::value* v = top.Find("shutdown")) CUBICLE_RETURN_IF_ERROR(ParseShutdown(*v, &config));
    if (const json::value* v = top.Find("ceilings")) CUBICLE_RETURN_IF_ERROR(ParseCeilings(*v, &config));
    if (const json::value* v = top.Find("log")) CUBICLE_RETURN_IF_ERROR(ParseLog(*v, &config.log));
    CUBICLE_RETURN_IF_ERROR(top.Read("workspace_roots", &config.workspace_roots, json_read::StringArray));
    CUBICLE_RETURN_IF_ERROR(ResolveWorkspaceRoots(&config.workspace_roots));
    if (const json::value* v = top.Find("sessions")) CUBICLE_RETURN_IF_ERROR(ParseSessionsConfig(*v, &config.sessions));
    if (const json::value* v = top.Find("npu")) CUBICLE_RETURN_IF_ERROR(ParseNpu(*v, &config.npu));
    if (const json::value* v = top.Find("skills")) CUBICLE_RETURN_IF_ERROR(ParseSkills(*v, &config));
    if (const json::value* v = top.Find("environments")) CUBICLE_RETURN_IF_ERROR(ParseEnvironments(*v, &config));
    const json::value* profiles = top.Find("profiles");
    if (profiles == nullptr) return Error("profiles", "missing: at least one profile is needed");
    CUBICLE_RETURN_IF_ERROR(ParseProfiles(*profiles, &config));
    CUBICLE_RETURN_IF_ERROR(ResolveSessionProfile(&config));
    if (const json::value* v = top.Find("mcp")) CUBICLE_RETURN_IF_ERROR(ParseMcpConfig(*v, &config.mcp));
    if (!config.mcp.profile.empty() && config.profiles.count(config.mcp.profile) == 0) {
      return Error("mcp.profile", absl::StrCat("no profile named '", config.mcp.profile, "'"));
    }
    config.source = std::string(json_text);
    return config;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("reading the configuration: ", e.what()));
  }
}

runtime::ZygoteRecipe ZygoteRecipeOf(const DaemonConfig& config, const Profile& profile) {
  runtime::ZygoteRecipe recipe{profile.spec, profile.pool.zygote};
  // A workspace is attached at hand-off (a detached mount moved in by
  // init): the zygotes need /workspace as a mountpoint. Root only.
  recipe.options.accept_workspace =
      (!config.workspace_roots.empty() || config.sessions.enabled()) && ::geteuid() == 0;
  return recipe;
}

absl::Status SetStateDir(DaemonConfig* config, const std::string& dir) {
  try {
    CUBICLE_ASSIGN_OR_RETURN(json::value root, json_read::ParseDocument(config->source, /*comments=*/true));
    json::object& top = root.as_object();
    json::value& sessions = top["sessions"];
    if (!sessions.is_object()) sessions = json::object();
    sessions.as_object()["state_dir"] = dir;
    CUBICLE_ASSIGN_OR_RETURN(DaemonConfig reparsed, ParseConfig(json::serialize(root)));
    reparsed.fork_server = config->fork_server;
    *config = std::move(reparsed);
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("setting the state directory: ", e.what()));
  }
}

absl::StatusOr<DaemonConfig> LoadConfig(const std::string& path) {
  std::string step = absl::StrCat("config ", path);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, step);
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return ErrnoStatus(err, step);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxConfigBytes) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat(step, ": larger than ", kMaxConfigBytes, " bytes"));
    }
  }
  ::close(fd);
  absl::StatusOr<DaemonConfig> config = ParseConfig(text);
  if (!config.ok()) {
    return absl::Status(config.status().code(), absl::StrCat(step, ": ", config.status().message()));
  }
  return config;
}

absl::StatusOr<cgroups::Limits> ParseRequestLimits(const json::value& v, absl::string_view path,
                                                   std::vector<std::string>* unlimited) {
  try {
    cgroups::Limits limits;
    CUBICLE_RETURN_IF_ERROR(ParseLimits(v, path, cgroups::Limits{}, &limits, unlimited));
    return limits;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(path, ": ", e.what()));
  }
}

absl::StatusOr<cgroups::Limits> TightenLimits(const cgroups::Limits& profile, const cgroups::Limits& requested,
                                              const std::vector<std::string>& unlimited) {
  std::vector<std::string> problems;
  for (const std::string& key : unlimited) {
    const std::optional<uint64_t>& have = key == "memory"        ? profile.memory_max
                                          : key == "memory_high" ? profile.memory_high
                                                                 : profile.pids_max;
    if (!have.has_value()) continue;
    problems.push_back(absl::StrCat(key, ": ", kUnlimited, " exceeds the profile's ",
                                    key == "pids" ? absl::StrCat(*have) : cgroups::DescribeBytes(*have)));
  }
  cgroups::Limits out = profile;
  auto tighten = [&](absl::string_view field, const auto& have, const auto& want, auto* result, auto describe) {
    if (!want.has_value()) return;
    if (have.has_value() && *want > *have) {
      problems.push_back(absl::StrCat(field, ": ", describe(*want), " exceeds the profile's ", describe(*have)));
      return;
    }
    *result = want;  // at most the profile's, or the profile sets none
  };
  auto bytes = [](uint64_t b) { return cgroups::DescribeBytes(b); };
  auto plain = [](auto n) { return absl::StrCat(n); };
  tighten("memory", profile.memory_max, requested.memory_max, &out.memory_max, bytes);
  tighten("memory_high", profile.memory_high, requested.memory_high, &out.memory_high, bytes);
  tighten("pids", profile.pids_max, requested.pids_max, &out.pids_max, plain);
  tighten("cpus", profile.cpus, requested.cpus, &out.cpus, plain);
  tighten("cpu_weight", profile.cpu_weight, requested.cpu_weight, &out.cpu_weight, plain);
  for (const cgroups::IoLimit& want : requested.io) {
    auto have = std::find_if(out.io.begin(), out.io.end(), [&](const cgroups::IoLimit& io) {
      return io.major == want.major && io.minor == want.minor;
    });
    if (have == out.io.end()) {
      out.io.push_back(want);
      continue;
    }
    std::string device = absl::StrCat("io ", want.major, ":", want.minor, " ");
    cgroups::IoLimit cap = *have;  // the profile's, before this device is tightened
    tighten(device + "rbps", cap.read_bps, want.read_bps, &have->read_bps, plain);
    tighten(device + "wbps", cap.write_bps, want.write_bps, &have->write_bps, plain);
    tighten(device + "riops", cap.read_iops, want.read_iops, &have->read_iops, plain);
    tighten(device + "wiops", cap.write_iops, want.write_iops, &have->write_iops, plain);
  }
  if (!problems.empty()) return absl::InvalidArgumentError(absl::StrJoin(problems, "; "));
  // A lower memory_max makes the profile's high mark meaningless above it.
  if (out.memory_high && out.memory_max && *out.memory_high > *out.memory_max) out.memory_high = out.memory_max;
  CUBICLE_RETURN_IF_ERROR(cgroups::ValidateLimits(out, nullptr));
  return out;
}

}  // namespace cubicle::rpc
