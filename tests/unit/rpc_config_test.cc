#include "rpc/config.h"

#include <boost/json/parse.hpp>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/units.h"
#include "runtime/cgroup_host.h"
#include "runtime/defaults.h"

namespace cubicle::rpc {
namespace {

using ::cubicle::rootfs::MountKind;
using ::cubicle::rootfs::MountOp;

// A minimal valid profile, wrapped in a whole config, with `extra` members
// added to the profile and `top` members to the top level.
std::string Config(const std::string& extra, const std::string& top = "") {
  return absl::StrCat("{", top, top.empty() ? "" : ",", R"("profiles": {"x": {)", extra, "}}}");
}

std::string ErrorOf(const std::string& json) {
  absl::StatusOr<DaemonConfig> config = ParseConfig(json);
  if (config.ok()) return "(parsed)";
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  return std::string(config.status().message());
}

#define EXPECT_CONFIG_ERROR(json, expected)                                          \
  do {                                                                               \
    std::string _message = ErrorOf(json);                                            \
    EXPECT_NE(_message.find(expected), std::string::npos) << "error: " << _message; \
  } while (0)

TEST(Units, ParseSizeMatchesTheFlagSyntax) {
  EXPECT_EQ(*ParseSize("x", "1048576"), 1048576u);
  EXPECT_EQ(*ParseSize("x", "64K"), 64u << 10);
  EXPECT_EQ(*ParseSize("x", "256m"), 256u << 20);
  EXPECT_EQ(*ParseSize("x", "1G"), 1ull << 30);
  EXPECT_EQ(*ParseSize("x", "2t"), 2ull << 40);
  for (const char* bad : {"", "12Q", "-5", "+5", "K", "1.5M", "99999999999999999999", "16777216T"}) {
    absl::StatusOr<uint64_t> r = ParseSize("--memory", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(absl::StrCat("--memory '", bad, "'")), std::string::npos)
        << r.status();
  }
}

// The built-in default: rpc_default_config_test.cc.

// ---------------------------------------------------------------------------
// A complete example, key by key, into the SandboxSpec it means.

constexpr char kFull[] = R"json({
  /* every key the schema has */
  "socket": {"path": "/run/cubicle.sock", "mode": "0660"},
  "concurrency": {"max_concurrent": 4, "max_queue": 10},
  "ceilings": {"memory": "1G", "pids": 512, "cpus": 1, "timeout_ms": 120000, "output_bytes": "4M"},
  "profiles": {
    "data": {
      "hostname": "box",
      "uid": 2000,
      "gid": 3000,
      "seccomp": "default",
      "tmp_size": "32M",
      "binds": [
        {"source": "/usr/share", "dest": "/opt//share/"},
        {"source": "/etc", "dest": "/host-etc", "readonly": false},
        {"source": "/nonexistent/cubicle-test", "dest": "/maybe", "optional": true}
      ],
      "tmpfs": [{"dest": "/scratch", "size": "8M"}, {"dest": "/run", "size": 1048576, "mode": "0700"}],
      "env": {"HOME": "/scratch", "FOO": "bar=baz"},
      "rlimits": {"nofile": 256, "stack": {"soft": 8388608, "hard": "unlimited"}},
      "limits": {"memory": "256M", "memory_high": "200M", "pids": 32, "cpus": 0.5, "cpu_weight": 50},
      "breakers": {"cpu": 0.25, "cpu_window_ms": 2000, "cpu_grace_ms": 1000, "memory": "128M",
                   "memory_grace_ms": 500, "io": "10M", "io_window_ms": 3000},
      "timeout_ms": 5000,
      "max_timeout_ms": 60000,
      "output_bytes": "64K",
      "pool": {"min_idle": 1, "max_idle": 3, "max_total": 8, "refill_parallelism": 2, "max_age_s": 90},
      "interpreter": {"argv": ["python3", "-I", "-X", "utf8"], "preload": ["json", "os.path", "_io"]}
    },
    "bare": {}
  }
})json";

MountOp Bind(std::string source, std::string dest, bool readonly, bool optional = false) {
  MountOp op;
  op.kind = MountKind::kBind;
  op.source = std::move(source);
  op.dest = std::move(dest);
  op.readonly = readonly;
  op.optional = optional;
  return op;
}

MountOp Tmpfs(std::string dest, uint64_t size, uint32_t mode) {
  MountOp op;
  op.kind = MountKind::kTmpfs;
  op.dest = std::move(dest);
  op.size_bytes = size;
  op.mode = mode;
  return op;
}

TEST(ParseConfig, FullExampleYieldsTheExpectedSpec) {
  absl::StatusOr<DaemonConfig> parsed = ParseConfig(kFull);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const DaemonConfig& config = *parsed;
  EXPECT_EQ(config.socket_path, "/run/cubicle.sock");
  EXPECT_EQ(config.socket_mode, 0660u);
  EXPECT_EQ(config.max_concurrent, 4u);
  EXPECT_EQ(config.max_queue, 10u);
  EXPECT_EQ(config.ceiling.memory_max, 1ull << 30);
  EXPECT_EQ(config.ceiling.pids_max, 512u);
  EXPECT_EQ(config.ceiling.cpus, 1.0);
  EXPECT_EQ(config.max_timeout, absl::Minutes(2));
  EXPECT_EQ(config.max_output_bytes, 4u << 20);

  const Profile& p = config.profiles.at("data");
  runtime::DefaultsOptions options;
  options.uid = 2000;
  options.gid = 3000;
  options.hostname = "box";
  options.tmp_size = 32 << 20;
  runtime::SandboxSpec want = *runtime::DefaultSpec(options);
  want.seccomp = seccomp::Policy::kDefault;
  want.mounts.push_back(Bind("/usr/share", "/opt/share", true));
  want.mounts.push_back(Bind("/etc", "/host-etc", false));
  want.mounts.push_back(Bind("/nonexistent/cubicle-test", "/maybe", true, true));
  want.mounts.push_back(Tmpfs("/scratch", 8 << 20, 01777));
  want.mounts.push_back(Tmpfs("/run", 1 << 20, 0700));
  // HOME replaced where the default had it; FOO added at the end.
  want.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/scratch", "LANG=C.UTF-8", "FOO=bar=baz"};
  for (runtime::RlimitSpec& r : want.rlimits) {
    if (r.resource == RLIMIT_NOFILE) r = {RLIMIT_NOFILE, 256, 256};
  }
  want.rlimits.push_back({RLIMIT_STACK, 8388608, RLIM_INFINITY});
  want.limits.memory_max = 256 << 20;
  want.limits.memory_high = 200 << 20;
  want.limits.pids_max = 32;
  want.limits.cpus = 0.5;
  want.limits.cpu_weight = 50;
  want.breakers.cpu_share = 0.25;
  want.breakers.cpu_window = absl::Seconds(2);
  want.breakers.cpu_grace = absl::Seconds(1);
  want.breakers.memory_mark = 128 << 20;
  want.breakers.memory_grace = absl::Milliseconds(500);
  want.breakers.io_bytes_per_sec = 10 << 20;
  want.breakers.io_window = absl::Seconds(3);
  want.timeout = absl::Seconds(5);
  EXPECT_EQ(p.spec.mounts, want.mounts);
  EXPECT_EQ(p.spec.env, want.env);
  EXPECT_EQ(p.spec.rlimits, want.rlimits);
  EXPECT_EQ(p.spec.limits, want.limits);
  EXPECT_EQ(p.spec.breakers, want.breakers);
  EXPECT_EQ(p.spec, want);  // and everything else, hostname and ids included

  EXPECT_EQ(p.default_timeout, absl::Seconds(5));
  EXPECT_EQ(p.max_timeout, absl::Minutes(1));
  EXPECT_EQ(p.output_bytes, 64u << 10);
  EXPECT_EQ(p.pool.min_idle, 1u);
  EXPECT_EQ(p.pool.max_idle, 3u);
  EXPECT_EQ(p.pool.max_total, 8u);
  EXPECT_EQ(p.pool.refill_parallelism, 2u);
  EXPECT_EQ(p.pool.max_age, absl::Seconds(90));
  ASSERT_TRUE(p.interpreter.has_value());
  EXPECT_EQ(p.interpreter->argv, (std::vector<std::string>{"python3", "-I", "-X", "utf8"}));
  EXPECT_EQ(p.interpreter->preload, (std::vector<std::string>{"json", "os.path", "_io"}));

  // An empty profile: the baseline, the ceiling's limits, the ceiling's
  // timeout as its maximum, 30 s by default, 1 MiB of output.
  const Profile& bare = config.profiles.at("bare");
  runtime::SandboxSpec baseline = *runtime::DefaultSpec({});
  EXPECT_EQ(bare.spec.mounts, baseline.mounts);
  EXPECT_EQ(bare.spec.limits.memory_max, 1ull << 30);
  EXPECT_EQ(bare.spec.limits.pids_max, 512u);
  EXPECT_EQ(bare.spec.limits.cpus, 1.0);
  EXPECT_EQ(bare.max_timeout, absl::Minutes(2));
  EXPECT_EQ(bare.default_timeout, absl::Seconds(30));
  EXPECT_EQ(bare.output_bytes, 1u << 20);
  runtime::PoolConfig pool;
  EXPECT_EQ(bare.pool.min_idle, pool.min_idle);
  EXPECT_EQ(bare.pool.max_idle, pool.max_idle);
  EXPECT_EQ(bare.pool.max_total, pool.max_total);
  EXPECT_EQ(bare.pool.refill_parallelism, pool.refill_parallelism);
  EXPECT_EQ(bare.pool.max_age, pool.max_age);
  EXPECT_FALSE(bare.interpreter.has_value());
}

// Unset memory and pids ceilings are the built-in defaults, sized to the
// host as for `cubicle run`; a profile that sets no limit gets them.
TEST(ParseConfig, LogTakesALevelAndADestination) {
  absl::StatusOr<DaemonConfig> none = ParseConfig(Config(""));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->log, LogSettings{}) << "unset: warn (or CUBICLE_LOG_LEVEL) on stderr";
  EXPECT_EQ(none->log.destination, "stderr");
  absl::StatusOr<DaemonConfig> set =
      ParseConfig(Config("", R"("log": {"level": "info", "destination": "/var/log/cubicle/cubicle.log"})"));
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->log.level, "info");
  EXPECT_EQ(set->log.destination, "/var/log/cubicle/cubicle.log");

  EXPECT_CONFIG_ERROR(Config("", R"("log": {"level": "loud"})"), "log.level: 'loud' is not a level");
  EXPECT_CONFIG_ERROR(Config("", R"("log": {"level": ""})"), "log.level");
  EXPECT_CONFIG_ERROR(Config("", R"("log": {"destination": "cubicle.log"})"), "log.destination: 'cubicle.log'");
  EXPECT_CONFIG_ERROR(Config("", R"("log": {"destination": ""})"), "log.destination");
  EXPECT_CONFIG_ERROR(Config("", R"("log": {"format": "text"})"), "format");
  EXPECT_CONFIG_ERROR(Config("", R"("log": {"level": 3})"), "log.level");
}

TEST(ParseConfig, SkillsTzIsAZoneNameNeverAPath) {
  const std::string dir = ::testing::TempDir();
  auto with = [&](const std::string& tz) {
    return Config("", absl::StrCat(R"("skills": {"dir": ")", dir, R"(", "tz": )", tz, "}"));
  };
  absl::StatusOr<DaemonConfig> unset = ParseConfig(Config("", absl::StrCat(R"("skills": {"dir": ")", dir, R"("})")));
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_EQ(unset->skills_tz, "UTC");
  absl::StatusOr<DaemonConfig> paris = ParseConfig(with(R"("Europe/Paris")"));
  ASSERT_TRUE(paris.ok()) << paris.status();
  EXPECT_EQ(paris->skills_tz, "Europe/Paris");
  EXPECT_TRUE(ParseConfig(with(R"("Etc/GMT+2")")).ok());
  for (const char* bad : {R"(":/etc/shadow")", R"("/etc/localtime")", R"("../../etc/x")", R"("")", R"("a b")", "3"}) {
    EXPECT_CONFIG_ERROR(with(bad), "skills.tz");
  }
}

TEST(ParseConfig, NoCeilingsMeansTheDefaultMemoryAndPidsLimitsAndBounds) {
  absl::StatusOr<DaemonConfig> config = ParseConfig(Config(""));
  ASSERT_TRUE(config.ok()) << config.status();
  const cgroups::Limits defaults = runtime::HostDefaultLimits();
  ASSERT_TRUE(defaults.memory_max.has_value());
  EXPECT_LE(*defaults.memory_max, uint64_t{1} << 30);
  EXPECT_EQ(defaults.pids_max, 1024u);
  EXPECT_EQ(config->ceiling, defaults);
  EXPECT_EQ(config->profiles.at("x").spec.limits.memory_max, defaults.memory_max);
  EXPECT_EQ(config->profiles.at("x").spec.limits.pids_max, 1024u);
  EXPECT_FALSE(config->profiles.at("x").spec.limits.cpus.has_value()) << "no default CPU limit";
  EXPECT_EQ(config->max_timeout, absl::Minutes(10));
  EXPECT_EQ(config->profiles.at("x").max_timeout, absl::Minutes(10));
  EXPECT_EQ(config->max_output_bytes, 16u << 20);
  // A profile above the default ceiling is refused, naming it.
  EXPECT_CONFIG_ERROR(Config(R"("limits": {"pids": 5000})"),
                      "profiles.x.limits.pids: 5000 exceeds the ceiling 1024 (ceilings.pids)");
}

// "No limit" is said, in the ceiling and then in the profile (as
// `cubicle run --memory unlimited` says it); a ceiling that says it fills
// nothing in.
TEST(ParseConfig, UnlimitedIsSaidExplicitly) {
  absl::StatusOr<DaemonConfig> config = ParseConfig(Config(
      R"("limits": {"memory": "unlimited", "pids": "unlimited", "memory_high": "unlimited"})",
      R"("ceilings": {"memory": "unlimited", "pids": "unlimited"})"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->ceiling.memory_max.has_value());
  EXPECT_FALSE(config->ceiling.pids_max.has_value());
  EXPECT_TRUE(config->profiles.at("x").spec.limits.empty());
  // An unlimited ceiling with the profile's own limits.
  config = ParseConfig(Config(R"("limits": {"memory": "8G", "pids": 100000})",
                              R"("ceilings": {"memory": "unlimited", "pids": "unlimited"})"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->profiles.at("x").spec.limits.memory_max, uint64_t{8} << 30);
  EXPECT_EQ(config->profiles.at("x").spec.limits.pids_max, 100000u);
  // Unset in the profile under an unlimited ceiling: no limit of that kind.
  config = ParseConfig(Config("", R"("ceilings": {"pids": "unlimited"})"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->profiles.at("x").spec.limits.pids_max.has_value());
  EXPECT_EQ(config->profiles.at("x").spec.limits.memory_max, runtime::HostDefaultLimits().memory_max);
}

TEST(ParseConfigErrors, UnlimitedSpelling) {
  // Not under a ceiling that limits, whether set or the default.
  EXPECT_CONFIG_ERROR(Config(R"("limits": {"memory": "unlimited"})"),
                      "profiles.x.limits.memory: unlimited exceeds the ceiling");
  EXPECT_CONFIG_ERROR(Config(R"("limits": {"pids": "unlimited"})", R"("ceilings": {"pids": 100})"),
                      "profiles.x.limits.pids: unlimited exceeds the ceiling 100 (ceilings.pids)");
  // Other spellings are refused, saying what is accepted.
  EXPECT_CONFIG_ERROR(Config("", R"("ceilings": {"memory": "Unlimited"})"),
                      R"(ceilings.memory: 'Unlimited' is not a size (expected 256M, bytes or "unlimited"))");
  EXPECT_CONFIG_ERROR(Config("", R"("ceilings": {"memory": "none"})"), "ceilings.memory: 'none' is not a size");
  EXPECT_CONFIG_ERROR(Config("", R"("ceilings": {"memory": null})"), "ceilings.memory");
  EXPECT_CONFIG_ERROR(Config("", R"("ceilings": {"pids": "infinity"})"),
                      R"(ceilings.pids: expected a whole number or "unlimited", got 'infinity')");
  EXPECT_CONFIG_ERROR(Config("", R"("ceilings": {"pids": -1})"), "ceilings.pids");
  EXPECT_CONFIG_ERROR(Config(R"("limits": {"cpus": "unlimited"})"), "profiles.x.limits.cpus");
  EXPECT_CONFIG_ERROR(Config("", R"("ceilings": {"cpus": "unlimited"})"), "ceilings.cpus");
}

TEST(ParseConfig, ConnectionsAndShutdown) {
  absl::StatusOr<DaemonConfig> config = ParseConfig(Config(""));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->on_disconnect, OnDisconnect::kCancel);
  EXPECT_EQ(config->line_timeout, absl::Seconds(30));
  EXPECT_EQ(config->idle_timeout, absl::InfiniteDuration());
  EXPECT_EQ(config->drain_timeout, absl::Seconds(30));
  config = ParseConfig(Config("", R"("connections": {"on_disconnect": "finish", "line_timeout_ms": 500,
                                      "idle_timeout_ms": 60000}, "shutdown": {"drain_timeout_ms": 0})"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->on_disconnect, OnDisconnect::kFinish);
  EXPECT_EQ(config->line_timeout, absl::Milliseconds(500));
  EXPECT_EQ(config->idle_timeout, absl::Minutes(1));
  EXPECT_EQ(config->drain_timeout, absl::ZeroDuration()) << "0: cancel at once";
}

TEST(ParseConfigErrors, ConnectionsAndShutdown) {
  EXPECT_CONFIG_ERROR(Config("", R"("connections": {"on_disconnect": "ignore"})"),
                      "connections.on_disconnect: 'ignore' is not a policy (expected cancel or finish)");
  EXPECT_CONFIG_ERROR(Config("", R"("connections": {"on_disconnect": true})"), "connections.on_disconnect");
  EXPECT_CONFIG_ERROR(Config("", R"("connections": {"line_timeout_ms": 0})"), "connections.line_timeout_ms");
  EXPECT_CONFIG_ERROR(Config("", R"("connections": {"idle_timeout_ms": "1s"})"), "connections.idle_timeout_ms");
  EXPECT_CONFIG_ERROR(Config("", R"("connections": {"timeout_ms": 5})"), "connections.timeout_ms: unknown key");
  EXPECT_CONFIG_ERROR(Config("", R"("shutdown": {"drain_timeout_ms": -1})"), "shutdown.drain_timeout_ms");
  EXPECT_CONFIG_ERROR(Config("", R"("shutdown": {"drain": 5})"), "shutdown.drain: unknown key");
}

TEST(ParseConfig, CpuCeilingAboveThisHostFillsProfilesWithTheHostsCpus) {
  absl::StatusOr<DaemonConfig> config = ParseConfig(Config("", R"("ceilings": {"cpus": 100000})"));
  ASSERT_TRUE(config.ok()) << config.status();
  long host = ::sysconf(_SC_NPROCESSORS_ONLN);
  EXPECT_EQ(config->profiles.at("x").spec.limits.cpus, static_cast<double>(host));
}

TEST(ParseConfig, SmallerTimeoutCeilingLowersTheDefaultTimeout) {
  absl::StatusOr<DaemonConfig> config = ParseConfig(Config("", R"("ceilings": {"timeout_ms": 2000})"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->profiles.at("x").default_timeout, absl::Seconds(2));
}

// ---------------------------------------------------------------------------
// Errors: each names the JSON path and the problem.

TEST(ParseConfigErrors, UnknownKeys) {
  EXPECT_CONFIG_ERROR(Config("", R"("bogus": 1)"), "bogus: unknown key (expected one of: socket, concurrency");
  EXPECT_CONFIG_ERROR(Config(R"("bogus": 1)"), "profiles.x.bogus: unknown key");
  EXPECT_CONFIG_ERROR(Config(R"("limits": {"memroy": "1G"})"), "profiles.x.limits.memroy: unknown key");
  EXPECT_CONFIG_ERROR(Config(R"("binds": [{"source": "/usr", "read_only": true}])"),
                      "profiles.x.binds[0].read_only: unknown key");
  EXPECT_CONFIG_ERROR(Config(R"("pool": {"min": 1})"), "profiles.x.pool.min: unknown key");
  EXPECT_CONFIG_ERROR(Config("", R"("socket": {"pth": "/x"})"), "socket.pth: unknown key");
  EXPECT_CONFIG_ERROR(Config(R"("rlimits": {"files": 10})"), "profiles.x.rlimits.files: unknown resource");
}

TEST(ParseConfigErrors, DuplicateKeys) {
  EXPECT_CONFIG_ERROR(Config(R"("limits": {"memory": "256M", "memory": "8G"})"),
                      "profiles.x.limits: duplicate key 'memory' (line 1, column");
  EXPECT_CONFIG_ERROR(R"({"profiles": {}, "profiles": {}})", "(top level): duplicate key 'profiles'");
  EXPECT_CONFIG_ERROR(Config(R"("binds": [{"source": "/usr"}, {"source": "/usr", "source": "/etc"}])"),
                      "profiles.x.binds[1]: duplicate key 'source'");
}

TEST(ParseConfigErrors, BadSizes) {
  std::string json = absl::StrReplaceAll(DefaultConfigJson(), {{R"("512M")", R"("12Q")"}});
  EXPECT_CONFIG_ERROR(json, R"(profiles.python.limits.memory: '12Q' is not a size (expected 256M, bytes or "unlimited"))");
  EXPECT_CONFIG_ERROR(Config(R"("tmp_size": -1)"), "profiles.x.tmp_size: -1 is not a size");
  EXPECT_CONFIG_ERROR(Config(R"("tmp_size": 0)"), "profiles.x.tmp_size: must be positive");
  EXPECT_CONFIG_ERROR(Config(R"("tmpfs": [{"dest": "/a", "size": "1.5M"}])"),
                      "profiles.x.tmpfs[0].size: '1.5M' is not a size");
  EXPECT_CONFIG_ERROR(Config("", R"("ceilings": {"output_bytes": true})"),
                      "ceilings.output_bytes: true is not a size");
}

TEST(ParseConfig, StrictSeccompPolicy) {
  absl::StatusOr<DaemonConfig> config = ParseConfig(Config(R"("seccomp": "strict")"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->profiles.at("x").spec.seccomp, seccomp::Policy::kStrict);
  // Strict refuses socket(AF_INET), which the egress bridge needs.
  EXPECT_FALSE(ParseConfig(Config(R"("seccomp": "strict", "network": {"allow_domains": ["example.org"]})")).ok());
}

// A warm R: R package names to preload, R's start-up options, and never
// under strict (R starts through a shell script).
TEST(ParseConfig, AWarmRInterpreter) {
  absl::StatusOr<DaemonConfig> config =
      ParseConfig(Config(R"("interpreter": {"argv": ["Rscript", "--vanilla"], "preload": ["jsonlite", "data.table"]})"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->profiles.at("x").interpreter->preload, (std::vector<std::string>{"jsonlite", "data.table"}));
  EXPECT_CONFIG_ERROR(Config(R"("interpreter": {"argv": ["Rscript", "--vanilla"], "preload": ["json lite"]})"),
                      "profiles.x.interpreter.preload[0]: 'json lite' is not an R package name like jsonlite");
  EXPECT_CONFIG_ERROR(Config(R"("interpreter": {"argv": ["Rscript", "-e", "1"]})"),
                      "profiles.x.interpreter.argv: interpreter argument '-e': an R interpreter takes only start-up "
                      "options such as --vanilla, --no-environ or --slave (the program comes with each request)");
  EXPECT_CONFIG_ERROR(Config(R"("seccomp": "strict", "interpreter": {"argv": ["Rscript", "--vanilla"]})"),
                      "profiles.x.interpreter: R cannot run under the strict seccomp policy: Rscript starts R "
                      "through a shell script, execs that strict refuses");
}

TEST(ParseConfigErrors, BadSeccompPolicy) {
  EXPECT_CONFIG_ERROR(Config(R"("seccomp": "paranoid")"),
                      "profiles.x.seccomp: 'paranoid' is not a seccomp policy "
                      "(expected none, default, no-network or strict)");
}

// "owner": "sandbox" marks the bind idmapped (read-only or not); "host"
// is the default; anything else is refused naming the key's JSON path.
TEST(ParseConfig, BindOwner) {
  absl::StatusOr<DaemonConfig> config = ParseConfig(Config(
      R"("binds": [{"source": "/usr", "dest": "/a", "owner": "sandbox"},
                   {"source": "/usr", "dest": "/b", "owner": "sandbox", "readonly": false},
                   {"source": "/usr", "dest": "/c", "owner": "host"}, {"source": "/usr", "dest": "/d"}])"));
  ASSERT_TRUE(config.ok()) << config.status();
  const rootfs::MountPlan& mounts = config->profiles.at("x").spec.mounts;
  auto bind = [&](const std::string& dest) -> const MountOp& {
    for (const MountOp& op : mounts) {
      if (op.dest == dest) return op;
    }
    ADD_FAILURE() << "no mount at " << dest;
    return mounts.front();
  };
  EXPECT_TRUE(bind("/a").idmap_owner);
  EXPECT_TRUE(bind("/a").readonly);
  EXPECT_TRUE(bind("/b").idmap_owner);
  EXPECT_FALSE(bind("/b").readonly);
  EXPECT_FALSE(bind("/c").idmap_owner);
  EXPECT_FALSE(bind("/d").idmap_owner);
}

TEST(ParseConfigErrors, BindOwnerMustBeHostOrSandbox) {
  EXPECT_CONFIG_ERROR(Config(R"("binds": [{"source": "/usr"}, {"source": "/usr", "dest": "/u", "owner": "root"}])"),
                      "profiles.x.binds[1].owner: 'root': expected \"host\"");
  EXPECT_CONFIG_ERROR(Config(R"("binds": [{"source": "/usr", "owner": true}])"),
                      "profiles.x.binds[0].owner: expected a string");
}

TEST(ParseConfigErrors, MountPaths) {
  EXPECT_CONFIG_ERROR(Config(R"("binds": [{"source": "/usr", "dest": "opt/usr"}])"),
                      "profiles.x.binds[0].dest 'opt/usr': must be an absolute path");
  EXPECT_CONFIG_ERROR(Config(R"("binds": [{"source": "/usr", "dest": "/opt/../etc"}])"),
                      "profiles.x.binds[0].dest '/opt/../etc': '..' is not allowed");
  EXPECT_CONFIG_ERROR(Config(R"("tmpfs": [{"dest": "/a/../b"}])"), "profiles.x.tmpfs[0].dest '/a/../b': '..'");
  EXPECT_CONFIG_ERROR(Config(R"("binds": [{"source": "usr"}])"),
                      "profiles.x.binds[0].source: 'usr' must be an absolute host path");
  EXPECT_CONFIG_ERROR(Config(R"("binds": [{"source": "/nonexistent/cubicle-test"}])"),
                      "profiles.x.binds[0].source: /nonexistent/cubicle-test: ENOENT");
  EXPECT_CONFIG_ERROR(Config(R"("binds": [{"source": "/usr", "dest": "/"}])"), "profiles.x.binds[0].dest: '/'");
  EXPECT_CONFIG_ERROR(Config(R"("binds": [{"dest": "/a"}])"), "profiles.x.binds[0]: a bind needs a source");
  EXPECT_CONFIG_ERROR(Config(R"("tmpfs": [{"size": "1M"}])"), "profiles.x.tmpfs[0]: a tmpfs needs a dest");
  EXPECT_CONFIG_ERROR(Config(R"("tmpfs": [{"dest": "/a", "mode": "0999"}])"),
                      "profiles.x.tmpfs[0].mode: '0999' is not an octal mode");
}

TEST(ParseConfigErrors, LimitsAboveTheCeiling) {
  std::string ceilings = R"("ceilings": {"memory": "1G", "pids": 100, "cpus": 1})";
  EXPECT_CONFIG_ERROR(Config(R"("limits": {"memory": "2G"})", ceilings),
                      "profiles.x.limits.memory: 2147483648 (2 GiB) exceeds the ceiling 1073741824 (1 GiB) "
                      "(ceilings.memory)");
  EXPECT_CONFIG_ERROR(Config(R"("limits": {"pids": 101})", ceilings),
                      "profiles.x.limits.pids: 101 exceeds the ceiling 100 (ceilings.pids)");
  EXPECT_CONFIG_ERROR(Config(R"("limits": {"cpus": 1.5})", ceilings),
                      "profiles.x.limits.cpus: 1.5 exceeds the ceiling 1 (ceilings.cpus)");
  EXPECT_CONFIG_ERROR(Config(R"("timeout_ms": 1000, "max_timeout_ms": 700000)"),
                      "profiles.x.max_timeout_ms: 700000 exceeds the ceiling 600000 (ceilings.timeout_ms)");
  EXPECT_CONFIG_ERROR(Config(R"("output_bytes": "32M")"),
                      "profiles.x.output_bytes: 33554432 (32 MiB) exceeds the ceiling 16777216 (16 MiB)");
}

TEST(ParseConfigErrors, LimitsTheKernelWouldRefuse) {
  EXPECT_CONFIG_ERROR(Config(R"("limits": {"memory": 4096})"),
                      "profiles.x.limits: memory_max: 4096 (4 KiB) is below");
  EXPECT_CONFIG_ERROR(Config(R"("limits": {"memory": "64M", "memory_high": "128M"})"),
                      "profiles.x.limits: memory_high: 134217728 (128 MiB) is above memory_max");
  EXPECT_CONFIG_ERROR(Config(R"("limits": {"cpus": 100000})"), "profiles.x.limits: cpus: 100000 exceeds the");
  EXPECT_CONFIG_ERROR(Config(R"("limits": {"cpu_weight": 0})"),
                      "profiles.x.limits.cpu_weight: 0 is outside [1, 10000]");
  EXPECT_CONFIG_ERROR(Config(R"("limits": {"memory": "64M"}, "breakers": {"memory": "64M"})"),
                      "profiles.x.breakers.memory: 67108864 (64 MiB) must be below the memory limit");
  EXPECT_CONFIG_ERROR(Config(R"("breakers": {"cpu": 0})"), "profiles.x.breakers.cpu: 0 must be positive");
}

TEST(ParseConfigErrors, PoolBounds) {
  std::string json = absl::StrReplaceAll(
      DefaultConfigJson(), {{R"("min_idle": 2, "max_idle": 4)", R"("min_idle": 5, "max_idle": 2)"}});
  EXPECT_CONFIG_ERROR(json, "profiles.shell.pool: min_idle 5 exceeds max_idle 2");
  EXPECT_CONFIG_ERROR(Config(R"("pool": {"max_idle": 9, "max_total": 8})"),
                      "profiles.x.pool: max_idle 9 exceeds max_total 8");
  EXPECT_CONFIG_ERROR(Config(R"("pool": {"max_total": 0})"), "profiles.x.pool.max_total: 0 is outside [1, 65536]");
  EXPECT_CONFIG_ERROR(Config(R"("pool": {"max_age_s": -3})"), "profiles.x.pool.max_age_s: -3 must be positive");
}

TEST(ParseConfigErrors, TimeoutsOutOfOrder) {
  EXPECT_CONFIG_ERROR(Config(R"("timeout_ms": 400000, "max_timeout_ms": 300000)"),
                      "profiles.x.timeout_ms: 400000 exceeds max_timeout_ms 300000");
  EXPECT_CONFIG_ERROR(Config(R"("timeout_ms": 0)"), "profiles.x.timeout_ms: 0 is outside [1, ");
}

TEST(ParseConfigErrors, InvalidJsonGivesLineAndColumn) {
  EXPECT_CONFIG_ERROR("{\n  \"profiles\": {\n    \"x\": {,}\n  }\n}", "invalid JSON at line 3, column 11: ");
  EXPECT_CONFIG_ERROR("{\"profiles\": {}", "invalid JSON at line 1, column 16");
  EXPECT_CONFIG_ERROR("", "invalid JSON at line 1, column 1");
  EXPECT_CONFIG_ERROR("{} {}", "invalid JSON at line 1, column 4");
  EXPECT_CONFIG_ERROR("{} // a comment\n x", "invalid JSON at line 2, column 2: extra data");
  EXPECT_TRUE(ParseConfig(absl::StrCat(DefaultConfigJson(), " /* trailing */ \n\n")).ok());
  EXPECT_CONFIG_ERROR("[1, 2]", "(top level): expected an object, got an array");
}

TEST(ParseConfigErrors, WrongTypes) {
  EXPECT_CONFIG_ERROR(Config(R"("uid": "1000")"), "profiles.x.uid: expected a whole number, got '1000'");
  EXPECT_CONFIG_ERROR(Config(R"("uid": -1)"), "profiles.x.uid: -1 is negative");
  EXPECT_CONFIG_ERROR(Config(R"("uid": 4294967295)"), "profiles.x.uid: 4294967295 is outside [0, 4294967294]");
  EXPECT_CONFIG_ERROR(Config(R"("limits": {"pids": 1.5})"),
                      "profiles.x.limits.pids: expected a whole number, got 1.5");
  EXPECT_CONFIG_ERROR(Config(R"("limits": {"cpus": "2"})"), "profiles.x.limits.cpus: expected a number, got '2'");
  EXPECT_CONFIG_ERROR(Config(R"("hostname": 5)"), "profiles.x.hostname: expected a string, got 5");
  EXPECT_CONFIG_ERROR(Config(R"("binds": {"source": "/usr"})"),
                      "profiles.x.binds: expected an array, got an object");
  EXPECT_CONFIG_ERROR(Config(R"("binds": ["/usr"])"), "profiles.x.binds[0]: expected an object, got '/usr'");
  EXPECT_CONFIG_ERROR(Config(R"("binds": [{"source": "/usr", "readonly": "yes"}])"),
                      "profiles.x.binds[0].readonly: expected true or false, got 'yes'");
  EXPECT_CONFIG_ERROR(Config(R"("env": {"A": 1})"), "profiles.x.env.A: expected a string, got 1");
  EXPECT_CONFIG_ERROR(Config(R"("limits": null)"), "profiles.x.limits: expected an object, got null");
  EXPECT_CONFIG_ERROR(Config(R"("timeout_ms": 1.5)"), "profiles.x.timeout_ms: expected a whole number, got 1.5");
  EXPECT_CONFIG_ERROR(Config(R"("uid": 1e20)"), "profiles.x.uid: 1e+20 is outside [0, 4294967294]");
  EXPECT_CONFIG_ERROR(Config(R"("tmp_size": 1.5)"), "profiles.x.tmp_size: 1.5 is not a size");
  EXPECT_CONFIG_ERROR(Config("", R"("socket": {"mode": 600})"),
                      "socket.mode: expected an octal mode string like \"0600\", got 600");
  EXPECT_CONFIG_ERROR(Config("", R"("concurrency": {"max_concurrent": "8"})"),
                      "concurrency.max_concurrent: expected a whole number, got '8'");
  EXPECT_CONFIG_ERROR(R"({"profiles": []})", "profiles: expected an object of NAME: profile, got an array");
  EXPECT_CONFIG_ERROR(Config(R"("interpreter": {"argv": "python3"})"),
                      "profiles.x.interpreter.argv: expected an array of strings, got 'python3'");
  EXPECT_CONFIG_ERROR(Config(R"("rlimits": {"nofile": "many"})"),
                      "profiles.x.rlimits.nofile: expected a whole number or \"unlimited\", got 'many'");
  EXPECT_CONFIG_ERROR(Config(R"("interpreter": {"argv": ["python3"], "template": "no"})"),
                      "profiles.x.interpreter.template: expected true or false, got 'no'");
}

TEST(ParseConfig, AWarmInterpreterUsesATemplateUnlessItSaysNot) {
  absl::StatusOr<DaemonConfig> shared = ParseConfig(Config(R"("interpreter": {"argv": ["python3", "-I"]})"));
  ASSERT_TRUE(shared.ok()) << shared.status();
  ASSERT_TRUE(shared->profiles.at("x").pool.zygote.interpreter.has_value());
  EXPECT_TRUE(shared->profiles.at("x").pool.zygote.interpreter->from_template);
  absl::StatusOr<DaemonConfig> own =
      ParseConfig(Config(R"("interpreter": {"argv": ["python3", "-I"], "template": false})"));
  ASSERT_TRUE(own.ok()) << own.status();
  ASSERT_TRUE(own->profiles.at("x").pool.zygote.interpreter.has_value());
  EXPECT_FALSE(own->profiles.at("x").pool.zygote.interpreter->from_template);
}

TEST(ParseConfigErrors, OtherProblems) {
  EXPECT_CONFIG_ERROR("{}", "profiles: missing: at least one profile is needed");
  EXPECT_CONFIG_ERROR(R"({"profiles": {}})", "profiles: at least one profile is needed");
  EXPECT_CONFIG_ERROR(R"({"profiles": {"a b": {}}})", "profiles.a b: a profile name is 1 to 64 letters");
  EXPECT_CONFIG_ERROR(Config("", R"("socket": {"path": "rel.sock"})"),
                      "socket.path: 'rel.sock' must be an absolute path");
  EXPECT_CONFIG_ERROR(Config("", absl::StrCat(R"("socket": {"path": "/)", std::string(120, 'a'), R"("})")),
                      "bytes a Unix socket address holds");
  EXPECT_CONFIG_ERROR(Config("", R"("socket": {"mode": "01777"})"), "socket.mode: '01777' is not an octal mode");
  EXPECT_CONFIG_ERROR(Config("", R"("concurrency": {"max_concurrent": 0})"),
                      "concurrency.max_concurrent: 0 is outside [1, 4096]");
  EXPECT_CONFIG_ERROR(Config("", R"("ceilings": {"memory": 1000})"), "ceilings: memory_max: 1000 bytes is below");
  EXPECT_CONFIG_ERROR(Config(R"("env": {"A=B": "c"})"), "profiles.x.env.A=B: an environment name");
  EXPECT_CONFIG_ERROR(Config(R"("rlimits": {"nofile": {"soft": 10, "hard": 5}})"),
                      "profiles.x.rlimits.nofile: the soft limit exceeds the hard limit");
  EXPECT_CONFIG_ERROR(Config(R"("rlimits": {"nofile": {"soft": 10}})"), "profiles.x.rlimits.nofile: needs both");
  EXPECT_CONFIG_ERROR(Config(R"("interpreter": {"preload": ["json"]})"),
                      "profiles.x.interpreter: an interpreter needs an argv");
  EXPECT_CONFIG_ERROR(Config(R"("interpreter": {"argv": []})"),
                      "profiles.x.interpreter.argv: must name the interpreter");
  EXPECT_CONFIG_ERROR(Config(R"("interpreter": {"argv": ["python3"], "preload": ["json", "os;import sys"]})"),
                      "profiles.x.interpreter.preload[1]: 'os;import sys' is not a module name");
  EXPECT_CONFIG_ERROR(Config(R"("hostname": "a b")"), "profiles.x: hostname 'a b'");
}

TEST(ParseConfig, WholeNumbersMayBeWrittenAsJsonAllows) {
  absl::StatusOr<DaemonConfig> config = ParseConfig(Config(R"("timeout_ms": 1e3, "uid": 7.0, "tmp_size": 1e6)"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->profiles.at("x").default_timeout, absl::Seconds(1));
  EXPECT_EQ(config->profiles.at("x").spec.uid, 7u);
}

TEST(ParseConfig, RlimitsUnlimitedAndEnvAdded) {
  absl::StatusOr<DaemonConfig> config =
      ParseConfig(Config(R"("rlimits": {"core": "unlimited"}, "env": {"LANG": "C", "TZ": "UTC"})"));
  ASSERT_TRUE(config.ok()) << config.status();
  const runtime::SandboxSpec& spec = config->profiles.at("x").spec;
  bool found = false;
  for (const runtime::RlimitSpec& r : spec.rlimits) {
    if (r.resource == RLIMIT_CORE) {
      found = true;
      EXPECT_EQ(r.soft, RLIM_INFINITY);
      EXPECT_EQ(r.hard, RLIM_INFINITY);
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(spec.env.back(), "TZ=UTC");
  EXPECT_NE(std::find(spec.env.begin(), spec.env.end(), "LANG=C"), spec.env.end());
  EXPECT_EQ(std::find(spec.env.begin(), spec.env.end(), "LANG=C.UTF-8"), spec.env.end());
}

// ---------------------------------------------------------------------------
// LoadConfig.

class LoadConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cubicle-config-test-XXXXXX";
    int fd = ::mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    ::close(fd);
    path_ = tmpl;
  }
  void TearDown() override { ::unlink(path_.c_str()); }
  void Write(const std::string& text) {
    FILE* f = std::fopen(path_.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  std::string path_;
};

TEST_F(LoadConfigTest, ReadsAFile) {
  Write(DefaultConfigJson());
  absl::StatusOr<DaemonConfig> config = LoadConfig(path_);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->profiles.size(), DefaultConfig()->profiles.size());
  EXPECT_GE(config->profiles.size(), 2u);  // shell, python, and r where the host has R
}

TEST_F(LoadConfigTest, ErrorsNameTheFile) {
  Write("{\n  \"profiles\": {\"x\": {\"uid\": \"a\"}}\n}\n");
  absl::StatusOr<DaemonConfig> config = LoadConfig(path_);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message(),
            absl::StrCat("config ", path_, ": profiles.x.uid: expected a whole number, got 'a'"));
}

TEST_F(LoadConfigTest, MissingFileGivesTheErrno) {
  absl::StatusOr<DaemonConfig> config = LoadConfig("/nonexistent/cubicle.json");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound) << config.status();
  EXPECT_NE(config.status().message().find("config /nonexistent/cubicle.json: ENOENT"), std::string::npos)
      << config.status();
}

// ---------------------------------------------------------------------------
// TightenLimits.

cgroups::Limits ProfileLimits() {
  cgroups::Limits l;
  l.memory_max = 256 << 20;
  l.memory_high = 200 << 20;
  l.pids_max = 64;
  l.cpus = 1;
  return l;
}

TEST(TightenLimits, TakesTheElementWiseMinimum) {
  cgroups::Limits request;
  request.memory_max = 128 << 20;
  request.pids_max = 64;  // equal is allowed
  absl::StatusOr<cgroups::Limits> out = TightenLimits(ProfileLimits(), request);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->memory_max, 128u << 20);
  EXPECT_EQ(out->memory_high, 128u << 20);  // held at or below the new memory_max
  EXPECT_EQ(out->pids_max, 64u);
  EXPECT_EQ(out->cpus, 1.0);  // unset in the request: the profile's
}

TEST(TightenLimits, AnEmptyRequestKeepsTheProfile) {
  absl::StatusOr<cgroups::Limits> out = TightenLimits(ProfileLimits(), {});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, ProfileLimits());
}

TEST(TightenLimits, LoosingIsRefusedNamingEachField) {
  cgroups::Limits request;
  request.memory_max = 1 << 30;
  absl::StatusOr<cgroups::Limits> out = TightenLimits(ProfileLimits(), request);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "memory: 1073741824 (1 GiB) exceeds the profile's 268435456 (256 MiB)");

  request.pids_max = 65;
  request.cpus = 1.5;
  out = TightenLimits(ProfileLimits(), request);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(),
            "memory: 1073741824 (1 GiB) exceeds the profile's 268435456 (256 MiB); "
            "pids: 65 exceeds the profile's 64; cpus: 1.5 exceeds the profile's 1");
}

TEST(TightenLimits, UnsetInTheProfileMeansAnyValidValue) {
  cgroups::Limits request;
  request.cpu_weight = 500;
  cgroups::IoLimit io;
  io.major = 8;
  io.minor = 0;
  io.read_bps = 1 << 20;
  request.io.push_back(io);
  absl::StatusOr<cgroups::Limits> out = TightenLimits(ProfileLimits(), request);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->cpu_weight, 500u);
  ASSERT_EQ(out->io.size(), 1u);
  EXPECT_EQ(out->io[0].read_bps, 1u << 20);

  request.cpu_weight = 20000;  // outside what the kernel takes
  out = TightenLimits(ProfileLimits(), request);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("cpu_weight: 20000 is outside"), std::string::npos) << out.status();
}

TEST(TightenLimits, IoPerDevice) {
  cgroups::Limits profile;
  cgroups::IoLimit cap;
  cap.major = 8;
  cap.minor = 0;
  cap.write_bps = 10 << 20;
  profile.io.push_back(cap);
  cgroups::Limits request;
  cgroups::IoLimit want = cap;
  want.write_bps = 20 << 20;
  request.io.push_back(want);
  absl::StatusOr<cgroups::Limits> out = TightenLimits(profile, request);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(), "io 8:0 wbps: 20971520 exceeds the profile's 10485760");
  request.io[0].write_bps = 1 << 20;
  request.io[0].read_iops = 100;
  out = TightenLimits(profile, request);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->io.size(), 1u);
  EXPECT_EQ(out->io[0].write_bps, 1u << 20);
  EXPECT_EQ(out->io[0].read_iops, 100u);
}

TEST(TightenLimits, TighteningBelowTheKernelsFloorIsRefused) {
  cgroups::Limits request;
  request.memory_max = 4096;
  absl::StatusOr<cgroups::Limits> out = TightenLimits(ProfileLimits(), request);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("memory_max: 4096 (4 KiB) is below the minimum"), std::string::npos)
      << out.status();
}

// A request's "unlimited" loosens a profile's limit (refused), and changes
// nothing where the profile has none.
TEST(TightenLimits, UnlimitedInARequestIsLooseningWhereTheProfileLimits) {
  std::vector<std::string> unlimited;
  absl::StatusOr<cgroups::Limits> asked =
      ParseRequestLimits(boost::json::parse(R"({"memory": "unlimited", "pids": "unlimited"})"), "params.limits",
                         &unlimited);
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_EQ(unlimited, (std::vector<std::string>{"memory", "pids"}));
  absl::StatusOr<cgroups::Limits> out = TightenLimits(ProfileLimits(), *asked, unlimited);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(),
            "memory: unlimited exceeds the profile's 268435456 (256 MiB); pids: unlimited exceeds the profile's 64");
  out = TightenLimits(cgroups::Limits{}, *asked, unlimited);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->empty());
}

TEST(ParseRequestLimits, TheProfilesKeysNamedUnderTheRequestsPath) {
  absl::StatusOr<cgroups::Limits> ok = ParseRequestLimits(boost::json::parse(R"({"memory": "64M", "pids": 8})"), "params.limits");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->memory_max, uint64_t{64} << 20);
  EXPECT_EQ(ok->pids_max, 8u);
  absl::StatusOr<cgroups::Limits> bad = ParseRequestLimits(boost::json::parse(R"({"memory": "12Q"})"), "params.limits");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "params.limits.memory")) << bad.status();
  absl::StatusOr<cgroups::Limits> unknown = ParseRequestLimits(boost::json::parse(R"({"swap": "1G"})"), "params.limits");
  ASSERT_FALSE(unknown.ok());
  EXPECT_TRUE(absl::StrContains(unknown.status().message(), "swap")) << unknown.status();
  EXPECT_FALSE(ParseRequestLimits(boost::json::parse("[1]"), "params.limits").ok());
}

TEST(WorkspaceRoots, MustBeExistingAbsoluteDirectoriesAndAreResolved) {
  absl::StatusOr<DaemonConfig> ok = ParseConfig(R"({"workspace_roots": ["/tmp/../tmp"], "profiles": {"x": {}}})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->workspace_roots, (std::vector<std::string>{"/tmp"}));
  absl::StatusOr<DaemonConfig> rel = ParseConfig(R"({"workspace_roots": ["tmp"], "profiles": {"x": {}}})");
  ASSERT_FALSE(rel.ok());
  EXPECT_TRUE(absl::StrContains(rel.status().message(), "workspace_roots[0]")) << rel.status();
  EXPECT_FALSE(ParseConfig(R"({"workspace_roots": ["/no/such/dir"], "profiles": {"x": {}}})").ok());
}

}  // namespace
}  // namespace cubicle::rpc
