// The UTF-8 helpers that decide whether output goes out as text and where
// a streamed piece may end (rpc/results_json.h).
#include <gtest/gtest.h>

#include "rpc/results_json.h"

namespace cubicle::rpc {
namespace {

TEST(Utf8, ValidAndInvalid) {
  EXPECT_TRUE(ValidUtf8(""));
  EXPECT_TRUE(ValidUtf8("plain"));
  EXPECT_TRUE(ValidUtf8("h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(ValidUtf8("h\xc3"));          // cut short
  EXPECT_FALSE(ValidUtf8("\xa9"));           // a lone continuation byte
  EXPECT_FALSE(ValidUtf8("\xff\xfe"));       // never in UTF-8
  EXPECT_FALSE(ValidUtf8("\xe2\x28\xa1"));   // a bad continuation
}

TEST(Utf8, TheBoundaryHoldsBackOnlyACharacterCutOffAtTheEnd) {
  EXPECT_EQ(Utf8Boundary(""), 0u);
  EXPECT_EQ(Utf8Boundary("abc"), 3u);
  EXPECT_EQ(Utf8Boundary("h\xc3\xa9"), 3u);               // whole
  EXPECT_EQ(Utf8Boundary("h\xc3"), 1u);                   // 2-byte lead alone
  EXPECT_EQ(Utf8Boundary("h\xe2\x82"), 1u);               // 3-byte, one missing
  EXPECT_EQ(Utf8Boundary("h\xf0\x9f\x98"), 1u);           // 4-byte, one missing
  EXPECT_EQ(Utf8Boundary("h\xf0\x9f\x98\x80"), 5u);       // 4-byte, whole
  // Not UTF-8 there anyway: nothing is held back (it goes out as base64).
  EXPECT_EQ(Utf8Boundary("ab\xa9\xa9\xa9"), 5u);
  EXPECT_EQ(Utf8Boundary("ab\xff"), 3u);
}

}  // namespace
}  // namespace cubicle::rpc
