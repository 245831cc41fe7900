#include "cgroups/layout_cache.h"

#include <sys/stat.h>

#include <cerrno>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status.h"

namespace cubicle::cgroups {
namespace {

std::string Field(absl::string_view s) { return absl::CEscape(s); }

bool AbsoluteClean(absl::string_view path) {
  if (path.empty() || path[0] != '/') return false;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == "." || part == "..") return false;
  }
  return true;
}

absl::Status Bad(absl::string_view line, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("layout cache: ", why, " in '", absl::CHexEscape(line), "'"));
}

}  // namespace

std::string SerializeLayout(const Layout& layout) {
  std::string out = absl::StrCat("version\t", static_cast<int>(layout.version), "\n", "unified\t", layout.unified,
                                 "\n", "swap_accounting\t", layout.v1_swap_accounting ? 1 : 0, "\n", "source\t",
                                 Field(layout.source), "\n", "placement\t", absl::StrJoin(layout.placement, "\t"),
                                 "\n");
  for (const Hierarchy& h : layout.hierarchies) {
    std::vector<std::string> controllers;
    for (const std::string& c : h.controllers) controllers.push_back(Field(c));
    absl::StrAppend(&out, "hierarchy\t", h.version, "\t", Field(h.mount_point), "\t", Field(h.own), "\t",
                    Field(h.own_dir), "\t", Field(h.parent), "\t", absl::StrJoin(controllers, ","), "\n");
  }
  for (const std::string& note : layout.notes) absl::StrAppend(&out, "note\t", Field(note), "\n");
  return out;
}

absl::StatusOr<Layout> ParseLayout(absl::string_view text) {
  Layout layout;
  bool have_version = false;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
    std::vector<std::string> u(f.size());
    for (size_t i = 1; i < f.size(); ++i) {
      if (!absl::CUnescape(f[i], &u[i])) return Bad(line, "bad escape");
    }
    int n = 0;
    if (f[0] == "version" && f.size() == 2 && absl::SimpleAtoi(f[1], &n) && n >= 0 && n <= 3) {
      layout.version = static_cast<Version>(n);
      have_version = true;
    } else if (f[0] == "unified" && f.size() == 2 && absl::SimpleAtoi(f[1], &layout.unified)) {
    } else if (f[0] == "swap_accounting" && f.size() == 2 && (f[1] == "0" || f[1] == "1")) {
      layout.v1_swap_accounting = f[1] == "1";
    } else if (f[0] == "source" && f.size() == 2) {
      layout.source = u[1];
    } else if (f[0] == "placement" && f.size() == 1 + kControllerCount) {
      for (int i = 0; i < kControllerCount; ++i) {
        if (!absl::SimpleAtoi(f[1 + i], &layout.placement[i])) return Bad(line, "bad placement");
      }
    } else if (f[0] == "hierarchy" && f.size() == 7) {
      Hierarchy h;
      if (!absl::SimpleAtoi(f[1], &h.version) || (h.version != 1 && h.version != 2)) {
        return Bad(line, "bad hierarchy version");
      }
      h.mount_point = u[2];
      h.own = u[3];
      h.own_dir = u[4];
      h.parent = u[5];
      if (!AbsoluteClean(h.mount_point) || !AbsoluteClean(h.own) || !AbsoluteClean(h.parent) ||
          (!h.own_dir.empty() && !AbsoluteClean(h.own_dir))) {
        return Bad(line, "a path that is not absolute and clean");
      }
      for (absl::string_view c : absl::StrSplit(f[6], ',', absl::SkipEmpty())) {
        std::string name;
        if (!absl::CUnescape(c, &name)) return Bad(line, "bad escape");
        h.controllers.push_back(std::move(name));
      }
      layout.hierarchies.push_back(std::move(h));
    } else if (f[0] == "note" && f.size() == 2) {
      layout.notes.push_back(u[1]);
    } else {
      return Bad(line, "unknown record");
    }
  }
  if (!have_version) return absl::InvalidArgumentError("layout cache: no version record");
  const int count = static_cast<int>(layout.hierarchies.size());
  if (layout.unified < -1 || layout.unified >= count ||
      (layout.unified >= 0 && layout.hierarchies[layout.unified].version != 2)) {
    return absl::InvalidArgumentError("layout cache: the unified index is out of range");
  }
  for (int p : layout.placement) {
    if (p < -1 || p >= count) return absl::InvalidArgumentError("layout cache: a placement is out of range");
  }
  return layout;
}

absl::Status RevalidateLayout(const Layout& layout) {
  for (const Hierarchy& h : layout.hierarchies) {
    absl::Status fs = CheckHierarchyFilesystem(h);
    if (!fs.ok()) return absl::FailedPreconditionError(fs.message());
    struct stat st;
    if (::stat(h.parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat("sandbox parent ", h.parent, " is gone"));
    }
  }
  return absl::OkStatus();
}

}  // namespace cubicle::cgroups
