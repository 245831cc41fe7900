// A fake libdcmi.so for cubicle's tests: the few DCMI calls cubicle makes,
// answering from the same driver state the fake npu-smi reads —
// "fake-chips" in the directory this library was loaded from, one chip per
// line: "logic card chip name health aicore hbm_used hbm_total".
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct FakeChip {
  int logic, card, chip;
  std::string name, health;
  unsigned aicore;
};

std::vector<FakeChip> Load() {
  Dl_info info;
  std::vector<FakeChip> chips;
  if (dladdr(reinterpret_cast<void*>(&Load), &info) == 0 || info.dli_fname == nullptr) return chips;
  std::string path = info.dli_fname;
  path = path.substr(0, path.rfind('/')) + "/fake-chips";
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    FakeChip c;
    if (ss >> c.logic >> c.card >> c.chip >> c.name >> c.health >> c.aicore) chips.push_back(c);
  }
  return chips;
}

// Read afresh on every call: tests rewrite the state between calls.
bool Find(int card, int device, FakeChip* out) {
  for (const FakeChip& c : Load()) {
    if (c.card == card && c.chip == device) {
      *out = c;
      return true;
    }
  }
  return false;
}

}  // namespace

extern "C" {

struct dcmi_chip_info {
  unsigned char chip_type[32];
  unsigned char chip_name[32];
  unsigned char chip_ver[32];
  unsigned int aicore_cnt;
};

int dcmi_init(void) { return 0; }

int dcmi_get_card_num_list(int* card_num, int* card_list, int list_len) {
  std::vector<FakeChip> chips = Load();
  int n = 0;
  for (const FakeChip& c : chips) {
    bool seen = false;
    for (int i = 0; i < n; ++i) seen |= card_list[i] == c.card;
    if (!seen && n < list_len) card_list[n++] = c.card;
  }
  *card_num = n;
  return 0;
}

int dcmi_get_device_id_in_card(int card_id, int* device_id_max, int* mcu_id, int* cpu_id) {
  int max = 0;
  for (int d = 0; d < 8; ++d) {
    FakeChip c;
    if (Find(card_id, d, &c)) max = d + 1;
  }
  *device_id_max = max;
  *mcu_id = max;  // the Mcu has its own id and no logic id
  *cpu_id = -1;
  return max > 0 ? 0 : -8001;
}

int dcmi_get_device_logic_id(int* logic_id, int card_id, int device_id) {
  FakeChip chip;
  if (!Find(card_id, device_id, &chip)) return -8001;
  const FakeChip* c = &chip;
  *logic_id = c->logic;
  return 0;
}

int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info* info) {
  FakeChip chip;
  if (!Find(card_id, device_id, &chip)) return -8001;
  const FakeChip* c = &chip;
  std::memset(info, 0, sizeof(*info));
  std::snprintf(reinterpret_cast<char*>(info->chip_type), sizeof(info->chip_type), "Ascend");
  std::snprintf(reinterpret_cast<char*>(info->chip_name), sizeof(info->chip_name), "%s", c->name.c_str());
  std::snprintf(reinterpret_cast<char*>(info->chip_ver), sizeof(info->chip_ver), "V1");
  info->aicore_cnt = 20;
  return 0;
}

int dcmi_get_device_health(int card_id, int device_id, unsigned int* health) {
  FakeChip chip;
  if (!Find(card_id, device_id, &chip)) return -8001;
  const FakeChip* c = &chip;
  *health = c->health == "OK" ? 0 : c->health == "Warning" ? 1 : c->health == "Alarm" ? 2 : 3;
  return 0;
}

int dcmi_get_device_utilization_rate(int card_id, int device_id, int input_type, unsigned int* rate) {
  FakeChip chip;
  if (!Find(card_id, device_id, &chip) || input_type != 2) return -8001;
  const FakeChip* c = &chip;
  *rate = c->aicore;
  return 0;
}

}  // extern "C"
