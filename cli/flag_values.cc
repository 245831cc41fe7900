#include "cli/flag_values.h"

#include "base/units.h"

#include <sys/resource.h>

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cubicle::cli {
namespace {

absl::Status Bad(absl::string_view flag, absl::string_view value, absl::string_view expected) {
  return absl::InvalidArgumentError(absl::StrCat(flag, " '", value, "': expected ", expected));
}


absl::StatusOr<rlim_t> ParseRlimValue(absl::string_view flag, absl::string_view all, absl::string_view v) {
  if (v == "unlimited" || v == "infinity") return RLIM_INFINITY;
  uint64_t n;
  if (!absl::SimpleAtoi(v, &n)) return Bad(flag, all, "NAME=SOFT[:HARD] with numbers or 'unlimited'");
  return static_cast<rlim_t>(n);
}

}  // namespace

absl::StatusOr<uint64_t> ParseSize(absl::string_view flag, absl::string_view value) {
  return cubicle::ParseSize(flag, value);  // one parser for flags and the daemon's config
}

absl::StatusOr<absl::Duration> ParseSeconds(absl::string_view flag, absl::string_view value) {
  double s;
  if (!absl::SimpleAtod(value, &s) || !std::isfinite(s) || s <= 0 || s > 1e9) {
    return Bad(flag, value, "a positive number of seconds, like 5 or 0.25");
  }
  return absl::Seconds(s);
}

absl::StatusOr<uint32_t> ParseId(absl::string_view flag, absl::string_view value) {
  uint32_t n;
  if (!absl::SimpleAtoi(value, &n) || value.front() == '-' || value.front() == '+' ||
      n == UINT32_MAX) {
    return Bad(flag, value, "a numeric id between 0 and 4294967294");
  }
  return n;
}

absl::StatusOr<runtime::RlimitSpec> ParseRlimit(absl::string_view flag, absl::string_view value) {
  size_t eq = value.find('=');
  if (eq == absl::string_view::npos) return Bad(flag, value, "NAME=SOFT[:HARD], e.g. nofile=256");
  absl::string_view name = value.substr(0, eq);
  absl::string_view limits = value.substr(eq + 1);
  runtime::RlimitSpec spec;
  std::optional<int> resource = RlimitByName(name);
  if (!resource.has_value()) {
    return Bad(flag, value, "a known resource (as, core, cpu, data, fsize, nofile, nproc, stack, ...)");
  }
  spec.resource = *resource;
  size_t colon = limits.find(':');
  absl::StatusOr<rlim_t> soft = ParseRlimValue(flag, value, limits.substr(0, colon));
  if (!soft.ok()) return soft.status();
  absl::StatusOr<rlim_t> hard =
      colon == absl::string_view::npos ? soft : ParseRlimValue(flag, value, limits.substr(colon + 1));
  if (!hard.ok()) return hard.status();
  if (*soft > *hard) return Bad(flag, value, "a soft limit no larger than the hard limit");
  spec.soft = *soft;
  spec.hard = *hard;
  return spec;
}

absl::StatusOr<DeviceValue> ParseDeviceValue(absl::string_view flag, absl::string_view value) {
  const char* expected = "MAJOR:MINOR=VALUE, e.g. 8:0=10M";
  size_t colon = value.find(':');
  size_t eq = value.find('=');
  if (colon == absl::string_view::npos || eq == absl::string_view::npos || eq < colon) {
    return Bad(flag, value, expected);
  }
  DeviceValue out;
  if (!absl::SimpleAtoi(value.substr(0, colon), &out.major) ||
      !absl::SimpleAtoi(value.substr(colon + 1, eq - colon - 1), &out.minor)) {
    return Bad(flag, value, expected);
  }
  absl::StatusOr<uint64_t> v = ParseSize(flag, value.substr(eq + 1));
  if (!v.ok() || *v == 0) return Bad(flag, value, expected);
  out.value = *v;
  return out;
}

absl::StatusOr<std::optional<uint64_t>> ParseLimitSize(absl::string_view flag, absl::string_view value) {
  if (value == "unlimited") return std::optional<uint64_t>();
  absl::StatusOr<uint64_t> v = ParseSize(flag, value);
  if (!v.ok()) return Bad(flag, value, "a size like 256M or 1G, or 'unlimited'");
  return std::optional<uint64_t>(*v);
}

absl::StatusOr<std::optional<uint64_t>> ParseLimitCount(absl::string_view flag, absl::string_view value) {
  if (value == "unlimited") return std::optional<uint64_t>();
  uint64_t n;
  if (value.empty() || value.front() == '-' || value.front() == '+' || !absl::SimpleAtoi(value, &n)) {
    return Bad(flag, value, "a positive whole number, or 'unlimited'");
  }
  return std::optional<uint64_t>(n);
}

absl::StatusOr<double> ParseCpus(absl::string_view flag, absl::string_view value) {
  double cpus;
  if (!absl::SimpleAtod(value, &cpus) || !std::isfinite(cpus) || cpus <= 0) {
    return Bad(flag, value, "a positive number of CPUs, like 0.5 or 2");
  }
  return cpus;
}

}  // namespace cubicle::cli
