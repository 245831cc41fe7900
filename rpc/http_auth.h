// Who an HTTP request comes from (docs/protocol.md, "Authentication"): a
// bearer key, or a key's HMAC-SHA256 signature over the request — its
// method, target, body digest and a timestamp — fresh within 30 s and
// never accepted twice. A signature proves the key without sending it, and
// binds it to this one request: a copy of a signed request replayed, or
// its body changed on the way, is refused.
#pragma once

#include <deque>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rpc/api_keys.h"

namespace cubicle::rpc {

// What of a request authentication reads.
struct HttpCredentials {
  absl::string_view authorization;  // "Authorization"
  absl::string_view key_name;       // "X-Cubicle-Key-Name"
  absl::string_view timestamp;      // "X-Cubicle-Timestamp": unix seconds
  absl::string_view signature;      // "X-Cubicle-Signature": lowercase hex
  absl::string_view method;         // "POST"
  absl::string_view target;         // path and query, as sent
  absl::string_view body;
};

// What the signature signs:
// "CUBICLE-HMAC-SHA256\n" TIMESTAMP "\n" METHOD "\n" TARGET "\n" hex(SHA-256(BODY)).
std::string SigningString(absl::string_view timestamp, absl::string_view method, absl::string_view target,
                          absl::string_view body);

class RequestVerifier {
 public:
  static constexpr absl::Duration kWindow = absl::Seconds(30);
  // Signatures remembered at most (each for the window): beyond, signed
  // requests are refused until old ones age out, rather than memory grow.
  static constexpr size_t kMaxRemembered = 1 << 18;

  // The key the request proves; Unauthenticated saying why otherwise (no
  // credential, an unknown key, a stale, bad or replayed signature).
  // Thread-safe.
  absl::StatusOr<const ApiKey*> Verify(const ApiKeys& keys, const HttpCredentials& request, absl::Time now);

 private:
  absl::StatusOr<const ApiKey*> VerifySigned(const ApiKeys& keys, const HttpCredentials& request, absl::Time now);
  // Remembers `signature`; Unauthenticated when it was accepted within
  // the window, ResourceExhausted when too many are remembered.
  absl::Status FirstUse(const std::string& signature, absl::Time now);

  std::mutex mu_;
  std::unordered_set<std::string> seen_;
  std::deque<std::pair<absl::Time, std::string>> order_;  // oldest first
};

}  // namespace cubicle::rpc
