// Ids for the daemon's durable things (DESIGN §6a): a one-letter prefix
// naming the kind ('e' for an execution, …) and a ULID — 48 bits of Unix
// milliseconds then 80 random bits, as 26 Crockford base32 digits — so ids
// sort by creation time as text and do not repeat across daemon restarts.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace cubicle::sessions {

inline constexpr size_t kUlidChars = 26;

// `prefix` followed by a fresh ULID. Monotonic within the process, across
// threads: an id made in the same millisecond as the last (or after the
// clock stepped back) takes the last one's random part plus one, so later
// ids always sort after earlier ones. A forked child draws fresh random bits
// rather than continuing its parent's sequence. Thread-safe.
std::string NewId(char prefix);

// Whether `text` is `prefix` followed by 26 upper-case Crockford base32
// digits whose value fits 128 bits (the first digit at most '7').
bool LooksLikeId(absl::string_view text, char prefix);

}  // namespace cubicle::sessions
