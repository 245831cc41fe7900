#include "sessions/digest.h"

#include <dlfcn.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "base/dynamic_symbols.h"

namespace cubicle::sessions {
namespace {

// The EVP calls, resolved once from libcrypto (OpenSSL 3's soname first).
struct Evp {
  decltype(&EVP_MD_CTX_new) ctx_new = nullptr;
  decltype(&EVP_MD_CTX_free) ctx_free = nullptr;
  decltype(&EVP_sha256) sha256 = nullptr;
  decltype(&EVP_DigestInit_ex) init = nullptr;
  decltype(&EVP_DigestUpdate) update = nullptr;
  decltype(&EVP_DigestFinal_ex) final = nullptr;
  decltype(&HMAC) hmac = nullptr;
  bool ok() const { return ctx_new && ctx_free && sha256 && init && update && final; }
};

const Evp& Crypto() {
  static const Evp evp = [] {
    Evp e;
    void* lib = ::dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = ::dlopen("libcrypto.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return e;  // kept loaded for the process's life
    ResolveSymbol(lib, "EVP_MD_CTX_new", &e.ctx_new);
    ResolveSymbol(lib, "EVP_MD_CTX_free", &e.ctx_free);
    ResolveSymbol(lib, "EVP_sha256", &e.sha256);
    ResolveSymbol(lib, "EVP_DigestInit_ex", &e.init);
    ResolveSymbol(lib, "EVP_DigestUpdate", &e.update);
    ResolveSymbol(lib, "EVP_DigestFinal_ex", &e.final);
    ResolveSymbol(lib, "HMAC", &e.hmac);
    return e;
  }();
  return evp;
}

}  // namespace

Sha256::Sha256() {
  const Evp& evp = Crypto();
  if (!evp.ok()) {
    failed_ = true;
    return;
  }
  ctx_ = evp.ctx_new();
  failed_ = ctx_ == nullptr || evp.init(static_cast<EVP_MD_CTX*>(ctx_), evp.sha256(), nullptr) != 1;
}

Sha256::~Sha256() {
  if (ctx_ != nullptr) Crypto().ctx_free(static_cast<EVP_MD_CTX*>(ctx_));
}

void Sha256::Update(absl::string_view data) {
  if (failed_) return;
  failed_ = Crypto().update(static_cast<EVP_MD_CTX*>(ctx_), data.data(), data.size()) != 1;
}

namespace {

std::string Hex(const unsigned char* bytes, unsigned int length) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kHex[bytes[i] >> 4]);
    hex.push_back(kHex[bytes[i] & 0xf]);
  }
  return hex;
}

}  // namespace

std::string Sha256::FinishHex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (failed_ || Crypto().final(static_cast<EVP_MD_CTX*>(ctx_), digest, &length) != 1) {
    failed_ = true;
    return "";
  }
  return Hex(digest, length);
}

std::string HmacSha256Hex(absl::string_view key, absl::string_view data) {
  const Evp& evp = Crypto();
  if (!evp.ok() || evp.hmac == nullptr || key.size() > static_cast<size_t>(INT32_MAX)) return "";
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (evp.hmac(evp.sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
               data.size(), mac, &length) == nullptr) {
    return "";
  }
  return Hex(mac, length);
}

std::string Sha256Hex(absl::string_view data) {
  Sha256 sha;
  sha.Update(data);
  return sha.FinishHex();
}

}  // namespace cubicle::sessions
