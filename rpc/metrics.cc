#include "rpc/metrics.h"

#include "rpc/http_front.h"

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cubicle::rpc {
namespace {

// Label values may hold any character; the format escapes \, " and newline.
std::string Label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

void Header(std::string* out, absl::string_view name, absl::string_view type, absl::string_view help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

}  // namespace

std::string PrometheusText(const std::map<std::string, PoolMetrics>& pools, size_t in_flight,
                           const ReloadMetrics& reloads, const EgressMetrics& egress) {
  std::string out;
  Header(&out, "cubicle_requests_in_flight", "gauge", "Requests accepted and not yet answered.");
  absl::StrAppend(&out, "cubicle_requests_in_flight ", in_flight, "\n");
  Header(&out, "cubicle_config_reloads_total", "counter", "Configuration reloads (SIGHUP), applied or refused.");
  absl::StrAppend(&out, "cubicle_config_reloads_total{result=\"ok\"} ", reloads.ok, "\n");
  absl::StrAppend(&out, "cubicle_config_reloads_total{result=\"refused\"} ", reloads.refused, "\n");

  struct Gauge {
    const char* name;
    const char* type;
    const char* help;
    uint64_t (*get)(const PoolMetrics&);
  };
  static const Gauge kGauges[] = {
      {"cubicle_pool_ready", "gauge", "Zygotes built and waiting for a request.",
       [](const PoolMetrics& m) -> uint64_t { return m.stats.idle; }},
      {"cubicle_pool_building", "gauge", "Zygotes being built by refill.",
       [](const PoolMetrics& m) -> uint64_t { return m.stats.building; }},
      {"cubicle_pool_in_use", "gauge", "Executions running or waiting for a zygote.",
       [](const PoolMetrics& m) -> uint64_t { return m.stats.in_use; }},
      {"cubicle_pool_waiting", "gauge", "Misses waiting for the next zygote.",
       [](const PoolMetrics& m) -> uint64_t { return m.stats.waiting; }},
      {"cubicle_pool_sandboxes", "gauge", "Sandboxes counted against max_total (ready + building + in use).",
       [](const PoolMetrics& m) -> uint64_t {
         return m.stats.idle + m.stats.building + m.stats.in_use - m.stats.waiting;
       }},
      {"cubicle_pool_sandboxes_max", "gauge", "The pool's max_total.",
       [](const PoolMetrics& m) -> uint64_t { return m.config.max_total; }},
      {"cubicle_pool_hits_total", "counter", "Requests served by a warm zygote.",
       [](const PoolMetrics& m) -> uint64_t { return m.stats.hits; }},
      {"cubicle_pool_misses_total", "counter", "Requests that found no idle zygote.",
       [](const PoolMetrics& m) -> uint64_t { return m.stats.misses; }},
      {"cubicle_pool_busy_total", "counter", "Requests refused at max_total.",
       [](const PoolMetrics& m) -> uint64_t { return m.stats.busy; }},
      {"cubicle_pool_built_total", "counter", "Zygotes built by refill.",
       [](const PoolMetrics& m) -> uint64_t { return m.stats.built; }},
      {"cubicle_pool_build_failures_total", "counter", "Refill builds that failed.",
       [](const PoolMetrics& m) -> uint64_t { return m.stats.build_failures; }},
      {"cubicle_pool_expired_total", "counter", "Idle zygotes dropped for age or by a resize.",
       [](const PoolMetrics& m) -> uint64_t { return m.stats.expired; }},
      {"cubicle_pool_died_total", "counter", "Idle zygotes found dead (their fork server died).",
       [](const PoolMetrics& m) -> uint64_t { return m.stats.died; }},
      {"cubicle_pool_maker_restarts_total", "counter", "Fork servers started again after they died.",
       [](const PoolMetrics& m) -> uint64_t { return m.stats.maker_restarts; }},
      {"cubicle_pool_makers_alive", "gauge",
       "Zygote makers (fork servers) alive as their refill threads last saw them; refill_parallelism when healthy.",
       [](const PoolMetrics& m) -> uint64_t { return m.stats.makers_alive; }},
      {"cubicle_pool_makers_wanted", "gauge", "The pool's refill_parallelism: one maker per refill thread.",
       [](const PoolMetrics& m) -> uint64_t { return m.config.refill_parallelism; }},
      {"cubicle_pool_consecutive_build_failures", "gauge", "Builds that failed since the last one that succeeded.",
       [](const PoolMetrics& m) -> uint64_t { return m.stats.consecutive_build_failures; }},
      {"cubicle_pool_template_starts_total", "counter",
       "Warm templates started: the first, replacements for age or use, and those for one found dead.",
       [](const PoolMetrics& m) -> uint64_t { return m.stats.template_starts; }},
      {"cubicle_pool_template_deaths_total", "counter", "Warm templates found dead when the next zygote was made.",
       [](const PoolMetrics& m) -> uint64_t { return m.stats.template_deaths; }},
  };
  for (const Gauge& g : kGauges) {
    Header(&out, g.name, g.type, g.help);
    for (const auto& [name, m] : pools) absl::StrAppend(&out, g.name, "{pool=\"", Label(name), "\"} ", g.get(m), "\n");
  }

  struct Histogram {
    const char* name;
    const char* help;
    const runtime::LatencyHistogram& (*get)(const PoolMetrics&);
  };
  static const Histogram kHistograms[] = {
      {"cubicle_pool_refill_seconds", "Time to build one zygote (refill).",
       [](const PoolMetrics& m) -> const runtime::LatencyHistogram& { return m.stats.refill; }},
      {"cubicle_pool_refill_cpu_seconds", "CPU time to build one zygote (its maker's and the sandbox's).",
       [](const PoolMetrics& m) -> const runtime::LatencyHistogram& { return m.stats.refill_cpu; }},
      {"cubicle_pool_queue_wait_seconds", "Misses: the wait for the next zygote.",
       [](const PoolMetrics& m) -> const runtime::LatencyHistogram& { return m.stats.queue_wait; }},
      {"cubicle_pool_handoff_seconds", "Zygotes built ahead: from the hand-off to the payload running.",
       [](const PoolMetrics& m) -> const runtime::LatencyHistogram& { return m.stats.handoff; }},
      {"cubicle_pool_cold_start_seconds", "Sandboxes built for their request: from it to the payload running.",
       [](const PoolMetrics& m) -> const runtime::LatencyHistogram& { return m.stats.cold_start; }},
  };
  for (const Histogram& h : kHistograms) {
    Header(&out, h.name, "histogram", h.help);
    for (const auto& [name, m] : pools) {
      const runtime::LatencyHistogram& hist = h.get(m);
      const std::string pool = Label(name);
      for (size_t i = 0; i < runtime::LatencyHistogram::kBounds.size(); ++i) {
        absl::StrAppend(&out, h.name, "_bucket{pool=\"", pool, "\",le=\"",
                        absl::StrFormat("%g", runtime::LatencyHistogram::kBounds[i]), "\"} ", hist.Cumulative(i),
                        "\n");
      }
      absl::StrAppend(&out, h.name, "_bucket{pool=\"", pool, "\",le=\"+Inf\"} ", hist.count(), "\n");
      absl::StrAppend(&out, h.name, "_sum{pool=\"", pool, "\"} ", absl::StrFormat("%.9f", hist.sum_seconds()), "\n");
      absl::StrAppend(&out, h.name, "_count{pool=\"", pool, "\"} ", hist.count(), "\n");
    }
  }

  // The labels are the gateway's own (egress/counts.h): a bounded set.
  Header(&out, "cubicle_egress_connections_total", "counter",
         "Egress connections ended, by the gateway's decision and the rule that made it.");
  for (const auto& [key, n] : egress.counts.connections) {
    absl::StrAppend(&out, "cubicle_egress_connections_total{decision=\"", Label(key.first), "\",rule=\"",
                    Label(key.second), "\"} ", n, "\n");
  }
  Header(&out, "cubicle_egress_bytes_total", "counter",
         "Bytes the egress gateways relayed: up, sandbox to upstream; down, back.");
  absl::StrAppend(&out, "cubicle_egress_bytes_total{direction=\"up\"} ", egress.counts.bytes_up, "\n");
  absl::StrAppend(&out, "cubicle_egress_bytes_total{direction=\"down\"} ", egress.counts.bytes_down, "\n");
  Header(&out, "cubicle_egress_gateways", "gauge", "Egress gateway processes running (one per policy revision in use).");
  absl::StrAppend(&out, "cubicle_egress_gateways ", egress.gateways, "\n");
  return out;
}

std::string SessionMetricsText(const SessionCounts& c) {
  std::string out;
  Header(&out, "cubicle_sessions_live", "gauge", "Sessions whose workspace is live on this node.");
  absl::StrAppend(&out, "cubicle_sessions_live ", c.live, "\n");
  Header(&out, "cubicle_session_archives_total", "counter",
         "Workspaces archived when their session was reaped or destroyed, and archives that failed.");
  absl::StrAppend(&out, "cubicle_session_archives_total{result=\"ok\"} ", c.archived, "\n");
  absl::StrAppend(&out, "cubicle_session_archives_total{result=\"failed\"} ", c.archive_failures, "\n");
  Header(&out, "cubicle_session_archived_bytes_total", "counter", "Compressed bytes of the archives written.");
  absl::StrAppend(&out, "cubicle_session_archived_bytes_total ", c.archived_bytes, "\n");
  Header(&out, "cubicle_session_restores_total", "counter",
         "Workspaces restored from their archive at session.create, and restores that failed (the session starts "
         "empty).");
  absl::StrAppend(&out, "cubicle_session_restores_total{result=\"ok\"} ", c.restored, "\n");
  absl::StrAppend(&out, "cubicle_session_restores_total{result=\"failed\"} ", c.restore_failures, "\n");
  Header(&out, "cubicle_session_restored_bytes_total", "counter", "Compressed bytes of the archives restored.");
  absl::StrAppend(&out, "cubicle_session_restored_bytes_total ", c.restored_bytes, "\n");
  return out;
}

absl::StatusOr<MetricsTarget> ParseMetricsTarget(const std::string& spec) {
  MetricsTarget target;
  absl::string_view rest(spec);
  if (absl::ConsumePrefix(&rest, "tcp:")) {
    absl::StatusOr<boost::asio::ip::tcp::endpoint> endpoint = ParseListenAddress(std::string(rest));
    if (!endpoint.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--metrics '", spec, "': ", endpoint.status().message()));
    }
    target.kind = MetricsTarget::Kind::kTcp;
    target.endpoint = *endpoint;
    return target;
  }
  target.kind = absl::ConsumePrefix(&rest, "unix:") ? MetricsTarget::Kind::kUnixSocket : MetricsTarget::Kind::kFile;
  target.path = std::string(rest);
  if (target.path.empty() || target.path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("--metrics '", spec,
                                                   "': expected unix:/ABSOLUTE/PATH (a socket), tcp:ADDRESS:PORT or "
                                                   "/ABSOLUTE/PATH (a file)"));
  }
  return target;
}

}  // namespace cubicle::rpc
