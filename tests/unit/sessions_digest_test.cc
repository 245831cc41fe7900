// sessions/digest.h: SHA-256 against the FIPS 180-2 vectors, one-shot and
// streamed in pieces.
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

}  // namespace
}  // namespace cubicle::sessions
