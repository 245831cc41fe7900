#include "rpc/http_auth.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sessions/digest.h"

namespace cubicle::rpc {

namespace {

// Equal or not in time that depends only on the lengths, which for two
// hex HMACs are public.
bool SameHex(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  volatile unsigned result = diff;
  return result == 0;
}

}  // namespace

std::string SigningString(absl::string_view timestamp, absl::string_view method, absl::string_view target,
                          absl::string_view body) {
  return absl::StrCat("CUBICLE-HMAC-SHA256\n", timestamp, "\n", method, "\n", target, "\n",
                      sessions::Sha256Hex(body));
}

absl::StatusOr<const ApiKey*> RequestVerifier::Verify(const ApiKeys& keys, const HttpCredentials& request,
                                                      absl::Time now) {
  if (!request.signature.empty() || !request.key_name.empty() || !request.timestamp.empty()) {
    return VerifySigned(keys, request, now);
  }
  std::optional<absl::string_view> token = BearerToken(request.authorization);
  if (!token.has_value()) {
    return absl::UnauthenticatedError("a bearer key or a signature (X-Cubicle-Signature) is required");
  }
  const ApiKey* key = keys.Find(*token);
  if (key == nullptr) return absl::UnauthenticatedError("the bearer key is not known");
  return key;
}

absl::StatusOr<const ApiKey*> RequestVerifier::VerifySigned(const ApiKeys& keys, const HttpCredentials& request,
                                                            absl::Time now) {
  if (request.signature.empty() || request.key_name.empty() || request.timestamp.empty()) {
    return absl::UnauthenticatedError(
        "a signed request needs X-Cubicle-Key-Name, X-Cubicle-Timestamp and X-Cubicle-Signature");
  }
  int64_t seconds = 0;
  if (!absl::SimpleAtoi(request.timestamp, &seconds)) {
    return absl::UnauthenticatedError("X-Cubicle-Timestamp: unix seconds expected");
  }
  const absl::Duration skew = absl::AbsDuration(now - absl::FromUnixSeconds(seconds));
  if (skew > kWindow) {
    return absl::UnauthenticatedError(absl::StrCat("the signature's timestamp is ", absl::ToInt64Seconds(skew),
                                                    " s from the server's clock (at most 30 s)"));
  }
  // The same work for a name that is not known: a key's name leaks nothing
  // by the time its refusal takes.
  const ApiKey* key = keys.FindByName(request.key_name);
  const std::string expected = sessions::HmacSha256Hex(
      key == nullptr ? absl::string_view("-") : absl::string_view(key->key),
      SigningString(request.timestamp, request.method, request.target, request.body));
  if (expected.empty()) return absl::InternalError("HMAC-SHA256 is unavailable: libcrypto could not be loaded");
  const std::string presented = absl::AsciiStrToLower(request.signature);
  if (!SameHex(presented, expected) || key == nullptr) {
    return absl::UnauthenticatedError("the signature does not match the request (key, timestamp, method, target or body)");
  }
  if (absl::Status first = FirstUse(presented, now); !first.ok()) return first;
  return key;
}

absl::Status RequestVerifier::FirstUse(const std::string& signature, absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  // Past the window (either side of it) a signature is refused as stale,
  // so it need not be remembered longer.
  while (!order_.empty() && now - order_.front().first > 2 * kWindow) {
    seen_.erase(order_.front().second);
    order_.pop_front();
  }
  if (seen_.count(signature) != 0) return absl::UnauthenticatedError("the signature was used before (a replay)");
  if (seen_.size() >= kMaxRemembered) {
    return absl::ResourceExhaustedError(
        absl::StrCat("more than ", kMaxRemembered, " signed requests within a minute: retry shortly"));
  }
  seen_.insert(signature);
  order_.emplace_back(now, signature);
  return absl::OkStatus();
}

}  // namespace cubicle::rpc
