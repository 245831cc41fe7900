// The skill sessions a daemon holds open (docs/skills.md, "Skill
// sessions"): each a skill process (rpc/skill_process.h) that answers a
// conversation's calls in turn, closed by its client, by its idle timeout
// or at its lifetime's end — by a reaper thread of the table's own, which
// sleeps until the next deadline.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/json/value.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cgroups/limits.h"
#include "rpc/served_profiles.h"
#include "rpc/skill_process.h"
#include "rpc/skill_stats.h"
#include "skills/skill.h"

namespace cubicle::rpc {

struct SkillSession {
  std::string key;  // "k" and a ULID
  std::shared_ptr<SkillProcess> process;
  // Its profile and pool, held while it lives (a reload does not take
  // them away), and its skill when it was opened by name.
  std::shared_ptr<const ServedProfile> served;
  std::shared_ptr<const skills::Skill> skill;
  boost::json::value argv;  // a session of a skill by argv: its command (the audit's hash)
  std::string client;       // who opened it (the audit's)
  std::string request_id;   // the request that opened it
  std::string environment;  // "sci@3" when it runs in one
  absl::Duration call_timeout;  // a call that names none
  // Limits from history (rpc/skill_stats.h): the limits its process runs
  // with, the memory estimate among them when it had one at open, and
  // whether each call's timeout is estimated when the call names none.
  cgroups::Limits limits;
  std::optional<MemoryEstimate> auto_memory;
  bool timeout_auto = false;
  absl::Duration idle_timeout;
  absl::Time created;
  absl::Time end_of_life;  // created + skills.sessions.max_lifetime_ms
  // Under the table's lock.
  absl::Time last_used;
  bool busy = false;
  uint64_t calls = 0;

  absl::Time Expires() const { return std::min(last_used + idle_timeout, end_of_life); }
};

class SkillSessionTable {
 public:
  // `closed` is told of each session the reaper closed, after its close.
  SkillSessionTable(size_t max_sessions, std::function<void(const SkillSession&, const char* why)> closed);
  ~SkillSessionTable();  // CloseAll()

  // ResourceExhausted when max_sessions are open.
  absl::Status Add(std::shared_ptr<SkillSession> session);
  std::shared_ptr<SkillSession> Find(const std::string& key);
  // Marks it busy for a call; false when another call holds it.
  bool Begin(SkillSession& session);
  // Its call has ended: idle from now.
  void End(SkillSession& session);
  // Takes it out of the table (null when not there); the caller closes it.
  std::shared_ptr<SkillSession> Remove(const std::string& key);
  std::vector<std::shared_ptr<SkillSession>> List();
  size_t size();
  size_t max_sessions() const { return max_sessions_; }
  // Closes every session and stops the reaper; nothing is added after.
  void CloseAll();

 private:
  void Reap();

  const size_t max_sessions_;
  std::function<void(const SkillSession&, const char*)> closed_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::shared_ptr<SkillSession>> sessions_;
  bool stopping_ = false;
  std::mutex join_mu_;
  std::thread reaper_;
};

}  // namespace cubicle::rpc
