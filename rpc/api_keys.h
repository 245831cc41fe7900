// Bearer keys for the HTTP front (rpc/http_front.h): who may call, and
// which methods and profiles each key reaches (docs/protocol.md, "HTTP").
// Keys come from a file only, never the command line, where any user could
// read them in /proc.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/value.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubicle::rpc {

// One caller: an HTTP client holding `key`, or a Unix-socket client of
// user `uid` (SO_PEERCRED), with what it may do.
struct ApiKey {
  std::string name;
  std::string key;                    // empty for a uid entry
  std::optional<uint32_t> uid;        // a socket client's user
  std::vector<std::string> methods;   // empty: every method
  std::vector<std::string> profiles;  // empty: every profile
};

// The profile a call would use, as the daemon resolves it (its default
// profile, a session's own); nullopt for a call that uses none (health,
// exec.status...), which a profile scope does not restrict.
using ProfileOf = std::function<std::optional<std::string>(const std::string& method, const boost::json::value& params)>;

class ApiKeys {
 public:
  // {"keys": [{"name", "key" (>= 32 chars) or "uid", "methods"?, "profiles"?}]}.
  // The file must not be open to group or others: FailedPrecondition
  // naming its mode otherwise.
  static absl::StatusOr<ApiKeys> Load(const std::string& path);
  static absl::StatusOr<ApiKeys> Parse(absl::string_view text);

  // The key that `presented` is, compared in constant time against every
  // key (its length and its bytes leak nothing); null when none.
  const ApiKey* Find(absl::string_view presented) const;
  // The key of this name (signed requests name theirs); null when none.
  const ApiKey* FindByName(absl::string_view name) const;
  // The entry of socket clients of user `uid`; null when none.
  const ApiKey* FindByUid(uint32_t uid) const;

  // Why `key` may not make the call(s) of `body`, read as the daemon reads
  // a line (rpc/jsonrpc.h ParseLine, so that nothing it would run escapes
  // the check): every element of a batch is checked. nullopt when it may.
  static std::optional<std::string> Refusal(const ApiKey& key, absl::string_view body, const ProfileOf& profile_of);
  // The same for one call.
  static std::optional<std::string> Refusal(const ApiKey& key, const std::string& method,
                                            const boost::json::value& params, const ProfileOf& profile_of);

  size_t size() const { return keys_.size(); }

 private:
  std::vector<ApiKey> keys_;
};

// The value of an "Authorization: Bearer KEY" header's KEY; nullopt when
// the header is not a bearer credential.
std::optional<absl::string_view> BearerToken(absl::string_view authorization);

}  // namespace cubicle::rpc
