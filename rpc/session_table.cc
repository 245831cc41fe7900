#include "rpc/session_table.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "sessions/ids.h"
#include "sessions/paths.h"

namespace cubicle::rpc {
namespace {

int64_t Ms(absl::Time t) { return absl::ToUnixMillis(t); }
absl::Time FromMs(int64_t ms) { return absl::FromUnixMillis(ms); }

constexpr absl::Duration kPersistEvery = absl::Seconds(10);

// Where uploads land and where outputs are collected from (docs/protocol.md).
constexpr const char* kConventionalDirs[] = {"uploads", "outputs"};

}  // namespace

SessionTable::SessionTable(const SessionsConfig& config, sessions::WorkspaceStore store,
                           std::unique_ptr<sessions::ArchiveStore> archive, sessions::Records* records,
                           uid_t owner_uid, gid_t owner_gid, std::function<void(const std::string&)> log)
    : config_(config),
      store_(std::move(store)),
      archive_(std::move(archive)),
      records_(records),
      owner_uid_(owner_uid),
      owner_gid_(owner_gid),
      log_(std::move(log)) {}

sessions::SessionRecord SessionTable::RecordOf(const SessionInfo& info) const {
  sessions::SessionRecord r;
  r.key = info.key;
  r.profile = info.profile;
  r.created_ms = Ms(info.created);
  r.last_used_ms = Ms(info.last_used);
  r.idle_ttl_ms = absl::ToInt64Milliseconds(info.idle_ttl);
  r.expires_ms = Ms(info.expires);
  r.state = "live";
  r.workspace = info.workspace;
  r.options = absl::StrCat("{\"workspace_bytes\":", info.workspace_bytes, "}");  // for people reading the db
  return r;
}

SessionInfo SessionTable::InfoOf(const sessions::SessionRecord& r) const {
  SessionInfo info;
  info.key = r.key;
  info.profile = r.profile;
  info.created = FromMs(r.created_ms);
  info.last_used = FromMs(r.last_used_ms);
  info.idle_ttl = absl::Milliseconds(r.idle_ttl_ms);
  info.expires = FromMs(r.expires_ms);
  info.workspace_bytes = config_.workspace_bytes;  // until its tmpfs says otherwise
  return info;
}

void SessionTable::Persist(const SessionInfo& info) {
  if (records_ == nullptr) return;
  if (absl::Status s = records_->PutSession(RecordOf(info)); !s.ok()) {
    log_(absl::StrCat("session ", info.key, ": recording it: ", s.message()));
  }
}

absl::Status SessionTable::MakeConventionalDirs(int root) const {
  for (const char* name : kConventionalDirs) {
    if (::mkdirat(root, name, 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, absl::StrCat("mkdir(workspace/", name, ")"));
    }
    if (::geteuid() == 0 && ::fchownat(root, name, owner_uid_, owner_gid_, AT_SYMLINK_NOFOLLOW) != 0) {
      return ErrnoStatus(errno, absl::StrCat("chown(workspace/", name, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Time SessionTable::Deadline(const SessionInfo& info) const {
  return std::min(info.last_used + info.idle_ttl, info.expires);
}

// A restore that fails leaves whatever it extracted: the workspace is
// emptied again so the session starts clean, and the failure is reported,
// never fatal (issue 29: archive or restore failures never fail work).
void SessionTable::Restore(const std::string& key, int root, SessionInfo* info) {
  if (archive_ == nullptr) return;
  sessions::ExtractOptions options;
  options.uid = owner_uid_;
  options.gid = owner_gid_;
  options.max_bytes = info->workspace_bytes;
  absl::StatusOr<std::optional<sessions::ArchiveStats>> restored = archive_->Restore(key, root, options);
  {
    std::lock_guard<std::mutex> lock(counts_mu_);
    if (!restored.ok()) {
      ++counts_.restore_failures;
    } else if (restored->has_value()) {
      ++counts_.restored;
      counts_.restored_bytes += (*restored)->archive_bytes;
    }
  }
  if (restored.ok()) {
    info->restored = restored->has_value();
    return;
  }
  info->restore_error = std::string(restored.status().message());
  log_(absl::StrCat("session ", key, ": restoring its archive: ", info->restore_error));
  UniqueFd dir(::openat(root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir) (void)sessions::RemoveTreeContents(dir.get(), info->workspace);
}

absl::StatusOr<std::pair<SessionInfo, bool>> SessionTable::Create(const SessionRequest& request) {
  const std::string key = request.key.empty() ? sessions::NewId('s') : request.key;
  CUBICLE_RETURN_IF_ERROR(sessions::ValidateSessionKey(key));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = sessions_.find(key); it != sessions_.end()) {
      if (it->second.closing) {
        return absl::UnavailableError(absl::StrCat("session ", key, " is being archived; retry once it is"));
      }
      it->second.info.last_used = absl::Now();
      return std::make_pair(it->second.info, false);
    }
    if (sessions_.size() + creating_ >= config_.max_sessions) {
      return absl::ResourceExhaustedError(absl::StrCat(config_.max_sessions,
                                                       " sessions live already (sessions.max_sessions): destroy one "
                                                       "or wait until one is reaped"));
    }
    ++creating_;
  }
  SessionInfo info;
  info.key = key;
  info.profile = request.profile;
  info.created = info.last_used = absl::Now();
  info.idle_ttl = request.idle_ttl;
  info.expires = info.created + config_.max_lifetime;
  info.workspace_bytes = request.workspace_bytes;
  absl::StatusOr<sessions::Workspace> ws =
      store_.Attach(key, {.size_bytes = request.workspace_bytes, .uid = owner_uid_, .gid = owner_gid_});
  absl::Status made = ws.ok() ? absl::OkStatus() : ws.status();
  if (made.ok()) {
    info.workspace = ws->path;
    info.capped = ws->capped;
    Restore(key, ws->root.get(), &info);
    made = MakeConventionalDirs(ws->root.get());
  }
  std::lock_guard<std::mutex> lock(mu_);
  --creating_;
  if (!made.ok()) {
    (void)store_.Remove(key);
    return made;
  }
  Persist(info);
  sessions_[key] = Session{info, std::move(ws->root), false, info.created};
  return std::make_pair(info, true);
}

absl::StatusOr<SessionInfo> SessionTable::Get(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(key);
  if (it == sessions_.end()) return absl::NotFoundError(absl::StrCat("no session with key '", key, "'"));
  return it->second.info;
}

std::vector<SessionInfo> SessionTable::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SessionInfo> out;
  for (const auto& [key, s] : sessions_) out.push_back(s.info);
  return out;
}

size_t SessionTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.size();
}

SessionCounts SessionTable::Counts() const {
  SessionCounts out;
  {
    std::lock_guard<std::mutex> lock(counts_mu_);
    out = counts_;
  }
  out.live = size();
  return out;
}

absl::Status SessionTable::ArchiveAndRemove(const std::string& key, int root, bool archive) {
  if (archive && archive_ != nullptr && config_.archive) {
    sessions::ArchiveOptions options;
    options.max_workspace_bytes = config_.archive_max_bytes;
    absl::StatusOr<sessions::ArchiveStats> saved = archive_->Save(key, root, options);
    {
      std::lock_guard<std::mutex> lock(counts_mu_);
      ++(saved.ok() ? counts_.archived : counts_.archive_failures);
      if (saved.ok()) counts_.archived_bytes += saved->archive_bytes;
    }
    if (!saved.ok()) log_(absl::StrCat("session ", key, ": not archived: ", saved.status().message()));
  } else if (archive_ != nullptr) {
    (void)archive_->Remove(key);  // destroyed for good: an old archive must not come back
  }
  absl::Status removed = store_.Remove(key);
  if (records_ != nullptr) {
    if (absl::Status s = records_->RemoveSession(key); !s.ok() && !absl::IsNotFound(s)) {
      log_(absl::StrCat("session ", key, ": removing its record: ", s.message()));
    }
  }
  return removed;
}

absl::Status SessionTable::Destroy(const std::string& key, bool archive) {
  UniqueFd root;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(key);
    if (it == sessions_.end()) return absl::NotFoundError(absl::StrCat("no session with key '", key, "'"));
    if (it->second.closing) return absl::UnavailableError(absl::StrCat("session ", key, " is being archived"));
    if (it->second.info.executing > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("session ", key, " has ", it->second.info.executing, " execution(s) admitted; cancel them first"));
    }
    it->second.closing = true;
    root = std::move(it->second.root);
  }
  absl::Status done = ArchiveAndRemove(key, root.get(), archive);
  std::lock_guard<std::mutex> lock(mu_);
  sessions_.erase(key);
  return done;
}

absl::StatusOr<SessionInfo> SessionTable::BeginExecution(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(key);
  if (it == sessions_.end()) return absl::NotFoundError(absl::StrCat("no session with key '", key, "'"));
  if (it->second.closing) return absl::UnavailableError(absl::StrCat("session ", key, " is being archived"));
  ++it->second.info.executing;
  it->second.info.last_used = absl::Now();
  return it->second.info;
}

void SessionTable::EndExecution(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(key);
  if (it == sessions_.end()) return;
  if (it->second.info.executing > 0) --it->second.info.executing;
  it->second.info.last_used = absl::Now();
  // Its last use is recorded at most every kPersistEvery: a restart may
  // resume its idle clock that much early, and a busy session does not pay
  // a database write per execution for it.
  if (it->second.info.last_used - it->second.persisted >= kPersistEvery) {
    Persist(it->second.info);
    it->second.persisted = it->second.info.last_used;
  }
}

void SessionTable::Touch(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(key);
  if (it != sessions_.end()) it->second.info.last_used = absl::Now();
}

absl::StatusOr<int> SessionTable::Root(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(key);
  if (it == sessions_.end()) return absl::NotFoundError(absl::StrCat("no session with key '", key, "'"));
  if (it->second.closing) return absl::UnavailableError(absl::StrCat("session ", key, " is being archived"));
  return it->second.root.get();
}

std::vector<std::string> SessionTable::Expired(absl::Time now) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [key, s] : sessions_) {
    if (!s.closing && s.info.executing == 0 && Deadline(s.info) <= now) out.push_back(key);
  }
  return out;
}

absl::Time SessionTable::NextDeadline() const {
  std::lock_guard<std::mutex> lock(mu_);
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [key, s] : sessions_) {
    if (!s.closing && s.info.executing == 0) next = std::min(next, Deadline(s.info));
  }
  return next;
}

absl::Status SessionTable::Recover() {
  std::vector<sessions::SessionRecord> records;
  if (records_ != nullptr) {
    CUBICLE_ASSIGN_OR_RETURN(records, records_->ListSessions());
  }
  std::map<std::string, bool> known;
  for (const sessions::SessionRecord& r : records) {
    known[r.key] = true;
    SessionInfo info = InfoOf(r);
    absl::StatusOr<sessions::Workspace> ws =
        store_.Attach(r.key, {.size_bytes = info.workspace_bytes, .uid = owner_uid_, .gid = owner_gid_});
    if (!ws.ok()) {
      log_(absl::StrCat("session ", r.key, ": its workspace cannot be attached again: ", ws.status().message()));
      continue;
    }
    info.workspace = ws->path;
    info.capped = ws->capped;
    // The cap it was made with is its tmpfs's size.
    if (absl::StatusOr<sessions::WorkspaceUsage> usage = store_.Usage(r.key); usage.ok() && usage->size_bytes > 0) {
      info.workspace_bytes = usage->size_bytes;
    }
    (void)MakeConventionalDirs(ws->root.get());
    std::lock_guard<std::mutex> lock(mu_);
    sessions_[r.key] = Session{info, std::move(ws->root), false, info.last_used};
  }
  absl::StatusOr<std::vector<std::string>> on_disk = store_.Keys();
  if (!on_disk.ok()) return on_disk.status();
  for (const std::string& key : *on_disk) {
    if (known.count(key)) continue;
    log_(absl::StrCat("workspace ", key, " has no session record (a crash before it was recorded): archived and "
                      "removed"));
    absl::StatusOr<sessions::Workspace> ws = store_.Attach(key, {.size_bytes = config_.workspace_bytes});
    (void)ArchiveAndRemove(key, ws.ok() ? ws->root.get() : -1, ws.ok());
  }
  return absl::OkStatus();
}

}  // namespace cubicle::rpc
