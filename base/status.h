// Errors across module boundaries are absl::Status values whose message names
// the failing step and the errno: "pivot_root(/newroot): EINVAL: Invalid argument".
#pragma once

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cubicle {

// "EINVAL" for EINVAL; "errno 4242" for numbers without a symbolic name.
absl::string_view ErrnoName(int err);

// Maps errno to the closest absl code and formats "step: ENAME: strerror".
absl::Status ErrnoStatus(int err, absl::string_view step);

}  // namespace cubicle

#define CUBICLE_RETURN_IF_ERROR(expr)            \
  do {                                           \
    if (absl::Status _st = (expr); !_st.ok()) {  \
      return _st;                                \
    }                                            \
  } while (0)

#define CUBICLE_CONCAT_INNER_(a, b) a##b
#define CUBICLE_CONCAT_(a, b) CUBICLE_CONCAT_INNER_(a, b)
#define CUBICLE_ASSIGN_OR_RETURN(lhs, expr) \
  CUBICLE_ASSIGN_OR_RETURN_IMPL_(CUBICLE_CONCAT_(_statusor_, __LINE__), lhs, expr)
#define CUBICLE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return std::move(tmp).status();       \
  lhs = std::move(tmp).value()
