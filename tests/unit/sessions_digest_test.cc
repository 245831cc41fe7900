// sessions/digest.h: SHA-256 against the FIPS 180-2 vectors, one-shot and
// streamed in pieces; HMAC-SHA256 against RFC 4231's.
#include "sessions/digest.h"

#include <string>

#include "gtest/gtest.h"

namespace cubicle::sessions {
namespace {

TEST(Sha256, MatchesTheStandardVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, StreamedInPiecesEqualsOneShot) {
  const std::string text = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  Sha256 sha;
  for (size_t i = 0; i < text.size(); i += 7) sha.Update(absl::string_view(text).substr(i, 7));
  EXPECT_EQ(sha.FinishHex(), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(text), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

// RFC 4231, test cases 1 and 2.
TEST(HmacSha256, MatchesTheStandardVectors) {
  EXPECT_EQ(HmacSha256Hex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(HmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

}  // namespace
}  // namespace cubicle::sessions
