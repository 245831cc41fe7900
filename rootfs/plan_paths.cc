#include "rootfs/plan_paths.h"

#include <limits.h>
#include <stdlib.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace cubicle::rootfs {
namespace {

// What follows `base` in `path` when `path` is `base` or below it: "" or
// "/rest"; nullopt otherwise.
std::optional<std::string> Below(absl::string_view path, absl::string_view base) {
  if (path == base) return std::string();
  if (base == "/") return std::string(path);
  if (absl::StartsWith(path, base) && path.size() > base.size() && path[base.size()] == '/') {
    return std::string(path.substr(base.size()));
  }
  return std::nullopt;
}

// Whether an operation at its dest replaces what is below it.
bool Covers(const MountOp& op) {
  switch (op.kind) {
    case MountKind::kDir:
    case MountKind::kChmod:
    case MountKind::kRemountRo:
      return false;
    default:
      return true;
  }
}

// A bind source with the rest of a path below its dest.
std::string Join(const std::string& source, const std::string& rest) {
  if (source == "/") return rest.empty() ? "/" : rest;
  return source + rest;
}

}  // namespace

std::optional<std::string> HostPathOf(const MountPlan& plan, absl::string_view path) {
  for (auto op = plan.rbegin(); op != plan.rend(); ++op) {
    if (!Covers(*op)) continue;
    std::optional<std::string> rest = Below(path, op->dest);
    if (!rest.has_value()) continue;
    if (op->kind != MountKind::kBind) return std::nullopt;
    return Join(op->source, *rest);
  }
  return std::nullopt;
}

std::optional<std::string> SandboxPathOf(const MountPlan& plan, absl::string_view host_real) {
  for (auto op = plan.rbegin(); op != plan.rend(); ++op) {
    if (op->kind != MountKind::kBind) continue;
    char real[PATH_MAX];
    if (::realpath(op->source.c_str(), real) == nullptr) continue;  // an optional bind's missing source
    std::optional<std::string> rest = Below(host_real, real);
    if (!rest.has_value()) continue;
    const std::string candidate = op->dest + *rest;
    // Shown there only if nothing later covers it with something else.
    std::optional<std::string> shown = HostPathOf(plan, candidate);
    if (shown.has_value() && *shown == Join(op->source, *rest)) return candidate;
  }
  return std::nullopt;
}

}  // namespace cubicle::rootfs
