#include "egress/matcher.h"

#include <cstdint>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace cubicle::egress {
namespace {

constexpr uint32_t kBase = 36, kTMin = 1, kTMax = 26, kSkew = 38, kDamp = 700, kInitialBias = 72,
                   kInitialN = 128;

char EncodeDigit(uint32_t d) { return static_cast<char>(d < 26 ? 'a' + d : '0' + (d - 26)); }

uint32_t Adapt(uint32_t delta, uint32_t num_points, bool first) {
  delta = first ? delta / kDamp : delta / 2;
  delta += delta / num_points;
  uint32_t k = 0;
  while (delta > ((kBase - kTMin) * kTMax) / 2) {
    delta /= kBase - kTMin;
    k += kBase;
  }
  return k + (kBase - kTMin + 1) * delta / (delta + kSkew);
}

// Decodes UTF-8 strictly: no overlongs, no surrogates, nothing above U+10FFFF.
bool DecodeUtf8(absl::string_view in, std::u32string* out) {
  for (size_t i = 0; i < in.size();) {
    const auto b0 = static_cast<unsigned char>(in[i]);
    uint32_t cp;
    size_t len;
    if (b0 < 0x80) {
      cp = b0, len = 1;
    } else if ((b0 & 0xE0) == 0xC0) {
      cp = b0 & 0x1F, len = 2;
    } else if ((b0 & 0xF0) == 0xE0) {
      cp = b0 & 0x0F, len = 3;
    } else if ((b0 & 0xF8) == 0xF0) {
      cp = b0 & 0x07, len = 4;
    } else {
      return false;
    }
    if (i + len > in.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(in[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    out->push_back(cp);
    i += len;
  }
  return true;
}

bool IsLabelChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

}  // namespace

absl::StatusOr<std::string> PunycodeEncode(const std::u32string& input) {
  std::string out;
  for (char32_t c : input) {
    if (c < 0x80) out.push_back(static_cast<char>(c));
  }
  const uint32_t basic = static_cast<uint32_t>(out.size());
  uint32_t handled = basic;
  if (basic > 0) out.push_back('-');
  uint32_t n = kInitialN, delta = 0, bias = kInitialBias;
  const uint32_t total = static_cast<uint32_t>(input.size());
  while (handled < total) {
    uint32_t m = UINT32_MAX;
    for (char32_t c : input) {
      if (c >= n && c < m) m = c;
    }
    if (m - n > (UINT32_MAX - delta) / (handled + 1)) return absl::InvalidArgumentError("punycode: overflow");
    delta += (m - n) * (handled + 1);
    n = m;
    for (char32_t c : input) {
      if (c < n && ++delta == 0) return absl::InvalidArgumentError("punycode: overflow");
      if (c != n) continue;
      uint32_t q = delta;
      for (uint32_t k = kBase;; k += kBase) {
        const uint32_t t = k <= bias ? kTMin : k >= bias + kTMax ? kTMax : k - bias;
        if (q < t) break;
        out.push_back(EncodeDigit(t + (q - t) % (kBase - t)));
        q = (q - t) / (kBase - t);
      }
      out.push_back(EncodeDigit(q));
      bias = Adapt(delta, handled + 1, handled == basic);
      delta = 0;
      ++handled;
    }
    ++delta;
    ++n;
  }
  return out;
}

absl::StatusOr<std::string> NormalizeHostName(absl::string_view name) {
  const absl::string_view original = name;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("host name '", original, "': ", why));
  };
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  if (name.empty()) return bad("empty");
  if (name.size() > 1024) return bad("longer than 253 bytes");
  std::string out;
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == absl::string_view::npos) dot = name.size();
    absl::string_view label = name.substr(start, dot - start);
    if (label.empty()) return bad("empty label");
    bool ascii = true;
    for (char c : label) ascii &= static_cast<unsigned char>(c) < 0x80;
    std::string encoded;
    if (ascii) {
      for (char c : label) encoded.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
    } else {
      std::u32string points;
      if (!DecodeUtf8(label, &points)) return bad("not valid UTF-8");
      for (char32_t& c : points) {
        if (c >= 'A' && c <= 'Z') c = c - 'A' + 'a';
      }
      absl::StatusOr<std::string> puny = PunycodeEncode(points);
      if (!puny.ok()) return bad(puny.status().message());
      encoded = absl::StrCat("xn--", *puny);
    }
    for (char c : encoded) {
      if (!IsLabelChar(c)) return bad(absl::StrCat("character '", std::string(1, c), "' is not allowed in a name"));
    }
    if (encoded.size() > 63) return bad("a label is longer than 63 bytes");
    if (!out.empty()) out.push_back('.');
    out += encoded;
    start = dot + 1;
  }
  if (out.size() > 253) return bad("longer than 253 bytes");
  return out;
}

bool MatchesPattern(const DomainPattern& pattern, absl::string_view host) {
  if (!pattern.subdomains) return host == pattern.name;
  // "*.example.org": at least one more label before ".example.org".
  return host.size() > pattern.name.size() + 1 && absl::EndsWith(host, pattern.name) &&
         host[host.size() - pattern.name.size() - 1] == '.';
}

const DomainPattern* FindMatch(const std::vector<DomainPattern>& patterns, absl::string_view host) {
  for (const DomainPattern& p : patterns) {
    if (MatchesPattern(p, host)) return &p;
  }
  return nullptr;
}

}  // namespace cubicle::egress
