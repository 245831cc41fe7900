// The daemon's sessions (DESIGN §6a, docs/protocol.md "Sessions"): a
// workspace per client-chosen key that outlives executions, reaped after
// an idle TTL or its maximum lifetime into an archive, restored on the
// next session.create with the same key, and recorded durably so that a
// restarted daemon finds its live sessions again. What runs in a session
// is the daemon's business (rpc/session_methods.cc); this table keeps the
// sessions, their workspaces and their records consistent. Thread-safe;
// archive and restore I/O run outside its lock.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rpc/session_config.h"
#include "sessions/archive.h"
#include "sessions/records.h"
#include "sessions/workspace_store.h"

namespace cubicle::rpc {

struct SessionInfo {
  std::string key;
  std::string profile;
  absl::Time created, last_used;
  absl::Duration idle_ttl;
  absl::Time expires;  // the maximum lifetime's end
  std::string workspace;  // its host path
  bool capped = false;
  uint64_t workspace_bytes = 0;
  size_t executing = 0;  // executions admitted and not ended
  // session.create: whether the workspace came back from an archive, and
  // why not where a restore failed (the session then starts empty).
  bool restored = false;
  std::string restore_error;
};

// What /metrics says of the sessions (rpc/metrics.h): how many live, and
// the archives written and restored since start, with their compressed
// bytes. A create that finds no archive restores nothing and counts none.
struct SessionCounts {
  size_t live = 0;
  uint64_t archived = 0, archive_failures = 0, archived_bytes = 0;
  uint64_t restored = 0, restore_failures = 0, restored_bytes = 0;
};

struct SessionRequest {
  std::string key;  // empty: one is generated
  std::string profile;
  absl::Duration idle_ttl;
  uint64_t workspace_bytes = 0;
};

class SessionTable {
 public:
  // `owner`: the host ids the workspaces belong to. `archive` and
  // `records` may be null (no archives; records kept by nobody).
  SessionTable(const SessionsConfig& config, sessions::WorkspaceStore store,
               std::unique_ptr<sessions::ArchiveStore> archive, sessions::Records* records, uid_t owner_uid,
               gid_t owner_gid, std::function<void(const std::string&)> log);

  // After a restart: every session the records call live is attached
  // again (its tmpfs found where it was, its TTL resumed), and a workspace
  // directory no record names (a crash between mount and record) is
  // archived and removed. Errors about one session are logged, not fatal.
  absl::Status Recover();

  // The session of `request.key`: created (restored from its archive when
  // there is one), or the live one as it is ({info, false}).
  // ResourceExhausted past max_sessions.
  absl::StatusOr<std::pair<SessionInfo, bool>> Create(const SessionRequest& request);
  absl::StatusOr<SessionInfo> Get(const std::string& key) const;
  std::vector<SessionInfo> List() const;
  // Archives (unless `archive` is false) and removes it. FailedPrecondition
  // while an execution runs in it.
  absl::Status Destroy(const std::string& key, bool archive);

  // An execution is admitted into the session (it is not reaped while any
  // is), and when it ends (the idle TTL counts from then).
  absl::StatusOr<SessionInfo> BeginExecution(const std::string& key);
  void EndExecution(const std::string& key);
  // The workspace's root (an O_PATH fd the table owns), for files.*; the
  // fd stays valid while the session lives.
  absl::StatusOr<int> Root(const std::string& key) const;
  void Touch(const std::string& key);

  // Sessions past their idle TTL or lifetime and not executing, at `now`.
  std::vector<std::string> Expired(absl::Time now) const;
  // The earliest moment a session may expire (InfiniteFuture: none live).
  absl::Time NextDeadline() const;
  size_t size() const;
  SessionCounts Counts() const;

 private:
  struct Session {
    SessionInfo info;
    UniqueFd root;
    bool closing = false;  // being archived and removed: admits nothing
    absl::Time persisted;  // the last_used its record holds
  };
  sessions::SessionRecord RecordOf(const SessionInfo& info) const;
  SessionInfo InfoOf(const sessions::SessionRecord& record) const;
  void Persist(const SessionInfo& info);
  void Restore(const std::string& key, int root, SessionInfo* info);
  absl::Status ArchiveAndRemove(const std::string& key, int root, bool archive);
  absl::Status MakeConventionalDirs(int root) const;
  absl::Time Deadline(const SessionInfo& info) const;

  const SessionsConfig config_;
  const sessions::WorkspaceStore store_;
  const std::unique_ptr<sessions::ArchiveStore> archive_;
  sessions::Records* const records_;
  const uid_t owner_uid_;
  const gid_t owner_gid_;
  const std::function<void(const std::string&)> log_;
  mutable std::mutex mu_;
  std::map<std::string, Session> sessions_;
  size_t creating_ = 0;  // admitted by Create, not yet in sessions_
  // Archive and restore I/O runs outside mu_: counted apart.
  mutable std::mutex counts_mu_;
  SessionCounts counts_;
};

}  // namespace cubicle::rpc
