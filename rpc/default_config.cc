#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rpc/config.h"

namespace cubicle::rpc {
namespace {

// The built-in configuration (docs/config.md describes each key), in three
// parts: this, the r profile where the host has R, kTail. Plain JSON,
// without comments, so that any tool can read what `DefaultConfigJson`
// hands out.
constexpr char kHead[] = R"json({
  "socket": {"mode": "0600"},
  "concurrency": {"max_concurrent": 8, "max_queue": 64},
  "ceilings": {"memory": "2G", "pids": 4096, "timeout_ms": 600000, "output_bytes": "16M"},
  "profiles": {
    "shell": {
      "seccomp": "no-network",
      "limits": {"memory": "256M", "pids": 64},
      "timeout_ms": 30000,
      "max_timeout_ms": 300000,
      "output_bytes": "1M",
      "pool": {"min_idle": 2, "max_idle": 4, "max_total": 16}
    },
    "python": {
      "seccomp": "no-network",
      "limits": {"memory": "512M", "pids": 128},
      "timeout_ms": 30000,
      "max_timeout_ms": 300000,
      "output_bytes": "1M",
      "pool": {"min_idle": 2, "max_idle": 4, "max_total": 16},
      "interpreter": {"argv": ["python3", "-I"], "preload": ["json"]}
    })json";

// Only where the host has R (Debian's r-base-core): R_HOME is /usr/lib/R,
// whose etc/ links into /etc/R, which the default mounts leave out. The
// bind is optional so that the text printed here (the packages'
// config.json) still parses on a host without R. R is kept warm
// (bench/README.md, "R: warm or cold"), with jsonlite's namespace loaded
// where the host has it (Debian's r-cran-jsonlite): skills use it to speak
// JSON-RPC, and loading it is a tenth of a second each cold run.
constexpr char kRProfileHead[] = R"json(,
    "r": {
      "seccomp": "no-network",
      "binds": [{"source": "/etc/R", "dest": "/etc/R", "optional": true}],
      "limits": {"memory": "512M", "pids": 128},
      "timeout_ms": 30000,
      "max_timeout_ms": 300000,
      "output_bytes": "1M",
      "pool": {"min_idle": 1, "max_idle": 2, "max_total": 16},
      "interpreter": {"argv": ["Rscript", "--vanilla"], "preload": [)json";
constexpr char kRProfileTail[] = R"json(]}
    })json";

constexpr char kTail[] = R"json(
  }
}
)json";

constexpr char kRscript[] = "/usr/bin/Rscript";

// Looked at once: the text handed out and the notes must agree for the
// daemon's life (a reload reads the same built-in text).
bool HostHasR() {
  static const bool has_r = ::access(kRscript, X_OK) == 0 && ::access("/etc/R", R_OK) == 0;
  return has_r;
}

bool HostHasJsonlite() {
  static const bool has = ::access("/usr/lib/R/site-library/jsonlite/DESCRIPTION", R_OK) == 0;
  return has;
}

}  // namespace

const char* DefaultConfigJson() {
  static const std::string* const text = new std::string(absl::StrCat(
      kHead, HostHasR() ? absl::StrCat(kRProfileHead, HostHasJsonlite() ? "\"jsonlite\"" : "", kRProfileTail) : "",
      kTail));
  return text->c_str();
}

std::vector<std::string> DefaultConfigNotes() {
  if (HostHasR()) return {};
  return {"no R on this host: the r profile is left out (apt-get install r-base-core)"};
}

absl::StatusOr<DaemonConfig> DefaultConfig() {
  absl::StatusOr<DaemonConfig> config = ParseConfig(DefaultConfigJson());
  if (!config.ok()) {
    // The text is tested to parse; what can still fail is the host (no /usr
    // to mirror, say). A caller reports it and does not start.
    return absl::Status(config.status().code(), absl::StrCat("the built-in configuration does not hold on this host: ",
                                                             config.status().message()));
  }
  return config;
}

}  // namespace cubicle::rpc
