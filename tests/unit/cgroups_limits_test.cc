#include "cgroups/limits.h"

#include <cmath>
#include <limits>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace cubicle::cgroups {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr unsigned kHostCpus = 4;

Limits Typical() {
  Limits l;
  l.memory_max = 256 * kMiB;
  l.memory_high = 200 * kMiB;
  l.pids_max = 64;
  l.cpus = 0.5;
  l.cpu_weight = 100;
  l.io.push_back(IoLimit{8, 0, 10 * kMiB, 5 * kMiB, std::nullopt, 1000});
  return l;
}

std::string Problems(const Limits& l, const Limits* ceiling = nullptr) {
  absl::Status st = ValidateLimits(l, ceiling, kHostCpus);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  return std::string(st.message());
}

TEST(ValidateLimits, AcceptsTypicalAndEmpty) {
  EXPECT_TRUE(ValidateLimits(Typical(), nullptr, kHostCpus).ok());
  EXPECT_TRUE(ValidateLimits(Limits{}, nullptr, kHostCpus).ok());
  EXPECT_TRUE(Limits{}.empty());
  EXPECT_FALSE(Typical().empty());
}

TEST(ValidateLimits, ZeroAndTinyMemoryNameTheFieldAndTheMinimum) {
  Limits l;
  l.memory_max = 0;
  EXPECT_EQ(Problems(l), "memory_max: 0 bytes is below the minimum 1048576 (1 MiB)");
  l.memory_max = 64;  // "--memory 64" meaning 64M
  EXPECT_THAT(Problems(l), HasSubstr("memory_max: 64 bytes is below the minimum"));
  l = Limits{};
  l.memory_high = 1000;
  EXPECT_THAT(Problems(l), HasSubstr("memory_high: 1000 bytes is below the minimum"));
}

TEST(ValidateLimits, AbsurdMemoryIsRefused) {
  Limits l;
  l.memory_max = std::numeric_limits<uint64_t>::max();
  EXPECT_THAT(Problems(l),
              HasSubstr("memory_max: 18446744073709551615 (16 EiB) is above the maximum"));
}

TEST(ValidateLimits, MemoryHighAboveMax) {
  Limits l;
  l.memory_max = 256 * kMiB;
  l.memory_high = 512 * kMiB;
  EXPECT_EQ(Problems(l),
            "memory_high: 536870912 (512 MiB) is above memory_max 268435456 (256 MiB)");
}

TEST(ValidateLimits, PidsRange) {
  Limits l;
  l.pids_max = 0;
  EXPECT_EQ(Problems(l), "pids_max: 0 is outside [1, 4194304]");
  l.pids_max = kMaxPids + 1;
  EXPECT_EQ(Problems(l), "pids_max: 4194305 is outside [1, 4194304]");
  l.pids_max = kMaxPids;
  EXPECT_TRUE(ValidateLimits(l, nullptr, kHostCpus).ok());
}

TEST(ValidateLimits, CpusMustBePositiveFiniteAndWithinTheHost) {
  Limits l;
  for (double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    l.cpus = bad;
    EXPECT_THAT(Problems(l), HasSubstr("must be a positive number")) << bad;
  }
  l.cpus = 8;
  EXPECT_EQ(Problems(l), "cpus: 8 exceeds the 4 CPUs of this host");
  l.cpus = 4;
  EXPECT_TRUE(ValidateLimits(l, nullptr, kHostCpus).ok());
}

TEST(ValidateLimits, QuotaBelowTheKernelMinimum) {
  Limits l;
  l.cpus = 0.005;  // 500 us of 100 ms
  EXPECT_EQ(Problems(l),
            "cpus: 0.005 over a period of 100000 us is a quota of 500 us, below the kernel's "
            "minimum 1000 us");
  l.cpu_period_us = 1000000;  // 5 ms of 1 s is fine
  EXPECT_TRUE(ValidateLimits(l, nullptr, kHostCpus).ok());
}

TEST(ValidateLimits, PeriodAndWeightRanges) {
  Limits l;
  l.cpu_period_us = 999;
  EXPECT_EQ(Problems(l), "cpu_period_us: 999 is outside [1000, 1000000]");
  l.cpu_period_us = 100000;
  l.cpu_weight = 0;
  EXPECT_EQ(Problems(l), "cpu_weight: 0 is outside [1, 10000]");
  l.cpu_weight = 10001;
  EXPECT_EQ(Problems(l), "cpu_weight: 10001 is outside [1, 10000]");
}

TEST(ValidateLimits, IoEntries) {
  Limits l;
  l.io.push_back(IoLimit{8, 0});
  EXPECT_EQ(Problems(l), "io 8:0: no rate is set");
  l.io[0].read_bps = 0;
  EXPECT_THAT(Problems(l), HasSubstr("io 8:0 rbps: 0 would block all IO"));
  l.io[0].read_bps = kMiB;
  l.io.push_back(IoLimit{8, 0, std::nullopt, kMiB});
  EXPECT_EQ(Problems(l), "io 8:0: the device is listed twice");
}

TEST(ValidateLimits, EveryProblemIsReportedAtOnce) {
  Limits l;
  l.memory_max = 0;
  l.pids_max = 0;
  l.cpu_weight = 0;
  std::string msg = Problems(l);
  EXPECT_THAT(msg, HasSubstr("memory_max:"));
  EXPECT_THAT(msg, HasSubstr("; pids_max:"));
  EXPECT_THAT(msg, HasSubstr("; cpu_weight:"));
}

TEST(ValidateLimits, AboveTheCeilingNamesFieldValueAndCeiling) {
  Limits ceiling;
  ceiling.memory_max = 1 * kGiB;
  ceiling.pids_max = 128;
  ceiling.cpus = 1;
  ceiling.cpu_weight = 200;
  ceiling.io.push_back(IoLimit{8, 0, 100 * kMiB});
  Limits l;
  l.memory_max = 2 * kGiB;
  l.pids_max = 129;
  l.cpus = 1.5;
  l.cpu_weight = 300;
  l.io.push_back(IoLimit{8, 0, 200 * kMiB});
  std::string msg = Problems(l, &ceiling);
  EXPECT_THAT(msg,
              HasSubstr("memory_max: 2147483648 (2 GiB) exceeds the ceiling 1073741824 (1 GiB)"));
  EXPECT_THAT(msg, HasSubstr("pids_max: 129 exceeds the ceiling 128"));
  EXPECT_THAT(msg, HasSubstr("cpus: 1.5 exceeds the ceiling 1"));
  EXPECT_THAT(msg, HasSubstr("cpu_weight: 300 exceeds the ceiling 200"));
  EXPECT_THAT(msg, HasSubstr("io 8:0 rbps: 209715200 exceeds the ceiling 104857600"));
}

TEST(ValidateLimits, UnsetUnderACeilingIsUnlimitedAndSoAboveIt) {
  Limits ceiling;
  ceiling.memory_max = 1 * kGiB;
  ceiling.pids_max = 128;
  ceiling.io.push_back(IoLimit{8, 0, 100 * kMiB});
  std::string msg = Problems(Limits{}, &ceiling);
  EXPECT_THAT(msg, HasSubstr("memory_max: unlimited exceeds the ceiling 1073741824 (1 GiB)"));
  EXPECT_THAT(msg, HasSubstr("pids_max: unlimited exceeds the ceiling 128"));
  EXPECT_THAT(msg, HasSubstr("io 8:0: unlimited exceeds the ceiling of that device"));
}

TEST(ValidateLimits, AtTheCeilingIsFine) {
  Limits ceiling = Typical();
  EXPECT_TRUE(ValidateLimits(Typical(), &ceiling, kHostCpus).ok());
}

TEST(FillFromCeiling, FillsOnlyWhatIsUnset) {
  Limits ceiling = Typical();
  ceiling.io.push_back(IoLimit{8, 16, std::nullopt, std::nullopt, 50});
  Limits l;
  l.memory_max = 64 * kMiB;
  l.io.push_back(IoLimit{8, 0, kMiB});
  FillFromCeiling(&l, ceiling);
  EXPECT_EQ(*l.memory_max, 64 * kMiB);
  EXPECT_EQ(*l.memory_high, 64 * kMiB);  // the ceiling's 200 MiB, kept at memory_max
  EXPECT_EQ(l.pids_max, ceiling.pids_max);
  EXPECT_EQ(l.cpus, ceiling.cpus);
  ASSERT_EQ(l.io.size(), 2u);
  EXPECT_EQ(*l.io[0].read_bps, kMiB);                     // kept
  EXPECT_EQ(l.io[0].write_bps, ceiling.io[0].write_bps);  // filled
  EXPECT_EQ(l.io[1], ceiling.io[1]);                      // added
  EXPECT_TRUE(ValidateLimits(l, &ceiling, kHostCpus).ok());
}

TEST(CpuMapping, QuotaAndShares) {
  Limits l;
  l.cpus = 0.2;
  EXPECT_EQ(CpuQuotaUs(l), 20000u);
  l.cpus = 1.5;
  l.cpu_period_us = 50000;
  EXPECT_EQ(CpuQuotaUs(l), 75000u);
  EXPECT_EQ(CpuWeightToShares(100), 1024u);  // the defaults correspond
  EXPECT_EQ(CpuWeightToShares(1), 10u);
  EXPECT_EQ(CpuWeightToShares(10000), 102400u);
}

TEST(DescribeBytes, ExactAndReadable) {
  EXPECT_EQ(DescribeBytes(512), "512 bytes");
  EXPECT_EQ(DescribeBytes(256 * kMiB), "268435456 (256 MiB)");
  EXPECT_EQ(DescribeBytes(3 * kGiB / 2), "1610612736 (1.5 GiB)");
}

}  // namespace
}  // namespace cubicle::cgroups
