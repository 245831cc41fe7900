// skills/package_version.h: installed versions read as PEP 440 reads them,
// ordered as it orders them, and requirements met (or not, saying why) as
// pip's `packaging` decides for an installed package; skills/r_version.h:
// an R skill's requirements read, ordered and met as R's package_version
// decides.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "skills/package_version.h"
#include "skills/r_version.h"
#include "skills/requirement.h"

namespace cubicle::skills {
namespace {

PackageVersion V(const char* text) {
  absl::StatusOr<PackageVersion> v = ParsePackageVersion(text);
  EXPECT_TRUE(v.ok()) << text << ": " << v.status();
  return v.ok() ? *v : PackageVersion{};
}

bool Meets(const char* requirement, const char* installed) {
  absl::StatusOr<Requirement> r = ParseRequirement(requirement);
  EXPECT_TRUE(r.ok()) << requirement;
  return r.ok() && Satisfies(*r, installed);
}

std::string Unmet(const char* requirement, std::optional<std::string> installed) {
  absl::StatusOr<Requirement> r = ParseRequirement(requirement);
  EXPECT_TRUE(r.ok()) << requirement;
  return r.ok() ? UnmetMessage(*r, installed) : "";
}

TEST(PackageVersion, OrderIsPep440s) {
  // Each below the next.
  const std::vector<const char*> ascending = {
      "1.0.dev456", "1.0a1",  "1.0a2.dev456", "1.0a12.dev456", "1.0a12",     "1.0b1.dev456",   "1.0b2",
      "1.0b2.post345.dev456", "1.0b2.post345", "1.0rc1.dev456", "1.0rc1", "1.0", "1.0+abc.5", "1.0+abc.7",
      "1.0+5", "1.0.post456.dev34", "1.0.post456", "1.0.15", "1.1.dev1", "1!0.5"};
  for (size_t i = 0; i + 1 < ascending.size(); ++i) {
    EXPECT_LT(ComparePackageVersions(V(ascending[i]), V(ascending[i + 1])), 0)
        << ascending[i] << " < " << ascending[i + 1];
    EXPECT_GT(ComparePackageVersions(V(ascending[i + 1]), V(ascending[i])), 0);
  }
  EXPECT_EQ(ComparePackageVersions(V("1.0"), V("1.0.0")), 0);
  EXPECT_EQ(ComparePackageVersions(V("1.0+local"), V("1.0"), /*local=*/false), 0);
}

TEST(PackageVersion, ReadsTheSpellingsPep440Normalizes) {
  EXPECT_EQ(ComparePackageVersions(V("1.0-RC1"), V("1.0rc1")), 0);
  EXPECT_EQ(ComparePackageVersions(V("v2"), V("2")), 0);
  EXPECT_EQ(ComparePackageVersions(V("1.0-1"), V("1.0.post1")), 0);
  EXPECT_EQ(ComparePackageVersions(V("1.0.post"), V("1.0.post0")), 0);
  EXPECT_EQ(ComparePackageVersions(V("1.0_alpha.2"), V("1.0a2")), 0);
  EXPECT_EQ(ComparePackageVersions(V("1.0c1"), V("1.0rc1")), 0);
  EXPECT_EQ(ComparePackageVersions(V("1.0.rev3"), V("1.0.post3")), 0);
  EXPECT_EQ(ComparePackageVersions(V(" 2023.3 "), V("2023.3.0")), 0);
  for (const char* bad : {"", "x", "1.0x", "1..0", "1.0+", "1.0+a..b", "1.0-", "unknown", "1.0 beta"}) {
    EXPECT_FALSE(ParsePackageVersion(bad).ok()) << bad;
  }
}

TEST(PackageVersion, ConstraintsAsPackagingAppliesThem) {
  EXPECT_TRUE(Meets("numpy", "anything at all"));
  EXPECT_TRUE(Meets("numpy>=1.10", "1.26.4"));
  EXPECT_FALSE(Meets("numpy>=1.10", "1.9"));
  EXPECT_FALSE(Meets("numpy>=1.10", "1.9.3"));  // 1.9.3 < 1.10: numbers, not text
  EXPECT_TRUE(Meets("numpy>=1.10,<2", "1.10"));
  EXPECT_FALSE(Meets("numpy>=1.10,<2", "2.0.0"));
  EXPECT_FALSE(Meets("numpy<2", "2.0rc1"));  // not a prerelease of the bound itself
  EXPECT_TRUE(Meets("numpy<2.0rc2", "2.0rc1"));
  EXPECT_TRUE(Meets("numpy<2", "1.99.dev1"));
  EXPECT_FALSE(Meets("numpy>1.0", "1.0.post1"));
  EXPECT_FALSE(Meets("numpy>1.0", "1.0+local"));
  EXPECT_TRUE(Meets("numpy>1.0", "1.0.1"));
  EXPECT_TRUE(Meets("numpy>1.0.post1", "1.0.post2"));
  EXPECT_TRUE(Meets("numpy<=1.0", "1.0+local"));
  EXPECT_TRUE(Meets("numpy==1.4", "1.4.0"));
  EXPECT_TRUE(Meets("numpy==1.4", "1.4+ubuntu1"));  // a pin without a local label ignores the candidate's
  EXPECT_FALSE(Meets("numpy==1.4", "1.5+ubuntu1"));
  EXPECT_TRUE(Meets("numpy==1.4.*", "1.4.7"));
  EXPECT_TRUE(Meets("numpy==1.4.*", "1.4rc1"));
  EXPECT_FALSE(Meets("numpy==1.4.*", "1.5"));
  EXPECT_FALSE(Meets("numpy!=1.4.*", "1.4.2"));
  EXPECT_TRUE(Meets("numpy!=1.4", "1.4.1"));
  EXPECT_TRUE(Meets("numpy~=1.4.2", "1.4.9"));
  EXPECT_FALSE(Meets("numpy~=1.4.2", "1.5.0"));
  EXPECT_FALSE(Meets("numpy~=1.4.2", "1.4.1"));
  EXPECT_TRUE(Meets("numpy~=1.4", "1.9"));
  EXPECT_FALSE(Meets("numpy~=1.4", "2.0"));
  EXPECT_FALSE(Meets("numpy>=1", "not-a-version"));
}

TEST(PackageVersion, UnmetSaysWhatIsNeededAndWhatThereIs) {
  EXPECT_EQ(Unmet("numpy>=1.10", "1.9"), "package numpy not available (need >= 1.10, have 1.9)");
  EXPECT_EQ(Unmet("numpy>=1.10", std::nullopt), "package numpy not available (need >= 1.10, not installed)");
  EXPECT_EQ(Unmet("NumPy", std::nullopt), "package numpy not available (not installed)");
  EXPECT_EQ(Unmet("numpy<2,>=1.10", "2.1.0"), "package numpy not available (need >= 1.10, < 2, have 2.1.0)");
  EXPECT_EQ(Unmet("numpy>=1", "weird"), "package numpy not available (need >= 1, have 'weird', not a PEP 440 version)");
}

RVersion RV(const char* text) {
  absl::StatusOr<RVersion> v = ParseRVersion(text);
  EXPECT_TRUE(v.ok()) << text << ": " << v.status();
  return v.ok() ? *v : RVersion{};
}

bool MeetsR(const char* requirement, const char* installed) {
  absl::StatusOr<Requirement> r = ParseRequirement(requirement, PackageKind::kR);
  EXPECT_TRUE(r.ok()) << requirement << ": " << r.status();
  return r.ok() && Satisfies(*r, installed, PackageKind::kR);
}

TEST(RVersion, OrderIsRsNumberByNumber) {
  // Each below the next, as package_version orders them.
  const std::vector<const char*> ascending = {"0.2-25", "0.10", "1.0-1", "1.9.2", "1.10.0",
                                              "1.14.8", "1.14.8-1", "1.14.9", "4.2.2", "99"};
  for (size_t i = 0; i + 1 < ascending.size(); ++i) {
    EXPECT_LT(CompareRVersions(RV(ascending[i]), RV(ascending[i + 1])), 0) << ascending[i] << " < " << ascending[i + 1];
    EXPECT_GT(CompareRVersions(RV(ascending[i + 1]), RV(ascending[i])), 0);
  }
  EXPECT_EQ(CompareRVersions(RV("1.0"), RV("1.0.0")), 0);  // R pads with zeros
  EXPECT_EQ(CompareRVersions(RV("1.0-0"), RV("1.0")), 0);
  EXPECT_EQ(CompareRVersions(RV("0.2-25"), RV("0.2.25")), 0);  // '-' and '.' weigh the same
  EXPECT_EQ(CompareRVersions(RV("01.2"), RV("1.2")), 0);
  EXPECT_EQ(RV("1.14.8-1"), (RVersion{1, 14, 8, 1}));
  for (const char* bad : {"", "x", "1.0x", "1..0", "1.0-", "-1", "1.0rc1", "1.0+b", "v2", "1 .0"}) {
    EXPECT_FALSE(ParseRVersion(bad).ok()) << bad;
  }
}

TEST(RVersion, ConstraintsAsROrdersThem) {
  EXPECT_TRUE(MeetsR("jsonlite", "anything at all"));
  EXPECT_TRUE(MeetsR("jsonlite>=1.8", "1.8.4"));
  EXPECT_FALSE(MeetsR("jsonlite>=99", "1.8.4"));
  EXPECT_TRUE(MeetsR("data.table>=1.10.0", "1.14.8"));  // numbers, not text
  EXPECT_FALSE(MeetsR("data.table<1.14.8-1", "1.14.8-1"));
  EXPECT_TRUE(MeetsR("data.table>1.14.8", "1.14.8-1"));
  EXPECT_TRUE(MeetsR("Matrix>=1.5-3,<2", "1.5-3"));
  EXPECT_FALSE(MeetsR("Matrix>=1.5-3,<2", "1.5-2"));
  EXPECT_TRUE(MeetsR("nlme==3.1", "3.1.0"));
  EXPECT_FALSE(MeetsR("nlme!=3.1", "3.1.0"));
  EXPECT_TRUE(MeetsR("nlme<=3.1-162", "3.1-162"));
  EXPECT_FALSE(MeetsR("jsonlite>=1", "1.8.4rc"));  // not an R version: meets no constraint
}

TEST(RVersion, UnmetSaysWhatIsNeededAndWhatThereIs) {
  auto unmet = [](const char* text, std::optional<std::string> installed) {
    absl::StatusOr<Requirement> r = ParseRequirement(text, PackageKind::kR);
    EXPECT_TRUE(r.ok()) << text;
    return r.ok() ? UnmetMessage(*r, installed, PackageKind::kR) : "";
  };
  EXPECT_EQ(unmet("jsonlite >= 99", "1.8.4"), "package jsonlite not available (need >= 99, have 1.8.4)");
  EXPECT_EQ(unmet("data.table", std::nullopt), "package data.table not available (not installed)");
  EXPECT_EQ(unmet("Matrix>=1.5-3", "1.5.rc"), "package Matrix not available (need >= 1.5-3, have '1.5.rc', not an R version)");
}

TEST(RRequirement, NamesKeepTheirCaseAndDots) {
  absl::StatusOr<Requirement> r = ParseRequirement(" data.table >= 1.14.8-1 , < 2 ", PackageKind::kR);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->name, "data.table");
  EXPECT_EQ(r->Canonical(), "data.table<2,>=1.14.8-1");
  EXPECT_EQ(ParseRequirement("Matrix", PackageKind::kR)->name, "Matrix");
  EXPECT_EQ(ParseRequirement("jsonlite>=99", PackageKind::kR)->Canonical(), "jsonlite>=99");
  // Python's reading of the same names is unchanged (PEP 503).
  EXPECT_EQ(ParseRequirement("data.table")->name, "data-table");
  EXPECT_EQ(ParseRequirement("Matrix")->name, "matrix");
  EXPECT_FALSE(ParseRequirement("data.table>=1.14.8-1").ok());  // not a PEP 440 constraint
  for (const char* name : {"Matrix", "data.table", "R6", "x1.2"}) EXPECT_TRUE(IsRPackageName(name)) << name;
  for (const char* name : {"", "a", "1x", ".x", "x.", "my_pkg", "my-pkg", "na me"}) {
    EXPECT_FALSE(IsRPackageName(name)) << name;
  }
}

TEST(RRequirement, WhatRDoesNotHaveIsRefused) {
  auto error = [](const char* text) {
    absl::StatusOr<Requirement> r = ParseRequirement(text, PackageKind::kR);
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  EXPECT_THAT(error("jsonlite~=1.8"), ::testing::HasSubstr("'~=' is Python's"));
  EXPECT_THAT(error("my_pkg"), ::testing::HasSubstr("is not an R package constraint"));
  EXPECT_THAT(error("x"), ::testing::HasSubstr("is not an R package constraint"));
  EXPECT_THAT(error("jsonlite>=1.8rc1"), ::testing::HasSubstr("is not an R package constraint"));
  EXPECT_THAT(error("jsonlite>=1.*"), ::testing::HasSubstr("is not an R package constraint"));
  EXPECT_THAT(error("jsonlite[x]"), ::testing::HasSubstr("extras"));
}

}  // namespace
}  // namespace cubicle::skills
