// "sessions" in the daemon's config (docs/config.md): where the state
// directory is — the durable records, the workspaces and their archives —
// and the bounds every session.create and files.* request stays within.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include <boost/json/value.hpp>

namespace cubicle::rpc {

struct SessionsConfig {
  // Empty: no sessions and no durable records (executions are kept in
  // memory only). `cubicle serve --state-dir` sets it too.
  std::string state_dir;
  std::string default_profile;  // empty: the config's first profile
  size_t max_sessions = 16;
  absl::Duration idle_ttl = absl::Minutes(30);      // a request that names none
  absl::Duration max_idle_ttl = absl::Hours(24);    // the most a request may ask for
  absl::Duration max_lifetime = absl::Hours(24);    // from creation, whatever the activity
  uint64_t workspace_bytes = 512ull << 20;          // a request that names none
  uint64_t max_workspace_bytes = 10ull << 30;       // the most a request may ask for
  // The host owner of every workspace's files. Unset (-1): the sandbox
  // user's host ids, so the workspace is attached without an idmap.
  uid_t workspace_uid = static_cast<uid_t>(-1);
  gid_t workspace_gid = static_cast<gid_t>(-1);
  // session.exec's capture budget per stream when the request names none.
  uint64_t output_bytes = 32 << 10;
  // Archives on reap and destroy; a workspace holding more is not
  // archived (logged).
  bool archive = true;
  uint64_t archive_max_bytes = 200ull << 20;
  // What files.put/get may move and what an execution's outputs may hold.
  uint64_t max_file_bytes = 20'000'000;
  size_t max_output_files = 20;
  uint64_t max_output_bytes = 50'000'000;
  // Finished executions answer exec.status this long.
  absl::Duration keep_executions = absl::Hours(24);

  bool enabled() const { return !state_dir.empty(); }
  bool operator==(const SessionsConfig&) const = default;
};

// Reads the "sessions" object into `out`; errors name the JSON path
// ("sessions.max_sessions: ...").
absl::Status ParseSessionsConfig(const boost::json::value& v, SessionsConfig* out);

}  // namespace cubicle::rpc
