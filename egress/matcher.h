// Host names as the allowlist compares them, and the pattern match.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "egress/policy.h"

namespace cubicle::egress {

// RFC 3492 punycode of one label's code points (without the "xn--").
// InvalidArgument on overflow.
absl::StatusOr<std::string> PunycodeEncode(const std::u32string& code_points);

// Normalises a DNS name: one trailing dot dropped, ASCII lower-cased, each
// non-ASCII label (valid UTF-8) punycode-encoded as "xn--…". Labels are 1-63
// bytes of [a-z0-9-_] after that, the name at most 253. Anything else —
// empty labels, '%', '@', ':', '/', spaces, bad UTF-8 — is InvalidArgument:
// a name we cannot read unambiguously is never matched.
//
// Not full UTS #46: non-ASCII letters are not case-folded or NFC-normalised,
// so "É.example" and "é.example" differ; both sides (pattern and request)
// go through this same function, and a mismatch refuses.
absl::StatusOr<std::string> NormalizeHostName(absl::string_view name);

// Whether `host` (normalised) matches `pattern`.
bool MatchesPattern(const DomainPattern& pattern, absl::string_view host);

// The first pattern that matches, or nullptr.
const DomainPattern* FindMatch(const std::vector<DomainPattern>& patterns, absl::string_view host);

}  // namespace cubicle::egress
