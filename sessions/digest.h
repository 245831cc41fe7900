// SHA-256 of what the files API hands out (FileInfo::sha256, collected
// outputs), as lowercase hex, by OpenSSL's EVP interface. libcrypto is
// loaded (dlopen) the first time a digest is taken, not linked: linked in,
// statically or not, its relocated tables cost every `cubicle run` start
// page faults, and only a daemon serving files ever hashes.
#pragma once

#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace cubicle::sessions {

// Streaming: Update with each piece, then FinishHex once; the context is
// freed with the object. A failure anywhere — libcrypto missing on this
// host, or OpenSSL failing to allocate — makes FinishHex return "" (never
// a valid digest), which callers report; the daemon never aborts on it.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(absl::string_view data);
  std::string FinishHex();

 private:
  void* ctx_ = nullptr;  // EVP_MD_CTX
  bool failed_ = false;
};

// 64 lowercase hex digits; "" where hashing failed (see Sha256).
std::string Sha256Hex(absl::string_view data);

// HMAC-SHA256 of `data` under `key` (OpenSSL's HMAC()), as 64 lowercase
// hex digits; "" where libcrypto is missing or failed.
std::string HmacSha256Hex(absl::string_view key, absl::string_view data);

}  // namespace cubicle::sessions
