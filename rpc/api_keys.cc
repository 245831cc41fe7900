#include "rpc/api_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include <boost/json/parse.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "rpc/jsonrpc.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

constexpr size_t kMinKeyLength = 32;
constexpr size_t kMaxFileBytes = 1 << 20;

absl::StatusOr<std::vector<std::string>> StringList(const json::object& entry, const char* field,
                                                    const std::string& where) {
  std::vector<std::string> out;
  const json::value* v = entry.if_contains(field);
  if (v == nullptr) return out;
  if (!v->is_array()) return absl::InvalidArgumentError(absl::StrCat(where, ".", field, ": not an array"));
  for (const json::value& item : v->as_array()) {
    if (!item.is_string()) return absl::InvalidArgumentError(absl::StrCat(where, ".", field, ": not all strings"));
    out.emplace_back(item.as_string());
  }
  if (out.empty()) {
    // An empty list would read as "all": an operator who meant "none"
    // must remove the key instead.
    return absl::InvalidArgumentError(absl::StrCat(where, ".", field, ": empty (leave it out to allow all)"));
  }
  return out;
}

absl::StatusOr<ApiKey> ParseKey(const json::value& v, size_t index) {
  const std::string where = absl::StrCat("keys[", index, "]");
  if (!v.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": not an object"));
  const json::object& o = v.as_object();
  for (const auto& member : o) {
    const std::string k(member.key());
    if (k != "name" && k != "key" && k != "uid" && k != "methods" && k != "profiles") {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown field '", k, "'"));
    }
  }
  ApiKey key;
  const json::value* name = o.if_contains("name");
  const json::value* secret = o.if_contains("key");
  if (name == nullptr || !name->is_string() || name->as_string().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".name: a non-empty string is required"));
  }
  key.name = std::string(name->as_string());
  if (const json::value* uid = o.if_contains("uid")) {
    // A socket client's user: no secret, the kernel vouches for it.
    if (secret != nullptr) return absl::InvalidArgumentError(absl::StrCat(where, " (", key.name, "): key and uid exclude each other"));
    if (!uid->is_int64() || uid->as_int64() < 0 || uid->as_int64() > 0xfffffffe) {
      return absl::InvalidArgumentError(absl::StrCat(where, " (", key.name, ").uid: a user id is required"));
    }
    key.uid = static_cast<uint32_t>(uid->as_int64());
  } else if (secret == nullptr || !secret->is_string() || secret->as_string().size() < kMinKeyLength) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " (", key.name, ").key: a string of at least ", kMinKeyLength, " characters is required"));
  }
  if (!key.uid.has_value()) key.key = std::string(secret->as_string());
  CUBICLE_ASSIGN_OR_RETURN(key.methods, StringList(o, "methods", where));
  CUBICLE_ASSIGN_OR_RETURN(key.profiles, StringList(o, "profiles", where));
  return key;
}

bool Allowed(const std::vector<std::string>& list, const std::string& item) {
  return list.empty() || std::find(list.begin(), list.end(), item) != list.end();
}

// Equal or not, in time that depends only on `presented`'s length: the
// stored key's length is folded into the result, never branched on, and
// every byte of `presented` is compared.
bool SameKey(absl::string_view presented, absl::string_view stored) {
  unsigned diff = presented.size() ^ stored.size();
  const size_t n = stored.size();
  for (size_t i = 0; i < presented.size(); ++i) {
    diff |= static_cast<unsigned char>(presented[i]) ^ static_cast<unsigned char>(stored[n == 0 ? 0 : i % n]);
  }
  volatile unsigned result = diff;  // kept from being turned into an early exit
  return result == 0;
}

}  // namespace

absl::StatusOr<ApiKeys> ApiKeys::Parse(absl::string_view text) {
  boost::system::error_code ec;
  json::value root = json::parse(json::string_view(text.data(), text.size()), ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("not JSON: ", ec.message()));
  const json::object* o = root.if_object();
  const json::value* list = o == nullptr ? nullptr : o->if_contains("keys");
  if (list == nullptr || !list->is_array() || list->as_array().empty()) {
    return absl::InvalidArgumentError("a non-empty \"keys\" array is required");
  }
  ApiKeys keys;
  std::set<std::string> names;
  for (size_t i = 0; i < list->as_array().size(); ++i) {
    CUBICLE_ASSIGN_OR_RETURN(ApiKey key, ParseKey(list->as_array()[i], i));
    if (!names.insert(key.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("keys[", i, "]: the name '", key.name, "' is used twice"));
    }
    if (key.uid.has_value() && keys.FindByUid(*key.uid) != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("keys[", i, "]: uid ", *key.uid, " has an entry already"));
    }
    keys.keys_.push_back(std::move(key));
  }
  return keys;
}

absl::StatusOr<ApiKeys> ApiKeys::Load(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return ErrnoStatus(errno, absl::StrCat("open(", path, ")"));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat(", path, ")"));
  if (!S_ISREG(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file"));
  if ((st.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: mode %04o lets group or others at the keys; chmod 600 it", path, st.st_mode & 07777));
  }
  std::string text;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("read(", path, ")"));
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxFileBytes) return absl::InvalidArgumentError(absl::StrCat(path, ": larger than 1 MiB"));
  }
  absl::StatusOr<ApiKeys> keys = Parse(text);
  if (!keys.ok()) return absl::Status(keys.status().code(), absl::StrCat(path, ": ", keys.status().message()));
  return keys;
}

const ApiKey* ApiKeys::Find(absl::string_view presented) const {
  const ApiKey* found = nullptr;
  for (const ApiKey& key : keys_) {  // no break: every key costs the same
    if (!key.uid.has_value() && SameKey(presented, key.key)) found = &key;
  }
  return found;
}

const ApiKey* ApiKeys::FindByName(absl::string_view name) const {
  for (const ApiKey& key : keys_) {
    if (!key.uid.has_value() && key.name == name) return &key;
  }
  return nullptr;
}

const ApiKey* ApiKeys::FindByUid(uint32_t uid) const {
  for (const ApiKey& key : keys_) {
    if (key.uid == uid) return &key;
  }
  return nullptr;
}

std::optional<std::string> ApiKeys::Refusal(const ApiKey& key, const std::string& method, const json::value& params,
                                            const ProfileOf& profile_of) {
  if (!Allowed(key.methods, method)) return absl::StrCat("key '", key.name, "' may not call ", method);
  if (key.profiles.empty()) return std::nullopt;
  if (const json::object* o = params.if_object()) {
    const json::value* p = o->if_contains("profile");
    if (p != nullptr && !p->is_string()) return absl::StrCat("key '", key.name, "': params.profile is not a string");
  }
  // The profile the daemon would use: named, its default, or the
  // session's own (a session.exec runs in its session's profile).
  std::optional<std::string> profile = profile_of(method, params);
  if (!profile.has_value()) return std::nullopt;  // the call uses no profile
  if (!Allowed(key.profiles, *profile)) return absl::StrCat("key '", key.name, "' may not use profile ", *profile);
  return std::nullopt;
}

std::optional<std::string> ApiKeys::Refusal(const ApiKey& key, absl::string_view body, const ProfileOf& profile_of) {
  // A key that may do anything refuses nothing: the body is not parsed,
  // which would parse every /rpc body twice (here and in the daemon).
  if (key.methods.empty() && key.profiles.empty()) return std::nullopt;
  // Elements in error are refused by the daemon without running anything.
  for (const Entry& entry : ParseLine(body, std::string::npos).entries) {
    if (entry.error) continue;
    if (std::optional<std::string> refused = Refusal(key, entry.call.method, entry.call.params, profile_of)) {
      return refused;
    }
  }
  return std::nullopt;
}

std::optional<absl::string_view> BearerToken(absl::string_view authorization) {
  authorization = absl::StripAsciiWhitespace(authorization);
  if (authorization.size() < 7 || !absl::EqualsIgnoreCase(authorization.substr(0, 7), "bearer ")) return std::nullopt;
  absl::string_view token = absl::StripAsciiWhitespace(authorization.substr(7));
  if (token.empty()) return std::nullopt;
  return token;
}

}  // namespace cubicle::rpc
