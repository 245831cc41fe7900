#include "egress/policy_json.h"

#include <algorithm>
#include <initializer_list>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "base/units.h"

namespace cubicle::egress {
namespace {

namespace json = boost::json;

absl::Status At(const std::string& path, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", problem));
}

absl::StatusOr<std::string> String(const json::value& v, const std::string& path) {
  if (!v.is_string()) return At(path, "expected a string");
  json::string_view s = v.get_string();
  if (s.find('\0') != json::string_view::npos) return At(path, "contains a NUL byte");
  return std::string(s.data(), s.size());
}

absl::StatusOr<uint64_t> Count(const json::value& v, const std::string& path, uint64_t min, uint64_t max) {
  uint64_t n = 0;
  if (v.is_uint64()) {
    n = v.get_uint64();
  } else if (v.is_int64() && v.get_int64() >= 0) {
    n = static_cast<uint64_t>(v.get_int64());
  } else {
    return At(path, absl::StrCat("expected a whole number from ", min, " to ", max));
  }
  if (n < min || n > max) return At(path, absl::StrCat(n, " is outside [", min, ", ", max, "]"));
  return n;
}

// Each string of an array, parsed by `parse`, errors prefixed by the
// element's path.
template <typename T, typename Parse>
absl::StatusOr<std::vector<T>> Each(const json::value& v, const std::string& path, Parse parse) {
  if (!v.is_array()) return At(path, "expected an array of strings");
  std::vector<T> out;
  const json::array& a = v.get_array();
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string at = absl::StrCat(path, "[", i, "]");
    CUBICLE_ASSIGN_OR_RETURN(std::string s, String(a[i], at));
    absl::StatusOr<T> parsed = parse(s);
    if (!parsed.ok()) return At(at, parsed.status().message());
    out.push_back(*std::move(parsed));
  }
  return out;
}

}  // namespace

absl::StatusOr<Policy> PolicyFromJson(const json::value& v, const std::string& path, const Policy& base) {
  if (v.is_string() && v.get_string() == "none") return Policy();
  if (!v.is_object()) return At(path, "expected \"none\" or an object");
  static constexpr std::initializer_list<absl::string_view> kKeys = {
      "mode", "allow_domains", "allow_ports", "allow_cidrs", "resolve", "max_connections",
      "max_bytes", "idle_timeout_ms", "bridge_port", "log"};
  const json::object& o = v.get_object();
  for (const json::key_value_pair& kv : o) {
    absl::string_view key(kv.key().data(), kv.key().size());
    if (std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end()) {
      return At(absl::StrCat(path, ".", key), absl::StrCat("unknown key (expected one of: ", absl::StrJoin(kKeys, ", "), ")"));
    }
  }
  auto key = [&](const char* k) { return absl::StrCat(path, ".", k); };
  Policy p = base;
  if (const json::value* m = o.if_contains("mode")) {
    CUBICLE_ASSIGN_OR_RETURN(std::string mode, String(*m, key("mode")));
    absl::StatusOr<NetMode> parsed = ParseNetMode(mode);
    if (!parsed.ok()) return At(key("mode"), parsed.status().message());
    p.mode = *parsed;
  } else if (o.contains("allow_domains")) {
    p.mode = NetMode::kAllowlist;
  }
  if (p.mode == NetMode::kNone) {
    if (o.size() > (o.contains("mode") ? 1u : 0u)) {
      return At(path, "mode none takes no other key (the sandbox has no network)");
    }
    return Policy();
  }
  if (const json::value* d = o.if_contains("allow_domains")) {
    CUBICLE_ASSIGN_OR_RETURN(p.domains, Each<DomainPattern>(*d, key("allow_domains"), ParseDomainPattern));
  }
  if (const json::value* ports = o.if_contains("allow_ports")) {
    if (!ports->is_array()) return At(key("allow_ports"), "expected an array of port numbers");
    p.ports.clear();
    const json::array& a = ports->get_array();
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string at = absl::StrCat(key("allow_ports"), "[", i, "]");
      absl::StatusOr<uint16_t> port =
          ParsePort(a[i].is_string() ? std::string(a[i].get_string().data(), a[i].get_string().size())
                                     : json::serialize(a[i]));
      if (!port.ok()) return At(at, port.status().message());
      p.ports.push_back(*port);
    }
  }
  if (const json::value* c = o.if_contains("allow_cidrs")) {
    CUBICLE_ASSIGN_OR_RETURN(p.allow_cidrs, Each<Cidr>(*c, key("allow_cidrs"), ParseCidr));
  }
  if (const json::value* r = o.if_contains("resolve")) {
    CUBICLE_ASSIGN_OR_RETURN(p.resolve, Each<ResolveOverride>(*r, key("resolve"), ParseResolve));
  }
  if (const json::value* n = o.if_contains("max_connections")) {
    CUBICLE_ASSIGN_OR_RETURN(uint64_t count, Count(*n, key("max_connections"), 1, 100000));
    p.budgets.max_connections = static_cast<uint32_t>(count);
  }
  if (const json::value* b = o.if_contains("max_bytes")) {
    if (b->is_string()) {
      absl::StatusOr<uint64_t> size =
          ParseSize(key("max_bytes"), std::string(b->get_string().data(), b->get_string().size()));
      if (!size.ok()) return At(key("max_bytes"), "is not a size (expected 256M or bytes)");
      p.budgets.max_bytes = *size;
    } else {
      CUBICLE_ASSIGN_OR_RETURN(p.budgets.max_bytes, Count(*b, key("max_bytes"), 1, UINT64_MAX));
    }
    if (p.budgets.max_bytes == 0) return At(key("max_bytes"), "must be positive");
  }
  if (const json::value* t = o.if_contains("idle_timeout_ms")) {
    CUBICLE_ASSIGN_OR_RETURN(uint64_t ms, Count(*t, key("idle_timeout_ms"), 1, uint64_t{24} * 3600 * 1000));
    p.budgets.idle_timeout = absl::Milliseconds(static_cast<int64_t>(ms));
  }
  if (const json::value* port = o.if_contains("bridge_port")) {
    CUBICLE_ASSIGN_OR_RETURN(uint64_t n, Count(*port, key("bridge_port"), 1, 65535));
    p.bridge_port = static_cast<uint16_t>(n);
  }
  if (const json::value* log = o.if_contains("log")) {
    CUBICLE_ASSIGN_OR_RETURN(p.log_path, String(*log, key("log")));
    if (!p.log_path.empty() && p.log_path.front() != '/') return At(key("log"), "must be an absolute path");
  }
  absl::Status valid = ValidatePolicy(p);
  if (!valid.ok()) return At(path, valid.message());
  return p;
}

json::value PolicyToJson(const Policy& p) {
  if (p.mode == NetMode::kNone) return "none";
  json::array domains, ports, cidrs, resolve;
  for (const DomainPattern& d : p.domains) domains.push_back(json::string(FormatDomainPattern(d)));
  for (uint16_t port : p.ports) ports.push_back(port);
  for (const Cidr& c : p.allow_cidrs) cidrs.push_back(json::string(FormatCidr(c)));
  for (const ResolveOverride& r : p.resolve) resolve.push_back(json::string(FormatResolve(r)));
  json::object o{{"mode", "allowlist"},
                 {"allow_domains", std::move(domains)},
                 {"allow_ports", std::move(ports)},
                 {"allow_cidrs", std::move(cidrs)},
                 {"resolve", std::move(resolve)},
                 {"max_connections", p.budgets.max_connections},
                 {"idle_timeout_ms", absl::ToInt64Milliseconds(p.budgets.idle_timeout)},
                 {"bridge_port", p.bridge_port},
                 {"log", p.log_path}};
  if (p.budgets.max_bytes != 0) o["max_bytes"] = p.budgets.max_bytes;
  return o;
}

}  // namespace cubicle::egress
