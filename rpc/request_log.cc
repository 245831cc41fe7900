#include "rpc/request_log.h"

#include <algorithm>

#include <boost/json/serialize.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "rpc/jsonrpc.h"
#include "sessions/ids.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

// Upper bounds of the latency buckets, in seconds: a pooled run's
// milliseconds to a long execution's minutes.
constexpr double kBuckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                               0.25,   0.5,   1,      2.5,   5,    10,    30,   60, 300};

// The integer after `key` (e.g. `"code":`) in `text`, from `from`.
std::optional<int64_t> IntAfter(absl::string_view text, absl::string_view key, size_t from = 0) {
  const size_t at = text.find(key, from);
  if (at == absl::string_view::npos) return std::nullopt;
  size_t end = at + key.size();
  const size_t start = end;
  while (end < text.size() && (text[end] == '-' || (text[end] >= '0' && text[end] <= '9'))) ++end;
  int64_t value = 0;
  if (!absl::SimpleAtoi(text.substr(start, end - start), &value)) return std::nullopt;
  return value;
}

}  // namespace

std::string Outcome::Label() const {
  if (error_code.has_value()) return "error";
  return reason.empty() ? "ok" : reason;
}

Outcome OutcomeOf(absl::string_view reply, bool runs) {
  Outcome out;
  // The daemon writes {"jsonrpc":"2.0","id":ID,"error":{"code":N,...}} or
  // {...,"id":ID,"result":...}: keys in member names, unescaped, come
  // before anything a payload wrote, whose quotes are escaped.
  // The result key first: it follows the id, so a large result (a file's
  // bytes) is never scanned whole for an error key it cannot hold.
  const size_t result = reply.find(R"("result":)");
  const size_t error = reply.substr(0, result).find(R"("error":{"code":)");
  if (error != absl::string_view::npos) {
    out.error_code = IntAfter(reply, R"("error":{"code":)", error);
    return out;
  }
  if (!runs || result == absl::string_view::npos) return out;
  const absl::string_view body = reply.substr(result);
  if (const size_t r = body.find(R"("reason":")"); r != absl::string_view::npos) {
    const size_t start = r + 10;
    const size_t end = body.find('"', start);
    if (end != absl::string_view::npos) out.reason = std::string(body.substr(start, end - start));
  }
  out.exit_code = IntAfter(body, R"("exit_code":)");
  return out;
}

RequestFacts FactsOf(const json::value& id, const std::string& method, const json::value& params, size_t bytes_in,
                     std::string client) {
  RequestFacts f;
  f.request_id = sessions::NewId('q');
  f.id = id;
  f.method = method;
  if (const json::object* o = params.if_object()) {
    if (const json::value* p = o->if_contains("profile"); p != nullptr && p->is_string()) f.profile = p->as_string();
    if (const json::value* s = o->if_contains("session"); s != nullptr && s->is_string()) f.session = s->as_string();
  }
  f.client = std::move(client);
  f.bytes_in = bytes_in;
  f.started = absl::Now();
  return f;
}

json::object LogFields(const RequestFacts& facts, const Outcome& outcome, absl::Duration took, size_t bytes_out) {
  json::object o{{"request_id", facts.request_id},
                 {"id", facts.id},
                 {"method", facts.method},
                 {"outcome", outcome.Label()},
                 {"duration_ms", absl::ToDoubleMilliseconds(took)},
                 {"bytes_in", facts.bytes_in},
                 {"bytes_out", bytes_out}};
  if (!facts.profile.empty()) o["profile"] = facts.profile;
  if (!facts.session.empty()) o["session"] = facts.session;
  if (!facts.client.empty()) o["client"] = facts.client;
  if (outcome.error_code.has_value()) o["error_code"] = *outcome.error_code;
  if (!outcome.reason.empty()) o["reason"] = outcome.reason;
  if (outcome.exit_code.has_value()) o["exit_code"] = *outcome.exit_code;
  return o;
}

RequestMetrics::RequestMetrics(std::vector<std::string> known) : known_(std::move(known)) {}

void RequestMetrics::Observe(const std::string& method, const Outcome& outcome, absl::Duration took) {
  static const std::string kOther = "other";
  const std::string& name = std::find(known_.begin(), known_.end(), method) != known_.end() ? method : kOther;
  const double seconds = absl::ToDoubleSeconds(took);
  if (outcome.error_code == kBusy) Rejected("busy");
  if (outcome.error_code == kShuttingDown) Rejected("shutting_down");
  if (outcome.error_code == kForbidden) Rejected("forbidden");
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[{name, outcome.Label()}];
  Histogram& h = latency_[name];
  if (h.buckets.empty()) h.buckets.assign(std::size(kBuckets), 0);
  for (size_t i = 0; i < std::size(kBuckets); ++i) {
    if (seconds <= kBuckets[i]) {
      ++h.buckets[i];
      break;
    }
  }
  ++h.count;
  h.sum += seconds;
}

void RequestMetrics::Rejected(absl::string_view reason) {
  for (size_t i = 0; i < std::size(kAdmissionReasons); ++i) {
    if (kAdmissionReasons[i] != reason) continue;
    std::lock_guard<std::mutex> lock(mu_);
    ++rejected_[i];
    return;
  }
}

std::string RequestMetrics::Text() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out =
      "# HELP cubicle_admission_rejections_total Requests refused before anything ran, by reason.\n"
      "# TYPE cubicle_admission_rejections_total counter\n";
  for (size_t i = 0; i < std::size(kAdmissionReasons); ++i) {
    absl::StrAppend(&out, "cubicle_admission_rejections_total{reason=\"", kAdmissionReasons[i], "\"} ", rejected_[i],
                    "\n");
  }
  absl::StrAppend(&out,
                  "# HELP cubicle_requests_total Requests answered, by method and outcome (ok, a run's reason, or "
                  "error).\n"
                  "# TYPE cubicle_requests_total counter\n");
  for (const auto& [key, n] : counts_) {
    absl::StrAppend(&out, "cubicle_requests_total{method=\"", key.first, "\",outcome=\"", key.second, "\"} ", n, "\n");
  }
  absl::StrAppend(&out,
                  "# HELP cubicle_request_duration_seconds Time from a request's arrival to its reply, by method.\n"
                  "# TYPE cubicle_request_duration_seconds histogram\n");
  for (const auto& [method, h] : latency_) {
    uint64_t cumulative = 0;
    for (size_t i = 0; i < std::size(kBuckets); ++i) {
      cumulative += h.buckets[i];
      absl::StrAppend(&out, "cubicle_request_duration_seconds_bucket{method=\"", method, "\",le=\"",
                      absl::StrFormat("%g", kBuckets[i]), "\"} ", cumulative, "\n");
    }
    absl::StrAppend(&out, "cubicle_request_duration_seconds_bucket{method=\"", method, "\",le=\"+Inf\"} ", h.count,
                    "\n", "cubicle_request_duration_seconds_sum{method=\"", method, "\"} ",
                    absl::StrFormat("%.6f", h.sum), "\n", "cubicle_request_duration_seconds_count{method=\"", method,
                    "\"} ", h.count, "\n");
  }
  return out;
}

}  // namespace cubicle::rpc
