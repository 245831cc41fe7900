// What the fixtures that drive one `cubicle serve` over its socket share
// (skills_fixture.h, environments_test.cc): the daemon, numbered calls,
// reload, pool polling, its log, and its end after each test. In an
// anonymous namespace: each test file has its own copy.
#pragma once

#include <signal.h>

#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "tests/support/daemon_client.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/session_daemon.h"

namespace cubicle::test_support {
namespace {

class DaemonFixture : public HostHygieneTest {
 protected:
  void TearDown() override {
    if (daemon_ != nullptr && daemon_->process().started()) daemon_->Stop();
    daemon_.reset();
    HostHygieneTest::TearDown();
  }

  boost::json::value Call(const std::string& method, const std::string& params) {
    return daemon_->Call(RequestLine(++id_, method, params));
  }
  boost::json::value Result(const std::string& method, const std::string& params) {
    boost::json::value reply = Call(method, params);
    EXPECT_TRUE(HasResult(reply)) << method << " " << params << ": " << boost::json::serialize(reply);
    return HasResult(reply) ? reply.at("result") : boost::json::value(nullptr);
  }

  // SIGHUP, then the daemon's "reloads" once it has counted this one.
  bool Reload() {
    auto count = [&] {
      boost::json::value h = Result("health", "");
      return h.is_object() ? h.at("reloads").at("ok").as_int64() + h.at("reloads").at("refused").as_int64() : -1;
    };
    const int64_t before = count();
    daemon_->process().Signal(SIGHUP);
    for (int i = 0; i < 3000; ++i) {  // at most 30 s
      if (count() > before) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  // Polls (at most 30 s) until `pool` holds `idle` zygotes and builds none.
  bool Quiet(const std::string& pool, int64_t idle) {
    for (int i = 0; i < 3000; ++i) {
      boost::json::value p = PoolStats(pool);
      if (p.is_object() && p.at("idle").as_int64() >= idle && p.at("building").as_int64() == 0) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }
  boost::json::value PoolStats(const std::string& pool) {
    boost::json::value stats = Result("pool.stats", "");
    return stats.is_object() ? stats.at("pools").at(pool) : boost::json::value(nullptr);
  }

  std::string Log() { return daemon_->process().StderrSoFar(); }

  std::unique_ptr<SocketDaemon> daemon_;
  int64_t id_ = 0;
};

}  // namespace
}  // namespace cubicle::test_support
