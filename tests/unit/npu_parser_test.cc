// npu/smi_parser: the driver's tables as the real driver prints them
// (tests/fixtures/npu-smi), and what goes wrong on real hosts: garbage
// rows, two-die cards, Mcu rows, the process table after the chip table.
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "npu/smi_parser.h"

namespace cubicle::npu {
namespace {

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(CUBICLE_NPU_FIXTURES) + "/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ChipMap, OneDieCardsLeaveOutTheMcu) {
  ParseStats stats;
  std::vector<ChipMapRow> rows = ParseChipMap(Fixture("info-m-910B3.txt"), &stats);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0], (ChipMapRow{0, 0, 0, "Ascend 910B3"}));
  EXPECT_EQ(rows[1], (ChipMapRow{1, 0, 1, "Ascend 910B3"}));
  EXPECT_EQ(stats.skipped, 0);
}

TEST(ChipMap, TwoDieCardsHaveTwoLogicIds) {
  std::vector<ChipMapRow> rows = ParseChipMap(Fixture("info-m-910C.txt"));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0], (ChipMapRow{0, 0, 0, "Ascend 910C"}));
  EXPECT_EQ(rows[1], (ChipMapRow{0, 1, 1, "Ascend 910C"}));
  EXPECT_EQ(rows[2], (ChipMapRow{1, 0, 2, "Ascend 910C"}));
  EXPECT_EQ(rows[3], (ChipMapRow{1, 1, 3, "Ascend 910C"}));
}

TEST(ChipMap, GarbageRowsAreSkippedNotFatal) {
  std::string text = Fixture("info-m-910B3.txt");
  text.insert(text.find("\t1 "), "\tgarbage line from a newer driver\n\t7   x   3   Ascend 910B3\n\t8\n"
                                 "\t9  0  seven  Ascend 910B3\n\n");
  ParseStats stats;
  std::vector<ChipMapRow> rows = ParseChipMap(text, &stats);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].logic_id, 0);
  EXPECT_EQ(rows[1].logic_id, 1);
  EXPECT_EQ(stats.skipped, 4);
}

TEST(ChipMap, EmptyAndHeaderOnly) {
  EXPECT_TRUE(ParseChipMap("").empty());
  ParseStats stats;
  EXPECT_TRUE(ParseChipMap("\tNPU ID    Chip ID    Chip Logic ID    Chip Name\n", &stats).empty());
  EXPECT_EQ(stats.skipped, 0);
}

TEST(ChipStatus, CardAndChipRowsButNeverTheProcessTable) {
  ParseStats stats;
  std::vector<ChipStatusRow> rows = ParseChipStatus(Fixture("info-910B3.txt"), &stats);
  ASSERT_EQ(rows.size(), 2u) << "the process row \"| 5  0 | 2290156 |...\" must not be a chip";
  EXPECT_EQ(rows[0].card_id, 0);
  EXPECT_EQ(rows[0].chip_id, 0);
  EXPECT_EQ(rows[0].name, "910B3");
  EXPECT_EQ(rows[0].health, "OK");
  EXPECT_EQ(rows[0].bus_id, "0000:C1:00.0");
  EXPECT_EQ(rows[0].aicore_percent, 0u);
  EXPECT_EQ(rows[0].hbm_used_mb, 3445u);
  EXPECT_EQ(rows[0].hbm_total_mb, 65536u);
  EXPECT_EQ(rows[1].card_id, 5);
  EXPECT_EQ(rows[1].aicore_percent, 12u);
  EXPECT_EQ(rows[1].hbm_used_mb, 60156u) << "\"60156/ 65536\": a slash without a space";
  EXPECT_EQ(stats.skipped, 0);
}

TEST(ChipStatus, TwoDiesUnderOneCardRow) {
  std::vector<ChipStatusRow> rows = ParseChipStatus(Fixture("info-910C.txt"));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].card_id, 0);
  EXPECT_EQ(rows[0].chip_id, 0);
  EXPECT_EQ(rows[1].card_id, 0);
  EXPECT_EQ(rows[1].chip_id, 1);
  EXPECT_EQ(rows[1].name, "910C");
  EXPECT_EQ(rows[1].health, "OK");
  EXPECT_EQ(rows[1].bus_id, "0000:C1:00.1");
  EXPECT_EQ(rows[1].aicore_percent, 70u);
  EXPECT_EQ(rows[1].hbm_used_mb, 2048u);
}

TEST(ChipStatus, GarbageRowsAreSkippedAndTheRestKept) {
  std::string text = Fixture("info-910B3.txt");
  // A chip row with no card above it, a card row whose name is a number (a
  // process row without the table's header), a row of junk, a usage cell
  // that is not numbers: each skipped, the chips around them kept.
  std::string junk =
      "| 3                         | 0000:C2:00.0  | 1           0    / 0          1    / 2             |\n"
      "| 5       0                 | 2290156       | VLLMEngineCore           | 56630                   |\n"
      "| ???                       | ???           | ???                                                |\n";
  text.insert(text.find("| 5     910B3"), junk);
  ParseStats stats;
  std::vector<ChipStatusRow> rows = ParseChipStatus(text, &stats);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].card_id, 0);
  EXPECT_EQ(rows[1].card_id, 5);
  EXPECT_EQ(stats.skipped, 3);

  std::string unreadable_usage = Fixture("info-910C.txt");
  unreadable_usage.replace(unreadable_usage.find("70 "), 3, "NA ");
  rows = ParseChipStatus(unreadable_usage);
  ASSERT_EQ(rows.size(), 2u) << "a usage cell it cannot read leaves the usage unset, not the chip out";
  EXPECT_FALSE(rows[1].aicore_percent.has_value());
  EXPECT_EQ(rows[0].aicore_percent, 30u);
}

TEST(ChipStatus, OnlyAProcessTable) {
  std::string text = Fixture("info-910B3.txt");
  text = text.substr(text.find("| NPU     Chip"));
  EXPECT_TRUE(ParseChipStatus(text).empty());
}

TEST(JoinTables, MapGivesIdentityStatusGivesHealthAndUsage) {
  std::vector<Chip> chips = JoinTables(ParseChipMap(Fixture("info-m-910C.txt")), ParseChipStatus(Fixture("info-910C.txt")));
  ASSERT_EQ(chips.size(), 4u);
  EXPECT_EQ(chips[1].logic_id, 1);
  EXPECT_EQ(chips[1].card_id, 0);
  EXPECT_EQ(chips[1].chip_id, 1);
  EXPECT_EQ(chips[1].name, "Ascend 910C");
  EXPECT_EQ(chips[1].health, "OK");
  EXPECT_EQ(chips[1].aicore_percent, 70u);
  // Card 1 is not in that `npu-smi info` output: listed, health unknown.
  EXPECT_EQ(chips[2].card_id, 1);
  EXPECT_EQ(chips[2].health, "unknown");
  EXPECT_FALSE(chips[2].aicore_percent.has_value());
}

TEST(JoinTables, ALogicIdSeenTwiceKeepsItsFirstRow) {
  std::vector<Chip> chips = JoinTables({{0, 0, 3, "Ascend 910B3"}, {1, 0, 3, "Ascend 910B4"}}, {});
  ASSERT_EQ(chips.size(), 1u);
  EXPECT_EQ(chips[0].card_id, 0);
}

TEST(DriverExplanation, TheDriversLineNotItsLogNoise) {
  EXPECT_EQ(DriverExplanation("DrvMngGetConsoleLogLevel failed. (ret=4)\n"
                              "dcmi model initialized failed, because the device is used. ret is -8020\n",
                              ""),
            "dcmi model initialized failed, because the device is used. ret is -8020");
  // The explanation first, noise after it.
  EXPECT_EQ(DriverExplanation("dcmi model initialized failed, because the device is used. ret is -8020\n"
                              "DrvMngGetConsoleLogLevel failed. (ret=4)\n[ERROR] drv(1234) closing\n",
                              ""),
            "dcmi model initialized failed, because the device is used. ret is -8020");
  // Nothing on stderr: stdout's last line.
  EXPECT_EQ(DriverExplanation("", "some table\nError: no device\n"), "Error: no device");
  // Only noise: the noise, rather than nothing.
  EXPECT_EQ(DriverExplanation("DrvMngGetConsoleLogLevel failed. (ret=4)\n", ""),
            "DrvMngGetConsoleLogLevel failed. (ret=4)");
  EXPECT_EQ(DriverExplanation("\n\n", ""), "");
}

TEST(NvidiaList, GpusWithNamesAndUuids) {
  ParseStats stats;
  std::vector<Chip> gpus = ParseNvidiaList(
      "GPU 0: NVIDIA H200 (UUID: GPU-1111)\n"
      "  MIG 1g.18gb     Device  0: (UUID: MIG-2222)\n"
      "GPU 1: NVIDIA H200 (UUID: GPU-3333)\n"
      "GPU x: broken\n"
      "No devices were found\n",
      &stats);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].logic_id, 0);
  EXPECT_EQ(gpus[0].name, "NVIDIA H200");
  EXPECT_EQ(gpus[0].uuid, "GPU-1111");
  EXPECT_EQ(gpus[1].logic_id, 1);
  EXPECT_EQ(gpus[1].vendor, Vendor::kNvidia);
  EXPECT_EQ(stats.skipped, 1);
}

TEST(Family, OnlyThe910FamilyIsSupported) {
  EXPECT_TRUE(IsSupportedAscend("Ascend 910B3"));
  EXPECT_TRUE(IsSupportedAscend("910C"));
  EXPECT_TRUE(IsSupportedAscend("Ascend 910"));
  EXPECT_FALSE(IsSupportedAscend("Ascend 310P3"));
  EXPECT_FALSE(IsSupportedAscend("310B1"));
  EXPECT_FALSE(IsSupportedAscend("Mcu"));
  EXPECT_FALSE(IsSupportedAscend(""));
}

}  // namespace
}  // namespace cubicle::npu
