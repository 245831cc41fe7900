// Operator metrics in the Prometheus text exposition format (version
// 0.0.4): per pool, ready / in-use / total zygotes, hits, misses, builds,
// and the refill, hand-off and cold-start latency histograms; the daemon's
// in-flight requests and its configuration reloads; its egress gateways'
// connections by decision and rule. Served by `cubicle serve --metrics` (docs/config.md).
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include <boost/asio/ip/tcp.hpp>

#include "egress/counts.h"
#include "rpc/session_table.h"
#include "runtime/pool.h"

namespace cubicle::rpc {

struct PoolMetrics {
  runtime::PoolStats stats;
  runtime::PoolConfig config;
};

// Configuration reloads (SIGHUP) applied and refused.
struct ReloadMetrics {
  uint64_t ok = 0;
  uint64_t refused = 0;
};

// The egress gateways (egress/gateway_process.h): every connection they
// ended, gone gateways' included, and how many run now.
struct EgressMetrics {
  egress::Counts counts;
  size_t gateways = 0;
};

std::string PrometheusText(const std::map<std::string, PoolMetrics>& pools, size_t in_flight,
                           const ReloadMetrics& reloads = {}, const EgressMetrics& egress = {});

// cubicle_sessions_live, cubicle_session_archives_total{result},
// cubicle_session_restores_total{result} and their bytes: only where the
// daemon has sessions.
std::string SessionMetricsText(const SessionCounts& counts);

// Where `--metrics` sends them: "unix:PATH" (a socket answering each
// connection with an HTTP/1.0 response holding the text), "tcp:ADDR:PORT"
// (the same on a TCP address; port 0: an ephemeral one) or a file path
// (rewritten atomically every few seconds, for node_exporter's textfile
// collector). InvalidArgument for an empty or relative path or a bad
// address.
struct MetricsTarget {
  enum class Kind { kFile, kUnixSocket, kTcp };
  Kind kind = Kind::kFile;
  std::string path;                         // kFile, kUnixSocket
  boost::asio::ip::tcp::endpoint endpoint;  // kTcp
  bool listens() const { return kind != Kind::kFile; }
};
absl::StatusOr<MetricsTarget> ParseMetricsTarget(const std::string& spec);

}  // namespace cubicle::rpc
