// rpc/metrics.h: the Prometheus text exposition of the pools.
#include "rpc/metrics.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace cubicle::rpc {
namespace {

TEST(PrometheusText, GaugesCountersAndCumulativeHistogramsPerPool) {
  PoolMetrics m;
  m.stats.idle = 3;
  m.stats.in_use = 1;
  m.stats.building = 1;
  m.stats.hits = 7;
  m.stats.misses = 2;
  m.config.max_total = 16;
  m.stats.handoff.Record(absl::Microseconds(80));   // <= 0.0001
  m.stats.handoff.Record(absl::Microseconds(700));  // <= 0.001
  m.stats.handoff.Record(absl::Seconds(20));        // +Inf only
  std::string text = PrometheusText({{"shell", m}}, 4);
  EXPECT_TRUE(absl::StrContains(text, "# TYPE cubicle_pool_ready gauge\ncubicle_pool_ready{pool=\"shell\"} 3\n"));
  EXPECT_TRUE(absl::StrContains(text, "cubicle_pool_sandboxes{pool=\"shell\"} 5\n"));
  EXPECT_TRUE(absl::StrContains(text, "# TYPE cubicle_pool_hits_total counter\ncubicle_pool_hits_total{pool=\"shell\"} 7\n"));
  EXPECT_TRUE(absl::StrContains(text, "cubicle_requests_in_flight 4\n"));
  EXPECT_TRUE(absl::StrContains(text, "cubicle_pool_handoff_seconds_bucket{pool=\"shell\",le=\"5e-05\"} 0\n"));
  EXPECT_TRUE(absl::StrContains(text, "cubicle_pool_handoff_seconds_bucket{pool=\"shell\",le=\"0.0001\"} 1\n"));
  EXPECT_TRUE(absl::StrContains(text, "cubicle_pool_handoff_seconds_bucket{pool=\"shell\",le=\"0.001\"} 2\n"));
  EXPECT_TRUE(absl::StrContains(text, "cubicle_pool_handoff_seconds_bucket{pool=\"shell\",le=\"10\"} 2\n"));
  EXPECT_TRUE(absl::StrContains(text, "cubicle_pool_handoff_seconds_bucket{pool=\"shell\",le=\"+Inf\"} 3\n"));
  EXPECT_TRUE(absl::StrContains(text, "cubicle_pool_handoff_seconds_count{pool=\"shell\"} 3\n"));
  EXPECT_TRUE(absl::StrContains(text, "cubicle_pool_handoff_seconds_sum{pool=\"shell\"} 20.000780000\n"));
  // Every line is a comment or "name{labels} value".
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(line, "# ") || absl::StartsWith(line, "cubicle_")) << line;
  }
}

TEST(PrometheusText, ConfigurationReloadsByResult) {
  std::string text = PrometheusText({}, 0, ReloadMetrics{.ok = 3, .refused = 2});
  EXPECT_TRUE(absl::StrContains(text, "# TYPE cubicle_config_reloads_total counter\n"
                                      "cubicle_config_reloads_total{result=\"ok\"} 3\n"
                                      "cubicle_config_reloads_total{result=\"refused\"} 2\n"))
      << text;
}

TEST(PrometheusText, EgressConnectionsByDecisionAndRuleBytesAndGateways) {
  EgressMetrics egress;
  egress.counts.Count("allow", "connect", 500, 7000);
  egress.counts.Count("allow", "connect", 1, 2);
  egress.counts.Count("deny", "domain_allowlist", 40, 0);
  egress.counts.Count("deny", "address_class: private (RFC 1918)", 40, 0);
  egress.gateways = 2;
  std::string text = PrometheusText({}, 0, {}, egress);
  EXPECT_TRUE(absl::StrContains(text, "# TYPE cubicle_egress_connections_total counter\n"
                                      "cubicle_egress_connections_total{decision=\"allow\",rule=\"connect\"} 2\n"
                                      "cubicle_egress_connections_total{decision=\"deny\",rule=\"address_class: private (RFC 1918)\"} 1\n"
                                      "cubicle_egress_connections_total{decision=\"deny\",rule=\"domain_allowlist\"} 1\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "# TYPE cubicle_egress_bytes_total counter\n"
                                      "cubicle_egress_bytes_total{direction=\"up\"} 581\n"
                                      "cubicle_egress_bytes_total{direction=\"down\"} 7002\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "# TYPE cubicle_egress_gateways gauge\ncubicle_egress_gateways 2\n")) << text;
  // No gateway yet: the families are there, with nothing counted.
  text = PrometheusText({}, 0);
  EXPECT_TRUE(absl::StrContains(text, "# TYPE cubicle_egress_connections_total counter\n# HELP")) << text;
  EXPECT_TRUE(absl::StrContains(text, "cubicle_egress_gateways 0\n")) << text;
}

TEST(PrometheusText, LabelValuesAreEscaped) {
  std::string text = PrometheusText({{"a\"b\\c", PoolMetrics{}}}, 0);
  EXPECT_TRUE(absl::StrContains(text, "cubicle_pool_ready{pool=\"a\\\"b\\\\c\"} 0\n")) << text;
}

TEST(MetricsTarget, TcpTakesAnAddressAndAPort) {
  absl::StatusOr<MetricsTarget> tcp = ParseMetricsTarget("tcp:127.0.0.1:9464");
  ASSERT_TRUE(tcp.ok()) << tcp.status();
  EXPECT_EQ(tcp->kind, MetricsTarget::Kind::kTcp);
  EXPECT_EQ(tcp->endpoint.address().to_string(), "127.0.0.1");
  EXPECT_EQ(tcp->endpoint.port(), 9464);
  absl::StatusOr<MetricsTarget> v6 = ParseMetricsTarget("tcp:[::1]:0");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_TRUE(v6->endpoint.address().is_loopback());
  for (const char* bad : {"tcp:", "tcp:127.0.0.1", "tcp:127.0.0.1:99999", "tcp:/run/m.sock"}) {
    absl::StatusOr<MetricsTarget> t = ParseMetricsTarget(bad);
    EXPECT_FALSE(t.ok()) << bad;
    if (!t.ok()) {
      EXPECT_TRUE(absl::StrContains(t.status().message(), "--metrics")) << t.status();
    }
  }
}

TEST(PrometheusText, SessionsCountsAndBytes) {
  SessionCounts c;
  c.live = 3;
  c.archived = 2;
  c.archived_bytes = 4096;
  c.restore_failures = 1;
  const std::string text = SessionMetricsText(c);
  EXPECT_TRUE(absl::StrContains(text, "cubicle_sessions_live 3\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "cubicle_session_archives_total{result=\"ok\"} 2\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "cubicle_session_archived_bytes_total 4096\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "cubicle_session_restores_total{result=\"failed\"} 1\n")) << text;
}

TEST(MetricsTarget, SocketOrFileAbsolutePathsOnly) {
  absl::StatusOr<MetricsTarget> sock = ParseMetricsTarget("unix:/run/m.sock");
  ASSERT_TRUE(sock.ok());
  EXPECT_EQ(sock->kind, MetricsTarget::Kind::kUnixSocket);
  EXPECT_EQ(sock->path, "/run/m.sock");
  absl::StatusOr<MetricsTarget> file = ParseMetricsTarget("/var/lib/m.prom");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->kind, MetricsTarget::Kind::kFile);
  for (const char* bad : {"", "unix:", "unix:rel", "rel.prom"}) {
    absl::StatusOr<MetricsTarget> t = ParseMetricsTarget(bad);
    EXPECT_FALSE(t.ok()) << bad;
    if (!t.ok()) {
      EXPECT_TRUE(absl::StrContains(t.status().message(), "--metrics")) << t.status();
    }
  }
}

}  // namespace
}  // namespace cubicle::rpc
