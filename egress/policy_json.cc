#include "egress/policy_json.h"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "absl/strings/str_cat.h"
#include "base/json_reader.h"
#include "base/status.h"

namespace cubicle::egress {
namespace {

namespace json = boost::json;

absl::Status At(const std::string& path, absl::string_view problem) { return json_read::Error(path, problem); }

// Each string of an array, parsed by `parse`, errors prefixed by the
// element's path.
template <typename T, typename Parse>
absl::StatusOr<std::vector<T>> Each(const json::value& v, const std::string& path, Parse parse) {
  CUBICLE_ASSIGN_OR_RETURN(std::vector<std::string> strings, json_read::StringArray(v, path));
  std::vector<T> out;
  for (size_t i = 0; i < strings.size(); ++i) {
    absl::StatusOr<T> parsed = parse(strings[i]);
    if (!parsed.ok()) return At(json_read::Element(path, i), parsed.status().message());
    out.push_back(*std::move(parsed));
  }
  return out;
}

// A port as a number (a whole number, however spelt) or a string ("8443"):
// both checked by ParsePort, so that their errors read alike.
absl::StatusOr<uint16_t> Port(const json::value& v, const std::string& path) {
  std::string text;
  if (v.is_string()) {
    CUBICLE_ASSIGN_OR_RETURN(text, json_read::String(v, path));
  } else {
    CUBICLE_ASSIGN_OR_RETURN(uint64_t n, json_read::Count(v, path));
    text = absl::StrCat(n);
  }
  absl::StatusOr<uint16_t> port = ParsePort(text);
  if (!port.ok()) return At(path, port.status().message());
  return *port;
}

absl::Status ReadPorts(const json_read::Object& o, Policy* p) {
  const json::value* ports = o.Find("allow_ports");
  if (ports == nullptr) return absl::OkStatus();
  p->ports.clear();
  return json_read::ForEachElement(*ports, o.PathOf("allow_ports"), [&](const json::value& v, std::string at) {
    CUBICLE_ASSIGN_OR_RETURN(uint16_t port, Port(v, at));
    p->ports.push_back(port);
    return absl::OkStatus();
  });
}

absl::Status ReadBudgets(const json_read::Object& o, Policy* p) {
  CUBICLE_RETURN_IF_ERROR(o.ReadCount("max_connections", &p->budgets.max_connections, 1, 100000));
  CUBICLE_RETURN_IF_ERROR(o.Read("max_bytes", &p->budgets.max_bytes, json_read::PositiveSize));
  return o.Read("idle_timeout_ms", &p->budgets.idle_timeout, json_read::MillisIn(1, uint64_t{24} * 3600 * 1000));
}

}  // namespace

absl::StatusOr<Policy> PolicyFromJson(const json::value& v, const std::string& path, const Policy& base) {
  if (v.is_string() && v.get_string() == "none") return Policy();
  if (!v.is_object()) return At(path, "expected \"none\" or an object");
  CUBICLE_ASSIGN_OR_RETURN(json_read::Object o,
                           json_read::Object::Open(v, path, {"mode", "allow_domains", "allow_ports", "allow_cidrs",
                                                             "resolve", "max_connections", "max_bytes",
                                                             "idle_timeout_ms", "bridge_port", "log"}));
  Policy p = base;
  if (const json::value* m = o.Find("mode")) {
    CUBICLE_ASSIGN_OR_RETURN(std::string mode, json_read::String(*m, o.PathOf("mode")));
    absl::StatusOr<NetMode> parsed = ParseNetMode(mode);
    if (!parsed.ok()) return At(o.PathOf("mode"), parsed.status().message());
    p.mode = *parsed;
  } else if (o.Find("allow_domains") != nullptr) {
    p.mode = NetMode::kAllowlist;
  }
  if (p.mode == NetMode::kNone) {
    if (o.object().size() > (o.Find("mode") != nullptr ? 1u : 0u)) {
      return At(path, "mode none takes no other key (the sandbox has no network)");
    }
    return Policy();
  }
  if (const json::value* d = o.Find("allow_domains")) {
    CUBICLE_ASSIGN_OR_RETURN(p.domains, Each<DomainPattern>(*d, o.PathOf("allow_domains"), ParseDomainPattern));
  }
  CUBICLE_RETURN_IF_ERROR(ReadPorts(o, &p));
  if (const json::value* c = o.Find("allow_cidrs")) {
    CUBICLE_ASSIGN_OR_RETURN(p.allow_cidrs, Each<Cidr>(*c, o.PathOf("allow_cidrs"), ParseCidr));
  }
  if (const json::value* r = o.Find("resolve")) {
    CUBICLE_ASSIGN_OR_RETURN(p.resolve, Each<ResolveOverride>(*r, o.PathOf("resolve"), ParseResolve));
  }
  CUBICLE_RETURN_IF_ERROR(ReadBudgets(o, &p));
  CUBICLE_RETURN_IF_ERROR(o.ReadCount("bridge_port", &p.bridge_port, 1, 65535));
  CUBICLE_RETURN_IF_ERROR(o.Read("log", &p.log_path, json_read::String));
  if (!p.log_path.empty() && p.log_path.front() != '/') return At(o.PathOf("log"), "must be an absolute path");
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
