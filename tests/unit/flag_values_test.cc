#include "cli/flag_values.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include "absl/strings/str_cat.h"

namespace cubicle::cli {
namespace {

TEST(ParseSize, AcceptsPlainAndSuffixed) {
  EXPECT_EQ(*ParseSize("--size", "1048576"), 1048576u);
  EXPECT_EQ(*ParseSize("--size", "64K"), 64u << 10);
  EXPECT_EQ(*ParseSize("--size", "256m"), 256u << 20);
  EXPECT_EQ(*ParseSize("--size", "1G"), 1ull << 30);
}

TEST(ParseSize, RejectsGarbageNamingFlagAndValue) {
  for (const char* bad : {"", "12Q", "-5", "+5", "K", "1.5M", "99999999999999999999"}) {
    auto r = ParseSize("--tmp-size", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(absl::StrCat("--tmp-size '", bad, "'")), std::string::npos)
        << r.status().message();
  }
  EXPECT_FALSE(ParseSize("--size", "16777216T").ok());  // overflows 64 bits
}

TEST(ParseSeconds, PositiveFiniteOnly) {
  EXPECT_EQ(*ParseSeconds("--timeout", "2"), absl::Seconds(2));
  EXPECT_EQ(*ParseSeconds("--timeout", "0.25"), absl::Milliseconds(250));
  for (const char* bad : {"0", "-1", "abc", "inf", "nan", ""}) {
    EXPECT_FALSE(ParseSeconds("--timeout", bad).ok()) << bad;
  }
}

TEST(ParseId, RangeAndSyntax) {
  EXPECT_EQ(*ParseId("--uid", "0"), 0u);
  EXPECT_EQ(*ParseId("--uid", "4294967294"), 4294967294u);
  for (const char* bad : {"-1", "4294967295", "x", "1x", "+1"}) {
    EXPECT_FALSE(ParseId("--uid", bad).ok()) << bad;
  }
}

TEST(ParseRlimit, NamesAndValues) {
  auto r = ParseRlimit("--rlimit", "nofile=256:512");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->resource, RLIMIT_NOFILE);
  EXPECT_EQ(r->soft, 256u);
  EXPECT_EQ(r->hard, 512u);
  auto unlimited = ParseRlimit("--rlimit", "as=unlimited");
  ASSERT_TRUE(unlimited.ok());
  EXPECT_EQ(unlimited->soft, RLIM_INFINITY);
  EXPECT_EQ(ParseRlimit("--rlimit", "core=0")->hard, 0u);
  for (const char* bad : {"nofile", "bogus=1", "nofile=abc", "nofile=10:5", "=1"}) {
    auto e = ParseRlimit("--rlimit", bad);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_NE(e.status().message().find("--rlimit"), std::string::npos);
  }
}

}  // namespace
}  // namespace cubicle::cli
