// A latency histogram with fixed, Prometheus-style cumulative buckets, for
// the pools' operator metrics (refill and hand-off latency). Plain value;
// the owner locks.
#pragma once

#include <array>
#include <cstdint>

#include "absl/time/time.h"

namespace cubicle::runtime {

class LatencyHistogram {
 public:
  // Upper bounds in seconds: 50 µs .. 10 s, then +Inf.
  static constexpr std::array<double, 17> kBounds = {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                                     0.005,   0.01,   0.025,   0.05,   0.1,   0.25,
                                                     0.5,     1,      2.5,     5,      10};

  void Record(absl::Duration d) {
    const double s = absl::ToDoubleSeconds(d);
    size_t i = 0;
    while (i < kBounds.size() && s > kBounds[i]) ++i;
    ++counts_[i];
    ++count_;
    sum_seconds_ += s;
  }

  uint64_t count() const { return count_; }
  double sum_seconds() const { return sum_seconds_; }
  // Observations <= kBounds[i] (i == kBounds.size(): all of them).
  uint64_t Cumulative(size_t i) const {
    uint64_t n = 0;
    for (size_t j = 0; j <= i && j < counts_.size(); ++j) n += counts_[j];
    return n;
  }

 private:
  std::array<uint64_t, kBounds.size() + 1> counts_{};
  uint64_t count_ = 0;
  double sum_seconds_ = 0;
};

}  // namespace cubicle::runtime
