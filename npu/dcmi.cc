#include "npu/dcmi.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"

namespace cubicle::npu {
namespace {

// From the DCMI API reference (dcmi_interface_api.h).
constexpr int kDcmiMaxCards = 64;
constexpr int kDcmiChipNameLen = 32;
struct dcmi_chip_info {
  unsigned char chip_type[kDcmiChipNameLen];
  unsigned char chip_name[kDcmiChipNameLen];
  unsigned char chip_ver[kDcmiChipNameLen];
  unsigned int aicore_cnt;
};
constexpr int kDcmiUtilizationAicore = 2;

using InitFn = int (*)();
using CardListFn = int (*)(int* card_num, int* card_list, int list_len);
using DeviceIdInCardFn = int (*)(int card_id, int* device_id_max, int* mcu_id, int* cpu_id);
using LogicIdFn = int (*)(int* logic_id, int card_id, int device_id);
using ChipInfoFn = int (*)(int card_id, int device_id, dcmi_chip_info* info);
using HealthFn = int (*)(int card_id, int device_id, unsigned int* health);
using UtilizationFn = int (*)(int card_id, int device_id, int input_type, unsigned int* rate);

struct DlClose {
  void operator()(void* h) const { ::dlclose(h); }
};

std::string HealthName(unsigned int h) {
  switch (h) {
    case 0: return "OK";
    case 1: return "Warning";
    case 2: return "Alarm";
    case 3: return "Critical";
  }
  return absl::StrCat("unknown (", h, ")");
}

std::string FixedString(const unsigned char* s, size_t n) {
  const char* c = reinterpret_cast<const char*>(s);
  return std::string(c, strnlen(c, n));
}

}  // namespace

absl::StatusOr<std::vector<Chip>> ReadChipsWithDcmi(const std::string& library_path) {
  ::dlerror();
  std::unique_ptr<void, DlClose> lib(::dlopen(library_path.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (lib == nullptr) {
    const char* why = ::dlerror();
    return absl::UnavailableError(absl::StrCat("dlopen(", library_path, "): ", why != nullptr ? why : "failed"));
  }
  auto sym = [&](const char* name) { return ::dlsym(lib.get(), name); };
  auto init = reinterpret_cast<InitFn>(sym("dcmi_init"));
  auto card_list = reinterpret_cast<CardListFn>(sym("dcmi_get_card_num_list"));
  auto ids_in_card = reinterpret_cast<DeviceIdInCardFn>(sym("dcmi_get_device_id_in_card"));
  auto logic_id = reinterpret_cast<LogicIdFn>(sym("dcmi_get_device_logic_id"));
  auto chip_info = reinterpret_cast<ChipInfoFn>(sym("dcmi_get_device_chip_info"));
  auto health = reinterpret_cast<HealthFn>(sym("dcmi_get_device_health"));
  auto utilization = reinterpret_cast<UtilizationFn>(sym("dcmi_get_device_utilization_rate"));  // optional
  for (auto [fn, name] : {std::pair<void*, const char*>{reinterpret_cast<void*>(init), "dcmi_init"},
                          {reinterpret_cast<void*>(card_list), "dcmi_get_card_num_list"},
                          {reinterpret_cast<void*>(ids_in_card), "dcmi_get_device_id_in_card"},
                          {reinterpret_cast<void*>(logic_id), "dcmi_get_device_logic_id"},
                          {reinterpret_cast<void*>(chip_info), "dcmi_get_device_chip_info"}}) {
    if (fn == nullptr) return absl::UnavailableError(absl::StrCat(library_path, ": no symbol ", name));
  }
  if (int rc = init(); rc != 0) return absl::UnavailableError(absl::StrCat(library_path, ": dcmi_init: ret ", rc));
  int cards[kDcmiMaxCards];
  int card_count = 0;
  if (int rc = card_list(&card_count, cards, kDcmiMaxCards); rc != 0) {
    return absl::UnavailableError(absl::StrCat(library_path, ": dcmi_get_card_num_list: ret ", rc));
  }
  card_count = std::clamp(card_count, 0, kDcmiMaxCards);
  std::map<int, Chip> chips;
  for (int i = 0; i < card_count; ++i) {
    int device_max = 0, mcu = -1, cpu = -1;
    if (ids_in_card(cards[i], &device_max, &mcu, &cpu) != 0) continue;
    // Device ids 0..device_max-1 are the card's compute dies; the Mcu and
    // CPU have their own ids and no logic id.
    for (int dev = 0; dev < std::min(device_max, 16); ++dev) {
      int logic = -1;
      if (logic_id(&logic, cards[i], dev) != 0 || logic < 0) continue;
      dcmi_chip_info info;
      std::memset(&info, 0, sizeof(info));
      if (chip_info(cards[i], dev, &info) != 0) continue;
      Chip c;
      c.vendor = Vendor::kAscend;
      c.logic_id = logic;
      c.card_id = cards[i];
      c.chip_id = dev;
      std::string type = FixedString(info.chip_type, sizeof(info.chip_type));
      std::string name = FixedString(info.chip_name, sizeof(info.chip_name));
      c.name = absl::StrCat(type.empty() ? "Ascend" : type, " ", name);
      unsigned int h = 0;
      c.health = health != nullptr && health(cards[i], dev, &h) == 0 ? HealthName(h) : "unknown";
      unsigned int rate = 0;
      if (utilization != nullptr && utilization(cards[i], dev, kDcmiUtilizationAicore, &rate) == 0) {
        c.aicore_percent = std::min(rate, 100u);
      }
      chips.emplace(logic, std::move(c));
    }
  }
  std::vector<Chip> out;
  for (auto& [id, c] : chips) out.push_back(std::move(c));
  return out;
}

}  // namespace cubicle::npu
