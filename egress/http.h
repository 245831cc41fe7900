// A strict, bounded parser of the request head a proxy client sends:
// "CONNECT host:port HTTP/1.1" or "METHOD http://host[:port]/path HTTP/1.1",
// then header lines, then an empty line. Anything ambiguous (bare LF or CR,
// obsolete line folding, userinfo in the URI, a NUL, an oversized head) is
// refused rather than guessed at: the gateway decides on what it parsed, and
// the upstream must not be able to read the bytes differently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"

namespace cubicle::egress {

inline constexpr size_t kMaxRequestHead = 16 * 1024;
inline constexpr size_t kMaxHeaderCount = 100;

struct RequestHead {
  std::string method;
  bool connect = false;
  std::string host;   // as written (brackets removed from IPv6 literals); not yet normalised
  uint16_t port = 0;  // explicit, or 80 for http://
  std::string target;  // origin form "/path?query" (absolute-URI requests)
  std::string version;  // "HTTP/1.1" or "HTTP/1.0"
  std::vector<std::pair<std::string, std::string>> headers;
  size_t head_bytes = 0;  // through the empty line; what follows is body / tunnel data
};

// nullopt: the head is not complete yet (and `buffered` is within the
// bound). InvalidArgument: malformed; ResourceExhausted: over
// kMaxRequestHead or kMaxHeaderCount; Unimplemented: a form a forward proxy
// does not serve (origin-form, https:// absolute URIs, other schemes).
absl::StatusOr<std::optional<RequestHead>> ParseRequestHead(absl::string_view buffered);

// The head sent upstream for an absolute-URI request: origin-form request
// line, hop-by-hop and proxy headers dropped, Host set from the URI,
// "Connection: close" (one request per connection: the gateway checked one
// destination).
std::string UpstreamHead(const RequestHead& head);

}  // namespace cubicle::egress
