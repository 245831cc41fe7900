// Bearer keys for the HTTP front (rpc/http_front.h): who may call, and
// which methods and profiles each key reaches (docs/protocol.md, "HTTP").
// Keys come from a file only, never the command line, where any user could
// read them in /proc.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <boost/json/value.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubicle::rpc {

struct ApiKey {
  std::string name;
  std::string key;
  std::vector<std::string> methods;   // empty: every method
  std::vector<std::string> profiles;  // empty: every profile
};

class ApiKeys {
 public:
  // {"keys": [{"name", "key" (>= 32 chars), "methods"?, "profiles"?}]}.
  // The file must not be open to group or others: FailedPrecondition
  // naming its mode otherwise.
  static absl::StatusOr<ApiKeys> Load(const std::string& path);
  static absl::StatusOr<ApiKeys> Parse(absl::string_view text);

  // The key that `presented` is, compared in constant time against every
  // key (its length and its bytes leak nothing); null when none.
  const ApiKey* Find(absl::string_view presented) const;

  // Why `key` may not make the call(s) of `body`, read as the daemon reads
  // a line (rpc/jsonrpc.h ParseLine, so that nothing it would run escapes
  // the check): every element of a batch is checked. nullopt when it may.
  static std::optional<std::string> Refusal(const ApiKey& key, absl::string_view body);
  // The same for one call.
  static std::optional<std::string> Refusal(const ApiKey& key, const std::string& method,
                                            const boost::json::value& params);

  size_t size() const { return keys_.size(); }

 private:
  std::vector<ApiKey> keys_;
};

// The value of an "Authorization: Bearer KEY" header's KEY; nullopt when
// the header is not a bearer credential.
std::optional<absl::string_view> BearerToken(absl::string_view authorization);

}  // namespace cubicle::rpc
