// The network policy of one sandbox (DESIGN §3, "network policy"): no
// network at all (the default), or egress through cubicle's gateway to an
// allowlist of domain names. A plain value; the gateway that enforces it is
// gateway.h, the in-sandbox end is bridge.h.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cubicle::egress {

enum class NetMode {
  kNone,       // the network namespace has `lo` only; seccomp refuses AF_INET
  kAllowlist,  // still only `lo`, plus the bridge to the host gateway
};

// "none" | "allowlist".
absl::StatusOr<NetMode> ParseNetMode(absl::string_view name);
absl::string_view NetModeName(NetMode mode);

// `example.org` matches that name only; `*.example.org` its subdomains only
// (never example.org itself, never evil-example.org). Stored normalised
// (matcher.h): lower case, no trailing dot, IDNA labels as punycode.
struct DomainPattern {
  std::string name;         // without the "*."
  bool subdomains = false;  // the pattern was "*.name"
  bool operator==(const DomainPattern&) const = default;
};

// An address range, held as IPv6: IPv4 ranges as ::ffff:a.b.c.d/(96+n).
struct Cidr {
  std::array<uint8_t, 16> address{};
  int prefix = 0;  // 0..128, over the IPv6 form
  bool operator==(const Cidr&) const = default;
};

// A name answered without DNS (curl's --resolve): HOST=ADDR[,ADDR...].
// Like a DNS answer, every address must pass the classifier.
struct ResolveOverride {
  std::string host;                                // normalised
  std::vector<std::array<uint8_t, 16>> addresses;  // IPv6 form, IPv4 mapped
  bool operator==(const ResolveOverride&) const = default;
};

// Per-sandbox budgets the gateway enforces; going over closes the
// connection and logs why.
struct Budgets {
  uint32_t max_connections = 64;  // open at once
  uint64_t max_bytes = 0;         // both directions, all connections; 0: no cap
  absl::Duration idle_timeout = absl::Seconds(60);  // per connection
  bool operator==(const Budgets&) const = default;
};

inline constexpr uint16_t kDefaultBridgePort = 18118;

struct Policy {
  NetMode mode = NetMode::kNone;
  std::vector<DomainPattern> domains;
  std::vector<uint16_t> ports = {80, 443};
  // Ranges let through although the classifier refuses them (an internal
  // package mirror), and IP-literal hosts they cover.
  std::vector<Cidr> allow_cidrs;
  std::vector<ResolveOverride> resolve;
  Budgets budgets;
  uint16_t bridge_port = kDefaultBridgePort;  // 127.0.0.1:PORT inside the sandbox
  // Where the gateway appends its JSON-lines decision log; empty: stderr.
  std::string log_path;
  bool operator==(const Policy&) const = default;
};

// Parsers for the textual forms used by flags, profiles and requests. Each
// error names the value it refuses.
absl::StatusOr<DomainPattern> ParseDomainPattern(absl::string_view text);
absl::StatusOr<uint16_t> ParsePort(absl::string_view text);
absl::StatusOr<Cidr> ParseCidr(absl::string_view text);
absl::StatusOr<ResolveOverride> ParseResolve(absl::string_view text);  // HOST=ADDR[,ADDR...]
std::string FormatResolve(const ResolveOverride& resolve);
// "203.0.113.7" or "2001:db8::1" (no brackets) to the IPv6 form.
absl::StatusOr<std::array<uint8_t, 16>> ParseAddress(absl::string_view text);

std::string FormatDomainPattern(const DomainPattern& pattern);
std::string FormatCidr(const Cidr& cidr);
std::string FormatAddress(const std::array<uint8_t, 16>& address);  // IPv4 as dotted quad

bool CidrContains(const Cidr& cidr, const std::array<uint8_t, 16>& address);

// Rejects what cannot work: an allowlist without any domain, no port,
// budgets of zero, port 0.
absl::Status ValidatePolicy(const Policy& policy);

// `narrow` may only take away from `base` (a request against its profile):
// the same mode or none; its domains, ports and CIDRs a subset; resolve
// overrides a subset; budgets no larger. Error names what widens.
absl::Status CheckNarrows(const Policy& base, const Policy& narrow);

// A canonical text of everything the gateway enforces, and its hash: one
// gateway serves each revision. The registry keys on the canonical text
// itself, so a hash collision can never merge two policies.
std::string CanonicalText(const Policy& policy);
std::string Revision(const Policy& policy);  // 16 hex digits

// The environment the payload gets: HTTP_PROXY, HTTPS_PROXY, http_proxy,
// https_proxy at the bridge, NO_PROXY=localhost,127.0.0.1.
std::vector<std::string> ProxyEnvironment(const Policy& policy);

}  // namespace cubicle::egress
