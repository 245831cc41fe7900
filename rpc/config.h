// The daemon's configuration (DESIGN §5, §6): where it listens, how much it
// runs at once, the ceilings no request may exceed, and its profiles — named
// SandboxSpec templates, each with its pool. Read from a JSON file
// (docs/config.md) or the built-in default; everything is validated here,
// before the daemon makes its first sandbox, and every error names the JSON
// path of the offending value: "profiles.python.limits.memory: '12Q' is not
// a size (expected 256M or bytes)".
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include <boost/json/value.hpp>
#include "cgroups/limits.h"
#include "npu/broker.h"
#include "rpc/in_flight.h"
#include "rpc/mcp_config.h"
#include "rpc/session_config.h"
#include "runtime/fork_server.h"
#include "runtime/pool.h"
#include "runtime/spec.h"
#include "runtime/warm.h"
#include "skills/static_policy.h"

namespace cubicle::rpc {

// A warm interpreter (DESIGN §5, runtime/warm.h): the zygote has exec'd
// `argv` and imported `preload` before any request arrives.
using Interpreter = runtime::WarmInterpreter;

struct Profile {
  std::string name;
  // The sandbox template. argv is empty (it comes with each request);
  // spec.timeout is default_timeout.
  runtime::SandboxSpec spec;
  runtime::PoolConfig pool;
  absl::Duration default_timeout = absl::Seconds(30);  // a request that names none
  absl::Duration max_timeout = absl::Minutes(5);       // the most a request may ask for
  uint64_t output_bytes = 1 << 20;                     // capture budget per stream
  std::optional<Interpreter> interpreter;
  // Accelerator chips every execution of this profile is given (host logic
  // ids, ascending): each is probed before the execution, which then runs
  // on the cold path (a pooled zygote cannot have been probed for it).
  std::vector<int> npus;
  std::vector<int> gpus;
  // What the Python skills that run in this profile may not import, call
  // or reach for, checked when the skills directory is loaded
  // (docs/skills.md, "Static policy"). None: off.
  std::optional<skills::StaticPolicy> static_policy;
  // Folders a python run puts on sys.path (sandbox paths, each shown by
  // one of its binds): `pip install --target` folders its warm interpreter
  // imports from (docs/skills.md, "Environments").
  std::vector<std::string> python_path;
};

// "npu": where the accelerator driver is, how long listings and probes are
// trusted, and the host broker (off unless enabled; see npu/broker.h).
struct NpuConfig {
  std::string root = "/";
  absl::Duration cache_window = absl::Seconds(30);
  npu::BrokerConfig broker;
  bool operator==(const NpuConfig&) const = default;
};

// "log" (docs/config.md): how much the daemon says and where. Applied at
// start and again at every reload (SIGHUP), which also opens the file anew
// for logrotate.
struct LogSettings {
  std::string level;                   // "": warn (CUBICLE_LOG_LEVEL, when set, wins)
  std::string destination = "stderr";  // or an absolute file path, appended to
  bool operator==(const LogSettings&) const = default;
};

// How a skill's memory limit and timeout are sized from its history
// (rpc/skill_stats.h): the last `window` calls of each skill, at least
// `min_samples` samples before the profile's ceiling gives way to P99 of
// them times `headroom`, never below `floor` (memory) or `time_floor`
// (wall time).
struct AutoLimitsConfig {
  size_t window = 100;
  size_t min_samples = 5;
  double headroom = 1.5;
  uint64_t floor = 32ull << 20;
  absl::Duration time_floor = absl::Seconds(1);
  bool operator==(const AutoLimitsConfig&) const = default;
};

struct DaemonConfig {
  std::string socket_path;  // empty: no socket (stdio only)
  uint32_t socket_mode = 0600;
  size_t max_concurrent = 8;  // executions at once
  size_t max_queue = 64;      // executions waiting beyond that; more are "busy"
  // "connections": a socket client's requests when it disconnects before
  // their replies; how long a line may take from its first byte; how long
  // a connection with nothing in flight may stay silent (infinite: ever).
  OnDisconnect on_disconnect = OnDisconnect::kCancel;
  absl::Duration line_timeout = absl::Seconds(30);
  absl::Duration idle_timeout = absl::InfiniteDuration();
  // "shutdown": how long SIGTERM's drain waits before it cancels what runs.
  absl::Duration drain_timeout = absl::Seconds(30);
  // No profile or request goes above these. Memory and pids default to
  // runtime::HostDefaultLimits(); unset here means the file said
  // "unlimited". A profile leaves a limit unset only where the ceiling has
  // none (unset fields are filled from it).
  cgroups::Limits ceiling;
  absl::Duration max_timeout = absl::Minutes(10);
  uint64_t max_output_bytes = 16 << 20;
  std::map<std::string, Profile> profiles;
  // Host directories under which a request's "workspace" may lie (real
  // paths). Empty: requests may not attach a workspace.
  std::vector<std::string> workspace_roots;
  // Sessions and the durable records (rpc/session_config.h).
  SessionsConfig sessions;
  // "skills.dir": the skills directory (docs/skills.md), an absolute path
  // to a directory; empty: none. Read at start and at every reload.
  std::string skills_dir;
  // "skills.tz": TZ of a skill called by name (with the other environment
  // defaults skill authors expect, docs/skills.md).
  std::string skills_tz = "UTC";
  // "skills.sessions" (docs/skills.md, "Skill sessions"): skill processes
  // held open for a conversation.
  struct SkillSessionsConfig {
    size_t max_sessions = 32;
    absl::Duration idle_timeout = absl::Minutes(5);   // a session.open that names none
    absl::Duration max_idle_timeout = absl::Hours(1);  // the most one may ask for
    absl::Duration max_lifetime = absl::Hours(1);      // from its start, whatever the activity
    bool operator==(const SkillSessionsConfig&) const = default;
  } skill_sessions;
  // A skill calling skills (docs/skills.md, "Calling other skills"): how
  // deep a chain may go (the caller called by a client is depth 0), and
  // how many calls one skill execution may make.
  uint32_t skills_max_call_depth = 4;
  uint32_t skills_max_calls = 16;
  // "skills.auto_limits" (docs/skills.md, "Limits from history").
  AutoLimitsConfig auto_limits;
  // "environments.dir": the environments directory (docs/skills.md,
  // "Environments"), an absolute path to a directory; empty: none. Read at
  // start and at every reload.
  std::string environments_dir;
  NpuConfig npu;
  // The MCP server (rpc/mcp_config.h).
  McpConfig mcp;
  LogSettings log;
  // The text this was parsed from: what a fork server is given, so that it
  // parses the same profiles (rpc/fork_server_main.h).
  std::string source;
  // Not from the text: the executable fork servers are started from
  // (runtime/fork_server.h; `cubicle serve` gives its own). Empty: the
  // daemon makes its zygotes itself.
  std::string fork_server;
};

// What the zygotes of `profile` are made from, by the daemon or a fork
// server alike: its spec, and its pool's zygote options as this daemon
// uses them (a workspace root or sessions configured, as root: zygotes
// accept one).
runtime::ZygoteRecipe ZygoteRecipeOf(const DaemonConfig& config, const Profile& profile);

// Parses and validates a whole configuration. Comments (// and /* */) are
// allowed; unknown keys, duplicate keys and values of the wrong type are
// errors. InvalidArgument, naming the JSON path, or line and column for
// text that is not JSON. Reads the host only to check bind sources exist
// and to see which system directories DefaultSpec mirrors.
absl::StatusOr<DaemonConfig> ParseConfig(absl::string_view json_text);

// `config` with its sessions' state directory set to `dir` (`cubicle serve
// --state-dir`), in the parsed value and in its source text alike, so a
// fork server parsing the source makes the same zygotes.
absl::Status SetStateDir(DaemonConfig* config, const std::string& dir);

// Reads `path` and parses it; errors are prefixed with the path, and a file
// that cannot be read gives the errno ("config /etc/x.json: ENOENT: ...").
absl::StatusOr<DaemonConfig> LoadConfig(const std::string& path);

// The built-in configuration, used when the daemon is given no file:
// profiles "shell" and "python", and "r" where the host has R
// (/usr/bin/Rscript and /etc/R; see docs/config.md).
const char* DefaultConfigJson();

// What the built-in configuration leaves out on this host and why, one
// line each ("no R on this host: ..."): said by `serve --check-config` and
// logged at start when no file is given.
std::vector<std::string> DefaultConfigNotes();

// ParseConfig(DefaultConfigJson()). The text is tested to parse; the host
// can still refuse it (a profile mirrors /usr, /bin... that must exist):
// then the error says "the built-in configuration does not hold on this
// host: ..." and the caller does not start.
absl::StatusOr<DaemonConfig> DefaultConfig();

// A request's limits may only tighten its profile's. Each field the
// request sets must be at most the profile's (where the profile sets one;
// where it does not, the request may set any value, within what
// cgroups::ValidateLimits accepts); the result is the element-wise minimum,
// with memory_high kept at or below memory_max and the profile's CPU
// period. Loosening is InvalidArgument naming every field at fault:
// "memory: 1073741824 (1 GiB) exceeds the profile's 268435456 (256 MiB)".
// `unlimited` names the fields the request spelt "unlimited": each is
// loosening where the profile sets that limit ("memory: unlimited exceeds
// the profile's ..."), and changes nothing where it does not.
absl::StatusOr<cgroups::Limits> TightenLimits(const cgroups::Limits& profile,
                                              const cgroups::Limits& requested,
                                              const std::vector<std::string>& unlimited = {});

// A request's "limits" object (the profile's keys: memory, memory_high,
// pids, cpus, cpu_weight), as `path` ("params.limits"). Bad values are
// InvalidArgument naming the field; TightenLimits then refuses loosening.
// The keys spelt "unlimited" are added to `unlimited`.
absl::StatusOr<cgroups::Limits> ParseRequestLimits(const boost::json::value& v, absl::string_view path,
                                                   std::vector<std::string>* unlimited = nullptr);

}  // namespace cubicle::rpc
