#include "sessions/digest.h"

namespace cubicle::sessions {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  failed_ = ctx_ == nullptr || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1;
}

void Sha256::Update(absl::string_view data) {
  if (failed_) return;
  failed_ = EVP_DigestUpdate(ctx_.get(), data.data(), data.size()) != 1;
}

std::string Sha256::FinishHex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (failed_ || EVP_DigestFinal_ex(ctx_.get(), digest, &length) != 1) {
    failed_ = true;
    return "";
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 0xf]);
  }
  return hex;
}

std::string Sha256Hex(absl::string_view data) {
  Sha256 sha;
  sha.Update(data);
  return sha.FinishHex();
}

}  // namespace cubicle::sessions
