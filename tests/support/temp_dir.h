// A temporary directory for a test, named so the suite's leak checks know
// it ("itest-" under $TMPDIR or /tmp), removed with all it holds. Unit and
// integration tests alike (library cubicle_test_probes).
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace cubicle::test_support {

inline constexpr char kTempPrefix[] = "itest-";

// A fresh directory under $TMPDIR (or /tmp) named "itest-XXXXXX", removed
// recursively (without following symlinks) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Join(absl::string_view name) const;

 private:
  std::string path_;
};

}  // namespace cubicle::test_support
