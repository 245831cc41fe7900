// A `cubicle serve` with a state directory, from a test: the fixture that
// starts daemons on it and cleans up after them, and the helpers that make
// session, files and exec requests and read their replies
// (tests/integration/session_test.cc, session_records_test.cc).
//
// As root each workspace is a tmpfs the daemon mounts under the state
// directory: the test enters a mount namespace of its own first, so those
// mounts (which outlive a daemon by design) are never in the mount table
// that tests in other processes compare; TearDown unmounts whatever a
// failure left before the state directory is removed. Rootless, a
// workspace is a plain directory and nothing is mounted.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <boost/json/value.hpp>

#include "tests/support/daemon_client.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {

// `s` as a JSON string literal.
std::string Quoted(const std::string& s);
// A reply's error code (0 when it has none) and message ("" then).
int64_t ErrorCode(const boost::json::value& reply);
std::string ErrorMessage(const boost::json::value& reply);
bool HasResult(const boost::json::value& reply);
// A string's text; anything else serialized.
std::string Str(const boost::json::value& v);
// The lowercase hex SHA-256 of `data`, by sha256sum(1): not the daemon's code.
std::string Sha256Hex(const std::string& data);
std::string B64(const std::string& data);
// A base64 string decoded; "<not base64>" when it is not one.
std::string Unb64(const boost::json::value& v);
// Mount points below `dir` in this process's mount table.
std::vector<std::string> MountsUnder(const std::string& dir);
// cubicle-workspace tmpfs mounts (their mount points) below `dir`.
std::vector<std::string> WorkspaceMountsUnder(const std::string& dir);

// A daemon's config: one profile, "shell", with limits (so that every
// sandbox has a cgroup) and a small pool; `sessions` the members of the
// "sessions" object (without braces), omitted when empty.
std::string SessionConfig(const std::string& sessions);

// Daemons on one state directory (STATE, in a temporary directory this
// test's user owns), stopped and cleaned up after by TearDown. Root only
// unless a subclass says otherwise (RootOnly).
class SessionDaemonTest : public HostHygieneTest {
 protected:
  void SetUp() override;
  void TearDown() override;
  // Whether the test needs root (skipped, saying why, when not).
  virtual bool RootOnly() const { return true; }

  // A daemon on `config` (the text of config.json) with `flags` too, kept
  // until TearDown.
  SocketDaemon& StartDaemon(const std::string& config, const std::vector<std::string>& flags = {});
  // `"state_dir": STATE` and `more` members, for SessionConfig.
  std::string StateMembers(const std::string& more = "") const;
  // One request on `c`, the reply parsed (null when none came).
  boost::json::value Call(DaemonClient& c, const std::string& method, const std::string& params);
  // The session.exec of `script` (sh -c) in `session`; its reply.
  boost::json::value Exec(DaemonClient& c, const std::string& session, const std::string& script,
                          const std::string& more = "");
  boost::json::value Create(DaemonClient& c, const std::string& session, const std::string& more = "");
  boost::json::value Get(DaemonClient& c, const std::string& session, const std::string& path);
  boost::json::value Put(DaemonClient& c, const std::string& session, const std::string& path,
                         const std::string& data);
  boost::json::value Destroy(DaemonClient& c, const std::string& session, bool archive);

  TempDir dir_;
  std::string state_;
  std::string config_;
  std::vector<std::unique_ptr<SocketDaemon>> daemons_;
  int64_t next_id_ = 0;
};

}  // namespace cubicle::test_support
