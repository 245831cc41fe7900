// Accelerator passthrough against a fake driver (no accelerator here): a
// fake Ascend host under --npu-root — device nodes made with mknod on a
// spare major, the minor being the chip's logic id so that the fake
// npu-smi inside a sandbox knows which host chips it sees; management
// nodes; the fake npu-smi (tests/fakes/npu-smi: all-or-nothing when an
// occupied chip is visible, the verbatim tables); a fake libdcmi.so built
// by the tests; 910B3, 910C (two dies on a card) and 310P3 chips. The
// NVIDIA path the same way, with fake /dev/nvidia* and nvidia-smi.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cgroups/devices.h"
#include "npu/inventory.h"
#include "npu/passthrough.h"
#include "npu/probe.h"
#include "runtime/cgroup_host.h"
#include "runtime/defaults.h"
#include "tests/support/host_probes.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::npu {
namespace {

using test_support::HostHygieneTest;
using test_support::Lines;
using test_support::ProcessRun;
using test_support::ReadFile;
using test_support::RunCubicle;
using test_support::TempDir;
using test_support::WriteFile;

// A character major no driver of this host has registered: mknod works,
// and opening such a node fails with ENXIO (past the device cgroup).
uint32_t SpareMajor() {
  std::ifstream in("/proc/devices");
  std::set<uint32_t> used;
  std::string line;
  bool chars = false;
  while (std::getline(in, line)) {
    if (line == "Character devices:") chars = true;
    if (line == "Block devices:") chars = false;
    unsigned m;
    if (chars && std::sscanf(line.c_str(), "%u", &m) == 1) used.insert(m);
  }
  for (uint32_t m = 234; m <= 254; ++m) {
    if (used.count(m) == 0) return m;
  }
  return 0;
}

struct FakeChip {
  int logic, card, chip;
  std::string name, health;
  int aicore, hbm_used, hbm_total;
};

// 8 chips: 910B3 cards, a two-die 910C card (logic 2 and 3), chip 5 held by
// another tenant, a 310P3 at logic 7.
const std::vector<FakeChip> kChips = {
    {0, 0, 0, "910B3", "OK", 0, 3445, 65536},   {1, 1, 0, "910B3", "OK", 5, 100, 65536},
    {2, 2, 0, "910C", "OK", 30, 1024, 65536},   {3, 2, 1, "910C", "OK", 70, 2048, 65536},
    {4, 3, 0, "910B3", "OK", 0, 0, 65536},      {5, 4, 0, "910B3", "OK", 12, 60156, 65536},
    {6, 5, 0, "910B3", "OK", 0, 0, 65536},      {7, 6, 0, "310P3", "OK", 0, 0, 24576},
};

class FakeHost {
 public:
  // root_mode 0700: a driver root only root may enter (its binds are then
  // cloned by the launcher, not looked up by the sandbox's ids).
  explicit FakeHost(bool with_dcmi = true, mode_t root_mode = 0755) {
    ::chmod(dir_.path().c_str(), root_mode);
    major_ = SpareMajor();
    for (const char* d : {"dev", "etc", "usr/local/bin", "usr/local/Ascend/driver/lib64/driver",
                          "usr/local/Ascend/driver/lib64/common", "usr/bin", "usr/lib64"}) {
      Mkdirs(d);
    }
    for (const FakeChip& c : kChips) Node(absl::StrCat("davinci", c.logic), c.logic);
    Node("davinci_manager", 100);
    Node("devmm_svm", 101);
    Node("hisi_hdc", 102);
    std::string table;
    for (const FakeChip& c : kChips) {
      absl::StrAppend(&table, c.logic, " ", c.card, " ", c.chip, " ", c.name, " ", c.health, " ", c.aicore, " ",
                      c.hbm_used, " ", c.hbm_total, "\n");
    }
    Write("usr/local/Ascend/driver/lib64/driver/fake-chips", table);
    SetOccupied({5});
    Write("usr/local/Ascend/driver/version.info", "Version=25.5.1\n");
    Write("etc/ascend_install.info", "Driver_Install_Path_Param=/usr/local/Ascend\n");
    Copy(std::string(CUBICLE_FAKES) + "/npu-smi", "usr/local/bin/npu-smi", 0755);
    if (with_dcmi) Copy(CUBICLE_FAKE_DCMI, "usr/local/Ascend/driver/lib64/driver/libdcmi.so", 0755);
    // NVIDIA: four GPUs, GPU 3 fallen off the bus.
    for (int i = 0; i < 4; ++i) Node(absl::StrCat("nvidia", i), 200 + i, /*minor_is=*/i);
    Node("nvidiactl", 255);
    Node("nvidia-uvm", 254);
    Copy(std::string(CUBICLE_FAKES) + "/nvidia-smi", "usr/local/bin/nvidia-smi", 0755);
    Write("usr/lib64/libnvidia-fake-state.so", "3\n");
    EXPECT_EQ(::symlink("libnvidia-fake-state.so", Path("usr/lib64/libcuda.so.1").c_str()), 0);
  }

  const std::string& root() const { return dir_.path(); }
  uint32_t major() const { return major_; }
  std::string Path(const std::string& rel) const { return absl::StrCat(root(), "/", rel); }
  void SetOccupied(const std::vector<int>& ids) {
    Write("usr/local/Ascend/driver/lib64/driver/fake-occupied", absl::StrCat(absl::StrJoin(ids, "\n"), "\n"));
  }
  void Node(const std::string& name, int minor_default, int minor_is = -1) {
    int minor = minor_is >= 0 ? minor_is : minor_default;
    // NVIDIA's GPU nodes get their own major, so davinci4 and nvidia4 differ.
    uint32_t maj = absl::StartsWith(name, "nvidia") ? major_ + 1 : major_;
    std::string p = Path(absl::StrCat("dev/", name));
    ASSERT_EQ(::mknod(p.c_str(), S_IFCHR | 0666, makedev(maj, minor)), 0) << p << ": " << std::strerror(errno);
    ::chmod(p.c_str(), 0666);
  }

 private:
  void Mkdirs(const std::string& rel) {
    std::string p = root();
    for (absl::string_view part : absl::StrSplit(rel, '/')) {
      absl::StrAppend(&p, "/", part);
      ::mkdir(p.c_str(), 0755);
    }
  }
  void Write(const std::string& rel, const std::string& text) { ASSERT_TRUE(WriteFile(Path(rel), text)) << rel; }
  void Copy(const std::string& from, const std::string& rel, mode_t mode) {
    std::string data = ReadFile(from);
    ASSERT_FALSE(data.empty()) << from;
    Write(rel, data);
    ::chmod(Path(rel).c_str(), mode);
  }

  TempDir dir_;
  uint32_t major_ = 0;
};

runtime::SandboxSpec ProbeSpec() {
  absl::StatusOr<runtime::SandboxSpec> spec = runtime::DefaultSpec({});
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->limits = runtime::DefaultLimits();
  return *spec;
}

std::unique_ptr<Inventory> MakeInventory(const FakeHost& host, bool use_dcmi = true) {
  InventoryOptions options;
  options.root = host.root();
  options.use_dcmi = use_dcmi;
  options.cache_window = absl::Minutes(10);  // the cache tests decide when to refresh
  options.probe_spec = ProbeSpec();
  absl::StatusOr<std::unique_ptr<Inventory>> inv = Inventory::Create(options);
  EXPECT_TRUE(inv.ok()) << inv.status();
  return std::move(inv).value();
}

const Chip* FindChip(const Listing& l, int id) {
  for (const Chip& c : l.chips) {
    if (c.logic_id == id) return &c;
  }
  return nullptr;
}

class NpuTest : public HostHygieneTest {
 protected:
  void SetUp() override {
    if (!IsRoot()) GTEST_SKIP() << "a fake driver needs mknod: run as root";
    HostHygieneTest::SetUp();
    if (SpareMajor() == 0) GTEST_SKIP() << "no spare character major in 234..254 for the fake driver";
    // A container refuses mknod (its device cgroup, no CAP_MKNOD).
    TempDir probe;
    REQUIRE_HOST(test_support::DeviceNodes(probe.path(), SpareMajor()));
  }
  void TearDown() override {
    if (IsRoot()) HostHygieneTest::TearDown();
  }
};

TEST_F(NpuTest, InventoryThroughDcmiAndThroughNpuSmiAgree) {
  FakeHost host;
  std::unique_ptr<Inventory> dcmi = MakeInventory(host, true);
  std::unique_ptr<Inventory> smi = MakeInventory(host, false);
  absl::StatusOr<Listing> a = dcmi->HostListing(Vendor::kAscend, false);
  absl::StatusOr<Listing> b = smi->HostListing(Vendor::kAscend, false);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->source, "dcmi");
  EXPECT_EQ(b->source, "npu-smi");
  ASSERT_EQ(a->chips.size(), kChips.size());
  ASSERT_EQ(b->chips.size(), kChips.size()) << absl::StrJoin(b->notes, "; ");
  for (size_t i = 0; i < kChips.size(); ++i) {
    const Chip& x = a->chips[i];
    const Chip& y = b->chips[i];
    SCOPED_TRACE(absl::StrCat("logic id ", kChips[i].logic));
    EXPECT_EQ(x.logic_id, kChips[i].logic);
    EXPECT_EQ(x.logic_id, y.logic_id);
    EXPECT_EQ(x.card_id, y.card_id);
    EXPECT_EQ(x.chip_id, y.chip_id);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.name, absl::StrCat("Ascend ", kChips[i].name));
    EXPECT_EQ(x.health, y.health);
    EXPECT_EQ(x.aicore_percent, y.aicore_percent);
    EXPECT_EQ(y.hbm_used_mb, static_cast<uint64_t>(kChips[i].hbm_used));
  }
  // The two dies of the 910C card: one card, two logic ids.
  EXPECT_EQ(a->chips[2].card_id, 2);
  EXPECT_EQ(a->chips[3].card_id, 2);
  EXPECT_EQ(a->chips[3].chip_id, 1);
}

TEST_F(NpuTest, WithoutAnyDriverTheListingIsEmptyAndSaysWhy) {
  TempDir empty;
  ::chmod(empty.path().c_str(), 0755);
  InventoryOptions options;
  options.root = empty.path();
  absl::StatusOr<std::unique_ptr<Inventory>> inv = Inventory::Create(options);
  ASSERT_TRUE(inv.ok()) << inv.status();
  absl::StatusOr<Listing> l = (*inv)->List(Vendor::kAscend, false);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(l->chips.empty());
  EXPECT_EQ(l->source, "none");
  ASSERT_EQ(l->notes.size(), 1u);
  EXPECT_NE(l->notes[0].find("no libdcmi.so and no npu-smi"), std::string::npos) << l->notes[0];
}

TEST_F(NpuTest, AnOccupiedChipIsUnselectableWithTheDriversReason) {
  FakeHost host;
  std::unique_ptr<Inventory> inv = MakeInventory(host);
  absl::StatusOr<Listing> l = inv->List(Vendor::kAscend, false);
  ASSERT_TRUE(l.ok()) << l.status();
  const Chip* held = FindChip(*l, 5);
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->health, "OK") << "the host's listing says healthy; only the probe knows";
  EXPECT_FALSE(held->selectable);
  EXPECT_EQ(held->reason,
            "NPU 5 cannot be opened inside the sandbox: dcmi model initialized failed, because the device is "
            "used. ret is -8020");
  for (int id : {0, 1, 2, 3, 4, 6}) {
    const Chip* c = FindChip(*l, id);
    ASSERT_NE(c, nullptr) << id;
    EXPECT_TRUE(c->selectable) << id << ": " << c->reason;
    EXPECT_EQ(c->reason, "") << id;
  }
}

TEST_F(NpuTest, A310P3IsListedAndRefusedByName) {
  FakeHost host;
  std::unique_ptr<Inventory> inv = MakeInventory(host);
  absl::StatusOr<Listing> l = inv->List(Vendor::kAscend, false);
  ASSERT_TRUE(l.ok()) << l.status();
  const Chip* c = FindChip(*l, 7);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->name, "Ascend 310P3");
  EXPECT_FALSE(c->selectable);
  EXPECT_EQ(c->reason, "NPU 7 is an Ascend 310P3: only the Ascend 910 family can be passed through");
  absl::Status st = inv->CheckSelection(Vendor::kAscend, {4, 7}, ProbeSpec());
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_NE(st.message().find("NPU 7 is an Ascend 310P3"), std::string::npos) << st;
}

TEST_F(NpuTest, SuccessfulProbesAreCachedFailedOnesNever) {
  FakeHost host;
  std::unique_ptr<Inventory> inv = MakeInventory(host);
  ASSERT_TRUE(inv->List(Vendor::kAscend, false).ok());
  // Chip 5 is released, chip 4 taken.
  host.SetOccupied({4});
  absl::StatusOr<Listing> l = inv->List(Vendor::kAscend, false);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(FindChip(*l, 5)->selectable) << "a failed probe is not cached: " << FindChip(*l, 5)->reason;
  EXPECT_TRUE(FindChip(*l, 4)->selectable) << "a success is cached for the window";
  l = inv->List(Vendor::kAscend, /*refresh=*/true);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_FALSE(FindChip(*l, 4)->selectable) << "a refresh probes again";
  EXPECT_NE(FindChip(*l, 4)->reason.find("NPU 4 cannot be opened inside the sandbox"), std::string::npos);
}

TEST_F(NpuTest, AnExecutionProbesAfreshWhateverTheCacheSays) {
  FakeHost host;
  std::unique_ptr<Inventory> inv = MakeInventory(host);
  ASSERT_TRUE(FindChip(*inv->List(Vendor::kAscend, false), 4)->selectable);
  host.SetOccupied({4});  // taken by another session since the listing
  absl::Status st = inv->CheckSelection(Vendor::kAscend, {4}, ProbeSpec());
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_NE(st.message().find("NPU 4 cannot be opened inside the sandbox"), std::string::npos) << st;
}

TEST_F(NpuTest, CheckSelectionProbesOnlyTheChipsNamed) {
  FakeHost host;
  std::unique_ptr<Inventory> inv = MakeInventory(host);
  // Chip 5 is occupied: it would fail a probe. Asking for 4 and 6 must not
  // touch it (nor anything else): one probe per chip named, each seeing
  // only its chip (the fake npu-smi logs what it saw into the workspace).
  TempDir ws;
  REQUIRE_HOST(test_support::IdmappedMounts(ws.path()));  // root's, shown as the sandbox user's
  ::chmod(ws.path().c_str(), 0777);
  runtime::DefaultsOptions defaults;
  defaults.workspace = ws.path();
  absl::StatusOr<runtime::SandboxSpec> execution = runtime::DefaultSpec(defaults);
  ASSERT_TRUE(execution.ok()) << execution.status();
  execution->env.push_back("NPU_SMI_FAKE_LOG=/workspace/probes.log");
  absl::Status st = inv->CheckSelection(Vendor::kAscend, {4, 6}, *execution);
  EXPECT_TRUE(st.ok()) << st;
  std::vector<std::string> seen = Lines(ReadFile(ws.Join("probes.log")));
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::string>{"saw 4", "saw 6"}));
  absl::Status missing = inv->CheckSelection(Vendor::kAscend, {9}, ProbeSpec());
  EXPECT_TRUE(absl::IsNotFound(missing)) << missing;
  EXPECT_NE(missing.message().find("NPU 9 is not on this host"), std::string::npos) << missing;
}

TEST_F(NpuTest, PassthroughRenumbersInAscendingHostOrder) {
  FakeHost host;
  absl::StatusOr<HostLayout> layout = HostLayout::Open(host.root());
  ASSERT_TRUE(layout.ok());
  absl::StatusOr<std::vector<int>> ids = ParseChipList("6,4,6", "--npu");
  ASSERT_TRUE(ids.ok());
  absl::StatusOr<Passthrough> p = PlanPassthrough(*layout, Vendor::kAscend, *ids);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->mapping, (std::vector<ChipMapping>{{4, 0}, {6, 1}}));
  ASSERT_GE(p->nodes.size(), 5u);
  EXPECT_EQ(p->nodes[0].sandbox_path, "/dev/davinci0");
  EXPECT_EQ(p->nodes[0].minor, 4u);
  EXPECT_EQ(p->nodes[1].sandbox_path, "/dev/davinci1");
  EXPECT_EQ(p->nodes[1].minor, 6u);
  std::set<std::string> paths;
  for (const DeviceNode& n : p->nodes) paths.insert(n.sandbox_path);
  EXPECT_EQ(paths, (std::set<std::string>{"/dev/davinci0", "/dev/davinci1", "/dev/davinci_manager", "/dev/devmm_svm",
                                          "/dev/hisi_hdc"}));
  EXPECT_EQ(p->devices.size(), 5u);
  EXPECT_EQ(p->devices[0], (cgroups::DeviceRule{'c', host.major(), 4, "rw"}));

  // A chip without a node: NotFound naming it.
  absl::StatusOr<Passthrough> gone = PlanPassthrough(*layout, Vendor::kAscend, {4, 11});
  EXPECT_TRUE(absl::IsNotFound(gone.status())) << gone.status();
  EXPECT_NE(gone.status().message().find("NPU 11"), std::string::npos) << gone.status();
}

TEST_F(NpuTest, ApplyPassthroughRestatesTheCannEnvironment) {
  FakeHost host;
  absl::StatusOr<HostLayout> layout = HostLayout::Open(host.root());
  ASSERT_TRUE(layout.ok());
  absl::StatusOr<Passthrough> p = PlanPassthrough(*layout, Vendor::kAscend, {4});
  ASSERT_TRUE(p.ok()) << p.status();
  runtime::SandboxSpec spec = ProbeSpec();
  spec.env = {"PATH=/usr/bin:/bin", "PYTHONPATH=/workspace/lib", "LD_LIBRARY_PATH=/opt/x"};
  const runtime::SandboxSpec before = spec;
  ASSERT_TRUE(ApplyPassthrough(*p, &spec).ok());
  auto env = [&](const std::string& name) {
    for (const std::string& kv : spec.env) {
      if (absl::StartsWith(kv, name + "=")) return kv.substr(name.size() + 1);
    }
    return std::string("<unset>");
  };
  EXPECT_EQ(env("PATH"), "/usr/local/bin:/usr/bin:/bin");
  EXPECT_EQ(env("ASCEND_TOOLKIT_HOME"), "/usr/local/Ascend/ascend-toolkit/latest");
  EXPECT_EQ(env("ASCEND_OPP_PATH"), "/usr/local/Ascend/ascend-toolkit/latest/opp");
  EXPECT_TRUE(absl::StartsWith(env("PYTHONPATH"), "/workspace/lib:")) << "additions are appended";
  EXPECT_TRUE(absl::StartsWith(env("LD_LIBRARY_PATH"),
                               "/opt/x:/usr/local/Ascend/driver/lib64/common:/usr/local/Ascend/driver/lib64/driver"))
      << env("LD_LIBRARY_PATH");
  // Only additions: the spec before is a prefix of the spec after.
  ASSERT_GT(spec.mounts.size(), before.mounts.size());
  EXPECT_TRUE(std::equal(before.mounts.begin(), before.mounts.end(), spec.mounts.begin()));
  EXPECT_TRUE(before.devices.empty());
  EXPECT_FALSE(spec.devices.empty());
  EXPECT_TRUE(runtime::ValidateSpec([&] {
                runtime::SandboxSpec s = spec;
                s.argv = {"/bin/true"};
                return s;
              }()).ok());
}

// ---- Through the cubicle binary ------------------------------------------

TEST_F(NpuTest, RunWithNpu64ShowsTwoChipsRenumberedWithTheirHostMinors) {
  FakeHost host;
  TempDir out;
  std::string status = out.Join("status.json");
  ProcessRun r = RunCubicle(
      {"run", "--npu-root", host.root(), "--npu", "6,4", "--json-status", status, "--", "/bin/sh", "-c",
       "for n in /dev/davinci*; do echo \"$n $(stat -c %t:%T $n)\"; done; npu-smi info -m | awk 'NR>1 && $3 != \"-\" {print \"logic\", $3}';"
       " echo \"home=$ASCEND_TOOLKIT_HOME\"; echo \"ld=$LD_LIBRARY_PATH\"; ls /usr/local/Ascend/driver;"
       " cat /etc/ascend_install.info; touch /usr/local/bin/x 2>/dev/null || echo read-only"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const std::string maj = absl::StrCat(absl::Hex(host.major()));
  std::vector<std::string> lines = Lines(r.out);
  std::vector<std::string> nodes(lines.begin(), lines.begin() + std::min<size_t>(lines.size(), 2));
  EXPECT_EQ(nodes, (std::vector<std::string>{absl::StrCat("/dev/davinci0 ", maj, ":4"),
                                             absl::StrCat("/dev/davinci1 ", maj, ":6")}))
      << r.out;
  EXPECT_EQ(r.out.find("/dev/davinci2"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("/dev/davinci5"), std::string::npos) << "the occupied chip stays out: " << r.out;
  // The fake driver inside sees exactly host chips 4 and 6 (and so ran:
  // chip 5, occupied, would have failed it).
  EXPECT_NE(r.out.find("logic 4\nlogic 6\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/dev/davinci_manager "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("home=/usr/local/Ascend/ascend-toolkit/latest\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/usr/local/Ascend/driver/lib64/driver"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lib64\nversion.info\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Driver_Install_Path_Param=/usr/local/Ascend"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("read-only"), std::string::npos) << r.out;

  boost::json::value json = boost::json::parse(ReadFile(status));
  const boost::json::array& npus = json.at("accelerators").at("npu").as_array();
  ASSERT_EQ(npus.size(), 2u) << ReadFile(status);
  EXPECT_EQ(npus[0].at("host").as_int64(), 4);
  EXPECT_EQ(npus[0].at("sandbox").as_int64(), 0);
  EXPECT_EQ(npus[0].at("node").as_string(), "/dev/davinci0");
  EXPECT_EQ(npus[1].at("host").as_int64(), 6);
  EXPECT_EQ(npus[1].at("sandbox").as_int64(), 1);
}

TEST_F(NpuTest, AnOccupiedChipFailsTheRunBeforeThePayloadNamingIt) {
  FakeHost host;
  TempDir ws;
  REQUIRE_HOST(test_support::IdmappedMounts(ws.path()));  // root's, shown as the sandbox user's
  ::chmod(ws.path().c_str(), 0777);
  ProcessRun r = RunCubicle({"run", "--npu-root", host.root(), "--npu", "4,5", "--workspace", ws.path(), "--",
                             "/bin/sh", "-c", "touch /workspace/ran"});
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find("NPU 5 cannot be opened inside the sandbox: dcmi model initialized failed, because the "
                       "device is used. ret is -8020"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("DrvMngGetConsoleLogLevel"), std::string::npos) << "log noise is not the reason: " << r.err;
  EXPECT_EQ(r.err.find("NPU 4"), std::string::npos) << "chip 4 is fine: " << r.err;
  EXPECT_FALSE(test_support::ListDirectory(ws.path()).count("ran")) << "the payload must not have run";
}

TEST_F(NpuTest, AMissingChipFailsTheRunNamingIt) {
  FakeHost host;
  TempDir ws;
  ::chmod(ws.path().c_str(), 0777);
  ProcessRun r = RunCubicle({"run", "--npu-root", host.root(), "--npu", "9", "--workspace", ws.path(), "--",
                             "/bin/sh", "-c", "touch /workspace/ran"});
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find("NPU 9 is not on this host (the driver lists 0, 1, 2, 3, 4, 5, 6, 7)"), std::string::npos)
      << r.err;
  EXPECT_TRUE(test_support::ListDirectory(ws.path()).empty());
  // A chip the driver lists whose node has gone.
  ASSERT_EQ(::unlink(host.Path("dev/davinci6").c_str()), 0);
  r = RunCubicle({"run", "--npu-root", host.root(), "--npu", "6", "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find("NPU 6: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("davinci6 does not exist"), std::string::npos) << r.err;
}

TEST_F(NpuTest, WithoutNpuNoAcceleratorNodeExistsInside) {
  FakeHost host;
  {
    TempDir out;
    ProcessRun r = RunCubicle({"run", "--npu-root", host.root(), "--json-status", out.Join("s.json"), "--", "/bin/true"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_FALSE(boost::json::parse(ReadFile(out.Join("s.json"))).as_object().contains("accelerators"));
  }
  for (std::vector<std::string> extra : {std::vector<std::string>{}, {"--npu-root", host.root()}}) {
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--", "/bin/sh", "-c", "ls -A /dev; ls /usr/local/Ascend 2>&1 | head -1; echo \"[$ASCEND_TOOLKIT_HOME]\""});
    ProcessRun r = RunCubicle(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const char* node : {"davinci", "devmm_svm", "hisi_hdc", "nvidia"}) {
      EXPECT_EQ(r.out.find(node), std::string::npos) << node << " in: " << r.out;
    }
    EXPECT_NE(r.out.find("No such file or directory"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("[]"), std::string::npos) << r.out;
  }
}

TEST_F(NpuTest, TheDeviceCgroupRefusesNodesNotPassedThrough) {
  FakeHost host;
  // The nodes are bound in from the fake host: on a nodev mount no open
  // gets as far as the device cgroup.
  REQUIRE_HOST(test_support::OpenableDeviceNodes(host.root(), host.major()));
  host.Node("stray", 77);  // a node the sandbox is shown by hand, never allowed
  ProcessRun r = RunCubicle({"run", "--npu-root", host.root(), "--npu", "4", "--dev-bind", host.Path("dev/stray"),
                             "/dev/stray", "--", "/bin/sh", "-c",
                             "cat /dev/davinci0 2>&1; cat /dev/stray 2>&1; cat /dev/null && echo null-ok"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const bool have_devices_controller = ::access("/sys/fs/cgroup/devices/devices.allow", F_OK) == 0;
  if (!have_devices_controller) GTEST_SKIP() << "no v1 devices controller here: " << r.out << r.err;
  // Allowed: the kernel looks for a driver (there is none): ENXIO.
  EXPECT_NE(r.out.find("/dev/davinci0: No such device or address"), std::string::npos) << r.out;
  // Not allowed: the device cgroup refuses before any driver is asked.
  EXPECT_NE(r.out.find("/dev/stray: Operation not permitted"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("null-ok"), std::string::npos) << r.out;
}

TEST_F(NpuTest, NpuListJsonHasEveryChipWithItsVerdict) {
  FakeHost host;
  ProcessRun r = RunCubicle({"npu", "list", "--json", "--npu-root", host.root()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  boost::json::value json = boost::json::parse(r.out);
  const boost::json::array& chips = json.at("chips").as_array();
  int ascend = 0, nvidia = 0;
  for (const boost::json::value& v : chips) {
    const boost::json::object& c = v.as_object();
    for (const char* key : {"logic_id", "card_id", "chip_id", "name", "health", "selectable", "reason"}) {
      EXPECT_TRUE(c.contains(key)) << key;
    }
    if (c.at("vendor").as_string() == "ascend") {
      ++ascend;
      const int64_t id = c.at("logic_id").as_int64();
      EXPECT_EQ(c.at("selectable").as_bool(), id != 5 && id != 7) << id;
    } else {
      ++nvidia;
      const int64_t id = c.at("logic_id").as_int64();
      EXPECT_EQ(c.at("selectable").as_bool(), id != 3) << id << ": " << c.at("reason").as_string();
    }
  }
  EXPECT_EQ(ascend, 8);
  EXPECT_EQ(nvidia, 4);
  EXPECT_EQ(json.at("sources").at("ascend").as_string(), "dcmi");
  EXPECT_EQ(json.at("sources").at("nvidia").as_string(), "nvidia-smi");
}

// What root can name, root can bind: a driver root under a directory only
// root may enter (a mktemp -d) probes every free chip as one at 0755 does.
TEST_F(NpuTest, NpuListUnderARootOnlyDirectoryProbesEveryFreeChip) {
  FakeHost host(/*with_dcmi=*/true, /*root_mode=*/0700);
  ProcessRun r = RunCubicle({"npu", "list", "--json", "--npu-root", host.root()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  boost::json::value json = boost::json::parse(r.out);
  int selectable = 0;
  for (const boost::json::value& v : json.at("chips").as_array()) {
    const boost::json::object& c = v.as_object();
    if (c.at("vendor").as_string() != "ascend") continue;
    const int64_t id = c.at("logic_id").as_int64();
    EXPECT_EQ(c.at("selectable").as_bool(), id != 5 && id != 7) << id << ": " << c.at("reason").as_string();
    selectable += c.at("selectable").as_bool() ? 1 : 0;
  }
  EXPECT_EQ(selectable, 6);
}

TEST_F(NpuTest, BadAcceleratorFlagsAreUsageErrors) {
  FakeHost host;
  struct Case {
    std::vector<std::string> flags;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{{{"--npu", "x"}, "--npu \"x\""},
                                         {{"--npu", "4,-1"}, "--npu"},
                                         {{"--gpu", ""}, "--gpu"},
                                         {{"--npu-root", "/nonexistent-npu-root", "--npu", "1"}, "/nonexistent-npu-root"},
                                         {{"--npu-root", "relative/dir", "--npu", "1"}, "must be an absolute path"}}) {
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    args.insert(args.end(), {"--", "/bin/true"});
    ProcessRun r = RunCubicle(args);
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(c.flags, " ") << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
  }
}

// ---- NVIDIA ---------------------------------------------------------------

TEST_F(NpuTest, RunWithGpuShowsTheGpusRenumberedAndTheirControlNodes) {
  FakeHost host;
  ProcessRun r = RunCubicle({"run", "--npu-root", host.root(), "--gpu", "2,0", "--", "/bin/sh", "-c",
                             "for n in /dev/nvidia*; do echo \"$n $(stat -c %T $n)\"; done; nvidia-smi -L;"
                             " readlink /usr/lib64/libcuda.so.1; cat /usr/lib64/libcuda.so.1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "/dev/nvidia-uvm fe\n/dev/nvidia0 0\n/dev/nvidia1 2\n/dev/nvidiactl ff\n"
            "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)\n"
            "GPU 2: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000002)\n"
            "libnvidia-fake-state.so\n3\n");
}

TEST_F(NpuTest, GpuInventoryProbesEachGpu) {
  FakeHost host;
  std::unique_ptr<Inventory> inv = MakeInventory(host);
  absl::StatusOr<Listing> l = inv->List(Vendor::kNvidia, false);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->source, "nvidia-smi");
  ASSERT_EQ(l->chips.size(), 4u);
  for (int id : {0, 1, 2}) EXPECT_TRUE(FindChip(*l, id)->selectable) << FindChip(*l, id)->reason;
  EXPECT_FALSE(FindChip(*l, 3)->selectable);
  EXPECT_EQ(FindChip(*l, 3)->reason,
            "GPU 3 cannot be opened inside the sandbox: Unable to determine the device handle for GPU3: "
            "0000:03:00.0: Unknown Error");
  EXPECT_EQ(FindChip(*l, 2)->uuid, "GPU-00000000-0000-0000-0000-000000000002");
}

TEST_F(NpuTest, AMissingGpuFailsTheRunNamingIt) {
  FakeHost host;
  ProcessRun r = RunCubicle({"run", "--npu-root", host.root(), "--gpu", "0,7", "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find("GPU 7 is not on this host (the driver lists 0, 1, 2, 3)"), std::string::npos) << r.err;
}

TEST_F(NpuTest, NpuAndGpuTogether) {
  FakeHost host;
  TempDir out;
  std::string status = out.Join("status.json");
  ProcessRun r = RunCubicle({"run", "--npu-root", host.root(), "--npu", "3", "--gpu", "1", "--json-status", status, "--",
                             "/bin/sh", "-c", "ls /dev | grep -E '^(davinci|nvidia)[0-9]'"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "davinci0\nnvidia0\n");
  boost::json::value json = boost::json::parse(ReadFile(status));
  EXPECT_EQ(json.at("accelerators").at("npu").as_array()[0].at("host").as_int64(), 3);
  EXPECT_EQ(json.at("accelerators").at("gpu").as_array()[0].at("host").as_int64(), 1);
}

TEST_F(NpuTest, ABrokenGpuFailsTheRunWithTheDriversWords) {
  FakeHost host;
  ProcessRun r = RunCubicle({"run", "--npu-root", host.root(), "--gpu", "1,3", "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find("GPU 3 cannot be opened inside the sandbox: Unable to determine the device handle for GPU3"),
            std::string::npos)
      << r.err;
}

// ---- The daemon -----------------------------------------------------------

std::vector<boost::json::value> Serve(const std::string& config_path, const std::vector<std::string>& lines,
                                      ProcessRun* run_out) {
  ProcessRun run = RunCubicle({"serve", "--config", config_path}, absl::StrJoin(lines, "\n") + "\n");
  *run_out = run;
  std::vector<boost::json::value> out;
  for (const std::string& line : Lines(run.out)) out.push_back(boost::json::parse(line));
  return out;
}

const boost::json::value* Reply(const std::vector<boost::json::value>& replies, int64_t id) {
  for (const boost::json::value& r : replies) {
    if (r.at("id").is_int64() && r.at("id").as_int64() == id) return &r;
  }
  return nullptr;
}

TEST_F(NpuTest, DaemonListsRunsWithChipsAndBrokersJobs) {
  FakeHost host;
  TempDir dir;
  const std::string config = dir.Join("config.json");
  ASSERT_TRUE(WriteFile(config, absl::StrCat(R"({"npu": {"root": ")", host.root(), R"(",
      "broker": {"enabled": true, "jobs": {"chip-map": {"argv": [")", host.Path("usr/local/bin/npu-smi"),
                                          R"(", "info", "-m"], "timeout_ms": 10000}}}},
    "profiles": {"shell": {"pool": {"min_idle": 0}}, "npu46": {"npu": "4,6"}}})")));
  ProcessRun run;
  std::vector<boost::json::value> r = Serve(
      config,
      {R"({"jsonrpc":"2.0","id":1,"method":"npu.list"})",
       R"({"jsonrpc":"2.0","id":2,"method":"sandbox.run","params":{"profile":"shell","npu":"6,4",)"
       R"("argv":["/bin/sh","-c","ls /dev | grep davinci; echo $ASCEND_OPP_PATH"]}})",
       R"({"jsonrpc":"2.0","id":3,"method":"sandbox.run","params":{"profile":"shell","npu":"5","argv":["/bin/true"]}})",
       R"({"jsonrpc":"2.0","id":4,"method":"sandbox.run","params":{"profile":"npu46","argv":["/bin/sh","-c","ls /dev | grep -c 'davinci[0-9]'"]}})",
       R"({"jsonrpc":"2.0","id":5,"method":"npu.broker.run","params":{"job":"chip-map"}})",
       R"({"jsonrpc":"2.0","id":6,"method":"npu.broker.run","params":{"job":"rm -rf /"}})",
       R"({"jsonrpc":"2.0","id":7,"method":"sandbox.run","params":{"profile":"shell","npu":"x","argv":["/bin/true"]}})",
       R"({"jsonrpc":"2.0","id":8,"method":"sandbox.run","params":{"profile":"shell","argv":["/bin/sh","-c","ls /dev | grep -c davinci"]}})",
       R"({"jsonrpc":"2.0","id":9,"method":"exec.start","params":{"profile":"npu46","argv":["/bin/true"]}})",
       R"({"jsonrpc":"2.0","id":10,"method":"skill.call","params":{"profile":"npu46","argv":["/bin/cat"],"method":"x"}})"},
      &run);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_NE(Reply(r, 1), nullptr) << run.out;
  const boost::json::array& chips = Reply(r, 1)->at("result").at("chips").as_array();
  ASSERT_EQ(chips.size(), 12u);
  EXPECT_EQ(chips[5].at("logic_id").as_int64(), 5);
  EXPECT_FALSE(chips[5].at("selectable").as_bool());
  EXPECT_NE(std::string(chips[5].at("reason").as_string()).find("ret is -8020"), std::string::npos);

  const boost::json::value& two = Reply(r, 2)->at("result");
  EXPECT_EQ(two.at("stdout").as_string(), "davinci0\ndavinci1\ndavinci_manager\n/usr/local/Ascend/ascend-toolkit/latest/opp\n")
      << boost::json::serialize(two);
  EXPECT_EQ(two.at("accelerators").at("npu").as_array()[1].at("host").as_int64(), 6);

  const boost::json::value& three = *Reply(r, 3);
  EXPECT_EQ(three.at("error").at("code").as_int64(), -32001) << boost::json::serialize(three);
  EXPECT_NE(std::string(three.at("error").at("message").as_string()).find("NPU 5 cannot be opened inside the sandbox"),
            std::string::npos);

  EXPECT_EQ(Reply(r, 4)->at("result").at("stdout").as_string(), "2\n") << boost::json::serialize(*Reply(r, 4));

  const boost::json::value& five = Reply(r, 5)->at("result");
  EXPECT_TRUE(five.at("outside_sandbox").as_bool());
  EXPECT_EQ(five.at("exit_code").as_int64(), 0);
  EXPECT_NE(std::string(five.at("stdout").as_string()).find("Ascend 910C"), std::string::npos);

  EXPECT_EQ(Reply(r, 6)->at("error").at("code").as_int64(), -32004);
  EXPECT_EQ(Reply(r, 7)->at("error").at("code").as_int64(), -32602);
  EXPECT_EQ(Reply(r, 8)->at("result").at("stdout").as_string(), "0\n") << "no chips asked, none given";
  for (int64_t id : {9, 10}) {
    const boost::json::value& refused = *Reply(r, id);
    EXPECT_EQ(refused.at("error").at("code").as_int64(), -32602) << boost::json::serialize(refused);
    EXPECT_NE(std::string(refused.at("error").at("message").as_string()).find("only sandbox.run supports"),
              std::string::npos);
  }
}

// A lone run with chips over stdio runs on the reader thread too
// (rpc/transports.h, StdioTransport): its sandbox's wait watches stdin as a
// pooled run's does, so a line sent meanwhile is read and answered first.
TEST_F(NpuTest, WhileALoneRunWithChipsRunsTheNextLineIsStillRead) {
  FakeHost host;
  TempDir dir;
  const std::string config = dir.Join("config.json");
  ASSERT_TRUE(WriteFile(config, absl::StrCat(R"({"npu": {"root": ")", host.root(), R"("},
    "profiles": {"shell": {"pool": {"min_idle": 0}}}})")));
  ProcessRun run;
  std::vector<boost::json::value> r = Serve(
      config,
      {R"({"jsonrpc":"2.0","id":1,"method":"sandbox.run","params":{"profile":"shell","npu":"6","argv":["sleep","1"]}})",
       R"({"jsonrpc":"2.0","id":2,"method":"health"})"},
      &run);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_EQ(r.size(), 2u) << run.out;
  EXPECT_EQ(r[0].at("id").as_int64(), 2) << run.out;
  EXPECT_EQ(r[1].at("id").as_int64(), 1) << run.out;
  EXPECT_EQ(r[1].at("result").at("reason").as_string(), "exited") << boost::json::serialize(r[1]);
}

// The cgroup v2 device program, on a v2 group of this host's unified
// hierarchy (which on a hybrid host exists beside the v1 devices
// controller: both apply).
TEST_F(NpuTest, DeviceProgramOnAV2GroupAllowsOnlyItsRules) {
  std::string unified, own;
  {
    std::ifstream mountinfo("/proc/self/mountinfo");
    std::string line;
    while (std::getline(mountinfo, line)) {
      if (line.find(" - cgroup2 ") == std::string::npos) continue;
      std::istringstream ss(line);
      std::string id, parent, devno, root, mount_point;
      ss >> id >> parent >> devno >> root >> mount_point;
      if (root == "/") unified = mount_point;
    }
    std::ifstream self("/proc/self/cgroup");
    while (std::getline(self, line)) {
      if (absl::StartsWith(line, "0::")) own = line.substr(3);
    }
  }
  if (unified.empty()) GTEST_SKIP() << "no cgroup2 mount here";
  const std::string group = absl::StrCat(unified, own == "/" ? "" : own, "/cubicle-devtest-", ::getpid());
  if (::mkdir(group.c_str(), 0755) != 0) GTEST_SKIP() << "cannot make a v2 group: " << std::strerror(errno);
  struct RemoveGroup {
    std::string path;
    ~RemoveGroup() { ::rmdir(path.c_str()); }
  } remove{group};
  int dir = ::open(group.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir, 0);
  absl::Status attached = cgroups::AttachDeviceProgram(dir, {{'c', 1, 3, "rw"}, {'c', 1, 5, "r"}});
  ::close(dir);
  ASSERT_TRUE(attached.ok()) << attached;
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    char c;
    (void)!::read(ready[0], &c, 1);
    int code = 0;
    if (::open("/dev/null", O_RDWR) < 0) code |= 1;                        // c 1:3 rw: allowed
    if (::open("/dev/zero", O_RDONLY) < 0) code |= 2;                      // c 1:5 r: allowed
    if (::open("/dev/zero", O_WRONLY) >= 0 || errno != EPERM) code |= 4;   // c 1:5 w: refused
    if (::open("/dev/urandom", O_RDONLY) >= 0 || errno != EPERM) code |= 8;  // no rule: refused
    ::_exit(code);
  }
  ::close(ready[0]);
  bool placed = WriteFile(group + "/cgroup.procs", std::to_string(pid));
  (void)!::write(ready[1], "g", 1);
  ::close(ready[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(placed) << "could not move the child into " << group;
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bits: 1 null refused, 2 zero-read refused, 4 zero-write allowed, 8 urandom allowed";
}

TEST_F(NpuTest, StaleDeviceGroupsOfADeadOwnerAreSwept) {
  // A live group of ours, to learn where device groups go.
  absl::StatusOr<std::unique_ptr<cgroups::DeviceCgroup>> live = cgroups::DeviceCgroup::Create({{'c', 1, 3, "rw"}});
  if (absl::IsUnimplemented(live.status()) || absl::IsFailedPrecondition(live.status())) GTEST_SKIP() << live.status();
  ASSERT_TRUE(live.ok()) << live.status();
  ASSERT_FALSE((*live)->v2());
  const std::string parent = (*live)->path().substr(0, (*live)->path().rfind('/'));
  // A stale group: named for a pid that is surely gone (a child of ours,
  // reaped). A `cubicle cleanup` of a test running beside this one may
  // sweep it first; then it is gone but not in our sweep's list, and the
  // round is tried again with a new group (at most 5 rounds).
  bool swept_by_us = false;
  for (int round = 0; round < 5 && !swept_by_us; ++round) {
    pid_t dead = ::fork();
    ASSERT_GE(dead, 0);
    if (dead == 0) ::_exit(0);
    ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
    const std::string stale = absl::StrCat("cubicle-", dead, "-dev-7");
    ASSERT_EQ(::mkdir(absl::StrCat(parent, "/", stale).c_str(), 0755), 0);
    absl::StatusOr<cgroups::DeviceSweep> sweep = cgroups::SweepStaleDeviceGroups();
    ASSERT_TRUE(sweep.ok()) << sweep.status();
    // (Other stale groups, of a cubicle killed earlier, may go too.)
    swept_by_us = std::find(sweep->removed.begin(), sweep->removed.end(), stale) != sweep->removed.end();
    EXPECT_TRUE(sweep->failed.empty()) << absl::StrJoin(sweep->failed, "; ");
    // Not ours and still there: the sweep missed it.
    ASSERT_NE(::access(absl::StrCat(parent, "/", stale).c_str(), F_OK), 0) << stale << " was not swept";
  }
  EXPECT_TRUE(swept_by_us) << "5 rounds, each group swept by someone else first";
  EXPECT_EQ(::access((*live)->path().c_str(), F_OK), 0) << "a live owner's group stays";
  EXPECT_TRUE((*live)->Remove().ok());
}

TEST(DeviceProgram, OneBlockPerRuleAndADefaultDeny) {
  // 6 loads/shifts, 7 or 8 instructions per rule (8 with a minor), 2 for
  // the final deny.
  EXPECT_EQ(cgroups::AssembleDeviceProgram({}).raw.size(), 8u);
  EXPECT_EQ(cgroups::AssembleDeviceProgram({{'c', 1, 3, "rw"}}).raw.size(), 16u);
  EXPECT_EQ(cgroups::AssembleDeviceProgram({{'c', 136, -1, "rwm"}, {'b', 8, 0, "r"}}).raw.size(), 23u);
}

// ---- The device cgroup on its own ----------------------------------------

TEST_F(NpuTest, DeviceCgroupAllowsOnlyItsRules) {
  absl::StatusOr<std::unique_ptr<cgroups::DeviceCgroup>> cg =
      cgroups::DeviceCgroup::Create({{'c', 1, 3, "rw"}});  // /dev/null only
  if (absl::IsUnimplemented(cg.status()) || absl::IsFailedPrecondition(cg.status())) {
    GTEST_SKIP() << cg.status();
  }
  ASSERT_TRUE(cg.ok()) << cg.status();
  const std::string path = (*cg)->path();
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    char c;
    (void)!::read(ready[0], &c, 1);
    int null_fd = ::open("/dev/null", O_RDWR);
    int zero_fd = ::open("/dev/zero", O_RDONLY);
    ::_exit(null_fd >= 0 && zero_fd < 0 && errno == EPERM ? 0 : 1);
  }
  ::close(ready[0]);
  absl::Status attached = (*cg)->Attach(pid);
  (void)!::write(ready[1], "g", 1);
  ::close(ready[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(attached.ok()) << attached;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "/dev/null must open, /dev/zero must be EPERM";
  EXPECT_TRUE((*cg)->Remove().ok());
  EXPECT_NE(::access(path.c_str(), F_OK), 0) << path << " was left behind";
}

}  // namespace
}  // namespace cubicle::npu
