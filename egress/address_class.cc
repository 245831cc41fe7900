#include "egress/address_class.h"

#include <cstring>

namespace cubicle::egress {
namespace {

using Bytes = std::array<uint8_t, 16>;

struct Range4 {
  uint32_t base;
  int prefix;
  absl::string_view rule;
};

constexpr uint32_t V4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return (uint32_t{a} << 24) | (uint32_t{b} << 16) | (uint32_t{c} << 8) | d;
}

// IANA IPv4 special-purpose registry, plus multicast and class E. Order
// matters only where ranges nest (broadcast inside 240/4).
constexpr Range4 kRefused4[] = {
    {V4(0, 0, 0, 0), 8, "this network (0.0.0.0/8)"},
    {V4(10, 0, 0, 0), 8, "private (RFC 1918)"},
    {V4(100, 64, 0, 0), 10, "shared address space / CGNAT (100.64.0.0/10)"},
    {V4(127, 0, 0, 0), 8, "loopback"},
    {V4(169, 254, 0, 0), 16, "link-local (169.254.0.0/16, cloud metadata)"},
    {V4(172, 16, 0, 0), 12, "private (RFC 1918)"},
    {V4(192, 0, 0, 0), 24, "IETF protocol assignments (192.0.0.0/24)"},
    {V4(192, 0, 2, 0), 24, "documentation"},
    {V4(192, 31, 196, 0), 24, "AS112 (192.31.196.0/24)"},
    {V4(192, 52, 193, 0), 24, "AMT (192.52.193.0/24)"},
    {V4(192, 88, 99, 0), 24, "6to4 relay anycast (192.88.99.0/24)"},
    {V4(192, 168, 0, 0), 16, "private (RFC 1918)"},
    {V4(192, 175, 48, 0), 24, "direct delegation AS112 (192.175.48.0/24)"},
    {V4(198, 18, 0, 0), 15, "benchmarking (198.18.0.0/15)"},
    {V4(198, 51, 100, 0), 24, "documentation"},
    {V4(203, 0, 113, 0), 24, "documentation"},
    {V4(224, 0, 0, 0), 4, "multicast"},
    {V4(255, 255, 255, 255), 32, "broadcast"},
    {V4(240, 0, 0, 0), 4, "reserved (240.0.0.0/4)"},
};

absl::string_view Classify4(uint32_t a) {
  for (const Range4& r : kRefused4) {
    const uint32_t mask = r.prefix == 0 ? 0 : ~uint32_t{0} << (32 - r.prefix);
    if ((a & mask) == r.base) return r.rule;
  }
  return "public";
}

uint32_t Embedded4(const Bytes& b, int at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) | (uint32_t{b[at + 2]} << 8) | b[at + 3];
}

bool HasPrefix(const Bytes& b, std::initializer_list<uint8_t> head, int bits) {
  Bytes p{};
  int i = 0;
  for (uint8_t v : head) p[i++] = v;
  Cidr c{p, bits};
  return CidrContains(c, b);
}

}  // namespace

absl::string_view ClassifyAddress(const Bytes& b) {
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(b.data(), kMapped, 12) == 0) return Classify4(Embedded4(b, 12));
  // NAT64: the well-known prefix carries the IPv4 destination in its last
  // 32 bits; where a local-use /48 embeds it depends on the site's prefix
  // length, so a public-looking tail is still refused.
  if (HasPrefix(b, {0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0}, 96)) {
    return Classify4(Embedded4(b, 12));
  }
  if (HasPrefix(b, {0x00, 0x64, 0xff, 0x9b, 0x00, 0x01}, 48)) {
    absl::string_view inner = Classify4(Embedded4(b, 12));
    return inner == "public" ? "local-use NAT64 (64:ff9b:1::/48)" : inner;
  }
  static constexpr Bytes kZero{};
  Bytes loop{};
  loop[15] = 1;
  if (b == kZero) return "unspecified (::)";
  if (b == loop) return "loopback";
  if (HasPrefix(b, {}, 96)) return "IPv4-compatible (::/96, deprecated)";
  if (HasPrefix(b, {0xff}, 8)) return "multicast";
  if (HasPrefix(b, {0xfe, 0x80}, 10)) return "link-local";
  if (HasPrefix(b, {0xfe, 0xc0}, 10)) return "site-local (fec0::/10, deprecated)";
  if (HasPrefix(b, {0xfc}, 7)) return "unique local (fc00::/7)";
  if (HasPrefix(b, {0x01, 0x00, 0, 0, 0, 0, 0, 0}, 64)) return "discard-only (100::/64)";
  // 6to4 carries an IPv4 address in bits 16..47.
  if (HasPrefix(b, {0x20, 0x02}, 16)) {
    return Classify4(Embedded4(b, 2));
  }
  if (HasPrefix(b, {0x20, 0x01, 0x0d, 0xb8}, 32)) return "documentation";
  if (HasPrefix(b, {0x3f, 0xff, 0x00}, 20)) return "documentation";
  // Teredo (2001::/32, IPv4 obfuscated inside), ORCHID and the rest of the
  // IETF protocol assignments.
  if (HasPrefix(b, {0x20, 0x01, 0x00}, 23)) return "IETF protocol assignments (2001::/23, Teredo)";
  if (!HasPrefix(b, {0x20}, 3)) return "reserved (outside global unicast 2000::/3)";
  return "public";
}

bool IsRefusedClass(absl::string_view name) {
  // The IPv6 classes ClassifyAddress names besides the IPv4 table's.
  static constexpr absl::string_view kOthers[] = {
      "local-use NAT64 (64:ff9b:1::/48)",
      "unspecified (::)",
      "IPv4-compatible (::/96, deprecated)",
      "link-local",
      "site-local (fec0::/10, deprecated)",
      "unique local (fc00::/7)",
      "discard-only (100::/64)",
      "IETF protocol assignments (2001::/23, Teredo)",
      "reserved (outside global unicast 2000::/3)",
  };
  for (const Range4& r : kRefused4) {
    if (r.rule == name) return true;
  }
  for (absl::string_view other : kOthers) {
    if (other == name) return true;
  }
  return false;
}

AddressVerdict JudgeAddress(const Bytes& address, const std::vector<Cidr>& allow_cidrs) {
  for (const Cidr& c : allow_cidrs) {
    if (CidrContains(c, address)) return {true, "allow_cidr"};
  }
  absl::string_view rule = ClassifyAddress(address);
  return {rule == "public", rule};
}

}  // namespace cubicle::egress
