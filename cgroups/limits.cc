#include "cgroups/limits.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace cubicle::cgroups {
namespace {

std::string Device(const IoLimit& io) { return absl::StrCat(io.major, ":", io.minor); }

// Collects every problem so that one error tells the whole story.
class Problems {
 public:
  void Add(std::string problem) { problems_.push_back(std::move(problem)); }
  absl::Status ToStatus() const {
    if (problems_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrJoin(problems_, "; "));
  }

 private:
  std::vector<std::string> problems_;
};

void CheckMemory(absl::string_view field, const std::optional<uint64_t>& value,
                 const std::optional<uint64_t>& ceiling, Problems* p) {
  if (value.has_value()) {
    if (*value < kMinMemoryBytes) {
      p->Add(absl::StrCat(field, ": ", DescribeBytes(*value), " is below the minimum ",
                          DescribeBytes(kMinMemoryBytes)));
    } else if (*value > kMaxMemoryBytes) {
      p->Add(absl::StrCat(field, ": ", DescribeBytes(*value), " is above the maximum ",
                          DescribeBytes(kMaxMemoryBytes), " (leave it unset for no limit)"));
    }
  }
  if (ceiling.has_value()) {
    if (!value.has_value()) {
      p->Add(absl::StrCat(field, ": unlimited exceeds the ceiling ", DescribeBytes(*ceiling)));
    } else if (*value > *ceiling) {
      p->Add(absl::StrCat(field, ": ", DescribeBytes(*value), " exceeds the ceiling ",
                          DescribeBytes(*ceiling)));
    }
  }
}

template <typename T>
void CheckCeiling(absl::string_view field, const std::optional<T>& value,
                  const std::optional<T>& ceiling, Problems* p) {
  if (!ceiling.has_value()) return;
  if (!value.has_value()) {
    p->Add(absl::StrCat(field, ": unlimited exceeds the ceiling ", *ceiling));
  } else if (*value > *ceiling) {
    p->Add(absl::StrCat(field, ": ", *value, " exceeds the ceiling ", *ceiling));
  }
}

void CheckCpu(const Limits& l, const Limits* ceiling, unsigned host_cpus, Problems* p) {
  bool period_ok = l.cpu_period_us >= kMinCpuPeriodUs && l.cpu_period_us <= kMaxCpuPeriodUs;
  if (!period_ok) {
    p->Add(absl::StrCat("cpu_period_us: ", l.cpu_period_us, " is outside [", kMinCpuPeriodUs, ", ",
                        kMaxCpuPeriodUs, "]"));
  }
  if (l.cpus.has_value()) {
    double cpus = *l.cpus;
    if (!std::isfinite(cpus) || cpus <= 0) {
      p->Add(absl::StrCat("cpus: ", cpus, " must be a positive number"));
    } else if (cpus > host_cpus) {
      p->Add(absl::StrCat("cpus: ", cpus, " exceeds the ", host_cpus, " CPUs of this host"));
    } else if (period_ok && CpuQuotaUs(l) < kMinCpuQuotaUs) {
      p->Add(absl::StrCat("cpus: ", cpus, " over a period of ", l.cpu_period_us,
                          " us is a quota of ", CpuQuotaUs(l), " us, below the kernel's minimum ",
                          kMinCpuQuotaUs, " us"));
    }
  }
  if (l.cpu_weight.has_value() &&
      (*l.cpu_weight < kMinCpuWeight || *l.cpu_weight > kMaxCpuWeight)) {
    p->Add(absl::StrCat("cpu_weight: ", *l.cpu_weight, " is outside [", kMinCpuWeight, ", ",
                        kMaxCpuWeight, "]"));
  }
  if (ceiling != nullptr) {
    CheckCeiling("cpus", l.cpus, ceiling->cpus, p);
    CheckCeiling("cpu_weight", l.cpu_weight, ceiling->cpu_weight, p);
  }
}

void CheckIoField(const std::string& device, absl::string_view field,
                  const std::optional<uint64_t>& value, const std::optional<uint64_t>& ceiling,
                  Problems* p) {
  if (value.has_value() && *value == 0) {
    p->Add(absl::StrCat("io ", device, " ", field,
                        ": 0 would block all IO (leave it unset for no limit)"));
  }
  if (ceiling.has_value()) {
    if (!value.has_value()) {
      p->Add(absl::StrCat("io ", device, " ", field, ": unlimited exceeds the ceiling ", *ceiling));
    } else if (*value > *ceiling) {
      p->Add(
          absl::StrCat("io ", device, " ", field, ": ", *value, " exceeds the ceiling ", *ceiling));
    }
  }
}

void CheckIo(const Limits& l, const Limits* ceiling, Problems* p) {
  static const IoLimit kNoCeiling;
  for (size_t i = 0; i < l.io.size(); ++i) {
    const IoLimit& io = l.io[i];
    std::string device = Device(io);
    for (size_t j = 0; j < i; ++j) {
      if (l.io[j].major == io.major && l.io[j].minor == io.minor) {
        p->Add(absl::StrCat("io ", device, ": the device is listed twice"));
      }
    }
    if (!io.read_bps && !io.write_bps && !io.read_iops && !io.write_iops) {
      p->Add(absl::StrCat("io ", device, ": no rate is set"));
    }
    const IoLimit* cap = &kNoCeiling;
    if (ceiling != nullptr) {
      for (const IoLimit& c : ceiling->io) {
        if (c.major == io.major && c.minor == io.minor) cap = &c;
      }
    }
    CheckIoField(device, "rbps", io.read_bps, cap->read_bps, p);
    CheckIoField(device, "wbps", io.write_bps, cap->write_bps, p);
    CheckIoField(device, "riops", io.read_iops, cap->read_iops, p);
    CheckIoField(device, "wiops", io.write_iops, cap->write_iops, p);
  }
  if (ceiling == nullptr) return;
  for (const IoLimit& c : ceiling->io) {
    bool listed = std::any_of(l.io.begin(), l.io.end(), [&](const IoLimit& io) {
      return io.major == c.major && io.minor == c.minor;
    });
    if (!listed) {
      p->Add(absl::StrCat("io ", Device(c), ": unlimited exceeds the ceiling of that device"));
    }
  }
}

unsigned OnlineCpus() {
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<unsigned>(n) : 1;
}

template <typename T>
void Fill(std::optional<T>* value, const std::optional<T>& ceiling) {
  if (!value->has_value()) *value = ceiling;
}

}  // namespace

bool Limits::empty() const {
  return !memory_max && !memory_high && !pids_max && !cpus && !cpu_weight && io.empty();
}

absl::Status ValidateLimits(const Limits& limits, const Limits* ceiling) {
  return ValidateLimits(limits, ceiling, OnlineCpus());
}

absl::Status ValidateLimits(const Limits& l, const Limits* ceiling, unsigned host_cpus) {
  static const Limits kNone;
  const Limits& cap = ceiling != nullptr ? *ceiling : kNone;
  Problems p;
  CheckMemory("memory_max", l.memory_max, cap.memory_max, &p);
  CheckMemory("memory_high", l.memory_high, cap.memory_high, &p);
  if (l.memory_high && l.memory_max && *l.memory_high > *l.memory_max) {
    p.Add(absl::StrCat("memory_high: ", DescribeBytes(*l.memory_high), " is above memory_max ",
                       DescribeBytes(*l.memory_max)));
  }
  if (l.pids_max.has_value() && (*l.pids_max == 0 || *l.pids_max > kMaxPids)) {
    p.Add(absl::StrCat("pids_max: ", *l.pids_max, " is outside [1, ", kMaxPids, "]"));
  }
  CheckCeiling("pids_max", l.pids_max, cap.pids_max, &p);
  CheckCpu(l, ceiling, host_cpus, &p);
  CheckIo(l, ceiling, &p);
  return p.ToStatus();
}

void FillFromCeiling(Limits* limits, const Limits& ceiling) {
  Fill(&limits->memory_max, ceiling.memory_max);
  if (!limits->memory_high && ceiling.memory_high) {
    // A high mark above the hard limit would mean nothing.
    limits->memory_high = std::min(*ceiling.memory_high, limits->memory_max.value_or(UINT64_MAX));
  }
  Fill(&limits->pids_max, ceiling.pids_max);
  Fill(&limits->cpus, ceiling.cpus);
  Fill(&limits->cpu_weight, ceiling.cpu_weight);
  for (const IoLimit& c : ceiling.io) {
    auto it = std::find_if(limits->io.begin(), limits->io.end(), [&](const IoLimit& io) {
      return io.major == c.major && io.minor == c.minor;
    });
    if (it == limits->io.end()) {
      limits->io.push_back(c);
      continue;
    }
    Fill(&it->read_bps, c.read_bps);
    Fill(&it->write_bps, c.write_bps);
    Fill(&it->read_iops, c.read_iops);
    Fill(&it->write_iops, c.write_iops);
  }
}

uint64_t CpuQuotaUs(const Limits& limits) {
  return static_cast<uint64_t>(
      std::llround(*limits.cpus * static_cast<double>(limits.cpu_period_us)));
}

uint64_t CpuWeightToShares(uint32_t weight) {
  return std::clamp<uint64_t>(uint64_t{weight} * 1024 / 100, 2, 262144);
}

std::string DescribeBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " bytes");
  double v = static_cast<double>(bytes);
  int unit = -1;
  while (v >= 1024 && unit < 5) {
    v /= 1024;
    ++unit;
  }
  // Whole numbers read best without decimals: "256 MiB", "1.5 GiB".
  std::string readable = v == std::floor(v) ? absl::StrFormat("%.0f %s", v, kUnits[unit])
                                            : absl::StrFormat("%.1f %s", v, kUnits[unit]);
  return absl::StrCat(bytes, " (", readable, ")");
}

}  // namespace cubicle::cgroups
