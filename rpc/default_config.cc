#include <string>

#include "absl/strings/str_cat.h"
#include "rpc/config.h"

namespace cubicle::rpc {
namespace {

// The built-in configuration (docs/config.md describes each key). Plain
// JSON, without comments, so that any tool can read what `DefaultConfigJson`
// hands out.
constexpr char kDefaultConfig[] = R"json({
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
    }
  }
}
)json";

}  // namespace

const char* DefaultConfigJson() { return kDefaultConfig; }

absl::StatusOr<DaemonConfig> DefaultConfig() {
  absl::StatusOr<DaemonConfig> config = ParseConfig(kDefaultConfig);
  if (!config.ok()) {
    // The text is tested to parse; what can still fail is the host (no /usr
    // to mirror, say). A caller reports it and does not start.
    return absl::Status(config.status().code(), absl::StrCat("the built-in configuration does not hold on this host: ",
                                                             config.status().message()));
  }
  return config;
}

}  // namespace cubicle::rpc
