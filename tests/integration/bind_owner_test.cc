// Binds whose source's host owner shows as the sandbox user (`--bind-owner`,
// `--ro-bind-owner`, a profile bind's "owner": "sandbox"): an idmapped
// mount made on the host, so a root-owned 0700 directory (any mktemp -d)
// can be handed to the sandbox user on purpose, read-only or writable, on
// the cold path and from a pooled zygote. Rootless, the caller's own source
// needs no idmap; another's is refused, naming the bind.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/support/daemon_client.h"
#include "tests/support/host_probes.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

// The caller's private directory, as mktemp -d makes it (0700), holding a
// file only its owner may read (0600).
class PrivateDir {
 public:
  PrivateDir() {
    EXPECT_EQ(::chmod(dir_.path().c_str(), 0700), 0);
    EXPECT_TRUE(WriteFile(dir_.Join("f"), "secret\n"));
    EXPECT_EQ(::chmod(dir_.Join("f").c_str(), 0600), 0);
  }
  const std::string& path() const { return dir_.path(); }
  std::string Join(absl::string_view name) const { return dir_.Join(name); }

 private:
  TempDir dir_;
};

ProcessRun RunScript(const std::vector<std::string>& flags, const std::string& script) {
  std::vector<std::string> args = {"run"};
  args.insert(args.end(), flags.begin(), flags.end());
  for (const char* a : {"--", "/bin/sh", "-c"}) args.push_back(a);
  args.push_back(script);
  ProcessRun run = RunCubicle(args);
  EXPECT_FALSE(run.timed_out) << "cubicle did not finish: " << run.err;
  return run;
}

class CoreBindOwner : public HostHygieneTest {};

// Root or not, a directory the caller owns shows as the sandbox user's:
// rootless its owner is the sandbox's host user already (nothing to map);
// as root it is idmapped.
TEST_F(CoreBindOwner, TheCallersOwnPrivateDirectoryIsReadable) {
  PrivateDir dir;
  if (IsRoot()) REQUIRE_HOST(IdmappedMounts(dir.path()));
  ProcessRun run = RunScript({"--ro-bind-owner", dir.path(), "/data"}, "stat -c '%u %a' /data /data/f; cat /data/f");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "1000 700\n1000 600\nsecret\n") << run.err;
}

// Rootless, another's source cannot be shown as the sandbox user (an
// idmapped mount needs root): refused naming the bind, never a plain bind.
TEST_F(CoreBindOwner, RootlessAnothersSourceIsRefusedNamingTheBind) {
  if (IsRoot()) GTEST_SKIP() << "as root another's source is idmapped";
  struct stat st;
  ASSERT_EQ(::stat("/usr", &st), 0);
  if (st.st_uid == ::geteuid()) GTEST_SKIP() << "/usr is the caller's own here";
  ProcessRun run = RunScript({"--ro-bind-owner", "/usr", "/u"}, "true");
  EXPECT_EQ(run.exit_code, 125) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "bind /usr at /u")) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "rootless")) << run.err;
}

// As root: a root-owned 0700 directory holding a root-owned 0600 file.
class BindOwnerAsRoot : public HostHygieneTest {
 protected:
  void SetUp() override {
    HostHygieneTest::SetUp();
    if (!IsRoot()) GTEST_SKIP() << "the sandbox user differs from the source's owner only as root";
    REQUIRE_HOST(IdmappedMounts(dir_.path()));
  }
  PrivateDir dir_;
};

// The measured problem: a plain --ro-bind of a mktemp -d is unreadable to
// the sandbox user, who is not its owner.
TEST_F(BindOwnerAsRoot, APlainReadOnlyBindIsUnreadable) {
  ProcessRun run = RunScript({"--ro-bind", dir_.path(), "/data"}, "ls /data; cat /data/f");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_EQ(run.out, "");
  EXPECT_TRUE(absl::StrContains(run.err, "cannot open directory '/data': Permission denied")) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "/data/f: Permission denied")) << run.err;
}

TEST_F(BindOwnerAsRoot, ReadOnlyBindOwnerReadsButCannotWrite) {
  ProcessRun run = RunScript({"--ro-bind-owner", dir_.path(), "/data"},
                             "cat /data/f; echo x > /data/f; echo x > /data/new");
  EXPECT_EQ(run.out, "secret\n") << run.err;
  EXPECT_NE(run.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(run.err, "/data/f: Read-only file system")) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "/data/new: Read-only file system")) << run.err;
  EXPECT_EQ(ReadFile(dir_.Join("f")), "secret\n");
  struct stat st;
  EXPECT_NE(::stat(dir_.Join("new").c_str(), &st), 0) << "nothing may have been written";
}

// What the sandbox user writes through the bind belongs, on the host, to
// the source's owner (root), not to the sandbox's host uid.
TEST_F(BindOwnerAsRoot, BindOwnerWritesAsTheSourcesOwner) {
  ProcessRun run = RunScript({"--bind-owner", dir_.path(), "/data"},
                             "id -u; echo made > /data/new && stat -c '%u:%g' /data/new");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "1000\n1000:1000\n") << run.err;
  EXPECT_EQ(ReadFile(dir_.Join("new")), "made\n");
  struct stat st;
  ASSERT_EQ(::stat(dir_.Join("new").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_gid, 0u);
}

// A bind of a single file, idmapped the same way.
TEST_F(BindOwnerAsRoot, AFileSourceIsIdmappedToo) {
  ProcessRun run = RunScript({"--ro-bind-owner", dir_.Join("f"), "/etc/secret"}, "cat /etc/secret");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "secret\n");
}

// A filesystem that refuses idmapped mounts (procfs) fails the run naming
// the bind and why; no plain bind is made in its place.
TEST_F(BindOwnerAsRoot, AFilesystemWithoutIdmappedMountsIsRefusedNamingTheBind) {
  ProcessRun run = RunScript({"--ro-bind-owner", "/proc/sys", "/d"}, "echo ran");
  EXPECT_EQ(run.exit_code, 125) << run.err;
  EXPECT_EQ(run.out, "");
  EXPECT_TRUE(absl::StrContains(run.err, "bind /proc/sys at /d owned by the sandbox user")) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "EINVAL")) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "does not take idmapped mounts")) << run.err;
}

std::string Quoted(const std::string& s) { return json::serialize(json::value(s)); }

// The same through a daemon profile's binds, served by a pooled zygote:
// the idmapped trees are made when the zygote is.
TEST_F(BindOwnerAsRoot, AProfileBindWithOwnerSandboxOnThePooledPath) {
  PrivateDir rw;
  REQUIRE_HOST(IdmappedMounts(rw.path()));
  TempDir config_dir;
  const std::string config = config_dir.Join("config.json");
  {
    std::ofstream f(config);
    f << R"({"profiles": {"owned": {"pool": {"min_idle": 1, "max_idle": 1, "max_total": 2}, "binds": [)"
      << R"({"source": )" << Quoted(dir_.path()) << R"(, "dest": "/ro", "owner": "sandbox"},)"
      << R"({"source": )" << Quoted(rw.path()) << R"(, "dest": "/rw", "owner": "sandbox", "readonly": false}]}}})";
  }
  const std::string script = "cat /ro/f; echo x > /ro/new || echo ro-refused; echo made > /rw/new && echo wrote";
  SocketDaemon d({"--config", config});
  ASSERT_TRUE(d.up());
  // One call at a time: the zygote is idle before the run asks for it.
  json::value warmed = d.Call(
      R"({"jsonrpc":"2.0","id":1,"method":"pool.warm","params":{"profile":"owned","count":1,"timeout_ms":20000}})");
  ASSERT_TRUE(warmed.is_object() && warmed.at("result").at("warm").as_bool()) << json::serialize(warmed);
  json::value ran = d.Call(absl::StrCat(
      R"({"jsonrpc":"2.0","id":2,"method":"sandbox.run","params":{"profile":"owned","argv":["sh","-c",)",
      Quoted(script), "]}}"));
  json::value stats = d.Call(R"({"jsonrpc":"2.0","id":3,"method":"pool.stats"})");
  EXPECT_EQ(d.Stop().exit_code, 0);
  ASSERT_TRUE(ran.is_object() && ran.as_object().contains("result")) << json::serialize(ran);
  const json::object& result = ran.at("result").as_object();
  EXPECT_EQ(result.at("stdout").as_string(), "secret\nro-refused\nwrote\n") << json::serialize(ran);
  EXPECT_TRUE(absl::StrContains(std::string(result.at("stderr").as_string()), "Read-only file system"))
      << json::serialize(ran);
  ASSERT_TRUE(stats.is_object() && stats.as_object().contains("result")) << json::serialize(stats);
  EXPECT_EQ(stats.at("result").at("pools").at("owned").at("hits").as_int64(), 1)
      << "not served by the idle zygote: " << json::serialize(stats);
  struct stat st;
  ASSERT_EQ(::stat(rw.Join("new").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_gid, 0u);
  EXPECT_NE(::stat(dir_.Join("new").c_str(), &st), 0);
}

}  // namespace
}  // namespace cubicle::test_support
