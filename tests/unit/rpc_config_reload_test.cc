// rpc/config_reload.h: what a reload would change, from two parsed
// configurations, with no daemon.
#include "rpc/config_reload.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cubicle::rpc {
namespace {

using Names = std::vector<std::string>;

DaemonConfig Parse(const std::string& text) {
  absl::StatusOr<DaemonConfig> config = ParseConfig(text);
  EXPECT_TRUE(config.ok()) << config.status() << "\n" << text;
  return config.ok() ? *std::move(config) : DaemonConfig{};
}

// {"profiles": {"NAME": {PROFILE}}, TOP...}
std::string One(const std::string& name, const std::string& profile, const std::string& top = "") {
  return absl::StrCat("{", top, top.empty() ? "" : ", ", R"("profiles": {")", name, R"(": {)", profile, "}}}");
}

ProfileChange Change(const std::string& before, const std::string& after) {
  return CompareProfiles(Parse(One("p", before)).profiles.at("p"), Parse(One("p", after)).profiles.at("p"));
}

TEST(CompareProfiles, SortsEachChangeByWhatItTakes) {
  const std::string base = R"("limits": {"memory": "256M"}, "pool": {"min_idle": 1, "max_idle": 2, "max_total": 8})";
  EXPECT_EQ(Change(base, base), ProfileChange::kSame);
  EXPECT_EQ(Change(base, absl::StrCat(base, R"(, "timeout_ms": 1000)")), ProfileChange::kUpdated);
  EXPECT_EQ(Change(base, absl::StrCat(base, R"(, "output_bytes": "64K")")), ProfileChange::kUpdated);
  const std::string bigger = R"("limits": {"memory": "256M"}, "pool": {"min_idle": 3, "max_idle": 4, "max_total": 8})";
  EXPECT_EQ(Change(base, bigger), ProfileChange::kResized);
  const std::string older = R"("limits": {"memory": "256M"}, "pool": {"min_idle": 1, "max_idle": 2, "max_total": 8, "max_age_s": 5})";
  EXPECT_EQ(Change(base, older), ProfileChange::kResized);
  // The sandbox itself: a new pool.
  EXPECT_EQ(Change(base, R"("limits": {"memory": "128M"}, "pool": {"min_idle": 1, "max_idle": 2, "max_total": 8})"),
            ProfileChange::kReplaced);
  EXPECT_EQ(Change(base, absl::StrCat(base, R"(, "env": {"A": "b"})")), ProfileChange::kReplaced);
  EXPECT_EQ(Change(base, absl::StrCat(base, R"(, "seccomp": "default")")), ProfileChange::kReplaced);
  EXPECT_EQ(Change(base, absl::StrCat(base, R"(, "network": {"allow_domains": ["example.com"]})")),
            ProfileChange::kReplaced);
  EXPECT_EQ(Change(base, R"("limits": {"memory": "256M"}, "pool": {"min_idle": 1, "max_idle": 2, "max_total": 8, "refill_parallelism": 1})"),
            ProfileChange::kReplaced);
  EXPECT_EQ(Change(absl::StrCat(base, R"(, "interpreter": {"argv": ["python3", "-I"], "preload": ["json"]})"),
                   absl::StrCat(base, R"(, "interpreter": {"argv": ["python3", "-I"], "preload": ["json", "os"]})")),
            ProfileChange::kReplaced);
  // A resize with a changed sandbox is a replacement.
  EXPECT_EQ(Change(base, R"("limits": {"memory": "128M"}, "pool": {"min_idle": 3, "max_idle": 4, "max_total": 8})"),
            ProfileChange::kReplaced);
}

TEST(PlanReload, NamesEachProfileOnceAndSaysSo) {
  const std::string pool = R"("pool": {"min_idle": 1, "max_idle": 2, "max_total": 8})";
  DaemonConfig before = Parse(absl::StrCat(R"({"profiles": {"keep": {)", pool, R"(}, "gone": {)", pool,
                                           R"(}, "grow": {)", pool, R"(}, "swap": {)", pool, "}}}"));
  DaemonConfig after = Parse(absl::StrCat(
      R"({"profiles": {"keep": {)", pool, R"(}, "grow": {"pool": {"min_idle": 2, "max_idle": 2, "max_total": 8}},)",
      R"( "swap": {"hostname": "other", )", pool, R"(}, "new": {)", pool, "}}}"));
  ReloadPlan plan = PlanReload(before.profiles, after.profiles);
  EXPECT_EQ(plan.added, Names{"new"});
  EXPECT_EQ(plan.removed, Names{"gone"});
  EXPECT_EQ(plan.replaced, Names{"swap"});
  EXPECT_EQ(plan.resized, Names{"grow"});
  EXPECT_EQ(plan.updated, Names{});
  EXPECT_FALSE(plan.changes_nothing());
  EXPECT_EQ(plan.Summary(), "profiles added: new; removed: gone; replaced: swap; resized: grow");

  ReloadPlan none = PlanReload(before.profiles, before.profiles);
  EXPECT_TRUE(none.changes_nothing());
  EXPECT_EQ(none.Summary(), "no profile changed");
}

TEST(RestartOnlyChanges, NamesEverySettingOnlyARestartChanges) {
  const std::string profile = R"("pool": {"min_idle": 1, "max_idle": 2, "max_total": 8})";
  DaemonConfig base = Parse(One("p", profile));
  EXPECT_EQ(RestartOnlyChanges(base, base), Names{});
  // Ceilings bound the profiles, which are compared themselves.
  EXPECT_EQ(RestartOnlyChanges(base, Parse(One("p", profile, R"("ceilings": {"memory": "1G"})"))), Names{});
  // So do new profiles, even where the sessions' default would follow them,
  // as long as there are no sessions.
  EXPECT_EQ(RestartOnlyChanges(base, Parse(absl::StrCat(R"({"profiles": {"a": {}, "p": {)", profile, "}}}"))), Names{});
  struct Case {
    const char* top;
    Names changed;
  };
  const Case cases[] = {
      {R"("socket": {"path": "/run/x.sock"})", {"socket.path"}},
      {R"("socket": {"mode": "0660"})", {"socket.mode"}},
      {R"("concurrency": {"max_concurrent": 3, "max_queue": 5})", {"concurrency.max_concurrent", "concurrency.max_queue"}},
      {R"("connections": {"on_disconnect": "finish"})", {"connections.on_disconnect"}},
      {R"("connections": {"line_timeout_ms": 5000, "idle_timeout_ms": 5000})",
       {"connections.line_timeout_ms", "connections.idle_timeout_ms"}},
      {R"("shutdown": {"drain_timeout_ms": 5})", {"shutdown.drain_timeout_ms"}},
      {R"("workspace_roots": ["/tmp"])", {"workspace_roots"}},
      {R"("sessions": {"max_sessions": 3})", {"sessions"}},
      {R"("npu": {"cache_window_ms": 5})", {"npu"}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(RestartOnlyChanges(base, Parse(One("p", profile, c.top))), c.changed) << c.top;
  }
}

}  // namespace
}  // namespace cubicle::rpc
