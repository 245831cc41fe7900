// The daemon's request log (CUBICLE_LOG_LEVEL=info): one JSON line per
// answered request, for a run, an error and a scoped caller's refusal,
// read back from its stderr and parsed.
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/support/daemon_client.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

TEST(RequestLog, EachAnsweredRequestIsOneJsonLine) {
  TempDir dir;
  const std::string socket = dir.Join("rpc.sock");
  RunningProcess daemon(
      CubicleArgv({"serve", "--socket", socket, "--config",
                   WriteConfig(dir, R"({"profiles": {"shell": {"pool": {"min_idle": 1, "max_idle": 1, "max_total": 4}}}})")}),
      "", {"CUBICLE_LOG_LEVEL=info"});
  ASSERT_TRUE(daemon.started());
  std::optional<std::string> none;
  DaemonClient c(socket);
  for (int i = 0; i < 2000 && !c.connected(); ++i) {  // at most 20 s for the socket
    absl::SleepFor(absl::Milliseconds(10));
    c = DaemonClient(socket);
  }
  ASSERT_TRUE(c.connected());
  c.CallJson(RequestLine(11, "sandbox.run", R"({"argv":["sh","-c","exit 3"]})"));
  c.CallJson(RequestLine(12, "no.such"));
  c.CallJson(RequestLine(13, "session.get", R"({"session":"s9"})"));
  daemon.Signal(SIGTERM);
  ProcessRun ended = daemon.Wait();
  ASSERT_EQ(ended.exit_code, 0) << ended.err;
  std::map<int64_t, json::object> by_id;
  for (absl::string_view line : absl::StrSplit(ended.err, '\n', absl::SkipEmpty())) {
    boost::system::error_code ec;
    json::value v = json::parse(json::string_view(line.data(), line.size()), ec);
    ASSERT_FALSE(ec) << "not a JSON line: " << line;
    if (v.at("msg") != "request") continue;
    const json::object& r = v.at("request").as_object();
    if (r.at("id").is_int64()) by_id[r.at("id").as_int64()] = r;
  }
  ASSERT_EQ(by_id.count(11), 1u) << ended.err;
  EXPECT_EQ(by_id[11].at("method"), "sandbox.run");
  EXPECT_EQ(by_id[11].at("outcome"), "exited");
  EXPECT_EQ(by_id[11].at("exit_code"), 3);
  EXPECT_GT(by_id[11].at("duration_ms").as_double(), 0.0);
  EXPECT_GT(by_id[11].at("bytes_out").as_int64(), 0);
  ASSERT_EQ(by_id.count(12), 1u);
  EXPECT_EQ(by_id[12].at("outcome"), "error");
  EXPECT_EQ(by_id[12].at("error_code"), -32601);
  ASSERT_EQ(by_id.count(13), 1u);
  EXPECT_EQ(by_id[13].at("session"), "s9");
  EXPECT_EQ(by_id[13].at("outcome"), "error");
}

}  // namespace
}  // namespace cubicle::test_support
