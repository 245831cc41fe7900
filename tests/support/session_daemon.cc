#include "tests/support/session_daemon.h"

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json/serialize.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace cubicle::test_support {

namespace json = boost::json;

std::string Quoted(const std::string& s) { return json::serialize(json::value(s)); }

int64_t ErrorCode(const json::value& reply) {
  if (!reply.is_object() || !reply.as_object().contains("error")) return 0;
  return reply.at("error").at("code").as_int64();
}

std::string ErrorMessage(const json::value& reply) {
  if (ErrorCode(reply) == 0) return "";
  return std::string(reply.at("error").at("message").as_string());
}

bool HasResult(const json::value& reply) { return reply.is_object() && reply.as_object().contains("result"); }

std::string Str(const json::value& v) { return v.is_string() ? std::string(v.as_string()) : json::serialize(v); }

std::string Sha256Hex(const std::string& data) {
  ProcessRun run = RunProcess({"/usr/bin/sha256sum"}, data);
  return std::string(absl::StripAsciiWhitespace(run.out.substr(0, run.out.find(' '))));
}

std::string B64(const std::string& data) { return absl::Base64Escape(data); }

std::string Unb64(const json::value& v) {
  std::string out;
  if (!v.is_string() || !absl::Base64Unescape(std::string(v.as_string()), &out)) return "<not base64>";
  return out;
}

std::vector<std::string> MountsUnder(const std::string& dir) {
  std::vector<std::string> found;
  for (const std::string& line : Lines(ReadFile("/proc/self/mountinfo"))) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    if (fields.size() > 4 && absl::StartsWith(fields[4], dir + "/")) found.push_back(fields[4]);
  }
  return found;
}

std::vector<std::string> WorkspaceMountsUnder(const std::string& dir) {
  std::vector<std::string> found;
  for (const std::string& line : Lines(ReadFile("/proc/self/mountinfo"))) {
    if (!absl::StrContains(line, "cubicle-workspace")) continue;
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    if (fields.size() > 4 && absl::StartsWith(fields[4], dir + "/")) found.push_back(fields[4]);
  }
  return found;
}

std::string SessionConfig(const std::string& sessions) {
  return absl::StrCat(R"({"profiles": {"shell": {"limits": {"memory": "256M", "pids": 64},)",
                      R"("pool": {"min_idle": 1, "max_idle": 1, "max_total": 4}}})",
                      sessions.empty() ? "" : absl::StrCat(R"(, "sessions": {)", sessions, "}"), "}");
}

void SessionDaemonTest::SetUp() {
  HostHygieneTest::SetUp();
  if (RootOnly() && !IsRoot()) GTEST_SKIP() << "each session's workspace is a tmpfs the daemon mounts: root only";
  if (IsRoot()) {
    EnterPrivateMountNamespace();
    if (HasFatalFailure()) return;
  }
  state_ = dir_.Join("state");
  ASSERT_EQ(::mkdir(state_.c_str(), 0700), 0);
}

void SessionDaemonTest::TearDown() {
  // Sessions a failure left are destroyed through the daemon that holds
  // them; then every daemon stops (SIGTERM), and what is still mounted (a
  // killed daemon's workspaces) is unmounted before dir_ is removed.
  for (auto& d : daemons_) {
    if (!d->up() || !d->process().started()) continue;
    DaemonClient c(d->socket());
    if (!c.connected()) continue;  // stopped by the test already
    json::value list = c.CallJson(RequestLine(1, "session.list", "{}"));
    if (HasResult(list)) {
      for (const json::value& s : list.at("result").at("sessions").as_array()) {
        const std::string destroy =
            RequestLine(2, "session.destroy",
                        absl::StrCat(R"({"archive":false,"session":)", Quoted(Str(s.at("session"))), "}"));
        // -32000 while the lease of a call already answered is still being
        // let go (a few ms after its reply): asked again, at most 5 s.
        for (int i = 0; i < 250 && ErrorCode(c.CallJson(destroy)) == -32000; ++i) absl::SleepFor(absl::Milliseconds(20));
      }
    }
  }
  for (auto& d : daemons_) {
    if (!d->process().started()) continue;
    d->Stop();
  }
  daemons_.clear();
  if (IsRoot()) {
    EXPECT_EQ(WorkspaceMountsUnder(dir_.path()), std::vector<std::string>{})
        << "a workspace's tmpfs outlived its session";
    std::vector<std::string> left = MountsUnder(dir_.path());
    for (auto it = left.rbegin(); it != left.rend(); ++it) ::umount2(it->c_str(), MNT_DETACH);
  }
  HostHygieneTest::TearDown();
}

SocketDaemon& SessionDaemonTest::StartDaemon(const std::string& config, const std::vector<std::string>& flags) {
  config_ = WriteConfig(dir_, config);
  std::vector<std::string> all = {"--config", config_};
  all.insert(all.end(), flags.begin(), flags.end());
  daemons_.push_back(std::make_unique<SocketDaemon>(all));
  return *daemons_.back();
}

std::string SessionDaemonTest::StateMembers(const std::string& more) const {
  return absl::StrCat(R"("state_dir": )", Quoted(state_), more.empty() ? "" : ", ", more);
}

json::value SessionDaemonTest::Call(DaemonClient& c, const std::string& method, const std::string& params) {
  return c.CallJson(RequestLine(++next_id_, method, params));
}

json::value SessionDaemonTest::Exec(DaemonClient& c, const std::string& session, const std::string& script,
                                    const std::string& more) {
  return Call(c, "session.exec",
              absl::StrCat(R"({"session":)", Quoted(session), R"(,"argv":["sh","-c",)", Quoted(script), "]", more,
                           "}"));
}

json::value SessionDaemonTest::Create(DaemonClient& c, const std::string& session, const std::string& more) {
  return Call(c, "session.create", absl::StrCat(R"({"session":)", Quoted(session), more, "}"));
}

json::value SessionDaemonTest::Get(DaemonClient& c, const std::string& session, const std::string& path) {
  return Call(c, "files.get", absl::StrCat(R"({"session":)", Quoted(session), R"(,"path":)", Quoted(path), "}"));
}

json::value SessionDaemonTest::Put(DaemonClient& c, const std::string& session, const std::string& path,
                                   const std::string& data) {
  return Call(c, "files.put",
              absl::StrCat(R"({"session":)", Quoted(session), R"(,"path":)", Quoted(path), R"(,"data":)",
                           Quoted(B64(data)), "}"));
}

json::value SessionDaemonTest::Destroy(DaemonClient& c, const std::string& session, bool archive) {
  return Call(c, "session.destroy",
              absl::StrCat(R"({"session":)", Quoted(session), R"(,"archive":)", archive ? "true" : "false", "}"));
}

}  // namespace cubicle::test_support
