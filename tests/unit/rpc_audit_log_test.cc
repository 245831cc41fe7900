// rpc/audit_log.h in a temporary directory: lines appended and found again
// by request id, skill and time, newest first; rotation by size keeping
// `keep` files; a torn last line skipped; hashes as sha256sum(1) makes them.
#include "rpc/audit_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/support/temp_dir.h"

namespace cubicle::rpc {
namespace {

namespace json = boost::json;

class AuditLogTest : public ::testing::Test {
 protected:

  static json::object Line(const std::string& request, const std::string& skill, int n = 0) {
    json::object o{{"request_id", request}, {"outcome", "ok"}, {"n", n}};
    if (!skill.empty()) o["skill"] = json::object{{"name", skill}, {"id", std::string(64, 'a')}, {"version", "1.0.0"}};
    return o;
  }

  test_support::TempDir root_;
  const std::string dir_ = root_.Join("audit");
};

TEST_F(AuditLogTest, LinesAreFoundByRequestSkillAndTimeNewestFirst) {
  absl::StatusOr<std::unique_ptr<AuditLog>> log = AuditLog::Open(dir_);
  ASSERT_TRUE(log.ok()) << log.status();
  const absl::Time before = absl::Now();
  ASSERT_TRUE((*log)->Append(Line("q1", "word-stats", 1)).ok());
  ASSERT_TRUE((*log)->Append(Line("q2", "divide", 2)).ok());
  ASSERT_TRUE((*log)->Append(Line("q3", "word-stats", 3)).ok());
  ASSERT_TRUE((*log)->Append(Line("q4", "", 4)).ok());  // an argv call: no skill

  auto query = [&](AuditFilter f) {
    absl::StatusOr<std::vector<json::object>> got = (*log)->Query(f);
    EXPECT_TRUE(got.ok()) << got.status();
    std::vector<int64_t> ns;
    for (const json::object& o : *got) ns.push_back(o.at("n").as_int64());
    return ns;
  };
  EXPECT_EQ(query({}), (std::vector<int64_t>{4, 3, 2, 1}));
  EXPECT_EQ(query({.request_id = "q2"}), (std::vector<int64_t>{2}));
  EXPECT_EQ(query({.skill = "word-stats"}), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(query({.skill = std::string(64, 'a')}), (std::vector<int64_t>{3, 2, 1})) << "by id";
  EXPECT_EQ(query({.skill = "word-stats", .limit = 1}), (std::vector<int64_t>{3}));
  EXPECT_EQ(query({.since = before - absl::Minutes(1)}).size(), 4u);
  EXPECT_TRUE(query({.since = absl::Now() + absl::Minutes(1)}).empty());
  EXPECT_TRUE(query({.until = before - absl::Minutes(1)}).empty());

  struct stat st;
  ASSERT_EQ(::stat((*log)->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST_F(AuditLogTest, RotationKeepsTheNewestFilesAndQueriesReadThemAll) {
  absl::StatusOr<std::unique_ptr<AuditLog>> log = AuditLog::Open(dir_, AuditOptions{.max_file_bytes = 300, .keep = 2});
  ASSERT_TRUE(log.ok()) << log.status();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE((*log)->Append(Line(absl::StrCat("q", i), "s", i)).ok());
  EXPECT_EQ(::access(((*log)->path() + ".1").c_str(), F_OK), 0);
  EXPECT_EQ(::access(((*log)->path() + ".2").c_str(), F_OK), 0);
  EXPECT_NE(::access(((*log)->path() + ".3").c_str(), F_OK), 0) << "only `keep` rotated files";
  absl::StatusOr<std::vector<json::object>> all = (*log)->Query({.limit = 1000});
  ASSERT_TRUE(all.ok());
  ASSERT_FALSE(all->empty());
  EXPECT_EQ(all->front().at("n"), 19) << "newest first";
  EXPECT_LT(all->size(), 20u) << "the oldest file went";
  for (size_t i = 1; i < all->size(); ++i) EXPECT_EQ((*all)[i].at("n").as_int64(), (*all)[i - 1].at("n").as_int64() - 1);
}

TEST_F(AuditLogTest, ATornLastLineIsSkippedAndAppendsGoOnAfterIt) {
  {
    absl::StatusOr<std::unique_ptr<AuditLog>> log = AuditLog::Open(dir_);
    ASSERT_TRUE(log.ok());
    ASSERT_TRUE((*log)->Append(Line("q1", "s", 1)).ok());
    std::ofstream(dir_ + "/audit.jsonl", std::ios::app) << R"({"request_id":"q2","n":)";  // a machine crash
  }
  absl::StatusOr<std::unique_ptr<AuditLog>> log = AuditLog::Open(dir_);
  ASSERT_TRUE(log.ok());
  ASSERT_TRUE((*log)->Append(Line("q3", "s", 3)).ok());
  absl::StatusOr<std::vector<json::object>> all = (*log)->Query({});
  ASSERT_TRUE(all.ok());
  std::vector<int64_t> ns;
  for (const json::object& o : *all) ns.push_back(o.at("n").as_int64());
  // The torn line and the one written onto it make one line that does not
  // parse: both are lost, the rest is read.
  EXPECT_EQ(ns, (std::vector<int64_t>{1}));
  ASSERT_TRUE((*log)->Append(Line("q4", "s", 4)).ok());
  EXPECT_EQ((*log)->Query({})->front().at("n"), 4);
}

TEST(JsonSha256, IsTheDigestOfTheCompactSerialization) {
  const json::value v = json::parse(R"({"text": "a b",  "top": [1, 2]})");
  FILE* p = ::popen(R"(printf '%s' '{"text":"a b","top":[1,2]}' | sha256sum)", "r");
  ASSERT_NE(p, nullptr);
  char buf[65] = {};
  ASSERT_EQ(::fread(buf, 1, 64, p), 64u);
  ::pclose(p);
  EXPECT_EQ(JsonSha256(v), std::string(buf));
}

}  // namespace
}  // namespace cubicle::rpc
