// What the request log and metrics read off reply lines, and the metrics'
// text (rpc/request_log.h), without a daemon.
#include <boost/json/parse.hpp>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "rpc/request_log.h"
#include "sessions/ids.h"

namespace cubicle::rpc {
namespace {

TEST(RequestLog, TheOutcomeComesFromTheReplysOwnMembers) {
  Outcome run = OutcomeOf(R"({"jsonrpc":"2.0","id":1,"result":{"exit_code":3,"reason":"exited","stdout":"x"}})", true);
  EXPECT_EQ(run.Label(), "exited");
  EXPECT_EQ(run.exit_code, 3);
  EXPECT_FALSE(run.error_code.has_value());
  Outcome error = OutcomeOf(R"({"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"busy"}})", true);
  EXPECT_EQ(error.Label(), "error");
  EXPECT_EQ(error.error_code, -32000);
  // What a payload printed is escaped in the reply: never taken for a member.
  Outcome printed = OutcomeOf(
      R"({"jsonrpc":"2.0","id":1,"result":{"stdout":"\"reason\":\"oom\",\"error\":{\"code\":1}","exit_code":0,"reason":"exited"}})",
      true);
  EXPECT_EQ(printed.Label(), "exited");
  EXPECT_EQ(printed.exit_code, 0);
  // A result that is not a run's is not read for one.
  EXPECT_EQ(OutcomeOf(R"({"jsonrpc":"2.0","id":1,"result":{"reason":"mine"}})", false).Label(), "ok");
  EXPECT_EQ(OutcomeOf("", false).Label(), "ok");  // a notification's (no reply)
}

TEST(RequestLog, MetricsCountByMethodAndOutcomeAndBoundTheMethods) {
  RequestMetrics m({"sandbox.run", "health"});
  Outcome exited;
  exited.reason = "exited";
  m.Observe("sandbox.run", exited, absl::Milliseconds(3));
  m.Observe("sandbox.run", exited, absl::Milliseconds(7));
  m.Observe("no.such.method", Outcome{-32601, "", std::nullopt}, absl::Microseconds(20));
  const std::string text = m.Text();
  EXPECT_TRUE(absl::StrContains(text, "cubicle_requests_total{method=\"sandbox.run\",outcome=\"exited\"} 2\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "cubicle_requests_total{method=\"other\",outcome=\"error\"} 1\n")) << text;
  EXPECT_FALSE(absl::StrContains(text, "no.such.method")) << "a client cannot make labels";
  EXPECT_TRUE(absl::StrContains(text, "cubicle_request_duration_seconds_bucket{method=\"sandbox.run\",le=\"0.005\"} 1\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "cubicle_request_duration_seconds_bucket{method=\"sandbox.run\",le=\"0.01\"} 2\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "cubicle_request_duration_seconds_count{method=\"sandbox.run\"} 2\n")) << text;
}

TEST(RequestLog, TheLogLineNamesTheCallAndHowItEnded) {
  RequestFacts facts = FactsOf(boost::json::value(7), "session.exec",
                               boost::json::parse(R"({"session":"s1","argv":["true"]})"), 40, "agent-b");
  Outcome o;
  o.reason = "exited";
  o.exit_code = 0;
  boost::json::object line = LogFields(facts, o, absl::Milliseconds(2), 100);
  EXPECT_EQ(line.at("id"), 7);
  ASSERT_TRUE(line.at("request_id").is_string());
  EXPECT_TRUE(sessions::LooksLikeId(std::string(line.at("request_id").as_string()), 'q')) << line.at("request_id");
  EXPECT_NE(FactsOf(boost::json::value(7), "session.exec", {}, 0, "").request_id, facts.request_id)
      << "the same JSON-RPC id is a new request";
  EXPECT_EQ(line.at("method"), "session.exec");
  EXPECT_EQ(line.at("session"), "s1");
  EXPECT_EQ(line.at("client"), "agent-b");
  EXPECT_EQ(line.at("outcome"), "exited");
  EXPECT_EQ(line.at("exit_code"), 0);
  EXPECT_EQ(line.at("bytes_in"), 40);
  EXPECT_EQ(line.at("bytes_out"), 100);
  EXPECT_FALSE(line.contains("profile"));
}

}  // namespace
}  // namespace cubicle::rpc
