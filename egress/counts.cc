#include "egress/counts.h"

#include <boost/json.hpp>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "egress/address_class.h"

namespace cubicle::egress {
namespace {

namespace json = boost::json;

// Every rule gateway.cc logs that is a fixed string (docs/egress.md, "The
// decision, in order"; "connect" and "http" when allowed).
constexpr absl::string_view kFixedRules[] = {
    "http", "connect", "bad_request", "ip_literal", "bad_host", "domain_allowlist", "port_allowlist",
    "budget_bytes", "budget_connections", "resolve_failed", "upstream_connect", "idle_timeout",
    "client_closed_before_request",
    // CountedRule's own labels, so that it maps a label to itself.
    "none", "pipe2", "other",
};

constexpr absl::string_view kAddressClass = "address_class: ";

// A JSON whole number a count can be; false for anything else.
bool ToCount(const json::value& v, uint64_t* out) {
  if (v.is_uint64()) {
    *out = v.as_uint64();
    return true;
  }
  if (v.is_int64() && v.as_int64() >= 0) {
    *out = static_cast<uint64_t>(v.as_int64());
    return true;
  }
  return false;
}

}  // namespace

void Counts::Count(absl::string_view decision, absl::string_view rule, uint64_t up, uint64_t down) {
  ++connections[{std::string(decision), std::string(CountedRule(rule))}];
  bytes_up += up;
  bytes_down += down;
}

void Counts::Add(const Counts& other) {
  for (const auto& [key, n] : other.connections) connections[key] += n;
  bytes_up += other.bytes_up;
  bytes_down += other.bytes_down;
}

void Counts::Max(const Counts& other) {
  for (const auto& [key, n] : other.connections) {
    uint64_t& mine = connections[key];
    mine = std::max(mine, n);
  }
  bytes_up = std::max(bytes_up, other.bytes_up);
  bytes_down = std::max(bytes_down, other.bytes_down);
}

bool IsDecision(absl::string_view decision) {
  return decision == "allow" || decision == "deny" || decision == "error" || decision == "none";
}

absl::string_view CountedRule(absl::string_view rule) {
  if (rule.empty()) return "none";
  for (absl::string_view fixed : kFixedRules) {
    if (rule == fixed) return fixed;
  }
  if (absl::StartsWith(rule, "pipe2: ")) return "pipe2";
  if (absl::StartsWith(rule, kAddressClass) && IsRefusedClass(rule.substr(kAddressClass.size()))) return rule;
  return "other";
}

std::string CountsToJson(const Counts& counts) {
  json::array entries;
  entries.reserve(counts.connections.size());
  for (const auto& [key, n] : counts.connections) {
    entries.push_back(json::array{json::string(key.first), json::string(key.second), n});
  }
  return json::serialize(
      json::object{{"connections", std::move(entries)},
                   {"bytes_up", counts.bytes_up},
                   {"bytes_down", counts.bytes_down}});
}

absl::StatusOr<Counts> CountsFromJson(absl::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(text.data(), text.size()), ec);
  auto bad = [](absl::string_view why) { return absl::InvalidArgumentError(absl::StrCat("egress counts: ", why)); };
  if (ec || !v.is_object()) return bad("not a JSON object");
  const json::object& o = v.as_object();
  const json::value* entries = o.if_contains("connections");
  const json::value* up = o.if_contains("bytes_up");
  const json::value* down = o.if_contains("bytes_down");
  Counts counts;
  if (entries == nullptr || !entries->is_array() || up == nullptr || down == nullptr ||
      !ToCount(*up, &counts.bytes_up) || !ToCount(*down, &counts.bytes_down)) {
    return bad("expected connections, bytes_up and bytes_down");
  }
  if (entries->as_array().size() > kMaxCountEntries) {
    return bad(absl::StrCat("more than ", kMaxCountEntries, " entries"));
  }
  for (const json::value& e : entries->as_array()) {
    const json::array* a = e.if_array();
    uint64_t n = 0;
    if (a == nullptr || a->size() != 3 || !(*a)[0].is_string() || !(*a)[1].is_string() || !ToCount((*a)[2], &n)) {
      return bad("an entry is not [decision, rule, count]");
    }
    const absl::string_view decision((*a)[0].as_string().data(), (*a)[0].as_string().size());
    if (!IsDecision(decision)) return bad("an unknown decision");
    const absl::string_view rule((*a)[1].as_string().data(), (*a)[1].as_string().size());
    counts.connections[{std::string(decision), std::string(CountedRule(rule))}] += n;
  }
  return counts;
}

}  // namespace cubicle::egress
