// What the daemon says about each request it answers (docs/operations.md,
// "Logs and metrics"): one JSON log line — its id, method, profile,
// session, caller, outcome, exit status and reason, duration, bytes in
// and out — and the counters and latency histogram by method and outcome
// that /metrics shows. The outcome is read off the reply line as the
// daemon serialized it, without parsing it again.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cubicle::rpc {

// How a request ended, from its reply line.
struct Outcome {
  std::optional<int64_t> error_code;  // a JSON-RPC error
  std::string reason;                 // a run's result: exited, timed_out, oom...
  std::optional<int64_t> exit_code;
  // The metric label: "ok", a run's reason, or "error" (with error_code).
  std::string Label() const;
};

// `runs`: the method's result is a run's (sandbox.run, session.exec), whose
// top-level reason and exit_code are read; other results' members are
// never taken for them.
Outcome OutcomeOf(absl::string_view reply, bool runs);

// A request as it came in, for its log line.
struct RequestFacts {
  // The daemon's own id for this request ('q' and a ULID, sessions/ids.h):
  // unique across clients and restarts, where the JSON-RPC id is only the
  // client's. The egress gateway's decisions and the audit name it too.
  std::string request_id;
  boost::json::value id;  // the JSON-RPC id
  std::string method;
  std::string profile;
  std::string session;
  std::string client;  // a socket peer's uid entry, or "" (the daemon's own user, stdio, HTTP's front checks)
  size_t bytes_in = 0;
  absl::Time started;
};

// The facts of one call: `params`' profile and session members.
RequestFacts FactsOf(const boost::json::value& id, const std::string& method, const boost::json::value& params,
                     size_t bytes_in, std::string client);

boost::json::object LogFields(const RequestFacts& facts, const Outcome& outcome, absl::Duration took,
                              size_t bytes_out);

// Counts and latencies by method and outcome. Methods outside `known` are
// counted as "other", so that a client cannot grow the label set.
class RequestMetrics {
 public:
  explicit RequestMetrics(std::vector<std::string> known);
  void Observe(const std::string& method, const Outcome& outcome, absl::Duration took);
  // A request refused at admission, for cubicle_admission_rejections_total:
  // one of kAdmissionReasons. Observe counts those its reply shows (busy,
  // shutting down, forbidden); the rest are counted where they are refused
  // before a request is observed (a scope refusal, a line too long, an
  // HTTP request without a valid key, a connection beyond the limit).
  void Rejected(absl::string_view reason);
  static constexpr absl::string_view kAdmissionReasons[] = {
      "busy", "shutting_down", "forbidden", "unauthenticated", "line_too_long", "too_many_connections"};
  // cubicle_requests_total and cubicle_request_duration_seconds, Prometheus text.
  std::string Text() const;

 private:
  struct Histogram {
    std::vector<uint64_t> buckets;  // cumulative at render time; per bucket here
    uint64_t count = 0;
    double sum = 0;
  };
  std::vector<std::string> known_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, uint64_t> counts_;  // (method, outcome)
  std::map<std::string, Histogram> latency_;                         // by method
  uint64_t rejected_[std::size(kAdmissionReasons)] = {};
};

}  // namespace cubicle::rpc
