// `cubicle serve`: the JSON-RPC daemon on stdio, a Unix socket and/or HTTP.
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "cli/commands.h"
#include "cli/log.h"
#include "rpc/config.h"
#include "rpc/api_keys.h"
#include "rpc/daemon.h"
#include "rpc/http_front.h"
#include "rpc/preload_check.h"
#include "rpc/skill_catalog.h"
#include "rpc/skill_static_policy.h"
#include "runtime/cgroup_host.h"
#include "rpc/systemd.h"

namespace cubicle::cli {

namespace {

// --keys-file, else $CUBICLE_API_KEYS_FILE; empty: none.
template <typename Flags>
std::string KeysFileOf(const Flags& f) {
  if (!f.keys_file.empty()) return f.keys_file;
  const char* env = ::getenv("CUBICLE_API_KEYS_FILE");
  return env != nullptr ? env : "";
}

// The keys of `path`; errors say "keys: ...".
absl::StatusOr<std::shared_ptr<const rpc::ApiKeys>> LoadKeys(const std::string& path) {
  absl::StatusOr<rpc::ApiKeys> keys = rpc::ApiKeys::Load(path);
  if (!keys.ok()) return absl::Status(keys.status().code(), absl::StrCat("keys: ", keys.status().message()));
  return std::make_shared<const rpc::ApiKeys>(*std::move(keys));
}

// The configuration --config (else the built-in one) and --state-dir say,
// parsed and checked: at start, for --check-config, and at each SIGHUP.
// The preloads are checked apart (rpc/preload_check.h): that runs sandboxes.
template <typename Flags>
absl::StatusOr<rpc::DaemonConfig> ReadConfig(const Flags& f) {
  CUBICLE_ASSIGN_OR_RETURN(rpc::DaemonConfig config, f.config.empty() ? rpc::DefaultConfig() : rpc::LoadConfig(f.config));
  if (!f.state_dir.empty()) {
    if (absl::Status set = rpc::SetStateDir(&config, f.state_dir); !set.ok()) {
      return absl::Status(set.code(), absl::StrCat("--state-dir: ", set.message()));
    }
  }
  return config;
}

// What SIGHUP reads again: everything ReadConfig and the preload check
// read at start, and the keys file when one was given.
template <typename Flags>
std::function<absl::StatusOr<rpc::ReloadedConfig>()> Reloader(std::shared_ptr<Flags> f, std::string keys_file) {
  return [f = std::move(f), keys_file = std::move(keys_file)]() -> absl::StatusOr<rpc::ReloadedConfig> {
    rpc::ReloadedConfig next;
    CUBICLE_ASSIGN_OR_RETURN(next.config, ReadConfig(*f));
    CUBICLE_RETURN_IF_ERROR(rpc::CheckPreloads(next.config));
    if (!keys_file.empty()) {
      CUBICLE_ASSIGN_OR_RETURN(next.keys, LoadKeys(keys_file));
    }
    return next;
  };
}

// --listen and its keys, checked before anything starts: a daemon open to
// the network without keys is refused unless asked for by name. 0 when
// they are fine; the exit status otherwise.
template <typename Flags>
int HttpOptions(const Flags& f, rpc::ServeOptions* options) {
  const std::string keys_file = KeysFileOf(f);
  if (!keys_file.empty()) {
    // HTTP's keys, and the socket's other users ("uid" entries).
    absl::StatusOr<std::shared_ptr<const rpc::ApiKeys>> keys = LoadKeys(keys_file);
    if (!keys.ok()) {
      std::fprintf(stderr, "cubicle serve: %s\n", std::string(keys.status().message()).c_str());
      return kExitUsage;
    }
    options->keys = *std::move(keys);
  }
  const int activated = options->http.has_value() ? options->http->fd : -1;
  if (f.listen.empty() && activated < 0) {
    if (!f.port_file.empty() || (f.allow_no_auth && !absl::StartsWith(f.metrics, "tcp:"))) {
      std::fprintf(stderr, "cubicle serve: --listen-port-file and --allow-no-auth need --listen (or --metrics tcp:)\n");
      return kExitUsage;
    }
    return 0;
  }
  if (!f.listen.empty() && activated >= 0) {
    std::fprintf(stderr, "cubicle serve: --listen and an HTTP socket from socket activation exclude each other\n");
    return kExitUsage;
  }
  absl::StatusOr<boost::asio::ip::tcp::endpoint> endpoint =
      activated >= 0 ? rpc::LocalEndpoint(activated) : rpc::ParseListenAddress(f.listen);
  if (!endpoint.ok()) {
    std::fprintf(stderr, "cubicle serve: %s\n", std::string(endpoint.status().message()).c_str());
    return kExitUsage;
  }
  if (options->keys == nullptr && !endpoint->address().is_loopback()) {
    if (!f.allow_no_auth) {
      std::fprintf(stderr,
                   "cubicle serve: --listen %s is not a loopback address and no keys are given "
                   "(--keys-file or CUBICLE_API_KEYS_FILE): anyone who reaches it could run code; "
                   "pass --allow-no-auth to serve it anyway\n",
                   f.listen.c_str());
      return kExitUsage;
    }
    LogWarning("--allow-no-auth: HTTP on " + f.listen + " without authentication: anyone who reaches it can run code");
  }
  options->http = rpc::ServeOptions::Http{*endpoint, f.port_file, activated};
  return 0;
}

// Sockets passed by systemd (cubicle.socket): the Unix one serves JSON-RPC
// lines instead of --socket's path, the TCP one HTTP. 0 when fine.
int ActivatedSockets(rpc::ServeOptions* options) {
  absl::StatusOr<rpc::systemd::ActivatedSockets> sockets = rpc::systemd::TakeActivatedSockets();
  if (!sockets.ok()) {
    std::fprintf(stderr, "cubicle serve: %s\n", std::string(sockets.status().message()).c_str());
    return kExitUsage;
  }
  if (sockets->unix_streams.size() > 1 || sockets->tcp_streams.size() > 1) {
    std::fprintf(stderr, "cubicle serve: socket activation passed more than one Unix or TCP socket\n");
    return kExitUsage;
  }
  if (!sockets->unix_streams.empty()) options->socket_fd = sockets->unix_streams[0];
  if (!sockets->tcp_streams.empty()) {
    options->http = rpc::ServeOptions::Http{{}, "", sockets->tcp_streams[0]};
  }
  return 0;
}

// --check-config: what would be served, once everything has been read
// and checked; nothing is listened on. The checks a start makes in
// sandboxes (preloads, the skills' static policy) are made here too.
int PrintConfigSummary(const rpc::DaemonConfig& config, const rpc::ServeOptions& options, bool built_in) {
  std::string profiles;
  for (const auto& [name, profile] : config.profiles) {
    absl::StrAppend(&profiles, profiles.empty() ? "" : ", ", name, profile.interpreter.has_value() ? " (warm)" : "",
                    " min_idle ", profile.pool.min_idle);
  }
  std::printf("configuration OK: %zu profile(s): %s\n", config.profiles.size(), profiles.c_str());
  if (built_in) {
    for (const std::string& note : rpc::DefaultConfigNotes()) std::printf("%s\n", note.c_str());
  }
  std::printf("transports: %s%s%s\n", options.stdio ? "stdio " : "",
              options.socket_path.empty() ? "" : absl::StrCat("socket ", options.socket_path, " ").c_str(),
              options.http.has_value() ? "http" : "");
  std::printf("sessions: %s\n", config.sessions.enabled()
                                     ? absl::StrCat("state directory ", config.sessions.state_dir).c_str()
                                     : "off (no state directory)");
  // The environments and skills as the daemon would load them; one that
  // would be left out or denied is said, but refuses nothing (a reload
  // would serve the others).
  std::vector<const rpc::Profile*> profile_list;
  for (const auto& [name, profile] : config.profiles) profile_list.push_back(&profile);
  std::shared_ptr<const rpc::EnvironmentSet> environments =
      rpc::LoadEnvironmentSet(config.environments_dir, profile_list);
  const environments::Catalog& catalog = *environments->catalog;
  if (config.environments_dir.empty()) {
    std::printf("environments: none (no environments.dir)\n");
  } else {
    std::printf("environments: %zu revision(s) of %zu environment(s) from %s\n", catalog.revisions(),
                catalog.environments().size(), config.environments_dir.c_str());
  }
  for (const environments::LoadError& e : catalog.errors()) {
    std::printf("environment left out: %s\n", e.message.c_str());
  }
  rpc::StaticPolicyChecks static_checks(rpc::SandboxedStaticCheck(absl::Seconds(10)));
  std::shared_ptr<const skills::Catalog> skills = rpc::LoadSkillCatalog(
      config.skills_dir,
      [&](const std::string& name) -> const rpc::Profile* {
        auto it = config.profiles.find(name);
        return it == config.profiles.end() ? nullptr : &it->second;
      },
      &static_checks, &catalog);
  if (config.skills_dir.empty()) {
    std::printf("skills: none (no skills.dir)\n");
  } else {
    std::printf("skills: %zu version(s) of %zu skill(s) from %s\n", skills->versions(), skills->skills().size(),
                config.skills_dir.c_str());
  }
  for (const skills::LoadError& e : skills->errors()) std::printf("skill left out: %s\n", e.message.c_str());
  for (const auto& [name, versions] : skills->skills()) {
    for (const auto& [version, skill] : versions) {
      if (!skill->static_policy.has_value() || skill->static_policy->ok()) continue;
      std::printf("skill denied by the static policy: %s: %s\n", skill->Reference().c_str(),
                  skills::DescribeViolation(skill->static_policy->violations.front()).c_str());
    }
  }
  if (std::string checks = static_checks.LastLoadSummary(); !checks.empty()) std::printf("%s\n", checks.c_str());
  return 0;
}

}  // namespace

std::function<int()> AddServeCommand(CLI::App& root) {
  struct Flags {
    std::string config;
    std::string socket;
    bool stdio = false;
    std::string metrics;
    std::string state_dir;
    std::string listen;
    std::string port_file;
    std::string keys_file;
    bool allow_no_auth = false;
    bool check_config = false;
    bool print_default_config = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* app = root.add_subcommand("serve", "Serve JSON-RPC 2.0 on stdio (default) or a Unix socket");
  CLI::Option* config =
      app->add_option("--config", f->config, "JSON config file (default: the built-in shell, python and, with R on the host, r profiles)");
  app->add_option("--socket", f->socket, "Serve on this Unix socket (mode 0600) instead of stdio");
  app->add_flag("--stdio", f->stdio, "With --socket, serve stdio too");
  app->add_option("--metrics", f->metrics,
                  "Prometheus metrics: unix:PATH (a socket answering HTTP), tcp:ADDRESS:PORT (the same on TCP; off loopback "
                  "only with --allow-no-auth) or PATH (a file rewritten every 5 s)");
  app->add_option("--state-dir", f->state_dir,
                  "Sessions and durable execution records live here (overrides sessions.state_dir)");
  app->add_option("--listen", f->listen,
                  "Serve HTTP/1.1 on ADDR:PORT too (IPv4, [IPv6] or localhost; docs/protocol.md, \"HTTP\")");
  app->add_option("--listen-port-file", f->port_file, "Write the bound HTTP port here (useful with port 0)");
  app->add_option("--keys-file", f->keys_file,
                  "Keys for HTTP and the socket's other users, a JSON file of mode 0600 (or $CUBICLE_API_KEYS_FILE)");
  app->add_flag("--allow-no-auth", f->allow_no_auth, "Serve HTTP on a non-loopback address without keys");
  app->add_flag("--check-config", f->check_config,
                "Validate the configuration and these flags, print a summary, and exit without serving");
  app->add_flag("--print-default-config", f->print_default_config,
                "Print the built-in configuration (the JSON used without --config) and exit")
      ->excludes(config);
  return [f] {
    // The packages install this as /etc/cubicle/config.json, made from
    // the binary itself so the two cannot differ.
    if (f->print_default_config) {
      std::fputs(rpc::DefaultConfigJson(), stdout);
      return std::fflush(stdout) == 0 ? 0 : kExitSetupFailed;
    }
    auto refuse = [](const absl::Status& why) {
      std::fprintf(stderr, "cubicle serve: %s\n", std::string(why.message()).c_str());
      return kExitUsage;
    };
    // First, before anything reads the cgroup layout: under Delegate=yes on
    // a pure v2 host the daemon steps into a leaf of its own cgroup.
    if (!f->check_config) {
      absl::StatusOr<std::string> leaf = runtime::TakeDelegatedLeaf();
      if (!leaf.ok()) {
        std::fprintf(stderr, "cubicle serve: %s\n", std::string(leaf.status().message()).c_str());
        return kExitSetupFailed;
      }
      if (!leaf->empty()) LogInfo(*leaf);
    }
    absl::StatusOr<rpc::DaemonConfig> config = ReadConfig(*f);
    if (!config.ok()) return refuse(config.status());
    rpc::ServeOptions options;
    // A files.put line carries a whole file in base64: the line limit must
    // hold the largest one sessions.max_file_bytes allows.
    const size_t max_file_line = config->sessions.max_file_bytes / 3 * 4 + (64 << 10);
    if (config->sessions.enabled()) options.max_line_bytes = std::max(options.max_line_bytes, max_file_line);
    options.socket_path = f->socket.empty() ? config->socket_path : f->socket;
    options.socket_mode = config->socket_mode;
    if (int refused = ActivatedSockets(&options); refused != 0) return refused;
    options.stdio = (options.socket_path.empty() && options.socket_fd < 0 && f->listen.empty() &&
                     !options.http.has_value()) ||
                    f->stdio;
    if (int refused = HttpOptions(*f, &options); refused != 0) return refused;
    // Serving its spawner's stdio, the daemon must not outlive it.
    options.die_with_parent = options.stdio;
    if (!f->metrics.empty()) {
      absl::StatusOr<rpc::MetricsTarget> target = rpc::ParseMetricsTarget(f->metrics);
      if (!target.ok()) {
        std::fprintf(stderr, "cubicle serve: %s\n", std::string(target.status().message()).c_str());
        return kExitUsage;
      }
      options.metrics = *target;
      // Metrics name the profiles and how busy the node is; the listener
      // checks no key (the HTTP front's /metrics does).
      if (target->kind == rpc::MetricsTarget::Kind::kTcp && !target->endpoint.address().is_loopback()) {
        if (!f->allow_no_auth) {
          std::fprintf(stderr,
                       "cubicle serve: --metrics %s is not a loopback address and its listener takes no key: "
                       "scrape /metrics on --listen with a key instead, or pass --allow-no-auth\n",
                       f->metrics.c_str());
          return kExitUsage;
        }
        LogWarning("--allow-no-auth: metrics on " + f->metrics + " without authentication");
      }
    }
    // Last: it runs a sandbox per warm profile.
    if (absl::Status preloads = rpc::CheckPreloads(*config); !preloads.ok()) return refuse(preloads);
    if (f->check_config) return PrintConfigSummary(*config, options, f->config.empty());
    if (absl::Status log = ConfigureLog(config->log.level, config->log.destination); !log.ok()) return refuse(log);
    if (f->config.empty()) {
      for (const std::string& note : rpc::DefaultConfigNotes()) LogInfo(note);
    }
    options.reload = Reloader(f, options.keys != nullptr ? KeysFileOf(*f) : "");
    options.warn = [](const std::string& message) { LogWarning(message); };
    options.info = [](const std::string& message) { LogInfo(message); };
    options.log_event = [](absl::string_view event, const boost::json::object& fields) { LogEvent(event, fields); };
    options.logs_events = [] { return LogsInfo(); };
    options.configure_log = [](const rpc::LogSettings& log) { return ConfigureLog(log.level, log.destination); };
    // Zygotes are made by fork servers of this very executable.
    config->fork_server = "/proc/self/exe";
    // Signals are taken by the daemon (drain, then clean up); a closed
    // stdout must not kill it.
    ::signal(SIGPIPE, SIG_IGN);
    absl::StatusOr<std::unique_ptr<rpc::Daemon>> daemon = rpc::Daemon::Create(*std::move(config));
    if (!daemon.ok()) {
      std::fprintf(stderr, "cubicle serve: %s\n", std::string(daemon.status().message()).c_str());
      return kExitSetupFailed;
    }
    if (options.stdio) LogInfo("serving JSON-RPC on stdio");
    if (options.socket_fd >= 0) {
      LogInfo("serving JSON-RPC on the socket systemd passed");
    } else if (!options.socket_path.empty()) {
      LogInfo("serving JSON-RPC on " + options.socket_path);
    }
    return (*daemon)->Serve(options);
  };
}

}  // namespace cubicle::cli
