// SHA-256 of what the files API hands out (FileInfo::sha256, collected
// outputs), as lowercase hex. OpenSSL's EVP interface, linked statically
// with the other dependencies (root CMakeLists.txt, cubicle_crypto).
#pragma once

#include <openssl/evp.h>

#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace cubicle::sessions {

// Streaming: Update with each piece, then FinishHex once; the context is
// freed with the object. With a built-in digest OpenSSL fails only to
// allocate; the daemon must not abort on that, so a failure anywhere
// makes FinishHex return "" (never a valid digest), which callers report.
class Sha256 {
 public:
  Sha256();
  void Update(absl::string_view data);
  std::string FinishHex();

 private:
  struct FreeCtx {
    void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
  };
  std::unique_ptr<EVP_MD_CTX, FreeCtx> ctx_;
  bool failed_ = false;
};

// 64 lowercase hex digits; "" where OpenSSL failed (see Sha256).
std::string Sha256Hex(absl::string_view data);

}  // namespace cubicle::sessions
