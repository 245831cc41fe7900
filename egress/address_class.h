// Which destination addresses the gateway refuses. Default-deny over the
// special-purpose registries: an IPv4 address must be outside every special
// range below; an IPv6 address must be global unicast (2000::/3) and outside
// the special ranges within it. Addresses that carry an IPv4 address (mapped
// ::ffff:0:0/96, NAT64 64:ff9b::/96 and 64:ff9b:1::/48, 6to4 2002::/16) are
// judged by the IPv4 address they lead to.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "egress/policy.h"

namespace cubicle::egress {

struct AddressVerdict {
  bool allowed = false;
  // The rule that decided: "public", "allow_cidr", or the refused class
  // ("loopback", "private (RFC 1918)", "link-local", ...).
  absl::string_view rule;
};

// The class of `address` (IPv6 form; IPv4 as ::ffff:a.b.c.d), ignoring
// overrides: "public" or the name of the refused class.
absl::string_view ClassifyAddress(const std::array<uint8_t, 16>& address);

// Whether `name` is a class ClassifyAddress names for a refused address
// (a fixed set: the metrics count refusals by it, egress/counts.h).
bool IsRefusedClass(absl::string_view name);

// The gateway's verdict: an allow_cidr that covers the address lets it
// through whatever its class.
AddressVerdict JudgeAddress(const std::array<uint8_t, 16>& address, const std::vector<Cidr>& allow_cidrs);

}  // namespace cubicle::egress
