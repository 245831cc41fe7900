#include "egress/policy.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "egress/matcher.h"

namespace cubicle::egress {

absl::StatusOr<NetMode> ParseNetMode(absl::string_view name) {
  if (name == "none") return NetMode::kNone;
  if (name == "allowlist") return NetMode::kAllowlist;
  return absl::InvalidArgumentError(absl::StrCat("network policy '", name, "': expected none or allowlist"));
}

absl::string_view NetModeName(NetMode mode) { return mode == NetMode::kNone ? "none" : "allowlist"; }

absl::StatusOr<DomainPattern> ParseDomainPattern(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("domain pattern '", text, "': ", why));
  };
  DomainPattern p;
  absl::string_view name = text;
  if (absl::StartsWith(name, "*.")) {
    p.subdomains = true;
    name.remove_prefix(2);
  }
  if (name.empty()) return bad(p.subdomains ? "a wildcard needs a domain after '*.'" : "empty");
  if (name.find('*') != absl::string_view::npos) {
    return bad("'*' is allowed only as the whole first label, as in *.example.org");
  }
  absl::string_view bare = name;
  if (bare.size() > 2 && bare.front() == '[' && bare.back() == ']') bare = bare.substr(1, bare.size() - 2);
  if (ParseAddress(bare).ok() || ParseAddress((!name.empty() && name.back() == '.') ? name.substr(0, name.size() - 1) : name).ok()) {
    return bad("an address, not a name (use an allow_cidr for addresses)");
  }
  absl::StatusOr<std::string> normal = NormalizeHostName(name);
  if (!normal.ok()) return bad(normal.status().message());
  p.name = *std::move(normal);
  if (p.subdomains && p.name.find('.') == std::string::npos) {
    return bad("a wildcard over a top-level domain is too broad");
  }
  return p;
}

absl::StatusOr<uint16_t> ParsePort(absl::string_view text) {
  unsigned value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value == 0 || value > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port '", text, "': expected 1 to 65535"));
  }
  return static_cast<uint16_t>(value);
}

absl::StatusOr<std::array<uint8_t, 16>> ParseAddress(absl::string_view text) {
  std::array<uint8_t, 16> out{};
  std::string s(text);
  in_addr v4;
  if (s.find(':') == std::string::npos) {
    if (::inet_pton(AF_INET, s.c_str(), &v4) == 1) {
      out[10] = out[11] = 0xff;
      std::memcpy(out.data() + 12, &v4, 4);
      return out;
    }
  } else if (::inet_pton(AF_INET6, s.c_str(), out.data()) == 1) {
    return out;
  }
  return absl::InvalidArgumentError(absl::StrCat("address '", text, "': not an IPv4 or IPv6 address"));
}

absl::StatusOr<Cidr> ParseCidr(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("CIDR '", text, "': ", why));
  };
  size_t slash = text.find('/');
  if (slash == absl::string_view::npos) return bad("expected ADDRESS/PREFIX");
  absl::StatusOr<std::array<uint8_t, 16>> addr = ParseAddress(text.substr(0, slash));
  if (!addr.ok()) return bad("not an IPv4 or IPv6 address");
  const bool v4 = text.substr(0, slash).find(':') == absl::string_view::npos;
  absl::string_view len = text.substr(slash + 1);
  int prefix = -1;
  auto [end, ec] = std::from_chars(len.data(), len.data() + len.size(), prefix);
  if (len.empty() || ec != std::errc() || end != len.data() + len.size() || prefix < 0 || prefix > (v4 ? 32 : 128)) {
    return bad(v4 ? "prefix length must be 0 to 32" : "prefix length must be 0 to 128");
  }
  Cidr c{*addr, v4 ? prefix + 96 : prefix};
  // Host bits set ("10.0.0.1/8") are most likely a typo for a narrower range.
  for (int bit = c.prefix; bit < 128; ++bit) {
    if (c.address[bit / 8] & (0x80 >> (bit % 8))) return bad("host bits are set beyond the prefix");
  }
  return c;
}

bool CidrContains(const Cidr& cidr, const std::array<uint8_t, 16>& address) {
  int full = cidr.prefix / 8;
  if (std::memcmp(cidr.address.data(), address.data(), full) != 0) return false;
  int rest = cidr.prefix % 8;
  if (rest == 0) return true;
  uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (cidr.address[full] & mask) == (address[full] & mask);
}

absl::StatusOr<ResolveOverride> ParseResolve(absl::string_view text) {
  size_t eq = text.find('=');
  if (eq == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("resolve override '", text, "': expected HOST=ADDRESS"));
  }
  ResolveOverride r;
  absl::StatusOr<std::string> host = NormalizeHostName(text.substr(0, eq));
  if (!host.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("resolve override '", text, "': ", host.status().message()));
  }
  r.host = *std::move(host);
  for (absl::string_view one : absl::StrSplit(text.substr(eq + 1), ',')) {
    absl::StatusOr<std::array<uint8_t, 16>> addr = ParseAddress(one);
    if (!addr.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("resolve override '", text, "': ", addr.status().message()));
    }
    r.addresses.push_back(*addr);
  }
  return r;
}

std::string FormatResolve(const ResolveOverride& r) {
  std::vector<std::string> addresses;
  for (const auto& a : r.addresses) addresses.push_back(FormatAddress(a));
  return absl::StrCat(r.host, "=", absl::StrJoin(addresses, ","));
}

std::string FormatDomainPattern(const DomainPattern& p) { return p.subdomains ? "*." + p.name : p.name; }

std::string FormatAddress(const std::array<uint8_t, 16>& a) {
  char buf[INET6_ADDRSTRLEN];
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(a.data(), kMapped, 12) == 0) {
    ::inet_ntop(AF_INET, a.data() + 12, buf, sizeof(buf));
  } else {
    ::inet_ntop(AF_INET6, a.data(), buf, sizeof(buf));
  }
  return buf;
}

std::string FormatCidr(const Cidr& c) {
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  const bool v4 = c.prefix >= 96 && std::memcmp(c.address.data(), kMapped, 12) == 0;
  return absl::StrCat(FormatAddress(c.address), "/", v4 ? c.prefix - 96 : c.prefix);
}

absl::Status ValidatePolicy(const Policy& p) {
  if (p.mode == NetMode::kNone) return absl::OkStatus();
  if (p.domains.empty()) {
    return absl::InvalidArgumentError("network policy allowlist: no domain is allowed (give at least one pattern)");
  }
  if (p.ports.empty()) return absl::InvalidArgumentError("network policy allowlist: no port is allowed");
  for (uint16_t port : p.ports) {
    if (port == 0) return absl::InvalidArgumentError("port '0': expected 1 to 65535");
  }
  if (p.bridge_port == 0) return absl::InvalidArgumentError("bridge port '0': expected 1 to 65535");
  if (p.budgets.max_connections == 0) {
    return absl::InvalidArgumentError("egress budget max_connections '0': must be positive");
  }
  if (p.budgets.idle_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("egress budget idle timeout '",
                                                   absl::FormatDuration(p.budgets.idle_timeout),
                                                   "': must be positive"));
  }
  return absl::OkStatus();
}

absl::Status CheckNarrows(const Policy& base, const Policy& narrow) {
  auto widens = [](absl::string_view what) {
    return absl::PermissionDeniedError(absl::StrCat("network policy: ", what, " is not allowed by the profile"));
  };
  if (narrow.mode == NetMode::kNone) return absl::OkStatus();
  if (base.mode == NetMode::kNone) return widens("allowlist");
  for (const DomainPattern& d : narrow.domains) {
    // A pattern narrows when the profile already matches everything it
    // matches: the same pattern, or a name / "*.sub" under a profile "*.".
    bool covered = std::any_of(base.domains.begin(), base.domains.end(), [&](const DomainPattern& b) {
      return b == d || (b.subdomains && MatchesPattern(b, d.name));
    });
    if (!covered) return widens(absl::StrCat("domain '", FormatDomainPattern(d), "'"));
  }
  for (uint16_t port : narrow.ports) {
    if (std::find(base.ports.begin(), base.ports.end(), port) == base.ports.end()) {
      return widens(absl::StrCat("port ", port));
    }
  }
  for (const Cidr& c : narrow.allow_cidrs) {
    bool covered = std::any_of(base.allow_cidrs.begin(), base.allow_cidrs.end(), [&](const Cidr& b) {
      return b.prefix <= c.prefix && CidrContains(b, c.address);
    });
    if (!covered) return widens(absl::StrCat("allow_cidr '", FormatCidr(c), "'"));
  }
  for (const ResolveOverride& r : narrow.resolve) {
    if (std::find(base.resolve.begin(), base.resolve.end(), r) == base.resolve.end()) {
      return widens(absl::StrCat("resolve override '", FormatResolve(r), "'"));
    }
  }
  auto over = [](uint64_t n, uint64_t b) { return b != 0 && (n == 0 || n > b); };  // 0: no cap
  if (narrow.budgets.max_connections > base.budgets.max_connections) {
    return widens(absl::StrCat("max_connections ", narrow.budgets.max_connections));
  }
  if (over(narrow.budgets.max_bytes, base.budgets.max_bytes)) {
    return widens(absl::StrCat("max_bytes ", narrow.budgets.max_bytes));
  }
  if (narrow.budgets.idle_timeout > base.budgets.idle_timeout) {
    return widens(absl::StrCat("idle timeout ", absl::FormatDuration(narrow.budgets.idle_timeout)));
  }
  if (narrow.bridge_port != base.bridge_port || narrow.log_path != base.log_path) {
    return widens("a different bridge port or log");
  }
  return absl::OkStatus();
}

std::string CanonicalText(const Policy& p) {
  // Sorted and deduplicated, so the same rules in another order are one
  // revision.
  std::vector<std::string> domains, cidrs, resolve;
  for (const DomainPattern& d : p.domains) domains.push_back(FormatDomainPattern(d));
  for (const Cidr& c : p.allow_cidrs) cidrs.push_back(FormatCidr(c));
  for (const ResolveOverride& r : p.resolve) resolve.push_back(FormatResolve(r));
  std::vector<uint16_t> ports = p.ports;
  for (auto* v : {&domains, &cidrs, &resolve}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  std::sort(ports.begin(), ports.end());
  ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
  return absl::StrCat("mode=", NetModeName(p.mode), "\ndomains=", absl::StrJoin(domains, ","),
                      "\nports=", absl::StrJoin(ports, ","), "\nallow_cidrs=", absl::StrJoin(cidrs, ","),
                      "\nresolve=", absl::StrJoin(resolve, ","), "\nmax_connections=", p.budgets.max_connections,
                      "\nmax_bytes=", p.budgets.max_bytes,
                      "\nidle_timeout_ms=", absl::ToInt64Milliseconds(p.budgets.idle_timeout),
                      "\nbridge_port=", p.bridge_port, "\nlog=", p.log_path, "\n");
}

std::string Revision(const Policy& p) {
  // FNV-1a, 64 bits: a stable name for logs and gateway processes, not a
  // security boundary (the registry compares the canonical text).
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : CanonicalText(p)) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char buf[17];
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 15; i >= 0; --i, h >>= 4) buf[i] = kHex[h & 0xf];
  buf[16] = '\0';
  return buf;
}

std::vector<std::string> ProxyEnvironment(const Policy& p) {
  if (p.mode != NetMode::kAllowlist) return {};
  const std::string url = absl::StrCat("http://127.0.0.1:", p.bridge_port);
  return {absl::StrCat("HTTP_PROXY=", url),  absl::StrCat("HTTPS_PROXY=", url), absl::StrCat("http_proxy=", url),
          absl::StrCat("https_proxy=", url), "NO_PROXY=localhost,127.0.0.1",    "no_proxy=localhost,127.0.0.1"};
}

}  // namespace cubicle::egress
